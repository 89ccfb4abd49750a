"""The batcher both stores share, and the writer's turns of the state directory.

A flush is a coroutine the test holds open; what must hold:

* callers that arrive together ride on one flush, at most ``max_batch`` and one per key each;
* a caller cancelled while queued leaves the queue (its item never reaches a flush), and the
  lead passes on;
* in flight, an impatient caller gives up at once (``gave_up``, its answer dropped), a patient
  one gets its answer and meets its cancellation at its next checkpoint;
* urgent holders of the writer's turns go before the others.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio
import trio.testing

from trio_routines.stores import batch
from trio_routines.stores.batch import Answer, Batcher, Entry, Turns, each


class Flushes:
    """A flush that records each batch and waits for the test to let it finish."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.entries: list[Entry[str, str]] = []
        self.go = trio.Event()
        self.started = trio.Event()

    async def __call__(self, entries: Sequence[Entry[str, str]]) -> list[Answer[str]]:
        self.batches.append([entry.item for entry in entries])
        self.entries.extend(entries)
        self.started.set()
        await self.go.wait()
        return [Answer(value=f"done {entry.item}") for entry in entries]


def batcher(flushes: Flushes, *, patient: bool = False, most: int = 100) -> Batcher[str, str]:
    def key(item: str) -> str:
        return item.split("@")[0]

    if patient:
        return Batcher(flushes, key=key, max_batch=most, patient=True)
    return Batcher(flushes, key=key, max_batch=most)  # impatient by default (PostgreSQL's)


async def test_a_herd_rides_on_few_flushes_each_key_once_at_most_max_batch() -> None:
    flushes = Flushes()
    batches = batcher(flushes, most=3)
    answers: dict[str, str] = {}

    async def submit(item: str) -> None:
        answers[item] = await batches.submit(item)

    items = ["a", "b", "a@2", "a@3", "c", "d", "e"]
    async with trio.open_nursery() as nursery:
        for item in items:
            nursery.start_soon(submit, item)
            await trio.testing.wait_all_tasks_blocked()  # queued in this order
        flushes.go.set()
    assert answers == {item: f"done {item}" for item in items}
    # the first caller leads alone (the rest came while it flushed); then the queue, three at
    # most and one "a" per batch, the second "a" waiting for the next
    assert flushes.batches == [["a"], ["b", "a@2", "c"], ["a@3", "d", "e"]]
    assert batches.batches == 3


async def test_a_flush_that_raises_answers_every_caller_of_its_batch() -> None:
    async def flush(entries: Sequence[Entry[str, str]]) -> list[Answer[str]]:
        raise OSError(5, "the disk is gone")

    batches: Batcher[str, str] = Batcher(flush, key=lambda item: item)
    errors: list[str] = []

    async def submit(item: str) -> None:
        with pytest.raises(OSError, match="the disk is gone"):
            await batches.submit(item)
        errors.append(item)

    async with trio.open_nursery() as nursery:
        for item in "xyz":
            nursery.start_soon(submit, item)
    assert sorted(errors) == ["x", "y", "z"]


async def test_a_caller_cancelled_while_queued_leaves_the_queue_and_the_lead_passes_on() -> None:
    flushes = Flushes()
    batches = batcher(flushes)
    answers: dict[str, str] = {}

    async def submit(item: str) -> None:
        answers[item] = await batches.submit(item)

    scope = trio.CancelScope()

    async def cancelled_submit() -> None:
        with scope:
            await submit("second")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(submit, "first")
        await flushes.started.wait()  # "first" is in flight, held
        nursery.start_soon(cancelled_submit)  # queued first: it would lead the next batch
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(submit, "third")
        await trio.testing.wait_all_tasks_blocked()
        scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        flushes.go.set()
    assert flushes.batches == [["first"], ["third"]]
    assert answers == {"first": "done first", "third": "done third"}


@pytest.mark.parametrize("patient", [False, True])
async def test_a_caller_cancelled_in_flight_gives_up_or_waits_for_its_answer(
    patient: bool,
) -> None:
    flushes = Flushes()
    batches = batcher(flushes, patient=patient)
    got: list[str] = []
    cancelled_at_next_checkpoint: list[bool] = []

    async def lead() -> None:
        got.append(await batches.submit("lead"))

    async def rider(scope: trio.CancelScope) -> None:
        with scope:
            got.append(await batches.submit("rider"))
            try:
                await trio.lowlevel.checkpoint()
            except trio.Cancelled:
                cancelled_at_next_checkpoint.append(True)
                raise

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lead)
        await flushes.started.wait()  # the lead's batch is in flight, held
        nursery.start_soon(batches.submit, "second")  # queued first: it leads the next batch
        await trio.testing.wait_all_tasks_blocked()
        scope = trio.CancelScope()
        nursery.start_soon(rider, scope)  # and the rider rides on it
        await trio.testing.wait_all_tasks_blocked()
        first, flushes.go, flushes.started = flushes.go, trio.Event(), trio.Event()
        first.set()
        await flushes.started.wait()  # the rider's batch is in flight, held
        (entry,) = [e for e in flushes.entries if e.item == "rider"]
        assert entry.in_flight
        scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        flushes.go.set()
    assert flushes.batches == [["lead"], ["second", "rider"]]
    if patient:
        assert got == ["done lead", "done rider"]
        assert cancelled_at_next_checkpoint == [True]
        assert not entry.gave_up
    else:
        assert got == ["done lead"]
        assert cancelled_at_next_checkpoint == []
        assert entry.gave_up


def test_each_answers_every_item_with_its_value_or_its_error() -> None:
    def half(n: int) -> int:
        if n % 2:
            raise ValueError(f"{n} is odd")
        return n // 2

    answers = each(half, [4, 3, 2])
    assert [answer.value for answer in answers] == [2, None, 1]
    assert [str(answer.error) if answer.error else None for answer in answers] == [
        None,
        "3 is odd",
        None,
    ]
    with pytest.raises(ValueError, match="3 is odd"):
        answers[1].unwrap()


async def test_turns_go_to_urgent_holders_first_then_in_arrival_order() -> None:
    turns = Turns()
    order: list[str] = []
    release = trio.Event()

    async def hold(name: str, urgent: bool, scope: trio.CancelScope | None = None) -> None:
        with scope or trio.CancelScope():
            async with turns.hold(urgent=urgent):
                order.append(name)
                if name == "first":
                    await release.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold, "first", False)
        await trio.testing.wait_all_tasks_blocked()
        for name, urgent in [("rest 1", False), ("urgent 1", True), ("rest 2", False)]:
            nursery.start_soon(hold, name, urgent)
            await trio.testing.wait_all_tasks_blocked()
        gone = trio.CancelScope()
        nursery.start_soon(hold, "cancelled", True, gone)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(hold, "urgent 2", True)
        await trio.testing.wait_all_tasks_blocked()
        gone.cancel()
        release.set()
    assert order == ["first", "urgent 1", "urgent 2", "rest 1", "rest 2"]
    # free again: the next holder goes in at once
    async with turns.hold(urgent=False):
        order.append("later")
    assert order[-1] == "later"


async def test_lull_returns_once_nothing_is_queued_or_in_flight() -> None:
    flushes = Flushes()
    batches = batcher(flushes)
    await batches.lull()  # idle: at once
    heard: list[str] = []

    async def lull() -> None:
        await batches.lull()
        heard.append(f"lull after {batches.batches} batches, queued: {batches.queued}")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(batches.submit, "a")
        await flushes.started.wait()
        nursery.start_soon(batches.submit, "b")  # queued behind "a"
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(lull)
        await trio.testing.wait_all_tasks_blocked()
        assert heard == []
        flushes.go.set()
    assert heard == ["lull after 2 batches, queued: False"]


async def test_lull_comes_every_lull_batches_under_a_steady_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(batch, "LULL_BATCHES", 3)
    flushes = Flushes()
    batches = batcher(flushes)
    heard: list[tuple[int, bool]] = []

    async def lull() -> None:
        await batches.lull()
        heard.append((batches.batches, batches.queued))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(batches.submit, "k")
        await flushes.started.wait()  # in flight, held
        for n in range(2, 9):  # one key: one batch each, the queue never empty until the end
            nursery.start_soon(batches.submit, f"k@{n}")
        nursery.start_soon(lull)
        await trio.testing.wait_all_tasks_blocked()
        assert heard == []
        flushes.go.set()
    assert heard == [(3, True)]  # after three batches, five of the stream still to come
    assert batches.batches == 8


async def test_a_leader_cancelled_during_its_flush_still_answers_its_riders() -> None:
    flushes = Flushes()
    batches = batcher(flushes)
    got: dict[str, str] = {}
    scopes = {"a": trio.CancelScope(), "b": trio.CancelScope()}

    async def submit(item: str) -> None:
        with scopes[item]:
            got[item] = await batches.submit(item)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(submit, "a")
        nursery.start_soon(submit, "b")  # the same tick: one leads, the other rides
        await flushes.started.wait()
        assert sorted(flushes.batches[0]) == ["a", "b"]
        (leader,) = [entry.item for entry in flushes.entries if entry.task is None]
        scopes[leader].cancel()  # the flush is shielded: it runs on
        await trio.testing.wait_all_tasks_blocked()
        flushes.go.set()
    assert got == {"a": "done a", "b": "done b"}
    assert not scopes[leader].cancelled_caught  # no checkpoint of the leader's after its answer


async def test_a_flush_that_answers_short_fails_every_caller_of_its_batch() -> None:
    async def flush(entries: Sequence[Entry[str, str]]) -> list[Answer[str]]:
        return [Answer(value="only one")]

    batches: Batcher[str, str] = Batcher(flush, key=lambda item: item)
    errors: list[str] = []

    async def submit(item: str) -> None:
        try:
            await batches.submit(item)
        except RuntimeError as exc:
            errors.append(str(exc))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(submit, "x")
        nursery.start_soon(submit, "y")
    assert errors == ["a flush answered 1 of 2 calls"] * 2


class Stop(BaseException):
    """What a KeyboardInterrupt is to a flush: not an error it answers with."""


async def test_a_flush_cut_short_wakes_its_riders_with_an_error() -> None:
    release = trio.Event()

    async def flush(entries: Sequence[Entry[str, str]]) -> list[Answer[str]]:
        await release.wait()
        raise Stop

    batches: Batcher[str, str] = Batcher(flush, key=lambda item: item)
    heard: dict[str, str] = {}

    async def submit(item: str) -> None:
        try:
            await batches.submit(item)
        except Stop:
            heard[item] = "stopped"
        except RuntimeError as exc:
            heard[item] = str(exc)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(submit, "a")
            nursery.start_soon(submit, "b")  # the same tick: one leads, the other rides
            await trio.testing.wait_all_tasks_blocked()
            release.set()
    assert sorted(heard.values()) == ["stopped", "the batch's flush was interrupted"]
    assert not batches.queued


async def test_a_leader_cancelled_before_it_leads_still_takes_and_flushes_its_batch() -> None:
    # Its one yield is shielded: a leader whose deadline had passed when it arrived still
    # takes the queue, flushes it and hands the lead on; else its own entry would stay queued
    # with nobody to lead it, and every later caller would wait for ever.
    flushes = Flushes()
    flushes.go.set()
    calls = batcher(flushes)
    got: str | None = None
    with trio.CancelScope() as scope:
        scope.cancel()
        got = await calls.submit("a")
    assert got == "done a"
    with trio.fail_after(5):
        assert await calls.submit("b") == "done b"
    assert flushes.batches == [["a"], ["b"]]


async def test_a_flush_abandoned_by_its_leader_answers_every_rider_with_the_stores_error() -> None:
    # A flush that cannot bound itself (a write in a worker thread) is abandoned when its
    # leader is cancelled: every other caller of the batch gets the store's own error.
    flushes = Flushes()
    leading: list[trio.lowlevel.Task] = []

    async def flush(entries: Sequence[Entry[str, str]]) -> list[Answer[str]]:
        leading.append(trio.lowlevel.current_task())  # whoever arrived first leads
        return await flushes(entries)

    def abandoned() -> Exception:
        return OSError("the write was given up: it may or may not have landed")

    calls: Batcher[str, str] = Batcher(flush, key=lambda item: item, abandon=abandoned)
    scopes: dict[trio.lowlevel.Task, trio.CancelScope] = {}
    heard: list[str] = []

    async def caller(item: str) -> None:
        with trio.CancelScope() as scopes[trio.lowlevel.current_task()]:
            try:
                await calls.submit(item)
            except OSError as exc:
                heard.append(f"{item}: {exc}")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller, "a")
        nursery.start_soon(caller, "b")
        await flushes.started.wait()
        assert sorted(flushes.batches[0]) == ["a", "b"]
        scopes[leading[0]].cancel()
    assert len(heard) == 1
    assert heard[0].endswith(": the write was given up: it may or may not have landed")
