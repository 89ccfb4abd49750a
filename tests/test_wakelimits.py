"""The limits on self-scheduled turns (wakelimits.py): the rate per session and the chain
depth, as pure rules at their window edges and end to end under virtual time."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import attrs
import pytest
import trio
import trio.testing

from trio_routines import Completed, Event, StateFault, TextDelta, current_fire
from trio_routines.errors import InvalidWakeup, Unconfirmed
from trio_routines.instants import format_iso
from trio_routines.records import Origin, OriginKind, Wakeup
from trio_routines.routines import Routine
from trio_routines.scheduler import Scheduler
from trio_routines.testing import Complete, MemoryStore, ScriptedAgent, WallClock
from trio_routines.tools import SCHEDULE, call_tool
from trio_routines.wakelimits import (
    RATE_WINDOW,
    WakeLimits,
    by_turn,
    check_depth,
    check_rate,
    room_at,
)
from trio_routines.wakeups import MAX_ATTEMPTS, WakeupRequest, asked_by, plan_add

NOW = datetime(2026, 7, 7, 10, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
MS = timedelta(milliseconds=1)
BY_TURN = Origin(kind=OriginKind.WAKEUP, parent="w0", depth=1)


def one_shot(at: datetime, origin: Origin | None = BY_TURN, wakeup_id: str = "new") -> Wakeup:
    return Wakeup(id=wakeup_id, session="s", prompt="p", fire_at=at, origin=origin)


def check(
    new: Wakeup, *, recent: tuple[datetime, ...] = (), pending: tuple[Wakeup, ...] = (), rate: int
) -> None:
    check_rate(list(pending), new, recent, NOW, WakeLimits(rate=rate))


# --- the rate, as a rule -----------------------------------------------------------------------


def test_a_turn_run_exactly_an_hour_before_the_new_one_is_out_of_its_window() -> None:
    new = one_shot(NOW + MINUTE)
    hour_before = NOW + MINUTE - RATE_WINDOW
    check(new, recent=(hour_before, NOW), rate=2)  # the older one is out: 2 counted
    with pytest.raises(InvalidWakeup, match="3 wake-up turns"):
        check(new, recent=(hour_before + MS, NOW), rate=2)


def test_the_reset_is_when_enough_turns_run_have_left_the_hour() -> None:
    recent = (NOW - 50 * MINUTE, NOW - 40 * MINUTE, NOW - 30 * MINUTE)
    with pytest.raises(InvalidWakeup) as refused:
        check(one_shot(NOW + MINUTE), recent=recent, rate=2)  # 4 counted: two must leave
    assert "resets at 2026-07-07T09:20:00.000Z" not in str(refused.value)
    assert "it resets at 2026-07-07T10:20:00.000Z" in str(refused.value)
    assert "rate limit" in str(refused.value)


def test_a_queued_burst_counts_whenever_it_is_due() -> None:
    later = NOW + timedelta(hours=5)
    burst = tuple(one_shot(later, wakeup_id=f"b{i}") for i in range(3))
    with pytest.raises(InvalidWakeup, match=r"4 wake-up turns .* waiting does not make room"):
        check(one_shot(later + RATE_WINDOW - MS), pending=burst, rate=3)
    check(one_shot(later + RATE_WINDOW), pending=burst, rate=3)  # the next hour is free
    check(one_shot(later - MS), pending=burst, rate=4)


def test_a_one_shot_between_two_bursts_is_weighed_against_both_sides() -> None:
    early = tuple(one_shot(NOW + 2 * MINUTE, wakeup_id=f"e{i}") for i in range(2))
    late = tuple(one_shot(NOW + 70 * MINUTE, wakeup_id=f"l{i}") for i in range(2))
    # 35 minutes on: the hour from the early burst holds 3, the hour to the late one 3.
    check(one_shot(NOW + 35 * MINUTE), pending=early + late, rate=3)
    with pytest.raises(InvalidWakeup):
        check(one_shot(NOW + 35 * MINUTE), pending=early + late, rate=2)


def test_a_recurring_wake_up_counts_each_occurrence() -> None:
    every_ten = Wakeup(
        id="r", session="s", prompt="p", fire_at=NOW + 10 * MINUTE, cron="*/10 * * * *"
    )
    with pytest.raises(InvalidWakeup, match="7 wake-up turns"):
        check(one_shot(NOW + 15 * MINUTE), pending=(every_ten,), rate=6)
    check(one_shot(NOW + 15 * MINUTE), pending=(every_ten,), rate=7)
    # Another session's wake-ups never count.
    other = Wakeup(id="o", session="t", prompt="p", fire_at=NOW + 2 * MINUTE)
    check(one_shot(NOW + 5 * MINUTE), pending=(other,) * 5, rate=1)


def test_a_new_recurring_wake_up_is_weighed_by_its_occurrences() -> None:
    new = Wakeup(
        id="n",
        session="s",
        prompt="p",
        fire_at=NOW + 10 * MINUTE,
        cron="*/10 * * * *",
        origin=BY_TURN,
    )
    check(new, rate=6)
    with pytest.raises(InvalidWakeup, match="6 wake-up turns"):
        check(new, rate=5)
    with pytest.raises(InvalidWakeup, match="7 wake-up turns"):
        check(new, rate=6, pending=(one_shot(NOW + 95 * MINUTE, wakeup_id="x"),))


def test_only_a_turn_is_refused_and_no_rate_means_no_limit() -> None:
    recent = tuple(NOW - i * MINUTE for i in range(5))
    for kind in (OriginKind.HTTP, OriginKind.CLI, OriginKind.API):
        check(one_shot(NOW + MINUTE, Origin(kind=kind)), recent=recent, rate=1)
    check(one_shot(NOW + MINUTE, None), recent=recent, rate=1)
    check_rate([], one_shot(NOW + MINUTE), recent, NOW, WakeLimits(rate=None))
    routine = Origin(kind=OriginKind.ROUTINE, routine="daily", depth=1)
    with pytest.raises(InvalidWakeup):
        check(one_shot(NOW + MINUTE, routine), recent=recent, rate=1)


def test_a_model_s_call_outside_a_turn_is_refused_as_a_turn_s_is() -> None:
    recent = tuple(NOW - i * MINUTE for i in range(5))
    model = Origin(kind=OriginKind.MODEL, depth=1)
    check_rate([], one_shot(NOW + MINUTE, model), recent, NOW, WakeLimits(rate=6))  # not over
    with pytest.raises(InvalidWakeup, match="rate limit"):
        check_rate([], one_shot(NOW + MINUTE, model), recent, NOW, WakeLimits(rate=5))
    assert by_turn(model)
    assert asked_by(None, model=True) == model
    assert asked_by(None) == Origin(kind=OriginKind.API)


async def test_a_model_s_tool_call_in_a_host_s_own_turn_is_limited_and_the_host_s_is_not(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A host hands its model the tools in its own turn (a chat): no turn of ours is current,
    # and what the model adds is the model's (origin "model"), limited by the rate.
    store = MemoryStore()
    scheduler = Scheduler(
        agent=ScriptedAgent(Complete()),
        store=store,
        routines=[DAILY],
        now=WallClock(START),
        wake_limits=WakeLimits(rate=3, depth=1),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        assert current_fire() is None
        replies = [
            await call_tool(scheduler, "chat:42", SCHEDULE, {"prompt": f"nag {i}", "in": 61 + i})
            for i in range(5)
        ]
        assert all(reply.startswith("Scheduled ") for reply in replies[:3]), replies
        assert all("rate limit" in reply and "at most 3" in reply for reply in replies[3:])
        # The host's own code is the operator: counted, never refused.
        await scheduler.add_wakeup("chat:42", "the host's reminder", delay=62)
        pending = await scheduler.list_wakeups("chat:42")
        assert [w.origin for w in pending] == [Origin(kind=OriginKind.MODEL, depth=1)] * 3 + [
            Origin(kind=OriginKind.API)
        ]
        scheduler.stop()


def test_depth_at_the_cap_is_allowed_and_one_more_is_refused() -> None:
    limits = WakeLimits(depth=3)
    check_depth(Origin(kind=OriginKind.WAKEUP, parent="p", depth=3), limits)
    with pytest.raises(InvalidWakeup, match=r"number 4 .*at most 3.* does not reset with time"):
        check_depth(Origin(kind=OriginKind.WAKEUP, parent="p", depth=4), limits)
    check_depth(Origin(kind=OriginKind.WAKEUP, parent="p", depth=99), WakeLimits(depth=None))
    check_depth(None, limits)


def test_the_limits_are_checked_before_the_entry_is_made() -> None:
    request = WakeupRequest(
        session="s",
        prompt="p",
        fire_at=NOW + 2 * MINUTE,
        origin=BY_TURN,
        limits=WakeLimits(rate=1),
        recent=(NOW - MINUTE,),
    )
    with pytest.raises(InvalidWakeup, match="rate limit"):
        plan_add([], request, NOW)


@pytest.mark.parametrize(("field", "value"), [("rate", 0), ("depth", -1), ("rate", True)])
def test_limits_must_be_positive(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"{field} must be a positive integer"):
        WakeLimits(**{field: value})  # type: ignore[arg-type]


# --- end to end, under virtual time --------------------------------------------------------------

START = datetime(2026, 7, 7, 8, 59, 30, tzinfo=UTC)
DAILY = Routine(name="daily", prompt="morning brief", cron="0 9 * * *")


class Runaway:
    """An agent whose every turn asks, through the model-facing tool, to be woken a minute
    later: the runaway the limits exist for. Notes each turn's time and each tool answer."""

    def __init__(self, wall: WallClock) -> None:
        self.wall = wall
        self.scheduler: Scheduler | None = None
        self.turns: list[datetime] = []
        self.replies: list[str] = []
        self.refused = trio.Event()

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        assert self.scheduler is not None
        assert current_fire() is not None
        self.turns.append(self.wall())
        reply = await call_tool(self.scheduler, session, SCHEDULE, {"prompt": "again", "in": 60})
        self.replies.append(reply)
        if "refused" in reply:
            self.refused.set()
        yield TextDelta("ok")
        yield Completed()


async def _run_until_refused(limits: WakeLimits, store: MemoryStore) -> Runaway:
    wall = WallClock(START)
    agent = Runaway(wall)
    scheduler = Scheduler(
        agent=agent, store=store, routines=[DAILY], now=wall, poll_interval=5, wake_limits=limits
    )
    agent.scheduler = scheduler
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await agent.refused.wait()
        scheduler.stop()
    return agent


async def test_a_runaway_chain_is_stopped_by_the_rate_with_its_reset(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    agent = await _run_until_refused(WakeLimits(rate=5, depth=None), store)
    # The routine's turn and five wake-up turns each scheduled one; the fifth wake-up turn's
    # would be the sixth within the hour.
    assert len(agent.turns) == 6
    *accepted, refused = agent.replies
    assert all(reply.startswith("Scheduled") for reply in accepted)
    first_wake = agent.turns[1]
    reset = format_iso(first_wake + RATE_WINDOW)
    assert refused.startswith(f"{SCHEDULE}: refused — rate limit — this session would have 6")
    assert f"it resets at {reset}, when the turns run before then leave the hour" in refused
    # Each wake-up turn was recorded as it started.
    assert store.turns["routine:daily"] == agent.turns[1:]
    assert await store.list_wakeups() == []  # the chain ended


async def test_a_chain_too_deep_is_refused_whatever_the_rate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = await _run_until_refused(WakeLimits(rate=None, depth=3), MemoryStore())
    # Depth 1 (the routine's), 2 and 3 are added; the third wake-up's turn would add depth 4.
    assert len(agent.turns) == 4
    assert "chain-depth limit — this wake-up would be number 4" in agent.replies[-1]


async def test_a_turn_whose_record_fails_still_runs(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    store.fail("note_wake_turn", StateFault("disk full"), times=1)
    caplog.set_level(logging.WARNING, "trio_routines")
    agent = await _run_until_refused(WakeLimits(rate=3, depth=None), store)
    # The first wake-up turn went unrecorded: one more turn got through before the limit.
    assert len(agent.turns) == 5
    assert any("went unrecorded (rate limit): disk full" in r.getMessage() for r in caplog.records)


async def test_a_busy_wake_up_turn_is_not_recorded_until_it_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The routine's turn holds its session for ten minutes; the wake-up set for that session
    # comes due meanwhile, is deferred while busy, and is recorded once, when it runs.
    wall = WallClock(START)
    agent = ScriptedAgent(wall=wall)
    agent.script(Complete(duration=600), Complete(), session="routine:daily")
    store = MemoryStore()
    scheduler = Scheduler(agent=agent, store=store, routines=[DAILY], now=wall, poll_interval=30)
    await store.add_wakeup(
        WakeupRequest(session="routine:daily", prompt="p", fire_at=START + 2 * MINUTE), START
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(20 * 60)
        scheduler.stop()
    woken = [t for t in agent.turns if "wake-up" in t.text]
    assert len(woken) == 1
    assert store.turns["routine:daily"] == [woken[0].wall]
    assert woken[0].wall >= START + timedelta(minutes=10, seconds=30)


class Noting:
    """An agent noting each turn: its wake-up's id, and when it began."""

    def __init__(self, wall: WallClock) -> None:
        self.wall = wall
        self.turns: list[tuple[str, datetime]] = []

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        fire = current_fire()
        assert fire is not None
        assert fire.wakeup is not None
        self.turns.append((fire.wakeup, self.wall()))
        yield Completed()


async def test_the_rate_holds_as_the_turns_come_whatever_was_weighed_when_asked(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    # Wake-ups a turn asked for, added as no add would accept them (a cron whose occurrences
    # gather beyond the horizon an add weighs, in effect): at their time, the session's rate
    # still holds. A one-shot waits for room; a recurring occurrence is not run; an operator's
    # runs at its time, and counts.
    caplog.set_level(logging.INFO, "trio_routines")
    store = MemoryStore()
    wall = WallClock(START)
    by_turn = Origin(kind=OriginKind.WAKEUP, parent="w0", depth=1)
    due = START + 2 * MINUTE
    unlimited = WakeLimits(rate=None)
    for name in ("a", "b", "c", "d"):
        await store.add_wakeup(
            WakeupRequest(session="s", prompt=name, fire_at=due, origin=by_turn, limits=unlimited),
            START,
        )
    await store.add_wakeup(
        WakeupRequest(
            session="s", prompt="op", fire_at=due + MINUTE, origin=Origin(kind=OriginKind.HTTP)
        ),
        START,
    )
    every_ten = WakeupRequest(
        session="s", prompt="tick", cron="*/10 * * * *", origin=by_turn, limits=unlimited
    )
    await store.add_wakeup(every_ten, START)
    ids = {w.prompt: w.id for w in await store.list_wakeups()}
    agent = Noting(wall)
    scheduler = Scheduler(
        agent=agent,
        store=store,
        now=wall,
        poll_interval=5,
        wake_limits=WakeLimits(rate=2, depth=None),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(3 * 3600)
        scheduler.stop()
    ran = {wakeup_id: [at for w, at in agent.turns if w == wakeup_id] for wakeup_id in ids.values()}
    for prompt in ("a", "b", "c", "d", "op"):
        assert len(ran[ids[prompt]]) == 1, prompt  # none lost, none twice
    assert ran[ids["op"]][0] < due + 2 * MINUTE  # the operator's, at its time
    starts = sorted(at for _, at in agent.turns)
    for wakeup_id, at in agent.turns:
        if wakeup_id != ids["op"]:  # each turn-set one began with fewer than 2 in its hour
            assert sum(at - RATE_WINDOW < other < at for other in starts) < 2, (wakeup_id, at)
    assert len(ran[ids["tick"]]) < 18  # most of its 18 occurrences came over the rate
    said = [r.getMessage() for r in caplog.records if "rate limit" in r.getMessage()]
    over = "rate limit — 2 wake-up turns of session 's' in the hour"
    tick = f"wake {ids['tick'][:8]}: {over}: this occurrence is not run; the next fires per cron"
    assert tick in said
    # c and d: the hour up to their slot holds a and b, the older due at 09:01:30.
    first_room = format_iso(due + RATE_WINDOW)
    assert f"wake {ids['c'][:8]}: {over}: deferred to {first_room}" in said
    assert f"wake {ids['d'][:8]}: {over}: deferred to {first_room}" in said


def test_room_comes_when_the_oldest_of_the_rate_s_newest_turns_leaves_the_hour() -> None:
    at = NOW + 30 * MINUTE
    ran = [NOW - 30 * MINUTE, NOW, NOW + 10 * MINUTE, NOW + 40 * MINUTE]  # the last: later
    assert room_at(ran, at, None) is None
    assert room_at(ran, at, 3) is None  # two in (at - 1h, at]
    assert room_at(ran, at, 2) == NOW + RATE_WINDOW  # the older of the two leaves then
    assert room_at(ran, at, 1) == NOW + 10 * MINUTE + RATE_WINDOW
    # One due exactly an hour before is out of the hour, as in the add's windows.
    assert room_at([at - RATE_WINDOW], at, 1) is None
    assert room_at([at - RATE_WINDOW + MS], at, 1) == at + MS
    assert room_at([at], at, 1) == at + RATE_WINDOW  # one due at the same instant counts


class Slow:
    """An agent whose turns take ``seconds``, in turn (so the polls after them drift)."""

    def __init__(self, *seconds: float) -> None:
        self.seconds = seconds
        self.turns = 0

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        await trio.sleep(self.seconds[self.turns % len(self.seconds)])
        self.turns += 1
        yield Completed()


async def test_a_session_at_exactly_its_rate_runs_every_occurrence_however_late_each_starts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Six an hour at a rate of 6: the add accepts it. Each turn starts late behind the poll,
    # by more or less as the turns before took longer or shorter; counted at the instant each
    # was due, as the add weighs them, none crowds out the next hour's.
    store = MemoryStore()
    request = WakeupRequest(
        session="s",
        prompt="p",
        cron="*/10 * * * *",
        origin=Origin(kind=OriginKind.MODEL, depth=1),
        limits=WakeLimits(rate=6),
    )
    await store.add_wakeup(request, START)
    agent = Slow(0, 17, 3, 23, 11, 29, 7)
    scheduler = Scheduler(
        agent=agent, store=store, now=WallClock(START), wake_limits=WakeLimits(rate=6)
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)  # polls every 30 s, after each turn's end
        await trio.sleep(6 * 3600)
        scheduler.stop()
    assert agent.turns == 36  # every occurrence of six hours


async def two_due_at_once() -> MemoryStore:
    """A store holding two one-shots a turn set, ``a`` and ``b``, both due at 09:01:30."""
    store = MemoryStore()
    by_turn = Origin(kind=OriginKind.WAKEUP, parent="w0", depth=1)
    for prompt in ("a", "b"):
        request = WakeupRequest(
            session="s", prompt=prompt, fire_at=START + 2 * MINUTE, origin=by_turn
        )
        await store.add_wakeup(attrs.evolve(request, limits=WakeLimits(rate=None)), START)
    return store


async def turns_at_a_rate_of_one(store: MemoryStore, hours: float) -> int:
    """The wake-up turns run from ``store`` in ``hours`` at a rate of one an hour."""
    agent = Slow(1)
    scheduler = Scheduler(
        agent=agent,
        store=store,
        now=WallClock(START),
        poll_interval=5,
        wake_limits=WakeLimits(rate=1),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(hours * 3600)
        scheduler.stop()
    return agent.turns


async def test_a_rate_that_cannot_be_read_or_a_re_queue_not_made_lets_the_turn_run(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    store = await two_due_at_once()
    ids = {w.prompt: w.id for w in await store.list_wakeups()}
    store.fail("wake_turns", StateFault("the turns are unreadable"), times=1)
    store.fail("defer_wakeup", StateFault("the disk is full"))
    assert (
        await turns_at_a_rate_of_one(store, hours=0.2) == 2
    )  # none lost: the first unchecked, the second not re-queued
    assert await store.list_wakeups() == []
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "the rate of 's' was not checked (its turn runs): the turns are unreadable" in said
    over = "rate limit — 1 wake-up turns of session 's' in the hour"
    assert (
        f"wake {ids['b'][:8]}: {over}, but it could not be deferred (the disk is full): "
        "it runs now" in said
    )


async def test_a_re_queue_the_store_cannot_confirm_is_not_run_now(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    # Its commit was sent, its answer lost: it may be deferred, so running it now could run it
    # twice. At most once: it is not run now.
    store = await two_due_at_once()
    ids = {w.prompt: w.id for w in await store.list_wakeups()}
    store.fail("defer_wakeup", Unconfirmed("re-queueing it is not confirmed"))
    assert await turns_at_a_rate_of_one(store, hours=0.2) == 1
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    over = "rate limit — 1 wake-up turns of session 's' in the hour"
    assert (
        f"wake {ids['b'][:8]}: {over}; its deferral is not confirmed (re-queueing it is not "
        "confirmed): not run now" in said
    )
    # Cut off by the scheduler's own deadline, a store's thread may still make it: the same.
    store = await two_due_at_once()
    ids = {w.prompt: w.id for w in await store.list_wakeups()}
    store.hang("defer_wakeup")
    caplog.clear()
    assert await turns_at_a_rate_of_one(store, hours=0.2) == 1
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert (
        f"wake {ids['b'][:8]}: {over}; its deferral is not confirmed (could not re-queue "
        f"wake-up {ids['b']}: the store did not answer within 30s (or before the stop's grace "
        "ran out); it may be made): not run now" in said
    )


async def test_a_one_shot_held_by_the_rate_past_its_retries_is_dropped_saying_so(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    store = await two_due_at_once()
    store.wakeups[1] = attrs.evolve(store.wakeups[1], attempts=MAX_ATTEMPTS)  # its last retry
    store_ids_b = store.wakeups[1].id
    assert await turns_at_a_rate_of_one(store, hours=3) == 1
    assert await store.list_wakeups() == []
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [
        f"wake {store_ids_b[:8]}: rate limit — 1 wake-up turns of session 's' in the hour: "
        "dropped after too many retries (its session busy, or at its rate limit)"
    ]
