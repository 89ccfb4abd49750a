"""Paused routines in the state directory: one file per paused routine.

    <root>/schedule/paused/<routine>     while the routine is paused: the instant its pause
                                         began (ISO 8601; empty from an earlier version)
    <root>/schedule/resumed/<routine>    the instant of its latest resume (ISO 8601)
    <root>/schedule/resumed-pause/<routine>
                                         the instant the pause that resume ended began,
                                         when it was known (ISO 8601)

Pausing creates the file whole (written unnamed, then linked under the routine's name, which
fails if anything is there; never through a symlink), fsyncs it and the directory before it
returns (a pause that fails is taken back: it pauses nothing), so every scheduler sharing
the directory sees the pause from then on and a crash cannot forget it; resuming unlinks it
and fsyncs the directory (a removal whose flush fails is put back: it resumes nothing). Only
regular files count: anything else found there (a symlink, a directory) pauses nothing. The
directories on the way are opened as every state directory is (safefile.py): a planted link
is refused. The original scheduler does not know these directories and ignores them. A
resume's instant is written to a temp file under an unpredictable name, fsynced and renamed
into place; it is read as any state file is. A resume's file that holds no instant (anything
but a short regular file holding one) is a resume of unknown instant, taken as made when the
entry was last written, with a warning: the safe side (no earlier than the resume), no slot
before it is caught up or run late; any other such file reads as none. The instant its pause
began is kept beside it the same way, first: a boot then records the slots before that pause
as missed, not as paused. A crash between the two leaves an instant after the resume kept,
which a boot takes for unknown. Reading them back is pausestate.py's.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import stat
from datetime import datetime
from pathlib import Path
from time import monotonic

from ...errors import StateFault
from ...instants import format_iso
from ...names import check_name
from .. import landed
from ..abandon import Handoff
from ..safefile import (
    at,
    create_whole,
    describe,
    fsync,
    lock_within,
    open_dirs,
    read_file,
    replace_file,
)
from .pausestate import paused_since_sync

log = logging.getLogger("trio_routines")

#: Seconds a pause waits for another pause of the same directory (each takes microseconds
#: but on a stalled disk, whose own bounds apply): then it fails, to be asked again.
PAUSE_LOCK = 10.0
#: A pause being written where files cannot be made unnamed (safefile.py): an unpredictable
#: name after this, linked under the routine's once written, and removed.
PAUSE_TEMP = ".pause-"


def set_paused_sync(
    root: Path,
    routine: str,
    paused: bool,
    when: datetime | None = None,
    handoff: Handoff | None = None,
    asked: float | None = None,
) -> None:
    """Pause or resume ``routine`` (keeping the resume's instant ``when``); durable. With
    ``handoff``, a change whose caller gave up (../abandon.py) before it began is not begun.
    ``asked``: when it was asked, on :func:`time.monotonic` (by default, now): a resume that
    took long to land since (waiting for a thread, a pause or resume before it, the disk)
    keeps when it landed.

    A resume keeps its instant before it removes the pause: a resume whose instant cannot be
    kept changes nothing (the routine stays paused), since a boot would otherwise read the
    slots passed while it was paused as missed while no scheduler ran, and catch one up. A
    resume of a routine that is not paused changes nothing either: its instant would hold
    back the slots before it on a replica that comes to them late (scheduler/fire.py)."""
    began = monotonic() if asked is None else asked
    if (
        not paused
        and when is not None
        and (
            not _is_paused(root, routine)
            or not _write_resumed(root, routine, when, _pause_began(root, routine), handoff)
        )
    ):
        return
    made = _set_paused(root, routine, paused, handoff, when if paused else None)
    if made and not paused and when is not None:
        _stamp_landed(root, routine, when, monotonic() - began)


def _stamp_landed(root: Path, routine: str, when: datetime, took: float) -> None:
    """A resume that took long to land keeps when it landed (:func:`..landed`): written
    again, after the pause's removal. A write that fails leaves the instant it was asked at,
    with a warning (the resume is made)."""
    stamp = landed(when, took)
    if stamp == when:
        return
    try:
        _keep_instant(root, "resumed", routine, stamp)
    except StateFault as exc:
        log.warning("%s — its instant stays when it was asked (%s)", exc, format_iso(when))


def _pause_began(root: Path, routine: str) -> datetime | None:
    """When ``routine``'s pause began, for its resume to keep: None when that cannot be read
    (the resume is not refused for it; a boot then takes the slots before it for paused)."""
    try:
        return paused_since_sync(root, routine)
    except StateFault:
        return None


def _is_paused(root: Path, routine: str) -> bool:
    """Whether ``routine``'s pause file is there (a regular file, as :func:`paused_sync`
    counts them)."""
    where = root / "schedule" / "paused"
    name = check_name(routine)
    try:
        directory = open_dirs(root, ("schedule", "paused"))
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StateFault(f"could not resume {routine!r} in {where}: {describe(exc)}") from None
    try:
        info = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StateFault(f"could not resume {routine!r} in {where}: {describe(exc)}") from None
    finally:
        os.close(directory)
    return stat.S_ISREG(info.st_mode)


def set_paused_handing(
    handoff: Handoff, root: Path, routine: str, paused: bool, when: datetime | None, asked: float
) -> None:
    """:func:`set_paused_sync` in a thread its caller may leave (``run_abandoning``, which
    hands its answer over once it returns)."""
    set_paused_sync(root, routine, paused, when, handoff, asked)


def _write_resumed(
    root: Path, routine: str, when: datetime, since: datetime | None, handoff: Handoff | None
) -> bool:
    """Keep ``when`` as ``routine``'s latest resume, and ``since`` as when the pause it ends
    began (None: unknown, none kept); durable. False if not begun: its caller gave up
    (``handoff``) before."""
    if handoff is not None and handoff.gave_up:
        return False
    _keep_instant(root, "resumed-pause", routine, since)
    _keep_instant(root, "resumed", routine, when)
    return True


def _keep_instant(root: Path, folder: str, routine: str, when: datetime | None) -> None:
    """Write ``when`` to ``<root>/schedule/<folder>/<routine>`` (None: remove it); durable."""
    where = root / "schedule" / folder
    name = check_name(routine)
    try:
        directory = open_dirs(root, ("schedule", folder), create=when is not None)
    except FileNotFoundError:
        return  # nothing to remove
    except OSError as exc:
        raise StateFault(
            f"could not resume {routine!r}: its instant cannot be kept in {where}: {describe(exc)}"
        ) from None
    try:
        if when is None:
            try:
                at(where / name, lambda: os.unlink(name, dir_fd=directory))
            except FileNotFoundError:
                return
        else:
            replace_file(directory, name, where, format_iso(when).encode(), ".resume-")
        fsync(directory, where)
    except OSError as exc:
        raise StateFault(
            f"could not resume {routine!r}: its instant cannot be kept in {where}: {describe(exc)}"
        ) from None
    finally:
        os.close(directory)


def _set_paused(
    root: Path, routine: str, paused: bool, handoff: Handoff | None, since: datetime | None
) -> bool:
    """Pause (create the file, holding ``since`` when given) or resume (remove it)
    ``routine``; durable when it returns. False if not begun: its caller gave up
    (``handoff``) before. A routine paused already keeps the instant of its first pause."""
    where = root / "schedule" / "paused"
    name = check_name(routine)
    try:
        directory = open_dirs(root, ("schedule", "paused"), create=paused)
    except FileNotFoundError as exc:
        if not paused:
            return True  # resuming where nothing was ever paused
        raise StateFault(f"could not pause {routine!r} in {where}: {describe(exc)}") from None
    except OSError as exc:
        what = "pause" if paused else "resume"
        raise StateFault(f"could not {what} {routine!r} in {where}: {describe(exc)}") from None
    try:
        if handoff is not None and handoff.gave_up:
            return False
        if paused:
            # Under the directory's lock, as every pause: another's "paused already" never
            # rests on a file that this pause may yet take back.
            if not lock_within(directory, PAUSE_LOCK, first=0.0001):
                raise StateFault(
                    f"could not pause {routine!r} in {where}: another process kept its "
                    f"directory locked for {PAUSE_LOCK:g}s (a stalled disk?) — try again"
                )
            try:
                return _pause(routine, directory, name, where, since)
            finally:
                fcntl.flock(directory, fcntl.LOCK_UN)
        return _resume(routine, directory, name, where)
    except StateFault:
        raise  # said whole already
    except OSError as exc:
        what = "pause" if paused else "resume"
        raise StateFault(f"could not {what} {routine!r} in {where}: {describe(exc)}") from None
    finally:
        os.close(directory)


def _resume(routine: str, directory: int, name: str, where: Path) -> bool:
    """Remove the pause file ``name``; durable. A removal whose flush fails puts the pause
    back, so that a resume said to have failed resumes nothing."""
    path = where / name
    try:
        info = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return True  # not paused
    kept: bytes | None = None  # what to put back: a pause's text (a link or a FIFO is none)
    if stat.S_ISREG(info.st_mode):
        try:
            kept = read_file(directory, name, path, 64)
        except FileNotFoundError:
            return True  # resumed meanwhile
        except OSError:  # too long, or unreadable: put back as a pause of unknown start
            kept = b""
    try:
        at(path, lambda: os.unlink(name, dir_fd=directory))
    except FileNotFoundError:
        return True  # resumed meanwhile
    try:
        fsync(directory, where)
    except OSError as exc:
        raise _put_back(routine, directory, name, where, kept, exc) from None
    return True


def _put_back(
    routine: str, directory: int, name: str, where: Path, kept: bytes | None, exc: OSError
) -> StateFault:
    """A pause removed but not durably (its directory's flush failed) is made again, holding
    ``kept``: the fault to raise, saying whether the routine stays paused. Another pause made
    meanwhile stands as it is."""
    fault = f"could not resume {routine!r} in {where}: {describe(exc)}"
    if kept is None:
        return StateFault(fault)  # it paused nothing: there is nothing to put back
    try:
        if not lock_within(directory, PAUSE_LOCK, first=0.0001):
            raise TimeoutError(f"its directory stayed locked for {PAUSE_LOCK:g}s")
        try:
            fd = create_whole(directory, where, name, kept, PAUSE_TEMP)
        except FileExistsError:
            return StateFault(f"{fault} — it stays paused")  # paused again meanwhile
        finally:
            fcntl.flock(directory, fcntl.LOCK_UN)
        with contextlib.suppress(OSError):  # as durable as the disk lets it be
            os.fsync(fd)
            os.fsync(directory)
        os.close(fd)
    except OSError as undo:
        return StateFault(
            f"{fault}; its pause could not be put back ({describe(undo)}): it may run — "
            "look with `list`, and pause it again if it shows resumed"
        )
    return StateFault(f"{fault} — it stays paused")


def _pause(routine: str, directory: int, name: str, where: Path, since: datetime | None) -> bool:
    """Make the pause file ``name`` (its directory locked), durable, holding ``since``."""
    path = where / name
    data = b"" if since is None else format_iso(since).encode()
    try:  # named only once written: a pause that failed leaves no empty file
        fd = create_whole(directory, where, name, data, PAUSE_TEMP)
    except FileExistsError:
        info = os.stat(name, dir_fd=directory, follow_symlinks=False)
        if not stat.S_ISREG(info.st_mode):
            raise StateFault(
                f"cannot pause {routine!r}: {path} exists and is not a regular file"
            ) from None
        return True  # paused already
    try:
        fsync(fd, path)
        fsync(directory, where)
    except OSError as exc:
        raise _undo_pause(routine, directory, name, where, fd, exc) from None
    finally:
        os.close(fd)
    return True


def _undo_pause(
    routine: str, directory: int, name: str, where: Path, fd: int, exc: OSError
) -> StateFault:
    """A pause named but not made durable (``fd``, its file) is taken back, so that a pause
    said to have failed pauses nothing: the fault to raise (saying so when even the removal
    failed). Only our own file is removed: a resume may have removed it meanwhile, and another
    pause made its own since (the lock keeps pauses apart, not resumes)."""
    fault = f"could not pause {routine!r} in {where}: {describe(exc)}"
    try:
        ours, named = os.fstat(fd), os.stat(name, dir_fd=directory, follow_symlinks=False)
        if (ours.st_dev, ours.st_ino) == (named.st_dev, named.st_ino):
            at(where / name, lambda: os.unlink(name, dir_fd=directory))
            with contextlib.suppress(OSError):  # as durable as the disk lets it be
                os.fsync(directory)
    except FileNotFoundError:
        pass
    except OSError as undo:
        return StateFault(
            f"{fault}; its pause file could not be removed again ({describe(undo)}): it may "
            "pause the routine — look with `list`, and resume it if it shows paused"
        )
    return StateFault(fault)
