"""Each session's recent wake-up turns, in the state directory: one small JSON file.

    <root>/schedule/wake-turns.json    {"<session>": ["<ISO instant>", ...], ...}: ours
    <root>/schedule/wake-turns.lock    ours: serializes its writers across processes

The rate limit's record (:mod:`trio_routines.wakelimits`), shared by every replica on the
directory. Each wake-up turn adds its instant: under the exclusive ``flock`` of the lock file
(taken with a bound) the file is read again, the session's turns kept by
:func:`~trio_routines.wakelimits.kept_turns`, every session's turns older than the window
dropped (so the file holds about an hour of turns, whatever the sessions), and the whole
written to a temp file (fsynced) renamed into place, the directory fsynced. A read takes no
lock: a rename is atomic. Outside ``schedule/claims/``, so an older reader never sees it.

The file is opened as every state file is (safefile.py): one that is not ours (a link, a
FIFO, too large, not a JSON object) reads as no turns with a warning, and is replaced by the
next write; an entry that is not an instant is left out with a warning. Nothing stored is
lost by that: at worst the rate limit counts fewer turns for an hour.
"""

from __future__ import annotations

import logging
import os
from datetime import datetime
from pathlib import Path

from ...converter import dumps, loads
from ...errors import StateFault
from ...instants import format_iso, parse_iso
from ...wakelimits import kept_turns, turns_kept_after
from ..safefile import Refused, describe, fsync, open_dirs, read_file, replace_file
from .gaps import LOCK_SECONDS, locked_schedule

log = logging.getLogger("trio_routines")

FILE = "wake-turns.json"
LOCK = "wake-turns.lock"
#: An hour of turns is some 30 bytes each: anything larger is not ours.
MAX_TURNS_BYTES = 16 * 1024 * 1024


def wake_turns_sync(root: Path, session: str, since: datetime) -> list[datetime]:
    """The recorded wake-up turns of ``session`` after ``since``, oldest first."""
    where = root / "schedule" / FILE
    try:
        try:
            schedule = open_dirs(root, ("schedule",))
        except FileNotFoundError:
            return []
        try:
            turns = _read(schedule, where).get(session, [])
        finally:
            os.close(schedule)
    except OSError as exc:
        raise StateFault(
            f"the recent wake-up turns in {where} are unreadable: {describe(exc)}"
        ) from None
    return [t for t in turns if t > since]


def note_wake_turn_sync(root: Path, session: str, at: datetime) -> None:
    """Add a wake-up turn of ``session`` at ``at``, durably, dropping turns out of the window."""
    where = root / "schedule" / FILE
    try:
        what = "could not record a wake-up turn"
        with locked_schedule(root, LOCK, what, LOCK_SECONDS) as schedule:
            known = _read(schedule, where)
            known[session] = kept_turns(known.get(session, ()), at)
            since = turns_kept_after(at)
            text = dumps(
                {
                    name: [format_iso(t) for t in turns]
                    for name, turns in known.items()
                    if turns and max(turns) > since
                }
            )
            data = text.encode("utf-8", errors="surrogatepass")
            replace_file(schedule, FILE, where.parent, data, ".wake-turns-")
            fsync(schedule, where.parent)
    except StateFault:
        raise  # the lock's, which says what and where already
    except OSError as exc:
        raise StateFault(
            f"a wake-up turn could not be recorded in {where}: {describe(exc)}"
        ) from None


def _read(schedule: int, where: Path) -> dict[str, list[datetime]]:
    try:
        data = read_file(schedule, FILE, where, MAX_TURNS_BYTES)
    except FileNotFoundError:
        return {}
    except Refused as exc:
        log.warning("ignoring %s: %s", where, exc)
        return {}
    try:
        raw = loads(data.decode("utf-8", errors="surrogatepass"))
    except (UnicodeDecodeError, ValueError):
        raw = None
    if not isinstance(raw, dict):
        log.warning("ignoring %s: not a JSON object of sessions and their turns", where)
        return {}
    known: dict[str, list[datetime]] = {}
    for session, values in raw.items():
        instants = [parse_iso(v) for v in values] if isinstance(values, list) else [None]
        if any(t is None for t in instants):
            log.warning("ignoring damaged turns of session %r in %s", session, where)
        kept = sorted(t for t in instants if t is not None)
        if kept:
            known[session] = kept
    return known
