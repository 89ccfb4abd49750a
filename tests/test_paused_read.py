"""The paused routines' read on the fire path: one read for a herd, made at the slot by the
timer before it wakes the herd (scheduler/sleepers.py), and never a read begun before the slot.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import attrs
import pytest
import trio
from scheduler_rig import HOURLY, Recording, at, rig, until

from trio_routines import Routine, StateFault
from trio_routines.scheduler.calls import PREFETCH_LIMIT
from trio_routines.scheduler.sleepers import Sleepers
from trio_routines.scheduler.state import PausedRead
from trio_routines.testing import WallClock

NAMES = ("a", "b", "c", "d", "e")
HERD = tuple(Routine(name=name, prompt="p", cron="0 * * * *") for name in NAMES)


class TimedReads(Recording):
    """Notes the wall time of every paused-routine read; with ``hold`` set, a read answers
    what it found at once only after ``release`` (a store slow to answer)."""

    def __init__(self) -> None:
        super().__init__()
        self.wall: WallClock | None = None
        self.read_at: list[datetime] = []
        self.hold = False
        self.release = trio.Event()
        self.fail_next = False

    async def paused(self) -> frozenset[str]:
        assert self.wall is not None
        self.read_at.append(self.wall())
        names = await super().paused()
        if self.hold:
            self.hold = False
            await self.release.wait()
        return names


def timed_rig(*routines: Routine) -> tuple[Any, Any, TimedReads, WallClock]:
    store = TimedReads()
    scheduler, agent, _, wall = rig(*routines, store=store, wakeups=False, poll_interval=3600)
    store.wall = wall
    return scheduler, agent, store, wall


async def test_a_herd_shares_one_read_made_at_its_slot_and_honours_a_pause_before_it(
    autojump_clock: Any,
) -> None:
    scheduler, agent, store, wall = timed_rig(*HERD)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(10, 59))
        await store.set_paused("c", True)
        before = len(store.read_at)
        await until(wall, at(11, 20))  # before the clock watch's poll reads again
        reads = store.read_at[before:]
        scheduler.stop()
    assert reads == [at(11)]  # one read for the five, at the slot
    assert sorted(t.session.removeprefix("routine:") for t in agent.turns) == ["a", "b", "d", "e"]
    assert scheduler.statistics().outcomes["paused"] == 1


async def test_a_fire_takes_no_read_begun_before_its_slot(autojump_clock: Any) -> None:
    # A read under way since before the slot (here a statistics refresh's, slow to answer)
    # does not answer for the fire: a pause written after that read began, and before the
    # slot, is honoured.
    scheduler, agent, store, wall = timed_rig()
    calls = scheduler._parts.calls
    scheduler._parts.sleepers.prefetch = None  # the loop's fire itself meets the read
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(10, 59) + timedelta(seconds=59))
        store.hold = True
        nursery.start_soon(calls.refresh_paused)
        await trio.sleep(0.5)
        await store.set_paused("hourly", True)
        await until(wall, at(11) + timedelta(seconds=1))
        assert agent.turns == []  # the fire waits for the read under way...
        store.release.set()
        await until(wall, at(11, 20))  # before the clock watch's poll reads again
        reads = store.read_at[-2:]
        scheduler.stop()
    # ...and then reads again itself.
    assert reads == [at(10, 59) + timedelta(seconds=59), at(11) + timedelta(seconds=1)]
    assert agent.turns == []
    assert scheduler.statistics().outcomes == {"paused": 1}


async def test_a_herd_wakes_once_the_read_at_its_slot_is_back(autojump_clock: Any) -> None:
    scheduler, agent, store, wall = timed_rig(*HERD)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(10, 59))
        store.hold = True
        await until(wall, at(11) + timedelta(seconds=0.5))
        assert store.read_at[-1] == at(11)
        assert scheduler.statistics().in_flight == 0  # no fire woke to wait on it
        store.release.set()
        await trio.sleep(0.1)
        assert [t.wall for t in agent.turns] == [at(11) + timedelta(seconds=0.5)] * len(HERD)
        scheduler.stop()


async def test_a_fire_given_a_read_begun_before_its_slot_reads_again(autojump_clock: Any) -> None:
    scheduler, agent, store, wall = timed_rig()
    fire = scheduler._parts.fire
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(10, 45))
        await store.set_paused("hourly", True)
        slot = at(10)
        stale = PausedRead(frozenset(), slot - timedelta(milliseconds=1))
        result = await fire.fire_slot(HOURLY, slot, read=stale)
        assert (result.claimed, result.reason) == (False, "paused")
        assert store.read_at[-1] == at(10, 45)
        # A read begun at the slot is the fire's own: it claims on its word, reading nothing.
        reads = len(store.read_at)
        result = await fire.fire_slot(HOURLY, slot, read=PausedRead(frozenset(), slot))
        assert result.claimed
        assert len(store.read_at) == reads
        scheduler.stop()
    assert [t.session.removeprefix("routine:") for t in agent.turns] == ["hourly"]


async def test_a_read_that_fails_at_the_slot_leaves_the_timer_to_wake_the_herd(
    autojump_clock: Any, caplog: Any
) -> None:
    # The timer's read fails (a bug, or a store that does not answer): it still wakes the
    # loops, their fires read for themselves and meet the fault as before, and the next slot
    # fires.
    scheduler, agent, store, wall = timed_rig(*HERD[:2])
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(10, 59))
        store.fail("paused", StateFault("the disk is gone"), times=2)
        await until(wall, at(12, 20))
        reads = [when for when in store.read_at if at(10, 59) < when]
        scheduler.stop()
    # The timer's, then the fires' own (one, shared by both), then 12:00's timer read.
    assert [when for when in reads if when.minute == 0] == [at(11), at(11), at(12)]
    errors = sorted(r.getMessage() for r in caplog.records if r.levelname == "ERROR")
    assert errors == [
        f"{name}: fire failed (skipping this run, schedule stays armed): could not claim slot "
        f"2026-07-07T11:00:00.000Z of '{name}': the disk is gone"
        for name in ("a", "b")
    ]
    assert sorted(t.session for t in agent.turns) == ["routine:a", "routine:b"]
    assert all(t.wall == at(12) for t in agent.turns)


async def test_a_herd_whose_clock_goes_back_during_a_read_makes_no_read_after_read(
    autojump_clock: Any,
) -> None:
    # The fires met a read begun before their slot; while it was under way the wall clock
    # went back behind the slot. They do not each make a read of their own (one after the
    # other, every one begun before the slot by the clock's reading): the slot is not due,
    # so they sleep again, and fire once it is.
    # Nor do they take that read's word: "a" was paused when it began and resumed before the
    # slot, and runs.
    scheduler, agent, store, wall = timed_rig(*HERD)
    scheduler._parts.sleepers.prefetch = None  # the fires themselves meet the read
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(10, 59))
        await store.set_paused("a", True)
        await until(wall, at(10, 59) + timedelta(seconds=59))
        store.hold = True
        before = len(store.read_at)
        nursery.start_soon(scheduler._parts.calls.refresh_paused)
        await trio.sleep(0.5)
        await store.set_paused("a", False)
        await until(wall, at(11) + timedelta(seconds=0.5))
        wall.jump(timedelta(seconds=-30))
        store.release.set()
        await until(wall, at(10, 59) + timedelta(seconds=50))
        # The one read under way, and no read after read.
        assert store.read_at[before:] == [at(10, 59) + timedelta(seconds=59)]
        assert agent.turns == []
        await until(wall, at(11, 20))
        scheduler.stop()
    assert sorted(t.session for t in agent.turns) == [f"routine:{n}" for n in NAMES]
    assert all(t.wall is not None and t.wall >= at(11) for t in agent.turns)
    assert "paused" not in scheduler.statistics().outcomes  # nor counted as refused


async def test_a_routine_changed_while_its_slots_read_is_under_way_still_fires_that_slot(
    autojump_clock: Any,
) -> None:
    # The timer holds the loop at its slot while it reads the paused routines; a change that
    # comes then wakes the loop first. The slot had come: it fires, in the version it came in,
    # as a fire under way would have, and the new version fires the slots after it.
    scheduler, agent, store, wall = timed_rig()
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(10, 59))
        store.hold = True  # the timer's read at 11:00 is slow
        await until(wall, at(11) + timedelta(seconds=0.5))
        changed = attrs.evolve(HOURLY, prompt="Check the queue again.")
        scheduler.update_routines([changed])
        await trio.sleep(0.25)
        store.release.set()
        await until(wall, at(12, 30))
        scheduler.stop()
    # (It woke at the change, and joined the timer's read, begun at the slot.)
    assert [(t.text, t.wall) for t in agent.turns] == [
        (HOURLY.prompt, at(11) + timedelta(seconds=0.75)),
        (changed.prompt, at(12)),
    ]


async def test_a_routine_removed_before_its_slot_came_does_not_fire(autojump_clock: Any) -> None:
    scheduler, agent, _, wall = timed_rig()
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(10, 59))
        scheduler.update_routines([])
        await until(wall, at(12, 30))
        scheduler.stop()
    assert agent.turns == []


async def test_the_timer_does_not_wait_on_a_read_begun_before_the_slot(
    autojump_clock: Any,
) -> None:
    # A statistics refresh's read, under way since before the slot and slow: the timer wakes
    # the herd at once without a read of its own (each fire waits that read out and reads
    # again itself), and a loop due a second later is not held behind it.
    early = Routine(name="early", prompt="p", cron="0 11 * * *")
    later = Routine(name="later", prompt="p", cron="1 11 * * *")
    scheduler, agent, store, wall = timed_rig(early, later)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(10, 59) + timedelta(seconds=59))
        store.hold = True
        nursery.start_soon(scheduler._parts.calls.refresh_paused)
        await until(wall, at(11) + timedelta(seconds=0.5))
        assert scheduler.statistics().in_flight == 1  # awake, and waiting the read out
        store.release.set()
        await until(wall, at(11, 30))
        scheduler.stop()
    assert [(t.session, t.wall) for t in agent.turns] == [
        ("routine:early", at(11) + timedelta(seconds=0.5)),
        ("routine:later", at(11, 1)),
    ]


async def test_a_failed_read_begun_before_the_slot_is_not_the_fires_fault(
    autojump_clock: Any, caplog: Any
) -> None:
    # That read failed, and the wall clock went back behind the slot while it was under way:
    # its fault belongs to whoever made it, not to the fires of a slot that is not due yet.
    class FailingLate(TimedReads):
        async def paused(self) -> frozenset[str]:
            names = await super().paused()
            if self.fail_next:
                self.fail_next = False
                raise StateFault("the disk hiccupped")
            return names

    store = FailingLate()
    scheduler, agent, _, wall = rig(*HERD, store=store, wakeups=False, poll_interval=3600)
    store.wall = wall
    scheduler._parts.sleepers.prefetch = None  # the fires themselves meet the read
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(10, 59) + timedelta(seconds=59))
        store.hold = store.fail_next = True
        nursery.start_soon(scheduler._parts.calls.refresh_paused)
        await until(wall, at(11) + timedelta(seconds=0.5))
        wall.jump(timedelta(seconds=-30))
        store.release.set()
        await until(wall, at(11, 20))
        scheduler.stop()
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    assert sorted(t.session for t in agent.turns) == [f"routine:{n}" for n in NAMES]


async def test_the_timer_gives_up_a_slow_read_and_wakes_the_herd(autojump_clock: Any) -> None:
    # A store slower than the limit does not hold the herd (nor any other loop's wake): the
    # timer gives its read up, and each fire reads for itself.
    scheduler, agent, store, wall = timed_rig(*HERD[:2])
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(10, 59))
        before = len(store.read_at)
        store.hold = True  # the timer's read hangs
        await until(wall, at(11, 20))
        reads = store.read_at[before:]
        scheduler.stop()
    late = at(11) + timedelta(seconds=PREFETCH_LIMIT)
    assert reads == [at(11), late]  # the timer's, then the fires' own (one, shared)
    assert [t.wall for t in agent.turns] == [late, late]


async def test_a_fires_own_read_begun_before_its_slot_is_read_again_once_the_slot_came(
    autojump_clock: Any,
) -> None:
    # The wall clock behind the slot when the fire read (a clock stepped back), and at it by
    # the time the store answered: that read began before the slot, so it does not decide
    # the slot -- a pause written meanwhile would be missed -- and the fire reads again.
    scheduler, agent, store, wall = timed_rig()
    first = True

    async def paused() -> frozenset[str]:
        nonlocal first
        names = await TimedReads.paused(store)
        if first:
            first = False
            await store.set_paused("hourly", True)  # written while the first read was out
            wall.set(at(11) + timedelta(seconds=1))  # and the slot came meanwhile
        return names

    store.paused = paused  # type: ignore[method-assign]
    wall.set(at(11) - timedelta(seconds=2))
    result = await scheduler._parts.fire.fire_slot(HOURLY, at(11))
    assert store.read_at == [at(11) - timedelta(seconds=2), at(11) + timedelta(seconds=1)]
    assert result.reason == "paused"  # the second read's answer decided it
    assert agent.turns == []


async def test_a_herds_loops_are_woken_in_the_order_of_their_names(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Loaded in another order; the timer wakes the herd in its names' order (a state
    # directory then writes neighbouring claim directories together: scheduler/sleepers.py).
    # Recorded as the timer wakes them: Trio then runs a batch in its own (under test,
    # shuffled) order.
    # Twenty, so that no shuffle of their parking comes out sorted by chance.
    names = "qdbtkeaslgcroimhpfjn"
    routines = [Routine(name=name, prompt="p", cron="0 * * * *") for name in names]
    scheduler, _, _, wall = timed_rig(*routines)
    parked: dict[trio.lowlevel.Task, str] = {}
    woken: list[str] = []
    sleep_until, reschedule = Sleepers.sleep_until, trio.lowlevel.reschedule

    def noting_sleep(self: Sleepers, deadline: float, **options: Any) -> Any:
        parked[trio.lowlevel.current_task()] = options.get("slot") or ""
        return sleep_until(self, deadline, **options)

    def noting_wake(task: trio.lowlevel.Task, *args: Any) -> None:
        if task in parked and args:  # a slot's wake (with the read): not a capped sleep's
            woken.append(parked[task])
        reschedule(task, *args)

    monkeypatch.setattr(Sleepers, "sleep_until", noting_sleep)
    monkeypatch.setattr(trio.lowlevel, "reschedule", noting_wake)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(11, 0, day=7) + timedelta(seconds=5))
        scheduler.stop(0)
    assert woken == sorted(names)


async def test_the_pieces_of_a_long_sleep_before_the_slot_read_nothing(
    autojump_clock: Any,
) -> None:
    # A slot further away than the longest sleep is slept toward in pieces: only the piece
    # that ends at the slot is the slot's (held for the herd's read, and woken in its order);
    # the others wake the loop alone, without a read of the paused routines.
    store = TimedReads()
    scheduler, _, _, wall = rig(store=store, wakeups=False, poll_interval=3600, max_wait=600)
    store.wall = wall
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        booted = len(store.read_at)
        await until(wall, at(11) + timedelta(seconds=5))  # pieces end at 10:40 and 10:50
        scheduler.stop(0)
    assert store.read_at[booted:] == [at(11)]
