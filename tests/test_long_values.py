"""A value from outside that is long is quoted cut, with its length said, in every error that
names it: a routine file's keys and values, the command line's seconds and budgets, a
wake-up's ``in``. Cron expressions, time zones and ``output:`` sizes are tested with their
own parsers (``test_output``, ``test_cron_errors``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import pytest
import trio

from trio_routines import Scheduler
from trio_routines.budgets import parse_budgets
from trio_routines.cli import values
from trio_routines.errors import InvalidOption, InvalidRoutine, InvalidWakeup
from trio_routines.routines import parse_routine_text
from trio_routines.testing import MemoryStore, ScriptedAgent
from trio_routines.text import QUOTE_LIMIT, cut, quoted

HUGE = 100_000


def test_a_value_is_quoted_whole_up_to_the_limit_and_cut_past_it() -> None:
    assert quoted("x" * QUOTE_LIMIT) == repr("x" * QUOTE_LIMIT)
    assert quoted("x" * (QUOTE_LIMIT + 1)) == f"'{'x' * QUOTE_LIMIT}'… (41 characters)"
    assert quoted("a\nb") == "'a\\nb'"  # one line
    assert cut("y" * QUOTE_LIMIT) == "y" * QUOTE_LIMIT
    assert cut("y" * (QUOTE_LIMIT + 1)) == f"{'y' * QUOTE_LIMIT}… (41 characters)"


@pytest.mark.parametrize(
    "text",
    [
        f"---\n{'k' * HUGE}: 1\n---\np",  # an unknown key
        f"---\n{'k' * HUGE}\n---\np",  # a line that is no key: value
        f"---\ntimeout: {'9x' * (HUGE // 2)}\n---\np",
        f"---\ntimeout: {'9' * HUGE}\n---\np",
        f"---\ncatchup: {'9x' * (HUGE // 2)}\n---\np",
        f"---\nbudget: {'9' * HUGE} tokens/day\n---\np",
        f"---\nbudget: 5 {'X' * (HUGE - 8)}/day\n---\np",
        f"---\nbudget: 5 tokens/{'d' * (HUGE - 7)}\n---\np",
        f'---\ntimeout: "{"9" * HUGE}\n---\np',  # an unmatched quote
    ],
)
def test_a_routine_files_long_value_is_named_cut(text: str) -> None:
    with pytest.raises(InvalidRoutine) as refused:
        parse_routine_text("r", text)
    said = str(refused.value)
    assert len(said) < 300, said[:300]
    assert "\n" not in said
    assert "characters)" in said


@pytest.mark.parametrize(
    "parse",
    [
        values.non_negative_seconds,
        values.positive_seconds,
        values.poll_seconds,
        values.given,
        values.budgets,
    ],
)
@pytest.mark.parametrize("value", ["x" * HUGE, "9" * HUGE, " " * HUGE])
def test_a_long_command_line_value_is_named_cut(parse: Callable[[str], Any], value: str) -> None:
    try:
        parse(value)
    except argparse.ArgumentTypeError as exc:
        said = str(exc)
    else:
        return  # taken (a number of nines is a number of seconds to some of them)
    assert len(said) < 300, said[:300]


def test_a_long_budget_window_is_named_cut_with_its_length() -> None:
    with pytest.raises(InvalidOption) as refused:
        parse_budgets(f"5 tokens/{'w' * (HUGE - 9)}")
    assert str(refused.value) == (
        f"a budget's window is hour, day or week, not '{'w' * 40}'… ({HUGE - 9} characters)"
    )


async def test_a_long_in_is_named_cut() -> None:
    scheduler = Scheduler(agent=ScriptedAgent(), store=MemoryStore())
    with pytest.raises(InvalidWakeup) as refused:
        await scheduler.add_wakeup("s", "p", delay="x" * HUGE)
    said = str(refused.value)
    assert len(said) < 300, said[:300]
    assert f"… ({HUGE + 2} characters)" in said  # the JSON text's length, its quotes too
    await trio.lowlevel.checkpoint()
