"""Pinned: the state directory's holds files, the fence, the replica files and what a member
reads back (stores/directory/holds.py and members.py).

Written for the mutation run of those two modules (docs/mutation.md). Open-file-description
locks belong to a descriptor, not to the process: a second descriptor of the same file, opened
here, sees this process's own locks as another process would, so the exact lock a hold or the
fence puts on a file can be read back without a second process.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import struct
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
from trio.testing import wait_all_tasks_blocked

from trio_routines.errors import StateFault
from trio_routines.replicas import ReplicaInfo, replica_key
from trio_routines.stores import DirectoryStore
from trio_routines.stores.directory import holds
from trio_routines.stores.directory.holds import (
    DirectoryPresence,
    keys_alive,
    read_replicas,
    remove_replica,
    write_replica,
)
from trio_routines.stores.directory.lockfiles import (
    FENCE_SHARDS,
    SHARDS,
    fence,
    held_by_others,
    open_holds,
)

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
FLOCK = "hhqqi4x"


def info(replica: str, *, seen: datetime = T0, started: datetime = T0) -> ReplicaInfo:
    return ReplicaInfo(replica, "0.1.0", "host", 42, started, seen)


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def probe(path: Path, offset: int) -> tuple[int, int, int]:
    """The lock a write lock on the byte at ``offset`` of ``path`` would conflict with: its
    type, start and length (another descriptor's, this process's included)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        asked = struct.pack(FLOCK, fcntl.F_WRLCK, os.SEEK_SET, offset, 1, 0)
        kind, _, start, length, _ = struct.unpack(FLOCK, fcntl.fcntl(fd, fcntl.F_OFD_GETLK, asked))
    finally:
        os.close(fd)
    return kind, start, length


def replicas_dir(root: Path) -> Path:
    return root / "schedule" / "replicas"


def plant(root: Path, name: str, record: object) -> None:
    where = replicas_dir(root)
    where.mkdir(parents=True, exist_ok=True)
    (where / name).write_text(json.dumps(record))


def record(replica: str, **fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "id": replica,
        "version": "1.0",
        "host": "box",
        "pid": 7,
        "started": "2026-07-07T10:00:00.000Z",
        "lastSeen": "2026-07-07T10:00:00.000Z",
        "inFlight": 2,
    }
    base.update(fields)
    return base


# -- the holds files ------------------------------------------------------------------------


def test_a_replica_files_name_is_a_hash_of_its_id() -> None:
    assert holds._file_name("a") == "1ba3c523e770f3313cc91ab1.json"


async def test_a_hold_is_a_write_lock_on_its_keys_byte_in_the_file_its_key_picks(
    tmp_path: Path,
) -> None:
    store = DirectoryStore(tmp_path)
    member = await store.join(info("a"))
    mine = replica_key("a")
    where = tmp_path / "schedule" / "holds2"
    assert sorted(os.listdir(where)) == [f"{shard:02x}" for shard in range(SHARDS)]
    shard, offset = mine % 64, mine >> 2
    assert probe(where / f"{shard:02x}", offset) == (fcntl.F_WRLCK, offset, 1)
    assert probe(where / f"{shard:02x}", offset + 1)[0] == fcntl.F_UNLCK
    assert probe(where / f"{shard:02x}", offset - 1)[0] == fcntl.F_UNLCK
    assert probe(where / f"{(shard + 1) % 64:02x}", offset)[0] == fcntl.F_UNLCK
    # Each of the earlier versions' 16 files is read-locked whole, from its first byte on.
    fenced = tmp_path / "schedule" / "holds"
    assert sorted(os.listdir(fenced)) == [f"{shard:02x}" for shard in range(FENCE_SHARDS)]
    for name in os.listdir(fenced):
        assert probe(fenced / name, 0) == (fcntl.F_RDLCK, 0, 0)
        assert probe(fenced / name, 1 << 60)[0] == fcntl.F_RDLCK
    # A hold taken and let go: the byte is locked, then free.
    other = 12345 * 64 + shard
    assert await member.take([other]) == [True]
    assert probe(where / f"{shard:02x}", other >> 2) == (fcntl.F_WRLCK, other >> 2, 1)
    await member.release([other])
    assert probe(where / f"{shard:02x}", other >> 2)[0] == fcntl.F_UNLCK
    assert probe(where / f"{shard:02x}", offset)[0] == fcntl.F_WRLCK  # ours stays
    await member.leave()
    assert probe(where / f"{shard:02x}", offset)[0] == fcntl.F_UNLCK
    assert probe(fenced / "00", 0)[0] == fcntl.F_UNLCK
    await store.aclose()


def test_a_member_opens_its_holds_files_to_lock_and_a_reader_to_read(tmp_path: Path) -> None:
    before = open_fds()
    old = os.umask(0)
    try:
        mine = open_holds(tmp_path, [0, 5], create=True)
    finally:
        os.umask(old)
    try:
        assert sorted(mine) == [0, 5]
        for fd in mine.values():
            assert os.fstat(fd).st_mode & 0o777 == 0o644
            assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDWR
            assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
        assert sorted(os.listdir(tmp_path / "schedule" / "holds2")) == ["00", "05"]
        read = open_holds(tmp_path, [5, 6], create=False)  # 06 does not exist: left out
        assert sorted(read) == [5]
        assert fcntl.fcntl(read[5], fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
        assert fcntl.fcntl(read[5], fcntl.F_GETFD) & fcntl.FD_CLOEXEC
        os.close(read[5])
    finally:
        for fd in mine.values():
            os.close(fd)
    assert open_fds() == before
    assert open_holds(tmp_path / "none", [0], create=False) == {}  # nothing made
    assert not (tmp_path / "none").exists()
    assert open_holds(tmp_path, [0], create=False, folder="holds") == {}


def test_a_holds_file_that_is_not_a_regular_file_is_refused_and_nothing_stays_open(
    tmp_path: Path,
) -> None:
    where = tmp_path / "schedule" / "holds2"
    where.mkdir(parents=True)
    (where / "00").touch()
    os.mkfifo(where / "01")  # opened without blocking, then refused
    before = open_fds()
    with pytest.raises(StateFault) as refused:
        open_holds(tmp_path, [0, 1], create=False)
    assert str(refused.value) == f"{where / '01'} is a FIFO, not a regular file — refused"
    assert open_fds() == before
    os.unlink(where / "01")
    (where / "01").mkdir()
    with pytest.raises(StateFault) as refused:
        open_holds(tmp_path, [0, 1], create=False)
    assert str(refused.value) == f"{where / '01'} is a directory, not a regular file — refused"
    assert open_fds() == before
    with pytest.raises(StateFault) as refused:  # to lock, a directory cannot even be opened
        open_holds(tmp_path, [0, 1], create=True)
    assert str(refused.value) == (
        f"the holds file {where / '01'} is unusable: EISDIR: Is a directory: {where / '01'}"
    )
    assert open_fds() == before


def test_holds_in_a_file_where_their_folder_should_be_are_unusable(tmp_path: Path) -> None:
    (tmp_path / "schedule").mkdir()
    (tmp_path / "schedule" / "holds2").touch()
    before = open_fds()
    for create in (False, True):
        with pytest.raises(StateFault) as refused:
            open_holds(tmp_path, [0], create=create)
        where = tmp_path / "schedule" / "holds2"
        assert str(refused.value) == (
            f"the holds of {tmp_path} are unusable: ENOTDIR: Not a directory: {where}"
        )
    assert open_fds() == before


def test_a_fence_that_cannot_be_taken_for_another_reason_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(fd: int, cmd: int, arg: bytes) -> bytes:
        raise OSError(22, "Invalid argument")

    before = open_fds()
    monkeypatch.setattr(holds.fcntl, "fcntl", failing)
    with pytest.raises(StateFault) as refused:
        fence(tmp_path)
    monkeypatch.undo()
    where = tmp_path / "schedule" / "holds"
    assert str(refused.value) == f"could not fence {where}: EINVAL: Invalid argument"
    assert open_fds() == before


def test_held_by_others_reads_each_key_in_its_own_file(tmp_path: Path) -> None:
    taken = open_holds(tmp_path, range(4), create=True)
    read = open_holds(tmp_path, range(4), create=False)
    try:
        key = 1000 * 4 + 2  # in file 2 of 4
        lock = struct.pack(FLOCK, fcntl.F_WRLCK, os.SEEK_SET, key >> 2, 1, 0)
        fcntl.fcntl(taken[2], fcntl.F_OFD_SETLK, lock)
        assert held_by_others(read, [key, key + 1, key + 4], shards=4) == [True, False, False]
        assert held_by_others(read, [key], shards=4, earlier=True) == [True]
        # Read-locked (a fence): a hold in the current files, none in the earlier ones.
        shared = struct.pack(FLOCK, fcntl.F_RDLCK, os.SEEK_SET, 0, 0, 0)
        fcntl.fcntl(taken[1], fcntl.F_OFD_SETLK, shared)
        assert held_by_others(read, [1], shards=4) == [True]
        assert held_by_others(read, [1], shards=4, earlier=True) == [False]
        assert held_by_others(read, [3], shards=4, earlier=True) == [False]
        assert held_by_others({}, [1, 2]) == [False, False]
    finally:
        for fd in (*taken.values(), *read.values()):
            os.close(fd)


async def test_a_reader_closes_every_file_it_opened(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    member = await store.join(info("a"))
    before = open_fds()
    keys = [replica_key("a"), replica_key("b"), *range(100)]
    assert keys_alive(tmp_path, None, keys) == [True] + [False] * 101
    assert open_fds() == before
    await member.leave()
    await store.aclose()


# -- the replica files ----------------------------------------------------------------------


def test_a_replica_file_is_read_only_when_every_field_is_sound(tmp_path: Path) -> None:
    good = record("good", version="v" * 100, host="h" * 300, pid=0, inFlight=0)
    plant(tmp_path, holds._file_name("good"), good)
    plant(tmp_path, holds._file_name("full"), record("full", pid=9, inFlight=3))
    bad = {
        "bad-id": record("bad\tid"),
        "no-id": {key: value for key, value in record("x").items() if key != "id"},
        "no-started": record("no-started", started=None),
        "no-seen": record("no-seen", lastSeen=5),
        "no-version": record("no-version", version=1),
        "no-host": record("no-host", host=None),
        "pid-bool": record("pid-bool", pid=True),
        "pid-negative": record("pid-negative", pid=-1),
        "pid-text": record("pid-text", pid="7"),
        "in-flight-bool": record("in-flight-bool", inFlight=False),
        "in-flight-negative": record("in-flight-negative", inFlight=-1),
        "a-list": [record("a-list")],
    }
    for replica, body in bad.items():
        plant(tmp_path, holds._file_name(replica), body)
    assert read_replicas(tmp_path, None) == [
        ReplicaInfo("full", "1.0", "box", 9, T0, T0, 3, alive=False),
        ReplicaInfo("good", "v" * 64, "h" * 256, 0, T0, T0, 0, alive=False),
    ]


def test_replicas_are_listed_by_their_start_then_their_id(tmp_path: Path) -> None:
    later = "2026-07-07T11:00:00.000Z"
    for replica, started in (("a", later), ("c", "2026-07-07T10:00:00.000Z"), ("b", later)):
        plant(tmp_path, holds._file_name(replica), record(replica, started=started))
    assert [replica.id for replica in read_replicas(tmp_path, None)] == ["c", "a", "b"]


def test_a_replica_file_of_odd_bytes_is_read_and_an_oversized_one_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    where = replicas_dir(tmp_path)
    plant(tmp_path, holds._file_name("odd"), record("odd"))
    raw = (where / holds._file_name("odd")).read_bytes().replace(b'"box"', b'"b\xffx"')
    (where / holds._file_name("odd")).write_bytes(raw)
    body = json.dumps(record("fits")).encode()
    (where / holds._file_name("fits")).write_bytes(body + b" " * (4096 - len(body)))
    body = json.dumps(record("big")).encode()
    (where / holds._file_name("big")).write_bytes(body + b" " * (4097 - len(body)))
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        found = read_replicas(tmp_path, None)
    assert [(replica.id, replica.host) for replica in found] == [
        ("fits", "box"),
        ("odd", "b\ufffdx"),
    ]
    assert [r.getMessage() for r in caplog.records] == [
        f"unreadable replica file: {where / holds._file_name('big')} holds 4097 bytes, more than"
        " 4096 — refused"
    ]


def test_only_the_replica_files_that_could_be_one_are_opened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    where = replicas_dir(tmp_path)
    where.mkdir(parents=True)
    for name in ("fifo", ".fifo.json", "fifo.json"):
        os.mkfifo(where / name)  # opened only when it could be a replica's file: refused then
    (where / "broken.json").write_text("{")  # malformed: passed over without a word
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert read_replicas(tmp_path, None) == []
    assert [r.getMessage() for r in caplog.records] == [
        f"unreadable replica file: {where / 'fifo.json'} is a FIFO, not a regular file — refused; "
        "remove it"
    ]


def test_replica_files_in_no_directory_or_an_unreadable_one(tmp_path: Path) -> None:
    assert read_replicas(tmp_path, None) == []
    remove_replica(tmp_path, "a")  # nothing to remove: no error
    (tmp_path / "schedule").mkdir()
    (tmp_path / "schedule" / "replicas").touch()
    with pytest.raises(StateFault) as refused:
        read_replicas(tmp_path, None)
    assert str(refused.value) == (
        f"the replicas of {tmp_path} are unreadable: ENOTDIR: Not a directory: "
        f"{replicas_dir(tmp_path)}"
    )
    remove_replica(tmp_path, "a")  # its directory unusable: no error either


def test_a_replica_file_holds_the_record_without_liveness_and_goes_with_its_removal(
    tmp_path: Path,
) -> None:
    write_replica(tmp_path, ReplicaInfo("a", "1.0", "box", 7, T0, T0 + timedelta(seconds=3), 2))
    name = holds._file_name("a")
    assert os.listdir(replicas_dir(tmp_path)) == [name]
    assert json.loads((replicas_dir(tmp_path) / name).read_text()) == record(
        "a", lastSeen="2026-07-07T10:00:03.000Z"
    )
    remove_replica(tmp_path, "b")
    assert os.listdir(replicas_dir(tmp_path)) == [name]
    remove_replica(tmp_path, "a")
    assert os.listdir(replicas_dir(tmp_path)) == []


# -- a member's presence --------------------------------------------------------------------


async def test_a_join_forgets_the_dead_replicas_last_seen_over_a_day_before_it(
    tmp_path: Path,
) -> None:
    day = timedelta(days=1)
    alive_store = DirectoryStore(tmp_path)
    alive = await alive_store.join(info("alive", seen=T0 - 2 * day))  # old record, still alive
    write_replica(tmp_path, info("dead-old", seen=T0 - day - timedelta(microseconds=1000)))
    write_replica(tmp_path, info("dead-day", seen=T0 - day))
    write_replica(tmp_path, info("dead-new", seen=T0))
    store = DirectoryStore(tmp_path)
    member = await store.join(info("me", seen=T0))
    assert [(replica.id, replica.alive) for replica in await store.replicas()] == [
        ("alive", True),
        ("dead-day", False),
        ("dead-new", False),
        ("me", True),
    ]
    await member.leave()
    await alive.leave()
    await store.aclose()
    await alive_store.aclose()


async def test_a_heartbeat_rewrites_the_record_and_a_failed_one_is_only_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = DirectoryStore(tmp_path)
    member = await store.join(info("a"))
    later = T0 + timedelta(minutes=5)
    await member.beat(3, later)
    (found,) = read_replicas(tmp_path, None)
    assert (found.last_seen, found.in_flight, found.started) == (later, 3, T0)
    shutil.rmtree(replicas_dir(tmp_path))
    replicas_dir(tmp_path).touch()
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        await member.beat(4, later)
    assert [r.getMessage() for r in caplog.records] == [
        f"could not refresh replica a's record: ENOTDIR: Not a directory: {replicas_dir(tmp_path)}"
    ]
    assert keys_alive(tmp_path, None, [replica_key("a")]) == [True]  # the hold still stands
    os.unlink(replicas_dir(tmp_path))
    await member.leave()
    await store.aclose()


async def test_leaving_removes_the_record_and_frees_the_id(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    member = await store.join(info("a"))
    assert os.listdir(replicas_dir(tmp_path)) == [holds._file_name("a")]
    before = open_fds()
    await member.leave()
    assert os.listdir(replicas_dir(tmp_path)) == []
    assert len(before - open_fds()) == SHARDS + FENCE_SHARDS  # every file it kept is closed
    assert keys_alive(tmp_path, None, [replica_key("a")]) == [False]
    again = await DirectoryStore(tmp_path).join(info("a"))
    await again.leave()
    await store.aclose()


async def test_a_join_refused_keeps_nothing_open_and_holds_nothing(tmp_path: Path) -> None:
    first = DirectoryStore(tmp_path)
    member = await first.join(info("a"))
    second = DirectoryStore(tmp_path)
    before = open_fds()
    with pytest.raises(StateFault) as refused:
        await second.join(info("a"))
    assert str(refused.value) == (
        f"could not join {tmp_path}: replica id 'a' is in use by a live replica — give each "
        "replica its own id (--replica, or the scheduler's replica=)"
    )
    assert open_fds() == before
    await member.leave()
    before = open_fds()
    # Its replicas directory unusable, a join fails whole: nothing held, nothing open.
    replicas_dir(tmp_path).rmdir()
    replicas_dir(tmp_path).touch()
    with pytest.raises(StateFault) as refused:
        await second.join(info("b"))
    assert str(refused.value) == (
        f"could not join {tmp_path}: could not join {tmp_path} as replica b: "
        f"ENOTDIR: Not a directory: {replicas_dir(tmp_path)}"
    )
    assert open_fds() == before
    assert keys_alive(tmp_path, None, [replica_key("b")]) == [False]
    assert probe(tmp_path / "schedule" / "holds" / "00", 0)[0] == fcntl.F_UNLCK
    await first.aclose()
    await second.aclose()


async def test_a_presence_closed_by_its_joiner_takes_nothing_more(tmp_path: Path) -> None:
    presence = DirectoryPresence(info("a"), tmp_path, trio.CapacityLimiter(1))
    presence.open()
    key = 99 * 64 + 3
    assert await presence.take([key]) == [True]
    presence.close_sync()
    with pytest.raises(StateFault) as refused:
        await presence.take([key + 64])
    assert str(refused.value) == f"replica a has left {tmp_path}"
    assert keys_alive(tmp_path, None, [key, replica_key("a")]) == [False, False]
    presence.let_go([key])  # its files closed: nothing to let go of, no error


# -- the members ----------------------------------------------------------------------------

SLOT = datetime(2026, 7, 7, 9, tzinfo=UTC)


async def test_claims_alive_reads_each_claims_replica_once_whatever_the_order(
    tmp_path: Path,
) -> None:
    first, second = DirectoryStore(tmp_path), DirectoryStore(tmp_path)
    a = await first.join(info("a"))
    b = await second.join(info("b"))
    for routine, replica in (("r", "b"), ("q", "a"), ("p", "gone"), ("o", "b")):
        await first.claim(routine, SLOT, SLOT, replica=replica)
    claims = [(routine, SLOT) for routine in ("r", "q", "p", "o", "r")]
    expected = [True, True, False, True, True]
    assert await first.claims_alive(claims) == expected  # its own id among them
    assert await second.claims_alive(claims) == expected
    assert await DirectoryStore(tmp_path).claims_alive(claims) == expected
    await a.leave()
    # Left, the store answers as a reader does: the others' claims are still alive.
    assert await first.claims_alive(claims) == [True, False, False, True, True]
    assert [(m.id, m.alive) for m in await first.replicas()] == [("b", True)]
    await b.leave()
    await first.aclose()
    await second.aclose()


async def test_a_claim_of_odd_bytes_still_names_its_replica(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    member = await store.join(info("a"))
    await store.claim("r", SLOT, SLOT, replica="a")
    where = tmp_path / "schedule" / "claims" / "r" / "2026-07-07T09-00-00-000Z"
    body = json.loads(where.read_text())
    body["note"] = "\udcff"  # a stray byte where nothing reads it
    where.write_bytes(json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogateescape"))
    assert b"\xff" in where.read_bytes()
    assert await store.claims_alive([("r", SLOT)]) == [True]
    await member.leave()
    await store.aclose()


async def test_claims_or_replicas_that_cannot_be_read_are_a_state_fault(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = DirectoryStore(tmp_path)
    claims = tmp_path / "schedule" / "claims"
    claims.mkdir(parents=True)
    (claims / "r").touch()  # where the routine's claims directory should be
    with pytest.raises(StateFault) as refused:
        await store.claims_alive([("r", SLOT)])
    assert str(refused.value) == (
        f"the holds of {tmp_path} are unreadable: ENOTDIR: Not a directory: {claims / 'r'}"
    )
    # One routine's: passed over, said (the others' open claims are still found).
    assert await store.open_claims(["r"], 10) == []
    assert caplog.messages[-1] == (
        "the open claims of r could not be checked (its next visit tries again): ENOTDIR: "
        f"Not a directory: {claims / 'r'}"
    )
    (claims / "r").unlink()
    claims.rmdir()
    claims.write_text("")  # the claims themselves: the walk's fault
    with pytest.raises(StateFault) as refused:
        await store.open_claims(["r"], 10)
    assert str(refused.value) == (
        f"the open claims in {claims} are unreadable: ENOTDIR: Not a directory: {claims}"
    )
    await store.aclose()


async def test_a_join_whose_own_lock_fails_keeps_nothing_open_and_holds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = fcntl.fcntl

    def no_locks_left(fd: int, cmd: int, arg: bytes) -> bytes:
        if cmd == fcntl.F_OFD_SETLK and struct.unpack(FLOCK, arg)[0] == fcntl.F_WRLCK:
            raise OSError(37, "No locks available")
        return real(fd, cmd, arg)

    store = DirectoryStore(tmp_path)
    before = open_fds()
    monkeypatch.setattr(holds.fcntl, "fcntl", no_locks_left)
    with pytest.raises(StateFault) as refused:
        await store.join(info("a"))
    monkeypatch.undo()
    assert str(refused.value) == f"could not join {tmp_path}: ENOLCK: No locks available"
    assert open_fds() == before
    assert probe(tmp_path / "schedule" / "holds" / "00", 0)[0] == fcntl.F_UNLCK  # no fence
    await store.aclose()


# -- threads: the store's limiter, and callers that leave --------------------------------------


class Stall:
    """A blocking call that waits in its thread until ``go``: a stalled disk."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        self.calls = 0

    def __call__(self, *args: object) -> None:
        self.calls += 1
        self.entered.set()
        self.go.wait(30)


async def test_every_blocking_call_of_the_members_waits_for_the_stores_limiter(
    tmp_path: Path,
) -> None:
    limiter = trio.CapacityLimiter(1)
    store = DirectoryStore(tmp_path, limiter=limiter)
    member = await store.join(info("a"))
    calls = {
        "join": lambda: DirectoryStore(tmp_path, limiter=limiter).join(info("b")),
        "claims_alive": lambda: store.claims_alive([("r", SLOT)]),
        "replicas": store.replicas,
        "open_claims": lambda: store.open_claims(["r"], 10),
        "beat": lambda: member.beat(0, T0),
    }
    for name, call in calls.items():
        answers: list[object] = []

        async def run(
            call: Callable[[], Awaitable[object]] = call, answers: list[object] = answers
        ) -> None:
            answers.append(await call())

        async with trio.open_nursery() as nursery, limiter:
            nursery.start_soon(run)
            await wait_all_tasks_blocked()
            waiting = limiter.statistics().tasks_waiting
        assert (name, waiting, len(answers)) == (name, 1, 1)
        if name == "join":
            await answers[0].leave()  # type: ignore[attr-defined]
    async with trio.open_nursery() as nursery, limiter:
        nursery.start_soon(member.leave)
        await wait_all_tasks_blocked()
        waiting = limiter.statistics().tasks_waiting
    assert waiting == 1
    assert keys_alive(tmp_path, None, [replica_key("a")]) == [False]
    await store.aclose()


async def test_a_heartbeat_cut_short_leaves_its_write_to_its_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    member = await store.join(info("a"))
    stall = Stall()
    monkeypatch.setattr(holds, "write_replica", stall)
    left = []
    scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:

        async def beat() -> None:
            with scope:
                await member.beat(1, T0)
            left.append(True)

        nursery.start_soon(beat)
        await trio.to_thread.run_sync(stall.entered.wait)
        scope.cancel()
        await wait_all_tasks_blocked()
        early = list(left)
        stall.go.set()
    assert early == [True]
    assert keys_alive(tmp_path, None, [replica_key("a")]) == [True]  # still a member
    await member.leave()
    await store.aclose()


async def test_a_leave_cut_short_still_lets_go_of_every_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    member = await store.join(info("a"))
    assert await member.take([7]) == [True]
    before = open_fds()
    stall = Stall()
    monkeypatch.setattr(holds, "remove_replica", stall)
    left = []
    scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:

        async def leave() -> None:
            with scope:
                await member.leave()
            left.append(True)

        nursery.start_soon(leave)
        await trio.to_thread.run_sync(stall.entered.wait)
        scope.cancel()
        await wait_all_tasks_blocked()
        early = list(left)
        # The id is free at once: the same process may join as it again.
        alive = keys_alive(tmp_path, None, [replica_key("a"), 7])
        closed = len(before - open_fds())
        stall.go.set()
    assert early == [True]
    assert alive == [False, False]
    assert closed == SHARDS + FENCE_SHARDS
    monkeypatch.undo()
    again = await store.join(info("a"))
    await again.leave()
    await store.aclose()


async def test_a_join_given_up_lets_go_of_what_its_thread_took_once_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    before = open_fds()
    stall = Stall()
    monkeypatch.setattr(holds, "write_replica", stall)
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.join, info("a"))
            await trio.to_thread.run_sync(stall.entered.wait)
            assert keys_alive(tmp_path, None, [replica_key("a")]) == [True]  # its thread holds it
            scope.cancel()
    assert scope.cancelled_caught
    stall.go.set()
    for _ in range(100):  # the thread ends on its own: nothing to wait on but its effect
        if open_fds() == before:
            break
        await trio.to_thread.run_sync(time.sleep, 0.05)
    assert open_fds() == before
    assert keys_alive(tmp_path, None, [replica_key("a")]) == [False]
    assert await store.replicas() == []  # no member: the answers are a reader's
    await store.aclose()


async def test_a_walk_given_up_is_waited_for_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limiter = trio.CapacityLimiter(2)
    store = DirectoryStore(tmp_path, limiter=limiter)
    stall = Stall()
    scan = store._members._open_scan
    running: list[int] = []

    def step(routines: list[str], budget: int) -> list[object]:
        running.append(len(running))
        if len(running) == 1:
            stall()
        return []

    monkeypatch.setattr(scan, "step", step)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.open_claims, ["r"], 10)
        await trio.to_thread.run_sync(stall.entered.wait)
        nursery.cancel_scope.cancel()
    assert running == [0]
    assert limiter.borrowed_tokens == 1  # the walk given up still runs
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.open_claims, ["r"], 10)
        await wait_all_tasks_blocked()
        waited = limiter.borrowed_tokens  # not side by side with the walk still under way
        stall.go.set()
    assert waited == 1
    assert running == [0, 1]
    await store.aclose()


async def test_a_walk_given_up_before_its_thread_started_leaves_none_to_wait_for(
    tmp_path: Path,
) -> None:
    # Every place in the limiter taken (threads stalled on a frozen disk, say): a walk given
    # up while it waits for one started no thread, and the walks after it do not wait for one.
    limiter = trio.CapacityLimiter(1)
    store = DirectoryStore(tmp_path, limiter=limiter)
    await limiter.acquire_on_behalf_of("a stalled thread")
    with trio.move_on_after(0.01) as first:
        await store.open_claims(["r"], 10)
    limiter.release_on_behalf_of("a stalled thread")
    walked = None
    with trio.move_on_after(10):  # (for ever, were the first walk's thread awaited)
        walked = await store.open_claims(["r"], 10)
    assert first.cancelled_caught
    assert walked == []
    await store.aclose()


def wait_for(probe: Callable[[], bool]) -> None:
    """Until ``probe()`` is true (in a thread, in real time; at most 10 s)."""
    deadline = time.monotonic() + 10
    while not probe() and time.monotonic() < deadline:
        time.sleep(0.005)


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


async def test_a_leave_closes_no_descriptor_a_reader_in_a_thread_still_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A reader of who is alive (the status, the reconcile) reads the locks through our own
    # descriptors: closed under it, a descriptor's number could be taken by another open,
    # and a live replica read through the wrong file would look dead. Two readers at once:
    # the last one out closes them.
    store, other = DirectoryStore(tmp_path), DirectoryStore(tmp_path)
    member = await store.join(info("leaving"))
    await other.join(info("staying"))
    entered = [threading.Event(), threading.Event()]
    go = [threading.Event(), threading.Event()]
    order = iter(range(2))
    real = holds.held_by_others

    def held_slowly(fds: dict[int, int], keys: list[int], **kwargs: object) -> list[bool]:
        mine = next(order)
        entered[mine].set()
        go[mine].wait(10)
        return real(fds, keys, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(holds, "held_by_others", held_slowly)
    read: list[list[ReplicaInfo]] = []

    async def replicas() -> None:
        read.append(await store.replicas())

    async with trio.open_nursery() as nursery:
        for reader in range(2):
            nursery.start_soon(replicas)
            await trio.to_thread.run_sync(entered[reader].wait, 10)
        fds = [*member.fds.values()]
        await member.leave()
        member.close_sync()  # (again: nothing more to let go of)
        kept = [all(is_open(fd) for fd in fds)]
        reader = open_holds(tmp_path, range(SHARDS), create=False)
        try:  # its holds went at once all the same: its id is free
            let_go = held_by_others(reader, [replica_key("leaving")]) == [False]
        finally:
            for fd in reader.values():
                os.close(fd)
        go[0].set()
        await trio.to_thread.run_sync(wait_for, lambda: len(read) == 1)
        kept.append(all(is_open(fd) for fd in fds))
        go[1].set()
    assert let_go
    assert kept == [True, True]  # left open while a reader was on them...
    assert not any(is_open(fd) for fd in fds)  # ...and closed by the last one out
    assert all({replica.id: replica.alive for replica in answer}["staying"] for answer in read)
    await other.aclose()
    await store.aclose()


async def test_a_heartbeat_given_up_never_brings_back_the_record_of_a_replica_that_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its rewrite stalled (a frozen disk), its caller gone, then a leave: the leave's removal
    # comes after the rewrite, never before it.
    store = DirectoryStore(tmp_path)
    member = await store.join(info("leaving"))
    entered, go, returned = threading.Event(), threading.Event(), threading.Event()
    real = holds.write_replica

    def stalled(root: Path, record: ReplicaInfo) -> None:
        entered.set()
        go.wait(10)
        real(root, record)
        returned.set()

    monkeypatch.setattr(holds, "write_replica", stalled)
    async with trio.open_nursery() as nursery:
        beat = trio.CancelScope()

        async def beating() -> None:
            with beat:
                await member.beat(1, T0 + timedelta(minutes=1))

        left = trio.Event()

        async def leaving() -> None:
            await member.leave()
            left.set()

        nursery.start_soon(beating)
        await trio.to_thread.run_sync(entered.wait, 10)
        beat.cancel()  # its caller gives up; the rewrite goes on in its thread
        nursery.start_soon(leaving)
        with trio.move_on_after(0.5):  # a leave not held back by the rewrite is done by now
            await left.wait()
        go.set()
    await trio.to_thread.run_sync(returned.wait, 10)
    records = tmp_path / "schedule" / "replicas"
    assert holds._file_name("leaving") not in os.listdir(records)
    monkeypatch.undo()
    await member.beat(2, T0 + timedelta(minutes=2))  # one more, late: it writes nothing
    assert holds._file_name("leaving") not in os.listdir(records)
    assert [replica.id for replica in await store.replicas()] == []
    await store.aclose()


# -- what a member answers from its own files -----------------------------------------------


async def test_a_member_answers_from_the_files_it_opened_for_its_life(tmp_path: Path) -> None:
    first, second = DirectoryStore(tmp_path), DirectoryStore(tmp_path)
    a = await first.join(info("a"))
    b = await second.join(info("b"))
    await first.claim("r", SLOT, SLOT, replica="b")
    await first.claim("q", SLOT, SLOT, replica="a")
    # The holds files unlinked under the members (an operator's clean-up): a reader finds
    # none, the members still see every hold in the files they hold open.
    shutil.rmtree(tmp_path / "schedule" / "holds2")
    claims = [("r", SLOT), ("q", SLOT)]
    assert await first.claims_alive(claims) == [True, True]
    assert await DirectoryStore(tmp_path).claims_alive(claims) == [False, False]
    assert [(m.id, m.alive) for m in await first.replicas()] == [("a", True), ("b", True)]
    assert [m.alive for m in await DirectoryStore(tmp_path).replicas()] == [False, False]
    assert keys_alive(tmp_path, a, [replica_key("a"), replica_key("b"), 5]) == [
        True,
        True,
        False,
    ]
    await a.leave()
    await b.leave()
    await first.aclose()
    await second.aclose()


async def test_a_take_or_a_let_go_the_kernel_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    member = await store.join(info("a"))
    assert await member.take([5]) == [True]
    real = fcntl.fcntl

    def failing(fd: int, cmd: int, arg: bytes) -> bytes:
        if cmd == fcntl.F_OFD_SETLK:
            raise OSError(37, "No locks available")
        return real(fd, cmd, arg)

    monkeypatch.setattr(holds.fcntl, "fcntl", failing)
    with pytest.raises(StateFault) as refused:
        await member.take([6])
    assert str(refused.value) == f"could not take a hold in {tmp_path}: ENOLCK: No locks available"
    assert not member.holds(6)
    member.let_go([5])  # never raises: the lock goes with the process at worst
    monkeypatch.undo()
    assert not member.holds(5)
    await member.leave()
    await store.aclose()


def test_a_reader_makes_nothing_and_closes_what_it_opened_when_a_file_is_refused(
    tmp_path: Path,
) -> None:
    assert keys_alive(tmp_path, None, [1, 2]) == [False, False]
    assert not tmp_path.joinpath("schedule").exists()
    (tmp_path / "schedule" / "holds2").mkdir(parents=True)
    (tmp_path / "schedule" / "holds2" / "01").touch()
    assert keys_alive(tmp_path, None, [1, 2]) == [False, False]
    assert os.listdir(tmp_path / "schedule") == ["holds2"]  # no earlier layout made
    assert os.listdir(tmp_path / "schedule" / "holds2") == ["01"]
    (tmp_path / "schedule" / "holds").mkdir()
    os.mkfifo(tmp_path / "schedule" / "holds" / "01")
    before = open_fds()
    with pytest.raises(StateFault, match="is a FIFO, not a regular file"):
        keys_alive(tmp_path, None, [1])
    assert open_fds() == before


def test_a_missing_holds_file_leaves_out_only_itself(tmp_path: Path) -> None:
    where = tmp_path / "schedule" / "holds2"
    where.mkdir(parents=True)
    (where / "05").touch()
    fds = open_holds(tmp_path, [4, 5], create=False)
    assert sorted(fds) == [5]
    os.close(fds[5])


async def test_a_record_that_cannot_replace_the_last_names_where_it_failed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = DirectoryStore(tmp_path)
    member = await store.join(info("a"))
    where = replicas_dir(tmp_path) / holds._file_name("a")
    where.unlink()
    where.mkdir()
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        await member.beat(1, T0)
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("could not refresh replica a's record: ")
    assert line.endswith(f": {where}")
    assert os.listdir(replicas_dir(tmp_path)) == [where.name]  # its temp file removed
    where.rmdir()
    await member.leave()
    await store.aclose()


async def test_a_claim_is_read_and_warned_about_under_its_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    await store.claim("r", SLOT, SLOT, replica="gone")
    where = tmp_path / "schedule" / "claims" / "r" / "2026-07-07T09-00-00-000Z"
    body = json.loads(where.read_text())
    body["firedAt"] = "then"
    where.write_text(json.dumps(body))
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert await store.claims_alive([("r", SLOT)]) == [False]
    assert [r.getMessage() for r in caplog.records] == [
        f"claim {where} carries an unreadable stamp — using the slot instant"
    ]
    real = os.open

    def refused(path: str, flags: int, *args: object, **kwargs: object) -> int:
        if path == where.name:
            raise PermissionError(13, "Permission denied")
        return real(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", refused)
    with pytest.raises(StateFault) as unreadable:
        await store.claims_alive([("r", SLOT)])
    monkeypatch.undo()
    assert str(unreadable.value) == (
        f"a claim of 'r' is unreadable: EACCES: Permission denied: {where}"
    )
    await store.aclose()


async def test_members_that_cannot_be_read_say_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    (tmp_path / "schedule").mkdir()
    replicas_dir(tmp_path).touch()
    with pytest.raises(StateFault) as refused:
        await store.replicas()
    assert str(refused.value) == (
        f"the replicas of {tmp_path} are unreadable: ENOTDIR: Not a directory: "
        f"{replicas_dir(tmp_path)}"
    )
    (tmp_path / "schedule" / "holds2").touch()
    with pytest.raises(StateFault) as refused:
        await store.claims_alive([("r", SLOT)])
    assert str(refused.value) == (
        f"the holds of {tmp_path} are unusable: ENOTDIR: Not a directory: "
        f"{tmp_path / 'schedule' / 'holds2'}"
    )
    replicas_dir(tmp_path).unlink()
    replicas_dir(tmp_path).mkdir()

    def unlistable(path: object) -> list[str]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "listdir", unlistable)
    with pytest.raises(StateFault) as refused:
        await store.replicas()
    monkeypatch.undo()
    assert str(refused.value) == (
        f"the replicas of {tmp_path} are unreadable: EACCES: Permission denied"
    )
    await store.aclose()


def test_a_presence_never_opened_closes_without_a_word(tmp_path: Path) -> None:
    DirectoryPresence(info("a"), tmp_path, trio.CapacityLimiter(1)).close_sync()


async def test_the_sessions_holds_unreadable_are_one_state_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trio_routines.stores.directory import members

    store = DirectoryStore(tmp_path)
    (tmp_path / "schedule").mkdir()
    (tmp_path / "schedule" / "holds2").touch()  # the locks' own refusal, as it words it
    with pytest.raises(StateFault) as refused:
        await store.sessions_held(["chat"])
    assert str(refused.value) == (
        f"the holds of {tmp_path} are unusable: ENOTDIR: Not a directory: "
        f"{tmp_path / 'schedule' / 'holds2'}"
    )

    def failing(*_: object) -> list[bool]:
        raise OSError(5, "Input/output error", str(tmp_path / "schedule"))

    monkeypatch.setattr(members, "keys_alive", failing)  # any other error of the file system
    with pytest.raises(StateFault) as refused:
        await store.sessions_held(["chat"])
    assert str(refused.value) == (
        f"the holds of {tmp_path} are unreadable: EIO: Input/output error: {tmp_path / 'schedule'}"
    )
    await store.aclose()
