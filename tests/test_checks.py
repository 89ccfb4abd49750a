"""The checks of options given in code (trio_routines.checks), whole: each refusal is one
line naming the option."""

from __future__ import annotations

import decimal
import math
from typing import Any

import pytest

from trio_routines.checks import checked_count, checked_seconds
from trio_routines.errors import InvalidOption


@pytest.mark.parametrize(
    ("value", "zero", "endless", "taken"),
    [
        (0.5, False, False, 0.5),
        (0, True, False, 0.0),
        (decimal.Decimal("2.5"), False, False, 2.5),
        (math.inf, False, True, math.inf),
        (3, True, True, 3.0),
    ],
)
def test_a_number_of_seconds_is_taken_as_a_float(
    value: Any, zero: bool, endless: bool, taken: float
) -> None:
    seconds = checked_seconds("wait", value, zero=zero, endless=endless)
    assert (seconds, type(seconds)) == (taken, float)


@pytest.mark.parametrize(
    ("value", "zero", "endless", "said"),
    [
        (0, False, False, "a finite number of seconds, more than 0: 0"),
        (-1, True, False, "a finite number of seconds, 0 or more: -1"),
        (1e-9 - 1, True, False, f"a finite number of seconds, 0 or more: {1e-9 - 1!r}"),
        (math.nan, True, False, "a finite number of seconds, 0 or more: nan"),
        (math.inf, False, False, "a finite number of seconds, more than 0: inf"),
        (-math.inf, False, True, "a number of seconds (or infinity), more than 0: -inf"),
        (10**400, False, False, "a finite number of seconds, more than 0: " + repr(10**400)),
        (
            decimal.Decimal("sNaN"),
            False,
            False,
            "a finite number of seconds, more than 0: Decimal('sNaN')",
        ),
        (True, True, False, "a finite number of seconds, 0 or more: True"),
        ("30", False, False, "a finite number of seconds, more than 0: '30'"),
    ],
)
def test_what_is_no_number_of_seconds_is_refused_naming_the_option(
    value: Any, zero: bool, endless: bool, said: str
) -> None:
    with pytest.raises(InvalidOption) as refused:
        checked_seconds("wait", value, zero=zero, endless=endless)
    assert str(refused.value) == f"wait must be {said}"


def test_a_count_is_a_whole_number_from_its_least() -> None:
    assert checked_count("n", 3, least=3) == 3
    assert checked_count("n", 0, least=0) == 0
    for value, said in [
        (2, "n must be at least 3"),
        (3.0, "n must be a whole number, at least 3: 3.0"),
        (True, "n must be a whole number, at least 3: True"),
        ("4", "n must be a whole number, at least 3: '4'"),
    ]:
        with pytest.raises(InvalidOption) as refused:
            checked_count("n", value, least=3)
        assert str(refused.value) == said
