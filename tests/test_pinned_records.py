"""Pinned: the records' invariants at their edges, and each refusal's exact text.

Written for the mutation run of records.py (docs/mutation.md). The records are built from what
stores, the command line and the HTTP API read, so a refusal names what was wrong, and the
edges (zero attempts, a one-slot gap, a bool where a count goes) are decided, not guessed.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from trio_routines.records import Fire, Gap, GapReason, Origin, OriginKind, Wakeup

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
T1 = T0 + timedelta(minutes=1)


def exactly(message: str) -> str:
    return f"^{re.escape(message)}$"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("error", 5, "error must be a string or None, got int"),
        ("error", b"boom", "error must be a string or None, got bytes"),
        ("output", 5, "output must be a string or None, got int"),
        ("output", b"out", "output must be a string or None, got bytes"),
    ],
)
def test_a_fires_texts_are_strings_or_none(field: str, value: Any, message: str) -> None:
    with pytest.raises(TypeError, match=exactly(message)):
        Fire(T0, T0, **{field: value})


@pytest.mark.parametrize("ms", [-1, True, False, 1.5, "2"])
def test_a_fires_ms_is_a_non_negative_integer_and_never_a_bool(ms: Any) -> None:
    with pytest.raises(ValueError, match=exactly(f"ms must be a non-negative integer, got {ms!r}")):
        Fire(T0, T0, ms=ms)
    assert (Fire(T0, T0, ms=0).ms, Fire(T0, T0, ms=7).ms, Fire(T0, T0).ms) == (0, 7, None)


def test_a_fires_texts_are_kept_and_none_stays_none() -> None:
    assert (Fire(T0, T0).error, Fire(T0, T0).output) == (None, None)
    fire = Fire(T0, T0, error="boom", output="done")
    assert (fire.error, fire.output) == ("boom", "done")


def test_a_wakeups_attempts_start_at_zero() -> None:
    assert Wakeup("w", "s", "p", T0, attempts=0).attempts == 0
    assert Wakeup("w", "s", "p", T0, attempts=None).attempts is None


@pytest.mark.parametrize("attempts", [-1, True, False, "2", 1.0])
def test_a_wakeups_attempts_are_a_non_negative_integer(attempts: Any) -> None:
    message = f"attempts must be a non-negative integer, got {attempts!r}"
    with pytest.raises(ValueError, match=exactly(message)):
        Wakeup("w", "s", "p", T0, attempts=attempts)


def test_a_gap_of_one_slot_and_of_two() -> None:
    assert Gap(T0, T0, 1, GapReason.DOWN).count == 1
    assert Gap(T0, T1, 2, GapReason.DOWN).count == 2


@pytest.mark.parametrize("count", [0, -1, True, "2", 2.0])
def test_a_gaps_count_is_a_positive_integer(count: Any) -> None:
    message = f"a gap's count must be a positive integer, got {count!r}"
    with pytest.raises(ValueError, match=exactly(message)):
        Gap(T0, T1, count, GapReason.DOWN)


@pytest.mark.parametrize(
    ("first", "last", "count", "message"),
    [
        (T1, T0, 2, "a gap's last slot must not come before its first"),
        (T0, T1, 1, "a gap of one slot starts and ends at that slot"),
    ],
)
def test_a_gaps_slots_are_in_order(
    first: datetime, last: datetime, count: int, message: str
) -> None:
    with pytest.raises(ValueError, match=exactly(message)):
        Gap(first, last, count, GapReason.OVERLAP)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "http", "routine": "r"}, "a routine is named exactly by a routine's origin"),
        ({"kind": "routine", "depth": 1}, "a routine is named exactly by a routine's origin"),
        ({"kind": "api", "slot": T0}, "only a routine's origin has a slot"),
        (
            {"kind": "wakeup", "depth": 1},
            "a parent wake-up is named exactly by a wake-up's origin",
        ),
        ({"kind": "cli", "parent": "p"}, "a parent wake-up is named exactly by a wake-up's origin"),
        (
            {"kind": "routine", "routine": "r", "depth": 2},
            "a routine's origin starts a chain: depth 1",
        ),
        ({"kind": "model", "depth": 2}, "a model's origin starts a chain: depth 1"),
        ({"kind": "model"}, "a model's origin starts a chain: depth 1"),
        (
            {"kind": "model", "depth": 1, "parent": "p"},
            "a parent wake-up is named exactly by a wake-up's origin",
        ),
        (
            {"kind": "model", "depth": 1, "routine": "r"},
            "a routine is named exactly by a routine's origin",
        ),
        (
            {"kind": "wakeup", "parent": "p", "depth": 0},
            "a turn's origin has depth 1 or more, any other depth 0",
        ),
        ({"kind": "http", "depth": 1}, "a turn's origin has depth 1 or more, any other depth 0"),
    ],
)
def test_an_origins_refusals_say_exactly_why(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=exactly(message)):
        Origin(**fields)


def test_an_origin_of_each_kind() -> None:
    routine = Origin(kind=OriginKind.ROUTINE, routine="r", slot=T0, depth=1)
    assert (routine.routine, routine.slot, routine.parent) == ("r", T0, None)
    assert Origin(kind="wakeup", parent="p", depth=7).depth == 7
    assert Origin(kind="cli").depth == 0
