"""Pins ``scheduler/gaps.py``: how a gap is said, written, counted and logged (or logged and
counted when it cannot be written), what a loop records after each slot it tried (caught up,
overlapped by its own turn less what another replica claimed meanwhile, paused), in the
routine's own zone, and the boot's reads (the newest gap's end, when routines were first
armed, whether a slot passed since).

The part is driven on its own, over the memory store, under virtual time."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from scheduler_rig import NO_ANSWER, part_rig

from trio_routines import Routine
from trio_routines.cron import next_run
from trio_routines.errors import StateFault
from trio_routines.history import GAP_WHY as WHY
from trio_routines.metrics import Metrics
from trio_routines.records import Gap, GapReason
from trio_routines.scheduler.gaps import GapRecording, gap_words
from trio_routines.scheduler.state import FireResult
from trio_routines.testing import MemoryStore, WallClock

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
# Every 20 minutes, at :05, :25 and :45 of the hour in Kathmandu (UTC+05:45): :20, :40 and
# :00 UTC. Read in UTC instead, its slots would be :05, :25 and :45 UTC.
KATHMANDU = Routine(name="tea", prompt="p", cron="5,25,45 * * * *", tz="Asia/Kathmandu")


def at(minute: int) -> datetime:
    return T0 + minute * MINUTE


def recording(store: MemoryStore, now: datetime = T0) -> tuple[GapRecording, Metrics, WallClock]:
    runtime, calls, wall = part_rig(store, now=now)
    return GapRecording(store, runtime, calls), runtime.metrics, wall


def said(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    found = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "trio_routines"]
    caplog.clear()
    return found


@pytest.fixture(autouse=True)
def _info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="trio_routines")


def test_a_gap_is_said_as_its_count_and_span() -> None:
    assert gap_words(Gap(at(0), at(0), 1, GapReason.OVERLAP)) == "1 slot 2026-07-07T10:00:00.000Z"
    assert gap_words(Gap(at(0), at(1), 2, GapReason.OVERLAP)) == (
        "2 slots 2026-07-07T10:00:00.000Z to 2026-07-07T10:01:00.000Z"
    )
    assert gap_words(Gap(at(0), at(0), 2, GapReason.OVERLAP)) == "2 slots 2026-07-07T10:00:00.000Z"
    estimated = Gap(at(0), at(90), 91, GapReason.CAUGHT_UP, estimated=True)
    assert (
        gap_words(estimated)
        == "about 91 slots 2026-07-07T10:00:00.000Z to 2026-07-07T11:30:00.000Z"
    )


async def test_a_gap_written_is_counted_and_logged_and_one_written_already_is_not(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    gaps, metrics, _ = recording(store)
    overlap = Gap(at(1), at(2), 2, GapReason.OVERLAP)
    assert await gaps.write_gap("tea", overlap) is True
    assert await gaps.write_gap("tea", overlap) is False  # another replica wrote it first
    paused = Gap(at(5), at(5), 1, GapReason.PAUSED)
    await gaps.record_gap("tea", paused)
    await gaps.record_gap("tea", None)
    assert await store.gaps("tea") == [overlap, paused]
    assert metrics.missed == {("tea", "overlap"): 2, ("tea", "paused"): 1}
    logged = said(caplog)
    assert [level for level, _ in logged] == [logging.WARNING, logging.INFO]
    assert logged[0][1] == (
        "tea: missed 2 slots 2026-07-07T10:01:00.000Z to 2026-07-07T10:02:00.000Z — "
        f"{WHY[GapReason.OVERLAP]} (in its history as a gap, reason overlap)"
    )
    assert logged[1][1] == (
        f"tea: missed 1 slot 2026-07-07T10:05:00.000Z — {WHY[GapReason.PAUSED]} "
        "(in its history as a gap, reason paused)"
    )


async def test_a_gap_the_store_refuses_or_never_takes_is_logged_and_counted_all_the_same(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    gaps, metrics, _ = recording(store)
    store.fail("record_gap", StateFault("disk full"), times=1)
    await gaps.record_gap("tea", Gap(at(1), at(2), 2, GapReason.OVERLAP))
    store.hang("record_gap")
    await gaps.record_gap("tea", Gap(at(4), at(4), 1, GapReason.CAUGHT_UP))
    logged = said(caplog)
    assert [(level, text) for level, text in logged if level == logging.ERROR] == [
        (
            logging.ERROR,
            "tea: 2 slots 2026-07-07T10:01:00.000Z to 2026-07-07T10:02:00.000Z passed over "
            "(overlap) could not be recorded: disk full",
        ),
        (
            logging.ERROR,
            "tea: 1 slot 2026-07-07T10:04:00.000Z passed over (caught-up) could not be recorded: "
            f"could not record a gap of 'tea': {NO_ANSWER}",
        ),
    ]
    assert metrics.missed == {("tea", "overlap"): 2, ("tea", "caught-up"): 1}
    assert store.gap_records.get("tea", []) == []
    # Counted and said, but not said to be in its history, which lacks them.
    assert [text for level, text in logged if level == logging.WARNING] == [
        "tea: missed 2 slots 2026-07-07T10:01:00.000Z to 2026-07-07T10:02:00.000Z — "
        f"{WHY[GapReason.OVERLAP]} (not in its history: its record failed, reason overlap)",
        f"tea: missed 1 slot 2026-07-07T10:04:00.000Z — {WHY[GapReason.CAUGHT_UP]} "
        "(not in its history: its record failed, reason caught-up)",
    ]


class _NoGaps(MemoryStore):
    """A store of its own that keeps no gaps (the contract's optional part left out: None
    says so to a protocol's check)."""

    record_gap = None  # type: ignore[assignment]
    gaps = None  # type: ignore[assignment]


async def test_a_gap_a_store_keeps_none_of_is_counted_and_said_to_be_kept_nowhere(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = _NoGaps()
    gaps, metrics, _ = recording(store)
    assert await gaps.write_gap("tea", Gap(at(1), at(1), 1, GapReason.OVERLAP)) is True
    assert metrics.missed == {("tea", "overlap"): 1}
    assert said(caplog) == [
        (
            logging.WARNING,
            f"tea: missed 1 slot 2026-07-07T10:01:00.000Z — {WHY[GapReason.OVERLAP]} "
            "(this store keeps no gaps, reason overlap)",
        )
    ]


def claimed(slot: datetime) -> FireResult:
    return FireResult("tea", slot, claimed=True)


async def test_a_late_fire_records_the_slots_it_passed_over_in_the_routines_zone(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    due = at(20)  # 10:05 in Kathmandu
    gaps, _, _ = recording(store, now=at(100))
    await gaps.before_turn(KATHMANDU, due, None, at(100))  # claimed, its turn not begun
    # 10:40, 11:00, 11:20 and 11:40 UTC passed between the slot and the fire's start.
    assert await store.gaps("tea") == [Gap(at(40), at(100), 4, GapReason.CAUGHT_UP)]
    # After its turn, none is recorded again (the overlap counts from the fire's start).
    assert await gaps.after_slot(KATHMANDU, due, claimed(due), at(100), None) is None
    assert await store.gaps("tea") == [Gap(at(40), at(100), 4, GapReason.CAUGHT_UP)]


async def test_a_fire_a_minute_late_or_less_passes_nothing_over(autojump_clock: Any) -> None:
    store = MemoryStore()
    every = Routine(name="tea", prompt="p", cron="* * * * *")
    just = at(0) + MINUTE - timedelta(seconds=1)
    gaps, _, _ = recording(store, now=just)  # started then
    await gaps.before_turn(every, at(0), None, just)
    assert await store.gaps("tea") == []
    gaps, _, _ = recording(store, now=at(1))
    await gaps.before_turn(every, at(0), None, at(1))
    assert await store.gaps("tea") == [Gap(at(1), at(1), 1, GapReason.CAUGHT_UP)]
    await gaps.before_turn(every, at(0), None, None)  # not late: nothing
    assert len(await store.gaps("tea")) == 1


async def test_a_turn_records_the_slots_it_overlapped_less_those_another_replica_claimed(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    due = at(20)
    gaps, _, _ = recording(store, now=at(101))  # the turn ran past four more slots
    await gaps.after_slot(KATHMANDU, due, claimed(due), due, None)
    assert await store.gaps("tea") == [Gap(at(40), at(100), 4, GapReason.OVERLAP)]

    store = MemoryStore()
    await store.claim("tea", at(60), at(60), replica="r2")  # a replica fired 11:00 meanwhile
    gaps, _, _ = recording(store, now=at(101))
    await gaps.after_slot(KATHMANDU, due, claimed(due), due, None)
    assert await store.gaps("tea") == [Gap(at(80), at(100), 2, GapReason.OVERLAP)]

    for unread in (False, True):  # the newest claim is this very slot, or cannot be read
        store = MemoryStore()
        await store.claim("tea", due, due)
        if unread:
            store.fail("latest_fire", StateFault("unreadable"), times=1)
        gaps, _, _ = recording(store, now=at(101))
        await gaps.after_slot(KATHMANDU, due, claimed(due), due, None)
        assert await store.gaps("tea") == [Gap(at(40), at(100), 4, GapReason.OVERLAP)]


async def test_a_paused_slot_extends_the_paused_gap_and_is_its_new_tail(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    paused = FireResult("tea", at(20), claimed=False, reason="paused")
    gaps, _, _ = recording(store, now=at(20))
    assert await gaps.after_slot(KATHMANDU, at(20), paused, at(20), None) == at(20)
    gaps, _, _ = recording(store, now=at(61))  # read late: 11:00 has passed too
    assert await gaps.after_slot(KATHMANDU, at(40), paused, at(61), at(20)) == at(60)
    assert await store.gaps("tea") == [Gap(at(20), at(60), 3, GapReason.PAUSED)]
    refused = FireResult("tea", at(80), claimed=False, reason="duplicate")
    assert await gaps.after_slot(KATHMANDU, at(80), refused, at(80), at(60)) is None
    assert await store.gaps("tea") == [Gap(at(20), at(60), 3, GapReason.PAUSED)]
    # Held by a pause resumed since (at 01:50): the slots up to its resume only, though two
    # more have passed since.
    await store.set_paused("tea", False)
    gaps, _, _ = recording(store, now=at(141))
    assert await gaps.after_slot(KATHMANDU, at(100), paused, at(141), None, at(110)) == at(100)
    assert (await store.gaps("tea"))[-1] == Gap(at(100), at(100), 1, GapReason.PAUSED)
    # Another replica claimed a slot in time, before the pause: it is not recorded, and the
    # next paused slot's gap does not reach back across it.
    await store.claim("tea", at(160), at(160))
    assert await gaps.after_slot(KATHMANDU, at(160), paused, at(160), at(140)) is None
    assert await gaps.after_slot(KATHMANDU, at(180), paused, at(180), None) == at(180)
    assert (await store.gaps("tea"))[-2:] == [
        Gap(at(100), at(100), 1, GapReason.PAUSED),
        Gap(at(180), at(180), 1, GapReason.PAUSED),
    ]


async def test_the_boots_reads_of_gaps_and_of_when_routines_were_first_armed(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    gaps, metrics, _ = recording(store)
    assert await gaps.newest_gap_end("tea") is None
    await store.record_gap("tea", Gap(at(1), at(2), 2, GapReason.OVERLAP))
    await store.record_gap("tea", Gap(at(5), at(7), 3, GapReason.OVERLAP))
    assert await gaps.newest_gap_end("tea") == at(7)
    store.hang("gaps")
    with pytest.raises(StateFault) as fault:
        await gaps.newest_gap_end("tea")
    assert str(fault.value) == f"the gaps of 'tea' are unreadable: {NO_ANSWER}"

    assert await gaps.first_armed([]) == {}
    assert await gaps.first_armed(["tea"]) == {"tea": T0}
    assert metrics.last_success == {"tea": T0}
    store.hang("first_armed")
    assert await gaps.first_armed(["tea", "coffee"]) == {}
    assert said(caplog) == [
        (
            logging.ERROR,
            "the slots of routines that never fired are not accounted for: when the routines "
            f"were first armed is unknown: {NO_ANSWER}",
        )
    ]


async def test_whether_a_slot_passed_since_is_asked_in_the_routines_zone(
    autojump_clock: Any,
) -> None:
    gaps, _, _ = recording(MemoryStore(), now=at(40))
    assert gaps.passed_since(KATHMANDU, at(20)) is True  # its next slot, 10:40, is now
    assert gaps.passed_since(KATHMANDU, at(26)) is True  # (in UTC it would be 10:45)
    assert gaps.passed_since(KATHMANDU, at(40)) is False  # next: 11:00


# Its minute hashed from its name: the name is the cron's seed in every step above.
HASHED = Routine(name="tea", prompt="p", cron="H * * * *")


def hashed_slots(count: int) -> list[datetime]:
    slots: list[datetime] = []
    after = T0
    while len(slots) < count:
        following = next_run(HASHED.cron, None, after, HASHED.name)  # type: ignore[arg-type]
        assert following is not None
        slots.append(following)
        after = following
    return slots


async def test_a_hashed_crons_gaps_are_its_own_slots(autojump_clock: Any) -> None:
    s = hashed_slots(3)
    second = timedelta(seconds=1)
    store = MemoryStore()
    gaps, _, _ = recording(store, now=s[2] + second)
    await gaps.before_turn(HASHED, s[0], None, s[2] + second)  # woke late
    assert await store.gaps("tea") == [Gap(s[1], s[2], 2, GapReason.CAUGHT_UP)]

    store = MemoryStore()
    await store.claim("tea", s[1], s[1], replica="r2")
    gaps, _, _ = recording(store, now=s[2] + second)
    await gaps.after_slot(HASHED, s[0], claimed(s[0]), s[0], None)  # a long turn
    assert await store.gaps("tea") == [Gap(s[2], s[2], 1, GapReason.OVERLAP)]

    store = MemoryStore()
    gaps, _, _ = recording(store, now=s[0])
    paused = FireResult("tea", s[0], claimed=False, reason="paused")
    assert await gaps.after_slot(HASHED, s[0], paused, s[0], None) == s[0]
    assert gaps.passed_since(HASHED, s[0] - second) is True


class NoArmed(MemoryStore):
    """A store that does not keep when routines were first armed."""

    first_armed = None  # type: ignore[assignment]


async def test_a_store_that_keeps_no_first_arming_is_not_asked(autojump_clock: Any) -> None:
    gaps, metrics, _ = recording(NoArmed())
    assert await gaps.first_armed(["tea"]) == {}
    assert metrics.last_success == {}
