"""The Scheduler service, reloads, the clock watch and the shared state pinned whole (issue 11):
serve_routines, what run() arms, statistics and metrics, wait_drained, reload summaries,
clock jumps, unknown routines and the grid.
"""

from __future__ import annotations

import itertools
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from scheduler_rig import HOURLY, NO_ANSWER, T0, Recording, at, messages, rig

from trio_routines import InvalidRoutine, Outcome, Routine, Scheduler, StateFault
from trio_routines.converter import dumps, wakeup_to_json
from trio_routines.replicas import default_replica
from trio_routines.scheduler import NotOnGrid, RoutineChanges, UnknownRoutine, serve_routines, state
from trio_routines.scheduler.grace import Grace
from trio_routines.scheduler.inflight import InFlight, Taking, Working
from trio_routines.scheduler.state import (
    busy_reason,
    new_replica_id,
    system_now,
    takes_keyword,
)
from trio_routines.testing import Busy, Complete, MemoryStore, ScriptedAgent, WallClock
from trio_routines.wakeups import WakeupRequest


@pytest.fixture(autouse=True)
def _capture(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_routines")


# -- serve_routines and run() ----------------------------------------------------------------


async def test_serve_routines_builds_the_scheduler_it_was_given_and_runs_it(
    autojump_clock: Any,
) -> None:
    wall = WallClock(T0)
    agent = ScriptedAgent(wall=wall)
    store = Recording()
    async with trio.open_nursery() as nursery:
        scheduler = await nursery.start(
            lambda task_status: serve_routines(
                agent=agent,
                store=store,
                routines=[HOURLY],
                now=wall,
                wakeups=False,
                task_status=task_status,
            )
        )
        assert isinstance(scheduler, Scheduler)
        assert (scheduler.store, scheduler.wakeups) == (store, False)
        await trio.sleep((at(11, 30) - wall()).total_seconds())
        scheduler.stop()
    assert [t.wall for t in agent.turns] == [at(11)]
    assert [f.slot for f in await store.history("hourly")] == [at(11)]


async def test_a_routine_without_cron_armed_first_does_not_stop_the_arming(
    autojump_clock: Any,
) -> None:
    manual = Routine(name="manual", prompt="m")
    scheduler, agent, _, wall = rig(manual, HOURLY, wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep((at(11, 30) - wall()).total_seconds())
        scheduler.stop()
    assert [t.session for t in agent.turns] == ["routine:hourly"]


async def test_a_routine_changed_during_the_boot_is_armed_in_its_new_version(
    autojump_clock: Any,
) -> None:
    gate = trio.Event()

    class SlowBoot(Recording):
        async def latest_fire(self, routine: str) -> Any:
            await gate.wait()
            return await super().latest_fire(routine)

    scheduler, agent, _, wall = rig(store=SlowBoot(), wakeups=False)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(scheduler.run)
        await trio.testing.wait_all_tasks_blocked()
        scheduler.update_routines([attrs.evolve(HOURLY, prompt="new")])
        gate.set()
        await trio.sleep((at(11, 30) - wall()).total_seconds())
        scheduler.stop()
    assert [(t.wall, t.text) for t in agent.turns] == [(at(11), "new")]
    assert scheduler.statistics().loop_restarts == {}


async def test_statistics_and_metrics_say_what_is_armed_and_whether_it_stops(
    autojump_clock: Any,
) -> None:
    scheduler, _, _, _ = rig(wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        assert scheduler.statistics().stopping is False
        metrics = scheduler.render_metrics()
        assert scheduler.statistics().armed == ("hourly",)
        scheduler.stop()
        assert scheduler.statistics().stopping is True
    # The run is over: no loop is left, nothing is armed and no slot comes next.
    after = scheduler.statistics()
    assert (after.armed, dict(after.next_due), after.stopping) == ((), {}, True)
    samples = [m for m in scheduler.render_metrics().splitlines() if not m.startswith("#")]
    assert "trio_routines_armed_routines 0" in samples
    assert not [m for m in samples if m.startswith("trio_routines_next_fire")]
    (line,) = [m for m in metrics.splitlines() if m.startswith("trio_routines_next_fire")]
    assert line.split() == [
        'trio_routines_next_fire_timestamp_seconds{routine="hourly"}',
        "1783422000",
    ]
    assert at(11).timestamp() == 1783422000


async def test_wait_drained_returns_once_stopped_and_the_last_turn_ended(
    autojump_clock: Any,
) -> None:
    scheduler, agent, _, _ = rig(external_clock=True)
    agent.default = Complete(duration=10)
    drained: list[float] = []

    async def wait() -> None:
        await scheduler.wait_drained()
        drained.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        start = trio.current_time()
        nursery.start_soon(wait)
        await scheduler.start_fire("hourly", at(10))
        await trio.sleep(5)
        scheduler.stop(30)
    assert drained == [start + 10]  # the turn's end, after the stop


async def test_the_in_flight_count_and_its_wait_for_none(autojump_clock: Any) -> None:
    count = InFlight()
    with trio.testing.assert_checkpoints():
        await count.wait_none()  # nothing in flight: at once, but a checkpoint all the same
    ended: list[float] = []

    async def wait() -> None:
        await count.wait_none()
        ended.append(trio.current_time())

    start = trio.current_time()
    for done in (0, 2):  # the second round finds no event left set by the first
        count.enter()
        with Working(count):
            assert count.value == 2
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            nursery.start_soon(wait)  # two waiters share the one event
            await trio.sleep(3)
            assert len(ended) == done  # still waiting: one is in flight
            count.leave()
        assert count.value == 0
    assert ended == [start + 3, start + 3, start + 6, start + 6]


async def test_a_take_under_way_is_waited_for_but_not_counted(autojump_clock: Any) -> None:
    count = InFlight()
    ended: list[float] = []

    async def wait() -> None:
        await count.wait_none()
        ended.append(trio.current_time())

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        with Taking(count):
            assert count.value == 0  # no turn
            nursery.start_soon(wait)
            await trio.sleep(2)
            assert ended == []  # but a drain waits for it
            count.enter()  # it found one: a turn, counted before the take ends
        await trio.sleep(3)
        assert ended == []
        count.leave()
    async with trio.open_nursery() as nursery:
        count.begin_take()  # and a turn's end alone does not end a drain while a take runs
        nursery.start_soon(wait)
        count.enter()
        count.leave()
        await trio.sleep(1)
        assert len(ended) == 1
        count.end_take()
    assert ended == [start + 5, start + 6]


async def test_wait_drained_waits_for_a_stop(autojump_clock: Any) -> None:
    scheduler, _, _, _ = rig(external_clock=True)
    drained: list[float] = []

    async def wait() -> None:
        await scheduler.wait_drained()
        drained.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        start = trio.current_time()
        nursery.start_soon(wait)
        await scheduler.fire("hourly", at(10))
        await trio.sleep(5)
        assert drained == []  # nothing in flight, but no stop yet
        scheduler.stop(30)
    assert drained == [start + 5]


# -- reloads ---------------------------------------------------------------------------------


async def test_paused_is_a_read_begun_after_it_was_asked(autojump_clock: Any) -> None:
    # A read under way since before a pause was written answers without it: a resume over
    # HTTP that asked then said "not paused", wrote nothing, and left the routine paused.
    class Slow(MemoryStore):
        hold: trio.Event | None = None

        async def paused(self) -> frozenset[str]:
            names = frozenset(self.paused_routines)  # as the store was when the read began
            if self.hold is not None:
                await self.hold.wait()
            return names

    store = Slow()
    scheduler, _, _, wall = rig(store=store, external_clock=True)
    hold = store.hold = trio.Event()
    answers: list[frozenset[str]] = []

    async def ask() -> None:
        answers.append(await scheduler.paused())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(scheduler._parts.calls.read_paused)  # a fire's, say: under way
        await trio.sleep(1)
        await store.set_paused("hourly", True, wall())
        nursery.start_soon(ask)
        await trio.sleep(1)
        store.hold = None
        hold.set()
    assert answers == [frozenset({"hourly"})]


def test_changes_are_true_when_anything_was_added_changed_or_removed() -> None:
    assert [
        bool(RoutineChanges(added=("a",))),
        bool(RoutineChanges(changed=("a",))),
        bool(RoutineChanges(removed=("a",))),
        bool(RoutineChanges(kept=("a",))),
        bool(RoutineChanges()),
    ] == [True, True, True, False, False]


async def test_an_update_logs_one_summary_of_what_changed(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    a, b, c, d = (Routine(name=n, prompt="p", cron="0 9 * * *") for n in "abcd")
    scheduler, _, _, _ = rig(a, b, c)
    scheduler.update_routines([attrs.evolve(a, prompt="q"), d, Routine(name="e", prompt="p")])
    scheduler.update_routines([attrs.evolve(a, prompt="r")])
    assert messages(caplog, logging.INFO) == [
        "routines updated: added d, e; changed a; removed b, c",
        "routines updated: changed a; removed d, e",
    ]


async def test_a_reload_that_changes_nothing_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "hourly.md").write_text("---\ncron: 0 * * * *\n---\nCheck the queue.\n")
    scheduler, _, _, _ = rig()
    changes = await scheduler.reload_routines(tmp_path)
    assert not changes
    assert messages(caplog, logging.INFO) == ["reload: no routine changed"]


async def test_a_reload_of_an_unreadable_directory_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler, _, _, _ = rig()
    (tmp_path / "file").write_text("")
    await scheduler.reload_routines(tmp_path / "file")
    (error,) = messages(caplog, logging.ERROR)
    assert error.startswith("reload: ")
    assert error.endswith(" — the routines loaded before keep running")
    assert str(tmp_path / "file") in error


# -- the clock watch -------------------------------------------------------------------------


async def test_clock_jumps_are_counted_and_told_by_direction(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # No cron loop: only the wake loop's polls look, once a minute (at 60, 120, ... s); each
    # jump falls between two polls.
    manual = Routine(name="manual", prompt="m")
    scheduler, _, _, wall = rig(manual, poll_interval=60, jump_threshold=0.5)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        wall.jump(timedelta(seconds=0.75))
        await trio.sleep(90)
        wall.jump(timedelta(seconds=10))
        await trio.sleep(60)
        wall.jump(timedelta(seconds=-0.5))  # exactly the threshold: not a jump
        await trio.sleep(60)
        wall.jump(timedelta(hours=-2))
        await trio.sleep(60)
        scheduler.stop()
    assert scheduler.statistics().clock_jumps == 3
    assert messages(caplog, logging.WARNING) == [
        "the wall clock jumped forward by 1s — slots are re-read from the new time",
        "the wall clock jumped forward by 10s — slots are re-read from the new time",
        "the wall clock jumped backward by 2h — slots are re-read from the new time",
    ]


# -- the wake loop and its store calls -------------------------------------------------------


async def test_a_busy_wake_up_whose_re_queue_never_answers_is_logged_whole(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = Recording()
    request = WakeupRequest(session="s", prompt="p", fire_at=T0)
    wakeup = await store.add_wakeup(request, T0 - timedelta(minutes=2))
    store.hang("defer_wakeup")
    scheduler, agent, _, _ = rig(store=store, poll_interval=60)
    agent.default = Busy()
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(30)
        scheduler.stop()
    # Not offered again (it may be back, and would then be there twice): named whole.
    assert messages(caplog, logging.ERROR) == [
        f"wake {wakeup.id[:8]}: session busy; its return is not confirmed (could not re-queue "
        f"wake-up {wakeup.id}: {NO_ANSWER}; it may be made): {dumps(wakeup_to_json(wakeup))}"
    ]


async def test_a_boot_whose_resume_read_never_answers_fails_naming_it(
    autojump_clock: Any,
) -> None:
    store = Recording()
    await store.claim("hourly", at(8), at(8))
    await store.settle("hourly", at(8), Outcome.COMPLETED, 1)
    store.hang("resumed_at")
    scheduler, agent, _, _ = rig(store=store, wakeups=False)
    with pytest.raises(StateFault) as caught:
        await scheduler.run()
    assert str(caught.value) == f"the resume of 'hourly' is unreadable: {NO_ANSWER}"
    assert agent.turns == []


# -- the shared state: names, the grid, the clock --------------------------------------------


async def test_an_unknown_routine_is_named_cut_short_with_the_others(autojump_clock: Any) -> None:
    scheduler, _, _, _ = rig()
    long_name = "x" * 70
    with pytest.raises(UnknownRoutine) as some:
        await scheduler.fire(long_name, at(9))
    scheduler.update_routines([])
    with pytest.raises(UnknownRoutine) as none:
        await scheduler.run_now("hourly")
    assert str(some.value) == f"unknown routine {'x' * 64!r} (available: hourly)"
    assert str(none.value) == "unknown routine 'hourly' (available: (none))"


def test_the_busy_reason_names_at_most_64_characters_of_the_routine() -> None:
    assert busy_reason("y" * 70) == (
        f'another turn in the session of "{"y" * 64}" is still running (its last, a run or a '
        "wake-up) — this occurrence is skipped, "
        "the next fires per cron"
    )
    assert busy_reason("y" * 70, "done already", on_cron=False) == (
        f'the agent answered busy for "{"y" * 64}" — this occurrence is skipped (done already)'
    )


async def test_the_grid_is_the_routines_own_zone_and_hash(autojump_clock: Any) -> None:
    report = Routine(name="report", prompt="p", cron="H 9 * * *", tz="Europe/Berlin")
    scheduler, agent, _, _ = rig(report)
    scheduler.now = WallClock(at(12, day=8))
    result = await scheduler.fire("report", at(7, 31, day=8))  # 09:31 in Berlin
    assert result.claimed
    with pytest.raises(NotOnGrid):
        await scheduler.fire("report", at(9, 31, day=8))  # 09:31 in UTC
    with pytest.raises(NotOnGrid):  # the first instant a datetime can hold
        await scheduler.fire("report", datetime.min.replace(tzinfo=UTC))
    assert len(agent.turns) == 1


def test_the_system_clock_is_aware_utc() -> None:
    now = system_now()
    assert now.tzinfo is UTC
    assert abs(now - datetime.now(UTC)) < timedelta(minutes=1)


async def test_a_wake_up_poll_the_store_never_answers_is_logged_whole(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = Recording()
    store.hang("take_due_wakeup")
    scheduler, _, _, _ = rig(store=store, poll_interval=60)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(6)
        scheduler.stop()
    assert messages(caplog, logging.ERROR) == [
        f"wake-up poll failed (continuing next poll): could not take a due wake-up: {NO_ANSWER}"
    ]


async def test_a_wake_up_poll_a_stop_ends_says_so_and_no_next_poll(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = Recording()
    store.hang("take_due_wakeup")
    scheduler, _, _, _ = rig(store=store, poll_interval=60, store_timeout=30)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(1)  # the take is waiting
        scheduler.stop(1)  # its bound: the grace plus 2 s
    assert messages(caplog, logging.ERROR) == []
    (said,) = messages(caplog, logging.WARNING)
    assert said.startswith("wake-up poll ended by the stop: could not take a due wake-up: ")


class SlowTake(Recording):
    """A store whose every take of a due wake-up takes 3 s."""

    async def take_due_wakeup(self, now: datetime) -> Any:
        await trio.sleep(3)
        return await super().take_due_wakeup(now)


async def test_a_drain_begun_during_a_wake_up_take_waits_for_that_wake_ups_turn(
    autojump_clock: Any,
) -> None:
    store = SlowTake()
    await store.add_wakeup(
        WakeupRequest(session="s", prompt="p", fire_at=T0), T0 - timedelta(minutes=2)
    )
    scheduler, agent, _, _ = rig(store=store, store_timeout=30.0)
    agent.default = Complete(duration=10)
    drained: list[float] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        start = trio.current_time()
        await trio.sleep(1)  # the poll's take is under way
        scheduler.stop(60)

        async def drain() -> None:
            await scheduler.wait_drained()
            drained.append(trio.current_time() - start)

        nursery.start_soon(drain)
    assert agent.sessions() == ["s"]  # taken, so it ran, stop or not
    assert drained == [13]  # its turn's end (3 s of take, 10 of turn), not the stop's instant


async def test_a_wake_up_take_is_no_turn_in_flight_but_its_wake_ups_turn_is(
    autojump_clock: Any,
) -> None:
    # /healthz and the heartbeat report turns: a poll under way is none, whatever it finds.
    store = SlowTake()
    scheduler, agent, _, _ = rig(store=store, poll_interval=60)
    agent.default = Complete(duration=10)
    samples: list[int] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(1)  # the first poll's take is under way, and will find nothing
        samples.append(scheduler.statistics().in_flight)
        await trio.sleep(4)
        await store.add_wakeup(
            WakeupRequest(session="s", prompt="p", fire_at=T0), T0 - timedelta(minutes=2)
        )
        for _ in range(90):  # the next poll: 3 s of take, then a turn of 10
            await trio.sleep(1)
            samples.append(scheduler.statistics().in_flight)
        scheduler.stop()
    assert agent.sessions() == ["s"]
    assert [value for value, _ in itertools.groupby(samples)] == [0, 1, 0]
    assert samples.count(1) in (9, 10)  # the turn, never the take before it


async def test_a_drain_begun_during_a_take_that_finds_nothing_waits_for_its_end(
    autojump_clock: Any,
) -> None:
    scheduler, _, _, _ = rig(store=SlowTake(), poll_interval=60)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        start = trio.current_time()
        await trio.sleep(1)  # the poll's take is under way
        scheduler.stop(60)
        await scheduler.wait_drained()
        drained = trio.current_time() - start
    assert drained == 3  # the take's end


async def test_a_wake_loop_that_fired_restarts_after_the_first_back_off(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = Recording()
    request = WakeupRequest(session="s", prompt="p", fire_at=T0)
    await store.add_wakeup(request, T0 - timedelta(minutes=2))
    scheduler, agent, _, _ = rig(store=store, poll_interval=60)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(1)
        store.fail("take_due_wakeup", RuntimeError("bug"), times=1)
        await trio.sleep(70)
        scheduler.stop()
    assert agent.sessions() == ["s"]
    assert messages(caplog, logging.ERROR) == [
        "wake-up poll: stopped unexpectedly: RuntimeError: bug — restarting in 1s (restart 1)"
    ]


async def test_turns_in_flight_are_counted_and_their_scopes_let_go(autojump_clock: Any) -> None:
    scheduler, agent, _, _ = rig(HOURLY, Routine(name="other", prompt="o", cron="0 * * * *"))
    agent.default = Complete(duration=10)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await scheduler.start_run("hourly")
        await scheduler.start_run("other")
        assert scheduler.statistics().in_flight == 2
        await trio.sleep(11)
        assert scheduler.statistics().in_flight == 0
        scheduler.stop()
    assert scheduler._parts.grace.scopes == set()  # a stop has no ended turn's scope to reach


def test_a_scheduler_refuses_two_routines_of_one_name_naming_it() -> None:
    twins = [Routine(name="twin", prompt="a"), Routine(name="twin", prompt="b")]
    with pytest.raises(InvalidRoutine) as caught:
        Scheduler(agent=ScriptedAgent(), store=Recording(), routines=twins)
    assert str(caught.value) == "two routines are named 'twin'"


# -- the wake-up calls and fire() through the Scheduler ----------------------------------------


async def test_the_schedulers_wakeup_calls_pass_every_argument_on(autojump_clock: Any) -> None:
    scheduler, _, store, _ = rig()
    at_noon = await scheduler.add_wakeup("chat:1", "noon", fire_at=at(12))
    assert at_noon.fire_at == at(12)
    zoned = await scheduler.add_wakeup("chat:2", "daily", cron="0 9 * * *", tz="Asia/Kolkata")
    assert (zoned.cron, zoned.tz) == ("0 9 * * *", "Asia/Kolkata")
    assert await scheduler.list_wakeups("chat:1") == [at_noon]
    assert await scheduler.list_wakeups() == [at_noon, zoned]
    assert await scheduler.remove_wakeup(at_noon.id, "chat:2") is False  # another session's
    assert await scheduler.remove_wakeup(at_noon.id, "chat:1") is True
    assert await store.list_wakeups() == [zoned]


async def test_fire_reports_its_claim_through_nursery_start(autojump_clock: Any) -> None:
    scheduler, agent, store, _ = rig(external_clock=True)
    agent.default = Complete(duration=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        claim = await nursery.start(scheduler.fire, "hourly", at(10))
        assert claim.taken
        assert (await store.history("hourly"))[0].outcome is None  # reported before its turn
        await trio.sleep(2)
        scheduler.stop()
    assert (await store.history("hourly"))[0].outcome is Outcome.COMPLETED


async def test_the_scheduler_keeps_its_settings_and_names_its_claims_by_the_replica_given(
    autojump_clock: Any,
) -> None:
    scheduler, _, store, _ = rig(
        replica="web-1", max_wait=600, jump_threshold=2, poll_interval=15, store_timeout=3
    )
    assert (scheduler.replica, scheduler.max_wait, scheduler.jump_threshold) == ("web-1", 600, 2)
    assert (scheduler.poll_interval, scheduler.store_timeout) == (15, 3)
    await scheduler.fire("hourly", at(9))
    assert [f.replica for f in await store.history("hourly")] == ["web-1"]
    generated, _, _, _ = rig()
    assert generated.replica.startswith(default_replica())  # made up when none is given


async def test_a_run_whose_session_the_store_cannot_hold_raises_at_once_running_nothing(
    autojump_clock: Any,
) -> None:
    # Not a failed turn: none ran (an HTTP caller gets 503 and may retry, not "ran": true).
    scheduler, agent, store, _ = rig()
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)  # joined: the next hold asked for fails
        store.fail("take", StateFault("disk busy"), times=1)
        with pytest.raises(StateFault) as raised:
            await scheduler.run_now("hourly")
        scheduler.stop(0)
    assert str(raised.value) == "could not hold the session of 'hourly': disk busy"
    assert agent.turns == []


async def test_a_run_started_whose_session_the_store_does_not_hold_in_time_says_so(
    autojump_clock: Any,
) -> None:
    scheduler, agent, store, _ = rig()
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        store.hang("take")
        with pytest.raises(StateFault) as raised:
            await scheduler.start_run("hourly")
        scheduler.stop(0)
    assert str(raised.value) == f"could not hold the session of 'hourly': {NO_ANSWER}"
    assert agent.turns == []


def test_a_process_names_its_first_scheduler_host_pid_and_numbers_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(state, "_INSTANCES", itertools.count(1))  # as a new process's count
    assert [new_replica_id() for _ in range(3)] == [
        default_replica(),
        f"{default_replica()}.2",
        f"{default_replica()}.3",
    ]


def test_a_claim_whose_parameters_cannot_be_read_is_given_no_replica() -> None:
    # A store's claim written in C, say: no keyword it may not take is passed to it.
    assert takes_keyword(min, "replica") is False
    assert takes_keyword(lambda routine, slot, fired_at, **options: None, "replica") is True


async def test_a_turn_ended_for_a_lost_presence_says_so_once(autojump_clock: Any) -> None:
    grace = Grace()
    with grace.turn_scope() as scope:
        grace.end_lost()
        await trio.sleep(1)
    assert grace.was_lost(scope) is True
    assert grace.was_lost(scope) is False  # asked once, as the turn ends: then forgotten


class WithoutReplicas(MemoryStore):
    """A store with no ``join``: its holds exclude within the process (no presence to
    guard, so nothing awaited after the turn)."""

    join = None  # type: ignore[assignment]


@pytest.mark.parametrize("store", [MemoryStore, WithoutReplicas])
async def test_a_run_whose_caller_was_cancelled_meanwhile_raises_once_its_turn_ended(
    autojump_clock: Any, store: type[MemoryStore]
) -> None:
    # The turn is shielded; its caller's cancel is not swallowed: it is heard after it.
    scheduler, agent, _, _ = rig(store=store())
    agent.script(Complete(duration=5), session="routine:hourly")
    with trio.move_on_after(1) as cancelled:
        await scheduler.run_now("hourly")
    assert cancelled.cancelled_caught
    assert trio.current_time() == 5.0  # the turn ran its whole length
    assert len(agent.turns) == 1
