"""No silent gaps: every slot a routine passes over is recorded, with its reason.

The pure rules (gaps.py) as plain tests; the runtime under virtual time, one test per reason
(overlap, down, paused, caught-up, late), and a pause that ends while no scheduler runs.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from scheduler_rig import completed

from trio_routines import (
    Completed,
    Event,
    Fire,
    Gap,
    GapReason,
    Outcome,
    Routine,
    Scheduler,
    StateFault,
)
from trio_routines.cli import main
from trio_routines.cron import next_run
from trio_routines.gaps import (
    COUNT_LIMIT,
    add_gap,
    is_late,
    passed_over,
    plan_boot,
    unfired_gaps,
)
from trio_routines.history import read_history, unclaimed
from trio_routines.http import api
from trio_routines.http.render import describe
from trio_routines.http.views import timeline
from trio_routines.stores import DirectoryStore
from trio_routines.testing import Complete, Fail, Hang, MemoryStore, ScriptedAgent, WallClock
from trio_routines.wakeups import WakeupRequest

MINUTE = timedelta(minutes=1)
T0 = datetime(2026, 7, 7, 23, 0, tzinfo=UTC)


def at(minute: int, second: int = 0) -> datetime:
    return T0 + minute * MINUTE + timedelta(seconds=second)


def gap(first: int, last: int, reason: GapReason, count: int | None = None) -> Gap:
    return Gap(at(first), at(last), count if count is not None else last - first + 1, reason)


# --- the pure rules --------------------------------------------------------------------------


def test_passed_over_counts_the_slots_after_one_instant_up_to_another() -> None:
    assert passed_over("* * * * *", None, "r", at(0), at(0, 59), GapReason.DOWN) is None
    assert passed_over("* * * * *", None, "r", at(0), at(3), GapReason.DOWN) == gap(
        1, 3, GapReason.DOWN
    )
    assert passed_over("0 9 * * *", None, "r", at(0), at(60 * 24 * 3), GapReason.LATE) == Gap(
        datetime(2026, 7, 8, 9, tzinfo=UTC), datetime(2026, 7, 10, 9, tzinfo=UTC), 3, GapReason.LATE
    )


def test_a_very_long_gap_is_estimated_with_its_exact_ends() -> None:
    year = passed_over("* * * * *", None, "r", at(0), at(0) + timedelta(days=365), GapReason.DOWN)
    assert year is not None
    assert (year.first, year.last) == (at(1), at(0) + timedelta(days=365))
    assert year.estimated
    assert year.count == 365 * 24 * 60
    exact = passed_over("* * * * *", None, "r", at(0), at(COUNT_LIMIT), GapReason.DOWN)
    assert exact is not None
    assert (exact.count, exact.estimated) == (COUNT_LIMIT, False)


def test_the_catch_up_window_and_its_minute_of_grace() -> None:
    assert not is_late(at(0), at(600), None)  # the default: any age
    assert not is_late(at(0), at(0, 59), 0)  # `none`: still on time within a minute
    assert is_late(at(0), at(2), 0)
    assert not is_late(at(0), at(120), 7200)
    assert is_late(at(0), at(121), 7200)


@pytest.mark.parametrize("days", [800_000, 10**9, 1e300])
def test_a_window_longer_than_the_calendar_fires_any_age(days: float) -> None:
    # `catchup: 800000d` is a valid routine file: its window reaches past the calendar's
    # first day (or past what a timedelta holds), so no slot is too old. It raised
    # OverflowError through the boot.
    catchup = days * 86400
    assert not is_late(datetime(1, 1, 1, tzinfo=UTC), at(600), catchup)
    down = {"accounted": at(0, 46), "now": at(3, 30)}
    plan = plan_boot("* * * * *", None, "r", catchup=catchup, **down)
    assert (plan.due, plan.gaps, plan.missed) == (at(1), (), gap(1, 3, GapReason.CAUGHT_UP))


def test_the_boot_plan_of_each_catch_up_setting() -> None:
    down = {"accounted": at(0, 46), "now": at(3, 30)}  # 23:00:46 to 23:03:30: 01, 02, 03
    plan = plan_boot("* * * * *", None, "r", **down)
    assert (plan.due, plan.gaps, plan.missed) == (at(1), (), gap(1, 3, GapReason.CAUGHT_UP))
    plan = plan_boot("* * * * *", None, "r", catchup=0, **down)
    assert (plan.due, plan.gaps) == (at(3), (gap(1, 2, GapReason.DOWN),))  # 03 is on time
    plan = plan_boot("* * * * *", None, "r", catchup=90, **down)
    assert (plan.due, plan.gaps) == (at(2), (gap(1, 1, GapReason.LATE),))
    plan = plan_boot("* * * * *", None, "r", paused=True, **down)
    assert (plan.due, plan.gaps) == (at(4), (gap(1, 3, GapReason.PAUSED),))
    # Paused at 23:02:00 exactly, while no scheduler ran: 01 was missed, 02 and 03 paused.
    plan = plan_boot("* * * * *", None, "r", paused=True, paused_since=at(2), **down)
    assert (plan.due, plan.gaps) == (
        at(4),
        (gap(1, 1, GapReason.DOWN), gap(2, 3, GapReason.PAUSED)),
    )
    # Paused before the newest claim, or stamped after now: as if it began then, or now.
    before = plan_boot("* * * * *", None, "r", paused=True, paused_since=at(0, 10), **down)
    assert before.gaps == (gap(1, 3, GapReason.PAUSED),)
    ahead = plan_boot("* * * * *", None, "r", paused=True, paused_since=at(9), **down)
    assert ahead.gaps == (gap(1, 3, GapReason.PAUSED),)  # a clock that ran ahead: unknown
    at_now = plan_boot("* * * * *", None, "r", paused=True, paused_since=at(3, 30), **down)
    assert at_now.gaps == (gap(1, 3, GapReason.DOWN),)  # paused as the scheduler came back
    # Paused at the newest claim's own instant, a slot: that slot is accounted for, not paused.
    on_claim = {"accounted": at(1), "now": at(3, 30)}
    plan = plan_boot("* * * * *", None, "r", paused=True, paused_since=at(1), **on_claim)
    assert plan.gaps == (gap(2, 3, GapReason.PAUSED),)
    # The slots before the pause as the routine's zone and name make them.
    berlin = plan_boot(
        "H 9 * * *",
        "Europe/Berlin",
        "digest",
        accounted=datetime(2026, 7, 1, 12, tzinfo=UTC),
        now=datetime(2026, 7, 6, 12, tzinfo=UTC),
        paused=True,
        paused_since=datetime(2026, 7, 4, 12, tzinfo=UTC),
    )
    first = next_run("H 9 * * *", "Europe/Berlin", datetime(2026, 7, 1, 12, tzinfo=UTC), "digest")
    assert first is not None
    assert first.hour == 7  # 09:mm in Berlin's summer, its H minute
    day = timedelta(days=1)
    assert berlin.gaps == (
        Gap(first, first + 2 * day, 3, GapReason.DOWN),
        Gap(first + 3 * day, first + 4 * day, 2, GapReason.PAUSED),
    )
    # Not paused now: when an earlier pause began says nothing.
    plan = plan_boot("* * * * *", None, "r", paused_since=at(2), **down)
    assert (plan.due, plan.gaps, plan.missed) == (at(1), (), gap(1, 3, GapReason.CAUGHT_UP))
    plan = plan_boot("* * * * *", None, "r", resumed=at(2, 10), **down)
    assert (plan.due, plan.gaps) == (at(3), (gap(1, 2, GapReason.PAUSED),))


def test_a_resume_while_no_scheduler_ran_keeps_the_slots_before_its_pause_down() -> None:
    # Down from 23:00:46; paused at 23:02:00 and resumed at 23:03:10, before a scheduler came
    # back at 23:04:30: 01 was missed while nothing ran, 02 and 03 were paused, 04 is caught up.
    down = {"accounted": at(0, 46), "now": at(4, 30), "resumed": at(3, 10)}
    plan = plan_boot("* * * * *", None, "r", resumed_pause_since=at(2), **down)
    assert (plan.due, plan.gaps, plan.missed) == (
        at(4),
        (gap(1, 1, GapReason.DOWN), gap(2, 3, GapReason.PAUSED)),
        gap(4, 4, GapReason.CAUGHT_UP),
    )
    assert unfired_gaps("* * * * *", None, "r", resumed_pause_since=at(2), **down) == (
        gap(1, 1, GapReason.DOWN),
        gap(2, 3, GapReason.PAUSED),
        gap(4, 4, GapReason.DOWN),
    )
    # Its start unknown (an earlier version's pause, a store that keeps none), before the
    # newest claim, or after the resume (a clock that ran ahead): every slot before the resume
    # is taken for paused, as before.
    for since in (None, at(0, 10), at(3, 20)):
        plan = plan_boot("* * * * *", None, "r", resumed_pause_since=since, **down)
        assert plan.gaps == (gap(1, 3, GapReason.PAUSED),)
    # Paused at the newest claim's slot: that slot is accounted for.
    plan = plan_boot(
        "* * * * *", None, "r", resumed_pause_since=at(1), **{**down, "accounted": at(1)}
    )
    assert plan.gaps == (gap(2, 3, GapReason.PAUSED),)
    # Paused as it was resumed: every slot before was missed.
    plan = plan_boot("* * * * *", None, "r", resumed_pause_since=at(3, 10), **down)
    assert plan.gaps == (gap(1, 3, GapReason.DOWN),)
    # Paused again since: the pause now holds what came after the resume, as before.
    plan = plan_boot(
        "* * * * *", None, "r", resumed_pause_since=at(2), paused=True, paused_since=at(4), **down
    )
    assert plan.gaps == (
        gap(1, 1, GapReason.DOWN),
        gap(2, 3, GapReason.PAUSED),
        gap(4, 4, GapReason.PAUSED),
    )


def test_adding_gaps_extends_dedupes_and_keeps_the_newest() -> None:
    first = gap(1, 1, GapReason.PAUSED)
    assert add_gap([], first) == [first]
    assert add_gap([first], gap(2, 2, GapReason.PAUSED), at(1)) == [gap(1, 2, GapReason.PAUSED)]
    assert add_gap([first], gap(2, 2, GapReason.PAUSED)) == [first, gap(2, 2, GapReason.PAUSED)]
    assert add_gap([first], gap(2, 2, GapReason.OVERLAP), at(1)) == [
        first,
        gap(2, 2, GapReason.OVERLAP),
    ]
    assert add_gap([gap(1, 5, GapReason.DOWN)], gap(3, 5, GapReason.DOWN)) is None
    # A longer run of the same reason holding all of the newest (another replica's count
    # from an older view) replaces it; one that starts later, or for another reason, does not.
    older = gap(0, 0, GapReason.CAUGHT_UP)
    caught = gap(2, 4, GapReason.CAUGHT_UP)
    assert add_gap([older, caught], gap(2, 6, GapReason.CAUGHT_UP)) == [
        older,
        gap(2, 6, GapReason.CAUGHT_UP),
    ]
    assert add_gap([older, caught], gap(1, 5, GapReason.CAUGHT_UP)) == [
        older,
        gap(1, 5, GapReason.CAUGHT_UP),
    ]
    assert add_gap([caught], gap(3, 6, GapReason.CAUGHT_UP)) == [
        caught,
        gap(3, 6, GapReason.CAUGHT_UP),
    ]
    assert add_gap([caught], gap(2, 6, GapReason.DOWN)) == [caught, gap(2, 6, GapReason.DOWN)]
    assert add_gap(
        [gap(n, n, GapReason.DOWN) for n in range(3)], gap(9, 9, GapReason.DOWN), keep=2
    ) == [
        gap(2, 2, GapReason.DOWN),
        gap(9, 9, GapReason.DOWN),
    ]


@pytest.mark.parametrize(
    ("first", "last", "count"), [(at(2), at(1), 2), (at(1), at(2), 1), (at(1), at(1), 0)]
)
def test_a_gap_refuses_what_cannot_be(first: datetime, last: datetime, count: int) -> None:
    with pytest.raises(ValueError, match="gap"):
        Gap(first, last, count, GapReason.DOWN)


# --- the runtime, under virtual time ---------------------------------------------------------

EVERY_MINUTE = Routine(name="r", prompt="go", cron="* * * * *")


def scheduler(
    store: MemoryStore, wall: WallClock, routine: Routine = EVERY_MINUTE, **agent: Any
) -> tuple[Scheduler, ScriptedAgent]:
    scripted = ScriptedAgent(wall=wall, **agent)
    return Scheduler(
        agent=scripted, store=store, routines=[routine], now=wall, wakeups=False
    ), scripted


async def run_until(sched: Scheduler, wall: WallClock, when: datetime) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(sched.run)
        await trio.sleep((when - wall()).total_seconds())
        sched.stop()


def missed(sched: Scheduler) -> dict[tuple[str, str], int]:
    return dict(sched.metrics.missed)


async def test_an_overlapping_turn_leaves_an_overlap_gap_per_turn(autojump_clock: Any) -> None:
    store = MemoryStore()
    wall = WallClock(at(0, 30))
    sched, _agent = scheduler(store, wall, default=Complete(75))  # 75-s turns, every minute
    await run_until(sched, wall, at(5, 30))
    assert [f.slot for f in await store.history("r")] == [at(1), at(3), at(5)]
    assert await store.gaps("r") == [gap(2, 2, GapReason.OVERLAP), gap(4, 4, GapReason.OVERLAP)]
    assert missed(sched) == {("r", "overlap"): 2}


async def test_a_turn_ending_on_the_next_slot_passes_it_over(autojump_clock: Any) -> None:
    # The next slot is due the very instant the turn ends: it passed during the turn (a slot
    # at the end of the turn counts), so it is an overlap and is never fired late.
    store = MemoryStore()
    wall = WallClock(at(0, 30))
    sched, agent = scheduler(store, wall, default=Complete(60))  # exactly one minute each
    await run_until(sched, wall, at(4, 30))
    assert [t.wall for t in agent.turns] == [at(1), at(3)]
    assert await store.gaps("r") == [gap(2, 2, GapReason.OVERLAP), gap(4, 4, GapReason.OVERLAP)]


class CountingGaps(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def gaps(self, routine: str) -> list[Gap]:
        self.reads += 1
        return await super().gaps(routine)


async def test_slots_passed_while_a_turn_a_stop_cut_short_ran_are_its_overlap(
    autojump_clock: Any,
) -> None:
    # A turn hung from 23:01; a stop at 23:08:30 ended it (interrupted, after its grace). Its
    # loop, stopped, never recorded 02-08 as the turn's overlap: the next boot took them for
    # slots missed while no scheduler ran, and fired 02 seven minutes late.
    store = CountingGaps()
    wall = WallClock(at(0, 30))
    sched, _agent = scheduler(store, wall, default=Hang())
    await run_until(sched, wall, at(8, 30))
    [hung] = await store.history("r")
    assert (hung.slot, hung.outcome) == (at(1), Outcome.INTERRUPTED)
    assert await store.gaps("r") == []
    wall.set(at(12, 30))  # down for four minutes after the stop
    again, agent = scheduler(store, wall)
    async with trio.open_nursery() as nursery:
        store.reads = 0
        await nursery.start(again.run)
        assert store.reads == 1  # its gaps read once by the boot: its overlap, its catch-up
        await trio.sleep(10)
        again.stop()
    overlap, down = await store.gaps("r")
    assert overlap.reason is GapReason.OVERLAP
    assert (overlap.first, overlap.last) == (at(2), at(8))
    assert down.reason is GapReason.CAUGHT_UP
    assert (down.first, down.last) == (at(10), at(12))
    assert [t.wall for t in agent.turns] == [at(12, 30)]  # 09, caught up: the first missed
    assert [f.slot for f in await store.history("r")] == [at(1), at(9)]


class SetsTheClockBack:
    """Completes every turn; the first one sets the wall clock back by ``back``."""

    def __init__(self, wall: WallClock, back: timedelta) -> None:
        self.wall, self.back = wall, back
        self.turns: list[datetime] = []

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        self.turns.append(self.wall())
        if len(self.turns) == 1:
            self.wall.jump(-self.back)
        yield Completed()


async def test_a_clock_set_back_during_a_turn_meets_the_claimed_slots_again(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # As the original's loop: the next slot is planned from the clock after the turn, so the
    # slots up to the one just fired come due again and are refused by their claims (stale,
    # then duplicate), never run twice and never counted as passed over.
    store = MemoryStore()
    wall = WallClock(at(0, 30))
    agent = SetsTheClockBack(wall, 3 * MINUTE)  # the 23:01 turn sets the clock to 22:58
    sched = Scheduler(agent=agent, store=store, routines=[EVERY_MINUTE], now=wall, wakeups=False)
    await run_until(sched, wall, at(5, 30))  # five minutes on: 23:02:30 on the wall
    assert agent.turns == [at(1), at(2)]
    assert [f.slot for f in await store.history("r")] == [at(1), at(2)]
    assert dict(sched.statistics().outcomes) == {"completed": 2, "stale": 2, "duplicate": 1}
    assert await store.gaps("r") == []


async def test_a_late_fire_records_what_it_passed_over_wherever_its_turn_sets_the_clock(
    autojump_clock: Any,
) -> None:
    # The loop wakes at 23:04:10 for its 23:01 slot (any age catches up): 23:02 to 23:04 were
    # passed over by that late fire, and are recorded so even when its turn sets the clock
    # back to before 23:02 (the next slot is then 23:02, come due again).
    store = MemoryStore()
    wall = WallClock(at(0, 30))
    agent = SetsTheClockBack(wall, timedelta(minutes=2, seconds=40))  # to before 23:02
    sched = Scheduler(agent=agent, store=store, routines=[EVERY_MINUTE], now=wall, wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(sched.run)
        await trio.sleep(10)
        wall.set(at(4, 10))
        await trio.sleep(60)
        sched.stop()
    assert at(4, 10) <= agent.turns[0] < at(5)  # the late fire, once the jump is seen
    assert (await store.history("r"))[0].slot == at(1)
    assert await store.gaps("r") == [gap(2, 4, GapReason.CAUGHT_UP)]
    assert missed(sched) == {("r", "caught-up"): 3}


async def test_the_slots_of_a_gap_run_when_the_clock_goes_back_and_the_gap_stays(
    autojump_clock: Any,
) -> None:
    # A gap never holds a slot back (docs/design.md): after the late fire's turn sets the
    # clock back to before 23:02, 23:02 to 23:04 come due again and each runs once; the gap,
    # written when the clock said they had passed, is left as it was.
    store = MemoryStore()
    wall = WallClock(at(0, 30))
    agent = SetsTheClockBack(wall, timedelta(minutes=2, seconds=40))
    sched = Scheduler(agent=agent, store=store, routines=[EVERY_MINUTE], now=wall, wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(sched.run)
        await trio.sleep(10)
        wall.set(at(4, 10))
        await trio.sleep(240)  # the clock reads 23:05:30 at the end: 23:05 has come, 23:06 not
        sched.stop()
    assert [fire.slot for fire in await store.history("r")] == [at(m) for m in range(1, 6)]
    assert agent.turns[1:] == [at(m) for m in range(2, 6)]
    assert await store.gaps("r") == [gap(2, 4, GapReason.CAUGHT_UP)]


async def test_a_downtime_is_caught_up_once_and_the_rest_recorded(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    await store.claim("r", at(-4), at(-4, 46))  # 22:56:00, stamped 22:56:46: then down
    await store.settle("r", at(-4), Outcome.COMPLETED, 5)
    wall = WallClock(at(-1, 30))  # back at 22:59:30
    sched, _ = scheduler(store, wall)
    with caplog.at_level(logging.INFO, logger="trio_routines"):
        await run_until(sched, wall, at(-1, 40))
    assert [f.slot for f in await store.history("r")] == [at(-4), at(-3)]  # 22:57, 2.5 min late
    assert await store.gaps("r") == [gap(-2, -1, GapReason.CAUGHT_UP)]  # 22:58 and 22:59
    assert missed(sched) == {("r", "caught-up"): 2}
    said = [r.getMessage() for r in caplog.records]
    assert (
        "r: missed 3 slots 2026-07-07T22:57:00.000Z to 2026-07-07T22:59:00.000Z, claimed by no "
        "scheduler — catching up the oldest, 2026-07-07T22:57:00.000Z, once; the others are "
        "gaps (see `python -m trio_routines history r`)"
    ) in said


async def test_catchup_none_fires_nothing_missed_and_records_it_down(autojump_clock: Any) -> None:
    store = MemoryStore()
    await store.claim("r", at(-10), at(-10))
    wall = WallClock(at(0, 30))
    routine = Routine(name="r", prompt="go", cron="* * * * *", catchup=0)
    sched, _agent = scheduler(store, wall, routine)
    await run_until(sched, wall, at(1, 30))
    # 22:51 .. 22:59 are down; 23:00, 30 s old at the boot, is still on time and fires.
    assert [f.slot for f in await store.history("r")] == [at(-10), at(0), at(1)]
    assert await store.gaps("r") == [gap(-9, -1, GapReason.DOWN)]
    assert missed(sched) == {("r", "down"): 9}


async def test_a_week_old_daily_slot_is_late_outside_the_window(autojump_clock: Any) -> None:
    store = MemoryStore()
    day = timedelta(days=1)
    await store.claim("daily", at(0) - 7 * day, at(0) - 7 * day)
    wall = WallClock(at(30) + 2 * day)  # a week down; 23:00 today passed 30 minutes ago
    routine = Routine(name="daily", prompt="go", cron="0 23 * * *", catchup=2 * 3600)
    sched, _agent = scheduler(store, wall, routine)
    await run_until(sched, wall, at(31) + 2 * day)
    # The eight slots older than two hours are late; today's, 30 minutes old, is caught up.
    assert [f.slot for f in await store.history("daily")] == [at(0) - 7 * day, at(0) + 2 * day]
    assert await store.gaps("daily") == [Gap(at(0) - 6 * day, at(0) + day, 8, GapReason.LATE)]
    assert missed(sched) == {("daily", "late"): 8}


@pytest.mark.parametrize(
    ("fired_by_others", "expected"),
    [
        ([10, 20, 30, 40], []),  # another replica fired every one: nothing was missed
        ([10, 20], [Gap(at(30), at(40), 2, GapReason.LATE)]),  # only the rest were
        ([], [Gap(at(10), at(40), 4, GapReason.LATE)]),  # nobody (one process): all of them
    ],
    ids=["all", "some", "none"],
)
async def test_a_loop_that_wakes_past_the_window_fires_nothing_and_leaves_out_what_others_fired(
    autojump_clock: Any, fired_by_others: list[int], expected: list[Gap]
) -> None:
    # A suspended machine, or a replica stopped (SIGSTOP) while the others fired its slots:
    # past the window, the loop fires none of them, and the slots the others claimed were not
    # missed, so history must not say they were.
    store = MemoryStore()
    wall = WallClock(at(0, 30))
    routine = Routine(name="r", prompt="go", cron="*/10 * * * *", catchup=300)
    sched, _agent = scheduler(store, wall, routine)
    async with trio.open_nursery() as nursery:
        await nursery.start(sched.run)
        await trio.sleep(60)
        for minute in fired_by_others:
            await store.claim("r", at(minute), at(minute), replica="other")
        wall.jump(timedelta(minutes=40))  # 23:10 .. 23:40 pass at once
        await trio.sleep(60 * 30)
        sched.stop()
    assert await store.gaps("r") == expected
    mine = [f.slot for f in await store.history("r") if f.replica != "other"]
    assert mine == [at(50), at(60), at(70)]


async def test_paused_slots_extend_one_gap(autojump_clock: Any) -> None:
    store = MemoryStore()
    wall = WallClock(at(0, 30))
    sched, _agent = scheduler(store, wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(sched.run)
        await sched.pause("r")
        await trio.sleep(5 * 60)  # 23:01 .. 23:05 refused
        await sched.resume("r")
        await trio.sleep(60)  # 23:06 fires
        sched.stop()
    assert await store.gaps("r") == [gap(1, 5, GapReason.PAUSED)]
    assert [f.slot for f in await store.history("r")] == [at(6)]
    assert missed(sched) == {("r", "paused"): 5}


async def test_a_pause_that_ends_while_no_scheduler_runs(autojump_clock: Any) -> None:
    store = MemoryStore()
    await completed(store, "r", at(0))
    await store.set_paused("r", True)
    await store.record_gap("r", gap(1, 4, GapReason.PAUSED))  # refused by the last scheduler
    # Down from 23:04:30; resumed (from the command line) at 23:07:20; back at 23:10:30.
    await store.set_paused("r", False, at(7, 20))
    wall = WallClock(at(10, 30))
    sched, _agent = scheduler(store, wall)
    await run_until(sched, wall, at(10, 40))
    assert await store.gaps("r") == [
        gap(1, 4, GapReason.PAUSED),
        gap(5, 7, GapReason.PAUSED),  # paused, though no scheduler ran
        gap(9, 10, GapReason.CAUGHT_UP),  # the catch-up fired 23:08 instead
    ]
    assert [f.slot for f in await store.history("r")] == [at(0), at(8)]


async def test_slots_missed_before_a_pause_are_down_and_only_those_after_it_paused(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    await completed(store, "r", at(0))
    # Down from 23:00:30; paused (from the command line) at 23:02:30; back at 23:04:30.
    await store.set_paused("r", True, at(2, 30))
    wall = WallClock(at(4, 30))
    sched, _agent = scheduler(store, wall)
    await run_until(sched, wall, at(4, 40))
    assert await store.gaps("r") == [gap(1, 2, GapReason.DOWN), gap(3, 4, GapReason.PAUSED)]
    assert missed(sched) == {("r", "down"): 2, ("r", "paused"): 2}
    assert [f.slot for f in await store.history("r")] == [at(0)]  # nothing caught up


@pytest.mark.parametrize("fired", [True, False])
async def test_slots_missed_before_a_pause_resumed_while_down_are_down(
    autojump_clock: Any, fired: bool
) -> None:
    store = MemoryStore()
    if fired:
        await completed(store, "r", at(0))
    else:  # armed at 23:00:30 by a scheduler that went down before its first slot
        await store.first_armed(["r"], at(0, 30))
    # Down from 23:00:30; paused at 23:02:30 and resumed at 23:05:20 (from the command line),
    # both while no scheduler ran; back at 23:07:30.
    await store.set_paused("r", True, at(2, 30))
    await store.set_paused("r", False, at(5, 20))
    wall = WallClock(at(7, 30))
    sched, _agent = scheduler(store, wall)
    await run_until(sched, wall, at(7, 40))
    if fired:  # 23:06 is caught up
        assert await store.gaps("r") == [
            gap(1, 2, GapReason.DOWN),
            gap(3, 5, GapReason.PAUSED),
            gap(7, 7, GapReason.CAUGHT_UP),
        ]
        assert [f.slot for f in await store.history("r")] == [at(0), at(6)]
    else:  # a routine that never fired never back-fires
        assert await store.gaps("r") == [
            gap(1, 2, GapReason.DOWN),
            gap(3, 5, GapReason.PAUSED),
            gap(6, 7, GapReason.DOWN),
        ]
        assert await store.history("r") == []


class _Older(MemoryStore):
    """A store of an earlier kind: it keeps no pause's start (no ``paused_since``, nor
    ``resumed_pause_since``)."""

    def __getattribute__(self, name: str) -> Any:
        if name in ("paused_since", "resumed_pause_since"):
            raise AttributeError(name)
        return super().__getattribute__(name)


def _unread(read: str, operation: str) -> MemoryStore:
    """A store whose ``operation`` (a pause's start read) ``fails``, ``hangs``, or is
    ``absent`` (a store of an earlier kind)."""
    store = _Older() if read == "absent" else MemoryStore()
    if read == "fails":
        store.fail(operation, StateFault("disk on fire"))
    elif read == "hangs":
        store.hang(operation)
    return store


async def _boot_within_half_a_second(store: MemoryStore, start: datetime) -> None:
    """A scheduler's boot at ``start`` whose store calls wait half a second at most; its
    first ten seconds."""
    wall = WallClock(start)
    sched = Scheduler(
        agent=ScriptedAgent(wall=wall),
        store=store,
        routines=[EVERY_MINUTE],
        now=wall,
        wakeups=False,
        store_timeout=0.5,
    )
    await run_until(sched, wall, start + timedelta(seconds=10))


def _said_unread(caplog: pytest.LogCaptureFixture, read: str, what: str) -> None:
    """The boot's one warning that when ``what`` (``pause``, ``resume``) began is unread."""
    said = {
        "fails": "disk on fire",
        "hangs": f"the {what} of 'r' is unreadable: the store did not answer within 0.5s (or "
        "before the stop's grace ran out)",
    }
    unread = "r: when its pause began is unreadable (its missed slots read as paused): "
    assert [m for m in caplog.messages if m.startswith(unread)] == (
        [unread + said[read]] if read in said else []
    )


@pytest.mark.parametrize("read", ["fails", "hangs", "absent"])
async def test_a_resumed_pause_whose_start_is_unknown_takes_every_slot_before_it_for_paused(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture, read: str
) -> None:
    store = _unread(read, "resumed_pause_since")
    await completed(store, "r", at(0))
    await store.set_paused("r", True, at(2, 30))
    await store.set_paused("r", False, at(4, 20))
    await _boot_within_half_a_second(store, at(5, 30))
    assert await store.gaps("r") == [gap(1, 4, GapReason.PAUSED)]  # as a store that keeps none
    assert [f.slot for f in await store.history("r")] == [at(0), at(5)]
    _said_unread(caplog, read, "resume")


@pytest.mark.parametrize("read", ["fails", "hangs", "absent"])
async def test_a_pause_whose_start_is_unknown_takes_every_missed_slot_for_paused(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture, read: str
) -> None:
    store = _unread(read, "paused_since")
    await completed(store, "r", at(0))
    await store.set_paused("r", True, at(2, 30))
    await _boot_within_half_a_second(store, at(4, 30))
    assert await store.gaps("r") == [gap(1, 4, GapReason.PAUSED)]  # as a store that keeps none
    _said_unread(caplog, read, "pause")


async def test_a_gap_never_fires_a_slot_nor_makes_a_later_one_stale(autojump_clock: Any) -> None:
    store = MemoryStore()
    await completed(store, "r", at(0))
    # A gap reaching past now (a replica whose clock ran ahead recorded it): no claim, so
    # nothing is stale; and nothing in it is fired twice or early.
    await store.record_gap("r", gap(1, 30, GapReason.OVERLAP))
    wall = WallClock(at(2, 30))
    sched, agent = scheduler(store, wall)
    await run_until(sched, wall, at(5, 30))
    assert [f.slot for f in await store.history("r")] == [at(0), at(3), at(4), at(5)]
    assert [t.wall for t in agent.turns] == [at(3), at(4), at(5)]


# --- shown: history (text, JSON, HTTP) -------------------------------------------------------


def seeded(tmp_path: Path) -> Path:
    """A state directory: 23:00 completed, 23:01 caught up, 23:02-23:03 passed over."""

    async def seed() -> None:
        async with DirectoryStore(tmp_path / "state") as store:
            await store.claim("r", at(0), at(0))
            await store.settle("r", at(0), Outcome.COMPLETED, 5)
            await store.claim("r", at(1), at(3, 30))
            await store.settle("r", at(1), Outcome.COMPLETED, 5)
            await store.record_gap("r", gap(2, 3, GapReason.CAUGHT_UP))

    trio.run(seed)
    return tmp_path / "state"


def test_history_shows_gaps_inline_as_text_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = seeded(tmp_path)
    assert main(["history", "r", "--state", str(state)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == (
        "2026-07-07T23:02Z  -                         -      missed     -     -   missed 2 slots "
        "2026-07-07T23:02Z–2026-07-07T23:03Z: no scheduler ran, or it woke late (a suspended "
        "machine, a clock that jumped); the catch-up fired an earlier "
        "slot instead"
    )
    assert [line[:17] for line in out[2:]] == ["2026-07-07T23:01Z", "2026-07-07T23:00Z"]
    assert main(["history", "r", "--state", str(state), "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert entries[1:] == [
        {"slot": "2026-07-07T23:01:00.000Z", "firedAt": "2026-07-07T23:03:30.000Z",
         "outcome": "completed", "ms": 5},
        {"gap": {"from": "2026-07-07T23:02:00.000Z", "to": "2026-07-07T23:03:00.000Z",
                 "count": 2, "reason": "caught-up"}},
    ]  # fmt: skip
    assert main(["history", "r", "--state", str(state), "--outcome", "completed", "--json"]) == 0
    assert all("gap" not in entry for entry in json.loads(capsys.readouterr().out))
    assert main(["history", "r", "--state", str(state), "--outcome", "missed", "--json"]) == 0
    assert [list(e) for e in json.loads(capsys.readouterr().out)] == [["gap"]]


def test_an_older_reader_of_the_state_directory_sees_the_claims_only(tmp_path: Path) -> None:
    state = seeded(tmp_path)
    claims = state / "schedule" / "claims" / "r"
    assert sorted(p.name for p in claims.iterdir()) == [
        "2026-07-07T23-00-00-000Z",
        "2026-07-07T23-01-00-000Z",
    ]
    assert json.loads((state / "schedule" / "gaps" / "r").read_text()) == [
        {"from": "2026-07-07T23:02:00.000Z", "to": "2026-07-07T23:03:00.000Z", "count": 2,
         "reason": "caught-up"}
    ]  # fmt: skip


async def test_a_gaps_file_that_is_not_ours_reads_as_none_and_is_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gaps = tmp_path / "state" / "schedule" / "gaps"
    gaps.mkdir(parents=True)
    (gaps / "r").write_text('{"not": "a list"}')
    os.symlink("/etc/passwd", gaps / "s")
    async with DirectoryStore(tmp_path / "state") as store:
        assert await store.gaps("r") == []
        assert await store.gaps("s") == []
        assert await store.record_gap("r", gap(1, 1, GapReason.OVERLAP))
        assert await store.gaps("r") == [gap(1, 1, GapReason.OVERLAP)]
    assert "not a JSON array of gaps" in caplog.text
    assert "symbolic link" in caplog.text


# --- alerts that cannot be blind: the series behind them -------------------------------------


async def test_a_routine_failing_since_its_first_run_has_both_series(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    for minute in range(3):
        await store.claim("r", at(minute), at(minute))
        await store.settle("r", at(minute), Outcome.FAILED, 1, error="no")
    wall = WallClock(at(2, 30))
    sched, agent = scheduler(store, wall)
    agent.script(Fail(), Complete(), session="routine:r")
    async with trio.open_nursery() as nursery:
        await nursery.start(sched.run)
        await trio.testing.wait_all_tasks_blocked()  # its history, read after the boot
        text = sched.render_metrics()
        assert 'trio_routines_consecutive_failures{routine="r"} 3' in text
        # Never completed: the series exists, from the oldest claim on.
        assert sched.metrics.last_success == {"r": at(0)}
        await trio.sleep(31)  # 23:03 fails
        assert sched.metrics.failing == {"r": 4}
        await trio.sleep(60)  # 23:04 completes
        assert sched.metrics.failing == {"r": 0}
        assert sched.metrics.last_success["r"] == at(4)
        sched.stop()


async def test_paused_routines_broken_files_and_pending_wakeups_are_gauges(
    autojump_clock: Any, tmp_path: Path
) -> None:
    store = MemoryStore()
    wall = WallClock(at(0, 30))
    agent = ScriptedAgent(wall=wall)
    (tmp_path / "r.md").write_text("---\ncron: * * * * *\n---\ngo\n")
    sched = Scheduler(agent=agent, store=store, routines=[EVERY_MINUTE], now=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(sched.run)
        # A day ahead: the reload reads the files in a thread, and the clock jumps past the
        # routine's slots (paused: each a gap) until it returns, more of them on a slow host.
        later = WakeupRequest(session="s", prompt="later", fire_at=at(24 * 60))
        await store.add_wakeup(later, wall())
        await sched.pause("r")
        (tmp_path / "r.md").write_text("---\ncron: * * * * * *\n---\ngo\n")  # broken now
        # A new file that does not load is skipped: no version of it to keep. It was counted
        # nowhere, and the next start refused to start for it.
        (tmp_path / "new.md").write_text("---\ncolour: red\ncron: 0 * * * *\n---\nx\n")
        changes = await sched.reload_routines(tmp_path)
        assert changes.kept == ("r",)
        assert sched.statistics().broken_files == (str(tmp_path / "new.md"), str(tmp_path / "r.md"))
        await trio.sleep(sched.poll_interval * 10 + 1)  # the wake loop counts its wake-ups
        text = sched.render_metrics()
        (tmp_path / "new.md").unlink()
        (tmp_path / "r.md").write_text("---\ncron: * * * * *\n---\ngo\n")  # mended
        await sched.reload_routines(tmp_path)
        mended = sched.render_metrics()
        assert sched.statistics().broken_files == ()
        sched.stop()
    assert 'trio_routines_routine_paused{routine="r"} 1' in text
    assert "trio_routines_routine_files_kept_broken 1" in text
    assert "trio_routines_routine_files_broken 2" in text
    assert "trio_routines_routine_files_broken 0" in mended
    assert "trio_routines_pending_wakeups 1" in text


# --- shown: the window (check, list, status) and a failing streak (status) -------------------


def test_check_list_and_status_show_the_window_and_the_failing_streak(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    routines = tmp_path / "routines"
    routines.mkdir()
    (routines / "daily.md").write_text("---\ncron: 0 9 * * *\ncatchup: 2h\n---\ngo\n")
    (routines / "r.md").write_text("---\ncron: * * * * *\ncatchup: none\n---\ngo\n")
    (routines / "plain.md").write_text("---\ncron: 0 * * * *\n---\ngo\n")
    state = tmp_path / "state"

    async def seed() -> None:
        async with DirectoryStore(state) as store:
            for minute, outcome in enumerate(
                [Outcome.COMPLETED, Outcome.FAILED, Outcome.SKIPPED, Outcome.INTERRUPTED]
            ):
                await store.claim("r", at(minute), at(minute))
                await store.settle("r", at(minute), outcome, 1)

    trio.run(seed)
    common = ["--routines", str(routines), "--state", str(state)]
    assert main(["check", "--routines", str(routines)]) == 0
    out = capsys.readouterr().out
    assert 'catch-up windows: "daily" 2h, "r" none (the others catch up once, any age)' in out
    assert main(["list", *common, "--json"]) == 0
    listed = {r["name"]: r for r in json.loads(capsys.readouterr().out)["routines"]}
    assert listed["daily"]["catchup"] == "2h"
    assert "catchup" not in listed["plain"]
    assert (listed["r"]["failing"], listed["r"]["lastSuccess"]) == (2, "2026-07-07T23:00:00.000Z")
    assert "failing" not in listed["daily"]
    assert main(["status", *common]) == 0
    out = capsys.readouterr().out
    assert "cron 0 9 * * *, catchup 2h" in out
    assert "r: failing for 2 runs — last success 2026-07-07T23:00Z" in out


async def test_a_routine_added_by_a_reload_has_its_series_at_once(autojump_clock: Any) -> None:
    wall = WallClock(at(0, 30))
    sched = Scheduler(agent=ScriptedAgent(wall=wall), store=MemoryStore(), now=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(sched.run)
        sched.update_routines([EVERY_MINUTE])
        assert (sched.metrics.last_success, sched.metrics.failing) == ({"r": at(0, 30)}, {"r": 0})
        sched.stop()


def test_the_status_page_says_why_a_slot_in_a_recorded_gap_was_missed() -> None:
    fires = [Fire(at(0), at(0), Outcome.COMPLETED, 1), Fire(at(3), at(3), Outcome.COMPLETED, 1)]
    expected = [at(0), at(1), at(2), at(3)]
    marks, _ = timeline(expected, fires, at(10), [gap(1, 1, GapReason.OVERLAP)])
    assert [m.kind for m in marks] == ["completed", "missed", "missed", "completed"]
    assert "missed (overlap: the previous turn was still running)" in describe(marks[1])
    assert "missed (no claim)" in describe(marks[2])  # no gap recorded: nothing more is known


async def test_get_routines_shows_a_catch_up_window() -> None:
    routine = Routine(name="daily", prompt="go", cron="0 9 * * *", catchup=7200)
    sched = Scheduler(agent=ScriptedAgent(), store=MemoryStore(), routines=[routine, EVERY_MINUTE])
    listing = {entry["name"]: entry for entry in (await api.routines(sched)).body}
    assert listing["daily"]["catchup"] == "2h"
    assert "catchup" not in listing["r"]


async def test_history_leaves_out_a_gap_whose_every_slot_another_replica_claimed_after(
    tmp_path: Path,
) -> None:
    # A replica ends a long turn and records 23:01 as passed over while its peer, stalled,
    # has not claimed 23:01 yet; the peer then claims and runs it. Its claim is what happened.
    store = MemoryStore()
    await store.claim("r", at(0), at(0), replica="a")
    await store.settle("r", at(0), Outcome.COMPLETED, 70_000)
    await store.record_gap("r", gap(1, 1, GapReason.OVERLAP))
    await store.record_gap("r", gap(3, 5, GapReason.OVERLAP))  # 23:04 alone claimed later
    await store.claim("r", at(1), at(1, 20), replica="b")
    await store.claim("r", at(4), at(4, 20), replica="b")
    fires, gaps = await read_history(store, "r")
    assert [f.slot for f in fires] == [at(0), at(1), at(4)]
    assert gaps == [gap(3, 5, GapReason.OVERLAP)]  # only partly claimed: kept as recorded
    assert await store.gaps("r") == [gap(1, 1, GapReason.OVERLAP), gap(3, 5, GapReason.OVERLAP)]


def test_unclaimed_leaves_out_a_claimed_one_slot_gap_and_keeps_every_longer_one() -> None:
    fires = [Fire(slot=at(m), fired_at=at(m)) for m in (1, 2, 3)]
    one, free = gap(2, 2, GapReason.OVERLAP), gap(5, 5, GapReason.OVERLAP)
    # Three claims between its first and last slot need not be its slots (fired by hand, or
    # on an earlier cron): a longer gap is kept as recorded.
    longer = gap(1, 3, GapReason.DOWN)
    assert unclaimed([one, free, longer], fires) == [free, longer]
    assert unclaimed([one], []) == [one]
    assert unclaimed([], fires) == []
