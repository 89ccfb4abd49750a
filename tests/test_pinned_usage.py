"""Usage events' rules pinned whole (usage.py): the bounds of each field, each warning's text,
how counts and costs are written, and the usage line's edges (see docs/mutation.md)."""

from __future__ import annotations

import pytest

from trio_routines.usage import (
    MAX_COST,
    MAX_TOKENS,
    USAGE_LINE,
    USAGE_LINE_LIMIT,
    Tally,
    Usage,
    UsageLine,
    checked,
    cost_text,
    describe,
    from_wire,
    stored_usage,
    tokens_text,
)


def test_each_field_is_valid_up_to_its_bound_and_from_zero() -> None:
    assert checked(Usage(0, MAX_TOKENS, 0, "EUR")) == (Usage(0, MAX_TOKENS, 0.0, "EUR"), [])
    assert checked(Usage(cost=MAX_COST)) == (Usage(cost=MAX_COST, currency="USD"), [])
    assert checked(Usage(cost="1")) == (Usage(), ["cost '1' is not a valid value"])  # type: ignore[arg-type]


def test_a_long_bad_value_is_cut_in_its_warning() -> None:
    fits = "x" * 38  # its repr is 40 characters: shown whole
    assert checked(Usage(currency=fits))[1] == [f"currency {fits!r} is not 1 to 10 letters"]
    cut = "y" * 39
    assert checked(Usage(currency=cut))[1] == [
        f"currency {cut!r}"[:48] + "… is not 1 to 10 letters"
    ]


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (10**40 - 1, "9" * 40),  # 40 digits: its repr, whole
        (10**40, "<an integer of more than 40 digits>"),
        (-(10**40) + 1, "-" + "9" * 38 + "…"),
        (-(10**40), "<an integer of more than 40 digits>"),
    ],
)
def test_an_integer_past_forty_digits_is_named_not_written(count: int, shown: str) -> None:
    # (Python refuses to write one past 4,300 digits: a py: agent's 10**5000 failed its turn.)
    assert checked(Usage(input_tokens=count))[1] == [f"input_tokens {shown} is not a valid value"]


def test_a_bad_currency_drops_its_cost_and_says_so() -> None:
    assert checked(Usage(7, cost=1.0, currency="1€")) == (
        Usage(7),
        ["currency '1€' is not 1 to 10 letters", "its cost is dropped with it"],
    )


def test_a_second_currency_in_a_turn_is_dropped_whole() -> None:
    tally = Tally()
    assert tally.add(Usage(cost=1.0, currency="EUR")) == []
    assert tally.add(Usage(cost=2.0, currency="USD")) == [
        "a cost in USD after one in EUR is dropped (a turn is charged in one currency)"
    ]
    assert tally.total() == Usage(cost=1.0, currency="EUR")


@pytest.mark.parametrize(
    ("cost", "currency", "text"),
    [
        (1.0, None, "1 USD"),
        (1.0, "EUR", "1 EUR"),
        (0.042, "USD", "0.042 USD"),
        (999.5, "USD", "999.5 USD"),
        (1000, "EUR", "1000.00 EUR"),
        (1000.5, "EUR", "1000.50 EUR"),
    ],
)
def test_a_cost_is_written_short(cost: float, currency: str | None, text: str) -> None:
    assert cost_text(cost, currency) == text


def test_a_usage_is_described_in_its_own_currency() -> None:
    assert describe(Usage(1200, 300, 0.04, "EUR")) == "1.2k in, 300 out, 0.04 EUR"


@pytest.mark.parametrize(
    ("count", "text"),
    [(999, "999"), (1000, "1k"), (10**6, "1M"), (10**9, "1G"), (2_500_000_000, "2.5G")],
)
def test_a_count_is_written_short(count: int, text: str) -> None:
    assert tokens_text(count) == text


def test_refusals_of_a_record_and_of_the_wire_are_whole() -> None:
    assert from_wire({"other": 1}) == (
        None,
        "usage names none of input_tokens, output_tokens, cost, currency",
    )
    with pytest.raises(TypeError, match=r"^usage must be a Usage or None, got str$"):
        stored_usage("1k")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^usage: ") as caught:
        stored_usage(Usage(-1, cost=-1.0))
    assert str(caught.value) == (
        "usage: input_tokens -1 is not a valid value; cost -1.0 is not a valid value"
    )


def line(tokens: int) -> str:
    return f'{USAGE_LINE} {{"input_tokens": {tokens}}}'


def test_only_the_last_line_is_held_back_whatever_comes_before() -> None:
    usage_line = UsageLine()
    assert usage_line.feed(f"out\nmore\n{line(3)}") == "out\nmore\n"
    assert usage_line.close() == ("", Usage(3), None)
    assert usage_line.close() == ("", None, None)  # nothing is left held
    first = UsageLine()
    assert first.feed(f"\n{line(4)}") == "\n"
    assert first.close_after("") == ("", Usage(4), None)


def test_a_usage_line_followed_by_a_blank_line_is_output() -> None:
    text = f"{line(1)}\n\n"
    usage_line = UsageLine()
    assert usage_line.feed(text) == text
    assert usage_line.close() == ("", None, None)


def test_the_last_piece_is_output_by_close_after() -> None:
    usage_line = UsageLine()
    assert usage_line.feed("a\n") == "a\n"
    assert usage_line.close_after("tail") == ("tail", None, None)


def test_a_usage_line_is_held_up_to_its_limit() -> None:
    longest = line(5).ljust(USAGE_LINE_LIMIT)
    held = UsageLine()
    assert held.feed(longest) == ""
    assert held.close() == ("", Usage(5), None)
    too_long = UsageLine()
    assert too_long.feed(longest + " ") == longest + " "
