"""Budgets pinned whole (budgets.py): each refusal's text, the amount's bounds, and how a
money budget is written and reported over (see docs/mutation.md)."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_routines import budgets
from trio_routines.budgets import (
    MAX_AMOUNT,
    Budget,
    budgets_text,
    checked_budgets,
    parse_budget,
    routine_budgets,
)
from trio_routines.errors import InvalidOption, InvalidRoutine
from trio_routines.ledger import Spent
from trio_routines.routines import Routine


def test_a_money_budget_is_written_in_its_own_currency() -> None:
    weekly = Budget(5.0, "EUR", "week")
    assert str(weekly) == "5 EUR/week"
    assert budgets_text([Budget(200_000, "tokens", "day"), weekly]) == "200k tokens/day, 5 EUR/week"
    spent = Spent(costs=(("EUR", 6.25), ("USD", 100.0)))
    assert weekly.over_text(spent) == "over budget (6.25 of 5 EUR in the last 7 days)"


ABOVE_0 = "a budget's amount must be above 0, not "


@pytest.mark.parametrize(
    ("amount", "unit", "window", "message"),
    [
        (5.0, "EUR", "month", "a budget's window is hour, day or week, not 'month'"),
        (0.0, "EUR", "day", f"{ABOVE_0}0.0"),
        (
            MAX_AMOUNT * 2,
            "tokens",
            "day",
            "a budget's amount must be above 0, not 2000000000000000.0",
        ),
        (5.0, "eur", "day", "a budget's unit is tokens or a currency code, not 'eur'"),
    ],
)
def test_a_bad_budget_is_refused_whole(amount: float, unit: str, window: str, message: str) -> None:
    with pytest.raises(InvalidOption) as caught:
        Budget(amount, unit, window)
    assert str(caught.value) == message


def test_the_largest_amount_is_allowed_written_or_built() -> None:
    assert Budget(MAX_AMOUNT, "tokens", "day").amount == MAX_AMOUNT
    assert parse_budget("1000000G tokens/day") == Budget(MAX_AMOUNT, "tokens", "day")


def test_a_budget_that_is_not_one_is_refused_whole_and_as_the_routines() -> None:
    with pytest.raises(InvalidOption) as option:
        checked_budgets([Budget(1.0, "tokens", "day"), 5])  # type: ignore[list-item]
    wanted = "budgets must be text ('200k tokens/day, 5 USD/week') or a sequence of Budget, not "
    assert str(option.value) == wanted + "int in a sequence"
    with pytest.raises(InvalidRoutine) as routine:
        routine_budgets(["200k tokens/day"])
    assert str(routine.value) == f'"budget": {wanted}str in a sequence'
    for scalar in (5, 2.5, object()):
        with pytest.raises(InvalidRoutine) as unlisted:
            Routine(name="r", prompt="p", budgets=scalar)
        assert str(unlisted.value) == f'"budget": {wanted}{type(scalar).__name__}'


def _distance(word: str, target: str) -> int:
    """Edit distance, the plain recursive way: the judge of ``_near``."""

    @functools.cache
    def d(i: int, j: int) -> int:
        if i == len(word) or j == len(target):
            return len(word) - i + len(target) - j
        return min(
            d(i + 1, j) + 1,  # a letter of the word left out
            d(i, j + 1) + 1,  # a letter of the target added
            d(i + 1, j + 1) + (word[i] != target[j]),
        )

    return d(0, 0)


@given(
    st.one_of(
        st.text(alphabet="tokensabx", max_size=10),
        st.sampled_from(["tok", "toke", "kens", "ens", "xxtokens", "xxxtokens", "tokensss"]),
    )
)
def test_a_misspelling_is_two_edits_from_tokens_at_most(word: str) -> None:
    assert budgets._near(word, "tokens") == (_distance(word, "tokens") <= 2)


@pytest.mark.parametrize(
    ("word", "near"),
    [
        ("tokens", True),
        ("toke", True),  # two left out
        ("tok", False),  # three
        ("kens", True),  # two left out at the start
        ("ens", False),
        ("xxtokens", True),  # two added at the start
        ("xxxtokens", False),
        ("tokensss", True),  # two added at the end
        ("tokenssss", False),
        ("takans", True),  # two changed
        ("takanz", False),  # three
        ("", False),
    ],
)
def test_the_edges_of_a_misspelling(word: str, near: bool) -> None:
    assert budgets._near(word, "tokens") is near


@pytest.mark.parametrize("unit", ["TOKNS", "TOK", "TKNS", "TOKENSSS", "TOKEN", "TOKENS"])
def test_a_budget_made_directly_refuses_tokens_misspelt_as_a_currency(unit: str) -> None:
    with pytest.raises(InvalidOption, match=f"not '{unit}'"):
        Budget(5, unit, "day")
    assert Budget(5, "TON", "day").unit == "TON"
