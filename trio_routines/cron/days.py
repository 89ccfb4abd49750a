"""The day rule of a cron expression: which local days of a month match its day fields.

One :class:`DayRule` serves every parsed expression with the same day fields (month,
day-of-month, day-of-week), whatever its times of day or zone: ``0 9 * * 1-5`` and
``30 17 * * 1-5`` share theirs, and so does every ``m h 1 1 *``. A parsed schedule is kept
for each routine's expression, so what it holds is paid once per routine; the day masks, the
weekday table and the months already worked out are most of it, and are the same for them all.
"""

from __future__ import annotations

import functools
from calendar import monthrange
from datetime import date
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .fields import Fields

_SEARCH_MONTHS = 401 * 12
_MONTH_CACHE_LIMIT = 48
_LAST_YEAR = 9999


def _days_in_month(year: int, month: int) -> int:
    return monthrange(year, month)[1]


def _weekday_days(weekday_bits: int, first: int) -> int:
    """Days 1-31 (as bits) that fall on the given weekdays when day 1 is weekday ``first``."""
    days = 0
    for day in range(1, 32):
        if weekday_bits >> ((first + day - 1) % 7) & 1:
            days |= 1 << day
    return days


class DayRule:
    """The day fields of an expression: the matching local days of any month (cached).

    Shared between schedules (see :func:`day_rule`); read-only but for its month cache, which
    any of them may fill (a dict's single get or set: safe across threads).
    """

    __slots__ = (
        "_day_and",
        "_dom_bits",
        "_dom_from_last",
        "_dow_by_first",
        "_dow_last_bits",
        "_dow_nth",
        "_month_cache",
        "month_bits",
    )

    def __init__(
        self,
        month_bits: int,
        dom_bits: int,
        dom_from_last: frozenset[int],
        dow_bits: int,
        dow_last_bits: int,
        dow_nth: frozenset[tuple[int, int]],
        day_and: bool,
    ) -> None:
        self.month_bits = month_bits
        self._dom_bits, self._dom_from_last = dom_bits, dom_from_last
        self._dow_by_first = tuple(_weekday_days(dow_bits, first) for first in range(7))
        self._dow_last_bits, self._dow_nth = dow_last_bits, dow_nth
        self._day_and = day_and
        self._month_cache: dict[tuple[int, int], int] = {}

    def month_days(self, year: int, month: int) -> int:
        """Bitmask (bit d = day d) of the local days of a month that match the day fields."""
        key = (year, month)
        cached = self._month_cache.get(key)
        if cached is not None:
            return cached
        first = (date(year, month, 1).weekday() + 1) % 7  # Sunday = 0
        length = _days_in_month(year, month)
        valid = (1 << (length + 1)) - 2
        dom = self._dom_bits & valid
        for offset in self._dom_from_last:
            if length - offset >= 1:
                dom |= 1 << (length - offset)
        dow = self._dow_by_first[first] & valid
        if self._dow_last_bits:
            for weekday in range(7):
                if self._dow_last_bits >> weekday & 1:
                    dow |= 1 << (length - (first + length - 1 - weekday) % 7)
        for weekday, k in self._dow_nth:
            day = 1 + (weekday - first) % 7 + 7 * (k - 1)
            if day <= length:
                dow |= 1 << day
        result = (dom & dow) if self._day_and else (dom | dow)
        if len(self._month_cache) >= _MONTH_CACHE_LIMIT:
            self._month_cache.clear()
        self._month_cache[key] = result
        return result

    def days_from(self, start: date) -> Iterator[date]:
        """Matching local days from ``start`` on, for at most :data:`_SEARCH_MONTHS` months."""
        year, month, first_day = start.year, start.month, start.day
        month_bits = self.month_bits
        for _ in range(_SEARCH_MONTHS):
            if month_bits >> month & 1:
                mask = self.month_days(year, month) >> first_day << first_day
                while mask:
                    low = mask & -mask
                    yield date(year, month, low.bit_length() - 1)
                    mask ^= low
            first_day = 1
            month += 1
            if month == 13:
                month = 1
                year += 1
                if year > _LAST_YEAR:
                    return

    def can_ever_match(self) -> bool:
        """Whether any day matches in a whole 400-year Gregorian cycle."""
        for year in range(2000, 2400):
            for month in range(1, 13):
                if self.month_bits >> month & 1 and self.month_days(year, month):
                    return True
        return False


def day_rule(fields: Fields) -> DayRule:
    """The (shared) day rule of ``fields``."""
    return _rule(
        fields.month_bits,
        fields.dom_bits,
        fields.dom_from_last,
        fields.dow_bits,
        fields.dow_last_bits,
        fields.dow_nth,
        fields.day_and,
    )


# Bounded like the parse cache: a rule dropped from here lives on in the schedules using it.
_rule = functools.lru_cache(maxsize=4096)(DayRule)


@functools.lru_cache(maxsize=4096)
def bit_list(bits: int) -> tuple[int, ...]:
    """The numbers whose bit is set in ``bits``, ascending (shared: schedules keep them)."""
    return tuple(number for number in range(bits.bit_length()) if bits >> number & 1)
