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
from trio_routines.cli.status import routine_json, routine_rows
from trio_routines.http.page import gather
from trio_routines.http.render import routine_html
from trio_routines.ledger import Spent, describe_spent, fires_spent, spent_from_json, spent_to_json
from trio_routines.metrics import Metrics
from trio_routines.records import Fire, Outcome
from trio_routines.stores.directory import DirectoryStore
from trio_routines.stores.directory.ledgerfile import record_usage_sync
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


# -- "spent in the last 24 h" is the ledger's: what the budgets count, not the claims kept --

OFTEN = "*/10 * * * *"


def test_status_counts_a_day_of_turns_beyond_the_claims_the_store_keeps(env: Env) -> None:
    env.routine("often", cron=OFTEN)
    store = DirectoryStore(env.state, keep=2)  # keeps the newest 2 claims of 6 turns
    for n in reversed(range(6)):
        slot = NOW - timedelta(minutes=10 * (n + 1))
        assert store.claim_sync("often", slot, slot).taken
        usage = Usage(100, 10, 0.5, "USD")
        store.settle_sync("often", slot, Outcome.COMPLETED, 5, usage=usage)
        record_usage_sync(env.state, "routine", "often", slot, usage)  # as a turn's end does
    history = json.loads(env.run_cli("history", "often", "--json").stdout)
    assert [entry["usage"]["inputTokens"] for entry in history] == [100, 100]  # per turn
    (often,) = [line for line in env.run_cli("status").stdout.splitlines() if "often" in line]
    assert "600 in, 60 out, 3 USD" in often
    (entry,) = json.loads(env.run_cli("status", "--json").stdout)["routines"]
    assert entry["spent24h"] == {"inputTokens": 600, "outputTokens": 60, "costs": {"USD": 3.0}}


async def test_the_page_and_status_rows_count_the_ledger_not_the_claims_kept(
    autojump_clock: Any,
) -> None:
    store = MemoryStore(keep=3)
    wall = WallClock(datetime(2026, 7, 7, 9, 55, tzinfo=UTC))
    often = Routine(name="often", prompt="p", cron=OFTEN)
    scheduler = Scheduler(agent=Spending(), store=store, routines=[often], now=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(2 * 3600)  # 12 turns, at 10:00 ... 11:50
        view = await gather(scheduler)
        scheduler.stop()
    assert len(await store.history("often")) == 3
    (routine,) = view.routines
    assert routine.spent == "24k in, 3.6k out, 0.24 USD"
    (row,) = await routine_rows(store, [often], wall())
    assert (row.spent.input_tokens, row.spent.output_tokens) == (24_000, 3600)
    assert routine_json(row)["spent24h"]["inputTokens"] == 24_000
    # A day later the ledger's turns have left the window, as the budget's have.
    wall.set(wall() + timedelta(hours=24, minutes=1))
    (row,) = await routine_rows(store, [often], wall())
    assert row.spent == Spent()


async def test_the_http_api_and_status_url_count_the_ledger_not_the_claims_kept() -> None:
    from functools import partial

    from trio_routines.cli.client import Server
    from trio_routines.cli.served import served_view
    from trio_routines.http import serve_http

    class Costly:
        async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
            await trio.lowlevel.checkpoint()
            yield Usage(input_tokens=900, output_tokens=200, cost=0.25, currency="EUR")
            yield Completed()

    often = Routine(name="often", prompt="p", cron=OFTEN)
    store = MemoryStore(keep=2)
    scheduler = Scheduler(agent=Costly(), store=store, routines=[often], external_clock=True)
    first = NOW.replace(minute=NOW.minute - NOW.minute % 10) - timedelta(hours=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        port = await nursery.start(partial(serve_http, scheduler, "127.0.0.1", 0))
        for n in range(5):
            fired = {"name": "often", "slot": (first + timedelta(minutes=10 * n)).isoformat()}
            status, _ = await _get(port, "POST", "/fire", {**fired, "wait": True})
            assert status == 200
        status, listing = await _get(port, "GET", "/routines")
        served = await served_view(Server(f"http://127.0.0.1:{port}", token=None))
        scheduler.stop(grace=0)
    assert status == 200
    assert len(await store.history("often")) == 2
    (entry,) = listing
    assert entry["spent24h"] == {"inputTokens": 4500, "outputTokens": 1000, "costs": {"EUR": 1.25}}
    (row,) = served.rows
    assert row.spent == Spent(4500, 1000, (("EUR", 1.25),))


def test_a_spent_figure_read_back_from_json_is_checked() -> None:
    spent = Spent(4500, 1000, (("EUR", 1.25), ("USD", 0.0)))
    assert spent_from_json(spent_to_json(spent)) == spent
    for bad in (
        None,
        [],
        {"inputTokens": 1, "outputTokens": 2},
        {"inputTokens": -1, "outputTokens": 2, "costs": {}},
        {"inputTokens": True, "outputTokens": 2, "costs": {}},
        {"inputTokens": 1, "outputTokens": 2.5, "costs": {}},
        {"inputTokens": 1, "outputTokens": 2, "costs": {"EUR": -1}},
        {"inputTokens": 1, "outputTokens": 2, "costs": {"E U R": 1}},
        {"inputTokens": 1, "outputTokens": 2, "costs": {"EUR": "1"}},
    ):
        assert spent_from_json(bad) is None, bad
