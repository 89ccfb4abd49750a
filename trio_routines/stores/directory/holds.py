"""Holds in the state directory: ``fcntl`` range locks on one file, and a file per replica.

    <root>/schedule/holds2/00 … 3f         one byte range locked per hold (never written)
    <root>/schedule/holds/00 … 0f          the holds of earlier versions: a fence (below)
    <root>/schedule/replicas/<hash>.json   what each replica publishes about itself

Theory of operation. A hold is a write lock on the one byte at its key's offset in one of
the 64 files of ``schedule/holds2/`` (:mod:`trio_routines.replicas` makes keys; the key picks
the file too). A joined replica opens those files once and takes every lock through those
descriptors: open-file-description locks
(``F_OFD_SETLK``) where the kernel has them, which belong to the descriptor rather than the
process and so cannot be dropped by some other ``close``; classic POSIX locks elsewhere,
which is safe while the replica never opens a file a second time (it does not). The kernel
releases them when the process dies, however it dies: no timeout, no clock. Taking and
releasing never wait (``SETLK``, not ``SETLKW``) and never touch the disk, so they run on the
event loop's thread: a frozen file system does not stall them.

Earlier versions held their locks in the 16 files of ``schedule/holds/`` and held a claim's
hold until its settle, where this version takes none (a claim is never seen half made, and is
alive while the replica it names is, claimfiles.py): the two cannot share a directory.
So a joined replica also holds a read lock on the whole of each of those 16 files, for its
life: an older replica's lock conflicts with it, so an older replica cannot join (nor take
a hold) while a newer one lives, and a newer one cannot join while an older one holds
anything there (:data:`OLDER`, one line). A reader that is not a
member reads both layouts (a write lock in the earlier files is an earlier replica's hold; a
read lock there is a fence), so that ``status`` run between an upgrade and the restart still
sees the earlier replicas, and their claims, alive.

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
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeGuard

import attrs
import trio

from ...converter import dumps, loads
from ...errors import StateFault
from ...instants import parse_iso
from ...presence import Presence
from ...replicas import ReplicaInfo, replica_json, replica_key, stored_replica
from ..safefile import (
    Refused,
    at,
    describe,
    kind_of,
    open_dirs,
    read_file,
    replace_file,
)

log = logging.getLogger("trio_routines")

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
REPLICAS = "replicas"
REPLICA_LIMIT = 4096  # bytes of one replica file
FORGET_AFTER = timedelta(days=1)

_SETLK = getattr(fcntl, "F_OFD_SETLK", fcntl.F_SETLK)
_GETLK = getattr(fcntl, "F_OFD_GETLK", fcntl.F_GETLK)
_FLOCK = "hhqqi4x"  # struct flock on Linux and the BSDs' order: type, whence, start, len, pid


def _flock(kind: int, key: int) -> bytes:
    return struct.pack(_FLOCK, kind, os.SEEK_SET, key, 1, 0)


def _shard(key: int) -> int:
    return key % SHARDS


def _offset(key: int) -> int:
    return key >> 2  # 61 bits: the byte after it is still a valid offset


def _shard_name(shard: int) -> str:
    return f"{shard:02x}"


def open_holds(
    root: Path, shards: Iterable[int], *, create: bool, folder: str = HOLDS
) -> dict[int, int]:
    """The holds files of ``shards``, opened for locking (blocking). Without ``create``, a
    file that does not exist is left out (no hold can be held in it)."""
    where = root / "schedule" / folder
    try:
        parent = open_dirs(root, ("schedule", folder), create=create)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise StateFault(f"the holds of {root} are unusable: {describe(exc)}") from None
    # A reader only asks (F_GETLK needs no write access: an operator reading the state of a
    # service that runs as another user can); a member takes locks, which needs it.
    flags = os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    flags |= os.O_RDWR | os.O_CREAT if create else os.O_RDONLY
    fds: dict[int, int] = {}
    try:
        for shard in shards:
            name = _shard_name(shard)
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
    """The files of earlier versions' holds, each read-locked whole (see the module doc);
    StateFault (:data:`OLDER`) when an earlier version's replica holds anything in them."""
    fds = open_holds(root, range(FENCE_SHARDS), create=True, folder=FENCE)
    whole = struct.pack(_FLOCK, fcntl.F_RDLCK, os.SEEK_SET, 0, 0, 0)  # length 0: to the end
    try:
        # Every file asked first, then locked: locked one after another until one refused,
        # the files locked before it would refuse the earlier replica's holds meanwhile (its
        # fires skipped as duplicates or busy) for nothing.
        for fd in fds.values():
            if struct.unpack(_FLOCK, fcntl.fcntl(fd, _GETLK, whole))[0] != fcntl.F_UNLCK:
                raise OSError(errno.EAGAIN, "held")
        for fd in fds.values():
            fcntl.fcntl(fd, _SETLK, whole)
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
        probe = fcntl.fcntl(fd, _GETLK, _flock(fcntl.F_WRLCK, _offset(key)))
        found = struct.unpack(_FLOCK, probe)[0]
        answers.append(found == fcntl.F_WRLCK if earlier else found != fcntl.F_UNLCK)
    return answers


def _file_name(replica: str) -> str:
    return hashlib.blake2b(replica.encode(), digest_size=12).hexdigest() + ".json"


def write_replica(root: Path, info: ReplicaInfo) -> None:
    """Publish ``info`` as the replica's file (atomically: a temp file renamed)."""
    where = root / "schedule" / REPLICAS
    directory = open_dirs(root, ("schedule", REPLICAS), create=True)
    try:
        # Not durable: the record is for people, and rewritten at every heartbeat.
        data = dumps(replica_json(info, liveness=False)).encode()
        replace_file(directory, _file_name(info.id), where, data, ".replica-", durable=False)
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
    if own is not None and isinstance(own, DirectoryPresence) and own.fds:
        others = held_by_others(own.fds, keys)
        return [own.holds(key) or other for key, other in zip(keys, others, strict=True)]
    # Not a member: the earlier versions' holds are read too, so that an operator who reads
    # the state after an upgrade but before the restart sees its replicas alive.
    fds = open_holds(root, {_shard(key) for key in keys}, create=False)
    try:
        earlier = open_holds(root, {key % FENCE_SHARDS for key in keys}, create=False, folder=FENCE)
    except BaseException:
        for fd in fds.values():
            os.close(fd)
        raise
    try:
        now = held_by_others(fds, keys)
        before = held_by_others(earlier, keys, shards=FENCE_SHARDS, earlier=True)
        return [one or other for one, other in zip(now, before, strict=True)]
    finally:
        for fd in (*fds.values(), *earlier.values()):
            os.close(fd)


class DirectoryPresence(Presence):
    """A replica's holds in a state directory (see the module doc)."""

    def __init__(self, info: ReplicaInfo, root: Path, limiter: trio.CapacityLimiter) -> None:
        super().__init__(info)
        self.root = root
        self._limiter = limiter
        self.fds: dict[int, int] = {}  # shard -> our descriptor of its file, for our life
        self._fence: dict[int, int] = {}  # the earlier versions' files, read-locked whole

    def open(self) -> None:
        """Fence the earlier versions off, open the holds files, take the replica's own hold,
        publish the replica (blocking)."""
        self._fence = fence(self.root)
        mine = replica_key(self.replica)
        try:
            self.fds = open_holds(self.root, range(SHARDS), create=True)
            if not self._lock(mine):
                raise StateFault(
                    f"replica id {self.replica!r} is in use by a live replica of {self.root} — "
                    "give each replica its own --replica"
                )
        except BaseException:  # a lock that failed (ENOLCK) too: nothing stays open
            self._close()
            raise
        self._held.add(mine)
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

    def _lock(self, key: int) -> bool:
        try:
            fcntl.fcntl(self.fds[_shard(key)], _SETLK, _flock(fcntl.F_WRLCK, _offset(key)))
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return False
            raise
        return True

    # Neither waits nor touches the disk: no checkpoint of its own (the fire path has its
    # own), which at 10,000 fires at once is a scheduling round fewer each.
    async def _take(self, keys: list[int]) -> list[bool]:
        if not self.fds:
            raise StateFault(f"replica {self.replica} has left {self.root}")
        try:
            return [self._lock(key) for key in keys]
        except OSError as exc:
            raise StateFault(f"could not take a hold in {self.root}: {describe(exc)}") from None

    def _let_go(self, keys: list[int]) -> None:
        fds = self.fds
        for key in keys:
            fd = fds.get(_shard(key))
            if fd is not None:
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
        try:
            await trio.to_thread.run_sync(
                remove_replica,
                self.root,
                self.replica,
                limiter=self._limiter,
                abandon_on_cancel=True,
            )
        finally:
            # A leave cut short (a stalled disk, a stop's bound) still lets go of every hold:
            # else the replica would look alive, its id in use, until the process ends. The
            # record's removal goes on alone; it touches none of these files.
            self._close()

    def close_sync(self) -> None:
        """Let go of every hold (a join given up by its caller, in its thread)."""
        self._close()

    def _close(self) -> None:
        fds, self.fds = self.fds, {}
        fenced, self._fence = self._fence, {}
        for fd in (*fds.values(), *fenced.values()):
            os.close(fd)  # every lock of ours in that file goes with it
