"""Cron loops, the clock watch and reloads pinned whole (issue 11): back-off bookkeeping,
re-arms (zone, hash, future claims), the clock watch's restarts, reload summaries; and the
wake loop's count of pending wake-ups.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from scheduler_rig import HOURLY, T0, Recording, at, completed, messages, rig, until

from trio_routines import Outcome, Routine, StateFault
from trio_routines.records import Gap, GapReason
from trio_routines.scheduler import Scheduler
from trio_routines.scheduler.loops import LOOP_NAME, CronLoops
from trio_routines.scheduler.sleepers import PRUNE_SLACK, Sleepers
from trio_routines.testing import Complete, WallClock

BERLIN = Routine(name="report", prompt="p", cron="H 9 * * *", tz="Europe/Berlin")  # 07:31 UTC


@pytest.fixture(autouse=True)
def _capture(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_routines")


class CountingReads(Recording):
    """Counts the paused-routine reads; more than ``limit`` is a bug that kills the loop."""

    def __init__(self, limit: int = 1000) -> None:
        super().__init__()
        self.reads = 0
        self.limit = limit

    async def paused(self) -> frozenset[str]:
        self.reads += 1
        if self.reads > self.limit:
            raise RuntimeError("too many paused reads: a loop spins")
        return await super().paused()


# -- the restart back-off --------------------------------------------------------------------


async def test_a_slot_that_goes_through_resets_the_back_off(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler, agent, store, wall = rig(wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        store.fail("claim", RuntimeError("bug"), times=1)
        await until(wall, at(11, 30))  # 11:00 died, restarted after 1 s
        await until(wall, at(12, 30))  # 12:00 went through
        store.fail("claim", RuntimeError("bug"), times=1)
        await until(wall, at(13, 30))
        scheduler.stop()
    assert messages(caplog, logging.ERROR) == [
        f"hourly: stopped unexpectedly: RuntimeError: bug — restarting in 1s (restart {n})"
        for n in (1, 2)
    ]
    # A bug: the record carries it, for where it was raised and the JSON's traceback.
    raised = [r.exc_info[1] for r in caplog.records if r.levelno == logging.ERROR and r.exc_info]
    assert [str(exc) for exc in raised] == ["bug", "bug"]
    assert [t.wall for t in agent.turns] == [at(12)]
    assert scheduler._parts.cron.firing == {}  # no settled fire's event is kept


async def test_a_fire_that_fails_with_a_state_fault_is_logged_whole_and_stays_armed(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler, agent, store, wall = rig(wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        store.fail("claim", StateFault("disk full"), times=1)
        await until(wall, at(12, 30))
        scheduler.stop()
    assert messages(caplog, logging.ERROR) == [
        "hourly: fire failed (skipping this run, schedule stays armed): disk full"
    ]
    assert [t.wall for t in agent.turns] == [at(12)]
    assert scheduler.statistics().loop_restarts == {}


async def test_the_clock_watch_is_restarted_with_its_own_back_off(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler, _, store, wall = rig(wakeups=False, poll_interval=60)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        store.fail("paused", RuntimeError("bug"), times=2)
        await until(wall, at(10, 45))
        scheduler.stop()
    assert messages(caplog, logging.ERROR) == [
        "clock watch: stopped unexpectedly: RuntimeError: bug — restarting in 1s (restart 1)",
        "clock watch: stopped unexpectedly: RuntimeError: bug — restarting in 2s (restart 2)",
    ]
    assert scheduler.statistics().loop_restarts == {"clock": 2}
    assert scheduler.metrics.restarts == {("clock", None): 2}


# -- sleeping towards a slot -----------------------------------------------------------------


async def test_a_loop_woken_a_moment_before_its_slot_sleeps_the_rest(
    autojump_clock: Any,
) -> None:
    store = CountingReads(limit=20)
    scheduler, agent, _, wall = rig(store=store, wakeups=False, poll_interval=24 * 3600)
    other = Routine(name="other", prompt="o", cron="0 9 * * *")
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(10, 59) + timedelta(seconds=59.5))
        scheduler.update_routines([HOURLY, other])  # wakes every sleeping loop
        await until(wall, at(11, 30))
        scheduler.stop()
    assert [t.wall for t in agent.turns] == [at(11)]
    assert scheduler.statistics().loop_restarts == {}


# -- re-arming a loop ------------------------------------------------------------------------


async def test_a_replaced_version_arms_only_once_its_fire_in_flight_settled(
    autojump_clock: Any,
) -> None:
    scheduler, agent, store, wall = rig(wakeups=False)
    agent.default = Complete(duration=600)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(11, 5))
        scheduler.update_routines([attrs.evolve(HOURLY, prompt="new")])
        await trio.sleep(60)
        assert scheduler.statistics().next_due == {}  # waiting for 11:00 to settle
        await until(wall, at(11, 11))
        assert scheduler.statistics().next_due == {"hourly": at(12)}
        scheduler.stop(0)
    assert [f.slot for f in await store.history("hourly")] == [at(11)]


async def test_a_re_arm_keeps_to_the_routines_zone_and_hash(autojump_clock: Any) -> None:
    # An hourly clock watch: the wall clock does not jump, and two days pass in fewer ticks.
    scheduler, agent, _, wall = rig(BERLIN, wakeups=False, poll_interval=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        scheduler.update_routines([attrs.evolve(BERLIN, prompt="new")])
        await trio.sleep(1)
        assert scheduler.statistics().next_due == {"report": at(7, 31, day=8)}
        await until(wall, at(8, day=9))
        scheduler.stop()
    assert [t.wall for t in agent.turns] == [at(7, 31, day=8), at(7, 31, day=9)]
    assert scheduler.statistics().loop_restarts == {}


async def test_a_re_arm_stays_behind_a_future_claim_and_reports_it(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = Recording()
    await store.claim("hourly", at(13), at(13))  # stamped by a clock 2.5 h ahead
    await store.settle("hourly", at(13), Outcome.COMPLETED, 1)
    scheduler, agent, _, _wall = rig(store=store, wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        scheduler.update_routines([attrs.evolve(HOURLY, prompt="new")])
        await trio.sleep(1)
        assert scheduler.statistics().next_due == {"hourly": at(14)}
        assert scheduler.statistics().future_claims == {"hourly": at(13)}
        scheduler.update_routines([])
        assert scheduler.statistics().future_claims == {}
        scheduler.stop()
    assert agent.turns == []
    warning = (
        "hourly: newest claim is in the future (slot 2026-07-07T13:00:00.000Z, stamped "
        "2026-07-07T13:00:00.000Z by an unnamed replica) — made while a wall clock was ahead "
        "(this one's, or that replica's), or by hand; nothing can fire before the first slot "
        "after it. If this clock is behind the other replicas', set it right; if every clock "
        "is right, stop and delete that claim (docs/command-line.md: A clock that ran ahead)"
    )
    assert messages(caplog, logging.WARNING) == [warning, warning]  # at boot, at the re-arm


async def test_a_claim_stamped_now_is_not_in_the_future(autojump_clock: Any) -> None:
    store = Recording()
    await store.claim("hourly", at(10), T0 + timedelta(minutes=10))
    await store.settle("hourly", at(10), Outcome.COMPLETED, 1)
    scheduler, _, _, wall = rig(store=store, wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        assert scheduler.statistics().future_claims == {"hourly": at(10)}
        await until(wall, at(10, 40))  # the stamp's very instant
        assert scheduler.statistics().future_claims == {}
        scheduler.stop()


async def test_a_claim_stamped_at_the_boots_instant_is_not_in_the_future(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = Recording()
    await store.claim("hourly", at(10), T0)
    await store.settle("hourly", at(10), Outcome.COMPLETED, 1)
    scheduler, _, _, _ = rig(store=store, wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        assert scheduler.statistics().future_claims == {}
        scheduler.stop()
    assert messages(caplog, logging.WARNING) == []


async def test_a_re_armed_claim_behind_the_clock_is_in_the_future_once_the_clock_goes_back(
    autojump_clock: Any,
) -> None:
    scheduler, _, store, wall = rig(wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(11, 30))  # 11:00 claimed, stamped 11:00
        store.fail("claim", RuntimeError("bug"), times=1)
        await until(wall, at(12, 30))  # 12:00 died: the re-arm read the 11:00 claim
        assert scheduler.statistics().future_claims == {}
        wall.set(at(10, 45))  # the clock goes back behind the 11:00 stamp
        assert scheduler.statistics().future_claims == {"hourly": at(11)}
        scheduler.stop()
    assert scheduler.statistics().loop_restarts == {"cron:hourly": 1}


async def test_a_re_arm_that_finds_no_claim_forgets_the_one_read_before(
    autojump_clock: Any,
) -> None:
    store = Recording()
    await store.claim("hourly", at(10), at(10))
    await store.settle("hourly", at(10), Outcome.COMPLETED, 1)
    scheduler, _, _, wall = rig(store=store, wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        store.claims.clear()  # the claims deleted while serving
        store.fail("claim", RuntimeError("bug"), times=1)
        await until(wall, at(11, 30))  # 11:00 died: the re-arm read no claim
        wall.set(at(9, 30))  # behind the 10:00 claim's stamp, which is gone
        assert scheduler.statistics().future_claims == {}
        scheduler.stop()
    assert scheduler.statistics().loop_restarts == {"cron:hourly": 1}


async def test_a_cron_that_runs_out_of_instants_is_disarmed_after_its_last_fire(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    last = Routine(name="last", prompt="p", cron="0 23 1 12 *")  # no year after 9999
    wall = WallClock(datetime(9999, 12, 1, 22, 30, tzinfo=UTC))
    scheduler, agent, _, _ = rig(last, wakeups=False)
    scheduler.now = agent.wall = wall
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        assert scheduler.statistics().armed == ("last",)
        await trio.sleep(3600)
        assert scheduler.statistics().armed == ()
        assert scheduler.statistics().next_due == {"last": None}
        scheduler.update_routines([attrs.evolve(last, prompt="new")])  # re-armed: nothing left
        await trio.sleep(1)
        scheduler.stop()
    assert len(agent.turns) == 1
    never = 'last: cron "0 23 1 12 *" will never fire again — not armed'
    assert messages(caplog, logging.WARNING) == [never, never]
    assert scheduler.statistics().loop_restarts == {}


# -- the clock watch -------------------------------------------------------------------------


async def test_one_clock_watch_however_many_routines_are_added(autojump_clock: Any) -> None:
    store = CountingReads()
    scheduler, _, _, _wall = rig(store=store, wakeups=False, poll_interval=60)
    extra = [Routine(name=f"r{i}", prompt="p", cron="0 9 * * *") for i in range(2)]
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(1)  # the loops run: each update below may start a clock watch
        scheduler.update_routines([HOURLY, extra[0]])
        scheduler.update_routines([HOURLY, *extra])
        await trio.sleep(600)
        scheduler.stop()
    assert store.reads == 1 + 10  # the boot's read, then one per poll


def _loop_tasks() -> list[trio.lowlevel.Task]:
    """The cron loops' tasks under the current root task, found by their coroutines."""
    found, tasks = [], [trio.lowlevel.current_root_task()]
    while tasks:
        task = tasks.pop()
        if getattr(task.coro, "cr_code", None) is CronLoops.loop.__code__:
            found.append(task)
        tasks.extend(child for nursery in task.child_nurseries for child in nursery.child_tasks)
    return found


async def test_every_cron_loop_shares_one_task_name(autojump_clock: Any) -> None:
    # Named as Trio names a task, with one string for all: a sleeping loop keeps no name of
    # its own, whether started by the boot or by a change.
    booted = [Routine(name=f"r{i}", prompt="p", cron="0 9 * * *") for i in range(2)]
    scheduler, _, _, _wall = rig(*booted, wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(1)
        scheduler.update_routines([*booted, HOURLY])
        await trio.sleep(1)
        tasks = _loop_tasks()
        scheduler.stop()
    assert LOOP_NAME == "trio_routines.scheduler.loops.CronLoops.loop"
    assert len(tasks) == 3
    assert all(task.name is LOOP_NAME for task in tasks)


@pytest.mark.parametrize("settled", [True, False], ids=["running", "starting"])
async def test_a_cron_routine_added_later_starts_the_clock_watch(
    autojump_clock: Any, settled: bool
) -> None:
    # Booted with no cron routine, so no clock watch; one added later -- once the loops run,
    # or while run() is still starting them -- must start it.
    scheduler, _, _, wall = rig(Routine(name="m", prompt="p"), wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        if settled:
            await trio.sleep(1)
        scheduler.update_routines([HOURLY])
        await trio.sleep(1)
        wall.jump(timedelta(minutes=10))
        await trio.sleep(scheduler.poll_interval)
        assert scheduler.statistics().clock_jumps == 1
        scheduler.stop()


async def test_with_a_wake_loop_no_clock_watch_is_added(autojump_clock: Any) -> None:
    store = CountingReads()
    scheduler, _, _, _ = rig(Routine(name="m", prompt="p"), store=store, poll_interval=60)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        scheduler.update_routines([Routine(name="d", prompt="p", cron="0 9 * * *")])
        await trio.sleep(600 + 1)
        scheduler.stop()
    assert store.reads == 1 + 10  # the wake loop's polls only


class JumpsBackAtEleven(Recording):
    """Sets ``wall`` back two hours in the first paused read made at 11:00."""

    def __init__(self, wall: WallClock) -> None:
        super().__init__()
        self.wall = wall
        self.jumped = False

    async def paused(self) -> frozenset[str]:
        if self.wall() == at(11) and not self.jumped:
            self.jumped = True
            self.wall.jump(timedelta(hours=-2))
        return await super().paused()


async def test_a_clock_gone_back_past_the_previous_slot_keeps_the_slot_it_was_firing(
    autojump_clock: Any,
) -> None:
    wall = WallClock(T0)
    store = JumpsBackAtEleven(wall)  # to 09:00, with 10:00 already claimed
    await store.claim("hourly", at(10), at(10))
    await store.settle("hourly", at(10), Outcome.COMPLETED, 1)
    # Polls every 7 s: none at 11:00 itself, so the jump comes in the loop's own fire.
    scheduler, agent, _, _ = rig(store=store, wakeups=False, poll_interval=7)
    scheduler.now = agent.wall = wall
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(11))
        await trio.sleep(60)  # 09:01 now
        assert scheduler.statistics().next_due == {"hourly": at(11)}  # still 11:00, not 10:00
        assert scheduler.statistics().loop_restarts == {}  # slept again, nothing broke
        await until(wall, at(11, 30))
        scheduler.stop()
    assert [t.wall for t in agent.turns] == [at(11)]
    assert scheduler.statistics().outcomes == {"completed": 1}  # no duplicate of 10:00


@pytest.mark.parametrize("how", ["stop", "replace"])
async def test_a_loop_that_dies_once_stopped_or_replaced_is_not_restarted(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    class SettleBug(Recording):
        async def settle(self, routine: str, slot: datetime, *args: Any, **kw: Any) -> bool:
            raise RuntimeError("settle bug")

    scheduler, agent, _, wall = rig(store=SettleBug(), wakeups=False)
    agent.default = Complete(duration=10)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(11, 0) + timedelta(seconds=5))  # the 11:00 turn runs
        if how == "stop":
            scheduler.stop(60)
        else:
            scheduler.update_routines([attrs.evolve(HOURLY, prompt="new")])
        await trio.sleep(30)
        scheduler.stop()
    assert scheduler.statistics().loop_restarts == {}
    assert messages(caplog, logging.ERROR) == []


# -- where the loops sleep -------------------------------------------------------------------


async def test_a_prune_keeps_the_entry_of_a_loop_still_parked(autojump_clock: Any) -> None:
    sleepers = Sleepers()
    start = trio.current_time()
    woke: list[float] = []

    async def parked() -> None:
        await sleepers.sleep_until(start + 500)
        woke.append(trio.current_time())

    with trio.fail_after(1000):
        async with trio.open_nursery() as nursery:
            await nursery.start(sleepers.run)
            nursery.start_soon(parked)
            for _ in range(3 * PRUNE_SLACK):  # stale entries enough for a prune
                with trio.move_on_after(1):
                    await sleepers.sleep_until(start + 1000)
            await sleepers.sleep_until(trio.current_time())  # a pass of the timer: the prune
            await trio.sleep(start + 600 - trio.current_time())
            nursery.cancel_scope.cancel()
    assert woke == [start + 500]


async def test_a_sleep_after_the_timer_ended_still_ends(autojump_clock: Any) -> None:
    sleepers = Sleepers()
    async with trio.open_nursery() as timer:
        await timer.start(sleepers.run)
        await trio.sleep(1)
        timer.cancel_scope.cancel()
    start = trio.current_time()
    with trio.fail_after(100):
        await sleepers.sleep_until(start + 5)
    assert trio.current_time() == start + 5


async def test_a_clock_gone_back_during_the_fires_own_read_sleeps_to_the_same_slot(
    autojump_clock: Any,
) -> None:
    # As above, but the wall clock goes back inside the fire's own paused read (the timer
    # made none for it): the fire finds its slot not due, and the loop sleeps to that same
    # slot again rather than planning from the clock's new reading (10:00, claimed already).
    wall = WallClock(T0)
    store = JumpsBackAtEleven(wall)
    await store.claim("hourly", at(10), at(10))
    await store.settle("hourly", at(10), Outcome.COMPLETED, 1)
    scheduler, agent, _, _ = rig(store=store, wakeups=False, poll_interval=7)
    scheduler.now = agent.wall = wall
    scheduler._parts.sleepers.prefetch = None  # the loop's fire itself meets the read
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(11))
        await trio.sleep(60)  # 09:01 now
        assert store.jumped
        assert scheduler.statistics().next_due == {"hourly": at(11)}
        await until(wall, at(11, 30))
        scheduler.stop()
    assert [t.wall for t in agent.turns] == [at(11)]
    assert scheduler.statistics().outcomes == {"completed": 1}


async def test_a_change_that_comes_as_the_slot_does_lets_the_old_version_fire_it(
    autojump_clock: Any,
) -> None:
    # The herd's read at the slot holds the loop at its slot; the routine is changed
    # meanwhile, with no time passing. The slot came while the loop slept: it fires, in the
    # version it came in, and the new version arms after it.
    class HeldRead(Recording):
        hold = False
        release = trio.Event()

        async def paused(self) -> frozenset[str]:
            names = await super().paused()
            if self.hold:
                self.hold = False
                await self.release.wait()
            return names

    store = HeldRead()
    scheduler, agent, _, wall = rig(store=store, wakeups=False, poll_interval=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(10, 59))
        store.hold = True
        await until(wall, at(11))
        await trio.testing.wait_all_tasks_blocked()  # the timer's read, held at the slot
        scheduler.update_routines([attrs.evolve(HOURLY, prompt="Check the new queue.")])
        store.release.set()
        await trio.testing.wait_all_tasks_blocked()
        assert [(t.wall, t.text) for t in agent.turns] == [(at(11), HOURLY.prompt)]
        await until(wall, at(12, 1))
        scheduler.stop()
    assert [(t.wall, t.text) for t in agent.turns] == [
        (at(11), HOURLY.prompt),
        (at(12), "Check the new queue."),
    ]


# -- the wake loop's count of pending wake-ups -----------------------------------------------


class CountedLists(Recording):
    """Counts the full lists of wake-ups: the wake loop's count of pending ones reads one."""

    lists = 0

    async def list_wakeups(self) -> Any:
        self.lists += 1
        return await super().list_wakeups()


async def test_the_pending_wake_ups_are_counted_at_the_first_poll_and_every_tenth_after(
    autojump_clock: Any,
) -> None:
    store = CountedLists()
    scheduler, _, _, _ = rig(store=store, poll_interval=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.testing.wait_all_tasks_blocked()
        assert store.lists == 1  # the first poll's
        await trio.sleep(9.5)  # polls 2 to 10
        assert store.lists == 1
        await trio.sleep(1)  # the 11th
        assert store.lists == 2
        await trio.sleep(10)  # the 21st
        scheduler.stop()
    assert store.lists == 3


async def test_a_count_of_the_pending_wake_ups_that_fails_keeps_the_last_one(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = CountedLists()
    scheduler, _, _, _ = rig(store=store, poll_interval=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await scheduler.add_wakeup("s", "p", delay=3600)
        await trio.sleep(10.5)  # the 11th poll counts one
        assert "trio_routines_pending_wakeups 1\n" in scheduler.render_metrics()
        store.fail("list_wakeups", StateFault("disk busy"), times=1)
        await scheduler.add_wakeup("s", "q", delay=3600)
        await trio.sleep(10)  # the 21st fails
        scheduler.stop()
    assert "trio_routines_pending_wakeups 1\n" in scheduler.render_metrics()
    assert [m for m in messages(caplog, logging.DEBUG) if "counted" in m] == [
        "the pending wake-ups could not be counted: disk busy"
    ]


async def test_a_cron_routine_added_between_the_wake_loops_polls_adds_no_clock_watch(
    autojump_clock: Any,
) -> None:
    # Added half a poll after the start: a clock watch of its own would poll (and read the
    # paused routines) half a poll apart from the wake loop, in reads of its own.
    store = CountingReads()
    scheduler, _, _, _ = rig(Routine(name="m", prompt="p"), store=store, poll_interval=60)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(30)
        scheduler.update_routines([Routine(name="d", prompt="p", cron="0 9 * * *")])
        await trio.sleep(600 - 30 + 1)
        scheduler.stop()
    assert store.reads == 1 + 10  # the wake loop's polls only


async def test_a_cron_routine_added_to_an_external_clocks_scheduler_is_never_armed(
    autojump_clock: Any,
) -> None:
    scheduler, agent, _, wall = rig(Routine(name="m", prompt="p"), external_clock=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        changes = scheduler.update_routines([HOURLY])
        await until(wall, at(12, 1))
        assert scheduler.statistics().armed == ()
        assert 'routine="hourly"' not in scheduler.render_metrics()  # no series: never armed
        scheduler.stop()
    assert changes.added == ("hourly",)
    assert agent.turns == []  # its slots are the external clock's to fire


# -- what a re-arm accounts for, and updates that race the boot -------------------------------

MINUTELY = Routine(name="m", prompt="p", cron="* * * * *")


def _gaps(gaps: list[Any]) -> list[tuple[datetime, datetime, int, GapReason]]:
    return [(g.first, g.last, g.count, g.reason) for g in gaps]


@pytest.mark.parametrize(
    ("routine", "slot"),
    [
        (HOURLY, at(11)),
        (attrs.evolve(HOURLY, tz="Asia/Kolkata"), at(11, 30)),  # UTC+05:30
        (attrs.evolve(HOURLY, name="hashed", cron="H * * * *"), at(10, 36)),
    ],
    ids=["utc", "zone", "hashed"],
)
async def test_a_restart_records_the_slot_its_loop_was_at(
    autojump_clock: Any, routine: Routine, slot: datetime
) -> None:
    # A claim that raised (a custom store's bug) restarted the loop, which re-armed from now:
    # the slot was neither claimed nor inside a gap. Its zone and its hash name the slot.
    scheduler, agent, store, wall = rig(routine, wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        store.fail("claim", RuntimeError("bug"), times=1)
        await until(wall, slot + timedelta(minutes=90))
        scheduler.stop()
    assert [t.wall for t in agent.turns] == [slot + timedelta(hours=1)]
    assert _gaps(await store.gaps(routine.name)) == [(slot, slot, 1, GapReason.STORE)]


async def during_a_long_turn(
    change: Callable[[Scheduler, Any], Awaitable[None]],
) -> tuple[Any, list[trio.lowlevel.Task]]:
    """``MINUTELY`` with a 150 s turn from 10:31, ``change`` made at 10:31:10 (10:32 and
    10:33 pass while the turn runs), run to 10:35:30: the store, and the cron loops then."""
    scheduler, agent, store, wall = rig(MINUTELY, wakeups=False)
    agent.script(Complete(duration=150), session=MINUTELY.session)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, datetime(2026, 7, 7, 10, 31, 10, tzinfo=UTC))
        await change(scheduler, store)
        await until(wall, datetime(2026, 7, 7, 10, 35, 30, tzinfo=UTC))
        tasks = _loop_tasks()
        scheduler.stop()
    return store, tasks


OVERLAPPED = [(at(10, 32), at(10, 33), 2, GapReason.OVERLAP)]


@pytest.mark.parametrize("change", ["changed", "removed and added again", "removed"])
async def test_the_slots_a_turn_overlaps_are_recorded_when_its_routine_changes_meanwhile(
    autojump_clock: Any, change: str
) -> None:
    # Its loop records 10:32 and 10:33 as the turn's overlap; a change during the turn ended
    # that loop, and its successor armed from the newest claim and now, recording nothing. A
    # removed one stops once its fire settled: its turn's overlap is recorded all the same.

    async def update(scheduler: Scheduler, _store: Any) -> None:
        if change == "changed":
            scheduler.update_routines([attrs.evolve(MINUTELY, prompt="q")])
        else:
            scheduler.update_routines([])
            if change != "removed":
                scheduler.update_routines([MINUTELY])

    store, tasks = await during_a_long_turn(update)
    assert len(tasks) == (0 if change == "removed" else 1)  # never two loops for one routine
    history = await store.history("m")
    assert [(f.slot, f.outcome) for f in history] == [
        (at(10, 31), Outcome.COMPLETED),
        *(
            []
            if change == "removed"
            else [(at(10, 34), Outcome.COMPLETED), (at(10, 35), Outcome.COMPLETED)]
        ),
    ]
    assert _gaps(await store.gaps("m")) == OVERLAPPED


@pytest.mark.parametrize("read", ["answered", "failed"])
async def test_a_change_records_only_the_overlapped_slots_no_gap_holds_yet(
    autojump_clock: Any, read: str
) -> None:
    # 10:32 recorded already (another replica's record, or a change before this one): the
    # re-arm records 10:33 alone. A store that fails the read of the gaps: both, once more,
    # which the store keeps as one record of the two.

    async def update(scheduler: Scheduler, store: Any) -> None:
        await store.record_gap("m", Gap(at(10, 32), at(10, 32), 1, GapReason.OVERLAP))
        if read == "failed":
            store.fail("gaps", StateFault("disk busy"), times=1)
        scheduler.update_routines([attrs.evolve(MINUTELY, prompt="q")])
        scheduler.update_routines([attrs.evolve(MINUTELY, prompt="r")])  # the last one counts

    store, _ = await during_a_long_turn(update)
    assert _gaps(await store.gaps("m")) == (
        [
            (at(10, 32), at(10, 32), 1, GapReason.OVERLAP),
            (at(10, 33), at(10, 33), 1, GapReason.OVERLAP),
        ]
        if read == "answered"
        else OVERLAPPED
    )


async def test_a_routine_added_again_after_a_while_records_no_overlap(autojump_clock: Any) -> None:
    # Nothing of it ran while it was not loaded: its slots then were no turn's overlap, but
    # passed while it was not loaded.
    scheduler, agent, store, wall = rig(wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(11, 30))  # 11:00 fired
        scheduler.update_routines([])
        await until(wall, at(13, 30))
        scheduler.update_routines([HOURLY])
        await until(wall, at(14, 30))
        scheduler.stop()
    assert [t.wall for t in agent.turns] == [at(11), at(14)]
    assert await store.gaps("hourly") == [Gap(at(12), at(13), 2, GapReason.REMOVED)]


async def test_a_cron_changed_while_no_turn_runs_records_no_overlap(autojump_clock: Any) -> None:
    # Every change recorded the new cron's slots since the newest claim as "overlap": a
    # weekly routine made minutely claimed 1,540 slots missed while a turn ran.
    store = Recording()
    await completed(store, "hourly", at(9))
    scheduler, agent, _, wall = rig(attrs.evolve(HOURLY, cron="0 9 * * *"), store=store)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await until(wall, at(10, 40))
        scheduler.update_routines([HOURLY])
        await until(wall, at(11, 30))
        scheduler.stop()
    assert [t.wall for t in agent.turns] == [at(11)]
    assert await store.gaps("hourly") == []


class SlowBoot(Recording):
    """A store that takes 3 s to answer one of the boot's reads (``slow``)."""

    def __init__(self, slow: str) -> None:
        super().__init__()
        self.slow = slow

    async def latest_fire(self, routine: str) -> Any:
        if self.slow == "latest_fire":
            await trio.sleep(3)
        return await super().latest_fire(routine)

    async def first_armed(self, names: Any, now: datetime) -> Any:
        if self.slow == "first_armed":
            await trio.sleep(3)
        return await super().first_armed(names, now)

    async def resumed_at(self, routine: str) -> Any:
        if self.slow == "resumed_at":
            await trio.sleep(3)
        return await super().resumed_at(routine)


@pytest.mark.parametrize("slow", ["latest_fire", "first_armed"])
async def test_routines_replaced_during_the_boot_arm_as_updated(
    autojump_clock: Any, slow: str
) -> None:
    # The boot read the newest claims of the routines it began with: one removed meanwhile
    # was a KeyError that ended run(), or stayed armed at a slot long past, never firing. One
    # added meanwhile was not loaded before: what passed since its old claim is no gap of it.
    other = Routine(name="b", prompt="p", cron="* * * * *")
    store = SlowBoot(slow)
    await completed(store, "b", at(9))
    scheduler, agent, _, wall = rig(MINUTELY, store=store, wakeups=False)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(scheduler.run)
        await trio.sleep(0.5)  # the boot waits for the store
        changes = scheduler.update_routines([other])
        await until(wall, datetime(2026, 7, 7, 10, 33, 30, tzinfo=UTC))
        statistics = scheduler.statistics()
        scheduler.stop()
    assert (changes.added, changes.removed) == (("b",), ("m",))
    assert statistics.armed == ("b",)
    assert dict(statistics.next_due) == {"b": at(10, 34)}
    assert [(t.session, t.wall) for t in agent.turns] == [
        ("routine:b", at(10, 31)),
        ("routine:b", at(10, 32)),
        ("routine:b", at(10, 33)),
    ]
    assert await store.gaps("b") == []


@pytest.mark.parametrize("slow", ["latest_fire", "resumed_at"])
async def test_a_routine_changed_during_the_boot_accounts_for_what_its_plan_would_have(
    autojump_clock: Any, slow: str
) -> None:
    # Booted at 10:30 with 10:00 to catch up, its prompt changed meanwhile: the plan of the
    # version replaced was dropped and the new one armed from now, 10:00 in neither a claim
    # nor a gap. A change never catches up: 10:00 is recorded as passed while none ran.
    store = SlowBoot(slow)
    await completed(store, "hourly", at(9))
    scheduler, agent, _, wall = rig(HOURLY, store=store, wakeups=False)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(scheduler.run)
        await trio.sleep(0.5)  # the boot waits for the store
        scheduler.update_routines([attrs.evolve(HOURLY, prompt="new")])
        await until(wall, at(11, 30))
        scheduler.stop()
    assert [(t.wall, t.text) for t in agent.turns] == [(at(11), "new")]
    assert _gaps(await store.gaps("hourly")) == [(at(10), at(10), 1, GapReason.DOWN)]


async def test_a_fault_of_the_re_arm_itself_keeps_the_overlap_it_was_to_record(
    autojump_clock: Any,
) -> None:
    # The re-arm's own read raised (a store's bug): the restart took its slots for the
    # fault's, and the turn's overlap was recorded as a "store" gap.

    async def update(scheduler: Scheduler, store: Any) -> None:
        store.fail("latest_fire", RuntimeError("bug"), times=1)
        scheduler.update_routines([attrs.evolve(MINUTELY, prompt="q")])

    store, _ = await during_a_long_turn(update)
    assert _gaps(await store.gaps("m")) == OVERLAPPED
