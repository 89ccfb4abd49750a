"""Paused routines in the state directory: one empty file per paused routine.

    <root>/schedule/paused/<routine>

Pausing creates the file (``O_EXCL``, never through a symlink), fsyncs it and the directory
before it returns, so every scheduler sharing the directory sees the pause from then on and
a crash cannot forget it; resuming unlinks it and fsyncs the directory. Only regular files
count: anything else found there (a symlink, a directory) pauses nothing. The original
scheduler does not know this directory and ignores it.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import StateFault
from ..names import check_name, name_problem
from .directory import _ensure_dir, _fsync_dir, describe


def set_paused_sync(schedule: Path, routine: str, paused: bool) -> None:
    directory = schedule / "paused"
    path = directory / check_name(routine)
    try:
        if paused:
            _ensure_dir(directory)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                fd = os.open(path, flags, 0o644)
            except FileExistsError:
                if not path.is_file() or path.is_symlink():
                    raise StateFault(
                        f"cannot pause {routine!r}: {path} exists and is not a regular file"
                    ) from None
                return  # paused already
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                return  # not paused
        _fsync_dir(directory)
    except OSError as exc:
        what = "pause" if paused else "resume"
        raise StateFault(f"could not {what} {routine!r} in {directory}: {describe(exc)}") from None


def paused_sync(schedule: Path) -> frozenset[str]:
    directory = schedule / "paused"
    try:
        with os.scandir(directory) as entries:
            return frozenset(
                entry.name
                for entry in entries
                if entry.is_file(follow_symlinks=False) and name_problem(entry.name) is None
            )
    except FileNotFoundError:
        return frozenset()
    except OSError as exc:
        raise StateFault(
            f"the paused routines are unreadable in {directory}: {describe(exc)}"
        ) from None
