"""The store contract for a turn's usage, kept with its claim, over every store backend."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_routines import Routine, Scheduler
from trio_routines.agent import Completed, Event, Usage
from trio_routines.errors import StateFault
from trio_routines.records import Outcome
from trio_routines.store import Store
from trio_routines.stores import DirectoryStore
from trio_routines.testing import MemoryStore, WallClock
from trio_routines.usage import MAX_COST, MAX_TOKENS

T0 = datetime(2026, 7, 7, 10, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
SPENT = Usage(input_tokens=1500, output_tokens=220, cost=0.0375, currency="EUR")


async def test_settle_keeps_the_usage_given_and_history_reads_it_back(store: Store) -> None:
    await store.claim("daily", T0, T0)
    assert await store.settle("daily", T0, Outcome.FAILED, 5, error="quota", usage=SPENT)
    (fire,) = await store.history("daily")
    assert (fire.outcome, fire.error, fire.usage) == (Outcome.FAILED, "quota", SPENT)


async def test_tokens_alone_and_a_cost_alone_are_kept_as_given(store: Store) -> None:
    for hour, spent in enumerate([Usage(output_tokens=7), Usage(cost=2.0, currency="USD")]):
        await store.claim("daily", T0 + hour * HOUR, T0)
        await store.settle("daily", T0 + hour * HOUR, Outcome.COMPLETED, 1, usage=spent)
    assert [f.usage for f in await store.history("daily")] == [
        Usage(output_tokens=7),
        Usage(cost=2.0, currency="USD"),
    ]


async def test_no_usage_is_kept_unless_given_and_a_settle_replaces_it(store: Store) -> None:
    await store.claim("daily", T0, T0)
    await store.settle("daily", T0, Outcome.COMPLETED, 5, usage=SPENT)
    await store.settle("daily", T0, Outcome.COMPLETED, 6)  # a settle replaces it all
    await store.claim("daily", T0 + HOUR, T0 + HOUR)  # unsettled: none
    assert [f.usage for f in await store.history("daily")] == [None, None]


async def test_if_unsettled_keeps_the_first_usage(store: Store) -> None:
    await store.claim("daily", T0, T0)
    await store.settle("daily", T0, Outcome.COMPLETED, 5, usage=SPENT)
    await store.settle("daily", T0, Outcome.INTERRUPTED, if_unsettled=True, usage=Usage(1))
    (fire,) = await store.history("daily")
    assert (fire.outcome, fire.usage) == (Outcome.COMPLETED, SPENT)


async def test_usage_survives_a_reopened_store(store_factory: Callable[..., Store]) -> None:
    first = store_factory()
    await first.claim("daily", T0, T0)
    await first.settle("daily", T0, Outcome.COMPLETED, 5, usage=SPENT)
    await first.aclose()
    again = store_factory()
    assert [f.usage for f in await again.history("daily")] == [SPENT]
    await again.aclose()


async def test_a_hostile_usage_in_a_claim_file_reads_as_none(tmp_path: Path) -> None:
    async with DirectoryStore(tmp_path / "state") as store:
        await store.claim("daily", T0, T0)
        (claim,) = (tmp_path / "state" / "schedule" / "claims" / "daily").iterdir()
        for hostile in (
            '"usage":{"inputTokens":-5}',
            '"usage":"lots"',
            '"usage":{"cost":1e400,"currency":"USD"}',
            '"usage":{"cost":1,"currency":"\\u001b[31m"}',
            '"usage":{"inputTokens":' + "[" * 50 + "]" * 50 + "}",
            # Past the digits Python converts: the document was refused whole, read as damage.
            '"usage":{"inputTokens":' + "1" * 4301 + "}",
            '"usage":{"outputTokens":-' + "9" * 5000 + ',"inputTokens":5}',
        ):
            claim.write_text(
                '{"firedAt":"2026-07-07T10:00:00.000Z","outcome":"completed","ms":12,'
                + hostile
                + "}"
            )
            (fire,) = await store.history("daily")
            assert (fire.outcome, fire.ms, fire.usage) == (Outcome.COMPLETED, 12, None)
        claim.write_text(
            '{"firedAt":"2026-07-07T10:00:00.000Z","outcome":"completed","ms":' + "1" * 5000 + "}"
        )
        (fire,) = await store.history("daily")
        assert (fire.outcome, fire.ms) == (Outcome.COMPLETED, None)


async def test_a_fired_routine_keeps_its_turns_usage_with_its_claim(autojump_clock: Any) -> None:
    class Spending:
        async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
            await trio.sleep(1)
            yield Usage(input_tokens=100, output_tokens=10)
            yield Usage(output_tokens=5, cost=0.5)
            yield Completed()

    store = MemoryStore()
    wall = WallClock(T0 - timedelta(minutes=30))
    daily = Routine(name="daily", prompt="p", cron="0 * * * *")
    scheduler = Scheduler(agent=Spending(), store=store, routines=[daily], now=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(2 * 3600)
        scheduler.stop()
    assert [f.usage for f in await store.history("daily")] == [Usage(100, 15, 0.5, "USD")] * 2


async def test_turns_usage_goes_to_the_routines_and_the_sessions_ledgers(
    autojump_clock: Any,
) -> None:
    class Spending:
        async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
            await trio.sleep(1)
            yield Usage(input_tokens=100, output_tokens=10)
            yield Completed()

    store = MemoryStore()
    wall = WallClock(T0 - timedelta(minutes=30))
    daily = Routine(name="daily", prompt="p", cron="0 * * * *")
    scheduler = Scheduler(agent=Spending(), store=store, routines=[daily], now=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await scheduler.add_wakeup("chat-1", "p", delay="5m")
        await scheduler.run_now("daily")  # an on-demand run spends the routine's too
        await trio.sleep(3600)
        scheduler.stop()
    since = T0 - timedelta(days=1)
    assert (await store.usage_since("routine", "daily", since)).tokens == 2 * 110
    assert (await store.usage_since("session", "chat-1", since)).tokens == 110
    assert (await store.usage_since("session", "routine:daily", since)).tokens == 0


async def test_a_ledger_that_fails_costs_a_warning_never_the_turn(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    class Spending:
        async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
            yield Usage(input_tokens=3)
            yield Completed()

    store = MemoryStore()
    store.fail("record_usage", StateFault("disk full"))
    wall = WallClock(T0 - timedelta(minutes=30))
    daily = Routine(name="daily", prompt="p", cron="0 * * * *")
    scheduler = Scheduler(agent=Spending(), store=store, routines=[daily], now=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(3600)
        scheduler.stop()
    (fire,) = await store.history("daily")
    assert (fire.outcome, fire.usage) == (Outcome.COMPLETED, Usage(3))
    assert "routine daily: the turn's usage was not recorded: disk full" in caplog.text


async def test_a_minute_holds_at_most_what_one_event_may_and_reads_it_back(store: Store) -> None:
    # Two events of 9e11 in one minute summed to 1.8e12, which the state directory then read
    # as damage: the minute's spending vanished, and a budget let the next fire through.
    big = Usage(input_tokens=MAX_TOKENS, output_tokens=1, cost=9e11, currency="USD")
    for second in (0, 10):
        await store.record_usage("routine", "r", T0 + timedelta(seconds=second), big)  # type: ignore[attr-defined]
    spent = await store.usage_since("routine", "r", T0 - HOUR)  # type: ignore[attr-defined]
    assert (spent.input_tokens, spent.output_tokens) == (MAX_TOKENS, 2)
    assert spent.cost("USD") == MAX_COST
