"""Pinned: the rules of gaps.py against a brute-force count of slots, in zones and hashed crons.

Written for the mutation run of gaps.py (docs/mutation.md): the runtime tests use UTC and plain
crons, so a zone or a seed dropped on the way to ``next_run`` went unseen.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from trio_routines.cron import next_run
from trio_routines.gaps import (
    ON_TIME,
    BootPlan,
    add_gap,
    extends_newest,
    passed_over,
    plan_boot,
    unfired_gaps,
)
from trio_routines.records import Gap, GapReason

T0 = datetime(2026, 7, 7, 23, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
# Every cron hashed (a seed dropped fails) and every zone off UTC by a part of an hour (a zone
# dropped moves every slot).
CRONS = ["H * * * *", "H/20 * * * *", "H 9,21 * * *", "H/45 */3 * * *"]
ZONES = ["Asia/Kolkata", "Asia/Kathmandu", "America/St_Johns"]


def at(minute: int, second: int = 0) -> datetime:
    return T0 + minute * MINUTE + timedelta(seconds=second)


def gap(first: int, last: int, reason: GapReason, count: int | None = None) -> Gap:
    return Gap(at(first), at(last), count if count is not None else last - first + 1, reason)


def slots(cron: str, tz: str, seed: str, after: datetime, upto: datetime) -> list[datetime]:
    """Every slot ``s`` with ``after < s <= upto``, one at a time."""
    found: list[datetime] = []
    slot = next_run(cron, tz, after, seed)
    while slot is not None and slot <= upto:
        found.append(slot)
        slot = next_run(cron, tz, slot, seed)
    return found


def as_gap(found: list[datetime], reason: GapReason) -> Gap | None:
    return Gap(found[0], found[-1], len(found), reason) if found else None


def reference_plan(
    cron: str,
    tz: str,
    seed: str,
    accounted: datetime,
    now: datetime,
    resumed: datetime | None,
    paused: bool,
    catchup: float | None,
) -> BootPlan:
    """plan_boot's docstring, told with lists of slots; a resume stamped after now is taken as
    made now."""
    gaps: list[Gap] = []
    if resumed is not None and resumed > accounted:
        before = as_gap(slots(cron, tz, seed, accounted, min(resumed, now)), GapReason.PAUSED)
        gaps += [before] if before is not None else []
        accounted = max(min(resumed, now), accounted)
    missed = slots(cron, tz, seed, accounted, now)
    if paused:
        gaps += [Gap(missed[0], missed[-1], len(missed), GapReason.PAUSED)] if missed else []
        return BootPlan(next_run(cron, tz, max(accounted, now), seed), tuple(gaps))
    if not missed:
        return BootPlan(next_run(cron, tz, accounted, seed), tuple(gaps))
    window = None if catchup is None else max(timedelta(seconds=catchup), ON_TIME)
    old = [s for s in missed if window is not None and now - s > window]
    if old:
        gaps.append(
            Gap(old[0], old[-1], len(old), GapReason.DOWN if catchup == 0 else GapReason.LATE)
        )
    fresh = missed[len(old) :]
    due = fresh[0] if fresh else next_run(cron, tz, now, seed)
    return BootPlan(due, tuple(gaps), as_gap(missed, GapReason.CAUGHT_UP))


@given(
    cron=st.sampled_from(CRONS),
    tz=st.sampled_from(ZONES),
    seed=st.sampled_from(["a", "b"]),
    start=st.integers(0, 2000),
    span=st.integers(0, 3000),
    resumed=st.none() | st.integers(-60, 3000),
    paused=st.booleans(),
    catchup=st.sampled_from([None, 0, 90, 3600, 86400]),
)
def test_the_boot_plan_and_passed_over_match_a_count_of_slots(
    cron: str,
    tz: str,
    seed: str,
    start: int,
    span: int,
    resumed: int | None,
    paused: bool,
    catchup: float | None,
) -> None:
    accounted, now = at(start, 17), at(start + span, 41)
    resumed_at = None if resumed is None else at(start + resumed, 5)
    found = slots(cron, tz, seed, accounted, now)
    assert passed_over(cron, tz, seed, accounted, now, GapReason.DOWN) == as_gap(
        found, GapReason.DOWN
    )
    plan = plan_boot(
        cron,
        tz,
        seed,
        accounted=accounted,
        now=now,
        resumed=resumed_at,
        paused=paused,
        catchup=catchup,
    )
    assert plan == reference_plan(cron, tz, seed, accounted, now, resumed_at, paused, catchup)
    # A routine that never fired: everything after the resume down (or paused), nothing due.
    unfired = unfired_gaps(
        cron, tz, seed, accounted=accounted, now=now, resumed=resumed_at, paused=paused
    )
    head: tuple[Gap, ...] = ()
    after = accounted
    if resumed_at is not None and resumed_at > accounted:
        before = as_gap(slots(cron, tz, seed, accounted, min(resumed_at, now)), GapReason.PAUSED)
        head = (before,) if before is not None else ()
        after = max(min(resumed_at, now), accounted)
    tail = as_gap(slots(cron, tz, seed, after, now), GapReason.PAUSED if paused else GapReason.DOWN)
    expected = head + ((tail,) if tail is not None else ())
    assert unfired == expected


def test_a_long_gap_in_a_zone_counts_a_hashed_hour_to_its_last_slot() -> None:
    cron, tz, seed = "H * * * *", "Asia/Kolkata", "r"
    upto = at(100 * 24 * 60, 7)  # past the count limit, and not on a slot
    found = slots(cron, tz, seed, T0, upto)
    long = passed_over(cron, tz, seed, T0, upto, GapReason.DOWN)
    assert long == Gap(found[0], found[-1], len(found), GapReason.DOWN, estimated=True)
    assert len(found) == 2400


def test_one_slot_past_the_count_limit_is_estimated_as_one_more() -> None:
    # 2,001 minutely slots: 2,000 counted, the last found by bisection and counted as one.
    assert passed_over("* * * * *", None, "r", at(0), at(2001), GapReason.DOWN) == Gap(
        at(1), at(2001), 2001, GapReason.DOWN, estimated=True
    )
    assert passed_over("* * * * *", None, "r", at(0), at(2000, 59), GapReason.DOWN) == Gap(
        at(1), at(2000), 2000, GapReason.DOWN
    )


def test_a_resume_with_no_slot_before_it_records_nothing() -> None:
    plan = plan_boot("* * * * *", None, "r", accounted=at(0, 10), now=at(2, 30), resumed=at(0, 50))
    assert plan == BootPlan(at(1), (), gap(1, 2, GapReason.CAUGHT_UP))
    assert (
        unfired_gaps("* * * * *", None, "r", accounted=at(0, 10), now=at(0, 30), resumed=at(0, 20))
        == ()
    )


def test_a_resume_after_the_last_missed_slot_keeps_its_paused_gap() -> None:
    plan = plan_boot("* * * * *", None, "r", accounted=at(0, 30), now=at(3, 30), resumed=at(3, 10))
    assert plan == BootPlan(at(4), (gap(1, 3, GapReason.PAUSED),))


def test_a_resume_stamped_after_now_is_taken_as_made_now() -> None:
    # A clock that ran ahead stamped it a day on: the plan counted from there, and the
    # routine did not fire for a day ("never fires again" for one stamped infinitely far).
    for ahead in (at(3, 31), at(24 * 60), datetime.max.replace(tzinfo=UTC)):
        plan = plan_boot("* * * * *", None, "r", accounted=at(0, 30), now=at(3, 30), resumed=ahead)
        assert plan == BootPlan(at(4), (gap(1, 3, GapReason.PAUSED),))
        assert unfired_gaps(
            "* * * * *", None, "r", accounted=at(0, 30), now=at(3, 30), resumed=ahead
        ) == (gap(1, 3, GapReason.PAUSED),)


def test_a_store_gap_touching_a_kept_one_is_already_accounted_for() -> None:
    kept = [gap(2, 3, GapReason.OVERLAP), gap(5, 7, GapReason.OVERLAP)]
    assert add_gap(kept, gap(3, 4, GapReason.STORE, 2)) is None  # shares slot 3
    assert add_gap(kept, gap(4, 5, GapReason.STORE, 2)) is None  # shares slot 5
    assert add_gap(kept, gap(4, 4, GapReason.STORE)) == [
        kept[0],
        gap(4, 4, GapReason.STORE),
        kept[1],
    ]


def test_extending_keeps_the_older_gaps_and_an_estimate_from_either_side() -> None:
    older = gap(0, 0, GapReason.DOWN)
    exact = gap(1, 2, GapReason.PAUSED)
    guessed = Gap(at(3), at(4), 2, GapReason.PAUSED, estimated=True)
    merged = Gap(at(1), at(4), 4, GapReason.PAUSED, estimated=True)
    assert add_gap([older, exact], guessed, at(2)) == [older, merged]
    estimated_first = Gap(at(1), at(2), 2, GapReason.PAUSED, estimated=True)
    assert add_gap([older, estimated_first], gap(3, 4, GapReason.PAUSED), at(2)) == [older, merged]


def test_extends_newest_needs_a_newest_a_slot_before_and_a_later_gap() -> None:
    assert not extends_newest([], gap(2, 2, GapReason.PAUSED), at(1))
    assert not extends_newest([gap(1, 2, GapReason.PAUSED)], gap(2, 2, GapReason.PAUSED), at(2))
    assert extends_newest([gap(1, 2, GapReason.PAUSED)], gap(3, 3, GapReason.PAUSED), at(2))


def test_the_slot_after_the_count_limit_is_looked_for_in_the_zone() -> None:
    # 2,000 slots of a hashed hour in a half-hour zone, and `upto` 40 minutes past the last:
    # the zone's next slot is an hour on, after `upto`, so the count is exact (read in UTC,
    # the next would be 30 minutes on, and the gap a 2,001-slot estimate).
    cron, tz, seed = "H * * * *", "Asia/Kolkata", "r"
    found = slots(cron, tz, seed, T0, T0 + timedelta(days=90))[:2000]
    upto = found[-1] + 40 * MINUTE
    assert passed_over(cron, tz, seed, T0, upto, GapReason.DOWN) == Gap(
        found[0], found[-1], 2000, GapReason.DOWN
    )
