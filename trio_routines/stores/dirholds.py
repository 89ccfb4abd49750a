"""Holds in the state directory: ``fcntl`` range locks on one file, and a file per replica.

    <root>/schedule/holds                  one byte range locked per hold (never written)
    <root>/schedule/replicas/<hash>.json   what each replica publishes about itself

Theory of operation. A hold is a write lock on the one byte at its key's offset in
``schedule/holds`` (:mod:`trio_routines.replicas` makes keys). A joined replica opens that
file once and takes every lock through that one descriptor: open-file-description locks
(``F_OFD_SETLK``) where the kernel has them, which belong to the descriptor rather than the
process and so cannot be dropped by some other ``close``; classic POSIX locks elsewhere,
which is safe while the replica never opens the file a second time (it does not). The kernel
releases them when the process dies, however it dies: no timeout, no clock. Taking and
releasing never wait (``SETLK``, not ``SETLKW``) and never touch the disk, so they run on the
event loop's thread: a frozen file system does not stall them.

Anyone reads a hold with ``F_OFD_GETLK`` (or ``F_GETLK``): the lock a writer would conflict
with. A reader that holds nothing sees every hold; a joined replica answers for its own
holds from memory, since a lock never conflicts with its own descriptor.

Replica files are rewritten (temp file and rename) at each heartbeat; a file whose replica's
lock is free is a dead replica, deleted by a join once it is a day old. They are read as
every state file is: never through a link, bounded, and ignored when malformed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import stat
import struct
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeGuard

import attrs
import trio

from ..converter import dumps, loads
from ..errors import StateFault
from ..instants import parse_iso
from ..presence import Presence
from ..replicas import ReplicaInfo, replica_json, replica_key, stored_replica
from .safefile import (
    Refused,
    at,
    create_temp,
    describe,
    kind_of,
    open_dirs,
    read_file,
    write_all,
)

log = logging.getLogger("trio_routines")

HOLDS = "holds"
REPLICAS = "replicas"
REPLICA_LIMIT = 4096  # bytes of one replica file
FORGET_AFTER = timedelta(days=1)

_SETLK = getattr(fcntl, "F_OFD_SETLK", fcntl.F_SETLK)
_GETLK = getattr(fcntl, "F_OFD_GETLK", fcntl.F_GETLK)
_FLOCK = "hhqqi4x"  # struct flock on Linux and the BSDs' order: type, whence, start, len, pid


def _flock(kind: int, key: int) -> bytes:
    return struct.pack(_FLOCK, kind, os.SEEK_SET, key, 1, 0)


def _offset(key: int) -> int:
    return key >> 1  # 62 bits: the byte after it is still a valid offset


def open_holds(root: Path, *, create: bool) -> int | None:
    """The holds file, opened for locking (None when it does not exist and not ``create``)."""
    where = root / "schedule" / HOLDS
    try:
        parent = open_dirs(root, ("schedule",), create=create)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateFault(f"the holds of {root} are unusable: {describe(exc)}") from None
    try:
        flags = os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
        if create:
            flags |= os.O_CREAT
        try:
            fd = at(where, lambda: os.open(HOLDS, flags, 0o644, dir_fd=parent))
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise StateFault(f"{where} is a symbolic link — refused; remove it") from None
            raise StateFault(f"the holds file {where} is unusable: {describe(exc)}") from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise StateFault(f"{where} is {kind_of(mode)}, not a regular file — refused")
        return fd
    finally:
        os.close(parent)


def held_by_others(fd: int, keys: Sequence[int]) -> list[bool]:
    """Whether a descriptor other than ``fd`` holds each key's lock."""
    answers = []
    for key in keys:
        probe = fcntl.fcntl(fd, _GETLK, _flock(fcntl.F_WRLCK, _offset(key)))
        answers.append(struct.unpack(_FLOCK, probe)[0] != fcntl.F_UNLCK)
    return answers


def _file_name(replica: str) -> str:
    return hashlib.blake2b(replica.encode(), digest_size=12).hexdigest() + ".json"


def write_replica(root: Path, info: ReplicaInfo) -> None:
    """Publish ``info`` as the replica's file (atomically: a temp file renamed)."""
    where = root / "schedule" / REPLICAS
    directory = open_dirs(root, ("schedule", REPLICAS), create=True)
    try:
        fd, temp = create_temp(directory, ".replica-", where)
        try:
            try:
                write_all(fd, dumps(replica_json(info, liveness=False)).encode(), where / temp)
            finally:
                os.close(fd)
            name = _file_name(info.id)
            at(where, lambda: os.rename(temp, name, src_dir_fd=directory, dst_dir_fd=directory))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=directory)
            raise
    finally:
        os.close(directory)


def remove_replica(root: Path, replica: str) -> None:
    with contextlib.suppress(OSError):
        directory = open_dirs(root, ("schedule", REPLICAS))
        try:
            os.unlink(_file_name(replica), dir_fd=directory)
        finally:
            os.close(directory)


def _info(raw: object) -> ReplicaInfo | None:
    """A replica file's record, or None when it is not one."""
    if not isinstance(raw, dict):
        return None
    replica = stored_replica(raw.get("id"))
    started = parse_iso(raw["started"]) if isinstance(raw.get("started"), str) else None
    seen = parse_iso(raw["lastSeen"]) if isinstance(raw.get("lastSeen"), str) else None
    version, host = raw.get("version"), raw.get("host")
    pid, in_flight = raw.get("pid"), raw.get("inFlight")
    if replica is None or started is None or seen is None:
        return None
    if not (isinstance(version, str) and isinstance(host, str)):
        return None
    if not (_count(pid) and _count(in_flight)):
        return None
    return ReplicaInfo(replica, version[:64], host[:256], pid, started, seen, in_flight)


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_replicas(root: Path, own: Presence | None) -> list[ReplicaInfo]:
    """Every replica file that reads as one, each marked alive or not by its lock."""
    where = root / "schedule" / REPLICAS
    try:
        directory = open_dirs(root, ("schedule", REPLICAS))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StateFault(f"the replicas of {root} are unreadable: {describe(exc)}") from None
    infos = []
    try:
        for name in sorted(os.listdir(directory)):
            if not name.endswith(".json") or name.startswith("."):
                continue
            try:
                raw = read_file(directory, name, where / name, REPLICA_LIMIT)
                info = _info(loads(raw.decode("utf-8", errors="replace")))
            except (OSError, ValueError) as exc:
                if isinstance(exc, Refused):
                    log.warning("unreadable replica file: %s", exc)
                continue
            if info is not None and name == _file_name(info.id):
                infos.append(info)
    finally:
        os.close(directory)
    alive = keys_alive(root, own, [replica_key(info.id) for info in infos])
    return sorted(
        (attrs.evolve(info, alive=live) for info, live in zip(infos, alive, strict=True)),
        key=lambda info: (info.started, info.id),
    )


def keys_alive(root: Path, own: Presence | None, keys: Sequence[int]) -> list[bool]:
    """Whether some process holds each key (``own``: a presence of this process, if any)."""
    if own is not None and isinstance(own, DirectoryPresence) and own.fd is not None:
        others = held_by_others(own.fd, keys)
        return [own.holds(key) or other for key, other in zip(keys, others, strict=True)]
    fd = open_holds(root, create=False)
    if fd is None:
        return [False] * len(keys)
    try:
        return held_by_others(fd, keys)
    finally:
        os.close(fd)


class DirectoryPresence(Presence):
    """A replica's holds in a state directory (see the module doc)."""

    def __init__(self, info: ReplicaInfo, root: Path, limiter: trio.CapacityLimiter) -> None:
        super().__init__(info)
        self.root = root
        self._limiter = limiter
        self.fd: int | None = None

    def open(self) -> None:
        """Open the holds file, take the replica's own hold, publish the replica (blocking)."""
        fd = open_holds(self.root, create=True)
        assert fd is not None
        if not self._lock(fd, replica_key(self.replica)):
            os.close(fd)
            raise StateFault(
                f"replica id {self.replica!r} is in use by a live replica of {self.root} — "
                "give each replica its own --replica"
            )
        self.fd = fd
        self._held.add(replica_key(self.replica))
        try:
            write_replica(self.root, self.info)
            self._forget_dead()
        except OSError as exc:
            self._close()
            raise StateFault(
                f"could not join {self.root} as replica {self.replica}: {describe(exc)}"
            ) from None

    def _forget_dead(self) -> None:
        horizon = self.info.last_seen - FORGET_AFTER
        for info in read_replicas(self.root, self):
            if not info.alive and info.last_seen < horizon:
                remove_replica(self.root, info.id)

    @staticmethod
    def _lock(fd: int, key: int) -> bool:
        try:
            fcntl.fcntl(fd, _SETLK, _flock(fcntl.F_WRLCK, _offset(key)))
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return False
            raise
        return True

    async def _take(self, keys: list[int]) -> list[bool]:
        await trio.lowlevel.checkpoint()
        fd = self.fd
        if fd is None:
            raise StateFault(f"replica {self.replica} has left {self.root}")
        try:
            return [self._lock(fd, key) for key in keys]
        except OSError as exc:
            raise StateFault(f"could not take a hold in {self.root}: {describe(exc)}") from None

    async def _release(self, keys: list[int]) -> None:
        await trio.lowlevel.checkpoint()
        fd = self.fd
        if fd is None:
            return
        for key in keys:
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, _SETLK, _flock(fcntl.F_UNLCK, _offset(key)))

    async def _beat(self, in_flight: int, now: datetime) -> None:
        self.info = attrs.evolve(self.info, last_seen=now, in_flight=in_flight)
        try:
            await trio.to_thread.run_sync(
                write_replica, self.root, self.info, limiter=self._limiter, abandon_on_cancel=True
            )
        except OSError as exc:
            # The record is for people; the holds are the kernel's and still stand.
            log.warning("could not refresh replica %s's record: %s", self.replica, describe(exc))

    async def _leave(self) -> None:
        await trio.to_thread.run_sync(
            remove_replica, self.root, self.replica, limiter=self._limiter, abandon_on_cancel=True
        )
        self._close()

    def _close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)  # every lock of ours goes with it
