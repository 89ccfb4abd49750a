"""When each routine was first armed, in the state directory: one small JSON file.

    <root>/schedule/armed.json    {"<routine>": "<ISO instant>", ...}: ours

Read once per boot (and per reload that adds routines) for every routine armed, so that the
boot can account for the slots of a routine that never fired (:func:`trio_routines.gaps.
unfired_gaps`). Written only when a routine is named for the first time: under the exclusive
``flock`` of ``schedule/gaps.lock`` (the gap writers' lock) the file is read again, the new
names added -- an instant already there is never moved -- and the whole written to a temp file
(fsynced) renamed into place, the directory fsynced. Outside ``schedule/claims/``, so an
older reader never sees it. The file is opened as every state file is (safefile.py): a file
that is not ours (a link, a FIFO, too large, not a JSON object) reads as empty with a warning
and is replaced by the next write, and an entry that is not an instant is left out with a
warning; either way those routines count as first armed at that write. Nothing is decided
from it: at worst a slot passed over goes unrecorded.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from ...converter import dumps, loads
from ...errors import StateFault
from ...instants import format_iso, parse_iso, truncate_ms
from ...names import check_name, name_problem
from ..safefile import Refused, describe, fsync, open_dirs, read_file, replace_file
from .gaps import LOCK_SECONDS, locked_schedule

log = logging.getLogger("trio_routines")

#: Some 60 bytes a routine: room for 100,000 routines with long names; anything larger is
#: not ours.
MAX_ARMED_BYTES = 16 * 1024 * 1024
FILE = "armed.json"


def first_armed_sync(root: Path, routines: Sequence[str], at: datetime) -> dict[str, datetime]:
    """When each of ``routines`` was first armed; ``at`` (kept durably) for the new ones."""
    names = [check_name(routine) for routine in routines]
    where = root / "schedule" / FILE
    try:
        try:
            schedule = open_dirs(root, ("schedule",))
        except FileNotFoundError:
            known: dict[str, datetime] = {}
        else:
            try:
                known = _read(schedule, where)
            finally:
                os.close(schedule)
        if all(name in known for name in names):
            return {name: known[name] for name in names}
        return _add(root, names, truncate_ms(at))
    except StateFault:
        raise  # the lock's, which says what and where already
    except OSError as exc:
        raise StateFault(
            f"when the routines were first armed cannot be read or kept in {where}: {describe(exc)}"
        ) from None


def _add(root: Path, names: list[str], at: datetime) -> dict[str, datetime]:
    where = root / "schedule" / FILE
    what = "could not keep when the routines were first armed"
    with locked_schedule(root, "gaps.lock", what, LOCK_SECONDS) as schedule:
        known = _read(schedule, where)  # again: another process may have added some
        new = {name: at for name in names if name not in known}
        if new:
            known.update(new)
            text = dumps({name: format_iso(when) for name, when in known.items()})
            replace_file(schedule, FILE, where.parent, text.encode("utf-8"), ".armed-")
            fsync(schedule, where.parent)
        return {name: known[name] for name in names}


def _read(schedule: int, where: Path) -> dict[str, datetime]:
    try:
        data = read_file(schedule, FILE, where, MAX_ARMED_BYTES)
    except FileNotFoundError:
        return {}
    except Refused as exc:
        log.warning("ignoring %s: %s", where, exc)
        return {}
    try:
        raw = loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raw = None
    if not isinstance(raw, dict):
        log.warning("ignoring %s: not a JSON object of routines and instants", where)
        return {}
    known = {}
    for name, value in raw.items():
        when = parse_iso(value)
        if when is None or name_problem(name) is not None:
            log.warning("ignoring the entry of %r in %s: not a routine and an instant", name, where)
            continue
        known[name] = when
    return known
