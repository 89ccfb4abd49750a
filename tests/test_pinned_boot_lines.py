"""Pins what a boot says and seeds: the line for each routine that missed slots while no
scheduler ran (one slot fired now, the oldest fired once within or without a window, none
fired), and each routine's failure streak and last success as /metrics shows them from the
boot on (read from the history only for a routine whose newest claim failed)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing
from scheduler_rig import T0, at, messages, rig

from trio_routines import Outcome, Routine, StateFault
from trio_routines.cron import next_run
from trio_routines.metrics import Metrics
from trio_routines.replicas import ReplicaInfo, claim_key
from trio_routines.scheduler.boot import BOOT_INTERRUPTED
from trio_routines.scheduler.openclaims import found_by
from trio_routines.scheduler.streaks import Streaks
from trio_routines.testing import Fail, MemoryStore


def routine(name: str, cron: str, catchup: float | None = None) -> Routine:
    return Routine(name=name, prompt="p", cron=cron, catchup=catchup)


async def booted(store: MemoryStore, *routines: Routine, **options: Any) -> Any:
    scheduler, _, _, _ = rig(*routines, store=store, wakeups=False, **options)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        scheduler.stop(0)
    return scheduler


async def test_each_routine_that_missed_slots_says_what_becomes_of_them(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_routines")
    store = MemoryStore()
    every_ten = "*/10 * * * *"
    routines = {
        "single": (routine("single", "0 * * * *"), at(9)),
        "several": (routine("several", every_ten), at(9, 50)),
        "window": (routine("window", every_ten, catchup=900), at(9, 50)),
        # No window: only a slot that is due this very instant (10:30) fires.
        "edge": (routine("edge", every_ten, catchup=0), at(9, 50)),
        "none": (routine("none", "5-55/10 * * * *", catchup=0), at(9, 55)),
    }
    for name, (_, last) in routines.items():
        await store.claim(name, last, last)
        await store.settle(name, last, Outcome.COMPLETED, 5)
    await booted(store, *(r for r, _ in routines.values()))
    lines = [r.getMessage() for r in caplog.records if "claimed by no scheduler" in r.getMessage()]
    four = "4 slots 2026-07-07T10:00:00.000Z to 2026-07-07T10:30:00.000Z"
    assert lines == [
        "single: missed 1 slot 2026-07-07T10:00:00.000Z, claimed by no scheduler — catching it "
        "up now (see `python -m trio_routines history single`)",
        f"several: missed {four}, claimed by no scheduler — catching up the oldest, "
        "2026-07-07T10:00:00.000Z, once; the others are gaps"
        " (see `python -m trio_routines history several`)",
        f"window: missed {four}, claimed by no scheduler — catching up the oldest within the "
        "window, 2026-07-07T10:20:00.000Z, once; the others are gaps"
        " (see `python -m trio_routines history window`)",
        "none: missed 3 slots 2026-07-07T10:05:00.000Z to 2026-07-07T10:25:00.000Z, claimed by no "
        "scheduler — none caught up (catchup none): they are gaps"
        " (see `python -m trio_routines history none`)",
    ]
    # 10:30 is on time, not caught up (it was said "catching up the oldest within the window,
    # 10:30" of four missed): only its three slots before, recorded as missed, are said.
    (edge,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("edge:")]
    assert edge.startswith(
        "edge: missed 3 slots 2026-07-07T10:00:00.000Z to 2026-07-07T10:20:00.000Z"
    )


@pytest.mark.parametrize(("late", "said"), [(0.27, False), (59.9, False), (60, True), (61, True)])
async def test_a_boot_just_after_a_slot_says_nothing_of_a_slot_missed(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture, late: float, said: bool
) -> None:
    # Started a moment after 10:30: its 10:30 is on time (a minute's grace), fired as any
    # loop's, not a slot "missed … caught up now".
    from trio_routines import Scheduler
    from trio_routines.testing import ScriptedAgent, WallClock

    caplog.set_level(logging.INFO, logger="trio_routines")
    store = MemoryStore()
    await store.claim("ontime", at(9, 30), at(9, 30))
    await store.settle("ontime", at(9, 30), Outcome.COMPLETED, 5)
    wall = WallClock(T0 + timedelta(seconds=late))
    scheduler = Scheduler(
        agent=ScriptedAgent(wall=wall),
        store=store,
        routines=[routine("ontime", "30 * * * *")],
        now=wall,
        wakeups=False,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(1)
        scheduler.stop(0)
    lines = [r.getMessage() for r in caplog.records if "claimed by no scheduler" in r.getMessage()]
    assert lines == (
        [
            "ontime: missed 1 slot 2026-07-07T10:30:00.000Z, claimed by no scheduler — "
            "catching it up now (see `python -m trio_routines history ontime`)"
        ]
        if said
        else []
    )
    assert [f.slot for f in await store.history("ontime")] == [at(9, 30), T0]  # fired either way


class CountingHistory(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.histories: list[str] = []

    async def history(self, routine: str) -> Any:
        self.histories.append(routine)
        return await super().history(routine)


async def test_the_boot_seeds_each_routines_failure_streak_and_last_success(
    mock_clock: Any,
) -> None:
    store = CountingHistory()
    hourly = ["streak", "lonely", "healthy", "fresh"]
    outcomes: dict[str, list[tuple[int, Outcome, int | None]]] = {
        "streak": [
            (7, Outcome.COMPLETED, 1500),
            (8, Outcome.FAILED, 9),
            (9, Outcome.INTERRUPTED, None),
        ],
        "lonely": [(8, Outcome.COMPLETED, 5), (9, Outcome.FAILED, 9)],
        "healthy": [(8, Outcome.FAILED, 5), (9, Outcome.COMPLETED, 2000)],
    }
    for name, fires in outcomes.items():
        for hour, outcome, ms in fires:
            await store.claim(name, at(hour), at(hour))
            await store.settle(name, at(hour), outcome, ms)
    store.fail("history", StateFault("unreadable"), routine="lonely")
    scheduler, _, _, _ = rig(  # catchup none: no fire changes the series meanwhile
        *(routine(name, "0 * * * *", catchup=0) for name in hourly), store=store, wakeups=False
    )
    metrics = scheduler._parts.runtime.metrics
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        # The boot seeds from the newest claims alone: no history read before the first slot.
        assert store.histories == []
        assert metrics.failing == {"streak": 1, "lonely": 1, "healthy": 0, "fresh": 0}
        assert metrics.last_success["streak"] == at(9)
        assert scheduler._parts.streaks.waiting == 2
        await trio.testing.wait_all_tasks_blocked()  # the failing ones' histories, read after
        assert scheduler._parts.streaks.waiting == 0
        scheduler.stop(0)
    assert metrics.failing == {"streak": 2, "lonely": 1, "healthy": 0, "fresh": 0}
    assert metrics.last_success == {
        "streak": at(7) + timedelta(milliseconds=1500),
        "lonely": at(9),  # its history unread: the failed claim's slot, the oldest known
        "healthy": at(9) + timedelta(seconds=2),
        "fresh": T0,  # never fired: from the boot on
    }
    assert sorted(store.histories) == ["lonely", "streak"]  # the failing ones only


@pytest.mark.parametrize(
    ("fired_at", "ms"),
    [
        (None, 300_000_000_000_000),  # a duration past the calendar's end
        (None, 10**17),  # past what a timedelta holds
        (datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC), 5),  # the calendar's last day
    ],
    ids=["long", "past-timedelta", "last-day"],
)
async def test_a_stored_duration_past_the_calendar_s_end_seeds_the_claim_s_instant(
    autojump_clock: Any, fired_at: datetime | None, ms: int
) -> None:
    # A state file is not trusted: one hand-edited number must not keep every boot from
    # coming up (it raised OverflowError through the run).
    store = MemoryStore()
    fired = at(9) if fired_at is None else fired_at
    await store.claim("odd", at(9), fired)
    await store.settle("odd", at(9), Outcome.COMPLETED, ms)
    scheduler = await booted(store, routine("odd", "0 * * * *"))
    assert scheduler.booted
    assert scheduler._parts.runtime.metrics.last_success == {"odd": fired}


async def test_the_slots_routines_that_never_fired_passed_are_recorded_each_in_its_zone(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    # Armed two hours before this boot, never fired since. "a" cannot have its resume read:
    # its slots stay unrecorded, with one error, and the routines after it go on.
    names = ["a", "b", "c"]
    assert await store.first_armed(names, T0 - timedelta(hours=2)) == dict.fromkeys(
        names, T0 - timedelta(hours=2)
    )
    store.fail("resumed_at", StateFault("unreadable"), routine="a")
    routines = [
        routine("a", "0 * * * *"),
        Routine(name="b", prompt="p", cron="15 * * * *", tz="Asia/Kathmandu"),  # :30 UTC
        routine("c", "H * * * *"),  # hashed from its name
    ]
    await booted(store, *routines)
    assert await store.gaps("a") == []
    b_gaps = await store.gaps("b")
    assert [(g.first, g.last, g.count) for g in b_gaps] == [(at(9, 30), at(10, 30), 2)]
    slots: list[datetime] = []
    following = next_run("H * * * *", None, T0 - timedelta(hours=2), "c")
    while following is not None and following <= T0:
        slots.append(following)
        following = next_run("H * * * *", None, following, "c")
    assert [(g.first, g.last, g.count) for g in await store.gaps("c")] == [
        (slots[0], slots[-1], len(slots))
    ]
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        "a: the slots it passed over since it was first armed are not recorded: unreadable"
    ]


async def test_a_routine_that_never_fired_and_whose_gaps_are_unreadable_is_left_unrecorded(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    await store.first_armed(["a", "b"], T0 - timedelta(hours=2))
    store.fail("gaps", StateFault("unreadable"), routine="a")
    await booted(store, routine("a", "0 * * * *"), routine("b", "0 * * * *"))  # it goes on
    assert store.gap_records.get("a", []) == []
    assert [(g.first, g.last, g.count) for g in await store.gaps("b")] == [(at(9), at(10), 2)]
    assert messages(caplog, logging.ERROR) == [
        "a: the slots it passed over since it was first armed are not recorded: unreadable"
    ]


async def test_a_routine_that_never_fired_counts_its_slots_before_its_resume_as_paused(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    await store.first_armed(["a"], T0 - timedelta(hours=4))  # 06:30
    await store.set_paused("a", True)
    await store.set_paused("a", False, at=T0 - timedelta(hours=2))  # resumed at 08:30
    await booted(store, routine("a", "0 * * * *"))
    gaps = [(g.first, g.last, g.count, g.reason.value) for g in await store.gaps("a")]
    assert gaps == [(at(7), at(8), 2, "paused"), (at(9), at(10), 2, "down")]


async def test_a_boot_leaves_each_live_open_claim_to_its_replica_and_settles_the_dead_ones(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_routines")
    store = MemoryStore()
    other = await store.join(ReplicaInfo("other", "0.1.0", "host", 7, T0, T0))
    # "a" and "c": claims another replica runs now (one of a scheduler naming no replica);
    # "b" between them: its replica is gone.
    for name, replica in (("a", "other"), ("b", "gone"), ("c", None)):
        await store.claim(name, at(10), at(10), replica=replica)
    assert await other.take([claim_key("a", at(10)), claim_key("c", at(10))]) == [True, True]
    scheduler = await booted(store, *(routine(name, "0 * * * *") for name in "abc"))
    assert [(f.outcome, f.error) for name in "ac" for f in await store.history(name)] == [
        (None, None),
        (None, None),
    ]
    ((outcome, error),) = [(f.outcome, f.error) for f in await store.history("b")]
    assert (outcome, error) == (Outcome.INTERRUPTED, found_by(BOOT_INTERRUPTED, scheduler.replica))
    assert [r.getMessage() for r in caplog.records if "left to it" in r.getMessage()] == [
        "a: slot 2026-07-07T10:00:00.000Z is running on replica other — left to it",
        "c: slot 2026-07-07T10:00:00.000Z is running on replica (unnamed) — left to it",
    ]


async def test_an_external_clocks_boot_names_each_newest_claim_it_could_not_read(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    store.fail("latest_fire", StateFault("unreadable"), routine="a")
    await booted(store, routine("a", "0 * * * *"), external_clock=True)  # the boot goes on
    assert messages(caplog, logging.ERROR) == [
        "a: its newest claim is unreadable, so a fire it left open is not reconciled at this "
        "boot (its fires will report the fault): unreadable"
    ]


async def test_a_boot_after_a_herd_died_reads_no_history_before_its_loops_run(
    mock_clock: Any,
) -> None:
    # Every routine's turn died with its process: the boot records each one interrupted and
    # counts it from the record read back, one failure more; the histories (every retained
    # claim of each) are read once the loops run, and make each streak exact.
    store = CountingHistory()
    names = ["a", "b", "c"]
    await store.claim("a", at(8), at(8))
    await store.settle("a", at(8), Outcome.FAILED, 5)
    await store.claim("b", at(8), at(8))
    await store.settle("b", at(8), Outcome.COMPLETED, 3000)
    for name in names:
        await store.claim(name, at(10), at(10), replica="gone:1")
    scheduler, _, _, _ = rig(
        *(routine(name, "0 * * * *", catchup=0) for name in names), store=store, wakeups=False
    )
    metrics = scheduler._parts.runtime.metrics
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        assert store.histories == []
        assert metrics.failing == {"a": 1, "b": 1, "c": 1}
        assert metrics.last_success == {name: at(10) for name in names}
        await trio.testing.wait_all_tasks_blocked()
        scheduler.stop(0)
    assert sorted(store.histories) == names
    assert metrics.fires == {(name, "interrupted"): 1 for name in names}
    assert metrics.failing == {"a": 2, "b": 1, "c": 1}
    assert metrics.last_success == {"a": at(8), "b": at(8, 0) + timedelta(seconds=3), "c": at(10)}


class HeldHistory(MemoryStore):
    """A store whose history is read when asked, and answered only once ``release`` is set
    (a slow read: what it says is as old as the asking)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = trio.Event()
        self.asked = trio.Event()

    async def history(self, routine: str) -> Any:
        fires = await super().history(routine)
        self.asked.set()
        await self.release.wait()
        return fires


async def test_a_streak_read_while_the_routine_fired_is_left_to_the_fire(
    autojump_clock: Any,
) -> None:
    # The history was read before the routine's next turn completed, and answered after: the
    # fire's series are newer than the read, which must not set the streak back to failing.
    store = HeldHistory()
    for hour in (8, 9):
        await store.claim("r", at(hour), at(hour))
        await store.settle("r", at(hour), Outcome.FAILED, 5)
    scheduler, _, _, _ = rig(  # store calls bounded past the fire: the read waits for it
        routine("r", "35 * * * *", catchup=0), store=store, store_timeout=3600.0
    )
    metrics = scheduler._parts.runtime.metrics
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await store.asked.wait()
        assert metrics.failing == {"r": 1}
        await trio.sleep(5 * 60 + 1)  # 10:35 fires and completes
        assert metrics.failing == {"r": 0}
        store.release.set()
        await trio.testing.wait_all_tasks_blocked()
        assert metrics.failing == {"r": 0}
        assert metrics.last_success["r"] >= at(10, 35)
        scheduler.stop(0)


def test_a_routine_asked_for_twice_is_read_once_armed_if_either_asked_so() -> None:
    streaks = Streaks(None, Metrics())  # type: ignore[arg-type]  # (nothing read here)
    streaks.later("a", armed=False, newest=at(9))
    streaks.later("b", armed=True, newest=at(9))
    streaks.later("b", armed=False, newest=at(10))  # (a watch's count after the boot's, say)
    streaks.later("a", armed=False, newest=at(8))
    assert streaks._waiting == {"a": (False, at(9)), "b": (True, at(10))}
    assert streaks.waiting == 2


class SettledBeforeCounted(HeldHistory):
    """A store whose settle is in the history before the scheduler counts it (the state
    directory writes an outcome, then waits for its flush): the history is read, and
    answered, in between."""

    async def settle(self, routine: str, slot: datetime, *args: Any, **kw: Any) -> bool:
        written = await super().settle(routine, slot, *args, **kw)
        if slot == at(10, 35):
            self.settled.set()
            await self.release.wait()  # the read answers before this settle returns
        return written

    async def history(self, routine: str) -> Any:
        await self.settled.wait()
        fires = await MemoryStore.history(self, routine)
        self.read.set()
        return fires

    def __init__(self) -> None:
        super().__init__()
        self.settled = trio.Event()
        self.read = trio.Event()


async def test_a_streak_read_that_sees_a_fire_not_yet_counted_is_left_to_the_fire(
    autojump_clock: Any,
) -> None:
    # The history holds the 10:35 failure before its fire is counted: set from it, the
    # streak would be 3, and then the fire's own count would make it 4.
    store = SettledBeforeCounted()
    for hour in (8, 9):
        await store.claim("r", at(hour), at(hour))
        await store.settle("r", at(hour), Outcome.FAILED, 5)
    scheduler, agent, _, _ = rig(
        routine("r", "35 * * * *", catchup=0), store=store, store_timeout=3600.0
    )
    agent.default = Fail()
    metrics = scheduler._parts.runtime.metrics
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await store.settled.wait()  # 10:35 failed, written, not yet counted
        await store.read.wait()  # the history read answers (no time passes meanwhile)
        for _ in range(10):
            await trio.lowlevel.checkpoint()  # and its answer is weighed
        store.release.set()
        while not metrics.tally("r"):
            await trio.lowlevel.checkpoint()
        assert metrics.failing == {"r": 2}  # the seed's one, and the fire's
        scheduler.stop(0)


class OddHistories(MemoryStore):
    """``broken``'s history raises a store's bug; ``unreadable``'s a StateFault."""

    async def history(self, routine: str) -> Any:
        if routine == "broken":
            raise RuntimeError("a store's bug")
        if routine == "unreadable":
            raise StateFault("the disk went away")
        return await super().history(routine)


async def test_a_history_that_cannot_be_read_leaves_the_seed_and_says_why(
    mock_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_routines")
    store = OddHistories()
    names = ["broken", "unreadable", "on-demand"]
    for name in names:
        for hour in (8, 9):
            await store.claim(name, at(hour), at(hour))
            await store.settle(name, at(hour), Outcome.FAILED, 5)
        await store.claim(name, at(10), at(10), replica="gone:1")
    routines = [routine(name, "0 * * * *", catchup=0) for name in names[:2]]
    routines.append(Routine(name="on-demand", prompt="p"))  # no cron: its series not armed
    scheduler, _, _, _ = rig(*routines, store=store, wakeups=False)
    metrics = scheduler._parts.runtime.metrics
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.testing.wait_all_tasks_blocked()
        scheduler.stop(0)
    # The seeds stand where the history could not be read; the readable one is exact.
    assert metrics.failing == {"broken": 1, "unreadable": 1, "on-demand": 3}
    assert "on-demand" not in metrics.last_success  # a routine of no cron shows none
    logged = [
        (r.levelno, r.getMessage()) for r in caplog.records if "failure streak" in r.getMessage()
    ]
    assert sorted(logged) == [
        (
            logging.DEBUG,
            "unreadable: the failure streak stays as its newest claim says: the disk went away",
        ),
        (
            logging.ERROR,
            "broken: the history for the failure streak could not be read: RuntimeError: "
            "a store's bug",
        ),
    ]
