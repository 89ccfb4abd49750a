"""Instants and slot names: the shape the state directory shares with the original."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_routines.instants import (
    FIRST_INSTANT,
    LAST_INSTANT,
    beyond_the_calendar,
    format_iso,
    parse_instant,
    parse_iso,
    shifted,
    slot_name,
    slot_of,
    truncate_ms,
)

instants = st.datetimes(
    min_value=datetime(1, 1, 2),
    max_value=datetime(9999, 12, 30),
    timezones=st.just(UTC),
)


def test_examples() -> None:
    slot = datetime(2026, 7, 7, 10, 0, tzinfo=UTC)
    assert format_iso(slot) == "2026-07-07T10:00:00.000Z"
    assert slot_name(slot) == "2026-07-07T10-00-00-000Z"
    assert slot_of("2026-07-07T10-00-00-000Z") == slot
    assert format_iso(datetime(1, 1, 1, tzinfo=UTC)) == "0001-01-01T00:00:00.000Z"


@given(instants)
def test_slot_names_round_trip(instant: datetime) -> None:
    name = slot_name(instant)
    assert slot_of(name) == truncate_ms(instant)
    assert parse_iso(format_iso(instant)) == truncate_ms(instant)


@given(instants, instants)
def test_slot_names_sort_in_slot_order(a: datetime, b: datetime) -> None:
    a, b = truncate_ms(a), truncate_ms(b)
    assert (slot_name(a) < slot_name(b)) == (a < b)


@given(
    st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=-3, minutes=-30))]),
    )
)
def test_truncate_ms_is_the_same_utc_instant_to_the_millisecond(value: datetime) -> None:
    truncated = truncate_ms(value)
    utc = value.astimezone(UTC)
    assert truncated == utc.replace(microsecond=utc.microsecond // 1000 * 1000)
    assert truncated.tzinfo is UTC
    assert truncated.microsecond % 1000 == 0
    assert truncate_ms(truncated) is truncated


@pytest.mark.parametrize(
    "name",
    [
        ".DS_Store",
        "2026-07-07T10-00-00-000Z.tmp",
        "2026-07-07T10-00-00-000Z~",
        "2026-13-07T10-00-00-000Z",
        "2026-07-07T10-00-00-00Z",
        "2026-07-07T10:00:00.000Z",
        "2026-02-30T10-00-00-000Z",
        "0000-01-01T00-00-00-000Z",
        "٢٠٢٦-07-07T10-00-00-000Z",  # digits, but not the ASCII ones a slot name is made of
        "2026-07-07T10-00-00-000Z\n",
        "",
    ],
)
def test_foreign_names_are_not_claims(name: str) -> None:
    assert slot_of(name) is None


def test_parse_iso_wants_a_zone() -> None:
    assert parse_iso("2026-07-07T10:00:00") is None
    assert parse_iso("2026-07-07") is None
    assert parse_iso("soon") is None
    assert parse_iso("0001-01-01T00:00:00+01:00") is None  # before year 1 in UTC
    assert parse_iso("2026-07-07T12:00:00+02:00") == datetime(2026, 7, 7, 10, tzinfo=UTC)
    assert parse_iso("2026-07-07T10:00:00.123456Z") == datetime(
        2026, 7, 7, 10, 0, 0, 123000, tzinfo=UTC
    )


def test_naive_instants_are_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        format_iso(datetime(2026, 7, 7))
    for wrong in ("2026-07-07T10:00Z", None, 1783418400):
        with pytest.raises(TypeError) as refused:
            truncate_ms(wrong)  # type: ignore[arg-type]
        assert str(refused.value) == (
            f"instant must be an aware datetime, not {type(wrong).__name__}"
        )
    assert format_iso(datetime(2026, 7, 7, 12, tzinfo=timezone(timedelta(hours=2)))) == (
        "2026-07-07T10:00:00.000Z"
    )


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("2026-03-28T00:00Z", "2026-03-28T00:00:00.000Z"),
        ("2026-03-28T00:00:07Z", "2026-03-28T00:00:07.000Z"),
        ("2026-03-28T00:00:07.5Z", "2026-03-28T00:00:07.500Z"),
        ("2026-03-28T00:00:07,123456789Z", "2026-03-28T00:00:07.123Z"),
        ("2026-03-28 02:00+02:00", "2026-03-28T00:00:00.000Z"),
        ("2026-03-28T02:00+0200", "2026-03-28T00:00:00.000Z"),
        ("2026-03-27T21:30-02:30", "2026-03-28T00:00:00.000Z"),
        ("2026-03-28T05:00+05", "2026-03-28T00:00:00.000Z"),
        ("2026-03-28t00:00z", "2026-03-28T00:00:00.000Z"),
        (" 2026-03-28T00:00:00.000Z ", "2026-03-28T00:00:00.000Z"),
    ],
)
def test_instants_as_people_type_them(typed: str, expected: str) -> None:
    parsed = parse_instant(typed)
    assert parsed is not None
    assert format_iso(parsed) == expected


@pytest.mark.parametrize(
    "typed",
    [
        "2026-03-28T00:00",  # no zone: a guess
        "2026-03-28",
        "2026-02-30T00:00Z",
        "2026-03-28T24:00Z",
        "2026-03-28T00:60Z",
        "2026-03-28T00:00+24:00",
        "2026-03-28T00:00+02:60",
        "0001-01-01T00:00+01:00",  # before year 1 in UTC
        "tomorrow",
        "",
        "2026-03-28T00:00Z trailing",
        "２０２６-03-28T00:00Z",
    ],
)
def test_what_is_not_an_instant_is_refused(typed: str) -> None:
    assert parse_instant(typed) is None


@given(instants)
def test_the_stored_form_is_read_by_the_typed_parser(instant: datetime) -> None:
    assert parse_instant(format_iso(instant)) == truncate_ms(instant)


def test_a_shift_past_the_calendar_is_held_at_its_end() -> None:
    at = datetime(2026, 7, 7, 10, tzinfo=UTC)
    assert shifted(at, timedelta(hours=1)) == at + timedelta(hours=1)
    assert shifted(at, -timedelta(hours=1)) == at - timedelta(hours=1)
    end = datetime.max.replace(tzinfo=UTC)  # past every instant, as the sum would be
    assert shifted(LAST_INSTANT, timedelta(milliseconds=1)) == end
    assert shifted(LAST_INSTANT, timedelta(days=400)) == end
    assert shifted(FIRST_INSTANT, -timedelta(milliseconds=1)) == FIRST_INSTANT
    assert shifted(FIRST_INSTANT + timedelta(hours=1), -timedelta(days=1)) == FIRST_INSTANT


@pytest.mark.parametrize(
    ("text", "beyond"),
    [
        ("9999-12-31T23:59-01:00", True),  # after the calendar's last instant in UTC
        ("9999-12-31T23:59:59+00:00", False),
        ("0001-01-01T00:30+01:00", True),  # before its first
        ("0001-01-01T00:30-01:00", False),
        ("0001-01-01T00:30Z", False),
        ("2026-02-30T00:00+01:00", False),  # no real time: not beyond, none
        ("2026-07-07T09:00+24:00", False),  # no offset
        ("2026-07-07T09:00", False),  # no zone
        ("soon", False),
    ],
)
def test_a_real_time_outside_the_calendar_in_utc_is_told_apart(text: str, beyond: bool) -> None:
    assert beyond_the_calendar(text) is beyond
    if beyond:
        assert parse_instant(text) is None
