"""How close together a schedule can fire: the smallest gap between consecutive occurrences.

The recurring wake-up guardrail ("at most every 10 minutes") asks this of an expression once,
when the wake-up is set; the answer must hold for every pair of occurrences, not just the first
two.

Theory of operation
-------------------
On the wall clock a schedule fires at the same times of day ``T`` (hours × minutes, sorted) on
every matching day. So its gaps are of two kinds:

* within a day: two consecutive times of ``T``;
* across days: from ``T[-1]`` on one matching day to ``T[0]`` on the next one, ``k`` days
  later: ``k × 1440 − (T[-1] − T[0])`` minutes.

With two or more times a day, a within-day gap (at most ``T[-1] − T[0]``) always beats a
cross-day gap with ``k ≥ 2`` (at least ``2880 − (T[-1] − T[0])``), so only ``k = 1`` matters:
does any pair of adjacent days both match? With one time a day the gap is ``k`` whole days for
the smallest ``k``.

Which days match depends only on each month's length and the weekday of its 1st, so on the year
*type* (the weekday of 1 January and whether the year is a leap year). All 14 types, and every
pair of consecutive types the 400-year Gregorian cycle holds, occur in 2000-2028, so any two
matching days at most 365 days apart show up in that window: it answers adjacency, and any
closest pair up to a year apart, exactly. Sparser schedules (February 29th, say) are walked
over one whole 400-year cycle.

Daylight saving: real time differs from wall time only across an offset change, where the
policy of :mod:`trio_routines.cron` can bring occurrences closer (a specific-time job whose
wall times fall in a spring-forward gap fires at the gap's end, say ``5 2,3 * * *`` in Berlin
fires at 03:00 and 03:05 that night). :func:`shortest_gap` therefore also walks the real
instants within :data:`NEAR_CHANGE` of each offset change of the zone in a horizon (a year, for
the guardrail) and counts a shortened gap found there. It does not look at changes past the
horizon, nor at a pair that straddles a change more than :data:`NEAR_CHANGE` apart (a daily job
over a spring-forward night is 23 hours apart and reported as 24): both are far above any
guardrail.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, tzinfo
from itertools import pairwise
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

    from trio_routines.cron.schedule import CronSchedule

__all__ = ["NEAR_CHANGE", "offset_changes", "shortest_gap", "shortest_wall_gap"]

#: How far from an offset change real instants are compared (no zone shifts by more than 2 h).
NEAR_CHANGE = timedelta(hours=3)

_MINUTES_PER_DAY = 1440
_TYPE_WINDOW = (2000, 2028)  # every year type and pair of consecutive types of the cycle
_CYCLE = (2000, 2400)  # one 400-year Gregorian cycle, plus the year that wraps it
_ONE_YEAR_OF_DAYS = 365
_ONE_MINUTE = timedelta(minutes=1)
_ONE_DAY = timedelta(days=1)


def _matching_days(schedule: CronSchedule, first: int, last: int) -> Iterator[int]:
    """Ordinals of the matching local days of years ``first`` to ``last``, in order."""
    for year in range(first, last + 1):
        for month in range(1, 13):
            mask = schedule.matching_days(year, month)
            base = date(year, month, 1).toordinal() - 1
            while mask:
                low = mask & -mask
                yield base + low.bit_length() - 1
                mask ^= low


def _closest_days(schedule: CronSchedule, first: int, last: int, stop_at: int) -> int | None:
    """The fewest days between two consecutive matching days of years ``first``-``last``."""
    best: int | None = None
    previous: int | None = None
    for day in _matching_days(schedule, first, last):
        if previous is not None and (best is None or day - previous < best):
            best = day - previous
            if best <= stop_at:
                return best
        previous = day
    return best


def shortest_wall_gap(schedule: CronSchedule) -> timedelta | None:
    """The smallest wall-clock gap between consecutive occurrences, over the whole calendar.

    ``None`` when the schedule never fires. Independent of the zone.
    """
    if not schedule.ever_matches():
        return None
    times = schedule.times_of_day()
    if len(times) > 1:
        within = min(later - earlier for earlier, later in pairwise(times))
        if _closest_days(schedule, *_TYPE_WINDOW, stop_at=1) == 1:
            within = min(within, _MINUTES_PER_DAY - (times[-1] - times[0]))
        return timedelta(minutes=within)
    days = _closest_days(schedule, *_TYPE_WINDOW, stop_at=1)
    if days is None or days > _ONE_YEAR_OF_DAYS:
        days = _closest_days(schedule, *_CYCLE, stop_at=1)
    return None if days is None else timedelta(days=days)


def offset_changes(zone: tzinfo, start: datetime, end: datetime) -> list[datetime]:
    """The instants in ``(start, end]`` (aware UTC, whole minutes) where ``zone``'s offset changes.

    Sampled once a day, then bisected to the minute: two changes within one day would be missed
    (no zone has them in its modern rules).
    """

    def offset(instant: datetime) -> timedelta | None:
        return instant.astimezone(zone).utcoffset()

    found: list[datetime] = []
    instant = start.astimezone(UTC).replace(second=0, microsecond=0)
    while instant < end:
        following = instant + _ONE_DAY
        before = offset(instant)
        if offset(following) != before:
            low, high = instant, following
            while high - low > _ONE_MINUTE:
                middle = low + (high - low) // _ONE_MINUTE // 2 * _ONE_MINUTE
                if offset(middle) == before:
                    low = middle
                else:
                    high = middle
            if start < high <= end:
                found.append(high)
        instant = following
    return found


def shortest_gap(schedule: CronSchedule, after: datetime, horizon: timedelta) -> timedelta | None:
    """The smallest gap between consecutive occurrences, on the real timeline as far as it matters.

    The wall-clock gap over the whole calendar (:func:`shortest_wall_gap`), and the real gaps
    between occurrences within :data:`NEAR_CHANGE` of each offset change of the schedule's zone
    in ``(after, after + horizon]``. ``None`` when the schedule never fires.
    """
    best = shortest_wall_gap(schedule)
    if best is None:
        return None
    for change in offset_changes(schedule.zone, after, after + horizon):
        previous: datetime | None = None
        moment = schedule.next_after(change - NEAR_CHANGE)
        while moment is not None and moment <= change + NEAR_CHANGE:
            if previous is not None:
                best = min(best, moment - previous)
            previous = moment
            moment = schedule.next_after(moment)
    return best
