"""How the command line shows values: aligned columns, short instants, human durations.

Operators read these tables the way they read ``systemctl list-timers``: a header, columns
aligned on the widest cell, the last column left ragged. Every cell that comes from outside
(a routine's name, a session, a failure reason) is made one visible line first.
"""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Collection, Sequence
from datetime import datetime

from ..instants import format_iso
from ..records import Fire, Outcome, Wakeup
from ..routines import Routine, catchup_text
from ..text import name_shown, shown

# One glyph per outcome for the strip of recent fires, and its ASCII stand-in.
_GLYPHS: dict[Outcome | None, tuple[str, str]] = {
    Outcome.COMPLETED: ("✓", "+"),
    Outcome.FAILED: ("✗", "x"),
    Outcome.SKIPPED: ("·", "."),
    Outcome.INTERRUPTED: ("⊘", "!"),
    None: ("?", "?"),  # claimed, never settled, and no live replica runs it (a crash)
}
_RUNNING = ("▸", ">")  # claimed, not settled yet: a live replica runs its turn now
# A skipped claim stores no reason when a turn of its session ran in this or another replica:
# the routine's previous turn, or a `run`, or a wake-up's turn in that session.
BUSY_REASON = "its session was busy: another turn of it was still running"


class Name(str):
    """A cell that names something (a routine, a session, a wake-up, a replica): shown as
    :func:`~trio_routines.text.name_shown` shows it, so that no two names show alike, where
    free text reads each run of whitespace as one space."""

    __slots__ = ()


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Lines of aligned columns: the header, then the rows; cells are shown safely (a
    :class:`Name` as one, any other as free text)."""
    return aligned(
        [list(headers)]
        + [
            [name_shown(cell) if isinstance(cell, Name) else shown(cell) for cell in row]
            for row in rows
        ]
    )


def aligned(cells: Sequence[Sequence[str]]) -> list[str]:
    """Rows of cells already shown, as lines of aligned columns (two spaces apart; the last
    column unpadded, and no line ending in spaces)."""
    widths = [max(columns(row[i]) for row in cells) for i in range(len(cells[0]) - 1)]
    lines = []
    for row in cells:
        padded = [
            cell + " " * (width - columns(cell)) for cell, width in zip(row, widths, strict=False)
        ]
        lines.append("  ".join([*padded, row[-1]]).rstrip())
    return lines


def columns(text: str) -> int:
    """How many columns of a terminal ``text`` takes: two for a wide character (``☕``,
    ``每``), none for a combining mark (the ``\u0301`` of a decomposed ``é``), one for the
    rest; a name in them no longer pushes the columns after it out of line."""
    if text.isascii():
        return len(text)
    return sum(
        0 if unicodedata.combining(char) else 2 if unicodedata.east_asian_width(char) in "WF" else 1
        for char in text
    )


def short_instant(value: datetime) -> str:
    """``2026-11-30T09:00Z``: the UTC instant without the seconds and milliseconds it lacks."""
    full = format_iso(value)  # 2026-11-30T09:00:00.000Z
    if full.endswith(":00.000Z"):
        return full[:16] + "Z"
    if full.endswith(".000Z"):
        return full[:19] + "Z"
    return full


def duration(ms: int | float | None) -> str:
    """``340ms``, ``1.2s``, ``4m05s``, ``2h03m``, ``3d04h``; ``-`` for none; ``-`` before a
    negative one."""
    if ms is None:
        return "-"
    if ms < 0:
        return "-" + duration(-ms)
    # Each unit is chosen by the value as it will be shown: 999.6 ms is 1.0s, not 1000ms.
    if round(ms) < 1000:
        return f"{round(ms)}ms"
    seconds = ms / 1000
    if round(seconds, 1) < 10:
        return f"{seconds:.1f}s"
    if round(seconds) < 60:
        return f"{seconds:.0f}s"
    whole = max(60, int(seconds))
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def outcome_word(fire: Fire, running: Collection[datetime] = ()) -> str:
    """Its outcome; ``running`` when a live replica runs its turn (its slot in ``running``),
    ``unreported`` when it was claimed and never settled, ``unknown`` when settled with an
    outcome this version does not know (:attr:`Fire.unknown_outcome`)."""
    if fire.outcome is not None:
        return fire.outcome.value
    if fire.unknown_outcome is not None:
        return "unknown"
    return "running" if fire.slot in running else "unreported"


def reason(fire: Fire) -> str:
    """Why a fire did not complete: its stored reason, or what its outcome alone says."""
    if fire.error:
        return fire.error
    if fire.outcome is Outcome.SKIPPED:
        return BUSY_REASON
    return ""


def unicode_out() -> bool:
    """Whether stdout takes UTF-8 (else the strip falls back to ASCII)."""
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    return encoding in ("utf8", "utf8sig")


def strip(
    fires: Sequence[Fire],
    width: int = 10,
    *,
    fancy: bool | None = None,
    running: Collection[datetime] = (),
) -> str:
    """The last ``width`` outcomes, oldest left (``-`` when there are none); an open claim
    whose slot is in ``running`` (a live replica runs its turn) is shown as such."""
    use = 0 if (unicode_out() if fancy is None else fancy) else 1
    glyphs = [
        (_RUNNING if fire.outcome is None and fire.slot in running else _GLYPHS[fire.outcome])[use]
        for fire in fires[-width:]
    ]
    return "".join(glyphs) or "-"


def legend(*, fancy: bool | None = None) -> str:
    use = unicode_out() if fancy is None else fancy
    words = ["completed", "failed", "skipped", "interrupted"]
    marks = [_GLYPHS[Outcome(word)][0 if use else 1] for word in words]
    return ", ".join(f"{mark} {word}" for mark, word in zip(marks, words, strict=True))


def left(when: datetime | None, now: datetime) -> str:
    """How long until ``when`` (``-`` for none)."""
    return duration((when - now).total_seconds() * 1000) if when is not None else "-"


def shown_cron(routine: Routine | Wakeup) -> str:
    """The cron as written, and what its ``H`` fields resolve to when it has any."""
    if routine.resolved_cron != routine.cron:
        return f"{routine.cron} (= {routine.resolved_cron})"
    return f"{routine.cron}"


def schedule(routine: Routine | Wakeup) -> str:
    """``on demand``, ``one-shot``, or ``cron 0 9 * * * Europe/Berlin, catchup 2h``."""
    if routine.cron is None:
        return "on demand" if isinstance(routine, Routine) else "one-shot"
    shown_schedule = f"cron {shown_cron(routine)}" + (f" {routine.tz}" if routine.tz else "")
    if isinstance(routine, Routine) and routine.catchup is not None:
        shown_schedule += f", catchup {catchup_text(routine.catchup)}"
    if isinstance(routine, Wakeup) and routine.until is not None:
        shown_schedule += f", until {short_instant(routine.until)}"
    return shown_schedule
