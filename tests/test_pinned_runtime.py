"""Runtime behaviours that no other test pinned (issue 11), each under virtual time.

Every test here was checked once against the product with its behaviour broken by hand: it
fails then. Log lines are counted exactly, never found with ``any``: "logged once" means one.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trio
import trio.testing

from trio_routines import Outcome, Routine, Scheduler
from trio_routines.agent import SESSION_BUSY, Completed, Event, Failed, TextDelta
from trio_routines.records import ClaimResult, ClaimStatus
from trio_routines.scheduler.clock import duration
from trio_routines.testing import Busy, Complete, Fail, MemoryStore, ScriptedAgent, WallClock
from trio_routines.turns import run_turn
from trio_routines.wakeups import WakeupRequest

T0 = datetime(2026, 7, 7, 10, 30, tzinfo=UTC)
HOUR = 3600.0


@pytest.fixture(autouse=True)
def _capture(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_routines")


def messages(caplog: pytest.LogCaptureFixture, level: int | None = None) -> list[str]:
    return [r.getMessage() for r in caplog.records if level is None or r.levelno == level]


class Events:
    """An agent that yields the same events on every turn."""

    def __init__(self, *events: Event) -> None:
        self.events = events
        self.turns = 0

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        self.turns += 1
        for event in self.events:
            await trio.lowlevel.checkpoint()
            yield event


def scheduler(
    *routines: Routine, agent: Any = None, store: Any = None, **options: Any
) -> tuple[Scheduler, ScriptedAgent, MemoryStore, WallClock]:
    wall = WallClock(T0)
    agent = agent if agent is not None else ScriptedAgent(wall=wall)
    store = store if store is not None else MemoryStore()
    built = Scheduler(agent=agent, store=store, routines=routines, now=wall, **options)
    return built, agent, store, wall


# -- one sleep lasts at most six hours -------------------------------------------------------


async def test_one_sleep_lasts_six_hours_at_most(autojump_clock: Any) -> None:
    # Nothing else looks at the clocks here: no wake loop, and a clock watch that polls once a
    # day (the longest poll there is). Only the cap on one sleep can notice that the wall
    # clock passed the slot.
    daily = Routine(name="daily", prompt="p", cron="0 9 * * *")  # next: tomorrow, 22.5 h away
    sched, agent, store, wall = scheduler(daily, wakeups=False, poll_interval=24 * HOUR)
    async with trio.open_nursery() as nursery:
        await nursery.start(sched.run)
        booted = trio.current_time()
        await trio.sleep(HOUR)
        wall.jump(timedelta(days=3))  # tomorrow's 09:00 is now long past
        await trio.sleep(5 * HOUR - 1)
        assert agent.turns == []  # still inside the first sleep
        await trio.sleep(2)
        (turn,) = agent.turns
        assert turn.started_at - booted == pytest.approx(6 * HOUR)
        sched.stop(0)
    (fire,) = await store.history("daily")
    assert fire.slot == datetime(2026, 7, 8, 9, tzinfo=UTC)
    assert fire.outcome is Outcome.COMPLETED


async def test_a_sleep_shorter_than_the_cap_ends_on_the_slot(autojump_clock: Any) -> None:
    hourly = Routine(name="hourly", prompt="p", cron="0 * * * *")  # 11:00, 30 min away
    sched, agent, _, _ = scheduler(hourly, wakeups=False, poll_interval=24 * HOUR)
    async with trio.open_nursery() as nursery:
        await nursery.start(sched.run)
        booted = trio.current_time()
        await trio.sleep(HOUR)
        sched.stop(0)
    (turn,) = agent.turns
    assert turn.started_at - booted == pytest.approx(1800)
    assert turn.wall == datetime(2026, 7, 7, 11, tzinfo=UTC)


# -- the last failure event of a turn decides busy vs failed ---------------------------------


@pytest.mark.parametrize(
    ("events", "outcome", "busy", "details"),
    [
        ((Failed("busy", SESSION_BUSY), Failed("quota")), Outcome.FAILED, False, "quota"),
        ((Failed("quota"), Failed("busy", SESSION_BUSY)), Outcome.SKIPPED, True, "busy"),
        ((Failed("first"), TextDelta("x"), Failed("second")), Outcome.FAILED, False, "second"),
    ],
)
async def test_the_last_failure_event_decides_the_outcome(
    events: tuple[Event, ...],
    outcome: Outcome,
    busy: bool,
    details: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    result = await run_turn(Events(*events), "r", "s", "text")
    assert (result.outcome, result.busy, result.failed) == (outcome, busy, details)
    # One outcome line, about the deciding event only.
    assert len([m for m in messages(caplog) if m.startswith("r")]) == 2  # firing + outcome


async def test_a_fire_settles_what_the_last_failure_event_says(autojump_clock: Any) -> None:
    daily = Routine(name="daily", prompt="p", cron="0 9 * * *")
    agent = Events(Failed("busy", SESSION_BUSY), Failed("quota"))
    sched, _, store, _ = scheduler(daily, agent=agent)
    slot = datetime(2026, 7, 7, 9, tzinfo=UTC)
    result = await sched.fire("daily", slot)
    assert (result.outcome, result.failed) == (Outcome.FAILED, "quota")
    assert [f.outcome for f in await store.history("daily")] == [Outcome.FAILED]


# -- stop() halts a wake-up drain ------------------------------------------------------------


async def test_stop_halts_a_wake_up_drain(autojump_clock: Any) -> None:
    store = MemoryStore()
    for session in ("a", "b", "c"):
        request = WakeupRequest(session=session, prompt="p", fire_at=T0)
        await store.add_wakeup(request, T0 - timedelta(minutes=2))
    stopper: list[Callable[[], None]] = []
    wall = WallClock(T0)
    agent = ScriptedAgent(wall=wall, on_turn=lambda turn: stopper[0]())
    sched, _, _, _ = scheduler(agent=agent, store=store)
    stopper.append(lambda: sched.stop(5))
    async with trio.open_nursery() as nursery:
        await nursery.start(sched.run)
    # The drain stops after the turn that asked for the stop: two wake-ups stay pending.
    assert len(agent.turns) == 1
    assert len(agent.finished) == 1  # the turn in flight still had its grace
    pending = {w.session for w in await store.list_wakeups()}
    assert pending == {"a", "b", "c"} - {agent.turns[0].session}


async def test_without_a_stop_the_drain_takes_every_due_wake_up(autojump_clock: Any) -> None:
    store = MemoryStore()
    for session in ("a", "b", "c"):
        request = WakeupRequest(session=session, prompt="p", fire_at=T0)
        await store.add_wakeup(request, T0 - timedelta(minutes=2))
    sched, agent, _, _ = scheduler(store=store)
    async with trio.open_nursery() as nursery:
        await nursery.start(sched.run)
        await trio.testing.wait_all_tasks_blocked()  # no poll interval passes: one drain
        first = [t.started_at for t in agent.turns]
        sched.stop(0)
    assert sorted(agent.sessions()) == ["a", "b", "c"]
    assert first == [first[0]] * 3
    assert await store.list_wakeups() == []


# -- an on-demand routine's open claim is reconciled at boot ---------------------------------


async def test_an_on_demand_routines_open_claim_is_interrupted_at_boot(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    manual = Routine(name="manual", prompt="p")  # no cron: fired only from outside
    store = MemoryStore()
    slot = T0 - timedelta(hours=3)
    await store.claim("manual", slot, slot)
    sched, agent, _, _ = scheduler(manual, store=store)
    async with trio.open_nursery() as nursery:
        await nursery.start(sched.run)
        # Settled before run() reported itself started.
        assert [f.outcome for f in await store.history("manual")] == [Outcome.INTERRUPTED]
        sched.stop(0)
    assert agent.turns == []
    never = [m for m in messages(caplog, logging.WARNING) if "never finished" in m]
    assert len(never) == 1
    assert never[0].startswith(
        "manual: the fire of slot 2026-07-07T07:30:00.000Z claimed at 2026-07-07T07:30:00.000Z"
    )


# -- logged once: counted, not searched ------------------------------------------------------


@pytest.mark.parametrize(
    ("behaviour", "level", "line"),
    [
        (Complete(duration=1.5), logging.INFO, "r completed (1500ms)"),
        (Fail("quota"), logging.ERROR, "r failed (0ms): quota"),
        (Busy(), logging.INFO, "r: occurrence skipped (session busy) (0ms)"),
    ],
)
async def test_a_turn_logs_exactly_two_lines(
    autojump_clock: Any,
    caplog: pytest.LogCaptureFixture,
    behaviour: Any,
    level: int,
    line: str,
) -> None:
    await run_turn(ScriptedAgent(behaviour), "r", "s", "text")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "r firing (session=s)"),
        (level, line),
    ]


async def test_a_timed_out_turn_logs_one_failure(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    await run_turn(ScriptedAgent(Complete(duration=10)), "r", "s", "text", timeout=2.5)
    assert messages(caplog) == ["r firing (session=s)", "r failed (2500ms): timed out after 2.5s"]


async def test_an_unknown_event_is_logged_once_at_debug(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    result = await run_turn(Events(TextDelta("x"), "garbage", Completed()), "r", "s", "t")  # type: ignore[arg-type]
    assert result.outcome is Outcome.COMPLETED
    assert messages(caplog, logging.DEBUG) == ["r: ignoring an unknown event 'garbage'"]


async def test_duplicate_and_stale_are_each_logged_once(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    hourly = Routine(name="hourly", prompt="p", cron="0 * * * *")
    sched, _, _, _ = scheduler(hourly)
    at = [datetime(2026, 7, 7, hour, tzinfo=UTC) for hour in (8, 9, 10)]
    await sched.fire("hourly", at[1])
    await sched.fire("hourly", at[1])
    await sched.fire("hourly", at[2])
    await sched.fire("hourly", at[0])
    assert [m for m in messages(caplog) if "skipping" in m] == [
        "hourly: skipping — slot 2026-07-07T09:00:00.000Z is already claimed — a duplicate "
        "delivery, or another scheduler has it",
        "hourly: skipping — slot 2026-07-07T08:00:00.000Z is stale: 2026-07-07T10:00:00.000Z "
        "was already claimed, so this instant is skipped",
    ]


async def test_a_stale_answer_naming_no_slot_is_shown_as_the_store_gave_it(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # A store of one's own may name its newest claim otherwise than by a slot's file name.
    class OddStore(MemoryStore):
        async def claim(self, *args: Any, **kwargs: Any) -> ClaimResult:
            return ClaimResult(ClaimStatus.STALE, newest="claim-7")

    hourly = Routine(name="hourly", prompt="p", cron="0 * * * *")
    sched, _, _, _ = scheduler(hourly, store=OddStore())
    await sched.fire("hourly", datetime(2026, 7, 7, 9, tzinfo=UTC))
    assert [m for m in messages(caplog) if "skipping" in m] == [
        "hourly: skipping — slot 2026-07-07T09:00:00.000Z is stale: claim-7 was already "
        "claimed, so this instant is skipped"
    ]


# -- how the runtime words a span of time in its log lines -----------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.4, "0s"),
        (59.6, "1m"),
        (60, "1m"),
        (61, "1m 1s"),
        (3600, "1h"),
        (3599, "59m 59s"),
        (86400, "1d"),
        (86400 + 3600 + 61, "1d 1h 1m 1s"),
        (3 * 86400 + 7200, "3d 2h"),
    ],
)
def test_durations_in_log_lines(seconds: float, text: str) -> None:
    assert duration(seconds) == text


async def test_after_a_fire_the_loop_rearms_in_the_routines_zone_with_its_hash(
    autojump_clock: Any,
) -> None:
    # H 9 in Berlin for "report": 09:31 Berlin, 07:31 UTC in summer.
    report = Routine(name="report", prompt="p", cron="H 9 * * *", tz="Europe/Berlin")
    sched, agent, _, wall = scheduler(report, poll_interval=3600)  # a day in fewer idle ticks
    first = datetime(2026, 7, 8, 7, 31, tzinfo=UTC)
    async with trio.open_nursery() as nursery:
        await nursery.start(sched.run)
        assert sched.statistics().next_due == {"report": first}
        await trio.sleep((first - wall()).total_seconds() + 60)
        assert [t.wall for t in agent.turns] == [first]
        assert sched.statistics().next_due == {"report": first + timedelta(days=1)}
        sched.stop(0)
