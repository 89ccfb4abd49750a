"""Pins ``scheduler/unanswered.py``: how a loop keeps the slots the store did not answer (runs
of consecutive slots of the routine's cron, in its zone) and how it records them once the
store answers again (a run refused as a whole has its unclaimed slots recorded; a run the
store still cannot take stays, with one warning)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from scheduler_rig import part_rig

from trio_routines import Routine
from trio_routines.cron import next_run
from trio_routines.errors import StateFault
from trio_routines.records import Gap, GapReason
from trio_routines.scheduler.calls import StoreCalls
from trio_routines.scheduler.gaps import GapRecording
from trio_routines.scheduler.unanswered import KEEP_RUNS, note_unanswered, record_unanswered
from trio_routines.testing import MemoryStore

# 09:30 in Kolkata (UTC+05:30, no daylight saving) is 04:00 UTC: read in UTC, the cron's
# next slot after one of them would be 09:30 UTC of the same day.
KOLKATA = Routine(name="chai", prompt="p", cron="30 9 * * *", tz="Asia/Kolkata")
# Its minute hashed from its name: the name is the cron's seed.
HASHED = Routine(name="chai", prompt="p", cron="H 9 * * *", tz="Asia/Kolkata")


def day(n: int) -> datetime:
    return datetime(2026, 7, n, 4, tzinfo=UTC)


def run(first: int, last: int) -> Gap:
    return Gap(day(first), day(last), last - first + 1, GapReason.STORE)


def hashed_slots(count: int) -> list[datetime]:
    slots = [next_run(HASHED.cron, HASHED.tz, day(1), HASHED.name)]  # type: ignore[arg-type]
    while len(slots) < count:
        slots.append(next_run(HASHED.cron, HASHED.tz, slots[-1], HASHED.name))  # type: ignore[arg-type]
    return slots  # type: ignore[return-value]


def test_consecutive_slots_of_the_routines_zone_make_one_run() -> None:
    runs: tuple[Gap, ...] = ()
    for n in (1, 2, 3):
        runs = note_unanswered(KOLKATA, day(n), runs)
    assert runs == (run(1, 3),)


def test_consecutive_slots_of_a_hashed_cron_make_one_run() -> None:
    first, second = hashed_slots(2)
    runs = note_unanswered(HASHED, second, note_unanswered(HASHED, first, ()))
    assert runs == (Gap(first, second, 2, GapReason.STORE),)


def test_a_slot_after_a_skipped_one_starts_a_run_and_only_the_newest_grows() -> None:
    runs = note_unanswered(KOLKATA, day(1), ())
    runs = note_unanswered(KOLKATA, day(3), runs)  # day 2 was answered
    runs = note_unanswered(KOLKATA, day(4), runs)
    assert runs == (run(1, 1), run(3, 4))


def test_the_oldest_runs_beyond_the_kept_ones_are_forgotten() -> None:
    runs: tuple[Gap, ...] = ()
    for n in range(KEEP_RUNS + 2):  # every other day: no two consecutive
        runs = note_unanswered(KOLKATA, day(1) + timedelta(days=2 * n), runs)
    assert len(runs) == KEEP_RUNS
    assert runs[0].first == day(1) + timedelta(days=4)
    assert runs[-1].first == day(1) + timedelta(days=2 * (KEEP_RUNS + 1))


def parts(store: MemoryStore) -> tuple[GapRecording, StoreCalls]:
    runtime, calls, _ = part_rig(store, now=day(20))
    return GapRecording(store, runtime, calls), calls


class CountingHistory(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.histories = 0

    async def history(self, routine: str) -> Any:
        self.histories += 1
        return await super().history(routine)


async def test_runs_are_recorded_oldest_first_and_none_stays() -> None:
    store = CountingHistory()
    gaps, calls = parts(store)
    assert await record_unanswered(gaps, calls, KOLKATA, (run(1, 2), run(5, 5))) == ()
    assert await store.gaps("chai") == [run(1, 2), run(5, 5)]
    assert store.histories == 0


@pytest.mark.parametrize("claimed", [1, 2, 3])
async def test_a_run_refused_for_a_claim_in_it_records_the_slots_around_the_claim(
    claimed: int,
) -> None:
    # The claim's answer was lost, but the store made it: its slot is no gap.
    store = CountingHistory()
    await store.claim("chai", day(claimed), day(claimed))
    gaps, calls = parts(store)
    assert await record_unanswered(gaps, calls, KOLKATA, (run(1, 3),)) == ()
    expected = {1: [run(2, 3)], 2: [run(1, 1), run(3, 3)], 3: [run(1, 2)]}[claimed]
    assert await store.gaps("chai") == expected
    assert store.histories == 1


async def test_a_refused_run_of_a_hashed_cron_records_its_unclaimed_slots() -> None:
    store = CountingHistory()
    slots = hashed_slots(3)
    await store.claim("chai", slots[0], slots[0])
    gaps, calls = parts(store)
    whole = Gap(slots[0], slots[2], 3, GapReason.STORE)
    assert await record_unanswered(gaps, calls, HASHED, (whole,)) == ()
    assert await store.gaps("chai") == [Gap(slots[1], slots[2], 2, GapReason.STORE)]


async def test_a_refused_run_of_two_slots_is_read_back_too() -> None:
    store = CountingHistory()
    await store.claim("chai", day(1), day(1))
    gaps, calls = parts(store)
    assert await record_unanswered(gaps, calls, KOLKATA, (run(1, 2),)) == ()
    assert await store.gaps("chai") == [run(2, 2)]
    assert store.histories == 1


async def test_a_refused_single_slot_reads_no_history() -> None:
    store = CountingHistory()
    await store.claim("chai", day(1), day(1))
    gaps, calls = parts(store)
    assert await record_unanswered(gaps, calls, KOLKATA, (run(1, 1),)) == ()
    assert await store.gaps("chai") == []
    assert store.histories == 0


class RefusesFrom(MemoryStore):
    """A store that cannot record the gap starting at ``first``."""

    def __init__(self, first: datetime) -> None:
        super().__init__()
        self.first = first

    async def record_gap(self, routine: str, gap: Gap, **options: Any) -> bool:
        if gap.first == self.first:
            raise StateFault("disk full")
        return await super().record_gap(routine, gap, **options)


async def test_a_run_the_store_still_cannot_take_stays_with_those_after_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = RefusesFrom(day(3))
    gaps, calls = parts(store)
    runs = (run(1, 1), run(3, 4), run(6, 6))
    assert await record_unanswered(gaps, calls, KOLKATA, runs) == runs[1:]
    assert await store.gaps("chai") == [run(1, 1)]
    assert [r.getMessage() for r in caplog.records if "recorded yet" in r.getMessage()] == [
        "chai: 2 slots 2026-07-03T04:00:00.000Z to 2026-07-04T04:00:00.000Z the store did not "
        "answer are not recorded yet: disk full"
    ]
    assert [r.levelno for r in caplog.records if "recorded yet" in r.getMessage()] == [
        logging.WARNING
    ]
