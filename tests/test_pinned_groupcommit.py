"""Group commit pinned where a disk stalls: a flush given up while it runs or before its thread
started, the one thread a stalled flush keeps, and a writer that leaves while it waits.

Each flush here is a function of the test's (no ``syncfs``), held in its thread by an event, so
that the flush is given up exactly where the test says.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import trio
import trio.testing
from test_groupcommit import wait_for

from trio_routines.stores.durable import opened
from trio_routines.stores.groupcommit import Abandoned, GroupCommit

DEVICE = 1


class Stuck:
    """A flush that records each descriptor it is given and waits for ``release``."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered: list[int] = []
        self.flushed: list[int] = []
        self.started = threading.Event()

    def __call__(self, fd: int) -> None:
        self.entered.append(fd)
        self.started.set()
        assert self.release.wait(timeout=30)
        self.flushed.append(fd)


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as exc:
        if exc.errno != errno.EBADF:
            raise
        return False
    return True


async def test_a_flush_given_up_while_it_runs_tells_every_writer_and_closes_when_it_returns(
    tmp_path: Path,
) -> None:
    flush = Stuck()
    commit = GroupCommit(flush)
    fd = os.open(tmp_path, os.O_RDONLY)
    batch = commit.cover({DEVICE: (opened(), fd)})
    heard: list[OSError] = []

    async def rider() -> None:
        try:
            await commit.wait(batch)
        except OSError as exc:
            heard.append(exc)

    async with trio.open_nursery() as nursery:
        leader = trio.CancelScope()

        async def lead() -> None:
            with leader:
                await commit.wait(batch)

        nursery.start_soon(lead)
        await wait_for(flush.started.is_set)
        nursery.start_soon(rider)
        await trio.testing.wait_all_tasks_blocked()
        assert commit.flushing_since is not None
        assert commit.flushing_since <= trio.current_time()
        leader.cancel()
    # Every writer of the batch hears that its write may or may not be durable.
    assert len(heard) == 1
    assert isinstance(heard[0], Abandoned)
    assert (heard[0].errno, heard[0].strerror) == (
        errno.EIO,
        "the flush was given up before it returned",
    )
    assert batch.error is heard[0]
    assert commit.flushing_since is None
    # The thread still flushes through the descriptor, and closes it once it returns.
    assert is_open(fd)
    flush.release.set()
    await wait_for(lambda: not is_open(fd))
    assert flush.flushed == [fd]


async def test_a_stalled_flush_keeps_one_thread_and_the_next_waits_for_it(tmp_path: Path) -> None:
    # A flush given up is still in its thread (a syncfs cannot be called back): the next
    # flush does not start a second thread beside it, and one given up before its thread
    # started closes its descriptors itself.
    flush = Stuck()
    commit = GroupCommit(flush)
    first = os.open(tmp_path, os.O_RDONLY)
    with trio.move_on_after(0.05):
        await commit.wait(commit.cover({DEVICE: (opened(), first)}))
    assert flush.started.is_set()
    second = os.open(tmp_path, os.O_RDONLY)
    batch = commit.cover({DEVICE: (opened(), second)})
    with trio.move_on_after(0.05):
        await commit.wait(batch)
    assert isinstance(batch.error, Abandoned)
    assert flush.entered == [first]  # no second thread beside the stuck one
    assert not is_open(second)  # never flushed: closed by the leader that gave it up
    third = os.open(tmp_path, os.O_RDONLY)
    done = trio.Event()

    async def next_flush() -> None:
        await commit.wait(commit.cover({DEVICE: (opened(), third)}))
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(next_flush)
        await trio.sleep(0.05)
        assert flush.entered == [first]  # the first is still stuck: the third waits its turn
        assert not done.is_set()
        flush.release.set()
    assert flush.flushed == [first, third]
    assert not is_open(first)
    assert not is_open(third)


def test_a_flush_thread_that_starts_after_it_was_given_up_does_nothing(
    tmp_path: Path,
) -> None:
    flush = Stuck()
    flush.release.set()
    commit = GroupCommit(flush)
    fd = os.open(tmp_path, os.O_RDONLY)
    owner = threading.Lock()
    owner.acquire()  # the leader gave up first: the descriptors are its to close
    answered: list[OSError | None] = []
    thread = threading.Thread(
        target=lambda: answered.append(commit._flush_all([fd], owner)), daemon=True
    )
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive()  # it never waits for the leader
    (error,) = answered
    assert isinstance(error, Abandoned)
    assert (error.errno, error.strerror) == (errno.EIO, "the flush was given up before it started")
    assert flush.flushed == []
    assert is_open(fd)
    os.close(fd)


async def test_a_writer_that_leaves_while_it_waits_is_not_woken_by_the_flush(
    tmp_path: Path,
) -> None:
    flush = Stuck()
    commit = GroupCommit(flush)
    first = os.open(tmp_path, os.O_RDONLY)
    running = commit.cover({DEVICE: (opened(), first)})
    second = os.open(tmp_path, os.O_RDONLY)
    left = trio.CancelScope()
    outcomes: list[str] = []

    async def leaving() -> None:
        with left:
            await commit.wait(commit.cover({DEVICE: (opened(), second)}))  # the next batch
        outcomes.append("left" if left.cancelled_caught else "flushed")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(commit.wait, running)
        await wait_for(flush.started.is_set)
        nursery.start_soon(leaving)
        await trio.testing.wait_all_tasks_blocked()
        left.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert outcomes == ["left"]
        flush.release.set()
    assert flush.flushed == [first]
    assert outcomes == ["left"]
    os.close(second)  # its batch is next: the writer that left handed it over for nobody


async def test_a_lull_that_fails_wakes_the_writers_waiting_and_one_leads_the_flush(
    tmp_path: Path,
) -> None:
    flushed: list[int] = []
    commit = GroupCommit(flushed.append)
    fd = os.open(tmp_path, os.O_RDONLY)
    batch = commit.cover({DEVICE: (opened(), fd)})
    lulled = trio.Event()
    broken: list[str] = []

    async def broken_lull() -> None:
        lulled.set()
        await trio.testing.wait_all_tasks_blocked()
        raise RuntimeError("the lull broke")

    async def leader() -> None:
        try:
            await commit.wait(batch, broken_lull)
        except RuntimeError as exc:
            broken.append(str(exc))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(leader)
            await lulled.wait()
            nursery.start_soon(commit.wait, batch)  # waits while the lull runs, then leads
    assert broken == ["the lull broke"]
    assert flushed == [fd]
    assert batch.done
