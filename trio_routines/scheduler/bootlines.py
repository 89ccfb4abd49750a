"""What a boot says of each routine (boot.py): the slots it missed and what becomes of them,
a read that failed and what it leaves, a resume stamped ahead. One line each."""

from __future__ import annotations

from datetime import datetime

from ..errors import StateFault
from ..gaps import ON_TIME, BootPlan
from ..instants import format_iso
from ..routines import catchup_text
from ..text import shell_name
from .gaps import gap_words
from .state import log


def log_missed(
    name: str, plan: BootPlan, due: datetime, now: datetime, catchup: float | None
) -> None:
    """How many slots passed since the newest claim with none claiming them, from when, and
    what becomes of them; nothing for one slot less than :data:`~..gaps.ON_TIME` old, which
    is on time. (Replicas booting together each say so: the catch-up is claimed, and run, by
    one of them.)"""
    missed = plan.missed
    assert missed is not None
    if due == missed.last and due <= now and now - due < ON_TIME:
        # A boot a moment after its slot: on time, as a loop's fire; the slots before it
        # were too old to catch up (the window, ``catchup: none``): gaps, said as recorded.
        return
    if missed.count == 1 and due == missed.first:
        then = "catching it up now"
    elif due <= now:
        within = "" if catchup is None else " within the window"
        then = f"catching up the oldest{within}, {format_iso(due)}, once; the others are gaps"
    else:
        then = f"none caught up (catchup {catchup_text(catchup)}): they are gaps"
    log.info(
        "%s: missed %s, claimed by no scheduler — %s (see `python -m trio_routines history %s`)",
        name,
        gap_words(missed),
        then,
        shell_name(name),
    )


def pause_unread(name: str, fault: StateFault) -> None:
    log.warning(
        "%s: when its pause began is unreadable (its missed slots read as paused): %s", name, fault
    )


def unaccounted(name: str, fault: StateFault) -> None:
    log.error(
        "%s: the slots it passed over since it was first armed are not recorded: %s", name, fault
    )


def not_reconciled(name: str, fault: StateFault) -> None:
    log.error(
        "%s: its newest claim is unreadable, so a fire it left open is not reconciled at this "
        "boot (its fires will report the fault): %s",
        name,
        fault,
    )


def future_resumes(resumes: dict[str, datetime | None], now: datetime) -> None:
    """Warn of each resume stamped after ``now``: made by a clock that ran ahead (the plan
    takes it as made now, gaps.py), as a claim stamped ahead is warned of."""
    for name, resumed in resumes.items():
        if resumed is not None and resumed > now:
            log.warning(
                "%s: its resume is stamped %s, after now (%s) — a clock that ran ahead? "
                "Taken as made now",
                name,
                format_iso(resumed),
                format_iso(now),
            )
