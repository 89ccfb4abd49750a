"""Cron expressions: validation and the next instant they fire (SPEC §3, *Time*).

Pure code: no Trio, no clock reads, no host zone. Everything here works on aware datetimes and
returns aware UTC datetimes.

Syntax
------
Exactly five whitespace-separated fields ``minute hour day-of-month month day-of-week``:

* ``*``, ``a``, ``a-b``, ``*/n``, ``a-b/n``, ``a/n`` (= ``a-max/n``) and comma lists of those.
* Month names ``JAN``..``DEC`` and weekday names ``SUN``..``SAT``, case-insensitive, also in
  ranges (``MON-FRI``, ``JAN-MAR``). Day-of-week takes 0-7, 0 and 7 both Sunday; a range may end
  on Sunday as ``7`` or ``SUN`` (``FRI-SUN`` = Friday, Saturday, Sunday). ``SUN`` ending a range
  reads 7 only after a start later in the week: ``SUN-SUN`` and ``0-SUN`` mean ``0-0`` (Sunday)
  and ``SUN-SUN/2`` means ``0-0/2`` (Sunday too). ``*`` and ``a/n`` in day-of-week run over 0-6,
  so ``1/2`` is Monday, Wednesday, Friday.
* Day-of-month ``L`` (last day of the month) and ``L-n`` (n days before the last, n in 0-30;
  a month too short for it is skipped). ``W`` forms are refused.
* Day-of-week ``nL`` (last weekday n of the month, ``5L`` or ``FRIL``) and ``n#k`` (k-th weekday
  n of the month, k in 1-5, ``1#2`` or ``MON#2``; a month without a fifth one is skipped).
* ``?`` is accepted as a whole day-of-month or day-of-week field and is an alias of ``*``: it
  also counts as "starts with ``*``" for the day rule below, so ``0 9 ? * MON`` fires on Mondays
  only (Quartz's meaning). Note that croner, which the original scheduler used, treats ``?``
  differently (it fires daily there); we pin the Quartz reading.
* Macros ``@yearly @annually @monthly @weekly @daily @midnight @hourly``, case-insensitive.
* Six- and seven-field forms (seconds, year) are refused, and so are backwards ranges (``5-3``)
  and step 0. A step larger than the field (``*/90``) is allowed: it matches the start only.
* Every number has at most 4 significant digits (leading zeros are allowed): a longer value is
  out of range and a longer step is refused, without the text ever reaching ``int()``.

Day rule (Vixie/Debian): when the day-of-month or the day-of-week field starts with ``*`` (or is
``?``), a day must match both fields; otherwise it matches when either does. Days are local
calendar days of the expression's zone.

Daylight saving (Debian cron's policy)
--------------------------------------
A *specific-time* expression (neither the minute nor the hour field starts with ``*``) is read on
wall-clock time: a wall time that occurs twice fires once, at its first occurrence; a wall time
skipped by a gap fires once, at the instant the gap ends (several skipped wall times of one gap
collapse into that single instant). Every other expression fires at each real instant whose
local wall time matches: twice through a fold, never for the missing times of a gap.

Search bound
------------
Which days match depends only on the Gregorian calendar, which repeats every 400 years, so the
search looks at most 401 years of candidate months past ``after`` (and never past year 9999);
when no day in that window matches at all, the expression can never fire and the schedule
remembers it, so later calls answer ``None`` at once. Common expressions are answered from the
start day (or the next matching day) with a few bisections, without walking minutes.

Known approximation: a day is examined wall-minute by wall-minute only when its start and end
disagree on the UTC offset (or sit in a gap or fold); two transitions that cancel out inside one
local day (no real zone has them in its modern rules) would go unnoticed. Zone offsets with
seconds (local mean time before ~1900) give instants with seconds.
"""

from __future__ import annotations

import functools
import json
from bisect import bisect_left
from calendar import monthrange
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from trio_routines.errors import InvalidCron
from trio_routines.instants import require_utc

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["CronSchedule", "cron_error", "next_run", "parse_cron"]

FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_MONTH_NAMES = {
    name: number
    for number, name in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"),
        start=1,
    )
}
_WEEKDAY_NAMES = {
    name: number for number, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))
}

_ONE_MINUTE = timedelta(minutes=1)
_ONE_DAY = timedelta(days=1)
_MINUTES_PER_DAY = 1440
_SEARCH_MONTHS = 401 * 12
_MONTH_CACHE_LIMIT = 48
_LAST_YEAR = 9999
_QUOTE_LIMIT = 40
_MAX_DIGITS = 4
_TOO_LARGE = 10_000  # 10**_MAX_DIGITS: stands for every number with more significant digits


def _quote(text: str) -> str:
    """Double-quoted, with control characters escaped, so a message stays on one line.

    Long text is cut (its length said instead) so that hostile input cannot make the message
    itself huge.
    """
    if len(text) > _QUOTE_LIMIT:
        return json.dumps(text[:_QUOTE_LIMIT], ensure_ascii=False)[:-1] + f'…" ({len(text)} chars)'
    return json.dumps(text, ensure_ascii=False)


def _small_number(text: str) -> int | None:
    """The value of an ASCII digit string, or ``None`` when it is not one.

    No field number, step, ``L-n`` or ``#k`` needs more than :data:`_MAX_DIGITS` significant
    digits, so longer ones are answered as :data:`_TOO_LARGE` without ever calling ``int()`` on
    them: Python refuses to convert more than 4,300 digits (``ValueError``) and converting
    fewer still costs time quadratic in the length.
    """
    if not (text.isascii() and text.isdigit()):
        return None
    significant = text.lstrip("0")
    if len(significant) > _MAX_DIGITS:
        return _TOO_LARGE
    return int(significant or "0")


class _FieldParser:
    """Turns one field's text into a set of numbers (plus the ``L``/``#`` extras)."""

    def __init__(self, index: int, low: int, high: int, names: dict[str, int] | None) -> None:
        self.name = FIELD_NAMES[index]
        self.low = low
        self.high = high
        self.names = names

    def fail(self, message: str) -> InvalidCron:
        return InvalidCron(f"{self.name} field: {message}")

    def value(self, text: str, item: str) -> int:
        if not text:
            raise self.fail(f"{_quote(item)} is malformed")
        number = _small_number(text)
        if number is not None:
            if not self.low <= number <= self.high:
                shown = number if number < _TOO_LARGE else _quote(text)
                raise self.fail(f"{shown} is out of range {self.low}-{self.high}")
            return number
        if self.names is not None:
            found = self.names.get(text.upper())
            if found is None:
                kind = "month" if self.name == "month" else "weekday"
                raise self.fail(f"{_quote(text)} is not a {kind} name or {self.low}-{self.high}")
            return found
        raise self.fail(f"{_quote(text)} is not a number")

    def step(self, text: str) -> int:
        step = _small_number(text)
        if step is None:
            raise self.fail(f"step {_quote(text)} is not a number")
        if step == 0:
            raise self.fail("step 0 is not allowed")
        if step >= _TOO_LARGE:
            raise self.fail(f"step {_quote(text)} is too large (at most {_TOO_LARGE - 1})")
        return step

    def item(self, item: str, star_high: int) -> range:
        """One list item without the special forms: ``*``, ``a``, ``a-b``, with ``/n``."""
        base, slash, step_text = item.partition("/")
        step = self.step(step_text) if slash else 1
        if base == "*":
            return range(self.low, star_high + 1, step)
        if "-" in base:
            first, _, last = base.partition("-")
            start = self.value(first, item)
            end = self.value(last, item)
            if self.names is _WEEKDAY_NAMES and end == 0 and start > 0 and last.upper() == "SUN":
                # FRI-SUN: Sunday ending a range that starts later in the week is 7; a range
                # starting on Sunday (SUN-SUN, 0-SUN, SUN-SUN/2) ends on that same Sunday, 0.
                end = 7
            if end < start:
                raise self.fail(f"range {first}-{last} runs backwards")
            return range(start, end + 1, step)
        start = self.value(base, item)
        if not slash:
            return range(start, start + 1)
        return range(start, max(star_high, start) + 1, step)

    def items(self, text: str) -> list[str]:
        items = text.split(",")
        for item in items:
            if not item:
                raise self.fail(f"{_quote(text)} has an empty list item")
            if item == "?":
                if self.name in ("day-of-month", "day-of-week") and text == "?":
                    continue
                if self.name in ("day-of-month", "day-of-week"):
                    raise self.fail('"?" must be the whole field')
                raise self.fail('"?" is only allowed in day-of-month and day-of-week')
        return items

    def plain(self, text: str) -> int:
        """A field with no special forms (minute, hour, month), as a bitmask."""
        bits = 0
        for item in self.items(text):
            for number in self.item(item, self.high):
                bits |= 1 << number
        return bits


_MINUTE = _FieldParser(0, 0, 59, None)
_HOUR = _FieldParser(1, 0, 23, None)
_DOM = _FieldParser(2, 1, 31, None)
_MONTH = _FieldParser(3, 1, 12, _MONTH_NAMES)
_DOW = _FieldParser(4, 0, 7, _WEEKDAY_NAMES)


def _parse_dom(text: str) -> tuple[int, frozenset[int]]:
    """Day-of-month: a bitmask of days 1-31, and the ``L-n`` offsets (``L`` = 0)."""
    if text == "?":
        return (1 << 32) - 2, frozenset()
    bits = 0
    from_last: set[int] = set()
    for item in _DOM.items(text):
        upper = item.upper()
        if "W" in upper:
            raise _DOM.fail(f"{_quote(item)}: the W (nearest weekday) form is not supported")
        if upper.startswith("L"):
            if upper == "L":
                from_last.add(0)
                continue
            rest = upper[1:]
            offset = _small_number(rest[1:]) if rest.startswith("-") else None
            if offset is None:
                raise _DOM.fail(f"{_quote(item)} is malformed (use L or L-n)")
            if offset > 30:
                shown = item if offset < _TOO_LARGE else _quote(item)
                raise _DOM.fail(f"{shown} is out of range L-0 to L-30")
            from_last.add(offset)
            continue
        for number in _DOM.item(item, 31):
            bits |= 1 << number
    return bits, frozenset(from_last)


def _parse_dow(text: str) -> tuple[int, int, frozenset[tuple[int, int]]]:
    """Day-of-week: weekday bits (Sunday = bit 0), ``nL`` weekday bits, ``n#k`` pairs."""
    if text == "?":
        return 0x7F, 0, frozenset()
    bits = 0
    last_bits = 0
    nth: set[tuple[int, int]] = set()
    for item in _DOW.items(text):
        upper = item.upper()
        if "#" in upper:
            if "/" in upper:
                raise _DOW.fail(f"{_quote(item)}: a step cannot follow #")
            day_text, _, k_text = upper.partition("#")
            weekday = _DOW.value(day_text, item) % 7
            k = _small_number(k_text)
            if k is None or not 1 <= k <= 5:
                raise _DOW.fail(f"{_quote(item)}: the number after # must be 1-5")
            nth.add((weekday, k))
            continue
        if upper == "L":
            raise _DOW.fail('"L" needs a weekday in front, e.g. 5L for the last Friday')
        if "L" in upper.partition("/")[0] and "/" in upper:
            raise _DOW.fail(f"{_quote(item)}: a step cannot follow L")
        head = upper[:-1]
        if upper.endswith("L") and (head in _WEEKDAY_NAMES or (head.isascii() and head.isdigit())):
            last_bits |= 1 << (_DOW.value(head, item) % 7)
            continue
        for number in _DOW.item(item, 6):
            bits |= 1 << (number % 7)
    return bits, last_bits, frozenset(nth)


def _split(cron: str) -> list[str]:
    fields = cron.split()
    if not fields:
        raise InvalidCron("empty cron expression")
    if fields[0].startswith("@"):
        macro = fields[0].lower()
        if macro not in MACROS:
            raise InvalidCron(
                f"unknown macro {_quote(fields[0])} "
                "(known: @yearly @annually @monthly @weekly @daily @midnight @hourly)"
            )
        if len(fields) > 1:
            raise InvalidCron(f"macro {fields[0]} takes no other fields")
        return MACROS[macro].split()
    if len(fields) != 5:
        message = (
            f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}"
        )
        if len(fields) in (6, 7):
            message += " — seconds and year fields are not supported"
        raise InvalidCron(message)
    return fields


@functools.lru_cache(maxsize=1024)
def _zone(tz: str | None) -> ZoneInfo:
    if tz is None:
        return ZoneInfo("UTC")
    if tz == "localtime":
        raise InvalidCron('time zone "localtime" is the host zone; name an IANA zone instead')
    try:
        return ZoneInfo(tz)
    except Exception:  # ZoneInfoNotFoundError, ValueError, IsADirectoryError, ...
        raise InvalidCron(f"unknown time zone {_quote(tz)}") from None


def _days_in_month(year: int, month: int) -> int:
    return monthrange(year, month)[1]


@functools.lru_cache(maxsize=16384)
def _day_offsets(zone: ZoneInfo, day: date) -> tuple[timedelta, timedelta]:
    """The smallest and largest UTC offset seen at the start and end of a local day.

    Equal means the whole day runs on one offset (no gap, no fold): its instants are simply
    wall time minus that offset. The end probe is the next day's midnight, both folds.
    """
    start = datetime(day.year, day.month, day.day)
    end = start + _ONE_DAY
    offsets = [
        wall.replace(tzinfo=zone, fold=fold).utcoffset() or timedelta(0)
        for wall in (start, end)
        for fold in (0, 1)
    ]
    return min(offsets), max(offsets)


def _gap_end(zone: ZoneInfo, wall: datetime, before: timedelta, after: timedelta) -> datetime:
    """The (naive UTC) instant a spring-forward gap containing ``wall`` ends.

    The transition lies in ``(wall - after, wall - before]``; bisect on whole seconds for the
    first instant already on the new offset.
    """
    low = wall - after  # still on the old offset
    span = int((after - before).total_seconds())
    lo, hi = 0, span
    while hi - lo > 1:
        mid = (lo + hi) // 2
        probe = (low + timedelta(seconds=mid)).replace(tzinfo=UTC).astimezone(zone)
        if probe.utcoffset() == before:
            lo = mid
        else:
            hi = mid
    return low + timedelta(seconds=hi)


class CronSchedule:
    """A parsed cron expression bound to a zone; :meth:`next_after` is the work horse.

    Build it with :func:`parse_cron` (cached). Attributes are read-only by convention.
    """

    __slots__ = (
        "_day_and",
        "_dom_bits",
        "_dom_from_last",
        "_dow_by_first",
        "_dow_last_bits",
        "_dow_nth",
        "_hour_list",
        "_minute_list",
        "_month_bits",
        "_month_cache",
        "_never",
        "_zone",
        "expression",
        "specific_time",
        "tz",
    )

    def __init__(self, cron: str, tz: str | None) -> None:
        self._zone = _zone(tz)
        self.tz = "UTC" if tz is None else tz
        fields = _split(cron)
        self.expression = " ".join(cron.split())
        minute, hour, dom, month, dow = fields
        self._minute_list = _bit_list(_MINUTE.plain(minute))
        self._hour_list = _bit_list(_HOUR.plain(hour))
        self._dom_bits, self._dom_from_last = _parse_dom(dom)
        self._month_bits = _MONTH.plain(month)
        dow_bits, self._dow_last_bits, self._dow_nth = _parse_dow(dow)
        self._dow_by_first = tuple(_weekday_days(dow_bits, first) for first in range(7))
        self._day_and = dom.startswith(("*", "?")) or dow.startswith(("*", "?"))
        self.specific_time = not minute.startswith("*") and not hour.startswith("*")
        self._month_cache: dict[tuple[int, int], int] = {}
        self._never = False

    def __repr__(self) -> str:
        return f"CronSchedule({self.expression!r}, tz={self.tz!r})"

    # -- days ------------------------------------------------------------------------------

    def _month_days(self, year: int, month: int) -> int:
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

    def _days_from(self, start: date) -> Iterator[date]:
        """Matching local days from ``start`` on, for at most :data:`_SEARCH_MONTHS` months."""
        year, month, first_day = start.year, start.month, start.day
        for _ in range(_SEARCH_MONTHS):
            if self._month_bits >> month & 1:
                mask = self._month_days(year, month) >> first_day << first_day
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

    def _can_ever_match(self) -> bool:
        """Whether any day matches in a whole 400-year Gregorian cycle."""
        for year in range(2000, 2400):
            for month in range(1, 13):
                if self._month_bits >> month & 1 and self._month_days(year, month):
                    return True
        return False

    # -- times of day ----------------------------------------------------------------------

    def _next_time(self, minute_of_day: int) -> int | None:
        """First matching minute-of-day at or after ``minute_of_day``, or None."""
        if minute_of_day >= _MINUTES_PER_DAY:
            return None
        hours = self._hour_list
        minutes = self._minute_list
        hour, minute = divmod(minute_of_day, 60)
        index = bisect_left(hours, hour)
        if index == len(hours):
            return None
        if hours[index] == hour:
            at = bisect_left(minutes, minute)
            if at < len(minutes):
                return hour * 60 + minutes[at]
            index += 1
            if index == len(hours):
                return None
        return hours[index] * 60 + minutes[0]

    def _instants_at(self, wall: datetime) -> tuple[datetime, ...]:
        """The (naive UTC) instants one matching wall time contributes, per the DST policy."""
        zone = self._zone
        before = wall.replace(tzinfo=zone).utcoffset() or timedelta(0)
        after = wall.replace(tzinfo=zone, fold=1).utcoffset() or timedelta(0)
        if before == after:
            return (wall - before,)
        if before > after:  # fold: fold=0 (the old, larger offset) is the first pass
            if self.specific_time:
                return (wall - before,)
            return (wall - before, wall - after)
        if self.specific_time:  # gap
            return (_gap_end(zone, wall, before, after),)
        return ()

    def _first_on_day(self, day: date, after: datetime, best: datetime | None) -> datetime | None:
        """First (naive UTC) instant > ``after`` contributed by the walls of local ``day``."""
        low, high = _day_offsets(self._zone, day)
        midnight = datetime(day.year, day.month, day.day)
        if best is not None and midnight - high >= best:
            return None
        # Only walls w with w - low > after can contribute (every instant of w is <= w - low).
        threshold = after + low - midnight
        start = 0 if threshold < timedelta(0) else int(threshold // _ONE_MINUTE) + 1
        moment = self._next_time(start)
        if low == high:
            if moment is None:
                return None
            return midnight + timedelta(minutes=moment) - low
        found = best
        while moment is not None:
            wall = midnight + timedelta(minutes=moment)
            if found is not None and wall - high >= found:
                break
            for instant in self._instants_at(wall):
                if instant > after and (found is None or instant < found):
                    found = instant
            moment = self._next_time(moment + 1)
        return found if found is not best else None

    # -- public ----------------------------------------------------------------------------

    def next_after(self, after: datetime) -> datetime | None:
        """The first instant strictly after ``after`` at which this schedule fires.

        An aware UTC datetime with whole minutes, or ``None`` when it never fires again.
        ``after`` must be aware (any zone); a naive one is refused with ``ValueError``.
        """
        if not isinstance(after, datetime):
            raise TypeError(f"after must be an aware datetime, got {type(after).__name__}")
        moment = require_utc(after, "after").replace(tzinfo=None)
        if self._never:
            return None
        try:
            found = self._search(moment)
        except OverflowError:  # the edges of datetime's range (year 1 or 9999)
            found = None
        if found is None:
            if not self._can_ever_match():
                self._never = True
            return None
        return found.replace(tzinfo=UTC)

    def _search(self, after: datetime) -> datetime | None:
        local_day = after.replace(tzinfo=UTC).astimezone(self._zone).date()
        # A fold may carry the previous local day's walls past `after`: start a day early.
        start = local_day - _ONE_DAY if local_day > date.min else local_day
        best: datetime | None = None
        stop: date | None = None
        for day in self._days_from(start):
            if stop is not None and day >= stop:
                break
            found = self._first_on_day(day, after, best)
            if found is not None and (best is None or found < best):
                best = found
                # A later local day can still hold an earlier instant only through a fold
                # across midnight: look one more day past the winner's own local day.
                winner_day = found.replace(tzinfo=UTC).astimezone(self._zone).date()
                stop = max(winner_day, day) + timedelta(days=2)
        return best

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        """Successive instants strictly after ``after`` (for ``next N`` listings)."""
        current = self.next_after(after)
        while current is not None:
            yield current
            current = self.next_after(current)

    def fires_at(self, instant: datetime) -> bool:
        """Whether ``instant`` (aware) is one of this schedule's instants."""
        instant = require_utc(instant, "instant")
        return self.next_after(instant - timedelta(microseconds=1)) == instant


def _bit_list(bits: int) -> tuple[int, ...]:
    return tuple(number for number in range(bits.bit_length()) if bits >> number & 1)


def _weekday_days(weekday_bits: int, first: int) -> int:
    """Days 1-31 (as bits) that fall on the given weekdays when day 1 is weekday ``first``."""
    days = 0
    for day in range(1, 32):
        if weekday_bits >> ((first + day - 1) % 7) & 1:
            days |= 1 << day
    return days


def _check_types(cron: object, tz: object) -> None:
    if not isinstance(cron, str):
        raise InvalidCron(f"cron expression must be a string, got {type(cron).__name__}")
    if tz is not None and not isinstance(tz, str):
        raise InvalidCron(f"time zone must be a string or None, got {type(tz).__name__}")


@functools.lru_cache(maxsize=32768)
def _parse_cached(cron: str, tz: str | None) -> CronSchedule:
    return CronSchedule(cron, tz)


def parse_cron(cron: str, tz: str | None = None) -> CronSchedule:
    """Parse and validate ``cron`` in zone ``tz`` (IANA name; ``None`` = UTC). Cached.

    Raises :class:`InvalidCron` with a one-line message naming the field or the zone.
    """
    _check_types(cron, tz)
    _zone(tz)  # the zone is checked first, as the original scheduler did
    return _parse_cached(cron, tz)


def cron_error(cron: str, tz: str | None = None) -> str | None:
    """``None`` when ``cron`` in ``tz`` is valid, else the one-line reason."""
    try:
        parse_cron(cron, tz)
    except InvalidCron as error:
        return str(error)
    return None


def next_run(cron: str, tz: str | None, after: datetime) -> datetime | None:
    """First instant strictly after ``after`` at which ``cron`` fires in ``tz``.

    ``tz=None`` is UTC (never the host zone). Returns an aware UTC datetime on a whole minute, or
    ``None`` when the expression never fires again. Raises :class:`InvalidCron` for a bad
    expression or zone and ``ValueError`` for a naive ``after``.
    """
    return parse_cron(cron, tz).next_after(after)
