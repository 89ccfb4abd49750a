"""The restart policy: a loop that dies of an unexpected exception comes back, counted."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest
import trio

from trio_routines import Outcome, Routine, Scheduler, Statistics
from trio_routines.testing import MemoryStore, ScriptedAgent, WallClock

T0 = datetime(2026, 7, 7, 10, 30, tzinfo=UTC)


def at(hour: int, minute: int = 0, second: int = 0) -> datetime:
    return datetime(2026, 7, 7, hour, minute, second, tzinfo=UTC)


def rig(store: MemoryStore, *names: str) -> tuple[Scheduler, ScriptedAgent, WallClock]:
    wall = WallClock(T0)
    agent = ScriptedAgent(wall=wall)
    routines = [Routine(name=n, prompt="p", cron="0 * * * *") for n in names]
    scheduler = Scheduler(agent=agent, store=store, routines=routines, now=wall, wakeups=False)
    return scheduler, agent, wall


async def run_until(scheduler: Scheduler, wall: WallClock, until: datetime) -> Statistics:
    """Run ``scheduler`` until ``until``: its statistics then, before it stops (a scheduler
    whose run ended has nothing armed)."""
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep((until - wall()).total_seconds())
        stats = scheduler.statistics()
        scheduler.stop()
    return stats


@pytest.fixture(autouse=True)
def _capture(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_routines")


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]


async def test_a_cron_loop_that_dies_before_its_claim_is_restarted_and_fires_next_slot(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    store.fail("claim", RuntimeError("a bug, not a state fault"), times=1, routine="broken")
    scheduler, agent, wall = rig(store, "broken", "fine")
    stats = await run_until(scheduler, wall, at(13, 30))
    # 11:00 died before anything was claimed, and is skipped like any failed fire; the loop
    # came back a second later, re-armed from the wall clock: no back-fire of 11:00.
    assert [f.slot for f in await store.history("broken")] == [at(12), at(13)]
    assert [t.wall for t in agent.turns if t.session == "routine:broken"] == [at(12), at(13)]
    assert [f.slot for f in await store.history("fine")] == [at(11), at(12), at(13)]
    assert stats.loop_restarts == {"cron:broken": 1}
    assert stats.armed == ("broken", "fine")
    assert errors(caplog) == [
        "broken: stopped unexpectedly: RuntimeError: a bug, not a state fault "
        "— restarting in 1s (restart 1)"
    ]
    assert (
        'trio_routines_loop_restarts_total{loop="cron",routine="broken"} 1'
        in scheduler.render_metrics()
    )


async def test_a_cron_loop_that_dies_after_its_claim_never_fires_that_slot_twice(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    class SettleBug(MemoryStore):
        bugs = 1

        async def settle(self, routine: str, slot: datetime, *args: Any, **kw: Any) -> Any:
            if self.bugs:
                self.bugs -= 1
                raise RuntimeError("settle bug")
            return await super().settle(routine, slot, *args, **kw)

    store = SettleBug()
    scheduler, agent, wall = rig(store, "broken")
    await run_until(scheduler, wall, at(12, 30))
    history = [(f.slot, f.outcome) for f in await store.history("broken")]
    # The 11:00 claim the dead loop left open is recorded by the next watch, not left open.
    assert history == [(at(11), Outcome.INTERRUPTED), (at(12), Outcome.COMPLETED)]
    assert [t.wall for t in agent.turns] == [at(11), at(12)]  # 11:00 ran once
    assert scheduler.statistics().loop_restarts == {"cron:broken": 1}
    assert scheduler.statistics().in_flight == 0


async def test_a_cron_loop_whose_re_arm_fails_backs_off_and_recovers(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    store.fail("claim", RuntimeError("bug"), times=1)
    scheduler, agent, wall = rig(store, "broken")
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        store.fail("latest_fire", RuntimeError("still broken"), times=3)
        await trio.sleep((at(11) - wall()).total_seconds() + 1 + 2 + 4 + 8 - 0.5)
        assert scheduler.statistics().loop_restarts == {"cron:broken": 4}
        await trio.sleep(1)
        assert scheduler.statistics().next_due == {"broken": at(12)}
        await trio.sleep((at(12, 30) - wall()).total_seconds())
        scheduler.stop()
    assert [t.wall for t in agent.turns] == [at(12)]
    assert [m.rsplit("— ", 1)[1] for m in errors(caplog)] == [
        "restarting in 1s (restart 1)",
        "restarting in 2s (restart 2)",
        "restarting in 4s (restart 3)",
        "restarting in 8s (restart 4)",
    ]


async def test_a_restart_waits_out_its_back_off_only_while_running(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    store.fail("claim", RuntimeError("bug"))
    scheduler, _, wall = rig(store, "broken")
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep((at(11) - wall()).total_seconds() + 0.5)  # dead, backing off
        scheduler.stop()
        start = trio.current_time()
    assert trio.current_time() == start  # the back-off does not hold the stop
    assert scheduler.statistics().loop_restarts == {"cron:broken": 1}
