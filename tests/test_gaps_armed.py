"""No silent gaps, the two last holes: a routine that never fired, and a store that did not
answer a claim.

Under virtual time: a routine armed, then no scheduler (or a paused routine) before its first
slot, has its passed-over slots recorded at the next boot from when it was first armed; a
slot whose claim the store did not answer is a ``store`` gap once the store answers again,
unless its claim was made all the same.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_routines import Fire, Gap, GapReason, Outcome, Routine, Scheduler, StateFault
from trio_routines.cli import main
from trio_routines.gaps import add_gap, unfired_gaps
from trio_routines.http import api
from trio_routines.http.render import describe
from trio_routines.http.views import timeline
from trio_routines.records import ClaimResult
from trio_routines.stores import DirectoryStore
from trio_routines.testing import Complete, MemoryStore, ScriptedAgent, WallClock

MINUTE = timedelta(minutes=1)
T0 = datetime(2026, 7, 7, 23, 0, tzinfo=UTC)
EVERY_TEN = Routine(name="r", prompt="go", cron="*/10 * * * *")
EVERY_MINUTE = Routine(name="r", prompt="go", cron="* * * * *")


def at(minute: int, second: int = 0) -> datetime:
    return T0 + minute * MINUTE + timedelta(seconds=second)


def gap(first: int, last: int, reason: GapReason, count: int | None = None) -> Gap:
    return Gap(at(first), at(last), count if count is not None else last - first + 1, reason)


def scheduler(
    store: MemoryStore, wall: WallClock, routine: Routine = EVERY_TEN
) -> tuple[Scheduler, ScriptedAgent]:
    agent = ScriptedAgent(wall=wall)
    return Scheduler(agent=agent, store=store, routines=[routine], now=wall, wakeups=False), agent


async def run_until(sched: Scheduler, wall: WallClock, when: datetime) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(sched.run)
        await trio.sleep((when - wall()).total_seconds())
        sched.stop()


# --- the pure rules --------------------------------------------------------------------------


def test_a_routine_that_never_fired_is_down_or_paused_from_when_it_was_armed() -> None:
    cron = "*/10 * * * *"
    down = unfired_gaps(cron, None, "r", accounted=at(0, 30), now=at(45, 30))
    assert down == (gap(10, 40, GapReason.DOWN, 4),)
    paused = unfired_gaps(cron, None, "r", accounted=at(0, 30), now=at(45, 30), paused=True)
    assert paused == (gap(10, 40, GapReason.PAUSED, 4),)
    since = {"paused": True, "paused_since": at(20)}  # paused at 23:20 exactly
    assert unfired_gaps(cron, None, "r", accounted=at(0, 30), now=at(45, 30), **since) == (
        gap(10, 10, GapReason.DOWN, 1),
        gap(20, 40, GapReason.PAUSED, 3),
    )
    resumed = unfired_gaps(cron, None, "r", accounted=at(0, 30), now=at(45, 30), resumed=at(25))
    assert resumed == (gap(10, 20, GapReason.PAUSED, 2), gap(30, 40, GapReason.DOWN, 2))
    assert unfired_gaps(cron, None, "r", accounted=at(0, 30), now=at(9)) == ()


def test_a_store_gap_recorded_late_takes_its_place_in_slot_order() -> None:
    later = gap(5, 7, GapReason.OVERLAP)
    assert add_gap([later], gap(2, 3, GapReason.STORE)) == [gap(2, 3, GapReason.STORE), later]
    assert add_gap([later], gap(6, 6, GapReason.STORE)) is None  # covered already
    assert add_gap([later], gap(2, 3, GapReason.DOWN)) is None  # only store gaps come late
    full = [gap(n, n, GapReason.OVERLAP) for n in range(10, 13)]
    assert add_gap(full, gap(2, 2, GapReason.STORE), keep=3) is None  # older than all kept


# --- first armed: a routine that never fired -------------------------------------------------


async def test_a_routine_armed_then_down_before_its_first_slot_has_a_down_gap(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    wall = WallClock(at(0, 30))
    sched, _ = scheduler(store, wall)
    await run_until(sched, wall, at(5))  # armed at 23:00:30, stopped before 23:10
    assert store.armed == {"r": at(0, 30)}
    assert await store.history("r") == []
    wall.set(at(45, 30))  # back at 23:45:30: 23:10, 23:20, 23:30, 23:40 passed
    sched, agent = scheduler(store, wall)
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        await run_until(sched, wall, at(50, 30))
    assert await store.gaps("r") == [gap(10, 40, GapReason.DOWN, 4)]
    # Never back-fired (a routine that never fired is not caught up); the next slot fires.
    assert [t.wall for t in agent.turns] == [at(50)]
    assert [f.slot for f in await store.history("r")] == [at(50)]
    assert dict(sched.metrics.missed) == {("r", "down"): 4}
    assert store.armed == {"r": at(0, 30)}  # never moved
    assert "r: missed 4 slots" in caplog.text
    # A third boot accounts from the claim, as before: nothing more is recorded.
    wall.set(at(52))
    sched, _ = scheduler(store, wall)
    await run_until(sched, wall, at(53))
    assert await store.gaps("r") == [gap(10, 40, GapReason.DOWN, 4)]


async def armed_then_paused(since: datetime | None) -> tuple[MemoryStore, WallClock]:
    """A store whose routine was armed at 23:00:30 (and never fired), then paused (from the
    command line, at ``since`` when given) while no scheduler ran; the wall at 23:25:30."""
    store = MemoryStore()
    wall = WallClock(at(0, 30))
    sched, _ = scheduler(store, wall)
    await run_until(sched, wall, at(5))
    await store.set_paused("r", True, since)
    wall.set(at(25, 30))
    return store, wall


async def test_a_routine_paused_before_its_first_slot_has_a_paused_gap(
    autojump_clock: Any,
) -> None:
    store, wall = await armed_then_paused(None)
    sched, agent = scheduler(store, wall)
    await run_until(sched, wall, at(31))
    # 23:10 and 23:20 at the boot, 23:30 refused by the loop (a record of its own, as for a
    # routine with claims).
    assert await store.gaps("r") == [
        gap(10, 20, GapReason.PAUSED, 2),
        gap(30, 30, GapReason.PAUSED),
    ]
    assert agent.turns == []


async def test_a_routine_that_never_fired_missed_slots_before_its_pause_down(
    autojump_clock: Any,
) -> None:
    store, wall = await armed_then_paused(at(15))
    sched, agent = scheduler(store, wall)
    await run_until(sched, wall, at(26))
    assert await store.gaps("r") == [gap(10, 10, GapReason.DOWN), gap(20, 20, GapReason.PAUSED)]
    assert agent.turns == []


async def test_the_boot_counts_from_the_newest_gap_of_a_routine_that_never_fired(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    store.armed["r"] = at(0, 30)
    await store.record_gap("r", gap(10, 20, GapReason.PAUSED, 2))  # refused by a loop
    wall = WallClock(at(35))
    sched, _ = scheduler(store, wall)
    await run_until(sched, wall, at(36))
    assert await store.gaps("r") == [
        gap(10, 20, GapReason.PAUSED, 2),
        gap(30, 30, GapReason.DOWN),
    ]


async def test_a_store_without_the_record_arms_it_now_and_records_nothing(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()  # a routine that existed before first-armed records: none kept
    wall = WallClock(at(45, 30))
    sched, agent = scheduler(store, wall)
    await run_until(sched, wall, at(50, 30))
    assert await store.gaps("r") == []
    assert store.armed == {"r": at(45, 30)}
    assert [t.wall for t in agent.turns] == [at(50)]


async def test_a_store_fault_on_first_armed_is_logged_and_the_boot_goes_on(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    store.fail("first_armed", StateFault("disk full"))
    wall = WallClock(at(5))
    sched, agent = scheduler(store, wall)
    await run_until(sched, wall, at(10, 30))
    assert [t.wall for t in agent.turns] == [at(10)]
    assert "not accounted for: disk full" in caplog.text


async def test_a_routine_added_by_a_reload_is_recorded_as_armed(autojump_clock: Any) -> None:
    store = MemoryStore()
    wall = WallClock(at(0, 30))
    sched, _ = scheduler(store, wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(sched.run)
        await trio.sleep(60)
        sched.update_routines([EVERY_TEN, Routine(name="new", prompt="go", cron="0 9 * * *")])
        await trio.sleep(1)
        sched.stop()
    assert store.armed == {"r": at(0, 30), "new": at(1, 30)}


# --- store gaps: the slots the store did not answer ------------------------------------------


async def test_slots_the_store_did_not_answer_become_a_store_gap_once_it_answers(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    store.fail("claim", StateFault("disk full"), times=2)  # 23:01 and 23:02
    wall = WallClock(at(0, 30))
    sched, agent = scheduler(store, wall, EVERY_MINUTE)
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        await run_until(sched, wall, at(4, 30))
    assert await store.gaps("r") == [gap(1, 2, GapReason.STORE)]
    # The gap neither fires a slot nor makes a later one stale: 23:03 and 23:04 fire.
    assert [f.slot for f in await store.history("r")] == [at(3), at(4)]
    assert [t.wall for t in agent.turns] == [at(3), at(4)]
    assert dict(sched.metrics.missed) == {("r", "store"): 2}
    assert (
        "the store failed or did not answer when the slot was due (in its history as a gap, "
        "reason store)" in caplog.text
    )


async def test_a_store_gap_that_cannot_be_written_yet_waits_for_the_next_answer(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    store.fail("claim", StateFault("disk full"), times=1)  # 23:01
    store.fail("record_gap", StateFault("still full"), times=1)  # at 23:02's answer
    wall = WallClock(at(0, 30))
    sched, _ = scheduler(store, wall, EVERY_MINUTE)
    await run_until(sched, wall, at(3, 30))
    assert await store.gaps("r") == [gap(1, 1, GapReason.STORE)]
    assert [f.slot for f in await store.history("r")] == [at(2), at(3)]
    assert dict(sched.metrics.missed) == {("r", "store"): 1}


class SlowGaps(MemoryStore):
    """A store whose gap writes take 25 seconds (within the store's deadline)."""

    async def record_gap(self, routine: str, gap: Gap, *, extends: datetime | None = None) -> bool:
        await trio.sleep(25)
        return await super().record_gap(routine, gap, extends=extends)


async def test_a_slot_that_passes_while_a_store_gap_is_written_is_passed_over_not_run_late(
    autojump_clock: Any,
) -> None:
    # 23:01's claim fails; 23:02's turn takes 40 s, and then 23:01's gap takes until 23:03:05
    # to write, so 23:03 came meanwhile: the loop reads the clock again after the write and
    # records 23:03 as passed over, rather than take the settle's end (23:02:40) for now and
    # run 23:03 late.
    store = SlowGaps()
    store.fail("claim", StateFault("disk full"), times=1)
    wall = WallClock(at(0, 30))
    sched, agent = scheduler(store, wall, EVERY_MINUTE)
    agent.script(Complete(duration=40))
    await run_until(sched, wall, at(5, 30))
    assert [t.wall for t in agent.turns] == [at(2), at(4), at(5)]
    assert [f.slot for f in await store.history("r")] == [at(2), at(4), at(5)]
    assert await store.gaps("r") == [gap(1, 1, GapReason.STORE), gap(3, 3, GapReason.OVERLAP)]


class SlowSettles(MemoryStore):
    """A store whose settles take 25 seconds (within the store's deadline)."""

    async def settle(self, routine: str, slot: datetime, *args: Any, **kwargs: Any) -> bool:
        await trio.sleep(25)
        return await super().settle(routine, slot, *args, **kwargs)


async def test_a_slot_that_passes_while_the_turn_before_it_settles_is_passed_over(
    autojump_clock: Any,
) -> None:
    # 23:01's turn takes 40 s and its settle 25 s: 23:02 came before the settle returned, so
    # the loop takes the settle's end for now and records 23:02 as passed over (taking the
    # turn's end instead would run 23:02 late).
    store = SlowSettles()
    wall = WallClock(at(0, 30))
    sched, agent = scheduler(store, wall, EVERY_MINUTE)
    agent.script(Complete(duration=40))
    await run_until(sched, wall, at(4, 30))
    assert [t.wall for t in agent.turns] == [at(1), at(3), at(4)]
    assert await store.gaps("r") == [gap(2, 2, GapReason.OVERLAP)]


class LostAnswers(MemoryStore):
    """A store that makes the claims of ``lost`` and then fails to say so (a write given up)."""

    def __init__(self, lost: set[datetime], failing: set[datetime]) -> None:
        super().__init__()
        self.lost, self.failing = lost, failing

    async def claim(
        self, routine: str, slot: datetime, fired_at: datetime, *, replica: str | None = None
    ) -> ClaimResult:
        if slot in self.failing:
            raise StateFault("no answer")
        result = await super().claim(routine, slot, fired_at, replica=replica)
        if slot in self.lost:
            raise StateFault("no answer")
        return result


async def test_a_claim_made_though_its_answer_was_lost_is_not_also_a_gap(
    autojump_clock: Any,
) -> None:
    # 23:01 and 23:03 fail without a claim; 23:02's claim is made, its answer lost.
    store = LostAnswers(lost={at(2)}, failing={at(1), at(3)})
    wall = WallClock(at(0, 30))
    sched, agent = scheduler(store, wall, EVERY_MINUTE)
    await run_until(sched, wall, at(4, 30))
    assert await store.gaps("r") == [gap(1, 1, GapReason.STORE), gap(3, 3, GapReason.STORE)]
    assert [f.slot for f in await store.history("r")] == [at(2), at(4)]
    assert [t.wall for t in agent.turns] == [at(4)]  # 23:02's turn never ran
    assert dict(sched.metrics.missed) == {("r", "store"): 2}
    lost, fired = await store.history("r")
    assert lost.outcome in (None, Outcome.INTERRUPTED)  # the open-claim reconcile's
    assert fired.outcome is Outcome.COMPLETED


# --- shown: history (text, JSON, HTTP) and the status page -----------------------------------


def test_a_store_gap_is_shown_by_history_the_api_and_the_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"

    async def seed() -> None:
        async with DirectoryStore(state) as store:
            await store.claim("r", at(0), at(0))
            await store.settle("r", at(0), Outcome.COMPLETED, 5)
            await store.claim("r", at(3), at(3))
            await store.settle("r", at(3), Outcome.COMPLETED, 5)
            await store.record_gap("r", gap(1, 2, GapReason.STORE))

    trio.run(seed)
    assert main(["history", "r", "--state", str(state)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].endswith(
        "missed 2 slots 2026-07-07T23:01Z–2026-07-07T23:02Z: the store failed or did not "
        "answer when the slot was due"
    )
    assert main(["history", "r", "--state", str(state), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[1] == {
        "gap": {
            "from": "2026-07-07T23:01:00.000Z",
            "to": "2026-07-07T23:02:00.000Z",
            "count": 2,
            "reason": "store",
        }
    }

    async def over_http() -> list[Any]:
        async with DirectoryStore(state) as store:
            sched = Scheduler(agent=ScriptedAgent(), store=store, routines=[EVERY_MINUTE])
            body: list[Any] = (await api.history(sched, "r")).body
            return body

    assert trio.run(over_http)[1] == {
        "gap": {
            "from": "2026-07-07T23:01:00.000Z",
            "to": "2026-07-07T23:02:00.000Z",
            "count": 2,
            "reason": "store",
        }
    }
    fires = [Fire(at(0), at(0), Outcome.COMPLETED, 1), Fire(at(3), at(3), Outcome.COMPLETED, 1)]
    marks, _ = timeline([at(n) for n in range(4)], fires, at(10), [gap(1, 2, GapReason.STORE)])
    assert "missed (store: the store failed or did not answer when the slot was due)" in describe(
        marks[1]
    )
