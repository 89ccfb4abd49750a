"""A slow, independent reference of the cron policy (SPEC §3), used as the judge in tests.

It shares no code with ``trio_routines.cron``: its own tiny parser (no validation: it trusts
its input), its own day matching written from the calendar, and a different way of handling
time zones. Instead of converting wall times to instants, it walks the *real* UTC timeline
minute by minute, looks at each instant's local wall time and applies Debian cron's rule:

* not specific-time: an instant fires when its wall time matches;
* specific-time: an instant fires when its wall time matches and has not been seen before (the
  first pass of a fold), or when the wall clock just jumped over a gap that contained a
  matching wall time (the instant the gap ends).

Stretches of wall time that cannot match (a non-matching day or hour) are jumped over, but
only after checking the UTC offset stays the same at every whole hour of the jump.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

MONTHS = {
    name: number
    for number, name in enumerate(
        ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"], 1
    )
}
DAYS = {
    name: number for number, name in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])
}
MACROS = {
    "@YEARLY": "0 0 1 1 *",
    "@ANNUALLY": "0 0 1 1 *",
    "@MONTHLY": "0 0 1 * *",
    "@WEEKLY": "0 0 * * 0",
    "@DAILY": "0 0 * * *",
    "@MIDNIGHT": "0 0 * * *",
    "@HOURLY": "0 * * * *",
}
MINUTE = timedelta(minutes=1)


def _number(token: str, names: dict[str, int] | None) -> int:
    if names is not None and token.upper() in names:
        return names[token.upper()]
    return int(token)


def _expand(text: str, low: int, high: int, names: dict[str, int] | None) -> set[int]:
    """Plain items: ``*``, ``?``, ``a``, ``a-b``, each with an optional ``/step``."""
    values: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if base in ("*", "?"):
            first, last = low, high
        elif "-" in base:
            a, b = base.split("-")
            first, last = _number(a, names), _number(b, names)
            if names is DAYS and b.upper() == "SUN" and first > 0:
                last = 7  # SAT-SUN is 6-7; SUN-SUN stays 0-0
        else:
            first = _number(base, names)
            last = max(high, first) if step_text else first
        values.update(range(first, last + 1, step))
    return values


@dataclass
class RefCron:
    minutes: set[int]
    hours: set[int]
    doms: set[int]
    dom_from_last: set[int]
    months: set[int]
    dows: set[int]
    dow_last: set[int]
    dow_nth: set[tuple[int, int]]
    day_and: bool
    specific: bool
    text: str = field(default="")

    @classmethod
    def parse(cls, text: str) -> RefCron:
        text = text.strip()
        if text.startswith("@"):
            text = MACROS[text.upper()]
        minute, hour, dom, month, dow = text.split()
        doms: set[int] = set()
        dom_from_last: set[int] = set()
        for item in dom.split(","):
            if item.upper() == "L":
                dom_from_last.add(0)
            elif item.upper().startswith("L-"):
                dom_from_last.add(int(item[2:]))
            else:
                doms |= _expand(item, 1, 31, None)
        dows: set[int] = set()
        dow_last: set[int] = set()
        dow_nth: set[tuple[int, int]] = set()
        for item in dow.split(","):
            if "#" in item:
                day, k = item.split("#")
                dow_nth.add((_number(day, DAYS) % 7, int(k)))
            elif item.upper().endswith("L"):
                dow_last.add(_number(item[:-1], DAYS) % 7)
            else:
                dows |= {d % 7 for d in _expand(item, 0, 6, DAYS)}
        return cls(
            minutes=_expand(minute, 0, 59, None),
            hours=_expand(hour, 0, 23, None),
            doms=doms,
            dom_from_last=dom_from_last,
            months=_expand(month, 1, 12, MONTHS),
            dows=dows,
            dow_last=dow_last,
            dow_nth=dow_nth,
            day_and=dom[0] in "*?" or dow[0] in "*?",
            specific=minute[0] != "*" and hour[0] != "*",
            text=text,
        )

    def day_matches(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        last = calendar.monthrange(day.year, day.month)[1]
        dom_ok = day.day in self.doms or any(day.day == last - n for n in self.dom_from_last)
        weekday = day.isoweekday() % 7
        dow_ok = (
            weekday in self.dows
            or (weekday in self.dow_last and day.day + 7 > last)
            or (weekday, (day.day - 1) // 7 + 1) in self.dow_nth
        )
        return (dom_ok and dow_ok) if self.day_and else (dom_ok or dow_ok)

    def matches(self, wall: datetime) -> bool:
        return (
            wall.minute in self.minutes
            and wall.hour in self.hours
            and self.day_matches(wall.date())
        )


def _skip_target(cron: RefCron, wall: datetime) -> datetime | None:
    """The next wall time worth looking at minute by minute, when ``wall`` cannot match."""
    if not cron.day_matches(wall.date()):
        return datetime.combine(wall.date() + timedelta(days=1), datetime.min.time())
    if wall.hour not in cron.hours:
        return wall.replace(minute=0) + timedelta(hours=1)
    return None


def reference_next(
    expr: str, tz: str | None, after: datetime, horizon_days: int = 400
) -> datetime | None:
    """First instant > ``after`` at which ``expr`` fires in ``tz``; None within the horizon."""
    cron = RefCron.parse(expr)
    zone = ZoneInfo(tz or "UTC")
    after = after.astimezone(UTC)

    def local(instant: datetime) -> datetime:
        return instant.astimezone(zone).replace(tzinfo=None)

    def offset(instant: datetime) -> timedelta:
        result = instant.astimezone(zone).utcoffset()
        assert result is not None
        return result

    # Start half a day early so that "already seen" is known when `after` sits in a fold.
    instant = after.replace(second=0, microsecond=0) - timedelta(hours=12)
    end = after + timedelta(days=horizon_days)
    previous = local(instant - MINUTE)
    seen = previous
    while instant <= end:
        wall = local(instant)
        if cron.specific:
            fires = wall > seen and cron.matches(wall)
            skipped = previous + MINUTE
            while not fires and skipped < wall:
                fires = cron.matches(skipped)
                skipped += MINUTE
        else:
            fires = cron.matches(wall)
        if fires and instant > after:
            return instant
        seen = max(seen, wall)
        previous = wall
        step = MINUTE
        target = _skip_target(cron, wall)
        if target is not None and target - wall > 2 * MINUTE:
            jump = target - wall - MINUTE  # land on the wall minute before the target
            base = offset(instant)
            probes = [
                instant + timedelta(hours=h) for h in range(1, jump // timedelta(hours=1) + 1)
            ]
            if all(offset(p) == base for p in [*probes, instant + jump]):
                step = jump
                previous = local(instant + jump - MINUTE)
                seen = max(seen, previous)
        instant += step
    return None
