"""Turns' timeouts, watched by one task of the run (timeouts.py), under virtual time: each
scope is cancelled at its deadline, an earlier one added later included; one the watch comes
to late is given a while first; a forgotten one cancels nothing, and the forgotten are dropped
from the heap."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from trio_routines import timeouts
from trio_routines.timeouts import READ_AFTER_STALL, STALLED, timeout_at


async def cancelled_at(deadline: float) -> float:
    """When a scope given a timeout at ``deadline`` (from now) was cancelled."""
    start = trio.current_time()
    with trio.CancelScope() as scope, timeout_at(start + deadline, scope):
        await trio.sleep_forever()
    assert scope.cancelled_caught
    return trio.current_time() - start


async def test_each_scope_is_cancelled_at_its_deadline_an_earlier_one_added_later_too(
    autojump_clock: Any,
) -> None:
    ended: dict[str, float] = {}

    async def timed(name: str, deadline: float) -> None:
        ended[name] = await cancelled_at(deadline)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(timed, "late", 100.0)
        await trio.sleep(1)  # the watch waits for the one at 100 s
        nursery.start_soon(timed, "early", 5.0)  # comes before it: the watch is woken
        nursery.start_soon(timed, "tie", 5.0)
    assert ended == {"late": 100.0, "early": 5.0, "tie": 5.0}
    assert (STALLED, READ_AFTER_STALL) == (1.0, 1.0)


async def test_a_timeout_come_to_late_lets_the_turn_run_a_while_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A watch over a second late gives it a second more; within a second, none.
    for stopped, ended in ((10.0, 15.999), (1.0, 5.999)):  # 4.999, and the stop, and more
        start = trio.current_time()
        with trio.CancelScope() as scope, timeout_at(start + 5, scope):
            await trio.sleep(5 - 0.001)
            autojump_clock.jump(stopped)  # the process stopped: its watch comes late
            await trio.sleep_forever()
        assert scope.cancelled_caught
        assert round(trio.current_time() - start, 3) == ended


async def test_a_timeout_forgotten_cancels_nothing_and_the_forgotten_are_dropped(
    autojump_clock: Any,
) -> None:
    for _ in range(200):  # turns that ended before their timeouts
        with trio.CancelScope() as scope, timeout_at(trio.current_time() + 3600, scope):
            await trio.lowlevel.checkpoint()
        assert not scope.cancel_called
    watch = timeouts._WATCH.get()
    # Dropped when they were most of the heap: at most the 64 forgiven, and this run's one.
    assert len(watch._heap) <= 65
    assert await cancelled_at(2.0) == 2.0  # the watch still keeps the others
    await trio.sleep(7200)  # the forgotten ones' deadlines pass: nothing is cancelled twice
    assert all(entry[2].scope is None for entry in watch._heap)


async def test_one_watch_serves_every_turn_of_a_run() -> None:
    with trio.CancelScope() as first, timeout_at(trio.current_time() + 60, first):
        watch = timeouts._WATCH.get()
        with trio.CancelScope() as second, timeout_at(trio.current_time() + 60, second):
            await trio.lowlevel.checkpoint()
            assert timeouts._WATCH.get() is watch
            assert [entry[2].scope for entry in watch._heap] == [first, second]
