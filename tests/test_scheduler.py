"""The runtime under virtual time: boot, cron loops, external fires, stops, clock jumps."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from scheduler_rig import completed

from trio_routines import Completed, Gap, GapReason, Outcome, Routine, Scheduler, StateFault
from trio_routines.cron import next_run
from trio_routines.instants import LAST_INSTANT, format_iso, slot_name
from trio_routines.records import Wakeup
from trio_routines.scheduler import NotOnGrid, NotYetDue, Stopping, UnknownRoutine
from trio_routines.scheduler import wake as wake_module
from trio_routines.scheduler.boot import BOOT_INTERRUPTED
from trio_routines.scheduler.fire import FirePath
from trio_routines.scheduler.openclaims import found_by
from trio_routines.stores.directory import DirectoryStore
from trio_routines.testing import (
    Busy,
    Complete,
    Fail,
    Hang,
    MemoryStore,
    Raise,
    ScriptedAgent,
    WallClock,
)

T0 = datetime(2026, 7, 7, 10, 30, tzinfo=UTC)
HOURLY = Routine(name="hourly", prompt="Check the queue.", cron="0 * * * *")


def at(hour: int, minute: int = 0, second: int = 0, *, day: int = 7) -> datetime:
    return datetime(2026, 7, day, hour, minute, second, tzinfo=UTC)


class Rig:
    """One scheduler under test with its store, agent and wall clock."""

    def __init__(
        self,
        *routines: Routine,
        store: Any = None,
        agent: ScriptedAgent | None = None,
        wall: WallClock | None = None,
        **options: Any,
    ) -> None:
        self.wall = wall or WallClock(T0)
        self.store = store if store is not None else MemoryStore()
        self.agent = agent or ScriptedAgent(wall=self.wall)
        if self.agent.wall is None:
            self.agent.wall = self.wall
        self.scheduler = Scheduler(
            agent=self.agent,
            store=self.store,
            routines=routines or (HOURLY,),
            now=self.wall,
            **options,
        )

    @asynccontextmanager
    async def running(self, grace: float = 10.0) -> AsyncIterator[Scheduler]:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.scheduler.run)
            yield self.scheduler
            self.scheduler.stop(grace)

    async def fires(self, name: str = "hourly") -> list[tuple[datetime, datetime, Outcome | None]]:
        return [(f.slot, f.fired_at, f.outcome) for f in await self.store.history(name)]


async def sleep_until_wall(wall: WallClock, when: datetime) -> None:
    await trio.sleep((when - wall()).total_seconds())


async def wait_until(predicate: Callable[[], bool]) -> None:
    """Poll on the real clock: for stores whose threads the virtual clock cannot see."""
    with trio.fail_after(10):
        while not predicate():  # noqa: ASYNC110 -- the condition lives in another thread's work
            await trio.sleep(0.01)


def messages(caplog: pytest.LogCaptureFixture, level: int | None = None) -> list[str]:
    return [r.getMessage() for r in caplog.records if level is None or r.levelno == level]


@pytest.fixture(autouse=True)
def _capture(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_routines")


# -- boot ------------------------------------------------------------------------------------


async def test_first_boot_does_not_fire_before_the_next_slot(autojump_clock: Any) -> None:
    rig = Rig()
    async with rig.running():
        await sleep_until_wall(rig.wall, at(10, 59, 59) + timedelta(milliseconds=999))
        assert rig.agent.turns == []
        await sleep_until_wall(rig.wall, at(12, 30))
    assert [t.wall for t in rig.agent.turns] == [at(11), at(12)]
    assert await rig.fires() == [
        (at(11), at(11), Outcome.COMPLETED),
        (at(12), at(12), Outcome.COMPLETED),
    ]


async def test_unsettled_newest_claim_is_interrupted_at_boot_and_not_replayed(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig()
    await rig.store.claim("hourly", at(10), at(10))
    async with rig.running():
        # settled before run() reported itself started
        assert await rig.fires() == [(at(10), at(10), Outcome.INTERRUPTED)]
        (fire,) = await rig.store.history("hourly")
        assert fire.ms is None
        assert fire.error == found_by(BOOT_INTERRUPTED, rig.scheduler.replica)
    warnings = messages(caplog, logging.WARNING)
    assert any("never finished" in m for m in warnings)
    assert rig.agent.turns == []

    caplog.clear()
    again = Rig(store=rig.store, wall=rig.wall)
    async with again.running():
        pass
    assert messages(caplog, logging.WARNING) == []
    assert await again.fires() == [(at(10), at(10), Outcome.INTERRUPTED)]


async def test_a_session_is_free_for_its_next_turn_while_a_settle_is_under_way(
    autojump_clock: Any,
) -> None:
    # A stalled disk holds the 10:00 settle: the turn is over, so the session's next turn
    # (a run now) is not busy; the slot's claim is still held here (a second fire of it is a
    # duplicate).
    rig = Rig(store_timeout=60.0)
    async with rig.running(grace=0) as scheduler:
        rig.store.hang("settle")
        await scheduler.start_fire("hourly", at(10))
        await trio.sleep(1)
        assert scheduler.statistics().in_flight == 1  # its settle waits
        ran = await scheduler.run_now("hourly")
        assert (ran.outcome, ran.busy) == (Outcome.COMPLETED, False)
        again = await scheduler.fire("hourly", at(10))
        assert (again.claimed, again.reason) == (False, "duplicate")
        rig.store.hangs.discard("settle")
    assert len(rig.agent.turns) == 2


@pytest.mark.parametrize(
    ("cron", "tz", "due", "looks"),
    [
        # A turn of 90 minutes from its slot, looked at 15 and 70 minutes in (the slot after
        # the first look passes while it runs: the next is read again).
        ("0 * * * *", None, at(11), [(at(11, 15), at(12)), (at(12, 10), at(13))]),
        (
            "0 * * * *",
            "Asia/Kolkata",
            at(11, 30),
            [(at(11, 45), at(12, 30)), (at(12, 40), at(13, 30))],
        ),
        ("H * * * *", None, at(10, 39), [(at(10, 54), at(11, 39)), (at(11, 49), at(12, 39))]),
    ],
)
async def test_a_routine_whose_turn_runs_shows_the_slot_after_now_as_next(
    autojump_clock: Any,
    cron: str,
    tz: str | None,
    due: datetime,
    looks: list[tuple[datetime, datetime]],
) -> None:
    # Not the slot the loop is at: an alert on a next slot long past would take a long turn
    # for a stuck one.
    rig = Rig(Routine(name="hourly", prompt="p", cron=cron, tz=tz))
    rig.agent.default = Complete(duration=90 * 60)
    async with rig.running() as scheduler:
        assert scheduler.statistics().next_due == {"hourly": due}
        for when, shown in looks:
            await sleep_until_wall(rig.wall, when)
            assert scheduler.statistics().in_flight == 1
            assert scheduler.statistics().next_due == {"hourly": shown}
            assert (
                'trio_routines_next_fire_timestamp_seconds{routine="hourly"} '
                f"{int(shown.timestamp())}" in scheduler.render_metrics()
            )


async def test_a_snapshot_shows_the_slot_after_its_own_instant_when_read_later(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A snapshot taken during a turn shows the slot after the instant it was taken, however
    # long after it is read and whatever was read meanwhile; it works the slot out only when
    # read (a herd's scrape that reads nothing else costs nothing per routine), once; and what
    # is kept serves a later instant only while no slot came between.
    import trio_routines.scheduler.arming as arming_module

    worked_out: list[datetime] = []
    never: list[datetime] = []  # instants after which the cron is made to have no slot

    def counted(cron: str, tz: str | None, after: datetime, name: str) -> datetime | None:
        worked_out.append(after)
        return None if after in never else next_run(cron, tz, after, name)

    monkeypatch.setattr(arming_module, "next_run", counted)
    idle = Routine(name="idle", prompt="p", cron="0 0 1 1 *")
    rig = Rig(HOURLY, idle)
    rig.agent.default = Complete(duration=150 * 60)
    async with rig.running() as scheduler:
        await sleep_until_wall(rig.wall, at(11, 15))
        early = scheduler.statistics()
        assert "hourly" in early.next_due
        assert "idle" in early.next_due
        assert "other" not in early.next_due
        assert list(early.next_due) == ["hourly", "idle"]
        assert len(early.next_due) == 2
        assert early.next_due["idle"] == datetime(2027, 1, 1, tzinfo=UTC)
        assert worked_out == []
        assert early.next_due["hourly"] == at(12)
        assert worked_out == [at(11, 15)]
        await sleep_until_wall(rig.wall, at(12, 10))
        assert scheduler.statistics().next_due["hourly"] == at(13)
        assert early.next_due["hourly"] == at(12)  # its own instant's, read once
        assert early.next_due == {"hourly": at(12), "idle": datetime(2027, 1, 1, tzinfo=UTC)}
        assert repr(early.next_due).startswith(f"{{'hourly': {at(12)!r}, 'idle'")
        assert worked_out == [at(11, 15), at(12, 10)]
        await sleep_until_wall(rig.wall, at(12, 20))  # no slot since 12:10: what is kept
        assert scheduler.statistics().next_due["hourly"] == at(13)
        assert worked_out[2:] == []
        rig.wall.set(at(13))  # a slot at the very instant: the one after it
        assert scheduler.statistics().next_due["hourly"] == at(14)
        rig.wall.set(at(11))  # back to the slot the loop is at (the turn still runs)
        assert scheduler.statistics().next_due["hourly"] == at(12)
        rig.wall.set(at(10, 59))  # behind it: that slot, as its loop is at it
        assert scheduler.statistics().next_due["hourly"] == at(11)
        rig.wall.set(at(9, 30))
        assert scheduler.statistics().next_due["hourly"] == at(11)
        assert worked_out[2:] == [at(13), at(11)]
        rig.wall.set(at(11, 30))  # kept from 11:00
        assert scheduler.statistics().next_due["hourly"] == at(12)
        assert worked_out[4:] == []
        never.append(at(12, 30))
        rig.wall.set(at(12, 30))
        assert scheduler.statistics().next_due["hourly"] is None  # (the calendar's end)
        rig.wall.set(at(12, 40))
        assert scheduler.statistics().next_due["hourly"] is None  # kept: none after it ever
        assert worked_out[4:] == [at(12, 30)]
        rig.wall.set(at(13, 25))


def test_a_snapshot_read_after_a_reload_keeps_its_old_version_from_the_new_ones() -> None:
    # Taken before a change of cron and read after it: it shows the old version's slot, and
    # what it worked out is not taken for the new version's by the snapshots after.
    from trio_routines.scheduler.arming import Arming

    arming = Arming()
    old = Routine(name="r", prompt="p", cron="0 * * * *")
    arming.arm("r", at(11))
    stale = arming.shown_due(at(11, 15), {"r"}, {"r": old})
    arming.forget("r")
    new = Routine(name="r", prompt="p", cron="*/10 * * * *")
    arming.set_due(new, at(11, 20))
    assert stale["r"] == at(12)
    assert arming.shown_due(at(11, 25), {"r"}, {"r": new})["r"] == at(11, 30)
    assert stale["r"] == at(12)


async def test_a_slot_passed_unfired_still_shows_as_next(autojump_clock: Any) -> None:
    # The wall clock came past the slot before its loop woke (a loop held up): the slot it
    # is at is shown, overdue, not the one after now (the alert on overdue slots reads it).
    rig = Rig()
    async with rig.running() as scheduler:
        await sleep_until_wall(rig.wall, at(10, 45))
        rig.wall.jump(timedelta(minutes=105))
        assert scheduler.statistics().next_due == {"hourly": at(11)}
        assert scheduler.statistics().in_flight == 0


async def test_a_callers_fire_after_a_downtime_records_the_slots_it_passed_over(
    autojump_clock: Any,
) -> None:
    # Nothing ran after 07:00; a caller fires 10:00 (`fire --slot`, `POST /fire`): 08:00 and
    # 09:00 are neither claims nor, but for this, gaps -- the next boot starts after 10:00.
    rig = Rig()
    await rig.store.claim("hourly", at(7), at(7))
    await rig.store.settle("hourly", at(7), Outcome.COMPLETED, 5)
    await rig.scheduler.fire("hourly", at(10))
    assert await rig.store.gaps("hourly") == [Gap(at(8), at(9), 2, GapReason.DOWN)]
    await rig.scheduler.fire("hourly", at(10))  # a duplicate records nothing more
    assert len(await rig.store.gaps("hourly")) == 1
    assert 'trio_routines_slots_missed_total{routine="hourly",reason="down"} 2' in (
        rig.scheduler.render_metrics()
    )
    async with rig.running():  # the boot finds every slot accounted for
        await trio.sleep(1)
    assert await rig.store.gaps("hourly") == [Gap(at(8), at(9), 2, GapReason.DOWN)]


async def test_a_boot_records_the_slots_a_hand_fire_came_after_as_no_claim_holds_them(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing ran after 07:00; at 12:30 a caller fires 09:00 by hand. 08:00 lies before it
    # (its gap written by the fire); 10:00 to 12:00 came before its claim, from whose instant
    # a boot counts: the next boot records them, and catches none of them up.
    rig = Rig(wall=WallClock(at(12, 30)))
    await rig.store.first_armed(["hourly"], at(6))  # a scheduler armed it then
    await rig.store.claim("hourly", at(7), at(7))
    await rig.store.settle("hourly", at(7), Outcome.COMPLETED, 5)
    assert (await rig.scheduler.fire("hourly", at(9))).claimed
    assert await rig.store.gaps("hourly") == [Gap(at(8), at(8), 1, GapReason.DOWN)]
    async with rig.running():
        await trio.sleep(1)
    gaps = [Gap(at(8), at(8), 1, GapReason.DOWN), Gap(at(10), at(12), 3, GapReason.DOWN)]
    assert await rig.store.gaps("hourly") == gaps
    assert [f.slot for f in await rig.store.history("hourly")] == [at(7), at(9)]
    again = Rig(store=rig.store, wall=rig.wall)
    async with again.running():  # a boot after it finds them recorded
        await trio.sleep(1)
    assert await rig.store.gaps("hourly") == gaps
    assert not [m for m in messages(caplog) if "not recorded" in m]


async def test_callers_that_fire_a_backlog_of_slots_late_record_no_gap_between_them(
    autojump_clock: Any,
) -> None:
    # An external clock (one caller a slot) running late: 09:00 is fired at 12:10, then 10:00,
    # 11:00 and 12:00 by their own callers. None of them was passed over.
    rig = Rig(wall=WallClock(at(12, 10)))
    await rig.store.claim("hourly", at(8), at(8))
    for hour in (9, 10, 11, 12):
        assert (await rig.scheduler.fire("hourly", at(hour))).claimed
    assert await rig.store.gaps("hourly") == []


async def test_a_boot_records_the_slots_behind_a_hand_fire_paused_before_a_resume(
    autojump_clock: Any,
) -> None:
    # Every 5 minutes; claimed 11:55, paused at 12:02, resumed at 12:22 while no scheduler
    # ran; at 12:30:10 12:00 is fired by hand (no pause held it). Behind it: 12:05 to 12:20
    # were paused, 12:25 and 12:30 not.
    every_five = Routine(name="five", prompt="p", cron="*/5 * * * *")
    rig = Rig(every_five, wall=WallClock(at(12, 30, 10)))
    await rig.store.first_armed(["five"], at(6))
    await rig.store.claim("five", at(11, 55), at(11, 55))
    await rig.store.settle("five", at(11, 55), Outcome.COMPLETED, 5)
    await rig.store.set_paused("five", True, at(12, 2))
    await rig.store.set_paused("five", False, at(12, 22))
    assert (await rig.scheduler.fire("five", at(12))).claimed
    async with rig.running():
        await trio.sleep(1)
    assert await rig.store.gaps("five") == [
        Gap(at(12, 5), at(12, 20), 4, GapReason.PAUSED),
        Gap(at(12, 25), at(12, 30), 2, GapReason.DOWN),
    ]


async def test_the_slots_behind_a_hand_fire_count_from_when_the_routine_was_first_armed(
    autojump_clock: Any,
) -> None:
    # A routine added at 10:30; at 12:30 a slot of the day before is fired by hand. Only the
    # slots since 10:30 passed over, as a boot counts them: 11:00 and 12:00.
    rig = Rig(wall=WallClock(at(12, 30)))
    await rig.store.first_armed(["hourly"], at(10, 30))
    assert (await rig.scheduler.fire("hourly", at(9, day=6))).claimed
    async with rig.running():
        await trio.sleep(1)
    assert await rig.store.gaps("hourly") == [Gap(at(11), at(12), 2, GapReason.DOWN)]


async def test_a_pause_after_a_hand_fire_leaves_the_slots_behind_it_down(
    autojump_clock: Any,
) -> None:
    # 09:00 fired by hand at 12:30, so not paused then; paused at 12:40, resumed at 12:45.
    rig = Rig(wall=WallClock(at(12, 30)))
    await rig.store.first_armed(["hourly"], at(6))
    await rig.store.claim("hourly", at(8), at(8))
    assert (await rig.scheduler.fire("hourly", at(9))).claimed
    await rig.store.set_paused("hourly", True)
    await rig.store.set_paused("hourly", False, at(12, 45))
    rig.wall.jump(timedelta(minutes=20))
    async with Rig(store=rig.store, wall=rig.wall).running():
        await trio.sleep(1)
    assert await rig.store.gaps("hourly") == [Gap(at(10), at(12), 3, GapReason.DOWN)]


async def test_a_replica_that_boots_during_anothers_catch_up_leaves_its_gap_to_it(
    autojump_clock: Any,
) -> None:
    # Replica a boots at 10:30 and catches up 08:00, a turn of 40 minutes; b boots at 10:40,
    # while it runs. What a passed over is its loop's to record once its turn ends.
    wall = WallClock(at(10, 30))
    store = MemoryStore()
    await store.first_armed(["hourly"], at(6))
    await store.claim("hourly", at(7), at(7))
    await store.settle("hourly", at(7), Outcome.COMPLETED, 5)
    slow = ScriptedAgent(wall=wall)
    slow.default = Complete(duration=40 * 60)
    a = Rig(store=store, wall=wall, agent=slow, replica="a")
    b = Rig(store=store, wall=wall, replica="b")
    async with a.running():
        await sleep_until_wall(wall, at(10, 40))
        async with b.running():
            await sleep_until_wall(wall, at(11, 30))
    # (11:00 came while a's turn ran: b claimed it, and skipped it, its session busy.)
    assert await store.gaps("hourly") == [Gap(at(9), at(10), 2, GapReason.CAUGHT_UP)]


async def test_the_slots_behind_hand_fires_are_read_in_each_routines_zone_and_seed(
    autojump_clock: Any,
) -> None:
    # Several routines at one boot: one that never fired comes first; one in Berlin's zone
    # (09:00 there is 07:00Z in July) and one with an H field (its minute: 45 for "seeded").
    # A gap already recorded holds the slots behind the last one's stamp: nothing more.
    berlin = Routine(name="berlin", prompt="p", cron="0 9 * * *", tz="Europe/Berlin")
    seeded = Routine(name="seeded", prompt="p", cron="H * * * *")
    held = Routine(name="held", prompt="p", cron="0 * * * *")
    fresh = Routine(name="a-fresh", prompt="p", cron="0 * * * *")
    rig = Rig(fresh, berlin, seeded, held, wall=WallClock(at(12, 30, day=9)))
    await rig.store.first_armed(["berlin", "seeded", "held"], at(6, day=1))
    await rig.store.claim("berlin", at(7, day=6), at(12, 30, day=9))
    await rig.store.claim("seeded", at(9, 21), at(12, 30, day=7))
    await rig.store.claim("held", at(9), at(12, 30, day=9))
    await rig.store.record_gap("held", Gap(at(10), at(12, day=9), 51, GapReason.CAUGHT_UP))
    async with rig.running():
        await trio.sleep(1)
    assert await rig.store.gaps("berlin") == [Gap(at(7, day=7), at(7, day=9), 3, GapReason.DOWN)]
    # (its own minute is 45: 09:45 to 11:45 behind its stamp; the boot's plan goes on after)
    assert (await rig.store.gaps("seeded"))[0] == Gap(at(9, 45), at(11, 45), 3, GapReason.DOWN)
    assert await rig.store.gaps("held") == [Gap(at(10), at(12, day=9), 51, GapReason.CAUGHT_UP)]


async def test_the_slots_behind_a_hand_fire_count_from_its_slot_when_first_armed_is_unknown(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(wall=WallClock(at(12, 30)))
    await rig.store.claim("hourly", at(9), at(12, 29))
    rig.store.fail("first_armed", StateFault("armed unreadable"))
    async with rig.running():
        await trio.sleep(1)
    assert await rig.store.gaps("hourly") == [Gap(at(10), at(12), 3, GapReason.DOWN)]


async def test_the_first_armed_read_behind_a_stamp_moves_no_routines_series(
    autojump_clock: Any,
) -> None:
    # A claim stamped ahead of now (a clock that ran ahead), completed: its stamp seeds the
    # last success. Asking when the routine was first armed (none kept: now) seeds nothing.
    rig = Rig(wall=WallClock(at(12, 30)))
    await rig.store.claim("hourly", at(9), at(15))
    await rig.store.settle("hourly", at(9), Outcome.COMPLETED, 5)
    async with rig.running():
        ended = at(15) + timedelta(milliseconds=5)  # its stamp and its duration
        assert rig.scheduler._parts.runtime.metrics.last_success["hourly"] == ended


async def test_the_slots_behind_a_hand_fire_whose_gaps_are_unreadable_are_said_so(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(wall=WallClock(at(12, 30)))
    await rig.store.first_armed(["hourly"], at(6))
    await rig.store.claim("hourly", at(9), at(12, 29))
    rig.store.fail("gaps", StateFault("gaps unreadable"), times=1)
    async with rig.running():  # the boot goes on
        await trio.sleep(1)
    assert (
        "hourly: the slots behind its newest claim's instant are not recorded: gaps unreadable"
    ) in messages(caplog)


async def test_the_slots_behind_a_hand_fire_unreadable_at_the_boot_are_said_so(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(wall=WallClock(at(12, 30)))
    await rig.store.claim("hourly", at(9), at(12, 29))
    await rig.store.settle("hourly", at(9), Outcome.COMPLETED, 5)
    rig.store.fail("resumed_at", StateFault("resumes unreadable"))
    async with rig.running():
        await trio.sleep(1)
    assert await rig.store.gaps("hourly") == []
    assert (
        "hourly: the slots behind its newest claim's instant are not recorded: resumes unreadable"
    ) in messages(caplog)


async def test_a_callers_fire_counts_from_a_gap_newer_than_the_claim(autojump_clock: Any) -> None:
    rig = Rig()
    await rig.store.claim("hourly", at(6), at(6))
    await rig.store.settle("hourly", at(6), Outcome.COMPLETED, 5)
    paused = Gap(at(7), at(8), 2, GapReason.PAUSED)
    await rig.store.record_gap("hourly", paused)
    await rig.scheduler.fire("hourly", at(10))
    assert await rig.store.gaps("hourly") == [paused, Gap(at(9), at(9), 1, GapReason.DOWN)]
    await sleep_until_wall(rig.wall, at(11))
    await rig.scheduler.fire("hourly", at(11))  # the slot right after: nothing passed
    assert len(await rig.store.gaps("hourly")) == 2


@pytest.mark.parametrize(
    ("cron", "tz", "first", "due", "passed"),
    [
        # Read in the routine's zone: 09:00 in Berlin is 07:00Z in July.
        ("0 9 * * *", "Europe/Berlin", at(7, day=4), at(7), (at(7, day=5), at(7, day=6), 2)),
        # An H field is the routine's own minute, its name the seed: 39 for "hourly".
        ("H * * * *", None, at(6, 39), at(9, 39), (at(7, 39), at(8, 39), 2)),
    ],
)
async def test_a_callers_fire_reads_the_passed_slots_as_its_routine_does(
    autojump_clock: Any,
    cron: str,
    tz: str | None,
    first: datetime,
    due: datetime,
    passed: tuple[datetime, datetime, int],
) -> None:
    rig = Rig(Routine(name="hourly", prompt="p", cron=cron, tz=tz))
    await rig.store.claim("hourly", first, first)
    await rig.store.settle("hourly", first, Outcome.COMPLETED, 5)
    await rig.scheduler.fire("hourly", due)
    assert [(g.first, g.last, g.count) for g in await rig.store.gaps("hourly")] == [passed]


async def test_a_callers_fire_records_what_it_passed_before_its_turn_less_a_slot_claimed_meanwhile(
    autojump_clock: Any,
) -> None:
    # Another replica claims 08:00 while this fire of 10:00 is on its way: 08:00 is a claim,
    # not a gap, and what lies before it is that replica's to account for (its boot's). The
    # gap is written once the slot is claimed, before the turn (a process killed during the
    # turn would have lost it).
    class Meanwhile(MemoryStore):
        async def claim(self, routine: str, slot: datetime, *args: Any, **kw: Any) -> Any:
            if slot == at(10):
                await super().claim(routine, at(8), at(8), replica="other")
            return await super().claim(routine, slot, *args, **kw)

    store = Meanwhile()
    seen: list[list[Gap]] = []

    class Looks:
        async def invoke(self, session: str, text: str) -> AsyncIterator[Any]:
            seen.append(await store.gaps("hourly"))
            yield Completed()

    await store.claim("hourly", at(6), at(6))
    await store.settle("hourly", at(6), Outcome.COMPLETED, 5)
    scheduler = Scheduler(agent=Looks(), store=store, routines=[HOURLY], now=WallClock(T0))
    await scheduler.fire("hourly", at(10))
    passed = Gap(at(9), at(9), 1, GapReason.DOWN)
    assert await store.gaps("hourly") == [passed]
    assert seen == [[passed]]


async def test_a_callers_fire_whose_gaps_are_unreadable_fires_and_says_so(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig()
    rig.store.fail("gaps", StateFault("gaps unreadable"))
    result = await rig.scheduler.fire("hourly", at(10))
    assert result.claimed  # the slot fires; only what it passed over goes unrecorded
    assert "hourly: what a caller's fire passed over is unread: gaps unreadable" in [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
    ]


async def test_a_callers_first_fire_of_a_routine_counts_from_when_it_was_first_armed(
    autojump_clock: Any,
) -> None:
    # Never fired, no gap: as a boot does, from its first arming (none kept: from now).
    rig = Rig()
    result = await rig.scheduler.fire("hourly", at(10))
    assert result.claimed
    assert await rig.store.gaps("hourly") == []  # first armed now: nothing passed before
    armed = Rig(Routine(name="daily", prompt="p", cron="0 * * * *"), store=rig.store)
    await rig.store.first_armed(["daily"], at(7, 30))
    await armed.scheduler.fire("daily", at(10))
    assert await rig.store.gaps("daily") == [Gap(at(8), at(9), 2, GapReason.DOWN)]


async def test_a_claim_made_by_hand_for_a_slot_ahead_is_announced_though_stamped_before(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Its stamp is now: only its slot lies ahead, and every slot before it is stale.
    rig = Rig()
    await rig.store.claim("hourly", at(13), T0)
    await rig.store.settle("hourly", at(13), Outcome.COMPLETED, 5)
    async with rig.running() as scheduler:
        stats = scheduler.statistics()
        assert stats.next_due == {"hourly": at(14)}
        assert stats.future_claims == {"hourly": at(13)}
        (warning,) = [m for m in messages(caplog, logging.WARNING) if "future" in m]
        assert warning.startswith(
            "hourly: newest claim is in the future (slot 2026-07-07T13:00:00.000Z, "
            "stamped 2026-07-07T10:30:00.000Z by an unnamed replica) — made while a wall clock "
            "was ahead (this one's, or that replica's), or by hand"
        )
        await sleep_until_wall(rig.wall, at(13, 30))
        assert scheduler.statistics().future_claims == {}
    assert rig.agent.turns == []


async def test_a_claim_stamped_before_its_slot_is_caught_up_from_its_slot(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # A hand-made stamp of year 1: the catch-up counts from the claim's slot, not from the
    # stamp, whose "missed" slots the claim itself made stale.
    rig = Rig()
    await rig.store.claim("hourly", at(8), datetime(1, 1, 1, tzinfo=UTC))
    await rig.store.settle("hourly", at(8), Outcome.COMPLETED, 5)
    async with rig.running():
        await trio.sleep(1)
    assert [t.text for t in rig.agent.turns] == [HOURLY.prompt]  # 09:00, the oldest missed
    assert [(slot, outcome) for slot, _, outcome in await rig.fires()] == [
        (at(8), Outcome.COMPLETED),
        (at(9), Outcome.COMPLETED),
    ]
    assert not [m for m in messages(caplog) if "0001-" in m and "missed" in m]


async def test_a_claim_in_the_future_is_announced_and_honestly_waited_for(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig()
    # The clock ran 2.5 hours ahead when the 13:00 slot was claimed, and was corrected since.
    await rig.store.claim("hourly", at(13), at(13), replica="box:7")
    await rig.store.settle("hourly", at(13), Outcome.COMPLETED, 5)
    async with rig.running() as scheduler:
        stats = scheduler.statistics()
        assert stats.next_due == {"hourly": at(14)}  # what the loop really waits for
        assert stats.future_claims == {"hourly": at(13)}
        assert (
            'trio_routines_future_claim_timestamp_seconds{routine="hourly"} '
            f"{int(at(13).timestamp())}" in scheduler.render_metrics()
        )
        (warning,) = [m for m in messages(caplog, logging.WARNING) if "future" in m]
        assert warning.startswith(
            "hourly: newest claim is in the future (slot 2026-07-07T13:00:00.000Z, "
            "stamped 2026-07-07T13:00:00.000Z by box:7) — made while a wall clock was ahead"
        )
        assert "delete that claim (docs/command-line.md: A clock that ran ahead)" in warning
        await sleep_until_wall(rig.wall, at(13, 30))
        assert rig.agent.turns == []  # 11:00 and 12:00 are stale behind the claim
        assert scheduler.statistics().future_claims == {}  # the instant has passed
        await sleep_until_wall(rig.wall, at(14, 30))
    assert [t.wall for t in rig.agent.turns] == [at(14)]


async def test_a_claim_stamped_at_the_calendars_end_says_it_holds_every_slot_back(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # A row edited to `infinity`: no slot comes after its stamp. The boot said the cron would
    # never fire again, which the cron does; it is the claim that holds it.
    rig = Rig()
    await rig.store.claim("hourly", at(8), LAST_INSTANT)
    await rig.store.settle("hourly", at(8), Outcome.COMPLETED, 5)
    async with rig.running() as scheduler:
        assert scheduler.statistics().next_due == {}
    assert [m for m in messages(caplog, logging.WARNING) if "not armed" in m] == [
        'hourly: cron "0 * * * *" fires no slot after its newest claim\'s stamp '
        "(9999-12-31T23:59:59.999Z) — not armed: stop, delete that claim, and start again "
        "(docs/command-line.md: A clock that ran ahead)"
    ]
    assert rig.agent.turns == []
    # A cron that fires no slot at all: deleting the claim would not help, and is not advised.
    never = Rig(Routine(name="feb30", prompt="p", cron="0 0 30 2 *"))
    await never.store.claim("feb30", at(8), LAST_INSTANT)
    caplog.clear()
    async with never.running():
        pass
    assert [m for m in messages(caplog, logging.WARNING) if "not armed" in m] == [
        'feb30: cron "0 0 30 2 *" will never fire again — not armed'
    ]


async def test_only_the_newest_unsettled_claim_is_marked(autojump_clock: Any) -> None:
    rig = Rig()
    for hour in (7, 8, 9):
        await rig.store.claim("hourly", at(hour), at(hour))
    await rig.store.settle("hourly", at(7), Outcome.COMPLETED, 5)
    async with rig.running():
        pass
    assert [o for _, _, o in await rig.fires()][:3] == [
        Outcome.COMPLETED,
        None,
        Outcome.INTERRUPTED,
    ]


async def test_unreadable_old_claim_does_not_fail_boot(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    await store.claim("hourly", at(7), at(7))
    await store.settle("hourly", at(7), Outcome.COMPLETED, 1)
    await store.claim("hourly", at(8), at(8))
    await store.settle("hourly", at(8), Outcome.COMPLETED, 1)
    old = store.claim_dir("hourly") / slot_name(at(7))
    old.unlink()
    old.mkdir()
    rig = Rig(store=store)
    async with rig.running():
        await wait_until(lambda: bool(rig.agent.finished))
    assert [t.session for t in rig.agent.turns] == ["routine:hourly"]  # the catch-up


async def test_a_newest_claim_that_is_no_file_is_reported_and_the_boot_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = DirectoryStore(tmp_path)
    await store.claim("hourly", at(7), at(7))
    await store.settle("hourly", at(7), Outcome.COMPLETED, 1)
    squatter = store.claim_dir("hourly") / slot_name(at(8))
    squatter.mkdir()
    rig = Rig(store=store)
    async with rig.running():
        await wait_until(lambda: bool(rig.agent.finished))
    # The name holds its slot (never run); the boot went on and caught up the slot after it.
    assert [t.session for t in rig.agent.turns] == ["routine:hourly"]
    assert [f[0] for f in await rig.fires()][:2] == [at(7), at(8)]
    warnings = messages(caplog, logging.WARNING)
    assert any(f"{squatter} is a directory, not a regular file" in m for m in warnings)
    assert squatter.is_dir()


async def test_claims_dir_that_is_a_file_fails_boot(tmp_path: Path) -> None:
    (tmp_path / "schedule" / "claims").mkdir(parents=True)
    (tmp_path / "schedule" / "claims" / "hourly").write_text("not a directory")
    rig = Rig(store=DirectoryStore(tmp_path))
    with pytest.raises(StateFault, match="ENOTDIR"):
        await rig.scheduler.run()
    assert rig.agent.turns == []


async def test_an_external_clock_boot_reports_an_unreadable_claims_entry_and_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # An external-clock boot reads the newest claims only to reconcile (it plans nothing from
    # them): one it cannot read is an ERROR naming the routine, not a failed boot -- the
    # original reads none in this mode. The other routines are reconciled, wake-ups served,
    # and a fire of the unreadable routine reports the fault itself.
    store = DirectoryStore(tmp_path)
    await store.claim("daily", at(6), at(6))  # left open by a `fire` that died
    (tmp_path / "schedule" / "claims" / "hourly").write_text("not a directory")
    daily = Routine(name="daily", prompt="p", cron="0 6 * * *")
    rig = Rig(HOURLY, daily, store=store, external_clock=True)
    await store.add_wakeup(_due_request(), T0 - timedelta(hours=1))
    async with rig.running() as scheduler:
        await wait_until(lambda: bool(rig.agent.finished))
        with pytest.raises(StateFault, match="ENOTDIR"):
            await scheduler.fire("hourly", at(10))
    assert rig.agent.sessions() == ["chat-1"]
    assert await rig.fires("daily") == [(at(6), at(6), Outcome.INTERRUPTED)]
    (error,) = [m for m in messages(caplog, logging.ERROR) if "not reconciled" in m]
    assert error.startswith("hourly: its newest claim is unreadable")
    assert "ENOTDIR" in error


async def test_foreign_entries_are_ignored(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    await store.claim("hourly", at(7), at(7))
    await store.settle("hourly", at(7), Outcome.COMPLETED, 1)
    directory = store.claim_dir("hourly")
    (directory / ".DS_Store").write_text("junk")
    (directory / (slot_name(at(9)) + ".tmp")).write_text("{}")
    rig = Rig(store=store)
    async with rig.running():
        await wait_until(lambda: bool(rig.agent.finished))
    assert [f[0] for f in await rig.fires()] == [at(7), at(8)]


# -- firing ----------------------------------------------------------------------------------


async def test_catch_up_fires_once_for_many_missed_slots(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig()
    await completed(rig.store, "hourly", at(6))
    async with rig.running():
        await sleep_until_wall(rig.wall, at(10, 59))
    assert [(t.session, t.text, t.wall) for t in rig.agent.turns] == [
        ("routine:hourly", "Check the queue.", T0)
    ]
    assert await rig.fires() == [
        (at(6), at(6), Outcome.COMPLETED),
        (at(7), T0, Outcome.COMPLETED),  # the first missed slot, stamped now
    ]
    assert "hourly: catching up a missed run" in messages(caplog, logging.INFO)


async def test_a_catch_up_records_the_slots_it_stands_for_before_its_turn(
    autojump_clock: Any,
) -> None:
    # Its process may die during the turn: the replica that finds the claim dead settles it
    # interrupted, and the slots behind it must be in a gap already, or none would say why.
    rig = Rig(agent=ScriptedAgent(Complete(duration=3600)))
    await completed(rig.store, "hourly", at(6))
    async with rig.running(grace=0):
        await trio.sleep(60)  # the catch-up's turn under way
        assert len(rig.agent.turns) == 1
        [gap] = await rig.store.gaps("hourly")
        assert (gap.first, gap.last, gap.count, gap.reason) == (
            at(8),
            at(10),
            3,
            GapReason.CAUGHT_UP,
        )
        fire = await rig.store.latest_fire("hourly")
        assert fire is not None
        assert (fire.slot, fire.outcome) == (at(7), None)  # its turn not over


async def test_a_catch_up_exactly_a_minute_late_records_the_slot_come_meanwhile(
    autojump_clock: Any,
) -> None:
    # Booted at 10:30:00.000 sharp: the catch-up is 10:29, and 10:30, come as it starts, is
    # the catch-up's to stand for (the loop's next slot is the one after now).
    every = Routine(name="m", prompt="p", cron="* * * * *")
    store = MemoryStore()
    await completed(store, "m", at(10, 28))
    rig = Rig(every, store=store, wall=WallClock(at(10, 30)))
    async with rig.running(grace=0):
        await trio.sleep(30)
    assert [(g.first, g.last, g.reason) for g in await store.gaps("m")] == [
        (at(10, 30), at(10, 30), GapReason.CAUGHT_UP)
    ]


class ClaimPastItsDeadline(MemoryStore):
    """Claims that land, answered past the scheduler's store deadline (a stalled disk)."""

    slow = False

    async def claim(self, routine: str, slot: datetime, *args: Any, **kwargs: Any) -> Any:
        result = await super().claim(routine, slot, *args, **kwargs)
        if self.slow:
            with trio.CancelScope(shield=True):
                await trio.sleep(31)
        return result


async def claims_past_their_deadline() -> ClaimPastItsDeadline:
    """A store whose routine ``hourly`` last completed 06:00 and whose claims from now on
    land past the scheduler's deadline."""
    store = ClaimPastItsDeadline()
    await completed(store, "hourly", at(6))
    store.slow = True
    return store


async def test_a_catch_up_claimed_past_its_deadline_is_interrupted_with_its_gap(
    autojump_clock: Any,
) -> None:
    store = await claims_past_their_deadline()
    rig = Rig(store=store)
    async with rig.running(grace=0):
        await trio.sleep(120)
    assert rig.agent.turns == []
    history = await store.history("hourly")
    assert [(f.slot, f.outcome) for f in history] == [
        (at(6), Outcome.COMPLETED),
        (at(7), Outcome.INTERRUPTED),
    ]
    assert await store.gaps("hourly") == [Gap(at(8), at(10), 3, GapReason.CAUGHT_UP)]


async def test_a_caller_s_slot_claimed_past_its_deadline_records_the_downtime_before_it(
    autojump_clock: Any,
) -> None:
    store = await claims_past_their_deadline()
    rig = Rig(store=store)
    result = await rig.scheduler.fire("hourly", at(10))
    assert (result.claimed, result.outcome) == (True, Outcome.INTERRUPTED)
    assert await store.gaps("hourly") == [Gap(at(7), at(9), 3, GapReason.DOWN)]


class SlowFirstPausedRead(MemoryStore):
    """The paused read of the first fire after the boot takes two seconds."""

    armed = False

    async def paused(self) -> set[str]:
        if self.armed:
            self.armed = False
            await trio.sleep(2)
        return await super().paused()


async def test_a_catch_up_whose_start_crosses_a_slot_counts_it_once(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its fire begins at 10:30:59 and claims after 10:31: 10:31 is the overlap's, not also
    # the catch-up's.
    every = Routine(name="m", prompt="p", cron="* * * * *")
    store = SlowFirstPausedRead()
    await completed(store, "m", at(10, 20))
    wall = WallClock(at(10, 30) + timedelta(seconds=59))
    rig = Rig(every, store=store, wall=wall, agent=ScriptedAgent(Complete(duration=180)))
    fire_slot = FirePath.fire_slot

    async def slow_read_then_fire(self: FirePath, *args: Any, **kwargs: Any) -> Any:
        store.armed = True  # its own paused read, after the loop read the wall clock
        return await fire_slot(self, *args, **kwargs)

    monkeypatch.setattr(FirePath, "fire_slot", slow_read_then_fire)
    async with rig.running(grace=0):
        await trio.sleep(200)
    assert [(g.first, g.last, g.count, g.reason) for g in await store.gaps("m")] == [
        (at(10, 22), at(10, 30), 9, GapReason.CAUGHT_UP),
        (at(10, 31), at(10, 34), 4, GapReason.OVERLAP),
    ]


class SlowStore(MemoryStore):
    """Settles and resume reads that take a second, counted while in flight; resume reads of
    ``broken`` routines fail (the last ones first)."""

    def __init__(self, *broken: str) -> None:
        super().__init__()
        self.broken = broken
        self.in_flight: dict[str, int] = {"settle": 0, "resumed_at": 0}
        self.most = dict(self.in_flight)

    async def _slowly(self, call: str, routine: str) -> None:
        self.in_flight[call] += 1
        self.most[call] = max(self.most[call], self.in_flight[call])
        try:
            await trio.sleep(
                1 + (len(self.broken) - self.broken.index(routine) if routine in self.broken else 0)
            )
        finally:
            self.in_flight[call] -= 1

    async def settle(self, routine: str, slot: datetime, *args: Any, **kwargs: Any) -> bool:
        await self._slowly("settle", routine)
        return await super().settle(routine, slot, *args, **kwargs)

    async def resumed_at(self, routine: str) -> datetime | None:
        await self._slowly("resumed_at", routine)
        if routine in self.broken:
            raise StateFault(f"the resume of {routine!r} is unreadable")
        return await super().resumed_at(routine)


@pytest.mark.parametrize("broken", [(), ("r1", "r2")])
async def test_a_boot_settles_open_claims_and_reads_resumes_all_at_once(
    autojump_clock: Any, broken: tuple[str, ...], caplog: pytest.LogCaptureFixture
) -> None:
    store = SlowStore(*broken)
    names = [f"r{n}" for n in range(4)]
    for name in names:
        await store.claim(name, at(6), at(6))  # open: settled interrupted at boot
    store.resumed["r3"] = at(10, 15)  # resumed after every slot it missed: no catch-up
    rig = Rig(*[Routine(name=name, prompt="p", cron="0 * * * *") for name in names], store=store)
    if broken:
        # The first broken routine in order, as one plain error, though r2's fails first.
        with pytest.raises(StateFault, match=r"^the resume of 'r1' is unreadable$"):
            await rig.scheduler.run()
    else:
        async with rig.running():
            pass
        assert messages(caplog, logging.INFO).count("r3: catching up a missed run") == 0
        for name in names[:3]:
            assert f"{name}: catching up a missed run" in messages(caplog, logging.INFO)
    # Each store call made once per routine, all at once (a batching store serves them in a
    # few round trips).
    assert store.most == {"settle": 4, "resumed_at": 4}
    for name in names:
        (fire, *_) = await store.history(name)
        assert (fire.outcome, fire.error) == (
            Outcome.INTERRUPTED,
            found_by(BOOT_INTERRUPTED, rig.scheduler.replica),
        )


async def test_next_boot_resumes_from_the_catch_up_stamp(autojump_clock: Any) -> None:
    rig = Rig()
    await rig.store.claim("hourly", at(7), T0)  # a catch-up of 07:00 taken at 10:30
    await rig.store.settle("hourly", at(7), Outcome.COMPLETED, 1)
    async with rig.running():
        await sleep_until_wall(rig.wall, at(11, 30))
    assert [t.wall for t in rig.agent.turns] == [at(11)]


async def test_state_fault_at_fire_time_skips_the_run_and_keeps_the_loop(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig()
    rig.store.faults["claim"] = StateFault("ENOTDIR: Not a directory: claims/hourly")
    async with rig.running():
        await sleep_until_wall(rig.wall, at(11, 30))
        assert rig.agent.turns == []
        assert any("fire failed" in m for m in messages(caplog, logging.ERROR))
        del rig.store.faults["claim"]
        await sleep_until_wall(rig.wall, at(12, 30))
    assert [t.wall for t in rig.agent.turns] == [at(12)]


async def test_failed_turn_is_claimed_and_settled_failed(autojump_clock: Any) -> None:
    rig = Rig(agent=ScriptedAgent(Fail("the model said no")))
    async with rig.running():
        await sleep_until_wall(rig.wall, at(11, 30))
    assert await rig.fires() == [(at(11), at(11), Outcome.FAILED)]
    assert [f.error for f in await rig.store.history("hourly")] == ["the model said no"]


async def test_a_raising_agent_stores_the_exception_line(autojump_clock: Any) -> None:
    rig = Rig(agent=ScriptedAgent(Raise(RuntimeError("provider refused:\nquota"))))
    result = await rig.scheduler.fire("hourly", at(9))
    assert result.outcome is Outcome.FAILED
    (fire,) = await rig.store.history("hourly")
    assert fire.error == "provider refused: quota"


async def test_routine_without_cron_is_never_armed(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Hourly polls: no wake-up is pending, and three days pass in fewer ticks of the idle loops.
    rig = Rig(Routine(name="manual", prompt="p"), poll_interval=3600)
    async with rig.running() as scheduler:
        await trio.sleep(3 * 86400)
        assert scheduler.statistics().armed == ()
    assert rig.agent.turns == []
    assert await rig.store.history("manual") == []
    assert not [m for m in messages(caplog) if "never fire again" in m]


async def test_never_again_cron_is_warned_and_not_armed(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(Routine(name="feb30", prompt="p", cron="0 0 30 2 *"))
    async with rig.running() as scheduler:
        assert scheduler.statistics().armed == ()
    assert 'feb30: cron "0 0 30 2 *" will never fire again — not armed' in messages(caplog)


async def test_a_fire_refused_by_our_own_turn_of_its_session_stores_no_reason(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "trio_routines")
    rig = Rig(agent=ScriptedAgent(Complete(duration=3600)))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(rig.scheduler.fire, "hourly", at(9))
        await trio.testing.wait_all_tasks_blocked()  # 9:00's turn runs, for an hour
        result = await rig.scheduler.fire("hourly", at(10))
    assert (result.outcome, result.failed) == (Outcome.SKIPPED, None)
    assert result.reason == (
        'another turn in the session of "hourly" is still running (its last, a run or a '
        "wake-up) — this occurrence is skipped, "
        "the next fires per cron"
    )
    fires = {f.slot: (f.outcome, f.error) for f in await rig.store.history("hourly")}
    # history shows its own reason for it: the session was busy with another turn
    assert fires == {at(9): (Outcome.COMPLETED, None), at(10): (Outcome.SKIPPED, None)}
    assert len(rig.agent.turns) == 1
    # One start: 10:00's turn never began (it logged a start before its skip).
    assert [m for m in messages(caplog) if m.startswith("hourly firing")] == [
        "hourly firing (session=routine:hourly)"
    ]


async def test_two_routines_fire_concurrently_and_slow_turns_skip_slots(
    autojump_clock: Any,
) -> None:
    fast = Routine(name="fast", prompt="f", cron="*/10 * * * *")
    slow = Routine(name="slow", prompt="s", cron="*/10 * * * *")
    agent = ScriptedAgent()
    agent.script(Complete(duration=25 * 60), session="routine:slow")
    rig = Rig(fast, slow, agent=agent)
    async with rig.running():
        await sleep_until_wall(rig.wall, at(11, 15))
    fast_walls = [t.wall for t in agent.turns if t.session == "routine:fast"]
    slow_walls = [t.wall for t in agent.turns if t.session == "routine:slow"]
    assert fast_walls == [at(10, 40), at(10, 50), at(11), at(11, 10)]
    # 10:40 ran for 25 minutes: 10:50 and 11:00 were skipped, never claimed
    assert slow_walls == [at(10, 40), at(11, 10)]
    assert [f.slot for f in await rig.store.history("slow")] == [at(10, 40), at(11, 10)]


@pytest.mark.parametrize(
    ("until", "fires", "kept"),
    [
        (timedelta(minutes=10, seconds=30), 10, 10),
        pytest.param(timedelta(days=1, seconds=30), 1440, 512, marks=pytest.mark.slow),  # retention
    ],
    ids=["ten minutes", "a day"],
)
async def test_a_simulated_run_of_a_minute_cron(
    autojump_clock: Any, until: timedelta, fires: int, kept: int
) -> None:
    # Hourly polls: no wake-up is pending, and the fires share it with fewer idle ticks. The
    # day is slow; the ten minutes keep the count of outcomes in the fast subset.
    rig = Rig(Routine(name="minutely", prompt="p", cron="* * * * *"), poll_interval=3600)
    async with rig.running():
        await sleep_until_wall(rig.wall, T0 + until)
    assert len(rig.agent.turns) == fires
    assert rig.scheduler.statistics().outcomes == {"completed": fires}
    assert len(await rig.store.history("minutely")) == kept


# -- the external clock path --------------------------------------------------------------------


async def test_external_fire_claims_runs_and_settles(autojump_clock: Any) -> None:
    rig = Rig()
    result = await rig.scheduler.fire("hourly", at(9))
    assert (result.claimed, result.outcome, result.failed) == (True, Outcome.COMPLETED, None)
    assert await rig.fires() == [(at(9), T0, Outcome.COMPLETED)]
    assert rig.agent.sessions() == ["routine:hourly"]


async def test_busy_turn_is_skipped_not_failed(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(agent=ScriptedAgent(Busy()))
    result = await rig.scheduler.fire("hourly", at(9))
    assert (result.claimed, result.outcome, result.failed) == (True, Outcome.SKIPPED, None)
    assert result.reason == (  # the agent's answer: it may have run this slot already
        'the agent answered busy for "hourly" — this occurrence is skipped, '
        "the next fires per cron (the session already has a turn in flight)"
    )
    assert await rig.fires() == [(at(9), T0, Outcome.SKIPPED)]
    # An overlap, no failure; the history keeps the agent's own words (it said why, we cannot)
    assert [f.error for f in await rig.store.history("hourly")] == [
        "the session already has a turn in flight"
    ]
    assert any(m.startswith("hourly: occurrence skipped (session busy)") for m in messages(caplog))
    # A routine without a cron has no next slot "per cron": a caller fires it again.
    adhoc = Rig(Routine(name="od", prompt="p"), agent=ScriptedAgent(Busy()))
    skipped = await adhoc.scheduler.fire("od", at(9))
    assert skipped.reason == (
        'the agent answered busy for "od" — this occurrence is skipped '
        "(the session already has a turn in flight)"
    )
    assert messages(caplog, logging.ERROR) == []
    assert not [m for m in messages(caplog) if "failed" in m]


async def test_session_gate_makes_a_second_turn_busy(autojump_clock: Any) -> None:
    rig = Rig(
        Routine(name="a", prompt="p", cron="0 * * * *"),
        agent=ScriptedAgent(Complete(duration=120)),
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(rig.scheduler.fire, "a", at(9))
        await trio.sleep(1)
        second = await rig.scheduler.run_now("a")
    assert second.busy
    assert len(rig.agent.turns) == 1  # the second turn never reached the agent


async def test_failing_turn_reports_its_details(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(agent=ScriptedAgent(Fail("boom\n  at somewhere\nERROR daily failed (1ms): FIRE")))
    result = await rig.scheduler.fire("hourly", at(9))
    assert (result.claimed, result.outcome) == (True, Outcome.FAILED)
    assert result.failed is not None
    assert result.failed.startswith("boom")
    (line,) = messages(caplog, logging.ERROR)
    assert line == "hourly failed (0ms): boom at somewhere ERROR daily failed (1ms): FIRE"


async def test_reply_text_is_neither_logged_nor_stored(
    mock_clock: Any, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    # The directory store writes in threads: virtual time must not leap to the claim's
    # deadline while a thread works (a claim answered after it never runs), so it jumps
    # only once the threads have been idle a moment.
    mock_clock.autojump_threshold = 0.1
    rig = Rig(
        store=DirectoryStore(tmp_path),
        agent=ScriptedAgent(Complete(duration=1.5, reply="SECRET-REPLY")),
    )
    await rig.scheduler.fire("hourly", at(9))
    assert not [m for m in messages(caplog) if "SECRET-REPLY" in m]
    files = [p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()]  # noqa: ASYNC240
    assert files
    assert not [f for f in files if b"SECRET-REPLY" in f]
    assert messages(caplog, logging.INFO)[-1] == "hourly completed (1500ms)"


async def test_duplicate_and_stale_deliveries(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig()
    assert (await rig.scheduler.fire("hourly", at(9))).claimed
    duplicate = await rig.scheduler.fire("hourly", at(9))
    assert (duplicate.claimed, duplicate.reason) == (False, "duplicate")
    assert await rig.scheduler.fire("hourly", at(10)) is not None
    stale = await rig.scheduler.fire("hourly", at(8))
    assert (stale.claimed, stale.reason) == (False, "stale")
    assert len(rig.agent.turns) == 2
    debug = messages(caplog, logging.DEBUG)  # normal with replicas: not worth an INFO line
    warn = messages(caplog, logging.WARNING)
    assert any("is already claimed" in m for m in debug)
    assert not any("is already claimed" in m for m in messages(caplog, logging.INFO))
    assert any("is stale" in m and format_iso(at(10)) in m for m in warn)
    assert [f[0] for f in await rig.fires()] == [at(9), at(10)]


async def test_later_slot_fires_when_an_earlier_delivery_arrives_later(
    autojump_clock: Any,
) -> None:
    rig = Rig()
    assert (await rig.scheduler.fire("hourly", at(10))).claimed
    assert (await rig.scheduler.fire("hourly", at(8))).reason == "stale"
    assert (await rig.scheduler.fire("hourly", at(9))).reason == "stale"
    rig.wall.jump(timedelta(hours=1))
    assert (await rig.scheduler.fire("hourly", at(11))).claimed
    assert len(await rig.fires()) == 2


async def test_a_slot_from_the_future_is_refused(autojump_clock: Any) -> None:
    rig = Rig(Routine(name="hourly", prompt="p", cron="* * * * *"))
    with pytest.raises(NotYetDue, match="has not arrived yet") as caught:
        await rig.scheduler.fire("hourly", at(10, 31))
    assert caught.value.wait == 60
    assert rig.agent.turns == []
    assert await rig.fires() == []
    await trio.sleep(60)
    assert (await rig.scheduler.fire("hourly", at(10, 31))).claimed
    assert rig.agent.turns[0].wall == at(10, 31)


async def test_claim_fault_is_typed_and_does_not_burn_the_slot(autojump_clock: Any) -> None:
    rig = Rig()
    rig.store.faults["claim"] = StateFault("EIO")
    with pytest.raises(StateFault):
        await rig.scheduler.fire("hourly", at(9))
    assert rig.agent.turns == []
    del rig.store.faults["claim"]
    assert (await rig.scheduler.fire("hourly", at(9))).outcome is Outcome.COMPLETED


async def test_external_fire_refuses_bad_requests(autojump_clock: Any) -> None:
    rig = Rig(Routine(name="hourly", prompt="p", cron="0 * * * *"), Routine(name="m", prompt="p"))
    with pytest.raises(UnknownRoutine, match="available: hourly, m"):
        await rig.scheduler.fire("nope", at(9))
    with pytest.raises(NotOnGrid):
        await rig.scheduler.fire("hourly", at(9, 30))
    # an on-demand routine accepts any instant, to the millisecond
    assert (await rig.scheduler.fire("m", at(9, 17) + timedelta(microseconds=1500))).claimed
    assert (await rig.store.history("m"))[0].slot == at(9, 17) + timedelta(milliseconds=1)
    rig.scheduler.stop()
    with pytest.raises(Stopping):
        await rig.scheduler.fire("hourly", at(10))


async def test_cancelled_caller_still_gets_the_fire_settled(autojump_clock: Any) -> None:
    # The turn ends within the grace a caller's cancel leaves it.
    rig = Rig(agent=ScriptedAgent(Complete(duration=60)), default_grace=120)
    seen: list[Outcome | None] = []

    async def watch() -> None:
        await trio.sleep(30)
        seen.extend(f.outcome for f in await rig.store.history("hourly"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        with trio.move_on_after(5) as scope:
            await rig.scheduler.fire("hourly", at(9))
    assert scope.cancelled_caught  # the caller observes its cancellation...
    assert seen == [None]  # ...the claim was unsettled mid-turn...
    assert (await rig.fires())[0][2] is Outcome.COMPLETED  # ...and the fire still settled


@pytest.mark.parametrize("slot", ["2026-07-07T09:00Z", None, 1783414800])
async def test_a_slot_that_is_no_datetime_is_one_clear_error(slot: Any) -> None:
    rig = Rig()
    with pytest.raises(TypeError) as refused:
        await rig.scheduler.fire("hourly", slot)
    assert str(refused.value) == f"the slot must be an aware datetime, not {type(slot).__name__}"
    assert await rig.store.history("hourly") == []


async def test_concurrent_duplicate_is_skipped_without_invoking(autojump_clock: Any) -> None:
    rig = Rig(agent=ScriptedAgent(Complete(duration=10)))
    results = []

    async def one() -> None:
        results.append(await rig.scheduler.fire("hourly", at(9)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one)
        nursery.start_soon(one)
    assert sorted(r.claimed for r in results) == [False, True]
    assert len(rig.agent.turns) == 1


class SlowClaims(MemoryStore):
    """A store whose claims take a second to decide; it counts them."""

    asked = 0

    async def claim(self, *args: Any, **options: Any) -> Any:
        self.asked += 1
        await trio.sleep(1)
        return await super().claim(*args, **options)


@pytest.mark.parametrize("claimed", [None, 10, 9])
async def test_fires_of_a_slot_being_decided_here_answer_as_its_decision(
    autojump_clock: Any, claimed: int | None, caplog: pytest.LogCaptureFixture
) -> None:
    # Answered "duplicate" while the first was still deciding, the fires of a slot that then
    # turned out stale said it was claimed (and were counted so).
    store = SlowClaims()
    if claimed is not None:  # a newer slot's claim, or this one's, another process's
        await store.claim("hourly", at(claimed), at(claimed))
    newer = claimed == 10
    rig = Rig(store=store, agent=ScriptedAgent(Complete(duration=10)))
    results = []

    async def one() -> None:
        results.append(await rig.scheduler.fire("hourly", at(9)))

    async with trio.open_nursery() as nursery:
        for _ in range(40):
            nursery.start_soon(one)
    if newer:
        assert [(r.claimed, r.reason) for r in results] == [(False, "stale")] * 40
        assert rig.agent.turns == []
        assert rig.scheduler.statistics().outcomes == {"stale": 40}
        assert store.asked == 2  # the newer slot's, and once for them all: a stale slot stays so
        assert set(messages(caplog, logging.WARNING)) == {
            "hourly: skipping — slot 2026-07-07T09:00:00.000Z is stale: "
            "2026-07-07T10:00:00.000Z was already claimed, so this instant is skipped"
        }
    elif claimed == 9:
        assert [(r.claimed, r.reason) for r in results] == [(False, "duplicate")] * 40
        assert store.asked == 2  # its claim, and once for them all
    else:
        assert sorted((r.claimed, r.reason) for r in results) == [(False, "duplicate")] * 39 + [
            (True, None)
        ]
        assert len(rig.agent.turns) == 1
        assert store.asked == 1


async def test_fires_waiting_on_a_decision_that_failed_decide_for_themselves(
    autojump_clock: Any,
) -> None:
    class FirstFails(MemoryStore):
        def __init__(self) -> None:
            super().__init__()
            self.deciding, self.fail = trio.Event(), trio.Event()

        async def claim(self, *args: Any, **options: Any) -> Any:
            if not self.deciding.is_set():
                self.deciding.set()
                await self.fail.wait()
                raise StateFault("the disk is gone")
            return await super().claim(*args, **options)

    store = FirstFails()
    rig = Rig(store=store, agent=ScriptedAgent(Complete(duration=10)))
    results: list[Any] = []

    async def one() -> None:
        try:
            results.append(await rig.scheduler.fire("hourly", at(9)))
        except StateFault as exc:
            results.append(str(exc))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one)
        await store.deciding.wait()
        nursery.start_soon(one)
        nursery.start_soon(one)
        await trio.testing.wait_all_tasks_blocked()
        assert results == []  # both wait for the first's decision
        store.fail.set()
    assert results[0] == "the disk is gone"  # (the store's own words, as any claim's fault)
    assert sorted((r.claimed, r.reason) for r in results[1:]) == [
        (False, "duplicate"),
        (True, None),
    ]
    assert len(rig.agent.turns) == 1


async def test_external_clock_mode_runs_only_the_wake_loop_after_the_reconcile(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(external_clock=True)
    await rig.store.claim("hourly", at(6), at(6))  # left open by a `fire` that died, overdue
    wakeup = await rig.store.add_wakeup(_due_request(), T0 - timedelta(hours=1))
    async with rig.running() as scheduler:
        # reconciled at boot as in any clock mode, and still nothing armed or caught up
        assert await rig.fires() == [(at(6), at(6), Outcome.INTERRUPTED)]
        await sleep_until_wall(rig.wall, at(12, 30))
        assert scheduler.statistics().armed == ()
    assert await rig.fires() == [(at(6), at(6), Outcome.INTERRUPTED)]
    assert any("never finished" in m for m in messages(caplog, logging.WARNING))
    assert not any("catching up" in m for m in messages(caplog))
    assert rig.agent.sessions() == ["chat-1"]
    assert wakeup.id in rig.agent.turns[0].text


async def test_wakeups_disabled(autojump_clock: Any) -> None:
    rig = Rig(wakeups=False)
    await rig.store.add_wakeup(_due_request(), T0 - timedelta(hours=1))
    async with rig.running():
        await sleep_until_wall(rig.wall, at(11, 30))
    assert rig.agent.sessions() == ["routine:hourly"]
    assert len(await rig.store.list_wakeups()) == 1


# -- wake-ups --------------------------------------------------------------------------------


def _due_request(**kwargs: Any) -> Any:
    from trio_routines.wakeups import WakeupRequest

    fields: dict[str, Any] = {"session": "chat-1", "prompt": "look again", "fire_at": T0}
    fields.update(kwargs)
    return WakeupRequest(**fields)


async def add_due(rig: Rig, **kwargs: Any) -> Any:
    """A wake-up that is due at T0 (added as if two minutes earlier)."""
    return await rig.store.add_wakeup(_due_request(**kwargs), T0 - timedelta(minutes=2))


ENVELOPE = re.compile(
    r"^\[wake-up [0-9a-f-]{36} fired — YOUR self-scheduled turn, not a user message\] look again$"
)


async def test_due_one_shot_fires_at_start_and_leaves_the_store(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(Routine(name="m", prompt="p"), agent=ScriptedAgent(Complete(reply="HIDDEN")))
    wakeup = await add_due(rig)
    async with rig.running():
        await trio.sleep(1)
    (turn,) = rig.agent.turns
    assert turn.session == "chat-1"
    assert ENVELOPE.match(turn.text)
    assert turn.started_at == pytest.approx(turn.started_at)  # at start, not after a poll
    assert turn.wall == T0
    assert await rig.store.list_wakeups() == []
    assert f"wake {wakeup.id[:8]} completed (0ms)" in messages(caplog)
    assert not [m for m in messages(caplog) if "HIDDEN" in m]


async def test_wake_up_fires_within_a_poll_of_its_time(autojump_clock: Any) -> None:
    rig = Rig(Routine(name="m", prompt="p"))
    await rig.store.add_wakeup(_due_request(fire_at=T0 + timedelta(minutes=5)), T0)
    async with rig.running():
        await sleep_until_wall(rig.wall, T0 + timedelta(minutes=10))
    (turn,) = rig.agent.turns
    assert T0 + timedelta(minutes=5) <= turn.wall <= T0 + timedelta(minutes=5, seconds=30)


async def test_busy_one_shot_is_deferred(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    agent = ScriptedAgent()
    agent.script(Busy(), session="chat-1")
    rig = Rig(Routine(name="m", prompt="p"), agent=agent)
    wakeup = await add_due(rig)
    async with rig.running():
        await trio.sleep(1)
        (pending,) = await rig.store.list_wakeups()
        assert (pending.id, pending.attempts) == (wakeup.id, 1)
        assert pending.fire_at == T0 + timedelta(seconds=30)
        assert (
            f"wake {wakeup.id[:8]}: session busy — retrying each poll, up to 120 times "
            "(logged at DEBUG)" in messages(caplog)
        )
        await trio.sleep(31)
    assert len(agent.turns) == 2
    assert await rig.store.list_wakeups() == []


async def test_a_busy_one_shot_under_a_short_poll_outlasts_a_long_turn_of_its_session(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Its retries are counted: a poll apart at 0.05 s, it was dropped after 6 s of a turn.
    agent = ScriptedAgent()
    agent.script(Complete(duration=60), session="routine:m")
    rig = Rig(Routine(name="m", prompt="p"), agent=agent, poll_interval=0.05)
    wakeup = await add_due(rig, session="routine:m", fire_at=T0 + timedelta(seconds=5))
    async with rig.running() as scheduler, trio.open_nursery() as nursery:
        nursery.start_soon(scheduler.run_now, "m")  # the session's turn, 60 s long
        await trio.sleep(100)
    assert [t.session for t in agent.turns] == ["routine:m", "routine:m"]  # the turn, then it
    assert not [m for m in messages(caplog) if "dropped" in m]
    assert (
        f"wake {wakeup.id[:8]}: session busy — retrying each poll at first, every 30s at the "
        "most, up to 120 times (logged at DEBUG)" in messages(caplog)
    )


@pytest.mark.parametrize(("poll", "waits"), [(0.05, [0.05, 0.1, 0.2]), (1.0, [1.0, 2.0, 4.0])])
def test_a_busy_one_shots_retries_back_off_to_the_default_poll(
    poll: float, waits: list[float]
) -> None:
    parts = Rig(Routine(name="m", prompt="p"), poll_interval=poll).scheduler._parts
    later = [
        parts.wake._retry_after(Wakeup(id="w", session="s", prompt="p", fire_at=T0, attempts=n))
        for n in (None, 1, 2, 5, 9, 119)
    ]
    assert later[:3] == waits
    assert later[-1] == 30.0
    assert all(a <= b <= 30.0 for a, b in pairwise(later))
    default = Rig(Routine(name="m", prompt="p"), poll_interval=45).scheduler._parts.wake
    assert default._retry_after(Wakeup(id="w", session="s", prompt="p", fire_at=T0)) == 45


def busy_for(turns: int) -> Rig:
    """A scheduler whose agent answers busy to the first ``turns`` turns of ``chat-1``."""
    agent = ScriptedAgent()
    for _ in range(turns):
        agent.script(Busy(), session="chat-1")
    return Rig(Routine(name="m", prompt="p"), agent=agent)


async def test_a_one_shot_retried_while_its_session_stays_busy_says_so_once(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # A turn that runs for an hour would otherwise log three lines every poll.
    caplog.set_level(logging.DEBUG, "trio_routines")
    rig = busy_for(3)
    wakeup = await add_due(rig)
    label = f"wake {wakeup.id[:8]}"
    async with rig.running():
        await trio.sleep(100)  # busy at 0, 30 and 60 s; run at 90
    assert len(rig.agent.turns) == 4
    lines = [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.name == "trio_routines" and r.getMessage().startswith(label)
    ]
    busy = [
        ("INFO", f"{label} firing (session=chat-1)"),
        ("INFO", f"{label}: occurrence skipped (session busy) (0ms)"),
        ("INFO", f"{label}: session busy — retrying each poll, up to 120 times (logged at DEBUG)"),
    ]
    for attempt in (1, 2):
        busy += [
            ("DEBUG", f"{label} firing (session=chat-1)"),
            ("DEBUG", f"{label}: occurrence skipped (session busy) (0ms)"),
            ("DEBUG", f"{label}: session busy — retry {attempt}, next poll"),
        ]
    assert lines == [
        *busy,
        ("DEBUG", f"{label} firing (session=chat-1)"),  # the retry that runs: its end says so
        ("INFO", f"{label} completed (0ms)"),
    ]


def _said_of(caplog: pytest.LogCaptureFixture, label: str) -> list[tuple[str, str]]:
    """The lines a wake-up's deferrals made, with their levels."""
    return [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.name == "trio_routines" and r.getMessage().startswith(f"{label}: session busy")
    ]


async def test_a_one_shot_deferred_before_a_restart_says_so_once_after_it(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rig = busy_for(4)
    wakeup = await add_due(rig)
    label = f"wake {wakeup.id[:8]}"
    async with rig.running():
        await trio.sleep(40)  # busy at 0 and 30 s
    caplog.clear()
    restarted = Rig(Routine(name="m", prompt="p"), store=rig.store, agent=rig.agent, wall=rig.wall)
    async with restarted.running():
        await trio.sleep(75)  # busy at the polls 30 and 60 s after the restart
    assert _said_of(caplog, label) == [
        (
            "INFO",
            f"{label}: session busy — retrying each poll, up to 120 times (retry 2 now) "
            "(logged at DEBUG)",
        ),
        ("DEBUG", f"{label}: session busy — retry 3, next poll"),
    ]


async def test_the_one_shots_said_to_be_retried_are_kept_to_a_bound(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One said per wake-up; past the bound the earliest said is forgotten (it may be retried
    # on another replica for good) and says so again at its next deferral here.
    monkeypatch.setattr(wake_module, "SAID_KEPT", 1)
    alone = busy_for(2)
    only = await add_due(alone)
    async with alone.running():
        await trio.sleep(40)  # busy at 0 and 30 s: at the bound, still said
    assert [level for level, _ in _said_of(caplog, f"wake {only.id[:8]}")] == ["INFO", "DEBUG"]
    rig = busy_for(4)
    first = await add_due(rig)
    second = await add_due(rig, prompt="another")
    async with rig.running():
        await trio.sleep(40)  # both busy at 0 and 30 s
    levels = [[level for level, _ in _said_of(caplog, f"wake {w.id[:8]}")] for w in (first, second)]
    assert levels == [["INFO", "INFO"], ["INFO", "INFO"]]


async def test_failed_one_shot_is_dropped(autojump_clock: Any) -> None:
    rig = Rig(Routine(name="m", prompt="p"), agent=ScriptedAgent(Fail("429 retry later")))
    await add_due(rig)
    async with rig.running():
        await trio.sleep(120)
    assert len(rig.agent.turns) == 1
    assert await rig.store.list_wakeups() == []


async def test_recurring_wake_up_fires_and_advances(autojump_clock: Any) -> None:
    rig = Rig(Routine(name="m", prompt="p"))
    wakeup = await rig.store.add_wakeup(
        _due_request(cron="0 9 * * *", tz="Europe/Berlin", fire_at=None), at(8, day=6)
    )
    assert wakeup.fire_at == at(7)  # 09:00 Berlin in summer
    async with rig.running():
        await trio.sleep(1)
    (turn,) = rig.agent.turns
    assert turn.text == (
        f"[wake-up {wakeup.id} fired — YOUR recurring self-scheduled turn "
        f'(cron "0 9 * * *" Europe/Berlin), not a user message; '
        f'unwake({{ id: "{wakeup.id}" }}) stops it] look again'
    )
    (pending,) = await rig.store.list_wakeups()
    assert pending.fire_at == at(7, day=8)


async def test_busy_recurring_occurrence_is_skipped(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(Routine(name="m", prompt="p"), agent=ScriptedAgent(Busy()))
    wakeup = await rig.store.add_wakeup(_due_request(cron="0 9 * * *", fire_at=None), at(6, day=6))
    async with rig.running():
        await trio.sleep(1)
    assert f"wake {wakeup.id[:8]}: next fires per cron" in messages(caplog, logging.INFO)
    assert messages(caplog, logging.ERROR) == []
    (pending,) = await rig.store.list_wakeups()
    assert pending.fire_at == at(9, day=8)


async def test_busy_one_shot_at_the_ceiling_is_dropped(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import attrs

    rig = Rig(Routine(name="m", prompt="p"), agent=ScriptedAgent(Busy()))
    wakeup = await add_due(rig)
    rig.store.wakeups = [attrs.evolve(wakeup, attempts=120)]
    async with rig.running():
        await trio.sleep(1)
    assert (
        f"wake {wakeup.id[:8]}: dropped after too many retries "
        "(its session busy, or at its rate limit)" in messages(caplog, logging.ERROR)
    )
    assert await rig.store.list_wakeups() == []


@pytest.mark.parametrize("busy_first", [False, True])
async def test_raising_iterator_is_terminal(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture, busy_first: bool
) -> None:
    class Agent:
        calls = 0

        async def invoke(self, session: str, text: str) -> AsyncIterator[Any]:
            from trio_routines import Failed

            Agent.calls += 1
            if busy_first:
                yield Failed("busy", "session_busy")
            error = RuntimeError("the stream broke")
            error.__cause__ = ValueError("NESTED-CAUSE-DATA")
            raise error

    rig = Rig(Routine(name="m", prompt="p"))
    rig.scheduler.agent.agent = Agent()
    await add_due(rig)
    async with rig.running():
        await trio.sleep(60)
    assert Agent.calls == 1
    assert await rig.store.list_wakeups() == []
    errors = messages(caplog, logging.ERROR)
    assert any("the stream broke" in m for m in errors)
    assert not [m for m in messages(caplog) if "NESTED-CAUSE-DATA" in m]


async def test_a_failed_deferral_holds_that_wake_up_and_the_others_run(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    agent = ScriptedAgent()
    agent.script(Busy(), session="chat-1")
    rig = Rig(Routine(name="m", prompt="p"), agent=agent)
    held = await add_due(rig)
    rig.store.faults["defer_wakeup"] = StateFault("EISDIR: wakeups.json.tmp")
    async with rig.running() as scheduler:
        await trio.sleep(1)
        assert any(
            m.startswith(f"wake {held.id[:8]}: session busy, and not put back yet")
            and "EISDIR" in m
            for m in messages(caplog, logging.WARNING)
        )
        assert scheduler.statistics().in_flight == 0
        assert await rig.store.list_wakeups() == []  # taken: held here, offered each poll
        await rig.store.add_wakeup(_due_request(session="chat-2"), T0 - timedelta(minutes=2))
        await trio.sleep(31)
    assert agent.sessions() == ["chat-1", "chat-2"]
    # The store never took it back: named whole at the stop, to be added again.
    assert messages(caplog, logging.ERROR)[-1].startswith(
        f"wake {held.id[:8]}: lost: its turn never began, and the store did not take it back"
    )


async def test_a_wake_loop_that_breaks_is_restarted_with_a_doubling_back_off(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(Routine(name="m", prompt="p"), poll_interval=3600)
    rig.store.fail("take_due_wakeup", ValueError("broken"))  # every poll raises
    async with rig.running() as scheduler:
        await trio.sleep(1 + 2 + 4 + 8 + 16 + 32 + 64 + 128 + 256 + 300 + 300 + 0.5)
        assert scheduler.statistics().loop_restarts == {"wake": 12}
    errors = messages(caplog, logging.ERROR)
    assert all(m.startswith("wake-up poll: stopped unexpectedly: ValueError:") for m in errors)
    assert [m.rsplit(" — restarting in ", 1)[1] for m in errors] == [
        "1s (restart 1)",
        "2s (restart 2)",
        "4s (restart 3)",
        "8s (restart 4)",
        "16s (restart 5)",
        "32s (restart 6)",
        "1m 4s (restart 7)",
        "2m 8s (restart 8)",
        "4m 16s (restart 9)",
        "5m (restart 10)",
        "5m (restart 11)",
        "5m (restart 12)",
    ]
    assert 'trio_routines_loop_restarts_total{loop="wake"} 12' in rig.scheduler.render_metrics()


# -- stopping ----------------------------------------------------------------------------------


class RecordingStore:
    """A MemoryStore that notes the name of every call made to it."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        if not callable(found):
            return found

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return found(*args, **kwargs)

        return call


async def test_a_second_run_is_refused_before_it_touches_the_store(autojump_clock: Any) -> None:
    store = RecordingStore()
    await store.inner.claim("hourly", at(10), at(10))  # an open claim a second boot would settle
    rig = Rig(store=store)
    async with rig.running():
        pass  # booted, then stopped
    assert "latest_fire" in store.calls  # the first run did read the store
    await store.inner.claim("hourly", at(11), at(11))
    store.calls.clear()
    async with trio.open_nursery() as nursery:
        with pytest.raises(Stopping, match="has already run: a Scheduler runs once"):
            await nursery.start(rig.scheduler.run)
    assert store.calls == []
    newest = await store.inner.latest_fire("hourly")
    assert newest is not None
    assert newest.outcome is None  # not reconciled


async def test_run_is_refused_while_running_and_after_a_stop_before_running(
    autojump_clock: Any,
) -> None:
    rig = Rig()
    async with rig.running():
        with pytest.raises(Stopping, match="has already run"):
            await rig.scheduler.run()
        assert rig.scheduler.statistics().armed == ("hourly",)  # the first run is unharmed
    store = RecordingStore()
    stopped = Rig(store=store)
    stopped.scheduler.stop()
    with pytest.raises(Stopping, match="was stopped: a Scheduler runs once"):
        await stopped.scheduler.run()
    assert store.calls == []


async def test_idle_waiting_is_not_in_flight_and_stop_ends_fires(autojump_clock: Any) -> None:
    rig = Rig()
    async with rig.running() as scheduler:
        await trio.sleep(60)
        assert scheduler.statistics().in_flight == 0
        scheduler.stop()
    await trio.sleep(10 * 3600)
    assert rig.agent.turns == []


async def test_stop_from_inside_a_turn_settles_that_fire(autojump_clock: Any) -> None:
    a = Routine(name="a", prompt="p", cron="0 * * * *")
    b = Routine(name="b", prompt="p", cron="5 * * * *")
    agent = ScriptedAgent(Complete(duration=3))
    rig = Rig(a, b, agent=agent)
    agent.on_turn = lambda turn: rig.scheduler.stop()
    async with trio.open_nursery() as nursery:
        await nursery.start(rig.scheduler.run)
    assert agent.sessions() == ["routine:a"]
    assert [(f.slot, f.outcome, f.ms) for f in await rig.store.history("a")] == [
        (at(11), Outcome.COMPLETED, 3000)
    ]
    assert await rig.store.history("b") == []


async def test_stop_gives_the_grace_then_interrupts(autojump_clock: Any) -> None:
    agent = ScriptedAgent(Hang())
    rig = Rig(agent=agent)
    async with trio.open_nursery() as nursery:
        await nursery.start(rig.scheduler.run)
        await sleep_until_wall(rig.wall, at(11, 0, 0) + timedelta(seconds=20))
        assert rig.scheduler.statistics().in_flight == 1
        stopped_at = trio.current_time()
        rig.scheduler.stop(grace=7)
    assert trio.current_time() - stopped_at == pytest.approx(7)
    (fire,) = await rig.store.history("hourly")
    assert (fire.outcome, fire.ms) == (Outcome.INTERRUPTED, 27000)
    assert fire.error == "interrupted by stop"


async def test_turn_within_the_grace_completes(autojump_clock: Any) -> None:
    rig = Rig(agent=ScriptedAgent(Complete(duration=40)))
    async with trio.open_nursery() as nursery:
        await nursery.start(rig.scheduler.run)
        await sleep_until_wall(rig.wall, at(11, 0, 10))
        rig.scheduler.stop(grace=60)
    (fire,) = await rig.store.history("hourly")
    assert (fire.outcome, fire.ms) == (Outcome.COMPLETED, 40000)


async def test_cancelling_the_host_scope_is_bounded_too(autojump_clock: Any) -> None:
    rig = Rig(agent=ScriptedAgent(Hang()), default_grace=3)
    with trio.move_on_after(30.5 * 60):  # until 11:00:30, half a minute into the turn
        await rig.scheduler.run()
    (fire,) = await rig.store.history("hourly")
    assert (fire.outcome, fire.ms) == (Outcome.INTERRUPTED, 33000)


async def test_a_caller_that_gives_up_on_its_fire_leaves_the_turn_the_grace(
    autojump_clock: Any,
) -> None:
    rig = Rig(agent=ScriptedAgent(Hang()), default_grace=3)
    began = trio.current_time()
    with trio.move_on_after(10) as waited:
        await rig.scheduler.fire("hourly", at(9))
    assert waited.cancelled_caught
    assert trio.current_time() - began == pytest.approx(13)
    (fire,) = await rig.store.history("hourly")
    assert (fire.outcome, fire.ms, fire.error) == (
        Outcome.INTERRUPTED,
        13000,
        "interrupted: its caller gave up",
    )


async def test_a_caller_that_gives_up_with_no_grace_ends_its_turn_at_once(
    autojump_clock: Any,
) -> None:
    rig = Rig(agent=ScriptedAgent(Hang()), default_grace=0)
    with trio.move_on_after(10):
        await rig.scheduler.fire("hourly", at(9))
    assert trio.current_time() == pytest.approx(10)
    (fire,) = await rig.store.history("hourly")
    assert (fire.outcome, fire.error) == (Outcome.INTERRUPTED, "interrupted: its caller gave up")


class StartsAnotherRun:
    """A turn of ``od`` starts one of ``bg`` from within itself and completes 2 s later; a
    turn of ``bg`` takes 20 s."""

    def __init__(self) -> None:
        self.scheduler: Scheduler | None = None
        self.ended: list[tuple[str, float, str]] = []

    async def invoke(self, session: str, text: str) -> AsyncIterator[Any]:
        began = trio.current_time()
        try:
            if session == "routine:od":
                assert self.scheduler is not None
                assert await self.scheduler.start_run("bg")
                await trio.sleep(2)
            else:
                await trio.sleep(20)
            yield Completed()
        finally:
            self.ended.append((session, trio.current_time() - began, "done"))


async def test_a_turn_started_from_within_a_callers_run_is_not_bound_by_that_caller(
    autojump_clock: Any,
) -> None:
    # The call's bound is its own turn's: a run the agent starts meanwhile (its context
    # copied from the call's) is not held to it. The caller gives up at 1 s: od has until
    # 4 s and completes at 2 s; bg was cut at 4 s, or at the call's end + the grace.
    agent = StartsAnotherRun()
    store = MemoryStore()
    scheduler = Scheduler(
        agent=agent,
        store=store,
        routines=[Routine(name="od", prompt="p"), Routine(name="bg", prompt="q")],
        now=WallClock(T0),
        default_grace=3,
    )
    agent.scheduler = scheduler
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        with trio.move_on_after(1):
            await scheduler.run_now("od")
        await trio.sleep(60)
        scheduler.stop()
    assert [(s, round(took)) for s, took, _ in agent.ended] == [
        ("routine:od", 2),
        ("routine:bg", 20),
    ]


async def test_a_cancelled_caller_hears_a_bare_cancel(autojump_clock: Any) -> None:
    # As from any Trio call: `except trio.Cancelled` catches it (not an exception group).
    rig = Rig(agent=ScriptedAgent(Complete(duration=5)), default_grace=10)
    caught: list[BaseException] = []
    with trio.CancelScope() as scope:
        scope.deadline = trio.current_time() + 2
        try:
            await rig.scheduler.fire("hourly", at(9))
        except trio.Cancelled as exc:
            caught.append(exc)
            raise
    assert len(caught) == 1
    (fire,) = await rig.store.history("hourly")
    assert fire.outcome is Outcome.COMPLETED


async def test_a_turn_ending_within_the_callers_grace_completes(autojump_clock: Any) -> None:
    rig = Rig(agent=ScriptedAgent(Complete(duration=5)), default_grace=10)
    with trio.move_on_after(2) as waited:
        await rig.scheduler.fire("hourly", at(9))
    assert waited.cancelled_caught
    assert trio.current_time() == pytest.approx(5)
    (fire,) = await rig.store.history("hourly")
    assert (fire.outcome, fire.ms, fire.error) == (Outcome.COMPLETED, 5000, None)


async def test_a_caller_that_gives_up_on_its_run_leaves_the_turn_the_grace(
    autojump_clock: Any,
) -> None:
    agent = ScriptedAgent(Hang())
    rig = Rig(Routine(name="od", prompt="p"), agent=agent, default_grace=4)
    with trio.move_on_after(1):
        await rig.scheduler.run_now("od")
    assert trio.current_time() == pytest.approx(5)
    assert rig.scheduler.statistics().in_flight == 0


@pytest.mark.parametrize(
    ("stop_grace", "error"),
    [(2.5, "interrupted by stop"), (30, "interrupted: its caller gave up")],
    ids=["stop-as-near", "caller-first"],
)
async def test_the_nearer_of_a_stop_and_a_callers_bound_is_why_its_turn_ended(
    autojump_clock: Any, stop_grace: float, error: str
) -> None:
    # The caller gives up at 2 s (its turn has until 5 s), a stop comes at 3 s: with 2.5 s
    # of grace its deadline (5.5 s) is as near, and the stop is named; with 30 s the caller's.
    rig = Rig(agent=ScriptedAgent(Hang()), default_grace=3)
    async with trio.open_nursery() as nursery:
        await nursery.start(rig.scheduler.run)
        with trio.move_on_after(2):
            nursery.start_soon(_stop_at, rig.scheduler, 3, stop_grace)
            await rig.scheduler.fire("hourly", at(9))
    (fire,) = await rig.store.history("hourly")
    assert (fire.outcome, fire.ms, fire.error) == (Outcome.INTERRUPTED, 5000, error)


async def _stop_at(scheduler: Scheduler, when: float, grace: float) -> None:
    await trio.sleep_until(when)
    scheduler.stop(grace)


async def test_a_host_cancel_right_after_the_start_is_a_stop(autojump_clock: Any) -> None:
    # Cancelled before the loops took their first step: the run still ends as a stop does.
    rig = Rig(HOURLY, Routine(name="od", prompt="p"))
    async with trio.open_nursery() as nursery:
        await nursery.start(rig.scheduler.run)
        nursery.cancel_scope.cancel()
    assert rig.scheduler.statistics().stopping
    with trio.fail_after(1):
        await rig.scheduler.wait_drained()
    with pytest.raises(Stopping):
        await rig.scheduler.start_run("od")
    with pytest.raises(Stopping):
        await rig.scheduler.fire("hourly", at(9))
    assert await rig.store.history("hourly") == []


async def test_routine_timeout_fails_the_turn(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(
        Routine(name="hourly", prompt="p", cron="0 * * * *", timeout=90),
        agent=ScriptedAgent(Hang()),
    )
    result = await rig.scheduler.fire("hourly", at(9))
    assert (result.outcome, result.ms, result.failed) == (
        Outcome.FAILED,
        90000,
        "timed out after 90s",
    )
    assert "hourly failed (90000ms): timed out after 90s" in messages(caplog, logging.ERROR)
    (fire,) = await rig.store.history("hourly")
    assert fire.error == "timed out after 90s"


# -- clocks ----------------------------------------------------------------------------------


async def test_backward_jump_never_fires_early(autojump_clock: Any) -> None:
    rig = Rig()
    async with rig.running():
        await sleep_until_wall(rig.wall, at(10, 50))
        rig.wall.jump(-timedelta(hours=2))  # now 08:50 again
        await trio.sleep(3 * 3600)  # until 11:50 on the wall
    assert [t.wall for t in rig.agent.turns] == [at(11)]
    assert await rig.fires() == [(at(11), at(11), Outcome.COMPLETED)]


async def test_forward_jump_past_the_slot_fires_once(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(Routine(name="daily", prompt="p", cron="0 9 * * *"))
    async with rig.running() as scheduler:
        await trio.sleep(3600)
        rig.wall.jump(timedelta(days=3))
        await trio.sleep(6 * 3600)  # the capped wait notices within six hours
        assert scheduler.statistics().clock_jumps == 1
    fires = await rig.store.history("daily")
    assert [f.slot for f in fires] == [at(9, day=8)]
    assert fires[0].fired_at > at(9, day=10)
    jumps = [m for m in messages(caplog, logging.WARNING) if m.startswith("the wall clock jumped")]
    assert jumps == ["the wall clock jumped forward by 3d — slots are re-read from the new time"]


async def test_a_clock_set_back_after_it_ran_ahead_is_said_as_a_boot_says_it(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Ahead by two hours, the loop caught up its slot (stamped two hours ahead); set back,
    # that claim holds the slots before its stamp back, as a boot would find it: said once
    # and named in future_claims, not a silent wait for the next slot after it.
    rig = Rig()
    async with rig.running() as scheduler:
        await sleep_until_wall(rig.wall, at(10, 50))
        rig.wall.jump(timedelta(hours=2))  # 12:50: the 11:00 slot caught up
        await trio.sleep(60)  # (noticed within a poll)
        assert [f[0] for f in await rig.fires()] == [at(11)]
        assert scheduler.statistics().future_claims == {}
        rig.wall.jump(-timedelta(hours=2))  # 10:51 again
        await trio.sleep(60)
        stats = scheduler.statistics()
        assert stats.future_claims == {"hourly": at(11)}
        assert stats.next_due["hourly"] == at(13)  # the first slot after the claim's stamp
        said = [m for m in messages(caplog, logging.WARNING) if "in the future" in m]
        assert len(said) == 1
        assert said[0].startswith("hourly: newest claim is in the future (slot 2026-07-07T11:00")
        await sleep_until_wall(rig.wall, at(13, 10))
        assert scheduler.statistics().future_claims == {}
    assert [f[0] for f in await rig.fires()] == [at(11), at(13)]


class GatedReads(MemoryStore):
    """A memory store whose newest-claim reads wait for ``gate`` while it is closed."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: trio.Event | None = None
        self.reads: list[str] = []
        self.broken: Exception | None = None

    async def latest_fire(self, routine: str) -> Any:
        self.reads.append(routine)
        if self.gate is not None:
            await self.gate.wait()
        if self.broken is not None:
            raise self.broken
        return await super().latest_fire(routine)


async def test_a_jump_back_reads_the_newest_claims_once_more_if_another_comes_meanwhile(
    autojump_clock: Any,
) -> None:
    # One read of each routine per jump back (not one per woken loop), a second read after a
    # second jump that came during the first; a routine removed meanwhile is not named.
    store = GatedReads()
    other = Routine(name="other", prompt="p", cron="30 * * * *")
    rig = Rig(HOURLY, other, store=store, poll_interval=1)  # a jump seen within a second
    async with rig.running() as scheduler:
        await sleep_until_wall(rig.wall, at(10, 50))
        rig.wall.jump(timedelta(hours=2))  # 12:50: 11:00 caught up, stamped 12:50
        await trio.sleep(60)
        store.reads.clear()
        store.gate = trio.Event()
        rig.wall.jump(-timedelta(hours=2))
        await trio.sleep(5)  # the read waits (within the store's timeout)
        assert sorted(store.reads) == ["hourly", "other"]
        rig.wall.jump(-timedelta(minutes=10))  # another, while the first is read
        scheduler.update_routines([HOURLY])  # and "other" removed
        await trio.sleep(5)
        assert sorted(store.reads) == ["hourly", "other"]  # read again only after
        store.gate.set()
        await trio.sleep(5)
        assert sorted(store.reads) == ["hourly", "hourly", "other"]
        assert scheduler.statistics().future_claims == {"hourly": at(11)}
        assert "other" not in scheduler.statistics().future_claims
        store.reads.clear()
        rig.wall.jump(-timedelta(minutes=10))  # a later jump back is read as the first
        await trio.sleep(5)
        assert store.reads == ["hourly"]


async def test_a_store_fault_reading_the_claims_after_a_jump_back_is_said_and_passed(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = GatedReads()
    rig = Rig(store=store)
    async with rig.running() as scheduler:
        await sleep_until_wall(rig.wall, at(10, 50))
        store.broken = ValueError("a row no version wrote")
        rig.wall.jump(-timedelta(minutes=20))
        await trio.sleep(60)
        store.broken = None
        await sleep_until_wall(rig.wall, at(11, 10))
        assert scheduler.statistics().future_claims == {}
    assert (
        "could not read the newest claims of 1 routine(s) after the clock went back: a row no "
        "version wrote" in messages(caplog, logging.WARNING)
    )
    assert [f[0] for f in await rig.fires()] == [at(11)]  # the scheduler ran on


async def test_a_jump_is_logged_once_however_many_loops_see_it(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    routines = [Routine(name=f"r{i}", prompt="p", cron="*/5 * * * *") for i in range(5)]
    rig = Rig(*routines)
    async with rig.running() as scheduler:
        await trio.sleep(60)
        rig.wall.jump(-timedelta(minutes=30))
        await trio.sleep(600)
        assert scheduler.statistics().clock_jumps == 1
    assert [m for m in messages(caplog) if "jumped" in m] == [
        "the wall clock jumped backward by 30m — slots are re-read from the new time"
    ]


async def test_statistics(autojump_clock: Any) -> None:
    rig = Rig(
        HOURLY,
        Routine(name="manual", prompt="p"),
        agent=ScriptedAgent(Complete(duration=5)),
    )
    async with rig.running() as scheduler:
        stats = scheduler.statistics()
        assert stats.armed == ("hourly",)
        assert stats.next_due == {"hourly": at(11)}
        await sleep_until_wall(rig.wall, at(11, 0, 1))
        assert scheduler.statistics().in_flight == 1
        await sleep_until_wall(rig.wall, at(11, 1))
        stats = scheduler.statistics()
        assert (stats.in_flight, stats.outcomes, stats.next_due["hourly"]) == (
            0,
            {"completed": 1},
            at(12),
        )
        with pytest.raises(TypeError):
            stats.outcomes["completed"] = 5  # type: ignore[index]


async def test_agent_yielding_garbage_does_not_break_the_scheduler(autojump_clock: Any) -> None:
    class Garbage:
        async def invoke(self, session: str, text: str) -> AsyncIterator[Any]:
            yield 42
            yield None
            yield {"type": "completed"}

    rig = Rig()
    rig.scheduler.agent.agent = Garbage()
    async with rig.running():
        await sleep_until_wall(rig.wall, at(12, 30))
    assert [f[2] for f in await rig.fires()] == [Outcome.COMPLETED, Outcome.COMPLETED]


async def test_boot_reads_every_newest_claim_and_reports_the_first_fault(
    autojump_clock: Any,
) -> None:
    class Flaky(MemoryStore):
        async def latest_fire(self, routine: str) -> Any:
            if routine in ("b", "c"):
                raise StateFault(f"claims of {routine} unreadable")
            return await super().latest_fire(routine)

    rig = Rig(*[Routine(name=n, prompt="p", cron="0 * * * *") for n in "abc"], store=Flaky())
    with pytest.raises(StateFault, match="claims of b unreadable"):
        await rig.scheduler.run()
    assert rig.agent.turns == []


async def test_an_agent_refusing_in_invoke_itself_fails_the_turn(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    class Refusing:
        def invoke(self, session: str, text: str) -> AsyncIterator[Any]:
            raise RuntimeError("model not configured")

    rig = Rig()
    rig.scheduler.agent.agent = Refusing()
    result = await rig.scheduler.fire("hourly", at(9))
    assert (result.outcome, result.failed) == (Outcome.FAILED, "model not configured")
    assert await rig.fires() == [(at(9), T0, Outcome.FAILED)]
    await add_due(rig)
    async with rig.running():  # neither the cron loop nor the wake loop dies of it
        await sleep_until_wall(rig.wall, at(11, 30))
    assert [f[2] for f in await rig.fires()] == [Outcome.FAILED, Outcome.FAILED]
    assert await rig.store.list_wakeups() == []
    assert not [m for m in messages(caplog) if "stopped unexpectedly" in m]


async def test_a_fire_is_in_flight_from_claim_to_settle(autojump_clock: Any) -> None:
    seen: list[int] = []

    class Watching(MemoryStore):
        async def claim(self, routine: str, slot: datetime, fired_at: datetime) -> Any:
            seen.append(rig.scheduler.statistics().in_flight)
            return await super().claim(routine, slot, fired_at)

        async def settle(
            self, routine: str, slot: datetime, outcome: Any, ms: Any = None, **kw: Any
        ) -> bool:
            seen.append(rig.scheduler.statistics().in_flight)
            return await super().settle(routine, slot, outcome, ms, **kw)

    rig = Rig(store=Watching())
    await rig.scheduler.fire("hourly", at(9))
    assert seen == [1, 1]
    assert rig.scheduler.statistics().in_flight == 0


@pytest.mark.parametrize("wakeups", [True, False])
async def test_a_forward_jump_is_noticed_within_a_poll_not_a_long_sleep(
    autojump_clock: Any, wakeups: bool
) -> None:
    rig = Rig(Routine(name="daily", prompt="p", cron="0 9 * * *"), wakeups=wakeups)
    async with rig.running():
        await trio.sleep(3600)  # the loop sleeps towards tomorrow 09:00, up to 6 h at a time
        rig.wall.jump(timedelta(days=3))
        await trio.sleep(31)  # one poll
        fires = await rig.store.history("daily")
        assert [f.slot for f in fires] == [at(9, day=8)]
    assert len(rig.agent.turns) == 1


async def test_start_run_holds_the_session_before_it_answers(autojump_clock: Any) -> None:
    rig = Rig(Routine(name="manual", prompt="p"), agent=ScriptedAgent(Complete(duration=60)))
    async with rig.running() as scheduler:
        assert await scheduler.start_run("manual")  # started: the session is held now
        assert scheduler.statistics().in_flight == 1
        assert not await scheduler.start_run("manual")  # a second turn finds it busy
        assert len(rig.agent.turns) == 1
        await trio.sleep(61)
        assert rig.agent.finished
        assert await scheduler.start_run("manual")
    assert len(rig.agent.turns) == 2
    assert await rig.store.history("manual") == []  # no claim: no history


class SlowGaps(MemoryStore):
    """A store whose gap writes take four seconds."""

    async def record_gap(self, *args: Any, **kwargs: Any) -> Any:
        await trio.sleep(4)
        return await super().record_gap(*args, **kwargs)


async def test_after_a_late_wake_the_next_slot_fires_on_time_however_long_its_gap_took(
    autojump_clock: Any,
) -> None:
    routine = Routine(name="minutely", prompt="p", cron="* * * * *", catchup=0)
    rig = Rig(routine, store=SlowGaps())
    async with rig.running() as scheduler:
        await trio.sleep(10)  # 10:30:10, sleeping towards 10:31
        rig.wall.jump(timedelta(seconds=130))  # 10:32:20: 10:31 and 10:32 passed over
        await trio.sleep(60)
        assert scheduler.statistics().loop_restarts == {}  # the late wake broke nothing
    fires = await rig.store.history("minutely")
    assert [f.slot for f in fires][:1] == [T0 + timedelta(minutes=3)]
    assert fires[0].fired_at == T0 + timedelta(minutes=3)  # not 4 s late, after the gap
    # No catch-up window: what a late wake passed over was missed while down, in effect.
    assert await rig.store.gaps("minutely") == [Gap(at(10, 31), at(10, 32), 2, GapReason.DOWN)]


async def test_a_late_wake_accounts_for_the_slots_of_its_routines_zone_and_hash(
    autojump_clock: Any,
) -> None:
    # An hourly slot at a minute of the routine's hash, in a zone half an hour off UTC: the
    # slots a late wake passes over are that routine's very slots, and the next is on time.
    cron, tz = "H * * * *", "Asia/Kolkata"
    routine = Routine(name="hashed", prompt="p", cron=cron, tz=tz, catchup=60)
    first = next_run(cron, tz, T0, "hashed")
    assert first is not None
    third = first + timedelta(hours=2)
    rig = Rig(routine)
    async with rig.running() as scheduler:
        await trio.sleep(1)
        rig.wall.set(third + timedelta(minutes=10))  # three of its slots passed over
        await trio.sleep(60)  # the jump is seen, the loop wakes and plans the next slot
        assert scheduler.statistics().next_due == {"hashed": third + timedelta(hours=1)}
        await sleep_until_wall(rig.wall, third + timedelta(minutes=70))
        assert scheduler.statistics().loop_restarts == {}
    assert await rig.store.gaps("hashed") == [Gap(first, third, 3, GapReason.LATE)]
    fires = await rig.store.history("hashed")
    assert [(f.slot, f.fired_at) for f in fires] == [(third + timedelta(hours=1),) * 2]
