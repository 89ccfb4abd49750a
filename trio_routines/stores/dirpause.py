"""Paused routines in the state directory: one empty file per paused routine.

    <root>/schedule/paused/<routine>

Pausing creates the file (``O_EXCL``, never through a symlink), fsyncs it and the directory
before it returns, so every scheduler sharing the directory sees the pause from then on and
a crash cannot forget it; resuming unlinks it and fsyncs the directory. Only regular files
count: anything else found there (a symlink, a directory) pauses nothing. The directories on
the way are opened as every state directory is (safefile.py): a planted link is refused. The
original scheduler does not know this directory and ignores it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import StateFault
from ..names import check_name, name_problem
from .safefile import at, create_file, describe, fsync, open_dirs


def set_paused_sync(root: Path, routine: str, paused: bool) -> None:
    """Pause (create the file) or resume (remove it) ``routine``; durable when it returns."""
    where = root / "schedule" / "paused"
    name = check_name(routine)
    path = where / name
    try:
        directory = open_dirs(root, ("schedule", "paused"), create=paused)
    except FileNotFoundError:
        return  # resuming where nothing was ever paused
    except OSError as exc:
        what = "pause" if paused else "resume"
        raise StateFault(f"could not {what} {routine!r} in {where}: {describe(exc)}") from None
    try:
        if paused:
            try:
                fd = create_file(directory, name, path)
            except FileExistsError:
                info = os.stat(name, dir_fd=directory, follow_symlinks=False)
                if not stat.S_ISREG(info.st_mode):
                    raise StateFault(
                        f"cannot pause {routine!r}: {path} exists and is not a regular file"
                    ) from None
                return  # paused already
            try:
                fsync(fd, path)
            finally:
                os.close(fd)
        else:
            try:
                at(path, lambda: os.unlink(name, dir_fd=directory))
            except FileNotFoundError:
                return  # not paused
        fsync(directory, where)
    except OSError as exc:
        what = "pause" if paused else "resume"
        raise StateFault(f"could not {what} {routine!r} in {where}: {describe(exc)}") from None
    finally:
        os.close(directory)


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
        with os.scandir(directory) as entries:
            return frozenset(
                entry.name
                for entry in entries
                if entry.is_file(follow_symlinks=False) and name_problem(entry.name) is None
            )
    except OSError as exc:
        raise StateFault(
            f"the paused routines are unreadable in {where}: {describe(exc)}"
        ) from None
    finally:
        os.close(directory)
