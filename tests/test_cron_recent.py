"""Tests of ``trio_routines.cron.recent``: the newest slots of a span, found by halving.

The judge is the walk it replaces (every slot of the span, forward); the bound is on the
number of searches, counted, whatever the cron's density.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from trio_routines.cron import next_run
from trio_routines.cron.recent import newest_slots

NOW = datetime(2026, 3, 29, 12, 0, 30, tzinfo=UTC)  # Europe/Berlin changed at 01:00 UTC
DAY = timedelta(days=1)
CRONS = [
    ("* * * * *", None),
    ("*/7 * * * *", None),
    ("* 0-5 * * *", None),  # dense at night, nothing by day
    ("* 11 * * *", None),
    ("*/2 9-17 * * 1-5", None),
    ("0 * * * *", "Europe/Berlin"),
    ("30 2 * * *", "Europe/Berlin"),  # in the spring gap today
    ("* 2 * * *", "Europe/Berlin"),  # the missing hour
    ("15,45 */3 * * *", "Australia/Lord_Howe"),
    ("0 0 1 1 *", None),
    ("0 0 30 2 *", None),  # never
]


class Counted:
    """``next_run`` of one cron, counting its calls."""

    def __init__(self, cron: str, tz: str | None) -> None:
        self.cron, self.tz, self.calls = cron, tz, 0

    def __call__(self, after: datetime) -> datetime | None:
        self.calls += 1
        return next_run(self.cron, self.tz, after)


def walked(fire_after: Callable[[datetime], datetime | None], lo: datetime, hi: datetime) -> list:
    """Every slot of ``[lo, hi]``, walked forward: the judge."""
    slots = []
    at = fire_after(lo - timedelta(milliseconds=1))
    while at is not None and at <= hi:
        slots.append(at)
        at = fire_after(at)
    return slots


def bound(n: int, span: timedelta) -> int:
    """Searches allowed: the slots asked for, walked twice at most, and for each of them a
    search per level of halving -- nothing per slot of the span."""
    levels = max(0, math.ceil(math.log2(span / timedelta(minutes=max(1, n))))) + 1
    return 2 * (n + 2) + (n + 1) * levels


def test_an_every_minute_cron_over_a_day_costs_about_twice_the_slots_asked_for() -> None:
    counted = Counted("* * * * *", None)
    slots = newest_slots(counted, NOW - DAY, NOW, 52)
    assert slots == walked(partial_next("* * * * *"), NOW - DAY, NOW)[-52:]
    assert len(slots) == 52
    assert counted.calls <= 2 * 52 + 12  # not the day's 1,440 slots


def test_a_span_without_a_slot_costs_one_search() -> None:
    counted = Counted("0 0 1 1 *", None)
    assert newest_slots(counted, NOW - DAY, NOW, 52) == []
    assert counted.calls == 1


def partial_next(cron: str, tz: str | None = None) -> Callable[[datetime], datetime | None]:
    return lambda after: next_run(cron, tz, after)


@given(
    cron=st.sampled_from(CRONS),
    back=st.integers(min_value=0, max_value=3 * 24 * 60),
    length=st.integers(min_value=0, max_value=2 * 24 * 60),
    n=st.integers(min_value=0, max_value=80),
)
def test_the_newest_slots_are_the_walk_s_last_ones_within_the_bound(
    cron: tuple[str, str | None], back: int, length: int, n: int
) -> None:
    hi = NOW - timedelta(minutes=back, seconds=17)
    lo = hi - timedelta(minutes=length, seconds=5)
    counted = Counted(*cron)
    found = newest_slots(counted, lo, hi, n)
    judge = walked(partial_next(*cron), lo, hi)
    assert found == (judge[-n:] if n else [])
    assert counted.calls <= bound(n, hi - lo)


def test_slots_on_the_span_s_edges_count_and_none_asked_for_is_none() -> None:
    # The property above keeps its edges off the minute; here they fall on slots exactly.
    every = partial_next("* * * * *")
    at = datetime(2026, 3, 29, 10, 0, tzinfo=UTC)
    minute = timedelta(minutes=1)
    assert newest_slots(every, at, at, 5) == [at]  # a span of one instant, a slot
    assert newest_slots(every, at - timedelta(seconds=30), at, 5) == [at]  # the first is hi
    assert newest_slots(every, at, at + 3 * minute, 10) == [at + k * minute for k in range(4)]
    assert newest_slots(every, at, at + 3 * minute, 0) == []
    assert newest_slots(every, at + minute, at, 5) == []  # hi before lo
    for n in (1, 2, 3, 5, 8, 13):
        for length in (7, 16, 20, 64, 100, 1440):
            lo, hi = at, at + length * minute
            assert newest_slots(every, lo, hi, n) == walked(every, lo, hi)[-n:], (n, length)
