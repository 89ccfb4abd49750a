"""Instants as the state store writes them, and slot names.

An instant is always an aware UTC ``datetime`` truncated to whole milliseconds, written in the
JavaScript ``toISOString`` shape (``2026-07-07T10:00:00.000Z``) so that the original
scheduler's state and ours stay byte-compatible. A *slot name* is that text with every ``:``
and ``.`` turned into ``-``: fixed width, so names sort in slot order.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime, timedelta

_ISO = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?(Z|[+-]\d{2}:\d{2})\Z",
    re.ASCII,
)
# What a person types: a date, ``T`` (or a space), hours and minutes, optional seconds and
# fraction, and a zone that is required: ``Z`` or an offset (``+02:00``, ``+0200``, ``+02``).
_TYPED = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?"
    r"\s*(?:([Zz])|([+-])(\d{2})(?::?(\d{2}))?)\Z",
    re.ASCII,
)
_SLOT_NAME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2})-(\d{2})-(\d{2})-(\d{3})Z\Z", re.ASCII)


def require_utc(value: datetime, what: str = "instant") -> datetime:
    """Return ``value`` converted to UTC; refuse a naive datetime (its zone is a guess), and
    anything else that is no datetime (a TypeError)."""
    if not isinstance(value, datetime):
        raise TypeError(f"{what} must be an aware datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be an aware datetime, got naive {value.isoformat()}")
    return value.astimezone(UTC)


def truncate_ms(value: datetime) -> datetime:
    """Drop sub-millisecond precision: the stores keep milliseconds, nothing finer."""
    if type(value) is not datetime or value.tzinfo is not UTC:
        value = require_utc(value)  # (a TypeError for what is no datetime)
    below = value.microsecond % 1000
    if not below:
        return value  # already a UTC millisecond instant: every record field, every fire
    # A subtraction, not ``replace(microsecond=...)``: in UTC the same instant, and several
    # times cheaper (``replace`` parses its keywords on every call).
    return value - _MICROSECONDS[below]


#: ``timedelta(microseconds=k)`` for every ``k`` below a millisecond (made once: 48 KB).
_MICROSECONDS = tuple(timedelta(microseconds=k) for k in range(1000))


#: The calendar's first and last instants, in UTC (whole milliseconds, as every instant).
FIRST_INSTANT = datetime.min.replace(tzinfo=UTC)
LAST_INSTANT = datetime.max.replace(microsecond=999_000, tzinfo=UTC)


def shifted(value: datetime, delta: timedelta) -> datetime:
    """``value + delta``, held at the calendar's first or last microsecond where it would fall
    outside (a stored instant near year 9999 is hostile input, not a reason to crash): past
    every instant, as the sum would be."""
    try:
        return value + delta
    except OverflowError:
        return _CALENDAR_END if delta > timedelta(0) else FIRST_INSTANT


_CALENDAR_END = datetime.max.replace(tzinfo=UTC)


def format_iso(value: datetime) -> str:
    """``2026-07-07T10:00:00.000Z`` for any aware datetime."""
    return _format_utc(value if value.tzinfo is UTC else require_utc(value))


# Cached for UTC values only: two aware datetimes of one other zone that differ only in
# ``fold`` compare and hash equal, yet are different instants. The instants of one burst of
# fires repeat (every routine due at 09:00 claims, settles and logs the same slot).
@functools.lru_cache(maxsize=1024)
def _format_utc(value: datetime) -> str:
    return (
        f"{value.year:04d}-"
        + value.strftime("%m-%dT%H:%M:%S.")
        + f"{value.microsecond // 1000:03d}Z"
    )


def parse_iso(text: str) -> datetime | None:
    """Parse an ISO instant with an explicit zone (``Z`` or ``±hh:mm``); ``None`` if unreadable.

    Naive or date-only text is refused: an instant whose zone is guessed is not an instant.
    """
    if not isinstance(text, str):
        return None
    match = _ISO.match(text.strip())
    if match is None:
        return None
    try:
        return truncate_ms(datetime.fromisoformat(text.strip().replace("Z", "+00:00")))
    except (ValueError, OverflowError):  # e.g. year 1 with a positive offset: before UTC's year 1
        return None


def parse_instant(text: str) -> datetime | None:
    """An instant as a person types it, normalised to the slot's millisecond UTC form.

    Accepts ``2026-03-28T00:00Z``, with or without seconds or a fraction (``.5``, ``,250``,
    up to nanoseconds, cut to milliseconds), ``T`` or a space, and ``Z`` or an offset
    (``+02:00``, ``+0200``, ``+02``). The zone is required: a zone-less time would be a guess.
    ``None`` when the text is not such an instant or names no real time.
    """
    typed = _typed(text)
    if typed is None:
        return None
    local, offset = typed
    try:
        return truncate_ms((local - offset).replace(tzinfo=UTC))
    except OverflowError:  # before year 1, or after 9999, in UTC
        return None


def beyond_the_calendar(text: str) -> bool:
    """Whether ``text`` is a real time with a zone that falls, in UTC, after the calendar's
    last instant or before its first (``9999-12-31T23:59-01:00``): :func:`parse_instant`
    names no instant for it, and its refusal should not say it is none."""
    typed = _typed(text)
    if typed is None:
        return False
    local, offset = typed
    try:
        local - offset
    except OverflowError:
        return True
    return False


def _typed(text: str) -> tuple[datetime, timedelta] | None:
    """The wall time ``text`` writes and its zone's offset from UTC; None when it is no
    instant with a zone, or names no real time (February 30, hour 24, an offset past 23:59)."""
    if not isinstance(text, str):
        return None
    match = _TYPED.match(text.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = match.groups()
    offset = 0
    if not zulu:
        if int(off_h) > 23 or int(off_m or 0) > 59:
            return None
        offset = int(off_h) * 60 + int(off_m or 0)
        offset = -offset if sign == "-" else offset
    micro = int((fraction or "0")[:6].ljust(6, "0"))
    try:
        local = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second or 0), micro
        )
    except ValueError:  # February 30, hour 24
        return None
    return local, timedelta(minutes=offset)


def slot_name(slot: datetime) -> str:
    """The claim file name of a slot: ``2026-07-07T10-00-00-000Z``."""
    return _slot_name_utc(slot if slot.tzinfo is UTC else require_utc(slot))


@functools.lru_cache(maxsize=1024)  # UTC only, as _format_utc
def _slot_name_utc(slot: datetime) -> str:
    return _format_utc(slot).replace(":", "-").replace(".", "-")


@functools.lru_cache(maxsize=1 << 16)
def slot_of(name: str) -> datetime | None:
    """The slot a claim name stands for, or ``None`` when the name is not a claim.

    Only names that round-trip (decode, then encode to the very same text) are claims, so a
    stray ``<slot>.tmp`` or ``.DS_Store`` can never be taken for the newest claim. With fixed
    -width digit fields, a name round-trips exactly when its fields make a real instant.
    Cached: a claims directory is listed on every claim, and its names repeat.
    """
    match = _SLOT_NAME.match(name)
    if match is None:
        return None
    try:
        year, month, day, hour, minute, second, ms = map(int, match.groups())
        return datetime(year, month, day, hour, minute, second, ms * 1000, tzinfo=UTC)
    except ValueError:  # month 13, February 30, year 0
        return None


def is_slot_name(name: str) -> bool:
    return slot_of(name) is not None
