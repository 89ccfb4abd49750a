"""Cron rules pinned exactly where the differential tests are too coarse to notice a change.

``H`` ranges and their edge cases, the hash's handling of any seed text, and the exact answers
of :mod:`trio_routines.cron.gaps` on expressions chosen so that one wrong bound changes them.
These are also what mutation testing runs against the ``cron`` package (docs/mutation.md).
"""

from __future__ import annotations

import hashlib
import os
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from trio_routines.cron import cron_error, parse_cron, resolve_hashed
from trio_routines.cron.gaps import offset_changes, shortest_gap, shortest_wall_gap
from trio_routines.cron.hashed import has_hashed, hash_number
from trio_routines.cron.schedule import CronSchedule

# --------------------------------------------------------------------------------------------
# H


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        # the range splits at its first "-": "1" and "2-3", and "2-3" is not a number
        ("H(1-2-3) * * * *", 'minute field: "2-3" is not a number'),
        # an empty end names the whole item
        ("H(-5) * * * *", 'minute field: "H(-5)" is malformed'),
        ("H(5-) * * * *", 'minute field: "H(5-)" is malformed'),
        ("* * * H(-MAR) *", 'month field: "H(-MAR)" is malformed'),
    ],
)
def test_malformed_hashed_ranges(cron: str, message: str) -> None:
    assert cron_error(cron, None, "seed") == message


@pytest.mark.parametrize("seed", ["b", "c", "digest"])
def test_hashed_weekday_ranges_ending_on_sunday(seed: str) -> None:
    n = hash_number(seed, "day-of-week")
    assert n % 8 != 0  # so that reading the end as 7 would move the value off Sunday
    # a range starting on Sunday ends on that same Sunday: one value, 0
    for dow in ["H(SUN-SUN)", "H(0-SUN)", "H(0-0)", "H(SUN-0)"]:
        assert resolve_hashed(f"0 0 * * {dow}", seed) == "0 0 * * 0"
    # a range from Monday to SUN runs to 7 (Sunday): seven values, 1 to 7
    assert resolve_hashed("0 0 * * H(MON-SUN)", seed) == f"0 0 * * {1 + n % 7}"
    assert resolve_hashed("0 0 * * H(1-SUN)", seed) == f"0 0 * * {1 + n % 7}"
    # "SUN" ends at 7 only in day-of-week: a single-value range elsewhere stays itself
    assert resolve_hashed("H(5-5) * * * *", seed) == "5 * * * *"
    assert resolve_hashed("0 0 * H(MAR-MAR) *", seed) == "0 0 * 3 *"


def test_any_seed_text_hashes() -> None:
    # A lone surrogate (JSON may carry one) is hashed as its UTF-8 bytes, not refused.
    seed = "\ud800x"
    data = b"\xed\xa0\x80x\x00minute"
    expected = int.from_bytes(hashlib.sha256(data).digest()[:8], "big")
    assert hash_number(seed, "minute") == expected
    assert resolve_hashed("H * * * *", seed) == f"{expected % 60} * * * *"


def test_has_hashed() -> None:
    assert not has_hashed("0 9 * * *")
    assert not has_hashed("0 9 * * THU")  # an h inside a name
    assert has_hashed("0 9 * * h")
    assert has_hashed("0 9 * * 1,H")


# --------------------------------------------------------------------------------------------
# gaps


@pytest.mark.parametrize(
    ("cron", "gap"),
    [
        # a day-crossing gap (23:00 -> 00:00) shorter than any gap within a day
        ("0 0,12,23 * * *", timedelta(hours=1)),
        ("0 0,12,23 * * MON", timedelta(hours=11)),  # no two adjacent days
        # once a day: the 1st and 3rd are 2 days apart, but the 3rd and 4th only one
        ("0 0 1,3,4 * *", timedelta(days=1)),
        # a Friday the 31st: Dec 31, 2027, then Mar 31, 2028 (after a Feb 29). Only that
        # pair of years (Friday-started, then a leap year) brings two so close.
        ("0 0 */30 * 5L", timedelta(days=91)),
    ],
)
def test_exact_wall_gaps(cron: str, gap: timedelta) -> None:
    assert shortest_wall_gap(parse_cron(cron)) == gap


def test_a_pair_ending_exactly_near_change_after_a_change_counts() -> None:
    # Berlin springs forward at 2026-03-29T01:00Z. 00:00 CET (23:00Z) and 06:00 CEST (04:00Z,
    # the change plus exactly NEAR_CHANGE) are 5 hours apart that night, 6 on the wall.
    berlin = parse_cron("0 0,6 * * *", "Europe/Berlin")
    after = datetime(2026, 1, 1, tzinfo=UTC)
    assert shortest_wall_gap(berlin) == timedelta(hours=6)
    assert shortest_gap(berlin, after, timedelta(days=120)) == timedelta(hours=5)


def test_offset_changes_are_whole_utc_minutes_within_the_bounds() -> None:
    zone = parse_cron("* * * * *", "Europe/Berlin").zone
    spring = datetime(2026, 3, 29, 1, tzinfo=UTC)
    autumn = datetime(2026, 10, 25, 1, tzinfo=UTC)
    # a start with seconds and microseconds still finds the changes on whole minutes
    start = datetime(2026, 1, 1, 0, 0, 30, 250_000, tzinfo=UTC)
    found = offset_changes(zone, start, datetime(2027, 1, 1, tzinfo=UTC))
    assert found == [spring, autumn]
    assert all(moment.tzinfo is UTC for moment in found)
    # the interval is (start, end]: a change at the end counts, one at the start does not
    assert offset_changes(zone, start, spring) == [spring]
    assert offset_changes(zone, spring, autumn) == [autumn]
    # any aware start is read as the instant it is
    local = spring.astimezone(timezone(timedelta(hours=5)))
    assert offset_changes(zone, local - timedelta(hours=1), autumn) == [spring, autumn]


# --------------------------------------------------------------------------------------------
# schedule


def test_a_never_firing_schedule_says_so_before_any_search() -> None:
    # built directly: not the cached instance another test may have searched already
    assert not CronSchedule("0 0 30 2 *", "Europe/Berlin").ever_matches()
    assert not CronSchedule("0 0 31 4,6,9,11 *", None).ever_matches()
    assert CronSchedule("0 0 29 2 */7", None).ever_matches()
    never = CronSchedule("0 0 30 2 *", None)
    assert never.next_after(datetime(2026, 1, 1, tzinfo=UTC)) is None
    assert not never.ever_matches()


def test_fires_at_refuses_a_naive_instant_by_name() -> None:
    schedule = parse_cron("0 9 * * *")
    with pytest.raises(ValueError, match=r"^instant must be an aware datetime, got naive 2026"):
        schedule.fires_at(datetime(2026, 7, 7, 9))


def _runs(cron: str, tz: str, after: datetime, count: int) -> list[datetime]:
    schedule = parse_cron(cron, tz)
    return [moment for _, moment in zip(range(count), schedule.iter_after(after), strict=False)]


def _z(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("cron", "tz", "after", "expected"),
    [
        # London springs forward from GMT (offset 0) at 01:00Z: 01:xx local does not exist
        (
            "30 1 * * *",
            "Europe/London",
            "2026-03-28T12:00",
            ["2026-03-29T01:00", "2026-03-30T00:30"],
        ),
        (
            "0 1 * * *",
            "Europe/London",
            "2026-03-28T12:00",
            ["2026-03-29T01:00", "2026-03-30T00:00"],
        ),
        (
            "*/30 * * * *",
            "Europe/London",
            "2026-03-29T00:00",
            ["2026-03-29T00:30", "2026-03-29T01:00", "2026-03-29T01:30"],
        ),
        # a skipped wall time fires at the gap's end to the second, whatever its minute
        (
            "7 2 * * *",
            "Europe/Berlin",
            "2026-03-28T12:00",
            ["2026-03-29T01:00", "2026-03-30T00:07"],
        ),
        (
            "1 2 * * *",
            "Europe/Berlin",
            "2026-03-28T12:00",
            ["2026-03-29T01:00", "2026-03-30T00:01"],
        ),
        (
            "59 2 * * *",
            "America/New_York",
            "2026-03-08T00:00",
            ["2026-03-08T07:00", "2026-03-09T06:59"],
        ),
    ],
)
def test_spring_gaps_to_the_second(cron: str, tz: str, after: str, expected: list[str]) -> None:
    assert _runs(cron, tz, _z(after), len(expected)) == [_z(text) for text in expected]


@pytest.mark.parametrize("host", ["Pacific/Kiritimati", "Pacific/Pago_Pago"])
def test_the_host_zone_is_never_read(host: str) -> None:
    # Naive datetimes converted with astimezone() would be read in the host's zone: set one
    # far from UTC and from the zones asked about, and the answers must not move.
    cases = [
        ("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00"),
        ("17 2 * * *", "America/New_York", "2026-03-08T00:00"),
        ("*/20 * * * *", "Europe/London", "2026-03-29T00:30"),
        # 23:30 on Dec 31 in Pago Pago (-11) is already Jan 2 in Kiritimati (+14)
        ("45 23 * * *", "Pacific/Pago_Pago", "2026-01-01T10:30"),
    ]
    zone = parse_cron("* * * * *", "Europe/Berlin").zone
    span = (datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))
    expected = [_runs(cron, tz, _z(after), 3) for cron, tz, after in cases]
    assert expected[-1][0] == _z("2026-01-01T10:45")
    changes = offset_changes(zone, *span)
    saved = os.environ.get("TZ")
    os.environ["TZ"] = host
    time.tzset()
    try:
        for (cron, tz, after), runs in zip(cases, expected, strict=True):
            fresh = CronSchedule(cron, tz)  # not the cached instance: search again
            moments = list(zip(range(3), fresh.iter_after(_z(after)), strict=False))
            assert [moment for _, moment in moments] == runs
        assert offset_changes(zone, *span) == changes
    finally:
        if saved is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = saved
        time.tzset()


def test_a_fold_across_midnight_in_a_zone_east_of_utc() -> None:
    # Casey (Antarctica) went from +11 to +08 at 2010-03-04T15:00Z: 02:00 on March 5 became
    # 23:00 on March 4, so the walls from 23:00 to 02:00 came twice, the second time across
    # midnight. At 13:10Z (00:10 on March 5, first pass), the next "*/30 0,23" is 00:30 of
    # March 5 (13:30Z), earlier than March 4's 23:00 second pass (15:00Z).
    after = _z("2010-03-04T13:10")
    assert _runs("*/30 0,23 * * *", "Antarctica/Casey", after, 3) == [
        _z("2010-03-04T13:30"),
        _z("2010-03-04T15:00"),
        _z("2010-03-04T15:30"),
    ]
    # and the previous local day's second pass is searched from a day already begun
    assert _runs("*/30 23 * * *", "Antarctica/Casey", after, 2) == [
        _z("2010-03-04T15:00"),
        _z("2010-03-04T15:30"),
    ]


def test_every_minute_of_a_repeated_hour_is_walked() -> None:
    # Berlin's 02:xx repeats at 2026-10-25T00:00Z-01:00Z; from 02:30:30 CEST (first pass) the
    # next "* 2" is the very next minute, not the next-but-one.
    assert _runs("* 2 * * *", "Europe/Berlin", _z("2026-10-25T00:30:30"), 2) == [
        _z("2026-10-25T00:31"),
        _z("2026-10-25T00:32"),
    ]


def test_the_last_year_is_searched_to_its_end() -> None:
    assert parse_cron("0 0 1 6 *").next_after(_z("9998-12-31T00:00")) == _z("9999-06-01T00:00")
    # nothing after the last matching instant of year 9999, asked twice of one schedule
    schedule = CronSchedule("0 0 1 1 *", None)
    assert schedule.next_after(_z("9999-06-01T00:00")) is None
    assert schedule.next_after(_z("9999-07-01T00:00")) is None
    assert schedule.ever_matches()


def test_next_after_refusals_name_the_argument() -> None:
    schedule = parse_cron("0 9 * * *")
    with pytest.raises(TypeError) as caught:
        schedule.next_after("2026-07-07T09:00Z")  # type: ignore[arg-type]
    assert str(caught.value) == "after must be an aware datetime, got str"
    with pytest.raises(ValueError, match=r"^after ") as refused:
        schedule.next_after(datetime(2026, 7, 7, 9))
    assert str(refused.value) == "after must be an aware datetime, got naive 2026-07-07T09:00:00"


def test_parse_cron_checks_the_zone_first_and_caches_up_to_256_characters() -> None:
    # the zone is refused before a bad H form is resolved
    assert (
        cron_error("H(5-3) * * * *", "Mars/Olympus", "seed") == 'unknown time zone "Mars/Olympus"'
    )
    at_limit = "0" + ",".join(["0"] * 124) + " 9 * * *"  # 1 + 247 + 8 = 256 characters
    assert len(at_limit) == 256
    assert parse_cron(at_limit, "Europe/Berlin") is parse_cron(at_limit, "Europe/Berlin")
    longer = "0" + at_limit
    fresh = parse_cron(longer, "Europe/Berlin")
    assert fresh is not parse_cron(longer, "Europe/Berlin")
    assert fresh.tz == "Europe/Berlin"
    assert fresh.next_after(_z("2026-07-07T00:00")) == _z("2026-07-07T07:00")
