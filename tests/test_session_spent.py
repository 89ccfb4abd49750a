"""What each session's wake-up turns spent in the last 24 hours, shown where its pending
wake-ups are listed: ``status``/``list`` (a column and ``--json``), ``GET /wakeups`` and the
status page; read from the usage ledger, one read per listed session."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import trio
from procs import Env

from trio_routines import Scheduler
from trio_routines.agent import Completed, Event, Usage
from trio_routines.cli.client import Server
from trio_routines.cli.served import served_view
from trio_routines.cli.wakeuprows import wakeup_json, wakeup_lines
from trio_routines.errors import StateFault
from trio_routines.history import SPENT_SHOWN, sessions_spent
from trio_routines.http import serve_http
from trio_routines.http.page import gather
from trio_routines.http.render import main_html
from trio_routines.ledger import Spent
from trio_routines.records import Wakeup
from trio_routines.store import Store, UsageRecords
from trio_routines.stores.directory.ledgerfile import record_usage_sync
from trio_routines.testing import MemoryStore
from trio_routines.wakeups import WakeupRequest

NOW = datetime.now(UTC).replace(microsecond=0)
HOUR = timedelta(hours=1)
CHAT = {"inputTokens": 1500, "outputTokens": 300, "costs": {"EUR": 0.75}}
NOTHING = {"inputTokens": 0, "outputTokens": 0, "costs": {}}


async def spend(store: Store, session: str, at: datetime, usage: Usage) -> None:
    assert isinstance(store, UsageRecords)
    await store.record_usage("session", session, at, usage)


async def test_each_session_asked_for_is_read_once_over_the_window(store: Store) -> None:
    await spend(store, "chat", NOW - 25 * HOUR, Usage(1_000_000))  # before the window
    await spend(store, "chat", NOW - 3 * HOUR, Usage(1000, 200, 0.5, "EUR"))
    await spend(store, "chat", NOW - HOUR, Usage(500, 100, 0.25, "EUR"))
    await spend(store, "other", NOW - HOUR, Usage(7))  # not asked for: not read
    found = await sessions_spent(store, ["chat", "quiet", "chat"], NOW)
    assert found == {"chat": Spent(1500, 300, (("EUR", 0.75),)), "quiet": Spent()}
    # The window is the SPENT_SHOWN before now: a day on, nothing is left of it.
    assert await sessions_spent(store, ["chat"], NOW + SPENT_SHOWN) == {"chat": Spent()}


async def test_an_unreadable_ledger_is_that_sessions_alone() -> None:
    store = MemoryStore()
    await spend(store, "a", NOW - HOUR, Usage(5))
    await spend(store, "b", NOW - HOUR, Usage(6))
    store.fail("usage_since", StateFault("the ledger is unreadable"), times=1)
    found = await sessions_spent(store, ["a", "b"], NOW)
    assert isinstance(found["a"], StateFault)
    assert found["b"] == Spent(6)


async def test_a_store_without_a_ledger_shows_no_session_spending() -> None:
    class NoLedger:  # only what sessions_spent looks at: no usage_since
        pass

    assert await sessions_spent(NoLedger(), ["a"], NOW) == {}  # type: ignore[arg-type]


def _wakeup(wakeup_id: str, session: str) -> Wakeup:
    return Wakeup(id=wakeup_id, session=session, prompt="p", fire_at=NOW + HOUR)


def test_the_wake_up_table_has_a_spent_column_only_when_a_session_spent() -> None:
    wakeups = [_wakeup("w1", "chat"), _wakeup("w2", "quiet")]
    plain = wakeup_lines(wakeups, NOW, {"chat": Spent(), "quiet": Spent()})
    assert "SPENT" not in plain[0]
    lines = wakeup_lines(wakeups, NOW, {"chat": Spent(1500, 300, (("EUR", 0.75),))})
    assert lines[0].split()[:4] == ["WAKE-UP", "SESSION", "SPENT", "24H"]
    assert lines[1].split()[:7] == ["w1", "chat", "1.5k", "in,", "300", "out,", "0.75"]
    assert lines[2].split()[:3] == ["w2", "quiet", "-"]
    spent = {"chat": Spent(1500, 300, (("EUR", 0.75),)), "quiet": Spent()}
    assert wakeup_json(wakeups[0], spent)["sessionSpent24h"] == CHAT
    assert wakeup_json(wakeups[1], spent)["sessionSpent24h"] == NOTHING


def test_status_and_list_show_what_each_listed_session_spent(env: Env) -> None:
    for session in ("chat", "quiet"):
        added = env.run_cli("wake", "--session", session, "--in", "1h", "--prompt", "p")
        assert added.returncode == 0, added.stderr
    record_usage_sync(env.state, "session", "chat", NOW - 2 * HOUR, Usage(1000, 200, 0.5, "EUR"))
    record_usage_sync(env.state, "session", "chat", NOW - HOUR, Usage(500, 100, 0.25, "EUR"))
    record_usage_sync(env.state, "session", "gone", NOW - HOUR, Usage(9))  # nothing pending
    for command in ("status", "list"):
        result = env.run_cli(command)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        (header,) = [line for line in lines if line.startswith("WAKE-UP")]
        assert "SPENT 24H" in header
        (chat,) = [line for line in lines if " chat " in line]
        assert "1.5k in, 300 out, 0.75 EUR" in chat
        assert "gone" not in result.stdout
        listing = json.loads(env.run_cli(command, "--json").stdout)["wakeups"]
        shown = {entry["session"]: entry.get("sessionSpent24h") for entry in listing}
        assert shown == {"chat": CHAT, "quiet": NOTHING}  # as GET /wakeups shows them


async def _get(port: int, path: str) -> tuple[int, Any]:
    import http.client

    def go() -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        try:
            conn.request("GET", path)
            reply = conn.getresponse()
            return reply.status, json.loads(reply.read() or b"null")
        finally:
            conn.close()

    return await trio.to_thread.run_sync(go)


class Quiet:
    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        await trio.lowlevel.checkpoint()
        yield Completed()


async def test_get_wakeups_the_page_and_status_url_show_each_sessions_spending() -> None:
    store = MemoryStore()
    for session in ("chat", "chat", "quiet"):
        await store.add_wakeup(WakeupRequest(session=session, prompt="p", fire_at=NOW + HOUR), NOW)
    await spend(store, "chat", NOW - 2 * HOUR, Usage(1000, 200, 0.5, "EUR"))
    await spend(store, "chat", NOW - HOUR, Usage(500, 100, 0.25, "EUR"))
    await spend(store, "gone", NOW - HOUR, Usage(9))
    scheduler = Scheduler(agent=Quiet(), store=store, routines=[], external_clock=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        port = await nursery.start(partial(serve_http, scheduler, "127.0.0.1", 0))
        status, listing = await _get(port, "/wakeups")
        _, one = await _get(port, "/wakeups?session=quiet")
        served = await served_view(Server(f"http://127.0.0.1:{port}", token=None))
        view = await gather(scheduler)
        # An unreadable ledger: null over HTTP, "unknown" on the page; the rest still shown.
        store.fail("usage_since", StateFault("the ledger is unreadable"), times=1)
        _, unread = await _get(port, "/wakeups")
        store.fail("usage_since", StateFault("the ledger is unreadable"), times=1)
        unread_view = await gather(scheduler)
        scheduler.stop(grace=0)
    assert status == 200
    # One instant for all three: the listing's order is their ids'.
    assert sorted((e["session"], str(e["sessionSpent24h"])) for e in listing) == [
        ("chat", str(CHAT)),
        ("chat", str(CHAT)),
        ("quiet", str({"inputTokens": 0, "outputTokens": 0, "costs": {}})),
    ]
    assert [e["sessionSpent24h"]["inputTokens"] for e in one] == [0]
    nothing = {"inputTokens": 0, "outputTokens": 0, "costs": {}}
    assert {e["id"]: e["sessionSpent24h"] for e in unread} == {  # chat's read failed
        e["id"]: None if e["session"] == "chat" else nothing for e in unread
    }
    assert sorted(e["session"] for e in unread) == ["chat", "chat", "quiet"]
    assert served.session_spent == {"chat": Spent(1500, 300, (("EUR", 0.75),)), "quiet": Spent()}
    chat, quiet = view.wakeups
    assert (chat.session, chat.spent, quiet.spent) == ("chat", "1.5k in, 300 out, 0.75 EUR", "")
    html = main_html(view)
    assert "spent in the last 24 h: 1.5k in, 300 out, 0.75 EUR" in html
    assert html.count("spent in the last 24 h") == 1
    assert unread_view.wakeups[0].spent == "unknown (the ledger is unreadable)"
    assert unread_view.wakeups[1].spent == ""


async def test_a_stalled_ledger_shows_null_figures_and_never_holds_a_listing(
    monkeypatch: Any, caplog: Any
) -> None:
    from trio_routines.http import spending
    from trio_routines.routines import Routine

    monkeypatch.setattr(spending, "SPENT_DEADLINE", 0.2)
    store = MemoryStore()
    await store.add_wakeup(WakeupRequest(session="chat", prompt="p", fire_at=NOW + HOUR), NOW)
    daily = Routine(name="daily", prompt="p", cron="0 9 * * *")
    scheduler = Scheduler(agent=Quiet(), store=store, routines=[daily], external_clock=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        port = await nursery.start(partial(serve_http, scheduler, "127.0.0.1", 0))
        store.hang("usage_since")  # a disk that stopped answering
        with trio.fail_after(30):  # the figures' deadline is 0.2 s; the rest answers at once
            wakeups_status, listing = await _get(port, "/wakeups")
            routines_status, routines = await _get(port, "/routines")
        store.hangs.discard("usage_since")
        scheduler.stop(grace=0)
    assert (wakeups_status, routines_status) == (200, 200)
    assert [(e["session"], e["sessionSpent24h"]) for e in listing] == [("chat", None)]
    assert [(r["name"], r["spent24h"]) for r in routines] == [("daily", None)]
    said = [r.getMessage() for r in caplog.records]
    assert "GET /wakeups: what the sessions spent was not read within 0.2s" in said
    assert "GET /routines: what the turns spent was not read within 0.2s (0 of 1 routines)" in said
