"""The files a state directory's replicas hold their locks in (see holds.py's module doc).

    <root>/schedule/holds2/00 … 3f         one byte range locked per hold (never written)
    <root>/schedule/holds/00 … 0f          the holds of earlier versions: a fence

A hold is a write lock on one byte of one of these files, at an offset its key names; anyone
reads it with ``F_OFD_GETLK`` (or ``F_GETLK``). Opening, fencing and reading are here; taking
and letting go are the presence's (holds.py).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path

from ...errors import StateFault
from ..safefile import at, describe, kind_of, open_dirs

HOLDS = "holds2"
#: Holds are spread over this many files: the kernel keeps one list of locks per file and walks
#: it at every lock (a lock costs 7 µs with none held on its file, 26 µs with 1,000, 95 µs with
#: 3,000), so a herd's lock calls grow with the herd's square. 64 files keep a herd of 10,000
#: under 200 locks a file; more would cost descriptors a small RLIMIT_NOFILE cannot spare.
SHARDS = 64
#: Where earlier versions held their locks, 16 files, each read-locked whole as a fence.
FENCE, FENCE_SHARDS = "holds", 16
OLDER = (
    "a replica of an earlier version of trio_routines is running on this state directory — "
    "stop every replica of the earlier version before starting this one (where replicas "
    "hold their locks changed)"
)
SETLK = getattr(fcntl, "F_OFD_SETLK", fcntl.F_SETLK)
GETLK = getattr(fcntl, "F_OFD_GETLK", fcntl.F_GETLK)
FLOCK = "hhqqi4x"  # struct flock on Linux and the BSDs' order: type, whence, start, len, pid


def lock_range(kind: int, key: int) -> bytes:
    return struct.pack(FLOCK, kind, os.SEEK_SET, key, 1, 0)


def unlock_all(fd: int) -> None:
    """Let go of every lock taken through ``fd`` on its file (the descriptor stays open)."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, SETLK, struct.pack(FLOCK, fcntl.F_UNLCK, os.SEEK_SET, 0, 0, 0))


def shard_of(key: int) -> int:
    return key % SHARDS


def offset_of(key: int) -> int:
    return key >> 2  # 61 bits: the byte after it is still a valid offset


def shard_name(shard: int) -> str:
    return f"{shard:02x}"


def open_holds(
    root: Path, shards: Iterable[int], *, create: bool, folder: str = HOLDS
) -> dict[int, int]:
    """The holds files of ``shards``, opened for locking (blocking). Without ``create``, a
    file that does not exist is left out (no hold can be held in it)."""
    where = root / "schedule" / folder
    try:
        parent = open_dirs(root, ("schedule", folder), create=create)
    except FileNotFoundError as exc:
        if not create:
            return {}  # nothing was ever held here
        raise StateFault(f"the holds of {root} are unusable: {describe(exc)}") from None
    except OSError as exc:
        raise StateFault(f"the holds of {root} are unusable: {describe(exc)}") from None
    # A reader only asks (F_GETLK needs no write access: an operator reading the state of a
    # service that runs as another user can); a member takes locks, which needs it.
    flags = os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    flags |= os.O_RDWR | os.O_CREAT if create else os.O_RDONLY
    fds: dict[int, int] = {}
    try:
        for shard in shards:
            name = shard_name(shard)
            try:
                fd = at(where / name, lambda name=name: os.open(name, flags, 0o644, dir_fd=parent))  # type: ignore[misc]
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise StateFault(f"{where / name} is a symbolic link — refused") from None
                raise StateFault(
                    f"the holds file {where / name} is unusable: {describe(exc)}"
                ) from None
            fds[shard] = fd
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise StateFault(f"{where / name} is {kind_of(mode)}, not a regular file — refused")
    except BaseException:
        for fd in fds.values():
            os.close(fd)
        raise
    finally:
        os.close(parent)
    return fds


def fence(root: Path) -> dict[int, int]:
    """The files of earlier versions' holds, each read-locked whole (see holds.py's doc);
    StateFault (:data:`OLDER`) when an earlier version's replica holds anything in them."""
    fds = open_holds(root, range(FENCE_SHARDS), create=True, folder=FENCE)
    whole = struct.pack(FLOCK, fcntl.F_RDLCK, os.SEEK_SET, 0, 0, 0)  # length 0: to the end
    try:
        # Every file asked first, then locked: locked one after another until one refused,
        # the files locked before it would refuse the earlier replica's holds meanwhile (its
        # fires skipped as duplicates or busy) for nothing.
        for fd in fds.values():
            if struct.unpack(FLOCK, fcntl.fcntl(fd, GETLK, whole))[0] != fcntl.F_UNLCK:
                raise OSError(errno.EAGAIN, "held")
        for fd in fds.values():
            fcntl.fcntl(fd, SETLK, whole)
    except OSError as exc:
        for fd in fds.values():
            os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            raise StateFault(OLDER) from None
        raise StateFault(f"could not fence {root / 'schedule' / FENCE}: {describe(exc)}") from None
    return fds


def held_by_others(
    fds: dict[int, int], keys: Sequence[int], *, shards: int = SHARDS, earlier: bool = False
) -> list[bool]:
    """Whether a descriptor other than those of ``fds`` holds each key's lock. ``earlier``:
    ``fds`` are the earlier versions' files, where only a write lock is a hold (a read lock
    there is a fence, which the kernel reports as conflicting with every byte)."""
    answers = []
    for key in keys:
        fd = fds.get(key % shards)
        if fd is None:  # its file does not exist: nobody holds it
            answers.append(False)
            continue
        probe = fcntl.fcntl(fd, GETLK, lock_range(fcntl.F_WRLCK, offset_of(key)))
        found = struct.unpack(FLOCK, probe)[0]
        answers.append(found == fcntl.F_WRLCK if earlier else found != fcntl.F_UNLCK)
    return answers
