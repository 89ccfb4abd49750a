"""Pins ``scheduler/spending.py``: what a turn's usage is recorded under, what a failed or
unanswered record says, and how a budget's refusals are logged (once per window, again once
the window has passed or the clock went back, and afresh after the budget freed up).

The part is driven on its own, with the memory store's ledger, under virtual time."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trio
from scheduler_rig import part_rig

from trio_routines.agent import Usage
from trio_routines.budgets import parse_budgets
from trio_routines.context import FireContext
from trio_routines.errors import StateFault
from trio_routines.metrics import Metrics
from trio_routines.scheduler.spending import Spending
from trio_routines.testing import MemoryStore, WallClock

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
TOKENS = Usage(input_tokens=70, output_tokens=30)
DAILY = parse_budgets("100 tokens/day")
UNANSWERED = "the store did not answer in time"
FIRE = FireContext("routine", "routine:daily", routine="daily", slot=T0)


class NoLedger(MemoryStore):
    """A store that keeps no usage ledger (None: not a part of the protocol it implements)."""

    record_usage = None  # type: ignore[assignment]
    usage_since = None  # type: ignore[assignment]


def spending_of(store: MemoryStore) -> tuple[Spending, Metrics, WallClock]:
    runtime, calls, wall = part_rig(store, now=T0)
    return Spending(store, runtime, calls), runtime.metrics, wall


@pytest.fixture(autouse=True)
def _debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_routines")


def said(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    found = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "trio_routines"]
    caplog.clear()
    return found


async def test_a_routines_turn_is_recorded_and_counted_under_the_routine(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    spending, metrics, _ = spending_of(store)
    await spending.record(FIRE, TOKENS)
    await spending.record(FireContext("run", "s", routine="daily"), TOKENS)
    assert metrics.tokens == {("daily", "in"): 140, ("daily", "out"): 60}
    spent = await store.usage_since("routine", "daily", T0 - timedelta(days=1))
    assert (spent.input_tokens, spent.output_tokens) == (140, 60)
    assert spending.record_failures == 0


async def test_a_wakeups_turn_is_recorded_under_its_session_and_counted_under_no_routine(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    spending, metrics, _ = spending_of(store)
    # A wake-up a routine's turn asked for still spends its session's budget, not the routine's.
    why = FireContext("wakeup", "chat:7", routine="daily", wakeup="w1")
    await spending.record(why, TOKENS)
    assert metrics.tokens == {("", "in"): 70, ("", "out"): 30}
    assert (await store.usage_since("session", "chat:7", T0 - timedelta(days=1))).tokens == 100
    assert (await store.usage_since("routine", "daily", T0 - timedelta(days=1))).tokens == 0


async def test_no_usage_records_nothing(autojump_clock: Any) -> None:
    store = MemoryStore()
    spending, metrics, _ = spending_of(store)
    await spending.record(FIRE, None)
    assert metrics.tokens == {}
    assert (await store.usage_since("routine", "daily", T0 - timedelta(days=1))).tokens == 0


async def test_a_record_the_store_refuses_or_never_answers_is_one_warning_each(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    spending, _, _ = spending_of(store)
    store.fail("record_usage", StateFault("disk full"), times=1)
    await spending.record(FIRE, TOKENS)
    store.hang("record_usage")
    started = trio.current_time()
    await spending.record(FireContext("wakeup", "chat:7", wakeup="w1"), TOKENS)
    assert trio.current_time() - started == 5.0  # the store call's bound
    assert spending.record_failures == 2
    assert said(caplog) == [
        (logging.WARNING, "routine daily: the turn's usage was not recorded: disk full"),
        (logging.WARNING, f"session chat:7: the turn's usage was not recorded: {UNANSWERED}"),
    ]


async def test_a_store_without_a_ledger_keeps_no_budget_and_says_so_once(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    spending, metrics, _ = spending_of(NoLedger())
    await spending.record(FIRE, TOKENS)
    assert metrics.tokens == {("daily", "in"): 70, ("daily", "out"): 30}  # counted all the same
    for _ in range(3):
        assert await spending.over_budget("routine", "daily", DAILY) is None
    assert await spending.over_budget("routine", "daily", ()) is None
    assert said(caplog) == [
        (logging.WARNING, "the store keeps no usage ledger: budgets are not kept")
    ]
    assert spending.over == {}


async def test_a_refusal_is_logged_once_per_window_again_after_it_and_after_a_clock_step_back(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    spending, metrics, wall = spending_of(store)
    await spending.record(FIRE, TOKENS)
    reason = "over budget (100 of 100 tokens in the last 24 h)"
    warned = (
        logging.WARNING,
        f"routine daily: {reason} — its turns do not start until the window frees up "
        "(logged once per window by this process)",
    )
    assert await spending.over_budget("routine", "daily", DAILY) == reason
    assert await spending.over_budget("routine", "daily", DAILY) == reason  # the same instant
    await trio.sleep(3600)
    assert await spending.over_budget("routine", "daily", DAILY) == reason
    repeated = (logging.DEBUG, f"routine daily: {reason}")
    assert said(caplog) == [warned, repeated, repeated]
    wall.jump(timedelta(minutes=-90))  # the clock stepped back past the last warning
    assert await spending.over_budget("routine", "daily", DAILY) == reason
    assert said(caplog) == [warned]
    wall.jump(timedelta(hours=23, minutes=59))  # not yet a whole window since that warning
    assert await spending.over_budget("routine", "daily", DAILY) == reason
    assert [level for level, _ in said(caplog)] == [logging.DEBUG]
    wall.jump(timedelta(minutes=1))  # a whole one: the turn at T0 is still within the last day
    assert await spending.over_budget("routine", "daily", DAILY) == reason
    assert said(caplog) == [warned]
    assert metrics.over_budget == {"daily": 6}
    assert spending.over == {("routine", "daily"): reason}


async def test_a_budget_freed_up_forgets_its_refusal_and_the_next_one_warns_at_once(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    spending, _, wall = spending_of(store)
    await spending.record(FIRE, TOKENS)
    wall.jump(timedelta(hours=23))
    assert await spending.over_budget("routine", "daily", DAILY) is not None  # warned at 23 h
    wall.jump(timedelta(hours=1, minutes=1))  # the spending left the window, 61 min later
    assert await spending.over_budget("routine", "daily", DAILY) is None
    assert spending.over == {}
    await spending.record(FIRE, TOKENS)
    caplog.clear()
    assert await spending.over_budget("routine", "daily", DAILY) is not None
    assert [level for level, _ in said(caplog)] == [logging.WARNING]  # not a repeat: a new one


async def test_a_ledger_that_cannot_be_read_refuses_and_logs_once_an_hour(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    spending, metrics, wall = spending_of(store)
    store.fail("usage_since", StateFault("ledger unreadable"))
    unknown = "budget unknown: ledger unreadable — not run"
    assert await spending.over_budget("session", "chat:7", DAILY) == unknown
    wall.jump(timedelta(minutes=59))
    assert await spending.over_budget("session", "chat:7", DAILY) == unknown
    wall.jump(timedelta(minutes=1))
    assert await spending.over_budget("session", "chat:7", DAILY) == unknown
    assert [level for level, _ in said(caplog)] == [logging.WARNING, logging.DEBUG, logging.WARNING]
    assert metrics.over_budget == {"": 3}  # a session's refusals count under no routine
    assert spending.over == {("session", "chat:7"): unknown}
    store.faults.clear()
    store.hang("usage_since")
    started = trio.current_time()
    reason = await spending.over_budget("session", "chat:7", DAILY)
    assert reason == f"budget unknown: {UNANSWERED} — not run"
    assert trio.current_time() - started == 5.0


async def test_each_window_is_read_once_and_the_first_budget_over_is_the_reason(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    spending, _, _ = spending_of(store)
    await spending.record(FIRE, TOKENS)
    reads: list[tuple[str, str, datetime]] = []
    real = store.usage_since

    async def usage_since(kind: str, name: str, since: datetime) -> Any:
        reads.append((kind, name, since))
        return await real(kind, name, since)

    store.usage_since = usage_since  # type: ignore[method-assign]
    budgets = parse_budgets("1000 tokens/day, 5 USD/day, 50 tokens/hour")
    reason = await spending.over_budget("routine", "daily", budgets)
    assert reason == "over budget (100 of 50 tokens in the last 1 h)"
    # Each window: the routine's own turns, then its session's wake-up turns.
    day, hour = T0 - timedelta(days=1), T0 - timedelta(hours=1)
    assert reads == [
        ("routine", "daily", day),
        ("session", "routine:daily", day),
        ("routine", "daily", hour),
        ("session", "routine:daily", hour),
    ]


async def test_a_record_and_a_budget_read_are_made_whole_under_a_cancelled_scope(
    autojump_clock: Any,
) -> None:
    # A turn that ran is recorded, and a budget is read, even while a stop cancels the fire.
    store = MemoryStore()
    spending, _, _ = spending_of(store)
    with trio.CancelScope() as scope:
        scope.cancel()
        await spending.record(FIRE, TOKENS)
        reason = await spending.over_budget("routine", "daily", DAILY)
    assert (await store.usage_since("routine", "daily", T0 - timedelta(days=1))).tokens == 100
    assert reason == "over budget (100 of 100 tokens in the last 24 h)"
