"""What turns spent, shown: ``history``, ``status`` (text and JSON), the status page and the
Prometheus series ``trio_routines_tokens_total`` and ``trio_routines_cost_total``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import trio
from procs import Env
from prometheus_client.parser import text_string_to_metric_families

from trio_routines import Routine, Scheduler
from trio_routines.agent import Completed, Event, Usage
from trio_routines.http.page import gather
from trio_routines.http.render import routine_html
from trio_routines.ledger import Spent, describe_spent, fires_spent
from trio_routines.metrics import Metrics
from trio_routines.records import Fire
from trio_routines.testing import MemoryStore, WallClock

NOW = datetime.now(UTC).replace(second=0, microsecond=0)


def test_history_shows_a_spent_column_only_when_some_turn_reported_usage(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    slot = datetime(2026, 7, 1, 9, tzinfo=UTC)
    env.seed("daily", slot)
    plain = env.run_cli("history", "daily").stdout.splitlines()
    assert "SPENT" not in plain[0]
    env.seed("daily", slot + timedelta(days=1), usage=Usage(12_345, 678, 0.0421, "USD"))
    shown = env.run_cli("history", "daily").stdout.splitlines()
    assert shown[0].split() == [
        "SLOT", "FIRED", "AT", "LATE", "OUTCOME", "TOOK", "SPENT", "BY", "REASON"
    ]  # fmt: skip
    assert "12.3k in, 678 out, 0.0421 USD" in shown[1]
    assert shown[2].split()[5] == "-"  # the older turn reported nothing
    (_, newest) = json.loads(env.run_cli("history", "daily", "--json").stdout)
    assert newest["usage"] == {
        "inputTokens": 12345,
        "outputTokens": 678,
        "cost": 0.0421,
        "currency": "USD",
    }


def test_status_shows_what_the_last_24_hours_spent(env: Env) -> None:
    env.routine("daily", cron="0 * * * *")
    env.routine("quiet", cron="0 * * * *")
    env.seed("daily", NOW - timedelta(days=2), usage=Usage(1_000_000))  # too old to count
    env.seed("daily", NOW - timedelta(hours=3), usage=Usage(1000, 200, 0.5, "EUR"))
    env.seed("daily", NOW - timedelta(hours=2), usage=Usage(500, 100, 0.25, "EUR"))
    env.seed("quiet", NOW - timedelta(hours=2))
    result = env.run_cli("status")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "SPENT 24H" in lines[0]
    (daily,) = [line for line in lines if line.startswith("daily")]
    assert "1.5k in, 300 out, 0.75 EUR" in daily
    listing = json.loads(env.run_cli("status", "--json").stdout)
    spent = {entry["name"]: entry.get("spent24h") for entry in listing["routines"]}
    assert spent == {
        "daily": {"inputTokens": 1500, "outputTokens": 300, "costs": {"EUR": 0.75}},
        "quiet": None,
    }


def test_fires_spent_counts_the_window_and_keeps_currencies_apart() -> None:
    t0 = datetime(2026, 7, 7, 12, tzinfo=UTC)
    fires = [
        Fire(slot=t0 - timedelta(hours=25), fired_at=t0 - timedelta(hours=25), usage=Usage(9)),
        Fire(slot=t0 - timedelta(hours=1), fired_at=t0 - timedelta(hours=1), usage=Usage(1, 2)),
        Fire(slot=t0, fired_at=t0, usage=Usage(cost=1.0, currency="EUR")),
        Fire(slot=t0, fired_at=t0, usage=Usage(cost=2.0, currency="USD")),
        Fire(slot=t0, fired_at=t0),
    ]
    spent = fires_spent(fires, t0 - timedelta(hours=24))
    assert spent == Spent(1, 2, (("EUR", 1.0), ("USD", 2.0)))
    assert describe_spent(spent) == "1 in, 2 out, 1 EUR, 2 USD"
    assert describe_spent(Spent()) == ""


def test_metrics_count_tokens_by_direction_and_cost_by_currency() -> None:
    metrics = Metrics()
    metrics.spent("daily", 100, 20, 0.5, "USD")
    metrics.spent("daily", 50, None, 0.25, "USD")
    metrics.spent("daily", None, None, 1.0, "EUR")
    metrics.spent("", 7, 3, None, None)  # a wake-up's turn
    metrics.budget_stopped("daily")
    text = metrics.render(in_flight=0, armed=1, clock_jumps=0)
    samples = {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert (
        "trio_routines_tokens_total",
        (("direction", "in"), ("routine", "daily")),
        150,
    ) in samples
    assert (
        "trio_routines_tokens_total",
        (("direction", "out"), ("routine", "daily")),
        20,
    ) in samples
    assert ("trio_routines_tokens_total", (("direction", "in"), ("routine", "")), 7) in samples
    assert (
        "trio_routines_cost_total",
        (("currency", "USD"), ("routine", "daily")),
        0.75,
    ) in samples
    assert ("trio_routines_cost_total", (("currency", "EUR"), ("routine", "daily")), 1.0) in samples
    assert ("trio_routines_over_budget_total", (("routine", "daily"),), 1) in samples


class Spending:
    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        await trio.sleep(1)
        yield Usage(input_tokens=2000, output_tokens=300, cost=0.02)
        yield Completed()


async def test_a_scheduler_exports_and_pages_what_its_turns_spent(autojump_clock: Any) -> None:
    store = MemoryStore()
    wall = WallClock(datetime(2026, 7, 7, 9, 30, tzinfo=UTC))
    daily = Routine(name="daily", prompt="p", cron="0 * * * *")
    scheduler = Scheduler(agent=Spending(), store=store, routines=[daily], now=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(2 * 3600)
        view = await gather(scheduler)
        scheduler.stop()
    text = scheduler.render_metrics()
    assert 'trio_routines_tokens_total{routine="daily",direction="in"} 4000' in text
    assert 'trio_routines_tokens_total{routine="daily",direction="out"} 600' in text
    assert 'trio_routines_cost_total{routine="daily",currency="USD"} 0.04' in text
    (routine,) = view.routines
    assert routine.spent == "4k in, 600 out, 0.04 USD"
    assert "spent in the last 24 h: 4k in, 600 out, 0.04 USD" in routine_html(routine, view.now)


async def _get(port: int, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    import http.client

    def go() -> Any:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        try:
            data = None if body is None else json.dumps(body).encode()
            headers = {} if body is None else {"Content-Type": "application/json"}
            conn.request(method, path, body=data, headers=headers)
            reply = conn.getresponse()
            return reply.status, json.loads(reply.read() or b"null")
        finally:
            conn.close()

    return await trio.to_thread.run_sync(go)


async def test_the_http_api_shows_usage_budgets_and_why_a_slot_was_skipped() -> None:
    from functools import partial

    from trio_routines.http import serve_http

    class Costly:
        async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
            await trio.lowlevel.checkpoint()
            yield Usage(input_tokens=900, output_tokens=200)
            yield Completed()

    budgeted = Routine(name="daily", prompt="p", cron="0 * * * *", budgets="1k tokens/day")  # type: ignore[arg-type]
    store = MemoryStore()
    scheduler = Scheduler(agent=Costly(), store=store, routines=[budgeted], external_clock=True)
    slot = NOW.replace(minute=0) - timedelta(hours=2)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        port = await nursery.start(partial(serve_http, scheduler, "127.0.0.1", 0))
        for hour in (0, 1):
            fired = {
                "name": "daily",
                "slot": (slot + timedelta(hours=hour)).isoformat(),
                "wait": True,
            }
            status, _ = await _get(port, "POST", "/fire", fired)
            assert status == 200
        status, listing = await _get(port, "GET", "/routines")
        _, history = await _get(port, "GET", "/routines/daily/history")
        scheduler.stop(grace=0)
    assert status == 200
    (daily,) = listing
    assert (daily["budget"], daily["overBudget"]) == (
        "1k tokens/day",
        "over budget (1.1k of 1k tokens in the last 24 h)",
    )
    first, second = history
    assert first["usage"] == {"inputTokens": 900, "outputTokens": 200}
    assert (second["outcome"], second["error"], "usage" in second) == (
        "skipped",
        "over budget (1.1k of 1k tokens in the last 24 h)",
        False,
    )
