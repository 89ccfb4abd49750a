"""Store calls bounded on our side, and a settle retried before its outcome is given up."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest
import trio

from trio_routines import Outcome, Routine, Scheduler, StateFault
from trio_routines.testing import Hang, MemoryStore, ScriptedAgent, WallClock

T0 = datetime(2026, 7, 7, 10, 30, tzinfo=UTC)
HOURLY = Routine(name="hourly", prompt="p", cron="0 * * * *")


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 7, 7, hour, minute, tzinfo=UTC)


def make(store: MemoryStore, agent: ScriptedAgent | None = None, **options: Any) -> Scheduler:
    wall = WallClock(T0)
    return Scheduler(
        agent=agent or ScriptedAgent(wall=wall),
        store=store,
        routines=[HOURLY],
        now=wall,
        **options,
    )


@pytest.fixture(autouse=True)
def _capture(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_routines")


def logged(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


# -- the settle's retries ----------------------------------------------------------------------


async def test_a_settle_that_fails_twice_is_retried_and_the_outcome_kept(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    store.fail("settle", StateFault("database is locked"), times=2)
    scheduler = make(store)
    start = trio.current_time()
    result = await scheduler.fire("hourly", at(9))
    assert trio.current_time() - start == 0.25 + 0.5  # two back-offs
    assert result.outcome is Outcome.COMPLETED
    assert [(f.slot, f.outcome) for f in await store.history("hourly")] == [
        (at(9), Outcome.COMPLETED)
    ]
    assert scheduler.statistics().settle_failures == {}
    assert "trio_routines_settle_failures_total{" not in scheduler.render_metrics()
    assert any("recorded at attempt 3" in m for m in logged(caplog, logging.INFO))
    assert logged(caplog, logging.ERROR) == []


async def test_a_settle_that_keeps_failing_is_given_up_within_the_grace_and_counted(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    store.fail("settle", StateFault("database is down"))
    scheduler = make(store, default_grace=10.0)
    start = trio.current_time()
    result = await scheduler.fire("hourly", at(9))
    # attempts at 0, .25, .75, 1.75, 3.75, 7.75; one more 4 s wait would pass the grace
    assert trio.current_time() - start == 7.75
    assert result.outcome is Outcome.COMPLETED  # what the turn did, though it is not stored
    assert [(f.slot, f.outcome) for f in await store.history("hourly")] == [(at(9), None)]
    assert scheduler.statistics().settle_failures == {"hourly": 1}
    assert 'trio_routines_settle_failures_total{routine="hourly"} 1' in scheduler.render_metrics()
    (error,) = logged(caplog, logging.ERROR)
    assert "hourly: the completed outcome of slot 2026-07-07T09:00:00.000Z is lost" in error
    assert "after 6 attempts" in error
    assert len(logged(caplog, logging.WARNING)) == 6  # the store's warning per attempt


# -- bounded store calls -------------------------------------------------------------------------


async def test_a_claim_that_stalls_is_a_state_fault_and_nothing_runs(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    store.hang("claim")
    agent = ScriptedAgent()
    scheduler = make(store, agent, store_timeout=30.0)
    start = trio.current_time()
    with pytest.raises(StateFault, match=r"could not claim slot .* did not answer within 30s"):
        await scheduler.fire("hourly", at(9))
    assert trio.current_time() - start == 30.0
    assert agent.turns == []
    assert await store.history("hourly") == []
    assert scheduler.statistics().in_flight == 0


async def test_a_cron_loop_whose_claim_stalls_skips_that_slot_and_stays_armed(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    agent = ScriptedAgent()
    scheduler = make(store, agent, wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        store.hang("claim")
        await trio.sleep(45 * 60)  # 11:15: the 11:00 claim was cut off at 11:00:30
        store.hangs.clear()
        await trio.sleep(60 * 60)
        scheduler.stop()
    assert any("fire failed" in m and "did not answer" in m for m in logged(caplog, 40))
    assert [f.slot for f in await store.history("hourly")] == [at(12)]
    assert scheduler.statistics().loop_restarts == {}


async def test_stop_ends_within_grace_and_margin_while_the_settle_stalls(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    store.hang("settle")
    agent = ScriptedAgent(Hang())
    scheduler = make(store, agent, wakeups=False)
    with trio.fail_after(3600 * 3):
        async with trio.open_nursery() as nursery:
            await nursery.start(scheduler.run)
            await trio.sleep(31 * 60)  # 11:01: the 11:00 turn hangs
            assert scheduler.statistics().in_flight == 1
            stopped = trio.current_time()
            scheduler.stop(5.0)
    # the turn is interrupted at the grace, the stalled settle cut off 2 s later
    assert trio.current_time() - stopped == 5.0 + 2.0
    assert [(f.slot, f.outcome) for f in await store.history("hourly")] == [(at(11), None)]
    assert scheduler.statistics().settle_failures == {"hourly": 1}
    assert any("interrupted outcome of slot" in m for m in logged(caplog, logging.ERROR))


async def test_stop_ends_within_grace_and_margin_while_a_wake_up_poll_stalls(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    scheduler = make(store, poll_interval=1.0)
    with trio.fail_after(3600):
        async with trio.open_nursery() as nursery:
            await nursery.start(scheduler.run)
            store.hang("take_due_wakeup")
            await trio.sleep(5)  # the poll is stalled, in its shield
            stopped = trio.current_time()
            scheduler.stop(1.0)
    assert trio.current_time() - stopped == 1.0 + 2.0


async def test_a_boot_whose_read_stalls_fails_with_a_state_fault(autojump_clock: Any) -> None:
    store = MemoryStore()
    store.hang("latest_fire")
    agent = ScriptedAgent()
    scheduler = make(store, agent, store_timeout=12.0)
    start = trio.current_time()
    with pytest.raises(StateFault, match=r"newest claim of 'hourly' .* within 12s"):
        await scheduler.run()
    assert trio.current_time() - start == 12.0
    assert agent.turns == []
