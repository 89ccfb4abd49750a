"""Tests of ``H`` (``trio_routines.cron.hashed``): forms, the documented hash, stability, and
the resolved expressions judged by the brute-force reference."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.cron_reference import RefCron, reference_next
from tests.test_cron import instants_near_transitions
from trio_routines.cron import cron_error, next_run, parse_cron, resolve_hashed, wakeup_seed
from trio_routines.cron.hashed import hash_number
from trio_routines.errors import InvalidCron, InvalidRoutine
from trio_routines.routines import Routine
from trio_routines.wakeups import WakeupRequest, plan_add, take_first_due

NOW = datetime(2026, 7, 7, 10, tzinfo=UTC)
FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")


def documented_n(seed: str, field: str) -> int:
    """The README's function, written out again: SHA-256 of seed NUL field, first 8 bytes."""
    digest = hashlib.sha256(seed.encode() + b"\x00" + field.encode()).digest()
    return int.from_bytes(digest[:8], byteorder="big", signed=False)


def test_the_hash_is_the_documented_function() -> None:
    for seed in ["digest", "routine:x", "", "é ☃", wakeup_seed("s", "id-1")]:
        for field in FIELDS:
            assert hash_number(seed, field) == documented_n(seed, field)
    # pinned values: a change of the function would move every deployed routine
    assert resolve_hashed("H H H H H", "digest") == "8 23 8 9 6"
    assert resolve_hashed("H/15 H(0-11) * * H(MON-FRI)", "digest") == "8-59/15 11 * * 2"


@pytest.mark.parametrize(
    ("cron", "field", "low", "size", "template"),
    [
        ("H 9 * * 1-5", "minute", 0, 60, "{} 9 * * 1-5"),
        ("0 H * * *", "hour", 0, 24, "0 {} * * *"),
        ("0 0 H * *", "day-of-month", 1, 28, "0 0 {} * *"),  # a day every month has
        ("0 0 1 H *", "month", 1, 12, "0 0 1 {} *"),
        ("0 0 * * H", "day-of-week", 0, 7, "0 0 * * {}"),
        ("H(0-29) * * * *", "minute", 0, 30, "{} * * * *"),
        ("0 h(9-17) * * *", "hour", 9, 9, "0 {} * * *"),
        ("0 0 * H(jan-mar) *", "month", 1, 3, "0 0 * {} *"),
        ("0 0 * * H(MON-FRI)", "day-of-week", 1, 5, "0 0 * * {}"),
        ("0 0 * * H(FRI-SUN)", "day-of-week", 5, 3, "0 0 * * {}"),  # SUN ends as 7
    ],
)
def test_single_values(cron: str, field: str, low: int, size: int, template: str) -> None:
    for seed in ["digest", "report", "a", "b", "c"]:
        value = low + documented_n(seed, field) % size
        assert resolve_hashed(cron, seed) == template.format(value)


@pytest.mark.parametrize(
    ("cron", "field", "first", "last", "step"),
    [
        ("H/15 * * * *", "minute", 0, 59, 15),
        ("0 H/6 * * *", "hour", 0, 23, 6),
        ("0 0 H/10 * *", "day-of-month", 1, 31, 10),
        ("H(0-29)/10 * * * *", "minute", 0, 29, 10),
        ("H(10-12)/90 * * * *", "minute", 10, 12, 90),  # a step past the range: one value
    ],
)
def test_steps(cron: str, field: str, first: int, last: int, step: int) -> None:
    for seed in ["digest", "report", "a", "b"]:
        start = first + documented_n(seed, field) % min(step, last - first + 1)
        resolved = resolve_hashed(cron, seed)
        assert resolved.split()[FIELDS.index(field)] == f"{start}-{last}/{step}"
        assert cron_error(resolved) is None


def test_lists_and_the_rest_of_the_expression_are_kept() -> None:
    n = documented_n("x", "minute")
    assert resolve_hashed("H(0-29),H(30-59) 9 * * *", "x") == f"{n % 30},{30 + n % 30} 9 * * *"
    assert resolve_hashed("5,H 9  *  * THU", "x") == f"5,{n % 60} 9 * * THU"
    text = "0 9 * * THU"  # an h inside a name is not H: the very same text comes back
    assert resolve_hashed(text, "x") is text
    assert resolve_hashed("@daily", "x") == "@daily"


def test_spread_a_herd() -> None:
    minutes = {resolve_hashed("H 9 * * 1-5", f"user-{i}").split()[0] for i in range(1000)}
    assert len(minutes) == 60  # a thousand routines use every minute of nine o'clock


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        ("H(5-3) * * * *", 'minute field: range "H(5-3)" runs backwards'),
        ("H(0-60) * * * *", "minute field: 60 is out of range 0-59"),
        ("H(0-x) * * * *", 'minute field: "x" is not a number'),
        ("H/0 * * * *", "minute field: step 0 is not allowed"),
        ("H/x * * * *", 'minute field: step "x" is not a number'),
        ("H#2 * * * *", 'minute field: "H#2": H takes the forms H, H(a-b), H/n and H(a-b)/n'),
        ("* * * * H#2", 'day-of-week field: "H#2": H takes the forms H, H(a-b), H/n and H(a-b)/n'),
        ("H(1-2 * * * *", 'minute field: "H(1-2": H takes the forms H, H(a-b), H/n and H(a-b)/n'),
        ("HH * * * *", 'minute field: "HH": H takes the forms H, H(a-b), H/n and H(a-b)/n'),
        ("* * * * HL", 'day-of-week field: "HL": H takes the forms H, H(a-b), H/n and H(a-b)/n'),
    ],
)
def test_malformed_hashed_forms_are_one_line(cron: str, message: str) -> None:
    assert cron_error(cron, None, "seed") == message
    with pytest.raises(InvalidCron, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        parse_cron(cron, None, "seed")


@pytest.mark.parametrize("cron", ["H 9 * * *", "0 0 * * H(MON-FRI)", "h/15 * * * *"])
def test_h_without_a_seed_is_refused(cron: str) -> None:
    error = cron_error(cron)
    assert error is not None
    assert "H (a hashed value) needs a name to hash" in error
    with pytest.raises(InvalidCron):
        next_run(cron, None, NOW)


def test_a_resolved_h_is_a_fixed_value_for_daylight_saving() -> None:
    # Berlin springs forward 2026-03-29 02:00 -> 03:00: H 2 * * * is a specific-time job and
    # fires once, at the gap's end, like the number it resolves to.
    seed = "nightly"
    assert parse_cron("H 2 * * *", "Europe/Berlin", seed).specific_time
    after = datetime(2026, 3, 28, 12, tzinfo=UTC)
    assert next_run("H 2 * * *", "Europe/Berlin", after, seed) == datetime(
        2026, 3, 29, 1, tzinfo=UTC
    )
    assert not parse_cron("H/15 * * * *", "Europe/Berlin", seed).specific_time


def test_a_routine_resolves_from_its_name_everywhere() -> None:
    digest = Routine(name="digest", prompt="p", cron="H 9 * * 1-5", tz="Europe/Berlin")
    assert digest.resolved_cron == resolve_hashed("H 9 * * 1-5", "digest")
    assert Routine(name="digest", prompt="q", cron="H 9 * * 1-5").resolved_cron == (
        digest.resolved_cron
    )  # the same on every replica, after every restart: only the name counts
    other = Routine(name="report", prompt="p", cron="H 9 * * 1-5")
    assert other.resolved_cron != digest.resolved_cron
    plain = Routine(name="digest", prompt="p", cron="0 9 * * *")
    assert plain.resolved_cron == plain.cron
    with pytest.raises(InvalidRoutine, match=r'range "H\(9-1\)" runs backwards'):
        Routine(name="digest", prompt="p", cron="H(9-1) 9 * * *")


def test_a_wakeup_resolves_from_its_session_and_id() -> None:
    request = WakeupRequest(session="chat-1", prompt="p", cron="H H * * *")
    added = plan_add([], request, NOW, new_id="w1")
    resolved = resolve_hashed("H H * * *", wakeup_seed("chat-1", "w1"))
    assert added.resolved_cron == resolved
    assert added.fire_at == next_run(resolved, None, NOW)
    # taking it advances to the next occurrence of the same resolved schedule
    rest, taken = take_first_due([added], added.fire_at)
    assert taken == added
    assert rest[0].fire_at == next_run(resolved, None, added.fire_at)
    again = plan_add([], request, NOW, new_id="w2")
    assert again.resolved_cron == resolve_hashed("H H * * *", wakeup_seed("chat-1", "w2"))
    # the guardrail judges the resolved schedule: H/5 is every 5 minutes whatever the seed
    with pytest.raises(Exception, match="too frequent"):
        plan_add([], WakeupRequest(session="s", prompt="p", cron="H/5 * * * *"), NOW)


# --------------------------------------------------------------------------------------------
# differential: what H resolves to, then the brute-force reference on the resolved text

_MINUTE_H = st.sampled_from(["H", "H(0-29)", "H/15", "H(10-50)/20", "H/7", "H,30", "0"])
_HOUR_H = st.sampled_from(["H", "H(0-3)", "H/6", "H(1-3)", "2", "*", "H(22-23)"])
_DOM_H = st.sampled_from(["*", "H", "H(1-7)", "H/10", "L"])
_MONTH_H = st.sampled_from(["*", "*", "H", "H(MAR-OCT)"])
_DOW_H = st.sampled_from(["*", "*", "H", "H(MON-FRI)", "H(FRI-SUN)", "1-5"])


# form -> (first, last, step): one value in first-last, or every step from an offset below
# first + step; None for forms that are not H (left to the reference).
_FORMS: dict[str, tuple[int, int, int | None]] = {
    "H(0-29)": (0, 29, None),
    "H/15": (0, 59, 15),
    "H(10-50)/20": (10, 50, 20),
    "H/7": (0, 59, 7),
    "H(0-3)": (0, 3, None),
    "H/6": (0, 23, 6),
    "H(1-3)": (1, 3, None),
    "H(22-23)": (22, 23, None),
    "H(1-7)": (1, 7, None),
    "H/10": (1, 31, 10),
    "H(MAR-OCT)": (3, 10, None),
    "H(MON-FRI)": (1, 5, None),
    "H(FRI-SUN)": (5, 7, None),
}
_H_ALONE = {0: (0, 59), 1: (0, 23), 2: (1, 28), 3: (1, 12), 4: (0, 6)}


def _assert_where_the_form_says(index: int, form: str, values: set[int]) -> None:
    if form == "H":
        first, last, step = (*_H_ALONE[index], None)
    elif form in _FORMS:
        first, last, step = _FORMS[form]
    else:
        return
    if step is None:
        assert len(values) == 1
        (value,) = values
        assert first <= value <= last or (form == "H(FRI-SUN)" and value == 0)
    else:
        start = min(values)
        assert first <= start < first + step
        assert values == set(range(start, last + 1, step))


@st.composite
def hashed_expressions(draw: st.DrawFn) -> str:
    return f"{draw(_MINUTE_H)} {draw(_HOUR_H)} {draw(_DOM_H)} {draw(_MONTH_H)} {draw(_DOW_H)}"


@settings(max_examples=max(200, settings().max_examples), deadline=None)
@given(
    cron=hashed_expressions(),
    seed=st.text(min_size=1, max_size=12),
    where=instants_near_transitions(),
)
@pytest.mark.slow
def test_hashed_matches_the_reference_after_substitution(
    cron: str, seed: str, where: tuple[str, datetime]
) -> None:
    tz, after = where
    resolved = resolve_hashed(cron, seed)
    assert "H" not in resolved.upper().replace("THU", "")
    assert cron_error(resolved, tz) is None
    ref = RefCron.parse(resolved)
    fields = cron.split()
    for index, (form, values) in enumerate(
        zip(fields, (ref.minutes, ref.hours, ref.doms, ref.months, ref.dows), strict=True)
    ):
        _assert_where_the_form_says(index, form, values)
    expected = reference_next(resolved, tz, after, horizon_days=400)
    got = next_run(cron, tz, after, seed)
    assert got == next_run(resolved, tz, after)
    if expected is None:
        assert got is None or got > after + timedelta(days=400)
    else:
        assert got == expected
