"""Batched reads (stores/newest.py), pinned (issue 11): batch sizes, the read count, a batch read
that answers short, and the places of readers that go: once every call returned, no reader is
counted, none is waiting to start and nothing is queued.
"""

from __future__ import annotations

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
