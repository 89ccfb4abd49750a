"""Cron schedules: the next instant an expression fires in a zone (see :mod:`trio_routines.cron`).

Pure code: no Trio, no clock reads, no host zone. Everything here works on aware datetimes and
returns aware UTC datetimes.
"""

from __future__ import annotations

import functools
import itertools
import threading
from bisect import bisect_left
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from trio_routines.cron.days import bit_list, day_rule
from trio_routines.cron.fields import _quote, parse_fields
from trio_routines.cron.hashed import resolve_hashed
from trio_routines.cron.zones import unknown_zone
from trio_routines.errors import InvalidCron
from trio_routines.instants import require_utc

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["CronSchedule", "cron_error", "next_run", "parse_cron"]

_ONE_MINUTE = timedelta(minutes=1)
_ONE_DAY = timedelta(days=1)
_MINUTES_PER_DAY = 1440
_CACHED_TEXT_LIMIT = 256


@functools.lru_cache(maxsize=1024)
def _zone(tz: str | None) -> tzinfo:
    """The zone ``tz`` names. UTC (no zone given, or ``UTC``) needs no zone data: a host
    without it (a slim container image, no ``tzdata``) still reads every UTC cron."""
    if tz is None or tz == "UTC":
        return UTC
    if tz == "localtime":
        raise InvalidCron('time zone "localtime" is the host zone; name an IANA zone instead')
    if tz.lower() == "posixrules":  # a file of the zone data, gone from newer releases of it
        raise InvalidCron(
            'time zone "posixrules" is the zone data\'s default rules, not a zone; name an '
            "IANA zone instead (it is America/New_York's rules where it is still shipped)"
        )
    if tz.lower().startswith("right/"):  # zoneinfo reads their leap seconds as offsets
        raise InvalidCron(
            f"time zone {_quote(tz)} counts leap seconds, which cron time does not; "
            'name the zone without "right/"'
        )
    try:
        return ZoneInfo(tz)
    except Exception:  # ZoneInfoNotFoundError, ValueError, IsADirectoryError, ...
        raise InvalidCron(unknown_zone(tz, _quote(tz))) from None


@functools.lru_cache(maxsize=16384)
def _day_offsets(zone: tzinfo, day: date) -> tuple[timedelta, timedelta]:
    """The smallest and largest UTC offset seen at the start and end of a local day.

    Equal means the whole day runs on one offset (no gap, no fold): its instants are simply
    wall time minus that offset. The end probe is the next day's midnight, both folds.
    """
    start = datetime(day.year, day.month, day.day)
    # The calendar's last day has no next midnight: its last instant stands in for it.
    end = start + _ONE_DAY if day < date.max else datetime.max
    offsets = [
        wall.replace(tzinfo=zone, fold=fold).utcoffset() or timedelta(0)
        for wall in (start, end)
        for fold in (0, 1)
    ]
    return min(offsets), max(offsets)


def _instant(wall: datetime, offset: timedelta) -> datetime | None:
    """The (naive UTC) instant of ``wall`` on ``offset``; None past the calendar's last one."""
    try:
        return wall - offset
    except OverflowError:  # a wall of 9999-12-31 west of Greenwich
        return None


def _gap_end(zone: tzinfo, wall: datetime, before: timedelta, after: timedelta) -> datetime:
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
        "_days",
        "_hour_list",
        "_last",
        "_minute_list",
        "_never",
        "_zone",
        "expression",
        "specific_time",
        "tz",
    )

    def __init__(self, cron: str, tz: str | None) -> None:
        self._zone = _zone(tz)
        self.tz = "UTC" if tz is None else tz
        fields = parse_fields(cron)
        self.expression = fields.expression
        # Shared with every schedule of the same fields: one is kept per routine.
        self._minute_list = bit_list(fields.minute_bits)
        self._hour_list = bit_list(fields.hour_bits)
        self._days = day_rule(fields)
        self.specific_time = fields.specific_time
        self._never = False
        # The last search, (after, found), both UTC: any ``after`` from that one up to
        # ``found`` has the same answer, since nothing fires in between. Routines sharing an
        # expression (all of ``0 9 * * 1-5``) re-arm one after another from nearly the same
        # instant.
        self._last: tuple[datetime, datetime] | None = None

    def __repr__(self) -> str:
        return f"CronSchedule({self.expression!r}, tz={self.tz!r})"

    # -- days ------------------------------------------------------------------------------

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
        # Differences of instants, never an instant moved by an offset: at the ends of the
        # calendar (years 1 and 9999) the moved instant may not exist.
        if best is not None and midnight - best >= high:
            return None
        # Only walls w with w - low > after can contribute (every instant of w is <= w - low).
        threshold = (after - midnight) + low
        start = 0 if threshold < timedelta(0) else int(threshold // _ONE_MINUTE) + 1
        moment = self._next_time(start)
        if low == high:
            if moment is None:
                return None
            return _instant(midnight + timedelta(minutes=moment), low)
        found = best
        while moment is not None:
            wall = midnight + timedelta(minutes=moment)
            if found is not None and wall - found >= high:
                break
            try:
                instants = self._instants_at(wall)
            except OverflowError:  # past the calendar's last instant, as every later wall
                break
            for instant in instants:
                if instant > after and (found is None or instant < found):
                    found = instant
            moment = self._next_time(moment + 1)
        return found if found is not best else None

    # -- public ----------------------------------------------------------------------------

    def next_after(self, after: datetime) -> datetime | None:
        """The first instant strictly after ``after`` at which this schedule fires.

        An aware UTC datetime on a whole minute of the zone's wall clock (in UTC a whole
        minute too, unless the zone's offset then had seconds, as local mean time did, in some
        zones into the 1970s), or ``None`` when it never fires again.
        ``after`` must be aware (any zone); a naive one is refused with ``ValueError``.
        """
        if not isinstance(after, datetime):
            raise TypeError(f"after must be an aware datetime, got {type(after).__name__}")
        last = self._last  # one read: a thread may replace it meanwhile
        if last is not None and after.tzinfo is UTC and last[0] <= after < last[1]:
            # The answer found last, as the very same object: every routine of this schedule
            # due at one slot shares it (and its hash, which a datetime computes once).
            return last[1]
        after = require_utc(after, "after")  # the very object when it is UTC already
        moment = after.replace(tzinfo=None)
        if self._never:
            return None
        try:
            found = self._search(moment)
        except OverflowError:  # the edges of datetime's range (year 1 or 9999)
            found = None
        if found is None:
            if not self._days.can_ever_match():
                self._never = True
            return None
        found = found.replace(tzinfo=UTC)
        # ``after`` itself, not a copy: kept by the memo, it is often the caller's own
        # (the boot's one wall-clock read, a loop's slot) rather than one more instant.
        self._last = (after, found)
        return found

    def _search(self, after: datetime) -> datetime | None:
        try:
            local_day = after.replace(tzinfo=UTC).astimezone(self._zone).date()
        except OverflowError:  # `after` read in the zone falls outside the calendar
            if after.year > 1:
                return None  # after its last day: every wall of it is past already
            local_day = date.min  # before its first day: every wall of it is still to come
        # A fold may carry the previous local day's walls past `after`: start a day early.
        start = local_day - _ONE_DAY if local_day > date.min else local_day
        best: datetime | None = None
        stop: date | None = None
        for day in self._days.days_from(start):
            if stop is not None and day >= stop:
                break
            found = self._first_on_day(day, after, best)
            if found is not None and (best is None or found < best):
                best = found
                # A later local day can still hold an earlier instant only through a fold
                # across midnight: look one more day past the winner's own local day.
                winner_day = found.replace(tzinfo=UTC).astimezone(self._zone).date()
                last = max(winner_day, day)
                # None past the calendar's end: its days run out before any stop would come.
                stop = last + timedelta(days=2) if last < date.max - _ONE_DAY else None
        return best

    @property
    def zone(self) -> tzinfo:
        """The zone the expression is read in."""
        return self._zone

    def times_of_day(self) -> tuple[int, ...]:
        """The wall times of a matching day, as minutes after midnight, ascending."""
        return tuple(hour * 60 + minute for hour in self._hour_list for minute in self._minute_list)

    def matching_days(self, year: int, month: int) -> int:
        """Bitmask (bit d = day d) of the local days of a month on which the schedule fires."""
        days = self._days
        if not days.month_bits >> month & 1:
            return 0
        return days.month_days(year, month)

    def ever_matches(self) -> bool:
        """Whether any day of the calendar matches (otherwise the schedule never fires)."""
        return not self._never and self._days.can_ever_match()

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


def _check_types(cron: object, tz: object) -> None:
    if not isinstance(cron, str):
        raise InvalidCron(f"cron expression must be a string, got {type(cron).__name__}")
    if tz is not None and not isinstance(tz, str):
        raise InvalidCron(f"time zone must be a string or None, got {type(tz).__name__}")


#: Parsed schedules by expression (by expression and zone outside UTC), oldest first. A plain
#: dictionary rather than an LRU cache: at 1,000 routines of distinct expressions the LRU's
#: link and key tuple per entry were a tenth of a sleeping routine's memory.
PARSED: dict[str | tuple[str, str], CronSchedule] = {}
_PARSED_LIMIT = 32768  # entries; past it the oldest go, whatever was asked for since
_PARSED_LOCK = threading.Lock()  # stores' threads parse too


def _parse_cached(cron: str, tz: str | None) -> CronSchedule:
    key = cron if tz is None else (cron, tz)
    schedule = PARSED.get(key)
    if schedule is None:
        made = CronSchedule(cron, tz)
        with _PARSED_LOCK:
            schedule = PARSED.get(key)
            if schedule is None:
                if len(PARSED) >= _PARSED_LIMIT:
                    # The oldest eighth at once: a dictionary that keeps losing its first
                    # entry is walked past the holes they leave, on every look for the next.
                    for oldest in list(itertools.islice(PARSED, max(1, _PARSED_LIMIT // 8))):
                        del PARSED[oldest]
                schedule = PARSED[key] = made
    return schedule


def parse_cron(cron: str, tz: str | None = None, seed: str | None = None) -> CronSchedule:
    """Parse and validate ``cron`` in zone ``tz`` (IANA name; ``None`` = UTC). Cached.

    ``seed`` (a routine's name, a wake-up's :func:`~trio_routines.cron.hashed.wakeup_seed`)
    resolves ``H`` fields first (:func:`~trio_routines.cron.hashed.resolve_hashed`); without
    it an ``H`` is refused. Raises :class:`InvalidCron` with a one-line message naming the
    field or the zone.
    """
    _check_types(cron, tz)
    _zone(tz)  # the zone is checked first, as the original scheduler did
    if seed is not None:
        cron = resolve_hashed(cron, seed)
    if len(cron) > _CACHED_TEXT_LIMIT:
        # Parsed each time: the cache holds 32,768 entries, and a request may bring 64 KiB of
        # valid text ("0,0,0,…"), which would let a client pin gigabytes.
        return CronSchedule(cron, tz)
    return _parse_cached(cron, tz)


def cron_error(cron: str, tz: str | None = None, seed: str | None = None) -> str | None:
    """``None`` when ``cron`` in ``tz`` (with ``H`` resolved from ``seed``) is valid, else why."""
    try:
        parse_cron(cron, tz, seed)
    except InvalidCron as error:
        return str(error)
    return None


def next_run(
    cron: str, tz: str | None, after: datetime, seed: str | None = None
) -> datetime | None:
    """First instant strictly after ``after`` at which ``cron`` fires in ``tz``.

    ``tz=None`` is UTC (never the host zone); ``seed`` resolves ``H`` fields. Returns an aware
    UTC datetime on a whole minute of ``tz``'s wall clock (see :meth:`CronSchedule.next_after`),
    or ``None`` when the expression never fires again. Raises
    :class:`InvalidCron` for a bad expression or zone and ``ValueError`` for a naive ``after``.
    """
    return parse_cron(cron, tz, seed).next_after(after)
