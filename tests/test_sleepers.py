"""Cron loops' sleeps, woken by one timer (scheduler/sleepers.py), on virtual time."""

from __future__ import annotations

from typing import Any

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
