"""The paused read of a state directory: the paused routines, and the resumes written lately
(see :mod:`.pause` for the files, and ``scheduler/fire.py`` for why a fire needs both)."""

from __future__ import annotations

import logging
import os
import time
from datetime import datetime
from pathlib import Path

from ...errors import StateFault
from ...names import name_problem
from ..safefile import describe, open_dirs
from .pausestate import instant, paused_sync

log = logging.getLogger("trio_routines")


#: How recently (seconds of real time) a resume's entry was written for a paused read to read
#: it: a read needs the resumes of two minutes before it (scheduler/state.py, RESUME_LAG);
#: the rest is margin for a write that took its time.
RECENT_WRITES = 300.0
#: The problems with the resumes met by paused reads, each warned about once per process.
_SAID: set[str] = set()


def paused_with_resumes_sync(
    root: Path, since: datetime
) -> tuple[frozenset[str], dict[str, tuple[datetime, datetime | None]]]:
    """The paused routines, then those resumed at ``since`` or later, each with its latest
    resume's instant and when the pause it ended began (None: not known). In that order: a
    resume keeps its instant before it removes the pause, so a pause this read no longer
    finds has its resume found. Only the resumes whose entries were written in the last
    :data:`RECENT_WRITES` seconds are read; the directory's own time says when there are none
    (one ``fstat``, the common case). A ``resumed`` directory or an entry that cannot be read
    (a link planted there, a file) is passed over, warned about once, and an entry holding no
    instant is passed over quietly (the boot's own read warns of it): the paused routines are
    what every fire needs, and a resume none could read holds no slot back (a fire a minute
    late or more asks for its routine's resume, and meets the fault)."""
    names = paused_sync(root)
    return names, _recent_resumes(root, since)


def _recent_resumes(root: Path, since: datetime) -> dict[str, tuple[datetime, datetime | None]]:
    where = root / "schedule" / "resumed"
    recent = []
    try:
        directory = open_dirs(root, ("schedule", "resumed"))
    except FileNotFoundError:
        return {}  # never resumed
    except OSError as exc:
        _say_once(f"the resumes are unreadable in {where}: {describe(exc)}")
        return {}
    try:
        # Written to a temp file, renamed into place: the directory's time moves with each.
        horizon = time.time() - RECENT_WRITES
        if os.fstat(directory).st_mtime >= horizon:
            with os.scandir(directory) as entries:
                for entry in entries:
                    if name_problem(entry.name) is None and _written_since(entry, horizon):
                        recent.append(entry.name)
    except OSError as exc:
        _say_once(f"the resumes are unreadable in {where}: {describe(exc)}")
        return {}
    finally:
        os.close(directory)
    found = {}
    for routine in sorted(recent):  # (in one order, whatever the directory's)
        try:  # an entry holding no instant: None (the boot's own read warns of it)
            when = instant(root, "resumed", routine, "resume")
            began = instant(root, "resumed-pause", routine, "resume") if when else None
        except StateFault as exc:
            _say_once(str(exc))
            continue
        if when is not None and when >= since:
            found[routine] = (when, began)
    return found


def _say_once(problem: str) -> None:
    if problem not in _SAID:
        if len(_SAID) >= 256:  # a bound, not a history
            _SAID.clear()
        _SAID.add(problem)
        log.warning("%s — passed over by the paused reads (no resume of it read)", problem)


def _written_since(entry: os.DirEntry[str], horizon: float) -> bool:
    """Whether ``entry`` was last written at ``horizon`` or later (one gone since: no)."""
    try:
        return entry.stat(follow_symlinks=False).st_mtime >= horizon
    except FileNotFoundError:
        return False
