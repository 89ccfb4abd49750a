"""Pause and resume: a paused routine claims nothing on any replica; resuming never back-fires."""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trio
from scheduler_rig import until

from trio_routines import Gap, GapReason, Outcome, Routine, Scheduler, StateFault
from trio_routines.scheduler import FireResult, UnknownRoutine
from trio_routines.stores import DirectoryStore
from trio_routines.testing import MemoryStore, ScriptedAgent, WallClock

T0 = datetime(2026, 7, 7, 10, 30, tzinfo=UTC)
HOURLY = Routine(name="hourly", prompt="p", cron="0 * * * *")


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 7, 7, hour, minute, tzinfo=UTC)


async def caller_fires(
    store: Any, now: datetime, *slots: datetime
) -> tuple[list[FireResult], ScriptedAgent]:
    """``hourly``'s ``slots`` fired one after another by a caller at ``now``, to a scheduler
    with an external clock (no loop runs): the answers, and the agent that ran the turns."""
    wall = WallClock(now)
    agent = ScriptedAgent(wall=wall)
    scheduler = Scheduler(
        agent=agent, store=store, routines=[HOURLY], now=wall, wakeups=False, external_clock=True
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        results = [await scheduler.fire("hourly", slot) for slot in slots]
        scheduler.stop()
    return results, agent


def replica(store: MemoryStore, wall: WallClock) -> tuple[Scheduler, ScriptedAgent]:
    agent = ScriptedAgent(wall=wall)
    scheduler = Scheduler(agent=agent, store=store, routines=[HOURLY], now=wall, wakeups=False)
    return scheduler, agent


async def test_paused_at_boot_nothing_is_caught_up_and_resume_arms_from_now(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    await store.claim("hourly", at(8), at(8))  # 09:00 and 10:00 were missed
    await store.settle("hourly", at(8), Outcome.COMPLETED, 1)
    await store.set_paused("hourly", True)
    wall = WallClock(T0)
    scheduler, agent = replica(store, wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        assert scheduler.statistics().paused == {"hourly"}
        await until(wall, at(12, 30))
        assert agent.turns == []  # neither the catch-up nor 11:00 nor 12:00
        await scheduler.resume("hourly")
        assert scheduler.statistics().paused == frozenset()
        await until(wall, at(13, 30))
        scheduler.stop()
    assert [t.wall for t in agent.turns] == [at(13)]  # from now on: nothing missed is run
    assert [f.slot for f in await store.history("hourly")] == [at(8), at(13)]
    metrics = scheduler.render_metrics()
    # The boot records the slots missed while paused as one gap (09:00, 10:00) rather than
    # trying the catch-up; 11:00 and 12:00 are refused one by one and extend a gap of their own.
    assert 'trio_routines_claims_refused_total{routine="hourly",reason="paused"} 2' in metrics
    assert 'trio_routines_slots_missed_total{routine="hourly",reason="paused"} 4' in metrics
    assert await store.gaps("hourly") == [
        Gap(at(9), at(10), 2, GapReason.PAUSED),
        Gap(at(11), at(12), 2, GapReason.PAUSED),
    ]


async def test_a_callers_fire_of_a_slot_a_pause_held_stays_paused_after_the_resume(
    autojump_clock: Any,
) -> None:
    # A hand fire, or an external clock's late delivery, of a slot that came while the routine
    # was paused: paused, never run, after the resume as before it, and after a later pause
    # and resume (the slot recorded paused says). A slot after the resume runs.
    store = MemoryStore()
    wall = WallClock(T0)
    scheduler, agent = replica(store, wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await scheduler.pause("hourly")
        await until(wall, at(11, 30))
        await scheduler.resume("hourly")
        for _ in range(2):  # a late delivery, then its retry
            refused = await scheduler.fire("hourly", at(11))
            assert (refused.claimed, refused.reason) == (False, "paused")
        await until(wall, at(12, 10))
        await scheduler.pause("hourly")
        await until(wall, at(12, 20))
        await scheduler.resume("hourly")
        refused = await scheduler.fire("hourly", at(11))
        assert (refused.claimed, refused.reason) == (False, "paused")  # not stale: paused
        scheduler.stop()
    assert [t.wall for t in agent.turns] == [at(12)]
    assert [f.slot for f in await store.history("hourly")] == [at(12)]
    assert await store.gaps("hourly") == [Gap(at(11), at(11), 1, GapReason.PAUSED)]


async def test_a_callers_fire_of_a_slot_paused_before_the_boot_stays_paused(
    autojump_clock: Any,
) -> None:
    # Paused at 10:50, resumed at 11:30 while no scheduler ran; booted at 11:40, a caller
    # fires 11:00: the boot's plan knew the resume, the caller's slot is asked all the same.
    store = MemoryStore()
    await store.set_paused("hourly", True, at(10, 50))
    await store.set_paused("hourly", False, at(11, 30))
    wall = WallClock(at(11, 40))
    scheduler, agent = replica(store, wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        refused = await scheduler.fire("hourly", at(11))
        scheduler.stop()
    assert (refused.claimed, refused.reason) == (False, "paused")
    assert agent.turns == []


@pytest.mark.parametrize(
    ("paused_at", "resumed_at", "claimed"),
    [
        (at(10, 50), at(11, 30), False),  # the slot came during the pause
        # A pause of unknown start (an older version's), resumed after the slot: no replica
        # recorded the slot paused, so nothing says it held it.
        (None, at(11, 30), True),
        (at(11, 5), at(11, 30), True),  # paused after the slot
        (at(10, 40), at(10, 50), True),  # resumed before the slot
        (at(10, 40), at(11) - timedelta(seconds=30), True),  # just before it, nobody recorded
        (at(11), at(11, 30), False),  # paused at its very instant
        (at(10, 40), at(11), True),  # resumed at its very instant
    ],
    ids=[
        "during",
        "unknown-start",
        "paused-after",
        "resumed-before",
        "resumed-just-before",
        "paused-at-it",
        "resumed-at-it",
    ],
)
async def test_an_external_clocks_late_slot_is_paused_when_the_latest_pause_held_it(
    autojump_clock: Any, paused_at: datetime | None, resumed_at: datetime, claimed: bool
) -> None:
    # No loop runs, so no replica recorded a slot paused: the latest pause and resume say.
    store = MemoryStore()
    await store.set_paused("hourly", True, paused_at)
    await store.set_paused("hourly", False, resumed_at)
    (result,), agent = await caller_fires(store, at(11, 40), at(11))
    assert result.claimed is claimed
    assert result.reason == (None if claimed else "paused")
    assert len(agent.turns) == int(claimed)


async def test_a_paused_routine_says_so_once_at_info_not_at_every_slot(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # An every-minute routine paused said two INFO lines a minute: the slot not claimed, and
    # the gap it extended (2,900 lines a day).
    store = MemoryStore()
    wall = WallClock(T0)
    minutely = Routine(name="minutely", prompt="p", cron="* * * * *")
    scheduler = Scheduler(
        agent=ScriptedAgent(wall=wall), store=store, routines=[minutely], now=wall, wakeups=False
    )
    caplog.set_level(logging.DEBUG, logger="trio_routines")
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await scheduler.pause("minutely")
        await until(wall, T0 + timedelta(minutes=5, seconds=30))
        outside = await scheduler.fire("minutely", T0 + timedelta(minutes=2))
        scheduler.stop()
    assert outside.reason == "paused"

    def said(level: int, part: str) -> list[str]:
        return [
            r.getMessage() for r in caplog.records if r.levelno == level and part in r.getMessage()
        ]

    assert said(logging.INFO, "missed") == [
        "minutely: missed 1 slot 2026-07-07T10:31:00.000Z — the routine was paused (in its "
        "history as a gap, reason paused)"
    ]
    assert len(said(logging.DEBUG, "missed")) == 4  # 10:32 to 10:35, each extending it
    assert said(logging.DEBUG, "is not claimed") == [
        f"minutely: paused — slot 2026-07-07T10:{minute}:00.000Z is not claimed"
        for minute in range(31, 36)
    ]
    # A caller's fire has no gap to say it: its own line stays at INFO.
    assert said(logging.INFO, "is not claimed") == [
        "minutely: paused — slot 2026-07-07T10:32:00.000Z is not claimed"
    ]
    assert await store.gaps("minutely") == [
        Gap(T0 + timedelta(minutes=1), T0 + timedelta(minutes=5), 5, GapReason.PAUSED)
    ]


async def test_a_pause_made_on_one_replica_is_honoured_by_the_other(autojump_clock: Any) -> None:
    store = MemoryStore()
    wall = WallClock(T0)
    first, first_agent = replica(store, wall)
    second, second_agent = replica(store, wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        await nursery.start(second.run)
        await first.pause("hourly")
        await until(wall, at(11, 30))
        assert second.statistics().paused == {"hourly"}  # learnt before its claim
        await second.resume("hourly")
        await until(wall, at(12, 30))
        first.stop()
        second.stop()
    assert [f.slot for f in await store.history("hourly")] == [at(12)]
    assert len(first_agent.turns) + len(second_agent.turns) == 1


class CountedResumes(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.resumes_read: list[str] = []
        self.pauses_read: list[str] = []  # when a resume's pause began

    async def resumed_at(self, routine: str) -> datetime | None:
        self.resumes_read.append(routine)
        return await super().resumed_at(routine)

    async def resumed_pause_since(self, routine: str) -> datetime | None:
        self.pauses_read.append(routine)
        return await super().resumed_pause_since(routine)


async def held_up_at_eleven(
    store: MemoryStore,
    meanwhile: Callable[[], Awaitable[None]],
    end: datetime,
    jump: timedelta = timedelta(seconds=30),
) -> ScriptedAgent:
    """A replica of ``store`` run until ``end``, held up just before 11:00: at 10:59:50
    ``meanwhile()`` is done (another replica's pause and resume, say), and its wall clock
    jumps ``jump``, so that it comes to 11:00 late and reads the paused set late: at 11:00:20
    (30 s: it sees the jump), or at 11:00:00.4 (400 ms: its loop wakes when 11:00 was due)."""
    wall = WallClock(T0)
    scheduler, agent = replica(store, wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(10, 59) + timedelta(seconds=50))
        await meanwhile()
        wall.jump(jump)
        await until(wall, end)
        scheduler.stop()
    return agent


@pytest.mark.parametrize(
    ("jump", "asked"), [(timedelta(seconds=30), []), (timedelta(seconds=90), ["hourly"])]
)
async def test_a_slot_paused_when_it_came_stays_so_for_a_replica_that_reads_it_after_a_resume(
    autojump_clock: Any, jump: timedelta, asked: list[str]
) -> None:
    # Paused before 11:00 and resumed at 11:00:10 (another replica, a command), while this one
    # was held up: its read, made after the resume, no longer sees the pause that held 11:00.
    # Its paused read brought the resume (20 s late); a fire a minute late or more asks.
    store = CountedResumes()

    async def meanwhile() -> None:
        await store.set_paused("hourly", True)
        await store.set_paused("hourly", False, at(11) + timedelta(seconds=10))

    agent = await held_up_at_eleven(store, meanwhile, at(12, 30), jump)
    assert [t.wall for t in agent.turns] == [at(12)]
    assert [f.slot for f in await store.history("hourly")] == [at(12)]
    assert await store.gaps("hourly") == [Gap(at(11), at(11), 1, GapReason.PAUSED)]
    assert store.resumes_read == asked  # once, for the late read; never on time (12:00)


async def test_a_replica_less_than_a_second_late_leaves_paused_a_slot_resumed_after_it(
    autojump_clock: Any,
) -> None:
    # Its read, begun 400 ms after 11:00, no longer sees the pause that held 11:00 on the
    # replicas that read in time; the read brings the resume made since, with no call more.
    store = CountedResumes()

    async def meanwhile() -> None:
        await store.set_paused("hourly", True)
        await store.set_paused("hourly", False, at(11) + timedelta(milliseconds=200))

    agent = await held_up_at_eleven(store, meanwhile, at(12, 30), timedelta(milliseconds=400))
    assert [t.wall for t in agent.turns] == [at(12)]
    assert [f.slot for f in await store.history("hourly")] == [at(12)]
    assert await store.gaps("hourly") == [Gap(at(11), at(11), 1, GapReason.PAUSED)]
    assert store.resumes_read == []


@pytest.mark.parametrize("jump", [timedelta(milliseconds=400), timedelta(seconds=30)])
@pytest.mark.parametrize(
    ("resumed", "fired"),
    [
        (at(11), [at(11), at(12)]),
        (at(11) + timedelta(milliseconds=1), [at(12)]),
        # Stamped a day ahead (its clock ran ahead): it tells nothing, holds nothing back.
        (at(11) + timedelta(days=1), [at(11), at(12)]),
    ],
    ids=["at-the-slot", "after-it", "a-day-ahead"],
)
async def test_a_late_read_runs_a_slot_resumed_at_its_instant_not_one_resumed_after(
    autojump_clock: Any, resumed: datetime, fired: list[datetime], jump: timedelta
) -> None:
    store = MemoryStore()

    async def meanwhile() -> None:
        await store.set_paused("hourly", True)
        await store.set_paused("hourly", False, resumed)

    agent = await held_up_at_eleven(store, meanwhile, at(12, 30), jump)
    assert [f.slot for f in await store.history("hourly")] == fired
    assert len(agent.turns) == len(fired)


@pytest.mark.parametrize(
    ("ahead", "fired"),
    [(timedelta(seconds=1), [at(12)]), (timedelta(seconds=1, milliseconds=1), [at(11), at(12)])],
    ids=["a-second-ahead", "more"],
)
async def test_a_resume_stamped_ahead_of_the_read_holds_the_slot_by_a_second_at_most(
    autojump_clock: Any, ahead: timedelta, fired: list[datetime]
) -> None:
    # The replica reads at 11:00:00.400; a resume stamped up to a second after that may be
    # one made meanwhile by a replica whose clock is a little ahead: the slot stays paused.
    store = MemoryStore()

    async def meanwhile() -> None:
        await store.set_paused("hourly", True)
        await store.set_paused("hourly", False, at(11) + timedelta(milliseconds=400) + ahead)

    await held_up_at_eleven(store, meanwhile, at(12, 30), timedelta(milliseconds=400))
    assert [f.slot for f in await store.history("hourly")] == fired


@pytest.mark.parametrize("jump", [timedelta(milliseconds=200), timedelta(seconds=30)])
@pytest.mark.parametrize("claimed", [True, False], ids=["run-elsewhere", "run-nowhere"])
async def test_a_replica_that_finds_a_slot_paused_late_records_no_gap_for_one_run_elsewhere(
    autojump_clock: Any, claimed: bool, jump: timedelta
) -> None:
    # Another replica ran 11:00 in time; the routine was paused after it, while this replica
    # was held up. Coming to 11:00 late, it finds the pause: it runs nothing, and records no
    # paused gap for a slot that ran (history showed the run and the gap for one slot).
    store = MemoryStore()

    async def meanwhile() -> None:
        if claimed:
            await store.claim("hourly", at(11), at(11))
            await store.settle("hourly", at(11), Outcome.COMPLETED, 5)
        await store.set_paused("hourly", True)

    agent = await held_up_at_eleven(store, meanwhile, at(12, 30), jump)  # 200 ms late, or 20 s
    assert agent.turns == []
    assert [f.slot for f in await store.history("hourly")] == ([at(11)] if claimed else [])
    assert await store.gaps("hourly") == (
        [Gap(at(12), at(12), 1, GapReason.PAUSED)]
        if claimed
        else [Gap(at(11), at(12), 2, GapReason.PAUSED)]
    )


@pytest.mark.parametrize("jump", [timedelta(milliseconds=400), timedelta(seconds=90)])
@pytest.mark.parametrize(
    ("resumed", "recorded", "fired"),
    [
        # Stamped before the slot, landed after it: the replicas on time saw the pause and
        # recorded 11:00 paused. It stays so here.
        (at(11) - timedelta(milliseconds=300), True, [at(12)]),
        (at(11) - timedelta(seconds=60), True, [at(12)]),  # as slow a landing as is allowed
        (at(11) - timedelta(milliseconds=300), False, [at(11), at(12)]),  # none saw it paused
        (at(11) - timedelta(seconds=60, milliseconds=1), True, [at(11), at(12)]),  # too long
    ],
    ids=["recorded", "a-minute-before", "not-recorded", "long-before"],
)
async def test_a_resume_stamped_before_the_slot_holds_it_where_the_replicas_saw_it_paused(
    autojump_clock: Any,
    jump: timedelta,
    resumed: datetime,
    recorded: bool,
    fired: list[datetime],
) -> None:
    store = MemoryStore()

    async def meanwhile() -> None:
        await store.set_paused("hourly", True, at(10))
        if recorded:  # by a replica that read 11:00 in time, while the resume was on its way
            await store.record_gap("hourly", Gap(at(11), at(11), 1, GapReason.PAUSED))
        await store.set_paused("hourly", False, resumed)

    await held_up_at_eleven(store, meanwhile, at(12, 30), jump)
    assert [f.slot for f in await store.history("hourly")] == fired


class CountedGaps(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.gaps_read = 0

    async def gaps(self, routine: str) -> list[Gap]:
        self.gaps_read += 1
        return await super().gaps(routine)


@pytest.mark.parametrize(
    ("jump", "looked", "fired"),
    [
        (timedelta(milliseconds=99), 0, [at(11)]),  # as a herd's read, at the slot
        (timedelta(milliseconds=100), 1, []),
    ],
)
async def test_a_read_begun_as_the_slot_came_looks_for_no_replicas_record_of_it(
    autojump_clock: Any, jump: timedelta, looked: int, fired: list[datetime]
) -> None:
    # A replica that found the slot paused records it after its own read: a read begun as
    # the slot came could not see that record, and a herd after a resume read every
    # routine's gaps for nothing.
    store = CountedGaps()

    async def meanwhile() -> None:
        await store.set_paused("hourly", True, at(10))
        await store.record_gap("hourly", Gap(at(11), at(11), 1, GapReason.PAUSED))
        await store.set_paused("hourly", False, at(11) - timedelta(milliseconds=300))
        store.gaps_read = 0

    await held_up_at_eleven(store, meanwhile, at(11, 30), jump)
    assert [f.slot for f in await store.history("hourly")] == fired
    assert store.gaps_read == looked


class NoGaps(MemoryStore):
    """A store that keeps no gaps (a protocol's member set to None is one the class does not
    have)."""

    gaps = None  # type: ignore[assignment]
    record_gap = None  # type: ignore[assignment]


async def test_a_resume_stamped_before_the_slot_is_taken_at_its_word_without_gaps(
    autojump_clock: Any,
) -> None:
    # No store of gaps, no replica's word that the slot was paused: it runs.
    store = NoGaps()

    async def meanwhile() -> None:
        await store.set_paused("hourly", True, at(10))
        await store.set_paused("hourly", False, at(11) - timedelta(milliseconds=300))

    await held_up_at_eleven(store, meanwhile, at(12, 30), timedelta(milliseconds=400))
    assert [f.slot for f in await store.history("hourly")] == [at(11), at(12)]


async def test_a_late_fire_whose_gaps_do_not_answer_claims_nothing_and_says_why(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()

    async def meanwhile() -> None:
        await store.set_paused("hourly", True, at(10))
        await store.set_paused("hourly", False, at(11) - timedelta(milliseconds=300))
        store.hang("gaps")

    await held_up_at_eleven(store, meanwhile, at(11, 30), timedelta(milliseconds=400))
    assert await store.history("hourly") == []
    assert any(
        m.startswith(
            "hourly: fire failed (skipping this run, schedule stays armed): could not "
            "claim slot 2026-07-07T11:00:00.000Z of 'hourly': the gaps of 'hourly' are unreadable"
        )
        for m in (r.getMessage() for r in caplog.records)
    )


@pytest.mark.parametrize("jump", [timedelta(milliseconds=400), timedelta(seconds=90)])
@pytest.mark.parametrize(
    ("began", "fired"),
    [
        (at(11) + timedelta(milliseconds=100), [at(11), at(12)]),  # after the slot: not its
        (at(11), [at(12)]),  # at the slot's instant: it held it
        (None, [at(12)]),  # not known: the safe side
    ],
    ids=["after", "at", "unknown"],
)
async def test_a_pause_begun_and_resumed_after_a_slot_did_not_hold_it(
    autojump_clock: Any, jump: timedelta, began: datetime | None, fired: list[datetime]
) -> None:
    # Nobody ran 11:00 in time; the routine was paused after it and resumed before this
    # replica, held up, got there: 11:00 was not paused when it came.
    store = MemoryStore()

    async def meanwhile() -> None:
        await store.set_paused("hourly", True, began)
        await store.set_paused("hourly", False, at(11) + timedelta(milliseconds=250))

    await held_up_at_eleven(store, meanwhile, at(12, 30), jump)
    assert [f.slot for f in await store.history("hourly")] == fired


@pytest.mark.parametrize(
    ("resumed", "held"),
    [
        # 11:00 held; 11:01 was not, and is caught up late (it was recorded paused too, and
        # the loop went on from 11:02).
        (at(11) + timedelta(milliseconds=50), Gap(at(11), at(11), 1, GapReason.PAUSED)),
        # Three held, in one step (the loop walked them a slot at a time, each with its
        # reads and its gap's write).
        (at(11, 2) + timedelta(seconds=30), Gap(at(11), at(11, 2), 3, GapReason.PAUSED)),
    ],
    ids=["one-held", "three-held"],
)
async def test_a_slot_held_by_a_pause_resumed_since_leaves_the_slots_after_it_to_the_loop(
    autojump_clock: Any, resumed: datetime, held: Gap
) -> None:
    # Alone and held up past 11:00 and more, the replica finds 11:00 held by a pause resumed
    # since: the slots up to the resume are paused, the first after it caught up late.
    minutely = Routine(name="minutely", prompt="p", cron="* * * * *")
    store = CountedResumes()
    wall = WallClock(T0)
    agent = ScriptedAgent(wall=wall)
    scheduler = Scheduler(agent=agent, store=store, routines=[minutely], now=wall, wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(10, 59) + timedelta(seconds=50))
        await store.set_paused("minutely", True, at(10))
        await store.set_paused("minutely", False, resumed)
        wall.jump(timedelta(minutes=4))  # comes to 11:00 at 11:03:50
        await until(wall, at(11, 5) + timedelta(seconds=30))
        scheduler.stop()
    first = held.last + timedelta(minutes=1)  # the first slot after the resume
    slots = [f.slot for f in await store.history("minutely") if f.slot >= at(11)]
    assert slots[:1] == [first]  # caught up late; those it passed over, caught-up gaps
    gaps = await store.gaps("minutely")
    assert [g for g in gaps if g.reason is GapReason.PAUSED] == [held]
    assert [(g.first, g.reason) for g in gaps if g.first > at(10, 59)] == [
        (at(11), GapReason.PAUSED),
        (first + timedelta(minutes=1), GapReason.CAUGHT_UP),
    ]
    # Asked by the held slot's fire and by the first after it, each a minute late or more: no
    # walk a slot at a time, each asking again.
    assert store.resumes_read == ["minutely", "minutely"]


@pytest.mark.parametrize(
    ("resumed", "asked"),
    [(at(11) + timedelta(seconds=10), ["hourly"]), (at(10, 58), [])],
    ids=["after-the-slot", "long-before"],
)
async def test_a_fire_a_minute_late_asks_when_the_pause_began_only_of_a_resume_near_its_slot(
    autojump_clock: Any, resumed: datetime, asked: list[str]
) -> None:
    # A resume more than a minute before the slot could not have held it: its pause's start,
    # one more call, tells nothing.
    store = CountedResumes()

    async def meanwhile() -> None:
        await store.set_paused("hourly", True, at(10))
        await store.set_paused("hourly", False, resumed)

    await held_up_at_eleven(store, meanwhile, at(11, 30), timedelta(seconds=90))
    assert store.resumes_read == ["hourly"]
    assert store.pauses_read == asked


async def test_a_late_read_whose_resume_cannot_be_read_claims_nothing_and_says_why(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()

    async def meanwhile() -> None:
        store.fail("resumed_at", StateFault("disk busy"), times=1)

    agent = await held_up_at_eleven(store, meanwhile, at(11, 30), timedelta(seconds=90))
    assert agent.turns == []
    assert await store.history("hourly") == []
    assert any(
        "could not claim slot 2026-07-07T11:00:00.000Z of 'hourly': disk busy" in m
        for m in (r.getMessage() for r in caplog.records)
    )


async def test_a_callers_late_fire_passes_over_a_resume_that_cannot_be_read(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    # As the paused reads pass over a damaged resume record, with a warning: a routine never
    # paused is not held back by it. (A loop's late fire claims nothing then, and says why.)
    (tmp_path / "state" / "schedule").mkdir(parents=True)
    (tmp_path / "state" / "schedule" / "resumed").write_text("planted")
    store = DirectoryStore(tmp_path / "state")
    (result,), agent = await caller_fires(store, at(11, 40), at(11))
    await store.aclose()
    assert result.claimed
    assert len(agent.turns) == 1
    (warned,) = [
        r.getMessage() for r in caplog.records if "latest resume cannot be read" in r.getMessage()
    ]
    assert warned.startswith(
        "hourly: slot 2026-07-07T11:00:00.000Z: its latest resume cannot be read ("
    )
    assert warned.endswith(") — taken as no pause held it")


async def test_a_callers_late_fire_of_a_slot_recorded_paused_under_a_pause_of_unknown_start(
    autojump_clock: Any,
) -> None:
    # An older version's pause keeps no start: the slot a replica recorded paused says.
    store = MemoryStore()
    await store.set_paused("hourly", True)
    await store.record_gap("hourly", Gap(at(11), at(11), 1, GapReason.PAUSED))
    await store.set_paused("hourly", False, at(11, 30))
    (refused, ran), agent = await caller_fires(store, at(12, 40), at(11), at(12))
    assert (refused.claimed, refused.reason, ran.claimed) == (False, "paused", True)
    assert [t.wall for t in agent.turns] == [at(12, 40)]


async def test_a_boot_catching_up_asks_for_no_resume_its_plan_did_not(autojump_clock: Any) -> None:
    store = CountedResumes()
    await store.claim("hourly", at(9), at(9))
    await store.settle("hourly", at(9), Outcome.COMPLETED, 1)
    wall = WallClock(T0)
    scheduler, agent = replica(store, wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(10, 40))
        scheduler.stop()
    assert [t.wall for t in agent.turns] == [T0]  # 10:00 caught up, late
    assert store.resumes_read == ["hourly"]  # the boot's read, not the fire's again


async def test_an_external_fire_of_a_paused_routine_claims_nothing(autojump_clock: Any) -> None:
    store = MemoryStore()
    wall = WallClock(T0)
    scheduler, agent = replica(store, wall)
    await scheduler.pause("hourly")
    result = await scheduler.fire("hourly", at(9))
    assert (result.claimed, result.reason) == (False, "paused")
    assert agent.turns == []
    assert await store.history("hourly") == []
    await scheduler.resume("hourly")
    assert (await scheduler.fire("hourly", at(10))).outcome is Outcome.COMPLETED


async def test_pause_of_an_unknown_routine_or_a_broken_store_changes_nothing(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    scheduler, _ = replica(store, WallClock(T0))
    with pytest.raises(UnknownRoutine):
        await scheduler.pause("nope")
    store.fail("set_paused", StateFault("disk full"))
    with pytest.raises(StateFault, match="disk full"):
        await scheduler.pause("hourly")
    assert await store.paused() == frozenset()
    assert scheduler.statistics().paused == frozenset()


async def test_a_paused_check_that_fails_fires_nothing(autojump_clock: Any) -> None:
    store = MemoryStore()
    store.fail("paused", StateFault("unreadable"))
    scheduler, agent = replica(store, WallClock(T0))
    with pytest.raises(StateFault, match="unreadable"):
        await scheduler.fire("hourly", at(9))
    assert agent.turns == []


async def test_the_state_directory_counts_only_regular_pause_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = DirectoryStore(tmp_path)
    await store.set_paused("a", True)
    paused = tmp_path / "schedule" / "paused"
    assert sorted(os.listdir(paused)) == ["a"]
    os.symlink(tmp_path / "elsewhere", paused / "b")  # planted: pauses nothing
    (paused / "c").mkdir()
    with caplog.at_level("WARNING", logger="trio_routines"):
        assert await store.paused() == {"a"}
    # ... and says so: a pause that looks made and holds nothing back, silently, let the
    # routine's slots run.
    assert sorted(caplog.messages) == [
        f"{paused / name} is not a regular file — it pauses nothing (a pause is a file `pause` "
        "makes); remove it"
        for name in "bc"
    ]
    with pytest.raises(StateFault, match="cannot pause 'c'"):
        await store.set_paused("c", True)
    with pytest.raises(StateFault, match="cannot pause 'b'"):
        await store.set_paused("b", True)
    assert not (tmp_path / "elsewhere").exists()
    await store.set_paused("a", False)
    assert await store.paused() == frozenset()


async def test_a_state_directory_that_cannot_be_made_pauses_nothing_and_joins_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The root cannot be made (its parent, the working directory, was removed): that is no
    # state "with nothing in it", for a pause or for a replica's holds.
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    store = DirectoryStore(".state")
    with pytest.raises(StateFault, match=r"^could not pause 'a' in .*ENOENT"):
        await store.set_paused("a", True)
    await store.set_paused("a", False)  # resuming where nothing was paused: nothing to do
    scheduler = Scheduler(
        agent=ScriptedAgent(),
        store=store,
        routines=[Routine(name="a", prompt="p", cron="0 9 * * *")],
    )
    with pytest.raises(
        StateFault, match=r"^could not join .*: the holds of .* are unusable: ENOENT"
    ):
        await scheduler.run()


async def test_routines_due_at_one_instant_share_one_paused_read(autojump_clock: Any) -> None:
    reads: list[datetime] = []
    wall = WallClock(T0)

    class Counting(MemoryStore):
        async def paused(self) -> frozenset[str]:
            reads.append(wall())
            return await super().paused()

    store = Counting()
    await store.set_paused("r7", True)
    routines = [Routine(name=f"r{i}", prompt="p", cron="0 * * * *") for i in range(50)]
    agent = ScriptedAgent(wall=wall)
    scheduler = Scheduler(
        agent=agent, store=store, routines=routines, now=wall, wakeups=False, poll_interval=7200
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(11, 30))
        scheduler.stop()
    assert reads.count(at(11)) == 1  # one read for the fifty fires of 11:00
    assert len(agent.turns) == 49  # r7 is paused, as that one read said
    assert sorted(n for n in store.claims if store.claims[n]) == sorted(
        f"r{i}" for i in range(50) if i != 7
    )


@pytest.mark.parametrize(
    ("resumed", "fired"),
    [
        (at(10, 15), [at(11)]),  # resumed after the last missed slot: nothing caught up
        (at(9, 30), [at(10, 30), at(11)]),  # 10:00 came after the resume: caught up once
    ],
)
async def test_a_resume_made_while_no_scheduler_ran_never_back_fires_at_boot(
    autojump_clock: Any, resumed: datetime, fired: list[datetime]
) -> None:
    store = MemoryStore()
    await store.claim("hourly", at(8), at(8))
    await store.settle("hourly", at(8), Outcome.COMPLETED, 1)
    await store.set_paused("hourly", True, at(8, 30))
    await store.set_paused("hourly", False, resumed)  # e.g. `resume hourly`, no serve running
    wall = WallClock(T0)
    scheduler, agent = replica(store, wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(11, 30))
        scheduler.stop()
    assert [t.wall for t in agent.turns] == fired


@pytest.mark.slow
@pytest.mark.parametrize("damage", [b"garbage", b"", b"2026-07-07T09:30:00.000Z" + b" " * 60])
async def test_a_resume_whose_file_holds_no_instant_never_lets_a_boot_back_fire(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: bytes
) -> None:
    # Read as no resume at all, the boot caught up the slot of an hour ago, one the pause had
    # held back (paused and resumed while no scheduler ran), without a word. The real clock:
    # the store takes such a resume as made now by it.
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    store = DirectoryStore(tmp_path)
    await store.claim("hourly", hour - timedelta(hours=3), hour - timedelta(hours=3))
    await store.settle("hourly", hour - timedelta(hours=3), Outcome.COMPLETED, 1)
    await store.set_paused("hourly", True, hour - timedelta(hours=2, minutes=30))
    await store.set_paused("hourly", False, hour - timedelta(hours=1, minutes=30))
    (tmp_path / "schedule" / "resumed" / "hourly").write_bytes(damage)
    agent = ScriptedAgent()
    scheduler = Scheduler(agent=agent, store=store, routines=[HOURLY])
    with caplog.at_level("WARNING", logger="trio_routines"), trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(scheduler.run)
            with trio.move_on_after(1):  # a catch-up fires as the loops start
                while not agent.turns:  # noqa: ASYNC110 (the agent offers no event)
                    await trio.sleep(0.01)
            scheduler.stop()
    assert agent.turns == []  # the slot of an hour ago stays paused
    assert [f.slot for f in await store.history("hourly")] == [hour - timedelta(hours=3)]
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1, said  # (and no "resume stamped after now": it is not)
    assert said[0].startswith(
        f"the resume of 'hourly' ({tmp_path / 'schedule' / 'resumed' / 'hourly'}) holds no "
        "instant — taken as made when it was last written ("
    )
    assert said[0].endswith("): no slot before it is caught up; resume it again to write a new one")
    await store.aclose()


async def test_the_state_directory_reads_a_resume_safely(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    await store.set_paused("a", True)
    await store.set_paused("a", False, at(9))
    assert await store.resumed_at("a") == at(9)
    resumed = tmp_path / "schedule" / "resumed"
    (resumed / "b").write_text("not an instant")
    os.symlink(resumed / "a", resumed / "c")
    (resumed / "d").mkdir()
    # There, holding no instant: a resume of unknown instant, taken as made when its entry
    # was last written (read as none, a boot caught up a slot its pause had held back).
    for name in "bcd":
        found = await store.resumed_at(name)
        written = os.lstat(resumed / name).st_mtime
        assert found == datetime.fromtimestamp(written, UTC).replace(microsecond=found.microsecond)
        assert abs(found.timestamp() - written) < 0.001
    # ... but not after now: a clock set back since it was written.
    os.utime(resumed / "b", (2e9, 2e9))  # 2033
    before = datetime.now(UTC)
    found = await store.resumed_at("b")
    assert found is not None
    assert before <= found <= datetime.now(UTC)
    assert await store.resumed_at("e") is None  # never resumed
    assert sorted(os.listdir(resumed)) == ["a", "b", "c", "d"]  # no temp file left behind


async def test_a_clock_that_goes_back_during_the_paused_read_never_claims_early(
    autojump_clock: Any,
) -> None:
    wall = WallClock(T0)

    class Jumpy(MemoryStore):
        jumped = False

        async def paused(self) -> frozenset[str]:
            if wall() >= at(11) and not self.jumped:
                self.jumped = True
                wall.jump(-timedelta(minutes=1))  # an NTP step back, mid-read
            return await super().paused()

    store = Jumpy()
    agent = ScriptedAgent(wall=wall)
    scheduler = Scheduler(  # no clock-watch poll at 11:00: the fire's read is the one
        agent=agent, store=store, routines=[HOURLY], now=wall, wakeups=False, poll_interval=7200
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(11, 30))
        scheduler.stop()
    assert store.jumped
    (fire,) = await store.history("hourly")
    assert fire.slot == at(11)
    assert fire.fired_at >= fire.slot  # claimed once the wall clock reached 11:00 again
    assert [t.wall for t in agent.turns] == [at(11)]
