"""Group commit in the state directory: claims (and settles) share one flush per batch.

The flush is injected (``DirectoryStore(syncfs=...)``): a real ``syncfs`` wrapped so that the
test sees when it starts and ends, holds it, or makes it fail. What must hold:

* a claim is reported taken only after a flush that started after its file was written has
  returned -- so a turn never starts before its claim is durable;
* claims arriving while a flush runs ride on the next one, all of them (batching), and a lone
  claim waits for exactly one flush (no added delay);
* a flush that fails fails its whole batch: every claim of it is removed again and raised as a
  state fault, and none of them fires; the same slots claim fine afterwards.
"""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from trio_routines.errors import StateFault
from trio_routines.instants import slot_name
from trio_routines.records import ClaimStatus, Outcome
from trio_routines.routines import Routine
from trio_routines.scheduler import Scheduler
from trio_routines.stores.directory import DirectoryStore
from trio_routines.stores.durable import SYNCFS, opened
from trio_routines.stores.groupcommit import GroupCommit
from trio_routines.testing import ScriptedAgent

pytestmark = pytest.mark.skipif(SYNCFS is None, reason="group commit needs syncfs (Linux)")

SLOT = datetime(2026, 7, 7, 9, tzinfo=UTC)
NAMES = [f"r{i:03}" for i in range(40)]


def claim_files(root: Path) -> set[str]:
    claims = root / "schedule" / "claims"
    if not claims.is_dir():
        return set()
    return {f"{d.name}/{f.name}" for d in claims.iterdir() for f in d.iterdir()}


class Flush:
    """A real syncfs that records what was on disk when each flush started."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: list[set[str]] = []
        self.completed: list[set[str]] = []
        self.hold = threading.Event()
        self.hold.set()
        self.fail_on: set[int] = set()  # 1-based flush numbers that fail

    def __call__(self, fd: int) -> None:
        seen = claim_files(self.root)
        self.started.append(seen)
        number = len(self.started)
        assert self.hold.wait(timeout=30)
        if number in self.fail_on:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        assert SYNCFS is not None
        SYNCFS(fd)
        self.completed.append(seen)


async def wait_for(predicate: Callable[[], bool]) -> None:
    with trio.fail_after(20):
        while not predicate():  # noqa: ASYNC110 -- the condition lives in worker threads
            await trio.sleep(0.005)


async def test_a_claim_is_reported_taken_only_after_a_flush_that_covered_it(
    tmp_path: Path,
) -> None:
    flush = Flush(tmp_path)
    store = DirectoryStore(tmp_path, syncfs=flush)
    problems: list[str] = []

    async def claim(name: str) -> None:
        result = await store.claim(name, SLOT, SLOT)
        assert result.status is ClaimStatus.TAKEN
        mine = f"{name}/{slot_name(SLOT)}"
        if not any(mine in seen for seen in flush.completed):
            problems.append(f"{mine} reported taken before a flush that covered it returned")

    async with trio.open_nursery() as nursery:
        for name in NAMES:
            nursery.start_soon(claim, name)
    assert problems == []
    assert 1 <= store.flushes <= len(NAMES)


async def test_claims_arriving_during_a_flush_share_the_next_one(tmp_path: Path) -> None:
    flush = Flush(tmp_path)
    store = DirectoryStore(tmp_path, syncfs=flush)
    flush.hold.clear()
    taken: list[str] = []

    async def claim(name: str) -> None:
        if (await store.claim(name, SLOT, SLOT)).taken:
            taken.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(claim, NAMES[0])
        await wait_for(lambda: len(flush.started) == 1)  # the first flush runs, held
        for name in NAMES[1:]:
            nursery.start_soon(claim, name)
        await wait_for(lambda: len(claim_files(tmp_path)) == len(NAMES))
        assert taken == []  # nothing is taken while its flush has not returned
        flush.hold.set()
    assert sorted(taken) == NAMES
    assert store.flushes == 2  # the lone first claim's flush, then one for all the others
    assert flush.started[1] == claim_files(tmp_path)

    # A lone claim later waits for exactly one flush of its own.
    assert (await store.claim(NAMES[0], SLOT.replace(hour=10), SLOT)).taken
    assert store.flushes == 3


async def test_a_failed_flush_removes_every_claim_of_its_batch_and_none_fires(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    flush = Flush(tmp_path)
    store = DirectoryStore(tmp_path, syncfs=flush)
    routines = [Routine(name=name, prompt="p", cron="0 9 * * *") for name in NAMES]
    agent = ScriptedAgent()
    scheduler = Scheduler(agent=agent, store=store, routines=routines, wakeups=False)
    flush.hold.clear()
    flush.fail_on = {2}
    outcomes: dict[str, str] = {}

    async def fire(name: str) -> None:
        try:
            result = await scheduler.fire(name, SLOT)
        except StateFault as exc:
            outcomes[name] = str(exc)
        else:
            outcomes[name] = "fired" if result.claimed else str(result.reason)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fire, NAMES[0])
        await wait_for(lambda: len(flush.started) == 1)  # flush 1 (NAMES[0]) held
        for name in NAMES[1:]:
            nursery.start_soon(fire, name)
        await wait_for(lambda: len(claim_files(tmp_path)) == len(NAMES))
        flush.hold.set()  # flush 1 succeeds, flush 2 (every other claim) fails
    assert outcomes.pop(NAMES[0]) == "fired"
    assert [t.session for t in agent.turns] == [f"routine:{NAMES[0]}"]  # none of the batch
    assert sorted(outcomes) == NAMES[1:]
    for name, text in outcomes.items():
        assert f"{name}/{slot_name(SLOT)} durable" in text
        assert "EIO" in text
    assert claim_files(tmp_path) == {f"{NAMES[0]}/{slot_name(SLOT)}"}  # the batch removed
    assert not [
        r for r in caplog.records if r.levelno >= logging.WARNING and "never run" in r.getMessage()
    ]

    # Nothing was burned: the same slots claim and fire once the flush works again.
    for name in NAMES[1:4]:
        result = await scheduler.fire(name, SLOT)
        assert result.claimed
        assert result.outcome is Outcome.COMPLETED


async def test_settles_ride_on_the_group_commit_and_a_failed_flush_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    flush = Flush(tmp_path)
    store = DirectoryStore(tmp_path, syncfs=flush)
    assert (await store.claim("daily", SLOT, SLOT)).taken
    assert await store.settle("daily", SLOT, Outcome.COMPLETED, 5)
    assert store.flushes == 2
    flush.fail_on = {3}
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert not await store.settle("daily", SLOT, Outcome.FAILED, 6)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "could not record the failed outcome" in warning
    assert "EIO" in warning


async def test_a_batch_flushes_through_its_earliest_opened_descriptor(tmp_path: Path) -> None:
    # syncfs reports writeback errors since its descriptor was opened: the batch's one must
    # have been opened before every write it covers, whoever asked for the flush first.
    hold = threading.Event()
    flushed: list[int] = []  # the inode of each flush's directory

    def flush(fd: int) -> None:
        flushed.append(os.fstat(fd).st_ino)
        assert hold.wait(timeout=30)

    inode = {name: directory(tmp_path / name) for name in ("lone", "earlier", "later")}
    commit = GroupCommit(flush)
    fds_before = len(os.listdir("/proc/self/fd"))
    device = os.stat(tmp_path).st_dev

    async with trio.open_nursery() as nursery:
        lone = os.open(tmp_path / "lone", os.O_RDONLY)
        nursery.start_soon(commit.durable, device, lone, opened())
        await wait_for(lambda: len(flushed) == 1)  # the lone flush runs, held
        earlier = os.open(tmp_path / "earlier", os.O_RDONLY)
        earlier_ticket = opened()
        later = os.open(tmp_path / "later", os.O_RDONLY)
        nursery.start_soon(commit.durable, device, later, opened())  # asks first, opened last
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(commit.durable, device, earlier, earlier_ticket)
        await trio.testing.wait_all_tasks_blocked()
        hold.set()
    assert flushed == [inode["lone"], inode["earlier"]]
    assert commit.flushes == 2
    assert len(os.listdir("/proc/self/fd")) == fds_before  # every descriptor closed


def directory(path: Path) -> int:
    path.mkdir()
    return path.stat().st_ino


def test_syncfs_raises_the_errno_of_a_failed_call_with_its_text() -> None:
    from trio_routines.stores import durable

    with pytest.raises(OSError, match="Bad file descriptor") as failed:
        durable.syncfs(-1)
    assert failed.value.errno == errno.EBADF
    assert failed.value.strerror == os.strerror(errno.EBADF)


def test_without_a_libc_syncfs_syncfs_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from trio_routines.stores import durable

    monkeypatch.setattr(durable, "_SYNCFS", None)
    with pytest.raises(OSError, match=r"^\[Errno 38\] syncfs is not available on this platform$"):
        durable.syncfs(0)


def test_syncfs_is_found_in_the_c_library_on_linux_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import ctypes

    from trio_routines.stores import durable

    found = durable._libc_syncfs()
    assert found is not None
    assert found.argtypes == [ctypes.c_int]
    assert found.restype is ctypes.c_int
    ctypes.set_errno(0)
    assert found(-1) == -1
    assert ctypes.get_errno() == errno.EBADF  # the C library's errno is kept for syncfs
    # where the process's own symbols have none, the C library's usual name is tried
    real = durable.ctypes.CDLL
    asked: list[str | None] = []

    def only_by_name(library: str | None, **kwargs: Any) -> Any:
        asked.append(library)
        if library is None:
            raise OSError("no symbols of the process")
        return real(library, **kwargs)

    monkeypatch.setattr(durable.ctypes, "CDLL", only_by_name)
    assert durable._libc_syncfs() is not None
    assert asked == [None, "libc.so.6"]
    monkeypatch.setattr(durable.ctypes, "CDLL", real)
    monkeypatch.setattr(durable.sys, "platform", "darwin")
    assert durable._libc_syncfs() is None
    monkeypatch.setattr(durable.sys, "platform", "linux")

    def no_library(*args: object, **kwargs: object) -> None:
        raise OSError("no such library")

    monkeypatch.setattr(durable.ctypes, "CDLL", no_library)
    assert durable._libc_syncfs() is None
    assert durable.libc_function("syncfs") is None


def test_the_c_library_is_found_without_running_a_program(tmp_path: Path) -> None:
    # ctypes.util.find_library runs ldconfig, or a C compiler found on the PATH, to name the
    # C library: importing the stores must run no program of the machine's.
    script = (
        "import subprocess\n"
        "def refused(*args, **kwargs):\n"
        "    raise AssertionError(f'a program was run: {args!r}')\n"
        "subprocess.Popen = refused\n"
        "from trio_routines.stores import durable\n"
        "from trio_routines.stores.directory import spares\n"
        "assert durable.SYNCFS is not None and spares._RENAMEAT2 is not None\n"
        "assert durable.libc_function('no_such_function_anywhere') is None\n"
        "print('found')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "found\n", "")


async def test_a_flush_that_breaks_leaves_its_batch_not_durable(tmp_path: Path) -> None:
    # A flush that raises something else than OSError (a bug) reaches its leader; every other
    # writer of the batch is told its write is not durable, never that it is.
    def flush(fd: int) -> None:
        raise RuntimeError("the flush broke")

    commit = GroupCommit(flush)
    device = os.stat(tmp_path).st_dev
    first = os.open(tmp_path, os.O_RDONLY)
    batch = commit.cover({device: (opened(), first)})
    second = os.open(tmp_path, os.O_RDONLY)
    assert commit.cover({device: (opened(), second)}) is batch
    heard: list[str] = []

    async def wait() -> None:
        try:
            await commit.wait(batch)
        except RuntimeError as exc:
            heard.append(f"leader: {exc}")
        except OSError as exc:
            heard.append(f"rider: {errno.errorcode[exc.errno or 0]} {exc.strerror}")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        nursery.start_soon(wait)
    assert sorted(heard) == ["leader: the flush broke", "rider: EIO the flush did not complete"]


async def test_a_batch_flushes_each_file_system_it_covers(tmp_path: Path) -> None:
    flushed: list[int] = []
    commit = GroupCommit(flushed.append)
    fds = {device: (opened(), os.open(tmp_path, os.O_RDONLY)) for device in (7, 8)}
    expected = sorted(fd for _, fd in fds.values())
    await commit.wait(commit.cover(fds))
    assert sorted(flushed) == expected  # one flush per file system, through its descriptor


async def test_a_lull_that_fails_leaves_the_batch_to_the_next_flush(tmp_path: Path) -> None:
    flushed: list[int] = []
    commit = GroupCommit(flushed.append)
    device = os.stat(tmp_path).st_dev
    fd = os.open(tmp_path, os.O_RDONLY)
    batch = commit.cover({device: (opened(), fd)})

    async def broken_lull() -> None:
        raise RuntimeError("the lull broke")

    with pytest.raises(RuntimeError, match="the lull broke"):
        await commit.wait(batch, broken_lull)
    assert flushed == []
    with trio.fail_after(5):
        await commit.wait(batch)  # not stuck: the next leader flushes it
    assert flushed == [fd]
    assert batch.done
