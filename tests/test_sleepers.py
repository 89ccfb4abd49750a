"""Cron loops' sleeps, woken by one timer (scheduler/sleepers.py), on virtual time."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from trio_routines.scheduler.sleepers import PRUNE_SLACK, Sleepers


async def sleep_and_note(sleepers: Sleepers, deadline: float, woke: dict[float, float]) -> None:
    await sleepers.sleep_until(deadline)
    woke[deadline] = trio.current_time()


async def test_each_sleeper_wakes_at_its_deadline(autojump_clock: Any) -> None:
    sleepers = Sleepers()
    woke: dict[float, float] = {}
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(sleepers.run)
        for offset in (30.0, 10.0, 20.0, 10.0, 0.0):
            nursery.start_soon(sleep_and_note, sleepers, start + offset, woke)
        await trio.sleep(31)
        nursery.cancel_scope.cancel()
    assert woke == {start + d: start + d for d in (0.0, 10.0, 20.0, 30.0)}


async def test_an_earlier_deadline_parked_later_is_not_late(autojump_clock: Any) -> None:
    sleepers = Sleepers()
    woke: dict[float, float] = {}
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(sleepers.run)
        nursery.start_soon(sleep_and_note, sleepers, start + 3600.0, woke)
        await trio.sleep(5)  # the timer now sleeps towards start + 3600
        nursery.start_soon(sleep_and_note, sleepers, start + 7.0, woke)
        await trio.sleep(3)
        assert woke == {start + 7.0: start + 7.0}
        nursery.cancel_scope.cancel()


async def test_a_cancelled_sleeper_leaves_the_others_alone(autojump_clock: Any) -> None:
    sleepers = Sleepers()
    woke: dict[float, float] = {}
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(sleepers.run)
        with trio.move_on_after(5):
            await sleepers.sleep_until(start + 10)
        assert trio.current_time() == start + 5
        nursery.start_soon(sleep_and_note, sleepers, start + 10, woke)
        await trio.sleep(6)
        nursery.cancel_scope.cancel()
    assert woke == {start + 10: start + 10}


async def test_wake_all_wakes_every_sleeper_now(autojump_clock: Any) -> None:
    sleepers = Sleepers()
    woke: dict[float, float] = {}
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(sleepers.run)
        for offset in (100.0, 200.0):
            nursery.start_soon(sleep_and_note, sleepers, start + offset, woke)
        await trio.sleep(1)
        sleepers.wake_all()
        await trio.testing.wait_all_tasks_blocked()
        assert woke == {start + 100: start + 1, start + 200: start + 1}
        nursery.cancel_scope.cancel()


async def test_without_a_timer_a_sleep_still_ends(autojump_clock: Any) -> None:
    sleepers = Sleepers()
    start = trio.current_time()
    await sleepers.sleep_until(start + 42)
    assert trio.current_time() == start + 42
    woke: dict[float, float] = {}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sleep_and_note, sleepers, start + 100, woke)
        await trio.sleep(1)
        sleepers.wake_all()  # reaches the fallback's sleepers too
    assert woke == {start + 100: start + 43}


async def test_a_timer_that_ends_wakes_whoever_is_still_parked(autojump_clock: Any) -> None:
    sleepers = Sleepers()
    start = trio.current_time()
    woke: dict[float, float] = {}
    with trio.fail_after(1000):  # a loop left parked would sleep for ever
        async with trio.open_nursery() as outer, trio.open_nursery() as timer:
            await timer.start(sleepers.run)
            outer.start_soon(sleep_and_note, sleepers, start + 50, woke)
            await trio.sleep(1)
            timer.cancel_scope.cancel()  # the sleeper is not in the timer's nursery
    assert woke == {start + 50: start + 1}


async def test_stale_entries_of_cancelled_sleepers_are_pruned(autojump_clock: Any) -> None:
    sleepers = Sleepers()
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(sleepers.run)
        for _ in range(3 * PRUNE_SLACK):
            with trio.move_on_after(1):
                await sleepers.sleep_until(start + 1000)
        # Each cancelled sleep left an entry; the timer drops them once they pile up.
        assert len(sleepers._heap) == 3 * PRUNE_SLACK
        await sleepers.sleep_until(trio.current_time())  # an earlier deadline: a pass
        assert sleepers._heap == []
        nursery.cancel_scope.cancel()


class Fetches:
    """A prefetch that takes ``seconds`` and counts its calls; answers ``fetched-<n>``."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        await trio.sleep(self.seconds)
        return f"fetched-{self.calls}"


async def note_return(
    sleepers: Sleepers,
    deadline: float,
    at_slot: bool,
    key: str,
    got: dict[str, tuple[object, float]],
) -> None:
    slot = key if at_slot else None
    got[key] = (await sleepers.sleep_until(deadline, slot=slot), trio.current_time())


async def test_loops_due_at_their_slots_are_woken_with_one_prefetch(autojump_clock: Any) -> None:
    sleepers = Sleepers()
    fetch = sleepers.prefetch = Fetches(seconds=2)
    got: dict[str, tuple[object, float]] = {}
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(sleepers.run)
        for key in ("a", "b", "c"):
            nursery.start_soon(note_return, sleepers, start + 10, True, key, got)
        nursery.start_soon(note_return, sleepers, start + 10, False, "capped", got)
        nursery.start_soon(note_return, sleepers, start + 30, True, "later", got)
        await trio.sleep(33)
        nursery.cancel_scope.cancel()
    # One read for the three due together, made before any of them woke; a wake that is not
    # a slot's (a capped sleep) is not held back and gets nothing; a later slot, a read of its own.
    assert got == {
        "a": ("fetched-1", start + 12),
        "b": ("fetched-1", start + 12),
        "c": ("fetched-1", start + 12),
        "capped": (None, start + 10),
        "later": ("fetched-2", start + 32),
    }
    assert fetch.calls == 2


async def test_without_a_prefetch_a_slots_sleep_returns_none(autojump_clock: Any) -> None:
    sleepers = Sleepers()
    got: dict[str, tuple[object, float]] = {}
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(sleepers.run)
        nursery.start_soon(note_return, sleepers, start + 5, True, "a", got)
        await trio.sleep(6)
        nursery.cancel_scope.cancel()
    assert got == {"a": (None, start + 5)}


async def test_a_loop_cancelled_or_woken_during_the_prefetch_is_woken_once(
    autojump_clock: Any,
) -> None:
    sleepers = Sleepers()
    sleepers.prefetch = Fetches(seconds=5)
    got: dict[str, tuple[object, float]] = {}
    start = trio.current_time()
    cancelled = trio.CancelScope()

    async def cancellable() -> None:
        with cancelled:
            await note_return(sleepers, start + 10, True, "cancelled", got)

    async with trio.open_nursery() as nursery:
        await nursery.start(sleepers.run)
        nursery.start_soon(note_return, sleepers, start + 10, True, "woken", got)
        nursery.start_soon(cancellable)
        await trio.sleep(12)  # the prefetch is under way
        cancelled.cancel()
        await trio.sleep(1)
        sleepers.wake_all()  # the other one, before the prefetch is back
        await trio.sleep(5)
        nursery.cancel_scope.cancel()
    # Cancelled: it left, and the timer did not wake it again (Trio would refuse a second
    # reschedule); woken by wake_all: it returned None then, not the read later.
    assert got == {"woken": (None, start + 13)}


async def test_a_timer_cancelled_during_the_prefetch_wakes_the_loops_it_held(
    autojump_clock: Any,
) -> None:
    sleepers = Sleepers()
    sleepers.prefetch = Fetches(seconds=60)
    got: dict[str, tuple[object, float]] = {}
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        timer = trio.CancelScope()

        async def timed(task_status: trio.TaskStatus[None]) -> None:
            with timer:
                await sleepers.run(task_status=task_status)

        await nursery.start(timed)
        nursery.start_soon(note_return, sleepers, start + 10, True, "held", got)
        await trio.sleep(15)
        timer.cancel()
        await trio.sleep(1)
        assert got == {"held": (None, start + 15)}


async def test_loops_due_together_are_woken_in_their_order_not_their_parking_or_deadlines(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A herd's loops park in whatever order their boots' reads came back, each with a deadline
    # a few nanoseconds off the others' (Trio's clock read against the wall clock's); the
    # timer wakes them in the order of their names, so that a state directory writes
    # neighbours together. Capped sleeps (not a slot's) are not held for the read, and are
    # woken first. (The loop due first holds the timer in its read while the herd's deadlines
    # pass, as a real timer's wake comes after all of them.) What is recorded is the timer's
    # order of waking: the order woken tasks then run in is Trio's (shuffled under test).
    sleepers = Sleepers()
    sleepers.prefetch = Fetches(seconds=1)
    names: dict[trio.lowlevel.Task, str] = {}
    woken: list[str] = []
    reschedule = trio.lowlevel.reschedule

    def noting(task: trio.lowlevel.Task, *args: Any) -> None:
        woken.append(names[task])
        reschedule(task, *args)

    monkeypatch.setattr(trio.lowlevel, "reschedule", noting)
    start = trio.current_time()

    async def sleep(name: str, jitter: float, at_slot: bool) -> None:
        names[trio.lowlevel.current_task()] = name
        await sleepers.sleep_until(start + 10 + jitter, slot=name if at_slot else None)

    parked = [("first", -0.5, True), ("r3", 3e-9, True), ("r1", 9e-9, True)]
    parked += [("zcapped", 5e-9, False)]  # woken first, though last in the names' order
    parked += [("r4", 1e-9, True), ("r0", 7e-9, True), ("r2", 0.0, True)]
    async with trio.open_nursery() as nursery:
        await nursery.start(sleepers.run)
        for name, jitter, at_slot in parked:
            nursery.start_soon(sleep, name, jitter, at_slot)
            await trio.sleep(0.1)  # parked in this order
        await trio.sleep(12)
        assert woken == ["first", "zcapped", "r0", "r1", "r2", "r3", "r4"]
        nursery.cancel_scope.cancel()
