"""Tests of ``trio_routines.cron.gaps``: the smallest gap between consecutive occurrences.

The judge is a brute force: every wall-clock occurrence of 2000-2028, listed from the
reference's own parser and day matching, and the smallest difference between neighbours.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.cron_reference import RefCron
from tests.test_cron import DOMS, DOWS, DST_ZONES, MONTHS, transitions
from trio_routines.cron import parse_cron
from trio_routines.cron.gaps import NEAR_CHANGE, offset_changes, shortest_gap, shortest_wall_gap

_WINDOW_DAYS = [
    date.fromordinal(ordinal)
    for ordinal in range(date(2000, 1, 1).toordinal(), date(2028, 12, 31).toordinal() + 1)
]


def brute_wall_gap(cron: str) -> timedelta | None:
    """The smallest gap between consecutive wall occurrences of 2000-2028, or None (< 2)."""
    ref = RefCron.parse(cron)
    times = sorted(hour * 60 + minute for hour in ref.hours for minute in ref.minutes)
    stamps = [
        day.toordinal() * 1440 + time
        for day in _WINDOW_DAYS
        if ref.day_matches(day)
        for time in times
    ]
    if len(stamps) < 2:
        return None
    return timedelta(minutes=min(later - earlier for earlier, later in pairwise(stamps)))


@pytest.mark.parametrize(
    ("cron", "gap"),
    [
        ("58-59 18 * * *", timedelta(minutes=1)),
        ("*/10 * * * *", timedelta(minutes=10)),
        ("0 0,23 * * *", timedelta(hours=1)),  # 23:00, then 00:00 the next day
        ("0 0,23 * * MON", timedelta(hours=23)),  # no two adjacent days
        ("0 0,23 * * SUN,MON", timedelta(hours=1)),
        ("0 0,23 31 * 1", timedelta(hours=1)),  # the 31st or a Monday: the 31st is a Sunday
        ("0 23 L * *", timedelta(days=28)),  # Jan 31 to Feb 28 (29 in leap years)
        ("0 0 L,1 * *", timedelta(days=1)),  # the last of a month, then the 1st
        ("0 0 31 12 *", timedelta(days=365)),
        ("0 0 29 2 *", timedelta(days=4 * 365 + 1)),  # 2096 to 2104 is 8 years, not the least
        ("0 0 29 2 */7", timedelta(days=28 * 365 + 7)),  # a Sunday Feb 29: 2032, 2060, 2088
        ("0 0 30 2 *", None),
        ("@hourly", timedelta(hours=1)),
        ("@yearly", timedelta(days=365)),
    ],
)
def test_wall_gap_table(cron: str, gap: timedelta | None) -> None:
    assert shortest_wall_gap(parse_cron(cron)) == gap


@pytest.mark.parametrize("cron", ["0 0 29 2 */7", "0 0 L 2 */7", "0 0 */29 2 FRI", "0 0 * 2 MON#5"])
def test_the_whole_cycle_is_walked_for_sparse_days(cron: str) -> None:
    # Sparse days (fewer than two in 2000-2028, or closest there more than a year apart, as
    # for "0 0 L 2 */7"): both walk the whole 400-year cycle.
    ref = RefCron.parse(cron)
    first, last = date(2000, 1, 1).toordinal(), date(2400, 12, 31).toordinal()
    days = [n for n in range(first, last + 1) if ref.day_matches(date.fromordinal(n))]
    expected = min(later - earlier for earlier, later in pairwise(days))
    assert expected > 365
    assert shortest_wall_gap(parse_cron(cron)) == timedelta(days=expected)


_MINUTES = st.one_of(
    st.lists(st.integers(0, 59), min_size=1, max_size=3, unique=True).map(
        lambda values: ",".join(map(str, sorted(values)))
    ),
    st.sampled_from(["*/20", "*/30", "58-59", "0", "55"]),
)
_HOURS = st.one_of(
    st.lists(st.integers(0, 23), min_size=1, max_size=3, unique=True).map(
        lambda values: ",".join(map(str, sorted(values)))
    ),
    st.sampled_from(["0,23", "23", "0", "*/8", "22-23"]),
)


@st.composite
def expressions(draw: st.DrawFn) -> str:
    return f"{draw(_MINUTES)} {draw(_HOURS)} {draw(DOMS)} {draw(MONTHS)} {draw(DOWS)}"


@settings(max_examples=max(60, settings().max_examples // 2), deadline=None)
@given(cron=expressions())
def test_wall_gap_matches_the_brute_force(cron: str) -> None:
    ours = shortest_wall_gap(parse_cron(cron))
    brute = brute_wall_gap(cron)
    if brute is None:
        # fewer than two occurrences in 29 years: never, or sparser than the window
        assert ours is None or ours > timedelta(days=365)
    elif brute <= timedelta(days=365):
        assert ours == brute  # the window holds every pair of year types: exact
    else:
        assert ours is not None
        assert ours <= brute  # ours walked the whole 400-year cycle


def test_offset_changes_are_the_zone_transitions() -> None:
    start, end = datetime(2020, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC)
    for tz in DST_ZONES:
        expected = [moment for moment in transitions(tz) if start < moment <= end]
        assert offset_changes(parse_cron("* * * * *", tz).zone, start, end) == expected


def _near_changes_walked(cron: str, tz: str, after: datetime, horizon: timedelta) -> timedelta:
    """Gaps between every occurrence within a whole day of each transition in the horizon."""
    schedule = parse_cron(cron, tz)
    best = timedelta.max
    for change in transitions(tz):
        if not after < change <= after + horizon:
            continue
        moments = []
        moment = schedule.next_after(change - timedelta(days=1))
        while moment is not None and moment <= change + timedelta(days=1):
            moments.append(moment)
            moment = schedule.next_after(moment)
        best = min([best, *(later - earlier for earlier, later in pairwise(moments))])
    return best


@settings(max_examples=max(40, settings().max_examples // 3), deadline=None)
@given(
    cron=st.one_of(
        expressions(),
        st.sampled_from(
            ["5 2,3 * * *", "0,45 1,2 * * *", "*/20 * * * *", "45 * * * *", "30 0,1 * * SUN"]
        ),
    ),
    tz=st.sampled_from(DST_ZONES),
    days=st.integers(0, 25 * 365),
)
def test_real_gaps_near_offset_changes(cron: str, tz: str, days: int) -> None:
    after = datetime(2001, 1, 1, tzinfo=UTC) + timedelta(days=days)
    horizon = timedelta(days=366)
    schedule = parse_cron(cron, tz)
    ours = shortest_gap(schedule, after, horizon)
    wall = shortest_wall_gap(schedule)
    if wall is None:
        assert ours is None
        return
    assert ours is not None
    assert ours <= wall
    walked = min(wall, _near_changes_walked(cron, tz, after, horizon))
    # Exact below NEAR_CHANGE, the only range the guardrail asks about.
    assert min(ours, NEAR_CHANGE) == min(walked, NEAR_CHANGE)


def test_a_spring_forward_gap_brings_two_occurrences_together() -> None:
    berlin = parse_cron("5 2,3 * * *", "Europe/Berlin")
    after = datetime(2026, 11, 1, tzinfo=UTC)
    assert shortest_wall_gap(berlin) == timedelta(hours=1)
    assert shortest_gap(berlin, after, timedelta(days=366)) == timedelta(minutes=5)
    # the change is past a shorter horizon: only the wall clock is judged
    assert shortest_gap(berlin, after, timedelta(days=30)) == timedelta(hours=1)
