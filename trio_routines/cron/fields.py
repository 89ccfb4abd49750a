"""Cron text to numbers: the five fields, names, macros and the special day forms.

Pure and small on purpose: :func:`parse_fields` turns an expression into :class:`Fields` (bit
masks and the ``L``/``#`` extras) or raises :class:`InvalidCron` with a one-line message naming
the field; :mod:`trio_routines.cron.schedule` does the matching and the time arithmetic. The
syntax itself is described in :mod:`trio_routines.cron`.
"""

from __future__ import annotations

import json

import attrs

from trio_routines.errors import InvalidCron

__all__ = ["FIELD_NAMES", "MACROS", "PARSERS", "Fields", "parse_fields"]

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


def _bare(text: str) -> str:
    """``text`` as it is when short (digits and names only, so nothing to escape), else quoted.

    Leading zeros are allowed, so even a valid-looking ``L-0…031`` can be any length.
    """
    return text if len(text) <= _QUOTE_LIMIT else _quote(text)


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
                raise self.fail(f"range {_bare(f'{first}-{last}')} runs backwards")
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
            if item[:1] in ("H", "h"):
                raise self.fail(
                    f"{_quote(item)}: H (a hashed value) needs a name to hash; it is for "
                    "routines and wake-ups, or `next --cron EXPR --name NAME`"
                )
            if item == "?":  # a whole "?" day field never gets here: _parse_dom/_dow read it
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
PARSERS = (_MINUTE, _HOUR, _DOM, _MONTH, _DOW)


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
                shown = _bare(item) if offset < _TOO_LARGE else _quote(item)
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


@attrs.frozen
class Fields:
    """One parsed expression: bit ``n`` of a mask set means value ``n`` matches."""

    expression: str  # the fields joined by single spaces (a macro stays as written)
    minute_bits: int
    hour_bits: int
    dom_bits: int  # days 1-31
    dom_from_last: frozenset[int]  # L-n offsets, L = 0
    month_bits: int  # months 1-12
    dow_bits: int  # weekdays, Sunday = 0
    dow_last_bits: int  # nL: the last such weekday of the month
    dow_nth: frozenset[tuple[int, int]]  # n#k: (weekday, k)
    day_and: bool  # the Vixie day rule: a day field starts with * (or is ?)
    specific_time: bool  # neither minute nor hour starts with *


def parse_fields(cron: str) -> Fields:
    """The fields of ``cron`` (five fields or a macro); :class:`InvalidCron` when malformed."""
    minute, hour, dom, month, dow = _split(cron)
    dom_bits, dom_from_last = _parse_dom(dom)
    dow_bits, dow_last_bits, dow_nth = _parse_dow(dow)
    expression = " ".join(cron.split())
    return Fields(
        expression=cron if expression == cron else expression,  # kept per routine: share it
        minute_bits=_MINUTE.plain(minute),
        hour_bits=_HOUR.plain(hour),
        dom_bits=dom_bits,
        dom_from_last=dom_from_last,
        month_bits=_MONTH.plain(month),
        dow_bits=dow_bits,
        dow_last_bits=dow_last_bits,
        dow_nth=dow_nth,
        day_and=dom.startswith(("*", "?")) or dow.startswith(("*", "?")),
        specific_time=not minute.startswith("*") and not hour.startswith("*"),
    )
