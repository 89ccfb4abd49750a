"""The records built through their slots on the hot path are the records their classes build.

A fire's claim answer, its context, its turn's and its slot's results and a store's claim
record are made without the classes' generated ``__init__`` (``trio_routines.slots``): each
builder must give a record equal to the checked one and equally hashed, and the store's record
builder must also refuse what its class refuses, in the same words.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_routines import Usage
from trio_routines.context import FireContext, cron_context
from trio_routines.records import (
    ClaimResult,
    ClaimStatus,
    Fire,
    Outcome,
    claim_result,
    fire_record,
)
from trio_routines.scheduler.results import settled_result
from trio_routines.scheduler.state import FireResult
from trio_routines.slots import setters
from trio_routines.turns import TurnResult, _completed

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)

instants = st.datetimes(
    min_value=datetime(2000, 1, 1),
    max_value=datetime(2100, 1, 1),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), UTC]),
)
texts = st.none() | st.text(max_size=40) | st.just("line one\nline two\r\n" + "x" * 2000)
usages = st.none() | st.builds(
    Usage,
    input_tokens=st.none() | st.integers(0, 10**6),
    output_tokens=st.none() | st.integers(0, 10**6),
    cost=st.none() | st.floats(0, 100, allow_nan=False),
)


def same_record(built: Any, checked: Any) -> None:
    """Equal field by field (``eq=False`` fields too), and equally hashed."""
    assert type(built) is type(checked)
    assert attrs.asdict(built, recurse=False) == attrs.asdict(checked, recurse=False)
    assert built == checked
    assert hash(built) == hash(checked)


def test_setters_are_refused_unless_they_name_every_field() -> None:
    with pytest.raises(TypeError) as missing:
        setters(ClaimResult, "status", "newest")
    assert str(missing.value) == (
        "ClaimResult has the fields ['status', 'newest', 'holds'], not ['status', 'newest']"
    )
    with pytest.raises(TypeError, match=r"not \['status', 'newest', 'holds', 'extra'\]$"):
        setters(ClaimResult, "status", "newest", "holds", "extra")
    assert len(setters(ClaimResult, "holds", "status", "newest")) == 3  # any order


def test_setters_set_the_named_slot_in_the_order_given() -> None:
    set_newest, set_status, set_holds = setters(ClaimResult, "newest", "status", "holds")
    result: ClaimResult = object.__new__(ClaimResult)
    set_newest(result, "2026-07-07T10:00:00.000Z")
    set_status(result, ClaimStatus.STALE)
    set_holds(result, (True,))
    same_record(result, ClaimResult(ClaimStatus.STALE, "2026-07-07T10:00:00.000Z", (True,)))


@given(
    slot=instants,
    fired_at=instants,
    outcome=st.none() | st.sampled_from(Outcome),
    ms=st.none() | st.integers(0, 10**9),
    error=texts,
    replica=st.none() | st.text(min_size=1, max_size=10),
    output=texts,
    usage=usages,
)
def test_a_fire_record_is_the_fire_the_class_builds(**values: Any) -> None:
    same_record(fire_record(**values), Fire(**values))


def test_a_fire_record_takes_its_values_in_the_classs_order() -> None:
    values = ("slot", "fired_at", "outcome", "ms", "error", "replica", "output", "usage")
    given = (
        T0,
        T0 + timedelta(seconds=1, microseconds=1500),
        Outcome.FAILED,
        12,
        "boom",
        "host:1",
        "said",
        Usage(input_tokens=3),
    )
    same_record(fire_record(*given), Fire(**dict(zip(values, given, strict=True))))


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"ms": -1}, ValueError),
        ({"ms": True}, ValueError),
        ({"ms": 1.5}, ValueError),
        ({"error": 5}, TypeError),
        ({"output": b"out"}, TypeError),
        ({"usage": "lots"}, TypeError),
        ({"usage": Usage(input_tokens=-1)}, ValueError),
        ({"slot": datetime(2026, 7, 7, 10)}, ValueError),  # naive
        ({"fired_at": datetime(2026, 7, 7, 10)}, ValueError),
        # Two wrong: every converter runs before the validator, as in the class.
        ({"ms": -1, "error": 5}, TypeError),
        ({"ms": -1, "usage": "lots"}, TypeError),
    ],
)
def test_a_fire_record_refuses_what_the_class_refuses_in_its_words(
    values: dict[str, Any], error: type[Exception]
) -> None:
    fields: dict[str, Any] = {"slot": T0, "fired_at": T0, **values}
    with pytest.raises(error) as checked:
        Fire(**fields)
    with pytest.raises(error) as built:
        fire_record(**fields)
    assert str(built.value) == str(checked.value)


def test_a_fire_record_checks_nothing_while_attrs_validators_are_off() -> None:
    attrs.validators.set_disabled(True)
    try:
        checked, built = Fire(T0, T0, ms=-1), fire_record(T0, T0, ms=-1)
    finally:
        attrs.validators.set_disabled(False)
    assert checked.ms == built.ms == -1
    same_record(built, checked)


@pytest.mark.parametrize("status", list(ClaimStatus))
def test_a_claim_result_is_the_one_the_class_builds(status: ClaimStatus) -> None:
    same_record(
        claim_result(status, "2026-07-07T10:00:00.000Z"),
        ClaimResult(status, "2026-07-07T10:00:00.000Z"),
    )


@pytest.mark.parametrize(
    ("outcome", "reason", "failed"),
    [
        (Outcome.COMPLETED, None, None),
        (Outcome.FAILED, None, "boom"),
        (Outcome.SKIPPED, "busy: session s has a turn in flight", None),
    ],
)
def test_a_settled_result_is_the_claimed_result_the_class_builds(
    outcome: Outcome, reason: str | None, failed: str | None
) -> None:
    settled = T0 + timedelta(seconds=3)
    built = settled_result(
        "daily", T0, outcome, 40, reason=reason, failed=failed, settled_at=settled
    )
    checked = FireResult(
        "daily",
        T0,
        claimed=True,
        reason=reason,
        outcome=outcome,
        ms=40,
        failed=failed,
        settled_at=settled,
    )
    same_record(built, checked)
    assert built.settled_at is settled  # not compared by the class: checked here


def test_a_completed_turn_is_the_result_the_class_builds() -> None:
    same_record(_completed(7), TurnResult(Outcome.COMPLETED, 7))


def test_a_cron_context_is_the_context_the_class_builds() -> None:
    same_record(
        cron_context("s", "daily", T0, "host:1"),
        FireContext(kind="routine", session="s", routine="daily", slot=T0, replica="host:1"),
    )
