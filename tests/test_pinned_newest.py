"""Batched reads (stores/newest.py), pinned (issue 11): batch sizes, the read count, a batch read
that answers short, and the places of readers that go: once every call returned, no reader is
counted, none is waiting to start and nothing is queued; how many readers freed places wake,
and a request put back in the queue that leaves it.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from trio_routines.stores.newest import BatchedReads


class Gated:
    """A batch read held until the test opens its gate; answers each routine with its name."""

    def __init__(self, short: bool = False) -> None:
        self.gates: list[trio.Event] = []
        self.batches: list[list[str]] = []
        self.short = short

    async def read_batch(self, routines: list[str]) -> list[str | Exception]:
        self.batches.append(list(routines))
        gate = trio.Event()
        self.gates.append(gate)
        await gate.wait()
        return [] if self.short else [f"read {r}" for r in routines]

    async def open_all(self) -> None:
        for _ in range(50):
            for gate in self.gates:
                gate.set()
            await trio.testing.wait_all_tasks_blocked()


def idle(reads: BatchedReads[str]) -> tuple[int, int, list[object]]:
    return (reads._readers, reads._unstarted, list(reads._queue))


async def test_a_herd_is_read_in_batches_of_at_most_batch() -> None:
    gated = Gated()
    reads: BatchedReads[str] = BatchedReads(gated.read_batch, readers=2, batch=3)
    answers: dict[str, str] = {}

    async def ask(name: str) -> None:
        answers[name] = await reads.read(name)

    names = [f"r{i}" for i in range(11)]
    async with trio.open_nursery() as nursery:
        for name in names:
            nursery.start_soon(ask, name)
        await trio.testing.wait_all_tasks_blocked()
        await gated.open_all()
    assert answers == {name: f"read {name}" for name in names}
    assert max(len(batch) for batch in gated.batches) == 3
    assert sorted(r for batch in gated.batches for r in batch) == sorted(names)
    assert reads.reads == len(gated.batches)
    assert idle(reads) == (0, 0, [])


async def test_a_batch_read_that_answers_short_fails_its_reader_by_count() -> None:
    gated = Gated(short=True)
    reads: BatchedReads[str] = BatchedReads(gated.read_batch)
    errors: list[str] = []

    async def ask() -> None:
        try:
            await reads.read("r0")
        except RuntimeError as exc:
            errors.append(str(exc))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        await gated.open_all()
    assert errors == ["a batch read answered 0 of 1"]
    assert idle(reads) == (0, 0, [])


async def test_readers_that_go_before_or_while_reading_keep_no_place() -> None:
    gated = Gated()
    reads: BatchedReads[str] = BatchedReads(gated.read_batch, readers=2, batch=2)
    scopes = {name: trio.CancelScope() for name in ("a", "b", "c", "d", "e")}
    answers: dict[str, str] = {}

    async def ask(name: str) -> None:
        with scopes[name]:
            answers[name] = await reads.read(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask, "a")
        scopes["a"].cancel()  # goes at once: before it read
        await trio.testing.wait_all_tasks_blocked()
        assert idle(reads) == (0, 0, [])
        for name in ("b", "c", "d", "e"):
            nursery.start_soon(ask, name)
            await trio.testing.wait_all_tasks_blocked()
        assert gated.batches == [["b"], ["c"]]  # "d" and "e" queue
        scopes["d"].cancel()  # goes while queued
        await trio.testing.wait_all_tasks_blocked()
        scopes["b"].cancel()  # a reader cut off while reading
        await trio.testing.wait_all_tasks_blocked()
        await gated.open_all()
    assert answers == {name: f"read {name}" for name in ("c", "e")}
    assert "d" not in [r for batch in gated.batches for r in batch]
    assert idle(reads) == (0, 0, [])


async def _one_at_a_time(nursery: trio.Nursery, ask: Any, names: list[str]) -> None:
    """Start callers one at a time, so that each finds the places as the last one left them:
    the first ones read alone, the rest queue in this order."""
    for name in names:
        nursery.start_soon(ask, name)
        await trio.testing.wait_all_tasks_blocked()


@pytest.mark.parametrize(
    ("readers", "batch", "queued", "heads", "read"),
    [
        # One place, freed: one reader takes the queue's head and fills its batch.
        (1, 2, 3, ["q0"], ["q0", "q1"]),
        # Two places freed at once: one new reader covers a queue of three.
        (2, 3, 3, ["q0"], ["q0", "q1", "q2"]),
        # ... a queue of four takes two, the second woken before the first took its batch.
        (2, 3, 4, ["q0", "q1"], ["q0", "q1", "q2", "q3"]),
    ],
)
async def test_freed_places_wake_as_many_readers_as_the_queue_needs(
    readers: int, batch: int, queued: int, heads: list[str], read: list[str]
) -> None:
    gated = Gated()
    reads: BatchedReads[str] = BatchedReads(gated.read_batch, readers=readers, batch=batch)
    answers: dict[str, str] = {}

    async def ask(name: str) -> None:
        answers[name] = await reads.read(name)

    first = [f"x{i}" for i in range(readers)]
    waiting = [f"q{i}" for i in range(queued)]
    async with trio.open_nursery() as nursery:
        await _one_at_a_time(nursery, ask, first + waiting)
        assert gated.batches == [[name] for name in first]
        for gate in gated.gates:
            gate.set()  # every place frees in the same step
        await trio.testing.wait_all_tasks_blocked()
        taken = gated.batches[readers:]  # which of two readers runs first is Trio's choice
        assert sorted(each[0] for each in taken) == heads
        assert sorted(name for each in taken for name in each) == read
        await gated.open_all()
    assert answers == {name: f"read {name}" for name in first + waiting}
    assert idle(reads) == (0, 0, [])


async def test_a_request_put_back_in_the_queue_can_leave_it() -> None:
    """A reader cut off puts the rest of its batch back; a caller cancelled in the same step
    either leaves the batch before (Trio picks the order) or leaves the queue after: either
    way it is not read. Repeated, so that both orders are met."""
    for _ in range(24):
        await _cut_off_while_one_of_its_batch_goes()


async def _cut_off_while_one_of_its_batch_goes() -> None:
    gated = Gated()
    reads: BatchedReads[str] = BatchedReads(gated.read_batch, readers=1, batch=3)
    scopes = {name: trio.CancelScope() for name in ("x", "q0", "q1", "q2", "q3")}
    answers: dict[str, str] = {}

    async def ask(name: str) -> None:
        with scopes[name]:
            answers[name] = await reads.read(name)

    async with trio.open_nursery() as nursery:
        await _one_at_a_time(nursery, ask, list(scopes))
        gated.gates[0].set()  # "x" read: "q0" reads the next three
        await trio.testing.wait_all_tasks_blocked()
        assert gated.batches == [["x"], ["q0", "q1", "q2"]]
        scopes["q0"].cancel()  # cut off: "q1" and "q2" go back to the queue
        scopes["q2"].cancel()
        await trio.testing.wait_all_tasks_blocked()
        await gated.open_all()
    assert gated.batches == [["x"], ["q0", "q1", "q2"], ["q1", "q3"]]
    assert answers == {name: f"read {name}" for name in ("x", "q1", "q3")}
    assert idle(reads) == (0, 0, [])
