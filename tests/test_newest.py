"""Newest-claim reads batched across concurrent callers (stores/newest.py)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trio
import trio.testing

from trio_routines.errors import StateFault
from trio_routines.records import Fire
from trio_routines.stores.newest import BATCH, READERS, BatchedReads, in_threads

SLOT = datetime(2026, 7, 7, 10, tzinfo=UTC)


def fire_of(routine: str) -> Fire:
    minutes = int(routine[1:])
    return Fire(slot=SLOT + timedelta(minutes=minutes), fired_at=SLOT)


class Reader:
    """A read_sync that answers from the routine's name, and counts its thread calls."""

    def __init__(self, limiter: trio.CapacityLimiter) -> None:
        self.limiter = limiter
        self.calls = 0
        self.threads: set[int] = set()

    def read_sync(self, routine: str) -> Fire | None:
        self.threads.add(threading.get_ident())
        if routine == "broken":
            raise StateFault("the newest claim of 'broken' is unreadable")
        if routine == "none":
            return None
        return fire_of(routine)

    async def run(self, fn: Any, *args: Any) -> Any:
        self.calls += 1
        return await trio.to_thread.run_sync(fn, *args, limiter=self.limiter)


async def test_concurrent_reads_each_get_their_own_answer_in_few_thread_calls() -> None:
    reader = Reader(trio.CapacityLimiter(16))
    reads = BatchedReads(in_threads(reader.read_sync, reader.run))
    names = [f"r{i}" for i in range(500)]
    answers: dict[str, Fire | None] = {}

    async def ask(name: str) -> None:
        answers[name] = await reads.read(name)

    async with trio.open_nursery() as nursery:
        for name in [*names, "none"]:
            nursery.start_soon(ask, name)
    assert answers == {**{name: fire_of(name) for name in names}, "none": None}
    # The first caller yields before it reads, so the herd queues and joins it; places go to
    # the queue only as many as it takes to read it in full batches.
    assert reader.calls == -(-(len(names) + 1) // BATCH)


async def test_a_fault_reaches_only_its_own_caller() -> None:
    reader = Reader(trio.CapacityLimiter(16))
    reads = BatchedReads(in_threads(reader.read_sync, reader.run))
    outcomes: dict[str, object] = {}

    async def ask(name: str) -> None:
        try:
            outcomes[name] = await reads.read(name)
        except StateFault as exc:
            outcomes[name] = str(exc)

    async with trio.open_nursery() as nursery:
        for name in ["r1", "broken", "r2"]:
            nursery.start_soon(ask, name)
    assert outcomes == {
        "r1": fire_of("r1"),
        "broken": "the newest claim of 'broken' is unreadable",
        "r2": fire_of("r2"),
    }


class GatedRun:
    """A ``run`` that holds every call until the test opens its gate (no threads)."""

    def __init__(self) -> None:
        self.gates: list[trio.Event] = []

    async def run(self, fn: Any, *args: Any) -> Any:
        gate = trio.Event()
        self.gates.append(gate)
        await gate.wait()
        return fn(*args)


async def test_a_reader_cancelled_before_its_thread_hands_its_batch_back() -> None:
    gated = GatedRun()
    reads = BatchedReads(in_threads(Reader(trio.CapacityLimiter(1)).read_sync, gated.run))
    answers: dict[str, Fire | None] = {}
    names = [f"r{i}" for i in range(READERS + 6)]
    scopes = {name: trio.CancelScope() for name in names}
    doomed = names[READERS]

    async def ask(name: str) -> None:
        with scopes[name]:
            answers[name] = await reads.read(name)

    async with trio.open_nursery() as nursery:
        for name in names:  # READERS readers, then six that queue, in this order
            nursery.start_soon(ask, name)
            await trio.testing.wait_all_tasks_blocked()
        assert len(gated.gates) == READERS
        gated.gates[0].set()  # r0 is read and leaves; the first queued reads the six
        await trio.testing.wait_all_tasks_blocked()
        assert len(gated.gates) == READERS + 1
        assert set(answers) == {"r0"}
        scopes[doomed].cancel()  # cut off before that batch's "thread" ran
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(len(names)):  # the five others queue again, and are read
            for gate in gated.gates:
                gate.set()
            await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()  # whoever would still wait for ever
    assert answers == {name: fire_of(name) for name in names if name != doomed}


@pytest.mark.parametrize("together", [False, True])
async def test_readers_all_cancelled_leave_no_queued_read_stranded(together: bool) -> None:
    gated = GatedRun()
    reads = BatchedReads(in_threads(Reader(trio.CapacityLimiter(1)).read_sync, gated.run))
    answers: dict[str, Fire | None] = {}
    names = [f"r{i}" for i in range(READERS + 2 * BATCH)]
    scopes = {name: trio.CancelScope() for name in names}

    async def ask(name: str) -> None:
        with scopes[name]:
            answers[name] = await reads.read(name)

    async with trio.open_nursery() as nursery:
        for name in names:  # in this order: the first READERS are the readers
            nursery.start_soon(ask, name)
            await trio.testing.wait_all_tasks_blocked()
        assert len(gated.gates) == READERS  # every reader waits on its "thread"
        for name in names[:READERS]:
            scopes[name].cancel()  # every reader goes; the queue gets readers of its own
        if not together:  # (together: the next readers go before they read)
            await trio.testing.wait_all_tasks_blocked()
        for name in [*names[READERS : READERS + 3], names[-1]]:  # waiting callers go too
            scopes[name].cancel()
        for _ in range(len(names)):
            for gate in gated.gates:
                gate.set()
            await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()  # whoever would still wait for ever
    assert answers == {name: fire_of(name) for name in names[READERS + 3 : -1]}


async def test_a_reader_leaves_with_its_own_answer_without_reading_on() -> None:
    gated = GatedRun()
    reads = BatchedReads(in_threads(Reader(trio.CapacityLimiter(1)).read_sync, gated.run))
    answers: dict[str, Fire | None] = {}
    names = [f"r{i}" for i in range(READERS + 3 * BATCH)]

    async def ask(name: str) -> None:
        answers[name] = await reads.read(name)

    async with trio.open_nursery() as nursery:
        for name in names:  # in this order: the first READERS are the readers
            nursery.start_soon(ask, name)
            await trio.testing.wait_all_tasks_blocked()
        for reader in range(READERS):
            gated.gates[reader].set()  # each reader's own read returns ...
            await trio.testing.wait_all_tasks_blocked()
            assert f"r{reader}" in answers  # ... and its caller has its answer at once
        while len(answers) < len(names):
            for gate in gated.gates:
                gate.set()
            await trio.testing.wait_all_tasks_blocked()
    assert answers == {name: fire_of(name) for name in names}


@pytest.mark.parametrize("count", [1, BATCH, BATCH + 1])
async def test_sequential_reads_need_one_thread_call_each(count: int) -> None:
    reader = Reader(trio.CapacityLimiter(16))
    reads = BatchedReads(in_threads(reader.read_sync, reader.run))
    for i in range(count):
        assert await reads.read(f"r{i}") == fire_of(f"r{i}")
    assert reader.calls == count
