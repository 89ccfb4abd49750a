"""Cron parsing pinned exactly: every refusal's whole message, and the numbers each field means.

A message is part of the interface (the CLI, the HTTP API and the agent's ``wake`` tool show
it), so each kind of bad field is compared whole: the field's name, how the bad text is
quoted (cut when long, escaped when a control character, kept when not ASCII). These are also
what mutation testing runs against ``cron/fields.py`` (docs/mutation.md).
"""

from __future__ import annotations

import pytest

from trio_routines.cron import cron_error, parse_cron
from trio_routines.cron.fields import Fields, parse_fields

_COUNT = "expected 5 fields (minute hour day-of-month month day-of-week), got"
_KNOWN = "(known: @yearly @annually @monthly @weekly @daily @midnight @hourly)"
_H = (
    "H (a hashed value) needs a name to hash; it is for routines and wake-ups,"
    " or `next --cron EXPR --name NAME`"
)


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        # quoting: up to 40 characters whole, longer cut with the length said
        ("a" * 40 + " * * * *", 'minute field: "' + "a" * 40 + '" is not a number'),
        ("a" * 41 + " * * * *", 'minute field: "' + "a" * 40 + '…" (41 chars) is not a number'),
        ("é * * * *", 'minute field: "é" is not a number'),
        ("é" * 41 + " * * * *", 'minute field: "' + "é" * 40 + '…" (41 chars) is not a number'),
        (
            "\x01" * 41 + " * * * *",
            'minute field: "' + "\\u0001" * 40 + '…" (41 chars) is not a number',
        ),
        # values: each field's name and range
        ("60 * * * *", "minute field: 60 is out of range 0-59"),
        ("* 24 * * *", "hour field: 24 is out of range 0-23"),
        ("* * 0 * *", "day-of-month field: 0 is out of range 1-31"),
        ("* * * 0 *", "month field: 0 is out of range 1-12"),
        ("* * * * 8", "day-of-week field: 8 is out of range 0-7"),
        ("* * * * 10000", 'day-of-week field: "10000" is out of range 0-7'),
        ("* * * * 9999", "day-of-week field: 9999 is out of range 0-7"),
        ("* * * * 0-000000000012345", 'day-of-week field: "000000000012345" is out of range 0-7'),
        ("-1 * * * *", 'minute field: "-1" is malformed'),
        ("/5 * * * *", 'minute field: "/5" is malformed'),
        ("* -1 * * *", 'hour field: "-1" is malformed'),
        ("1-2-3 * * * *", 'minute field: "2-3" is not a number'),
        (
            "* * * " + "FOO" * 20 + " *",
            'month field: "' + ("FOO" * 14)[:40] + '…" (60 chars) is not a month name or 1-12',
        ),
        ("* * * * é", 'day-of-week field: "é" is not a weekday name or 0-7'),
        ("* * * * 1-é", 'day-of-week field: "é" is not a weekday name or 0-7'),
        # steps
        ("*/é * * * *", 'minute field: step "é" is not a number'),
        ("1/2/3 * * * *", 'minute field: step "2/3" is not a number'),
        ("*/99999 * * * *", 'minute field: step "99999" is too large (at most 9999)'),
        ("*/0000 * * * *", "minute field: step 0 is not allowed"),
        ("5/0 * * * *", "minute field: step 0 is not allowed"),
        ("* * * JAN/x *", 'month field: step "x" is not a number'),
        ("* * * * SUN-SAT/0", "day-of-week field: step 0 is not allowed"),
        # ranges
        ("* * * * 7-6", "day-of-week field: range 7-6 runs backwards"),
        ("* * 20-0010 * *", "day-of-month field: range 20-0010 runs backwards"),
        (
            "0" * 60 + "5-3 * * * *",
            'minute field: range "' + "0" * 40 + '…" (63 chars) runs backwards',
        ),
        # lists and special characters
        (",1 * * * *", 'minute field: ",1" has an empty list item'),
        ("* 1, * * *", 'hour field: "1," has an empty list item'),
        ("H * * * *", f'minute field: "H": {_H}'),
        ("* * * * h", f'day-of-week field: "h": {_H}'),
        ("* * * 1,H(1-2) *", f'month field: "H(1-2)": {_H}'),
        ("* * * ? *", 'month field: "?" is only allowed in day-of-month and day-of-week'),
        ("* ? * * *", 'hour field: "?" is only allowed in day-of-month and day-of-week'),
        ("* * ?,1 * *", 'day-of-month field: "?" must be the whole field'),
        ("* * * * 1,?", 'day-of-week field: "?" must be the whole field'),
        # day-of-month specials
        ("* * LW * *", 'day-of-month field: "LW": the W (nearest weekday) form is not supported'),
        ("* * 1,w * *", 'day-of-month field: "w": the W (nearest weekday) form is not supported'),
        ("* * L- * *", 'day-of-month field: "L-" is malformed (use L or L-n)'),
        ("* * L-x * *", 'day-of-month field: "L-x" is malformed (use L or L-n)'),
        ("* * Lx * *", 'day-of-month field: "Lx" is malformed (use L or L-n)'),
        ("* * L13 * *", 'day-of-month field: "L13" is malformed (use L or L-n)'),
        ("* * l-31 * *", "day-of-month field: l-31 is out of range L-0 to L-30"),
        (
            "* * L-00000000000031 * *",
            "day-of-month field: L-00000000000031 is out of range L-0 to L-30",
        ),
        (  # 40 characters: still shown as they are
            "* * L-" + "0" * 36 + "31 * *",
            "day-of-month field: L-" + "0" * 36 + "31 is out of range L-0 to L-30",
        ),
        ("* * L-10000 * *", 'day-of-month field: "L-10000" is out of range L-0 to L-30'),
        (
            "* * L-" + "0" * 50 + "31 * *",
            'day-of-month field: "L-' + "0" * 38 + '…" (54 chars) is out of range L-0 to L-30',
        ),
        # day-of-week specials
        ("* * * * 1#", 'day-of-week field: "1#": the number after # must be 1-5'),
        ("* * * * #1", 'day-of-week field: "#1" is malformed'),
        ("* * * * 1#x", 'day-of-week field: "1#x": the number after # must be 1-5'),
        ("* * * * MON#6", 'day-of-week field: "MON#6": the number after # must be 1-5'),
        ("* * * * 1#2#3", 'day-of-week field: "1#2#3": the number after # must be 1-5'),
        ("* * * * 1/L/2", 'day-of-week field: step "L/2" is not a number'),
        ("* * * * 1/2#3", 'day-of-week field: "1/2#3": a step cannot follow #'),
        (
            "* * * * l",
            'day-of-week field: "L" needs a weekday in front, e.g. 5L for the last Friday',
        ),
        ("* * * * L/2", 'day-of-week field: "L/2": a step cannot follow L'),
        ("* * * * fril/2", 'day-of-week field: "fril/2": a step cannot follow L'),
        ("* * * * 5/2L", 'day-of-week field: step "2L" is not a number'),
        ("* * * * xL", 'day-of-week field: "xL" is not a weekday name or 0-7'),
        ("* * * * 5Lx", 'day-of-week field: "5Lx" is not a weekday name or 0-7'),
        ("* * * * 1-5L", 'day-of-week field: "5L" is not a weekday name or 0-7'),
        # whole expressions
        ("@foo", f'unknown macro "@foo" {_KNOWN}'),
        ("@" + "x" * 60, 'unknown macro "@' + "x" * 39 + f'…" (61 chars) {_KNOWN}'),
        ("@DAILY x y", "macro @DAILY takes no other fields"),
        ("1", f"{_COUNT} 1"),
        ("1 2 3 4 5 6 7 8", f"{_COUNT} 8"),
    ],
)
def test_refusal_messages(cron: str, message: str) -> None:
    assert cron_error(cron) == message


def test_zone_messages_are_quoted_and_cut() -> None:
    assert cron_error("* * * * *", "X" * 41) == 'unknown time zone "' + "X" * 40 + '…" (41 chars)'
    assert cron_error("* * * * *", "Nope/é") == 'unknown time zone "Nope/é"'


def _bits(*numbers: int) -> int:
    return sum(1 << number for number in set(numbers))


_ALL_DAYS = _bits(*range(1, 32))
_ALL_MONTHS = _bits(*range(1, 13))
_ALL_WEEKDAYS = _bits(*range(7))


def _fields(expression: str, **changes: object) -> Fields:
    """A ``* * * * *`` reading of ``expression`` with ``changes``."""
    values: dict[str, object] = {
        "expression": expression,
        "minute_bits": _bits(*range(60)),
        "hour_bits": _bits(*range(24)),
        "dom_bits": _ALL_DAYS,
        "dom_from_last": frozenset(),
        "month_bits": _ALL_MONTHS,
        "dow_bits": _ALL_WEEKDAYS,
        "dow_last_bits": 0,
        "dow_nth": frozenset(),
        "day_and": True,
        "specific_time": False,
    }
    values.update(changes)
    return Fields(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cron", "expected"),
    [
        ("* * * * *", _fields("* * * * *")),
        (
            " */15\t*/6  */10 */5 */2 ",
            _fields(
                "*/15 */6 */10 */5 */2",
                minute_bits=_bits(0, 15, 30, 45),
                hour_bits=_bits(0, 6, 12, 18),
                dom_bits=_bits(1, 11, 21, 31),
                month_bits=_bits(1, 6, 11),
                dow_bits=_bits(0, 2, 4, 6),
            ),
        ),
        (
            "5/20 1-3/2 L,l-2,15 JAN-MAR,dec FRI-SUN,1#2,5L",
            _fields(
                "5/20 1-3/2 L,l-2,15 JAN-MAR,dec FRI-SUN,1#2,5L",
                minute_bits=_bits(5, 25, 45),
                hour_bits=_bits(1, 3),
                dom_bits=_bits(15),
                dom_from_last=frozenset({0, 2}),
                month_bits=_bits(1, 2, 3, 12),
                dow_bits=_bits(5, 6, 0),
                dow_last_bits=_bits(5),
                dow_nth=frozenset({(1, 2)}),
                day_and=False,
                specific_time=True,
            ),
        ),
        # ? is * in the day fields, and counts as a star for the day rule
        (
            "0 0 ? * sun-sun/2",
            _fields(
                "0 0 ? * sun-sun/2", minute_bits=1, hour_bits=1, dow_bits=1, specific_time=True
            ),
        ),
        (
            "0 0 1 * ?",
            _fields("0 0 1 * ?", minute_bits=1, hour_bits=1, dom_bits=_bits(1), specific_time=True),
        ),
        # 7 is Sunday; a number then / runs to the field's end (day-of-week: 6)
        (
            "59 23 31 12 7",
            _fields(
                "59 23 31 12 7",
                minute_bits=_bits(59),
                hour_bits=_bits(23),
                dom_bits=_bits(31),
                month_bits=_bits(12),
                dow_bits=_bits(0),
                day_and=False,
                specific_time=True,
            ),
        ),
        ("* 23/5 * * 1/2", _fields("* 23/5 * * 1/2", hour_bits=_bits(23), dow_bits=_bits(1, 3, 5))),
        ("5/90 * * * 6/5", _fields("5/90 * * * 6/5", minute_bits=_bits(5), dow_bits=_bits(6))),
        ("*/90 * * * SUN-7", _fields("*/90 * * * SUN-7", minute_bits=_bits(0))),
        ("* * * * 0-SUN", _fields("* * * * 0-SUN", dow_bits=_bits(0))),
        ("* * * * MON-SUN/2", _fields("* * * * MON-SUN/2", dow_bits=_bits(1, 3, 5, 0))),
        ("* * * * 5-sun", _fields("* * * * 5-sun", dow_bits=_bits(5, 6, 0))),
        (
            "* * * * 7L,SAT#5,7#1",
            _fields(
                "* * * * 7L,SAT#5,7#1",
                dow_bits=0,
                dow_last_bits=_bits(0),
                dow_nth=frozenset({(6, 5), (0, 1)}),
            ),
        ),
        ("* * * * fril", _fields("* * * * fril", dow_bits=0, dow_last_bits=_bits(5))),
        ("* * * * 1L,5L", _fields("* * * * 1L,5L", dow_bits=0, dow_last_bits=_bits(1, 5))),
        ("* * l * *", _fields("* * l * *", dom_bits=0, dom_from_last=frozenset({0}))),
        ("* * 1-31/30 * *", _fields("* * 1-31/30 * *", dom_bits=_bits(1, 31), day_and=True)),
        (
            "0 * 1 * 1",
            _fields(
                "0 * 1 * 1", minute_bits=1, dom_bits=_bits(1), dow_bits=_bits(1), day_and=False
            ),
        ),
        ("* 0 * * *", _fields("* 0 * * *", hour_bits=1)),
        ("@weekly", _fields("@weekly", minute_bits=1, hour_bits=1, dow_bits=1, specific_time=True)),
        ("@HOURLY", _fields("@HOURLY", minute_bits=1)),
    ],
)
def test_what_each_field_means(cron: str, expected: Fields) -> None:
    assert parse_fields(cron) == expected


def test_the_schedule_keeps_the_fields() -> None:
    schedule = parse_cron("5,10 9-10 * * *", "Europe/Berlin")
    assert schedule.times_of_day() == (545, 550, 605, 610)
    assert schedule.expression == "5,10 9-10 * * *"
    assert schedule.tz == "Europe/Berlin"
    assert str(schedule.zone) == "Europe/Berlin"
    # bit d of a month's mask: day d matches
    assert parse_cron("0 0 1,L * *").matching_days(2024, 2) == _bits(1, 29)
    assert parse_cron("0 0 1,L 3 *").matching_days(2024, 2) == 0
    assert parse_cron("0 0 * * MON#1,5L").matching_days(2026, 7) == _bits(6, 31)
    assert parse_cron("0 0 * * MON,5L").matching_days(2026, 7) == _bits(6, 13, 20, 27, 31)
    assert parse_cron("0 0 * * 1L,5L").matching_days(2026, 7) == _bits(27, 31)
    assert parse_cron("0 0 L-30 * *").matching_days(2026, 2) == 0
    assert parse_cron("0 0 L-30 * *").matching_days(2026, 1) == _bits(1)
