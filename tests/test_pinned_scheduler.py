"""The Scheduler's API pinned whole (issue 11): fire, pause, resume, run_now, start_fire,
start_run -- their errors and log lines compared entire, their store calls by argument.

Every test runs under virtual time and was checked against the product broken by hand.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

import pytest
import trio
from scheduler_rig import HOURLY, NO_ANSWER, T0, at, lines, rig

from trio_routines import InvalidOption, Outcome, Routine, Scheduler, Unconfirmed
from trio_routines.records import ClaimResult, ClaimStatus
from trio_routines.scheduler import NotOnGrid, NotYetDue, Stopping
from trio_routines.testing import Complete, Hang, MemoryStore, ScriptedAgent, WallClock

SLOW = Routine(name="slow", prompt="Think.", cron="0 * * * *", timeout=2.0)
STOPPING = "the scheduler is stopping; no new turns are accepted"


@pytest.fixture(autouse=True)
def _capture(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_routines")


# -- fire: what it refuses, in so many words -------------------------------------------------


async def test_fire_refuses_a_slot_off_the_grid_naming_it(autojump_clock: Any) -> None:
    scheduler, agent, _, _ = rig()
    with pytest.raises(NotOnGrid) as caught:
        await scheduler.fire("hourly", at(9, 30))
    assert str(caught.value) == (
        "slot 2026-07-07T09:30:00.000Z is not on the cron grid of 'hourly' (0 * * * *)"
    )
    assert agent.turns == []
    hashed = Routine(name="hashed", prompt="go", cron="H * * * *")  # its minute from its name
    scheduler, agent, _, _ = rig(hashed)
    minute = hashed.resolved_cron.split()[0]  # type: ignore[union-attr]
    with pytest.raises(NotOnGrid) as caught:
        await scheduler.fire("hashed", at(9, 0 if minute != "0" else 1))
    assert str(caught.value).endswith(f"of 'hashed' (H * * * * = {minute} * * * *)")


async def test_fire_refuses_a_future_slot_saying_how_long_to_wait(autojump_clock: Any) -> None:
    scheduler, agent, _, _ = rig()
    with pytest.raises(NotYetDue) as caught:
        await scheduler.fire("hourly", at(11))
    assert str(caught.value) == (
        "slot 2026-07-07T11:00:00.000Z of 'hourly' has not arrived yet — "
        "a slot never fires before its instant"
    )
    assert caught.value.wait == 1800.0
    assert agent.turns == []


async def test_a_stopping_scheduler_refuses_fires_and_turns_in_so_many_words(
    autojump_clock: Any,
) -> None:
    scheduler, agent, store, _ = rig()
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        scheduler.stop(5)
        with pytest.raises(Stopping) as fire:
            await scheduler.fire("hourly", at(10))
        with pytest.raises(Stopping) as run:
            await scheduler.run_now("hourly")
        with pytest.raises(Stopping) as start:
            await scheduler.start_run("hourly")
    assert str(fire.value) == "the scheduler is stopping; no new fires are accepted"
    assert (str(run.value), str(start.value)) == (STOPPING, STOPPING)
    assert agent.turns == []
    assert await store.history("hourly") == []


async def test_a_scheduler_that_is_not_running_starts_nothing(autojump_clock: Any) -> None:
    scheduler, agent, store, _ = rig()
    with pytest.raises(Stopping) as fire:
        await scheduler.start_fire("hourly", at(10))
    with pytest.raises(Stopping) as run:
        await scheduler.start_run("hourly")
    assert str(fire.value) == "the scheduler is not running"
    assert str(run.value) == "the scheduler is not running; no turn can be started in it"
    assert agent.turns == []
    assert await store.history("hourly") == []


async def test_a_scheduler_that_ran_and_stopped_starts_nothing(autojump_clock: Any) -> None:
    scheduler, agent, _, _ = rig(external_clock=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        scheduler.stop(0)
    with pytest.raises(Stopping) as fire:
        await scheduler.start_fire("hourly", at(10))
    assert str(fire.value) == "the scheduler is stopping; no new fires are accepted"
    assert agent.turns == []


@pytest.mark.parametrize("reading", [datetime(2026, 7, 7, 9), "2026-07-07T09:00Z", None])
async def test_a_clock_of_naive_datetimes_is_refused_as_the_run_begins(
    autojump_clock: Any, reading: object
) -> None:
    store = MemoryStore()
    scheduler = Scheduler(
        agent=ScriptedAgent(), store=store, routines=[HOURLY], now=lambda: reading
    )
    with pytest.raises(InvalidOption) as refused:
        await scheduler.run()
    assert str(refused.value) == (
        f"now must be a clock of aware datetimes (with their zone, e.g. UTC); it read {reading!r}"
    )
    assert (store.members, store.claims) == ({}, {})  # nothing joined, nothing read
    scheduler.now = WallClock(T0)
    async with trio.open_nursery() as nursery:  # the same scheduler, given a clock, runs
        await nursery.start(scheduler.run)
        scheduler.stop(0)


async def test_a_clock_of_naive_datetimes_is_refused_by_a_host_s_call_naming_the_clock(
    autojump_clock: Any,
) -> None:
    # Not run: a fire, a wake-up and a pause each read the clock themselves.
    store = MemoryStore()
    naive = datetime(2026, 7, 7, 10)
    scheduler = Scheduler(agent=ScriptedAgent(), store=store, routines=[HOURLY], now=lambda: naive)
    said = f"now must be a clock of aware datetimes (with their zone, e.g. UTC); it read {naive!r}"
    calls = [
        scheduler.fire("hourly", at(10)),
        scheduler.add_wakeup("chat:1", "p", delay="2m"),
        scheduler.pause("hourly"),
        scheduler.resume("hourly"),
    ]
    for call in calls:
        with pytest.raises(InvalidOption) as refused:
            await call
        assert str(refused.value) == said
    assert (store.claims, store.wakeups, await store.paused()) == ({}, [], set())


# -- start_fire and start_run: answer at once, the turn goes on ------------------------------


async def test_start_fire_answers_with_the_claim_and_the_turn_goes_on(autojump_clock: Any) -> None:
    scheduler, agent, store, _ = rig(external_clock=True)
    agent.default = Complete(duration=3)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        started = trio.current_time()
        claim = await scheduler.start_fire("hourly", at(10))
        assert trio.current_time() == started  # answered before the turn ended
        assert claim == ClaimResult(ClaimStatus.TAKEN, "2026-07-07T10-00-00-000Z")
        assert [(t.session, t.text) for t in agent.turns] == [
            ("routine:hourly", "Check the queue.")
        ]
        assert agent.finished == []
        again = await scheduler.start_fire("hourly", at(10))
        assert again.status is ClaimStatus.DUPLICATE
        await trio.sleep(5)
        scheduler.stop(0)
    assert len(agent.finished) == 1
    assert [(f.slot, f.outcome, f.ms) for f in await store.history("hourly")] == [
        (at(10), Outcome.COMPLETED, 3000)
    ]


async def test_start_run_holds_the_session_and_runs_the_routines_turn(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler, agent, store, _ = rig(SLOW, external_clock=True)
    agent.default = Hang()
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        assert await scheduler.start_run("slow") is True
        assert scheduler.statistics().in_flight == 1
        assert await scheduler.start_run("slow") is False  # its session is held
        await trio.sleep(10)
        scheduler.stop(0)
    assert [(t.session, t.text) for t in agent.turns] == [("routine:slow", "Think.")]
    # The routine's own timeout applies; no claim, no history.
    assert lines(caplog)[-2:] == [
        (logging.INFO, "slow firing (session=routine:slow)"),
        (logging.ERROR, "slow failed (2000ms): timed out after 2s"),
    ]
    assert await store.history("slow") == []


@pytest.mark.parametrize(("grace", "ms"), [(3, 4000), (0, 1000), (-5, 1000)])
async def test_a_stop_interrupts_a_started_run_at_its_grace(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture, grace: float, ms: int
) -> None:
    scheduler, agent, _, _ = rig(external_clock=True)
    agent.default = Hang()
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await scheduler.start_run("hourly")
        await trio.sleep(1)
        scheduler.stop(grace)
    assert lines(caplog)[-1] == (
        logging.WARNING,
        f"hourly interrupted: the stop ended it: its grace ran out, or a second stop came ({ms}ms)",
    )
    assert scheduler.statistics().in_flight == 0


async def test_a_started_run_outlives_its_host_being_cancelled_within_the_grace(
    autojump_clock: Any,
) -> None:
    scheduler, agent, _, _ = rig(external_clock=True, default_grace=10)
    agent.default = Complete(duration=3)
    with trio.move_on_after(1):
        async with trio.open_nursery() as nursery:
            await nursery.start(scheduler.run)
            await scheduler.start_run("hourly")
    assert len(agent.finished) == 1  # shielded: the host's cancel did not cut it short


# -- run_now ---------------------------------------------------------------------------------


async def test_run_now_runs_the_routines_turn_with_its_timeout_and_hands_over_text(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler, agent, _, _ = rig(SLOW)
    agent.script(Complete(reply="hello"), Hang())
    texts: list[str] = []
    first = await scheduler.run_now("slow", on_text=texts.append)
    with trio.fail_after(60):  # a turn that forgot its timeout would hang
        second = await scheduler.run_now("slow")
    assert (first.outcome, texts) == (Outcome.COMPLETED, ["hello"])
    assert (second.outcome, second.failed) == (Outcome.FAILED, "timed out after 2s")
    assert [(t.session, t.text) for t in agent.turns] == [("routine:slow", "Think.")] * 2
    assert lines(caplog) == [
        (logging.INFO, "slow firing (session=routine:slow)"),
        (logging.INFO, "slow completed (0ms)"),
        (logging.INFO, "slow firing (session=routine:slow)"),
        (logging.ERROR, "slow failed (2000ms): timed out after 2s"),
    ]


async def test_run_now_finishes_its_turn_when_its_caller_is_cancelled(
    autojump_clock: Any,
) -> None:
    scheduler, agent, _, _ = rig()
    agent.default = Complete(duration=3)
    with trio.move_on_after(1):
        await scheduler.run_now("hourly")
    assert len(agent.finished) == 1
    assert scheduler.statistics().in_flight == 0


# -- pause and resume ------------------------------------------------------------------------


async def test_pause_and_resume_write_the_store_log_and_are_seen_at_once(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    daily = Routine(name="daily", prompt="d", cron="0 9 * * *")
    scheduler, _, store, _ = rig(HOURLY, daily)
    await scheduler.pause("hourly")
    await scheduler.pause("daily")
    assert scheduler.statistics().paused == {"hourly", "daily"}
    await trio.sleep(60)
    await scheduler.resume("daily")
    assert scheduler.statistics().paused == {"hourly"}
    assert store.calls == [
        ("set_paused", "hourly", True, T0),
        ("set_paused", "daily", True, T0),
        ("set_paused", "daily", False, T0 + timedelta(seconds=60)),
    ]
    assert store.resumed == {"daily": T0 + timedelta(seconds=60)}
    assert store.paused_at == {"hourly": T0}
    assert lines(caplog) == [
        (logging.INFO, "hourly: paused"),
        (logging.INFO, "daily: paused"),
        (logging.INFO, "daily: resumed"),
    ]


@pytest.mark.parametrize("paused", [True, False])
async def test_changes_asked_at_once_say_one_of_them_changed_it(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture, paused: bool
) -> None:
    # Each read the paused routines before any had written: all said they changed it, and
    # the log said so as many times.
    scheduler, _, store, _ = rig()
    if not paused:
        await scheduler.pause("hourly")
    caplog.clear()
    real = store.set_paused
    writing = [0, 0]  # under way, the most at once

    async def slow(*args: Any, **kwargs: Any) -> None:
        writing[0] += 1
        writing[1] = max(writing)
        await trio.sleep(1)
        await real(*args, **kwargs)
        writing[0] -= 1

    store.set_paused = slow  # type: ignore[method-assign]
    changed: list[bool] = []

    async def change() -> None:
        changed.append(await (scheduler.pause if paused else scheduler.resume)("hourly"))

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(change)
        await trio.sleep(4.5)  # one more while the last of them writes: it waits its turn
        nursery.start_soon(change)
    assert sorted(changed) == [False] * 5 + [True]
    assert writing == [0, 1]
    assert lines(caplog) == [(logging.INFO, "hourly: paused" if paused else "hourly: resumed")]
    assert await store.paused() == ({"hourly"} if paused else set())
    assert scheduler._parts.pausing._changing == {}  # (no lock kept once none waits)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("pause", "could not pause 'hourly'"),
        ("resume", "could not resume 'hourly'"),
    ],
)
async def test_a_pause_or_resume_the_store_never_answers_is_a_state_fault(
    autojump_clock: Any, call: str, message: str
) -> None:
    scheduler, _, store, _ = rig()
    if call == "resume":  # (a resume of a routine not paused writes nothing)
        await scheduler.pause("hourly")
    store.hang("set_paused")
    started = trio.current_time()
    with pytest.raises(Unconfirmed) as caught:  # a StateFault: the change may be made yet
        await getattr(scheduler, call)("hourly")
    assert str(caught.value) == f"{message}: {NO_ANSWER}; it may be made"
    assert trio.current_time() - started == 5.0
    # As the store said last: not paused before the pause, paused before the resume.
    assert scheduler.statistics().paused == ({"hourly"} if call == "resume" else frozenset())


async def test_a_decision_shares_the_stores_refusal_without_the_holds_taken_with_it() -> None:
    # The holds PostgreSQL took with a refused claim were the decider's: a waiter given them
    # counted holds it never asked for (and failed when it asked for another number of them).
    from trio_routines.records import ClaimResult, ClaimStatus
    from trio_routines.scheduler.claiming import _Decision

    for status in (ClaimStatus.STALE, ClaimStatus.DUPLICATE):
        decision = _Decision()
        decision.done(ClaimResult(status, "2026-07-07T10-00-00-000Z", (True,)))
        assert decision.ended.is_set()
        assert decision.refused == ClaimResult(status, "2026-07-07T10-00-00-000Z")
    for ended in (ClaimResult(ClaimStatus.TAKEN, "2026-07-07T10-00-00-000Z", (True,)), None):
        decision = _Decision()
        decision.done(ended)  # taken here, or cut off: the waiters decide for themselves
        assert (decision.ended.is_set(), decision.refused) == (True, None)
