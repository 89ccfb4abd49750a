"""What the pause files say (pause.py writes them): the paused routines, when a pause began,
and a resume's instants. Every file is read as any state file is (safefile.py): one that is
not a short regular file holding an instant holds none.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from pathlib import Path

from ...errors import StateFault
from ...instants import format_iso, parse_iso
from ...names import check_name, name_problem
from ..safefile import Refused, describe, open_dirs, read_file

log = logging.getLogger("trio_routines")


def resumed_at_sync(root: Path, routine: str) -> datetime | None:
    """The instant of ``routine``'s latest resume, or None (never resumed).

    A resume's file that is there but holds no instant (damaged, edited, a link or a FIFO
    planted there) is a resume of unknown instant, taken as made when the entry was last
    written (no later than now), with a warning: read as none, a boot caught up a slot the
    pause had held back, and a replica late to a slot ran one the others had left paused."""
    found = instant(root, "resumed", routine, "resume", unreadable=_UNREADABLE)
    if found is not _UNREADABLE:
        return found
    path = root / "schedule" / "resumed" / check_name(routine)
    # When the entry was last written (its own time: a link is not followed), which is the
    # resume's or after it; not after now (a clock set back since).
    now = datetime.now(UTC)
    try:
        when = min(now, datetime.fromtimestamp(os.lstat(path).st_mtime, UTC))
    except (OSError, OverflowError, ValueError):
        when = now
    log.warning(
        "the resume of %r (%s) holds no instant — taken as made when it was last written "
        "(%s): no slot before it is caught up; resume it again to write a new one",
        routine,
        path,
        format_iso(when),
    )
    return when


def resumed_pause_since_sync(root: Path, routine: str) -> datetime | None:
    """When the pause ``routine``'s latest resume ended began, or None (not known)."""
    return instant(root, "resumed-pause", routine, "resume")


#: What :func:`instant` answers, when asked to, for a file that is there and holds none.
_UNREADABLE = datetime.min.replace(tzinfo=UTC)  # (told apart by identity)


def instant(
    root: Path, folder: str, routine: str, what: str, *, unreadable: datetime | None = None
) -> datetime | None:
    """The instant ``<root>/schedule/<folder>/<routine>`` holds: None when it is not there,
    ``unreadable`` (None unless given) when it holds none (an earlier version's empty pause,
    anything else); ``what`` names it in a fault (``the resume of 'r' is unreadable``)."""
    where = root / "schedule" / folder
    name = check_name(routine)
    try:
        directory = open_dirs(root, ("schedule", folder))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateFault(f"the {what} of {routine!r} is unreadable: {describe(exc)}") from None
    try:
        data = read_file(directory, name, where / name, 64)
    except FileNotFoundError:
        return None
    except Refused:
        return unreadable  # not a file of ours (a link, a FIFO, too long)
    except OSError as exc:
        raise StateFault(f"the {what} of {routine!r} is unreadable: {describe(exc)}") from None
    finally:
        os.close(directory)
    found = parse_iso(data.decode("ascii", errors="replace").strip())
    return unreadable if found is None else found


def paused_since_sync(root: Path, routine: str) -> datetime | None:
    """When ``routine``'s pause began: None when it is not paused, or its file holds no
    instant (an earlier version's empty file, or anything else)."""
    return instant(root, "paused", routine, "pause")


def paused_sync(root: Path) -> frozenset[str]:
    """The names of the paused routines (regular files only)."""
    where = root / "schedule" / "paused"
    try:
        directory = open_dirs(root, ("schedule", "paused"))
    except FileNotFoundError:
        return frozenset()
    except OSError as exc:
        raise StateFault(
            f"the paused routines are unreadable in {where}: {describe(exc)}"
        ) from None
    try:
        paused = []
        with os.scandir(directory) as entries:
            for entry in entries:
                if name_problem(entry.name) is not None:
                    continue  # no routine's
                if entry.is_file(follow_symlinks=False):
                    paused.append(entry.name)
                else:  # planted, or made by hand: it looks like a pause and is none
                    log.warning(
                        "%s is not a regular file — it pauses nothing (a pause is a file "
                        "`pause` makes); remove it",
                        where / entry.name,
                    )
        return frozenset(paused)
    except OSError as exc:
        raise StateFault(
            f"the paused routines are unreadable in {where}: {describe(exc)}"
        ) from None
    finally:
        os.close(directory)
