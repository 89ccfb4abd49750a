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
holds from memory, since a lock never conflicts with its own descriptor, and reads the others'
through its own descriptors, in a worker thread: a leave meanwhile lets go of its locks at
once but leaves the descriptors' close to the last such reader, since a descriptor closed
under it could be reused by another open, and a live replica read through the wrong file
would look dead. (The files: lockfiles.py.)

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
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeGuard

import attrs
import trio

from ...converter import dumps, loads
from ...errors import StateFault
from ...instants import parse_iso
from ...presence import IdInUse, Presence
from ...replicas import ReplicaInfo, replica_json, replica_key, stored_replica
from ..abandon import run_abandoning
from ..safefile import Refused, describe, open_dirs, read_file, replace_file
from .lockfiles import (
    FENCE,
    FENCE_SHARDS,
    SETLK,
    SHARDS,
    fence,
    held_by_others,
    lock_range,
    offset_of,
    open_holds,
    shard_of,
    unlock_all,
)

log = logging.getLogger("trio_routines")

REPLICAS = "replicas"
REPLICA_LIMIT = 4096  # bytes of one replica file
FORGET_AFTER = timedelta(days=1)


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
    others = own.held_elsewhere(keys) if isinstance(own, DirectoryPresence) else None
    if others is not None:
        assert own is not None
        return [own.holds(key) or other for key, other in zip(keys, others, strict=True)]
    # Not a member: the earlier versions' holds are read too, so that an operator who reads
    # the state after an upgrade but before the restart sees its replicas alive.
    fds = open_holds(root, {shard_of(key) for key in keys}, create=False)
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

    def __init__(
        self,
        info: ReplicaInfo,
        root: Path,
        limiter: trio.CapacityLimiter,
        begun: dict[object, float] | None = None,
    ) -> None:
        """``begun``: the store's thread calls under way (its ``ready``): a heartbeat that a
        frozen file system holds is one of them."""
        super().__init__(info)
        self.root = root
        self._limiter = limiter
        self._begun = begun
        self.fds: dict[int, int] = {}  # shard -> our descriptor of its file, for our life
        self._fence: dict[int, int] = {}  # the earlier versions' files, read-locked whole
        # Readers of ``fds`` in worker threads (held_elsewhere), and what the last of them
        # closes: a descriptor closed under a reader could be reused by another open.
        self._guard = threading.Lock()
        self._readers = 0
        self._doomed: list[int] = []
        # The replica's record: a heartbeat's rewrite given up (a stalled disk) must not land
        # after the leave's removal, and bring a replica that left back as a dead one.
        self._record = threading.Lock()
        self._gone = False

    def open(self) -> None:
        """Fence the earlier versions off, open the holds files, take the replica's own hold,
        publish the replica (blocking)."""
        self._fence = fence(self.root)
        mine = replica_key(self.replica)
        try:
            self.fds = open_holds(self.root, range(SHARDS), create=True)
            if not self._lock(mine):
                raise IdInUse(
                    f"replica id {self.replica!r} is in use by a live replica — give each "
                    "replica its own id (--replica, or the scheduler's replica=)"
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
            fcntl.fcntl(self.fds[shard_of(key)], SETLK, lock_range(fcntl.F_WRLCK, offset_of(key)))
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
            fd = fds.get(shard_of(key))
            if fd is not None:
                with contextlib.suppress(OSError):
                    fcntl.fcntl(fd, SETLK, lock_range(fcntl.F_UNLCK, offset_of(key)))

    async def _beat(self, in_flight: int, now: datetime) -> None:
        self.info = attrs.evolve(self.info, last_seen=now, in_flight=in_flight)
        try:
            await run_abandoning(self._publish, self.info, limiter=self._limiter, begun=self._begun)
        except OSError as exc:
            # The record is for people; the holds are the kernel's and still stand.
            log.warning("could not refresh replica %s's record: %s", self.replica, describe(exc))

    async def _leave(self) -> None:
        try:
            await trio.to_thread.run_sync(
                self._unpublish, limiter=self._limiter, abandon_on_cancel=True
            )
        finally:
            # A leave cut short (a stalled disk, a stop's bound) still lets go of every hold:
            # else the replica would look alive, its id in use, until the process ends. The
            # record's removal goes on alone; it touches none of these files.
            self._close()

    def _publish(self, info: ReplicaInfo) -> None:
        """Rewrite the replica's record (in a worker thread), unless it has left."""
        with self._record:
            if not self._gone:
                write_replica(self.root, info)

    def _unpublish(self) -> None:
        """Remove the replica's record (in a worker thread), after any rewrite under way."""
        with self._record:
            self._gone = True
            remove_replica(self.root, self.replica)

    def close_sync(self) -> None:
        """Let go of every hold (a join given up by its caller, in its thread)."""
        self._close()

    def held_elsewhere(self, keys: Sequence[int]) -> list[bool] | None:
        """Whether another process holds each of ``keys``, read through our descriptors (in a
        worker thread); None once we have left."""
        with self._guard:
            fds = self.fds
            if not fds:
                return None
            self._readers += 1
        try:
            return held_by_others(fds, keys)
        finally:
            doomed: list[int] = []
            with self._guard:
                self._readers -= 1
                if not self._readers:
                    doomed, self._doomed = self._doomed, []
            for fd in doomed:
                os.close(fd)

    def _close(self) -> None:
        with self._guard:
            fds, self.fds = self.fds, {}
            fenced, self._fence = self._fence, {}
            doomed = [*fds.values(), *fenced.values()]
            if self._readers:  # the last of them closes them, a moment later
                for fd in doomed:
                    unlock_all(fd)  # our holds go now all the same
                self._doomed += doomed
                doomed = []
        for fd in doomed:
            os.close(fd)  # every lock of ours in that file goes with it
