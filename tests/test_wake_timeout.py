"""The wake-up turn timeout (``Scheduler(wakeup_timeout=...)``, ``serve --wakeup-timeout``),
under virtual time: the wake loop runs due wake-ups one at a time, so a turn whose agent never
returns holds back every wake-up due after it, unless the timeout ends that turn as a
routine's ``timeout`` ends a fire (failed, ``timed out after <n>s``)."""

from __future__ import annotations

import itertools
import logging
import math
from datetime import timedelta
from decimal import Decimal
from typing import Any

import attrs
import pytest
import trio
from opentelemetry.trace import StatusCode
from scheduler_rig import HOURLY, T0, at, rig, until
from span_rig import recorded_spans

from trio_routines import InvalidOption, Outcome, Routine, Scheduler
from trio_routines.converter import dumps, wakeup_to_json
from trio_routines.errors import StateFault, Unconfirmed
from trio_routines.instants import truncate_ms
from trio_routines.records import Wakeup
from trio_routines.scheduler.wake import PUT_BACK_TRIES
from trio_routines.testing import Complete, Hang, MemoryStore, ScriptedAgent
from trio_routines.wakeups import MAX_ATTEMPTS, WakeupRequest, defer_dropped

MANUAL = Routine(name="m", prompt="p")  # on demand: no cron fire while a test runs


async def add_due(store: MemoryStore, session: str, minutes_ago: int) -> Wakeup:
    """A one-shot of ``session`` that came due ``minutes_ago`` before T0 (stored in call order,
    the order the wake loop takes due ones in)."""
    fire_at = T0 - timedelta(minutes=minutes_ago)
    request = WakeupRequest(session=session, prompt="look again", fire_at=fire_at)
    return await store.add_wakeup(request, fire_at - timedelta(minutes=2))


def turn_lines(caplog: pytest.LogCaptureFixture, wakeup: Wakeup) -> list[logging.LogRecord]:
    """The outcome lines of ``wakeup``'s turn (its start line left out)."""
    label = f"wake {wakeup.id[:8]} "
    return [
        r
        for r in caplog.records
        if r.getMessage().startswith(label) and "firing" not in r.getMessage()
    ]


async def test_a_stuck_wake_up_turn_ends_at_the_timeout_and_the_next_due_one_runs(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="trio_routines")
    spans = recorded_spans(monkeypatch)
    scheduler, agent, store, _ = rig(MANUAL, wakeup_timeout=90)
    assert scheduler.wakeup_timeout == 90.0
    agent.script(Hang(), session="stuck")
    # 89 s: under the bound of its own turn, though past 90 s from the stuck turn's start.
    agent.script(Complete(duration=89), session="next")
    stuck = await add_due(store, "stuck", 2)
    after = await add_due(store, "next", 1)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(600)
        scheduler.stop(1)
    first, second = agent.turns
    assert (first.session, second.session) == ("stuck", "next")
    assert second.started_at == first.started_at + 90  # at the timeout, not a poll later
    assert second.wall == T0 + timedelta(seconds=90)
    assert agent.finished == [second]  # the next one's turn ran whole
    assert await store.list_wakeups() == []  # a one-shot that failed is not retried
    # Logged as a routine's timed-out turn is: one ERROR line with the outcome's fields.
    (line,) = turn_lines(caplog, stuck)
    assert (line.levelno, line.getMessage()) == (
        logging.ERROR,
        f"wake {stuck.id[:8]} failed (90000ms): timed out after 90s",
    )
    assert (line.outcome, line.ms, line.error) == ("failed", 90000, "timed out after 90s")  # type: ignore[attr-defined]
    (done,) = turn_lines(caplog, after)
    assert done.getMessage() == f"wake {after.id[:8]} completed (89000ms)"
    # Traced as failed, with the reason.
    traced = {
        dict(s.attributes or {})["trio_routines.wakeup"]: s
        for s in spans.get_finished_spans()
        if s.name == "wakeup.turn"
    }
    assert traced[stuck.id].attributes["trio_routines.outcome"] == "failed"  # type: ignore[index]
    assert traced[stuck.id].status.status_code is StatusCode.ERROR
    assert traced[stuck.id].status.description == "timed out after 90s"
    assert traced[after.id].attributes["trio_routines.outcome"] == "completed"  # type: ignore[index]


async def test_without_the_option_a_stuck_wake_up_turn_holds_the_next_one_back(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_routines")
    scheduler, agent, store, _ = rig(MANUAL)
    agent.script(Hang(), session="stuck")
    stuck = await add_due(store, "stuck", 2)
    after = await add_due(store, "next", 1)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(2 * 24 * 3600)  # two days: no bound of any length ended the turn
        assert [t.session for t in agent.turns] == ["stuck"]
        assert turn_lines(caplog, stuck) == []
        assert await store.list_wakeups() == [after]  # still due, still waiting
        scheduler.stop(1)
    # Only the stop's grace ends it.
    (line,) = turn_lines(caplog, stuck)
    assert line.getMessage().startswith(f"wake {stuck.id[:8]} interrupted: the stop ended it")
    assert [t.session for t in agent.turns] == ["stuck"]


async def test_the_wake_up_timeout_does_not_bound_a_routines_fire(
    autojump_clock: Any,
) -> None:
    """Scheduler-wide for wake-up turns only: a routine's fire keeps its own ``timeout``."""
    scheduler, agent, store, wall = rig(HOURLY, wakeup_timeout=60)
    agent.script(Hang(), session=HOURLY.session)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(12, 30))  # the 11:00 fire runs on: 12:00 overlaps it
        (fire,) = [f for f in await store.history("hourly") if f.slot == at(11)]
        assert fire.outcome is None
        scheduler.stop(0)
    (fire,) = [f for f in await store.history("hourly") if f.slot == at(11)]
    assert fire.outcome is Outcome.INTERRUPTED


@pytest.mark.parametrize(
    ("option", "value", "wanted"),
    [
        ("wakeup_timeout", 0, "more than 0"),
        ("wakeup_timeout", -5.0, "more than 0"),
        ("wakeup_timeout", math.nan, "more than 0"),
        ("wakeup_timeout", math.inf, "more than 0"),
        ("wakeup_timeout", True, "more than 0"),  # a switch taken for a number: 1 s
        ("wakeup_timeout", "30", "more than 0"),
        ("store_timeout", True, "more than 0"),  # the same check, shared
        ("default_grace", "10", "0 or more"),
        ("wakeup_timeout", Decimal("NaN"), "more than 0"),
        ("default_grace", Decimal("-1"), "0 or more"),
        ("wakeup_timeout", Decimal("sNaN"), "more than 0"),  # no float: refused all the same
        ("store_timeout", 10**400, "more than 0"),  # too large for a float
        ("default_grace", Decimal("1e400"), "0 or more"),
    ],
)
def test_a_bad_seconds_option_is_refused_in_one_line_naming_it(
    option: str, value: Any, wanted: str
) -> None:
    with pytest.raises(InvalidOption) as refused:
        Scheduler(agent=ScriptedAgent(), store=MemoryStore(), **{option: value})
    assert str(refused.value) == (
        f"{option} must be a finite number of seconds, {wanted}: {value!r}"
    )


def test_a_wake_up_timeout_is_kept_as_seconds() -> None:
    def made(**options: Any) -> Scheduler:
        return Scheduler(agent=ScriptedAgent(), store=MemoryStore(), **options)

    assert made().wakeup_timeout is None
    assert made(wakeup_timeout=None).wakeup_timeout is None
    kept = made(wakeup_timeout=45).wakeup_timeout
    assert (kept, type(kept)) == (45.0, float)
    exact = made(wakeup_timeout=Decimal("2.5")).wakeup_timeout  # a number of seconds too
    assert (exact, type(exact)) == (2.5, float)


@pytest.mark.parametrize("value", [1e-9, 0.049, 86_400.5, 1e308, math.nan, 0, True, "30"])
def test_a_poll_interval_out_of_its_range_is_refused_in_one_line(value: Any) -> None:
    # 1e-9 read the store in a busy loop; 1e308 left due wake-ups waiting for ever.
    with pytest.raises(InvalidOption) as refused:
        Scheduler(agent=ScriptedAgent(), store=MemoryStore(), poll_interval=value)
    message = str(refused.value)
    assert message in (
        f"poll_interval must be between 0.05 and 86400 seconds: {value!r}",
        f"poll_interval must be a finite number of seconds, more than 0: {value!r}",
    )
    in_range = isinstance(value, float) and math.isfinite(value) and value > 0
    assert message.startswith("poll_interval must be between") is in_range


@pytest.mark.parametrize("value", [0.05, 30, 86_400])
def test_a_poll_interval_within_its_range_is_kept(value: float) -> None:
    kept = Scheduler(agent=ScriptedAgent(), store=MemoryStore(), poll_interval=value).poll_interval
    assert (kept, type(kept)) == (value, float)


async def test_a_wake_up_whose_session_the_store_cannot_hold_is_put_back_and_runs_later(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Taken, then its turn never began: it was removed as if it had run (a lost connection
    # lost it for good, where a crash loses at most the wake-up whose turn was in flight).
    caplog.set_level(logging.INFO, logger="trio_routines")
    scheduler, agent, store, _ = rig(MANUAL)
    due = await add_due(store, "s", 1)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)  # joined: the next hold asked for fails
        store.fail("take", StateFault("disk busy"), times=1)
        await trio.sleep(5)
        (back,) = await store.list_wakeups()
        assert (back.id, back.attempts) == (due.id, 1)  # put back, counted as a retry
        assert agent.turns == []
        await trio.sleep(60)
        scheduler.stop(0)
    assert [turn.session for turn in agent.turns] == ["s"]  # at the next poll
    label = f"wake {due.id[:8]}"
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]
    assert said == [
        (logging.ERROR, f"{label}: could not hold session s: disk busy"),
        (logging.WARNING, f"{label}: not run: put back, tried again at the next poll"),
    ]
    assert await store.list_wakeups() == []


def counting_defers(store: MemoryStore) -> list[float]:
    """When each deferral (a put-back's too) was asked of ``store``, on Trio's clock."""
    asked: list[float] = []
    defer = store.defer_wakeup

    async def counted(wakeup: Wakeup, fire_at: Any) -> bool:
        asked.append(trio.current_time())
        return await defer(wakeup, fire_at)

    store.defer_wakeup = counted  # type: ignore[method-assign]
    return asked


async def test_a_wake_up_the_store_takes_back_only_later_is_offered_at_each_poll_and_runs(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler, agent, store, _ = rig(MANUAL, poll_interval=30)
    due = await add_due(store, "s", 1)
    asked = counting_defers(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        store.fail("take", StateFault("disk busy"), times=1)
        store.fail("defer_wakeup", StateFault("still busy"), times=PUT_BACK_TRIES)
        await trio.sleep(5)
        assert len(asked) == PUT_BACK_TRIES  # a second apart, then left for the next poll
        gaps = [round(b - a, 3) for a, b in itertools.pairwise(asked)]
        assert gaps == [1.0] * (PUT_BACK_TRIES - 1)
        assert await store.list_wakeups() == []  # taken, not yet back
        await trio.sleep(120)
        scheduler.stop(0)
    assert len(asked) == PUT_BACK_TRIES + 1  # once more, at the next poll: taken back
    assert [turn.session for turn in agent.turns] == ["s"]  # and run at a later one
    label = f"wake {due.id[:8]}"
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]
    assert said == [
        (logging.ERROR, f"{label}: could not hold session s: disk busy"),
        (
            logging.WARNING,
            f"{label}: not run, and not put back yet (still busy): offered again at each poll",
        ),
        (logging.WARNING, f"{label}: not run: put back, tried again at the next poll"),
    ]


async def test_a_wake_up_the_store_never_takes_back_is_named_whole_as_lost_at_the_stop(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler, agent, store, _ = rig(MANUAL, poll_interval=30)
    due = await add_due(store, "s", 1)
    asked = counting_defers(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        store.fail("take", StateFault("disk busy"), times=1)
        store.fail("defer_wakeup", StateFault("still busy"))
        await trio.sleep(100)
        scheduler.stop(0)
    assert agent.turns == []
    assert len(asked) >= PUT_BACK_TRIES + 2  # offered at each poll meanwhile
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors[-1] == (
        f"wake {due.id[:8]}: lost: its turn never began, and the store did not take it back "
        f"before the stop — add it again: {dumps(wakeup_to_json(due))}"
    )


async def test_a_wake_up_whose_return_is_not_confirmed_is_not_offered_again_and_named_whole(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # It may be back: offered again, it could be there twice.
    scheduler, agent, store, _ = rig(MANUAL, poll_interval=30)
    due = await add_due(store, "s", 1)
    asked = counting_defers(store)
    unsure = Unconfirmed("the commit was sent, no answer")
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        store.fail("take", StateFault("disk busy"), times=1)
        store.fail("defer_wakeup", unsure)
        await trio.sleep(100)
        scheduler.stop(0)
    assert agent.turns == []
    assert len(asked) == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors[-1] == (
        f"wake {due.id[:8]}: not run; its return is not confirmed ({unsure}): "
        f"{dumps(wakeup_to_json(due))}"
    )


async def test_a_busy_wake_up_the_store_will_not_take_back_is_held_and_offered_at_each_poll(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Its session busy, its re-queue failed (a lock held past the statement timeout): it was
    # taken, not back, and lost, with only "wake-up poll failed" said.
    scheduler, agent, store, _ = rig(MANUAL, poll_interval=30)
    agent.script(Hang(), session="routine:m")
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await scheduler.start_run("m")  # its session busy from now on
        due = await add_due(store, "routine:m", 1)
        store.fail("defer_wakeup", StateFault("locked"), times=2)
        await trio.sleep(100)
        assert [w.id for w in await store.list_wakeups()] == [due.id]  # back, at the third
        scheduler.stop(0)
    label = f"wake {due.id[:8]}"
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]
    assert said[:2] == [
        (
            logging.WARNING,
            f"{label}: session busy, and not put back yet (locked): offered again at each poll",
        ),
        (logging.WARNING, f"{label}: not run: put back, tried again at the next poll"),
    ]
    assert not [text for _, text in said if text.startswith("wake-up poll failed")]


async def test_a_busy_wake_up_whose_return_is_not_confirmed_is_named_whole(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler, agent, store, _ = rig(MANUAL, poll_interval=30)
    agent.script(Hang(), session="routine:m")
    unsure = Unconfirmed("the commit was sent, no answer")
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await scheduler.start_run("m")
        due = await add_due(store, "routine:m", 1)
        store.fail("defer_wakeup", unsure)
        asked = counting_defers(store)
        await trio.sleep(100)
        scheduler.stop(0)
    assert len(asked) == 1  # not offered again: it may be back
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors[-1] == (
        f"wake {due.id[:8]}: session busy; its return is not confirmed ({unsure}): "
        f"{dumps(wakeup_to_json(due))}"
    )


async def test_a_wake_up_put_back_past_its_retries_is_dropped_saying_so(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The put-back is a retry: one at its last is dropped, as a busy one is, in one line.
    scheduler, agent, store, _ = rig(MANUAL, poll_interval=1)  # its retries a poll apart
    due = await add_due(store, "s", 1)
    store.wakeups = [attrs.evolve(w, attempts=MAX_ATTEMPTS) for w in store.wakeups]
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        store.fail("take", StateFault("disk busy"), times=1)
        await trio.sleep(10)
        scheduler.stop(0)
    assert agent.turns == []
    assert await store.list_wakeups() == []
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [
        f"wake {due.id[:8]}: could not hold session s: disk busy",
        f"wake {due.id[:8]}: {defer_dropped(attrs.evolve(due, attempts=MAX_ATTEMPTS))}",
    ]


async def test_a_wake_up_put_back_under_a_short_poll_waits_as_a_retry_does(
    autojump_clock: Any,
) -> None:
    scheduler, agent, store, _ = rig(MANUAL, poll_interval=1)
    due = await add_due(store, "s", 1)
    began = scheduler.now()
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        store.fail("take", StateFault("disk busy"), times=1)
        await trio.sleep(0.5)
        (back,) = await store.list_wakeups()
        assert (back.id, back.attempts) == (due.id, 1)
        assert back.fire_at == truncate_ms(began + timedelta(seconds=1))  # a poll on
        await trio.sleep(5)
        scheduler.stop(0)
    assert [turn.session for turn in agent.turns] == ["s"]
