"""The HTTP surface against a real hypercorn server on a loopback port.

Every server test starts :func:`serve_http` next to a running :class:`Scheduler` (external-clock
mode, so no cron loop fires on its own during a test) and talks to it with the standard
library's ``http.client`` in a worker thread, or with raw Trio TCP streams where a request
must be malformed or never end. The clock is the real one: the server does real IO.

The Hypothesis test calls the ASGI application directly with synthetic ``receive``/``send``
(hundreds of examples through a socket would be slow and would test hypercorn more than us);
each example builds its own scheduler inside its own ``trio.run``.
"""

from __future__ import annotations

import http.client
import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any
from urllib.parse import quote

import attrs
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_routines.cron import next_run
from trio_routines.errors import StateFault, TrioRoutinesError
from trio_routines.http import (
    MAX_BODY,
    BadToken,
    InsecureBind,
    check_bind,
    make_app,
    serve_http,
)
from trio_routines.instants import format_iso, parse_iso, truncate_ms
from trio_routines.records import Gap, GapReason, Origin, OriginKind, Outcome, Wakeup
from trio_routines.routines import Routine
from trio_routines.scheduler import Scheduler
from trio_routines.store import GapRecords, Store
from trio_routines.testing import Busy, Complete, Fail, Hang, MemoryStore, ScriptedAgent
from trio_routines.wakeups import WakeupRequest

SECRET = "PROMPT-SECRET-7f3a"
LONG = "L" * 80
ROUTINES = [
    Routine(name="daily", prompt=f"{SECRET} daily", cron="0 9 * * *", tz="Europe/Berlin"),
    Routine(name="adhoc", prompt=f"{SECRET} adhoc"),
    Routine(name=LONG, prompt=f"{SECRET} long"),
]
ON_GRID = "2026-07-07T07:00:00.000Z"  # 09:00 in Berlin (summer time)
TOKEN = "s3cret-token"
LIMITER = trio.CapacityLimiter(64)
WAKEUP_FAULTS = ("wakeups", "add_wakeup", "list_wakeups", "remove_wakeup")


@attrs.frozen
class Reply:
    status: int
    headers: dict[str, str]
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw)

    @property
    def ok(self) -> bool:
        return self.status in (200, 202)


@attrs.frozen
class Server:
    port: int
    scheduler: Scheduler
    agent: ScriptedAgent
    store: Store

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> Reply:
        """One request on a fresh connection with ``http.client``, in a worker thread."""
        sent = dict(headers or {})
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            sent.setdefault("Content-Type", "application/json")

        def go() -> Reply:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=15)
            try:
                conn.request(method, quote(path, safe="/?=&"), body=data, headers=sent)
                response = conn.getresponse()
                payload = response.read()
                found = {k.lower(): v for k, v in response.getheaders()}
                return Reply(response.status, found, payload)
            finally:
                conn.close()

        return await trio.to_thread.run_sync(go, limiter=LIMITER)

    async def settled(self, name: str, count: int = 1) -> list[Any]:
        """Wait until ``count`` fires of ``name`` have settled; their history."""
        with trio.fail_after(10):
            while True:
                fires = await self.store.history(name)
                if len(fires) >= count and all(f.outcome is not None for f in fires):
                    return fires
                await trio.sleep(0.01)


@asynccontextmanager
async def serving(
    *,
    agent: ScriptedAgent | None = None,
    store: Store | None = None,
    token: str | None = None,
    external_clock: bool = True,
    wakeups: bool = True,
) -> AsyncIterator[Server]:
    agent = agent or ScriptedAgent()
    store = store or MemoryStore()
    scheduler = Scheduler(
        agent=agent,
        store=store,
        routines=ROUTINES,
        external_clock=external_clock,
        wakeups=wakeups,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        port = await nursery.start(partial(serve_http, scheduler, "127.0.0.1", 0, token=token))
        yield Server(port, scheduler, agent, store)
        scheduler.stop(grace=0)


async def raw_exchange(port: int, head: bytes, feed: Callable[..., Any] | None = None) -> bytes:
    """Send ``head`` on a raw connection, run ``feed(stream)`` alongside, read to EOF."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    received = b""
    async with stream, trio.open_nursery() as nursery:

        async def writer() -> None:
            try:
                await stream.send_all(head)
                if feed is not None:
                    await feed(stream)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the server hung up on us: that is the point of some tests

        nursery.start_soon(writer)
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                received += chunk
        nursery.cancel_scope.cancel()
    return received


async def until(predicate: Callable[[], object]) -> None:
    """Wait (up to 5 s) until ``predicate()`` holds; the runtime offers no event for these."""
    with trio.fail_after(5):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.01)


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def body_of(response: bytes) -> Any:
    return json.loads(response.split(b"\r\n\r\n", 1)[1])


def assert_error(reply: Reply, status: int) -> str:
    assert reply.status == status, (reply.status, reply.raw)
    assert reply.headers["content-type"] == "application/json"
    assert b"\n" not in reply.raw
    message = reply.json["error"]
    assert isinstance(message, str)
    assert message
    return message


# -- POST /fire ----------------------------------------------------------------------------------


async def test_fire_answers_202_and_the_fire_continues_in_the_runtime() -> None:
    agent = ScriptedAgent(Complete(duration=0.2))
    async with serving(agent=agent) as server:
        reply = await server.call("POST", "/fire", {"name": "daily", "slot": ON_GRID})
        assert reply.status == 202
        assert reply.json == {"claimed": True, "name": "daily", "slot": ON_GRID}
        # Answered before the turn ended; it goes on in the scheduler's nursery.
        assert agent.finished == []
        [fire] = await server.settled("daily")
        assert fire.outcome is Outcome.COMPLETED
        assert [t.session for t in agent.turns] == ["routine:daily"]
        assert agent.turns[0].text == f"{SECRET} daily"


async def test_fire_with_wait_answers_the_outcome() -> None:
    agent = ScriptedAgent()
    agent.script(Complete(), Fail("the model said no"), session="routine:adhoc")
    async with serving(agent=agent) as server:
        first = await server.call(
            "POST", "/fire", {"name": "adhoc", "slot": "2026-07-07T10:00:00Z", "wait": True}
        )
        assert first.status == 200
        body = first.json
        assert body.pop("ms") >= 0
        assert body == {
            "claimed": True,
            "name": "adhoc",
            "slot": "2026-07-07T10:00:00.000Z",
            "outcome": "completed",
        }
        second = await server.call(
            "POST", "/fire", {"name": "adhoc", "slot": "2026-07-07T11:00:00Z", "wait": True}
        )
        assert second.status == 200
        assert second.json["outcome"] == "failed"
        assert second.json["failed"] == "the model said no"


async def test_fire_duplicate_and_stale_are_200_unclaimed() -> None:
    async with serving() as server:
        fire = partial(server.call, "POST", "/fire")
        assert (await fire({"name": "adhoc", "slot": "2026-07-07T10:00:00Z", "wait": True})).ok
        duplicate = await fire({"name": "adhoc", "slot": "2026-07-07T12:00:00+02:00"})
        assert duplicate.status == 200
        assert duplicate.json == {
            "claimed": False,
            "reason": "duplicate",
            "name": "adhoc",
            "slot": "2026-07-07T10:00:00.000Z",
        }
        stale = await fire({"name": "adhoc", "slot": "2026-07-07T09:00:00Z", "wait": True})
        assert stale.status == 200
        assert stale.json["claimed"] is False
        assert stale.json["reason"] == "stale"
        assert len(server.agent.turns) == 1


async def test_fire_slot_must_be_on_the_grid_of_a_cron_routine() -> None:
    async with serving() as server:
        off = await server.call("POST", "/fire", {"name": "daily", "slot": "2026-07-07T09:00:00Z"})
        message = assert_error(off, 400)
        assert "not on the cron grid" in message
        assert "daily" in message
        # The same instant written in another zone is the same slot.
        on = await server.call(
            "POST", "/fire", {"name": "daily", "slot": "2026-07-07T09:00:00+02:00"}
        )
        assert on.status == 202
        assert on.json["slot"] == ON_GRID
        await server.settled("daily")
        assert len(await server.store.history("daily")) == 1


async def test_fire_and_a_wake_ups_until_take_an_instant_as_the_command_line_does() -> None:
    """``2026-07-07T07:00Z`` without seconds, a space for ``T``, ``+02`` or ``+0200``: what
    ``fire --slot`` and ``wake --until`` take, an external clock and a client may send too."""
    same_slot = ["2026-07-07 09:00+02", "2026-07-07T09:00+0200", "2026-07-07t07:00:00,0001z"]
    async with serving() as server:
        first = await server.call("POST", "/fire", {"name": "daily", "slot": "2026-07-07T07:00Z"})
        assert (first.status, first.json["slot"]) == (202, ON_GRID)
        for typed in same_slot:
            again = await server.call("POST", "/fire", {"name": "daily", "slot": typed})
            assert (again.status, again.json["reason"], again.json["slot"]) == (
                200,
                "duplicate",
                ON_GRID,
            ), typed
        await server.settled("daily")
        body = {"session": "chat:1", "prompt": "p", "cron": "0 9 * * *"}
        until = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(days=2)
        added = await server.call(
            "POST", "/wakeups", body | {"until": until.strftime("%Y-%m-%dT%H:%MZ")}
        )
        assert added.status == 201, added.json
        (stored,) = await server.store.list_wakeups()
        assert stored.until == until


async def test_fire_on_demand_accepts_any_instant_truncated_to_ms() -> None:
    async with serving() as server:
        first = await server.call(
            "POST", "/fire", {"name": "adhoc", "slot": "2026-07-07T10:11:12.345678Z"}
        )
        assert first.status == 202
        assert first.json["slot"] == "2026-07-07T10:11:12.345Z"
        again = await server.call(
            "POST", "/fire", {"name": "adhoc", "slot": "2026-07-07T10:11:12.345999Z"}
        )
        assert again.json == {**first.json, "claimed": False, "reason": "duplicate"}
        await server.settled("adhoc")


async def test_fire_of_a_slot_not_yet_arrived_claims_nothing() -> None:
    soon = format_iso(datetime.now(UTC) + timedelta(minutes=2))
    far = format_iso(datetime.now(UTC) + timedelta(days=2))
    async with serving() as server:
        near = await server.call("POST", "/fire", {"name": "adhoc", "slot": soon})
        assert "has not arrived yet" in assert_error(near, 503)
        assert 100 <= int(near.headers["retry-after"]) <= 120  # retry when it is due
        later = await server.call("POST", "/fire", {"name": "adhoc", "slot": far})
        assert "has not arrived yet" in assert_error(later, 400)
        assert await server.store.history("adhoc") == []
        assert server.agent.turns == []


async def test_fire_state_fault_is_503_with_retry_after_and_claims_nothing() -> None:
    store = MemoryStore()
    store.faults["claim"] = StateFault("EIO: disk on fire")
    async with serving(store=store) as server:
        for wait in (False, True):
            reply = await server.call(
                "POST", "/fire", {"name": "daily", "slot": ON_GRID, "wait": wait}
            )
            message = assert_error(reply, 503)
            assert "nothing was claimed" in message
            assert "disk on fire" not in message  # details go to the log, not the caller
            assert reply.headers["retry-after"] == "5"
        assert store.claims.get("daily", {}) == {}
        assert server.agent.turns == []
        del store.faults["claim"]
        retry = await server.call("POST", "/fire", {"name": "daily", "slot": ON_GRID})
        assert retry.status == 202
        await server.settled("daily")


async def test_fire_unknown_routine_is_404_echoing_64_chars() -> None:
    async with serving() as server:
        name = "x" * 100
        reply = await server.call("POST", "/fire", {"name": name, "slot": ON_GRID})
        message = assert_error(reply, 404)
        assert '"' + "x" * 64 + '"' in message
        assert "x" * 65 not in message


async def test_fire_known_long_name_is_echoed_cut() -> None:
    async with serving() as server:
        reply = await server.call("POST", "/fire", {"name": LONG, "slot": ON_GRID, "wait": True})
        assert reply.status == 200
        assert reply.json["name"] == LONG[:64]
        assert LONG.encode() not in reply.raw


# -- POST /run -----------------------------------------------------------------------------------


async def test_run_waits_by_default_and_claims_nothing() -> None:
    agent = ScriptedAgent()
    agent.script(Complete(), Fail("tool crashed"), session="routine:daily")
    async with serving(agent=agent) as server:
        reply = await server.call("POST", "/run", {"name": "daily"})
        assert reply.status == 200
        body = reply.json
        assert body.pop("ms") >= 0
        assert body == {
            "name": "daily",
            "session": "routine:daily",
            "ran": True,
            "outcome": "completed",
            "reply": "ok",
            "truncated": False,
        }
        failed = await server.call("POST", "/run", {"name": "daily", "wait": True})
        assert failed.json["ran"] is True
        assert failed.json["outcome"] == "failed"
        assert failed.json["failed"] == "tool crashed"
        assert await server.store.history("daily") == []
        assert len(agent.turns) == 2


async def test_run_without_wait_is_202_and_a_busy_session_is_not_run() -> None:
    agent = ScriptedAgent()
    agent.script(Hang(), session="routine:adhoc")
    async with serving(agent=agent) as server:
        started = await server.call("POST", "/run", {"name": "adhoc", "wait": False})
        assert started.status == 202
        assert started.json == {"name": "adhoc", "session": "routine:adhoc", "started": True}
        await until(lambda: agent.turns)
        health = await server.call("GET", "/healthz")
        assert health.json == {"status": "busy", "inFlight": 1, "stopping": False}
        busy = await server.call("POST", "/run", {"name": "adhoc"})
        assert busy.status == 200
        assert busy.json["ran"] is False
        assert busy.json["reason"] == (
            'another turn in the session of "adhoc" is still running (its last, a run or a wake-up)'
        )
        busy_now = await server.call("POST", "/run", {"name": "adhoc", "wait": False})
        assert busy_now.status == 200
        assert busy_now.json["ran"] is False
        assert len(agent.turns) == 1  # the gate answered; the agent was never asked again


async def test_a_run_whose_session_the_store_cannot_hold_is_503_and_runs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with serving() as server:
        for wait in (True, False):
            server.store.fail("take", StateFault("disk busy"), times=1)
            refused = await server.call("POST", "/run", {"name": "daily", "wait": wait})
            assert refused.status == 503
            assert refused.json == {
                "error": 'the session of "daily" could not be held; nothing ran — retry'
            }
        assert server.agent.turns == []
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == ["POST /run daily: could not hold the session of 'daily': disk busy"] * 2


async def test_run_unknown_routine_is_404_listing_the_names() -> None:
    async with serving() as server:
        message = assert_error(await server.call("POST", "/run", {"name": "nope"}), 404)
        assert message.startswith('no routine named "nope" (this deployment has: "LLLL')
        assert message.endswith('", "adhoc", "daily")')  # names only, each cut to 64
        assert server.agent.turns == []


async def test_a_busy_fire_is_skipped_with_the_reason_and_no_failure() -> None:
    agent = ScriptedAgent()
    agent.script(Busy(), session="routine:daily")
    async with serving(agent=agent) as server:
        reply = await server.call("POST", "/fire", {"name": "daily", "slot": ON_GRID, "wait": True})
        assert reply.status == 200
        body = reply.json
        assert body["outcome"] == "skipped"
        assert "failed" not in body
        assert body["reason"].startswith('the agent answered busy for "daily"')
        (fire,) = await server.store.history("daily")
        # no failure; the history keeps the agent's own words
        assert (fire.outcome, fire.error) == (
            Outcome.SKIPPED,
            "the session already has a turn in flight",
        )


# -- GET /routines, history ----------------------------------------------------------------------


async def test_routines_lists_schedules_and_next_instant_never_prompts() -> None:
    async with serving() as server:
        before = datetime.now(UTC)
        reply = await server.call("GET", "/routines")
        assert reply.status == 200
        assert SECRET.encode() not in reply.raw
        listing = {item["name"]: item for item in reply.json}
        assert set(listing) == {"daily", "adhoc", LONG}
        assert listing["adhoc"] == {
            "name": "adhoc",
            "cron": None,
            "tz": None,
            "next": None,
            "paused": False,
            "running": False,  # whether a turn of its session is in flight
            "last": None,  # its newest claim: none yet
            "spent24h": {"inputTokens": 0, "outputTokens": 0, "costs": {}},  # the ledger's
        }
        fired = await server.call(
            "POST", "/fire", {"name": "adhoc", "slot": "2026-07-07T10:00:00Z", "wait": True}
        )
        assert fired.status == 200
        again = {item["name"]: item for item in (await server.call("GET", "/routines")).json}
        assert again["adhoc"]["last"] == {
            "slot": "2026-07-07T10:00:00.000Z",
            "firedAt": again["adhoc"]["last"]["firedAt"],
            "outcome": "completed",
            "ms": again["adhoc"]["last"]["ms"],
            "replica": server.scheduler.replica,  # who fired it
        }
        daily = listing["daily"]
        assert (daily["cron"], daily["tz"]) == ("0 9 * * *", "Europe/Berlin")
        upcoming = parse_iso(daily["next"])
        assert upcoming is not None
        assert before < upcoming <= before + timedelta(days=1, minutes=1)
        head = await server.call("HEAD", "/routines")
        assert head.status == 200
        assert head.raw == b""


async def test_routines_says_paused_as_the_store_does_now() -> None:
    # Paused through another replica (or a command): said at once, not at this one's next
    # poll; a store that cannot say is a 503, never a stale answer.
    store = MemoryStore()
    async with serving(store=store, external_clock=False) as server:
        await store.set_paused("daily", True)
        listing = {item["name"]: item for item in (await server.call("GET", "/routines")).json}
        assert (listing["daily"]["paused"], listing["adhoc"]["paused"]) == (True, False)
        store.fail("paused", StateFault("disk busy"), times=1)
        refused = await server.call("GET", "/routines")
        assert refused.status == 503
        assert refused.json["error"] == "the paused routines are unreadable right now"


async def test_routines_counts_the_next_instant_from_a_claim_in_the_future() -> None:
    store = MemoryStore()
    ahead = next_run("0 9 * * *", "Europe/Berlin", datetime.now(UTC) + timedelta(days=3))
    assert ahead is not None
    await store.claim("daily", ahead, ahead)  # made while the clock ran days ahead
    async with serving(store=store, external_clock=False) as server:
        listing = {item["name"]: item for item in (await server.call("GET", "/routines")).json}
        assert listing["daily"]["next"] == format_iso(ahead + timedelta(days=1))
        metrics = (await server.call("GET", "/metrics")).raw.decode()
        assert 'trio_routines_future_claim_timestamp_seconds{routine="daily"}' in metrics


@pytest.mark.parametrize("stamped_days", [3, None], ids=["days-ahead", "calendar-end"])
async def test_routines_counts_from_a_claim_in_the_future_when_nothing_is_armed_too(
    stamped_days: int | None,
) -> None:
    # With an external clock no loop is armed: the next instant is counted as `list` counts
    # it, from the claim's stamp, not from now (a claim stamped at the calendar's end: none).
    store = MemoryStore()
    slot = next_run("0 9 * * *", "Europe/Berlin", datetime.now(UTC) - timedelta(days=2))
    assert slot is not None
    far = datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
    stamp = far if stamped_days is None else datetime.now(UTC) + timedelta(days=stamped_days)
    await store.claim("daily", slot, stamp)
    async with serving(store=store, external_clock=True) as server:
        listing = {item["name"]: item for item in (await server.call("GET", "/routines")).json}
        expected = next_run("0 9 * * *", "Europe/Berlin", truncate_ms(stamp))
        assert listing["daily"]["next"] == (None if expected is None else format_iso(expected))
        assert (stamped_days is None) is (expected is None)
        assert listing["adhoc"]["next"] is None  # no cron: no next instant


async def test_pause_and_resume_over_http_hold_a_routine_back_for_every_replica() -> None:
    async with serving() as server:
        reply = await server.call("POST", "/routines/daily/pause")
        assert (reply.status, reply.json) == (200, {"name": "daily", "paused": True})
        assert await server.store.paused() == {"daily"}
        again = await server.call("POST", "/routines/daily/pause")  # its first pause stands
        assert (again.status, again.json) == (
            200,
            {"name": "daily", "paused": True, "changed": False},
        )
        listing = {item["name"]: item for item in (await server.call("GET", "/routines")).json}
        assert (listing["daily"]["paused"], listing["adhoc"]["paused"]) == (True, False)
        assert listing["daily"]["next"] is None  # none fires while paused (as status --json)
        fired = await server.call("POST", "/fire", {"name": "daily", "slot": ON_GRID, "wait": True})
        assert (fired.status, fired.json["claimed"], fired.json["reason"]) == (200, False, "paused")
        assert server.agent.turns == []
        reply = await server.call("POST", "/routines/daily/resume")
        assert (reply.status, reply.json) == (200, {"name": "daily", "paused": False})
        assert await server.store.paused() == frozenset()
        listing = {item["name"]: item for item in (await server.call("GET", "/routines")).json}
        assert listing["daily"]["next"] is not None
        again = await server.call("POST", "/routines/daily/resume")
        assert (again.status, again.json) == (
            200,
            {"name": "daily", "paused": False, "changed": False},
        )
        assert_error(await server.call("POST", "/routines/nope/pause"), 404)
        assert (await server.call("GET", "/routines/daily/pause")).status == 405


async def test_a_resume_of_a_routine_not_paused_changes_nothing_and_says_so() -> None:
    store = MemoryStore()
    await store.set_paused("adhoc", True, datetime.now(UTC))
    async with serving(store=store) as server:
        reply = await server.call("POST", "/routines/daily/resume")
        assert reply.json == {"name": "daily", "paused": False, "changed": False}
        assert await store.paused() == {"adhoc"}
        assert await store.resumed_at("daily") is None  # no instant kept: nothing resumed
        # Each is asked of the store all the same (a change given up on that lands late must
        # land before it, and a read does not wait for it): its fault is a 503.
        store.fail("set_paused", StateFault("disk full"))
        assert_error(await server.call("POST", "/routines/daily/resume"), 503)
        assert_error(await server.call("POST", "/routines/adhoc/pause"), 503)
        assert_error(await server.call("POST", "/routines/adhoc/resume"), 503)
        assert await store.paused() == {"adhoc"}


async def test_a_resume_whose_paused_read_fails_is_503() -> None:
    store = MemoryStore()
    await store.set_paused("daily", True, datetime.now(UTC))
    store.fail("paused", StateFault("EIO"))
    async with serving(store=store) as server:
        assert_error(await server.call("POST", "/routines/daily/resume"), 503)
    assert store.paused_routines == {"daily"}


async def test_a_pause_the_store_cannot_write_is_503_and_changes_nothing() -> None:
    store = MemoryStore()
    store.fail("set_paused", StateFault("disk full"))
    async with serving(store=store) as server:
        assert_error(await server.call("POST", "/routines/daily/pause"), 503)
        assert await store.paused() == frozenset()


async def test_history_carries_a_fires_kept_output_only_when_there_is_one() -> None:
    store = MemoryStore()
    said = "<script>alert(1)</script>\n\x1b[31mred\x00"
    for hour, output in ((10, None), (11, said)):
        slot = datetime(2026, 7, 7, hour, tzinfo=UTC)
        await store.claim("adhoc", slot, slot)
        await store.settle("adhoc", slot, Outcome.COMPLETED, 4, output=output)
    async with serving(store=store) as server:
        reply = await server.call("GET", "/routines/adhoc/history")
        assert reply.status == 200
        first, second = reply.json
        assert "output" not in first
        assert second["output"] == "<script>alert(1)</script>\n\x1b[31mred\ufffd"


async def test_history_is_oldest_first_like_history_json() -> None:
    agent = ScriptedAgent()
    agent.script(Complete(), Fail("no"), session="routine:adhoc")
    async with serving(agent=agent) as server:
        for slot in ("2026-07-07T10:00:00Z", "2026-07-07T11:00:00Z"):
            await server.call("POST", "/fire", {"name": "adhoc", "slot": slot, "wait": True})
        reply = await server.call("GET", "/routines/adhoc/history")
        assert reply.status == 200
        history = reply.json
        assert [h["slot"] for h in history] == [
            "2026-07-07T10:00:00.000Z",
            "2026-07-07T11:00:00.000Z",
        ]
        assert [h["outcome"] for h in history] == ["completed", "failed"]
        assert [set(h) for h in history] == [
            {"slot", "firedAt", "outcome", "ms", "replica"},
            {"slot", "firedAt", "outcome", "ms", "error", "replica"},
        ]
        assert history[1]["error"] == "no"  # the failure reason, stored with the outcome
        # Who fired each slot: the serving scheduler's replica id.
        assert {h["replica"] for h in history} == {server.scheduler.replica}
        # A gap among them, in slot order, as history --json shows it.
        store = server.store
        assert isinstance(store, GapRecords)
        await store.record_gap(
            "adhoc",
            Gap(
                datetime(2026, 7, 7, 10, 30, tzinfo=UTC),
                datetime(2026, 7, 7, 10, 30, tzinfo=UTC),
                1,
                GapReason.OVERLAP,
            ),
        )
        with_gap = (await server.call("GET", "/routines/adhoc/history")).json
        assert with_gap == [
            history[0],
            {"gap": {"from": "2026-07-07T10:30:00.000Z", "to": "2026-07-07T10:30:00.000Z",
                     "count": 1, "reason": "overlap"}},
            history[1],
        ]  # fmt: skip
        empty = await server.call("GET", f"/routines/{LONG}/history")
        assert empty.json == []
        missing = await server.call("GET", "/routines/nope/history")
        assert_error(missing, 404)
        # A routine not loaded here (removed, or another replica's) keeps its history in the
        # store: the answer is the store's, as the command line reads it without --url.
        slot = datetime(2026, 7, 7, 9, tzinfo=UTC)
        await store.claim("gone", slot, slot)
        gone = await server.call("GET", "/routines/gone/history")
        assert gone.status == 200
        assert [fire["slot"] for fire in gone.json] == ["2026-07-07T09:00:00.000Z"]
        unsafe = await server.call("GET", "/routines/..%2Fx/history")
        assert_error(unsafe, 404)
        longer = await server.call("GET", f"/routines/{'x' * 253}/history")  # than a file's
        assert_error(longer, 404)


class HistoriesRead(MemoryStore):
    """Notes every routine whose history it is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    async def history(self, routine: str, *args: Any, **kwargs: Any) -> Any:
        self.asked.append(routine)
        return await super().history(routine, *args, **kwargs)


async def test_a_history_no_routine_file_could_name_is_a_404_with_no_store_call() -> None:
    store = HistoriesRead()
    async with serving(store=store) as server:
        for name in ("..", "x" * 253, "é" * 127, "x" * 252):
            assert_error(await server.call("GET", f"/routines/{name}/history"), 404)
    assert store.asked == ["x" * 252]  # a file's name may be 252 bytes and ".md"


async def test_history_state_fault_is_503() -> None:
    store = MemoryStore()
    store.faults["history"] = StateFault("EIO")
    async with serving(store=store) as server:
        reply = await server.call("GET", "/routines/daily/history")
        assert_error(reply, 503)
        assert reply.headers["retry-after"] == "5"


# -- wake-ups ------------------------------------------------------------------------------------


async def test_wakeups_add_list_and_remove() -> None:
    async with serving() as server:
        added = await server.call(
            "POST", "/wakeups", {"session": "chat:1", "prompt": "check the build", "in": "2h"}
        )
        assert added.status == 201
        wakeup = added.json["wakeup"]
        assert "prompt" not in wakeup
        assert wakeup["session"] == "chat:1"
        assert added.json["reply"] == (
            f"OK — wake-up {added.json['wakeup']['id']} at {added.json['wakeup']['fireAt']} "
            f'for session "chat:1"; cancel with DELETE /wakeups/{added.json["wakeup"]["id"]}'
            "?session=chat%3A1"
        )
        fire_at = parse_iso(wakeup["fireAt"])
        assert fire_at is not None
        assert abs((fire_at - datetime.now(UTC)) - timedelta(hours=2)) < timedelta(minutes=1)
        recurring = await server.call(
            "POST",
            "/wakeups",
            {"session": "chat:2", "prompt": "standup", "cron": "0 9 * * 1-5", "tz": "Asia/Tehran"},
        )
        assert recurring.status == 201
        assert recurring.json["wakeup"]["cron"] == "0 9 * * 1-5"
        assert recurring.json["wakeup"]["tz"] == "Asia/Tehran"

        everything = await server.call("GET", "/wakeups")
        assert [w["session"] for w in everything.json] == ["chat:1", "chat:2"]
        assert b"check the build" not in everything.raw
        mine = await server.call("GET", "/wakeups?session=chat:2")
        assert [w["id"] for w in mine.json] == [recurring.json["wakeup"]["id"]]

        wid = wakeup["id"]
        wrong_session = await server.call("DELETE", f"/wakeups/{wid}?session=chat:2")
        assert "no pending wake-up" in assert_error(wrong_session, 404)
        removed = await server.call("DELETE", f"/wakeups/{wid}?session=chat:1")
        assert removed.status == 200
        assert removed.json["removed"] is True
        assert_error(await server.call("DELETE", f"/wakeups/{wid}?session=chat:1"), 404)
        assert [w.session for w in await server.store.list_wakeups()] == ["chat:2"]


async def test_wakeups_record_and_list_who_asked() -> None:
    store = MemoryStore()
    chained = Origin(kind=OriginKind.WAKEUP, parent="w-1", depth=3)
    asked = WakeupRequest(session="chat:1", prompt="p", cron="0 9 * * *", origin=chained)
    first = await store.add_wakeup(asked, datetime.now(UTC))
    second = await store.add_wakeup(
        WakeupRequest(session="chat:1", prompt="p", cron="0 8 * * *"), datetime.now(UTC)
    )
    async with serving(store=store) as server:
        body = {"session": "chat:1", "prompt": "p", "in": "2h", "origin": {"kind": "cli"}}
        added = await server.call("POST", "/wakeups", body)
        assert added.status == 201
        # The server records http, whoever the client claims to be.
        assert added.json["wakeup"]["origin"] == {"kind": "http", "depth": 0}
        listed = await server.call("GET", "/wakeups?session=chat:1")
        assert {w["id"]: w.get("origin") for w in listed.json} == {
            first.id: {"kind": "wakeup", "depth": 3, "parent": "w-1"},
            second.id: None,  # stored without one: unknown, no key
            added.json["wakeup"]["id"]: {"kind": "http", "depth": 0},
        }
        (stored,) = [w for w in await store.list_wakeups() if w.id == added.json["wakeup"]["id"]]
        assert stored.origin == Origin(kind=OriginKind.HTTP)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"session": "s", "prompt": "p", "in": "30s"}, "too soon — the minimum wake delay is 60s."),
        ({"session": "s", "prompt": "p", "in": "120"}, 'couldn\'t parse "in"'),
        ({"session": "s", "prompt": "p", "in": 1e300}, '"in" is too far in the future'),
        ({"session": "s", "prompt": "p", "in": 10**400}, '"in" (10000'),
        ({"session": "s", "prompt": "p", "cron": "* * * * *"}, "too frequent"),
        ({"session": "s", "prompt": "p", "cron": "0 9 * * *", "tz": "Mars/Base"}, "cron/tz"),
        ({"session": "s", "prompt": "p", "in": "2h", "cron": "0 9 * * *"}, "exactly one"),
        ({"session": "s", "prompt": "p"}, "exactly one"),
        ({"session": "s", "prompt": "p", "in": "2h", "tz": "UTC"}, '"tz" goes with "cron"'),
        ({"session": "", "prompt": "p", "in": "2h"}, '"session" must be'),
        ({"session": "s", "prompt": 3, "in": "2h"}, '"prompt" must be'),
        ({"session": "s\u0000x", "prompt": "p", "in": "2h"}, "must not contain NUL"),
    ],
)
async def test_wakeup_refusals_are_400_with_the_guardrail_text(
    body: dict[str, Any], expected: str
) -> None:
    async with serving() as server:
        reply = await server.call("POST", "/wakeups", body)
        assert expected in assert_error(reply, 400)
        assert await server.store.list_wakeups() == []


async def test_the_pending_cap_refusal_shows_no_prompt() -> None:
    store = MemoryStore()
    later = datetime.now(UTC) + timedelta(hours=3)
    for i in range(20):
        request = WakeupRequest(session="chat:1", prompt=f"secret-{i} key=abc", fire_at=later)
        await store.add_wakeup(request, datetime.now(UTC))
    async with serving(store=store) as server:
        body = {"session": "chat:1", "prompt": "p", "in": "1h"}
        said = assert_error(await server.call("POST", "/wakeups", body), 400)
        assert said.startswith("too many pending wake-ups for this session (20)")
        pending = said.split("Pending: ", 1)[1].split("; ")
        assert len(pending) == 20
        assert {w.id for w in await store.list_wakeups()} == {p.split(" ")[0] for p in pending}
        assert "secret" not in said
        assert "key=abc" not in said


async def test_wakeup_state_fault_is_503() -> None:
    store = MemoryStore()
    for operation in WAKEUP_FAULTS:
        store.faults[operation] = StateFault("EIO")
    async with serving(store=store) as server:
        added = await server.call("POST", "/wakeups", {"session": "s", "prompt": "p", "in": "2h"})
        assert_error(added, 503)
        assert_error(await server.call("GET", "/wakeups"), 503)
        assert_error(await server.call("DELETE", "/wakeups/abc?session=s"), 503)
        assert store.wakeups == []


# -- /healthz ------------------------------------------------------------------------------------


async def test_healthz_reports_busy_while_a_fire_is_in_flight() -> None:
    agent = ScriptedAgent()
    agent.script(Hang(), session="routine:adhoc")
    async with serving(agent=agent, token=TOKEN) as server:
        idle = await server.call("GET", "/healthz")  # no token needed here
        assert idle.status == 200
        assert idle.json == {"status": "ok", "inFlight": 0, "stopping": False}
        auth = {"Authorization": f"Bearer {TOKEN}"}
        fired = await server.call("POST", "/fire", {"name": "adhoc", "slot": ON_GRID}, headers=auth)
        assert fired.status == 202
        await until(lambda: server.scheduler.statistics().in_flight)
        assert (await server.call("GET", "/healthz")).json == {
            "status": "busy",
            "inFlight": 1,
            "stopping": False,
        }
        assert (await server.call("HEAD", "/healthz")).raw == b""


async def test_healthz_reports_busy_while_a_wakeup_turn_is_in_flight() -> None:
    store = MemoryStore()
    due = datetime.now(UTC) - timedelta(minutes=1)
    store.wakeups = [Wakeup(id="w1", session="chat:9", prompt="look again", fire_at=due)]
    agent = ScriptedAgent()
    agent.script(Hang(), session="chat:9")
    async with serving(agent=agent, store=store) as server:
        await until(lambda: agent.turns)
        assert (await server.call("GET", "/healthz")).json == {
            "status": "busy",
            "inFlight": 1,
            "stopping": False,
        }
        assert (await server.call("GET", "/wakeups")).json == []


# -- errors --------------------------------------------------------------------------------------


async def test_unknown_route_is_404_and_wrong_method_405_with_allow() -> None:
    async with serving() as server:
        for path in ("/fire/", "/nope", "/routines/daily", "/routines//history", "/wakeups/"):
            message = assert_error(await server.call("GET", path), 404)
            assert "SPEC" not in message
            assert "POST /fire" in message
        for method, path, allow in [
            ("GET", "/fire", "POST"),
            ("PUT", "/run", "POST"),
            ("POST", "/routines", "GET, HEAD"),
            ("DELETE", "/routines/daily/history", "GET, HEAD"),
            ("PATCH", "/wakeups", "GET, HEAD, POST"),
            ("GET", "/wakeups/abc", "DELETE"),
            ("POST", "/healthz", "GET, HEAD"),
        ]:
            reply = await server.call(method, path)
            assert_error(reply, 405)
            assert reply.headers["allow"] == allow
        assert server.agent.turns == []


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"{not json", "not valid JSON"),
        (b"", "not valid JSON"),
        (b"\xff\xfe{}", "not valid JSON"),
        (b"[" * 60000, "not valid JSON"),
        (b'["daily"]', "must be a JSON object"),
        (b'{"slot": "2026-07-07T07:00:00Z"}', '"name" must be'),
        (b'{"name": 7, "slot": "2026-07-07T07:00:00Z"}', '"name" must be'),
        (b'{"name": "daily"}', '"slot" must be'),
        (b'{"name": "daily", "slot": 1783407600}', '"slot" must be'),
        (b'{"name": "daily", "slot": "2026-07-07T07:00:00"}', "ISO instant with a zone"),
        (b'{"name": "daily", "slot": "0001-01-01T00:00:00+01:00"}', "ISO instant"),
        (b'{"name": "daily", "slot": "0001-01-01T00:00:00Z"}', "not on the cron grid"),
        (b'{"name": "daily", "slot": "2026-07-07T07:00:00Z", "wait": "yes"}', '"wait"'),
        (b'{"name": "daily", "slot": "2026-07-07T07:00:00Z", "wait": null}', '"wait"'),
        (b'{"name": "\\ud800", "slot": "2026-07-07T07:00:00Z"}', "not valid Unicode"),
        # A key twice: the last would win here, a proxy or a log may read the first.
        (b'{"name": "x", "slot": "2026-07-07T07:00:00Z", "name": "daily"}', '"name" twice'),
        (b'{"name": "daily", "slot": "2026-07-07T07:00:00Z", "o": {"a": 1, "a": 1}}', '"a" twice'),
    ],
)
async def test_malformed_fire_is_400_and_changes_nothing(raw: bytes, expected: str) -> None:
    async with serving() as server:
        reply = await server.call(
            "POST", "/fire", raw=raw, headers={"Content-Type": "application/json"}
        )
        assert expected in assert_error(reply, 400)
        assert await server.store.history("daily") == []
        assert server.agent.turns == []


async def test_unknown_fields_of_a_fire_or_a_run_are_ignored() -> None:
    # As the original's POST /run: anything else in the body is ignored (a prompt, a newer
    # client's option); what they act on is the routine's own.
    async with serving() as server:
        reply = await server.call(
            "POST", "/fire", {"name": "daily", "slot": ON_GRID, "priority": "high"}
        )
        assert reply.status == 202
        await server.settled("daily")
        ran = await server.call("POST", "/run", {"name": "daily", "prompt": "something else"})
        assert ran.status == 200
        assert ran.json["ran"] is True


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ({"untill": "2026-12-09T00:00Z"}, 'unknown key "untill": POST /wakeups takes '),
        ({"Until": "x", "b": 1}, 'unknown keys "Until", "b": POST /wakeups takes '),
        ({"a": 1, "b": 2, "c": 3, "d": 4}, 'unknown keys "a", "b", "c", …: POST /wakeups'),
        ({"\ud800" + "k" * 100: 1}, 'unknown key "\\ud800' + "k" * 63 + '": POST'),
    ],
)
async def test_a_wake_up_naming_a_key_it_does_not_take_is_refused_and_nothing_added(
    extra: dict[str, Any], said: str
) -> None:
    # A misspelt "until" was dropped, and the wake-up kept its default end of 30 days.
    async with serving() as server:
        body = {"session": "chat:1", "prompt": "p", "cron": "0 10 * * *"} | extra
        message = assert_error(await server.call("POST", "/wakeups", body), 400)
        assert message.startswith(said)
        assert message.endswith('takes "session", "prompt", "in", "cron", "tz", "until"')
        assert await server.store.list_wakeups() == []


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin-1"],
)
async def test_a_body_that_is_not_json_is_415(content_type: str | None) -> None:
    async with serving() as server:
        headers = {} if content_type is None else {"Content-Type": content_type}
        raw = json.dumps({"name": "daily", "slot": ON_GRID}).encode()
        reply = await server.call("POST", "/fire", raw=raw, headers=headers)
        assert_error(reply, 415)
        assert await server.store.history("daily") == []
        ok = await server.call(
            "POST", "/fire", raw=raw, headers={"Content-Type": "Application/JSON; charset=UTF-8"}
        )
        assert ok.status == 202
        await server.settled("daily")


async def test_declared_length_over_64k_is_refused_unread() -> None:
    async with serving() as server:
        # The body is never sent: the answer must come from the headers alone.
        head = (
            b"POST /fire HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (MAX_BODY + 1)
        )
        response = await raw_exchange(server.port, head)
        assert status_of(response) == 413
        assert "64 KiB" in body_of(response)["error"]
        exact = json.dumps({"name": "daily", "slot": ON_GRID, "pad": ""}).encode()
        padded = exact[:-2] + b" " * (MAX_BODY - len(exact)) + exact[-2:]
        assert len(padded) == MAX_BODY
        accepted = await server.call(
            "POST", "/fire", raw=padded, headers={"Content-Type": "application/json"}
        )
        assert accepted.status == 202
        await server.settled("daily")


async def test_a_chunked_body_that_never_ends_is_cut_off_at_64k() -> None:
    sent = 0

    async def forever(stream: trio.SocketStream) -> None:
        nonlocal sent
        chunk = b"1000\r\n" + b" " * 4096 + b"\r\n"
        while True:
            await stream.send_all(chunk)
            sent += 4096

    async with serving() as server:
        head = (
            b"POST /fire HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        response = await raw_exchange(server.port, head, forever)
        assert status_of(response) == 413
        assert sent > MAX_BODY  # it really was still streaming when refused
        assert server.agent.turns == []
        # The server is still well.
        assert (await server.call("GET", "/healthz")).status == 200


async def test_token_is_required_everywhere_but_healthz_and_nothing_changes() -> None:
    async with serving(token=TOKEN) as server:
        fire = {"name": "daily", "slot": ON_GRID}
        wake = {"session": "s", "prompt": "p", "in": "2h"}
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": f"Basic {TOKEN}"},
            {"Authorization": TOKEN},
            {"Authorization": f"Bearer {TOKEN}x"},
        ):
            for method, path, body in [
                ("POST", "/fire", fire),
                ("POST", "/run", {"name": "daily"}),
                ("GET", "/routines", None),
                ("GET", "/routines/daily/history", None),
                ("POST", "/wakeups", wake),
                ("GET", "/wakeups", None),
                ("DELETE", "/wakeups/x", None),
                ("GET", "/nope", None),  # even a missing route says only 401
            ]:
                reply = await server.call(method, path, body, headers=headers)
                assert_error(reply, 401)
                assert reply.headers["www-authenticate"] == "Bearer"
        assert await server.store.history("daily") == []
        assert await server.store.list_wakeups() == []
        assert server.agent.turns == []
        good = {"Authorization": f"bearer {TOKEN}"}
        assert (await server.call("POST", "/fire", fire, headers=good)).status == 202
        assert (await server.call("GET", "/healthz")).status == 200
        await server.settled("daily")


# -- graceful stop -------------------------------------------------------------------------------


async def test_once_stopping_fires_and_runs_are_503_until_drained() -> None:
    agent = ScriptedAgent()
    agent.script(Hang(), session="routine:adhoc")
    store = MemoryStore()
    scheduler = Scheduler(agent=agent, store=store, routines=ROUTINES, external_clock=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        port = await nursery.start(partial(serve_http, scheduler, "127.0.0.1", 0))
        server = Server(port, scheduler, agent, store)
        assert (await server.call("POST", "/fire", {"name": "adhoc", "slot": ON_GRID})).ok
        await until(lambda: scheduler.statistics().in_flight)
        scheduler.stop(grace=60)
        for path, body in [
            ("/fire", {"name": "daily", "slot": ON_GRID}),
            ("/fire", {"name": "daily", "slot": ON_GRID, "wait": True}),
            ("/run", {"name": "daily"}),
            ("/run", {"name": "daily", "wait": False}),
        ]:
            reply = await server.call("POST", path, body)
            assert "stopping" in assert_error(reply, 503)
            assert reply.headers["retry-after"] == "5"
        assert (await server.call("GET", "/healthz")).json == {
            "status": "busy",
            "inFlight": 1,
            "stopping": True,
        }
        assert (await server.call("GET", "/routines")).status == 200
        scheduler.stop(grace=0)  # the hung turn is interrupted, then the server goes
    [fire] = await store.history("adhoc")
    assert fire.outcome is Outcome.INTERRUPTED
    assert await store.history("daily") == []
    with pytest.raises(OSError, match=r"refused|connect"):
        await trio.open_tcp_stream("127.0.0.1", port)


async def test_a_waiting_fire_still_gets_its_answer_during_a_stop() -> None:
    agent = ScriptedAgent(Complete(duration=0.3))
    scheduler = Scheduler(agent=agent, store=MemoryStore(), routines=ROUTINES, external_clock=True)
    answers: list[Reply] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        port = await nursery.start(partial(serve_http, scheduler, "127.0.0.1", 0))
        server = Server(port, scheduler, agent, scheduler.store)

        async def waiting() -> None:
            body = {"name": "adhoc", "slot": ON_GRID, "wait": True}
            answers.append(await server.call("POST", "/fire", body))

        nursery.start_soon(waiting)
        await until(lambda: scheduler.statistics().in_flight)
        scheduler.stop(grace=10)
    [answer] = answers
    assert answer.status == 200
    assert answer.json["outcome"] == "completed"


# -- at most once --------------------------------------------------------------------------------


async def test_fifty_concurrent_fires_of_one_slot_claim_once(store: Store) -> None:
    agent = ScriptedAgent(Complete(duration=0.05))
    async with serving(agent=agent, store=store) as server:
        replies: list[Reply] = []

        async def one() -> None:
            replies.append(await server.call("POST", "/fire", {"name": "daily", "slot": ON_GRID}))

        async with trio.open_nursery() as nursery:
            for _ in range(50):
                nursery.start_soon(one)
        assert sorted(r.status for r in replies) == [200] * 49 + [202]
        assert sum(r.json["claimed"] for r in replies) == 1
        assert {r.json.get("reason") for r in replies if r.status == 200} == {"duplicate"}
        [fire] = await server.settled("daily")
        assert fire.outcome is Outcome.COMPLETED
        assert len(agent.turns) == 1


# -- binding -------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.1", "::1", "[::1]", "localhost"])
def test_loopback_binds_need_no_token(host: str) -> None:
    check_bind(host, None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.4", "example.org", ""])
def test_other_binds_need_a_token(host: str) -> None:
    with pytest.raises(InsecureBind, match="without a token") as caught:
        check_bind(host, None)
    assert isinstance(caught.value, TrioRoutinesError)
    assert isinstance(caught.value, ValueError)
    assert "\n" not in str(caught.value)
    with pytest.raises(InsecureBind):
        check_bind(host, "")
    check_bind(host, TOKEN)


BAD_TOKENS = [" ", "  ", " padded ", "a b", "a\tb", "a\nb", "\x00", "\x7f", "tökén", "\u202etoken"]
TOKEN_REFUSED = (
    "{} has a space, a control character or a character outside ASCII — use "
    "letters, digits and punctuation only, e.g. the output of "
    '`python -c "import secrets; print(secrets.token_urlsafe(32))"`'
)


@pytest.mark.parametrize("token", BAD_TOKENS)
def test_a_token_no_client_can_send_as_it_is_is_refused_before_anything_serves(
    token: str,
) -> None:
    # A padded token was trimmed from a bearer header, not from the login form: the API
    # refused everyone while a form of spaces logged in. On loopback and off it.
    for host in ("127.0.0.1", "0.0.0.0"):
        with pytest.raises(BadToken) as caught:
            check_bind(host, token)
        assert str(caught.value) == TOKEN_REFUSED.format("the token")
        assert isinstance(caught.value, TrioRoutinesError)
        with pytest.raises(BadToken) as caught:  # the command line's, from its variable
            check_bind(host, token, "TRIO_ROUTINES_TOKEN")
        assert str(caught.value) == TOKEN_REFUSED.format("TRIO_ROUTINES_TOKEN")
    scheduler = Scheduler(agent=ScriptedAgent(), store=MemoryStore(), routines=ROUTINES)
    with pytest.raises(BadToken) as caught:
        make_app(scheduler, token=token)
    assert str(caught.value) == TOKEN_REFUSED.format("the token")


@pytest.mark.parametrize("token", [5, b"abc", ["a"]])
def test_a_token_that_is_not_text_is_refused_in_one_line(token: Any) -> None:
    scheduler = Scheduler(agent=ScriptedAgent(), store=MemoryStore(), routines=ROUTINES)
    with pytest.raises(BadToken) as caught:
        make_app(scheduler, token=token)
    assert str(caught.value) == f"the token must be text, not {type(token).__name__}"
    with pytest.raises(BadToken):
        check_bind("127.0.0.1", token)


def test_every_printable_ascii_token_is_taken() -> None:
    printable = "".join(chr(code) for code in range(0x21, 0x7F))
    check_bind("0.0.0.0", printable)
    scheduler = Scheduler(agent=ScriptedAgent(), store=MemoryStore(), routines=ROUTINES)
    make_app(scheduler, token=printable)
    make_app(scheduler, token="")  # none


async def test_serve_http_refuses_an_open_bind_without_a_token() -> None:
    scheduler = Scheduler(agent=ScriptedAgent(), store=MemoryStore(), routines=ROUTINES)
    with pytest.raises(InsecureBind):
        await serve_http(scheduler, "0.0.0.0", 0)


# -- arbitrary requests straight at the application ----------------------------------------------

KEYS = ["name", "slot", "wait", "session", "prompt", "in", "cron", "tz"]
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    st.sampled_from(
        [
            *("daily", "adhoc", LONG, "nope", "..", ON_GRID, "2026-07-07T07:00:00.1234Z"),
            *("9999-12-31T23:59:59.999Z", "0001-01-01T00:00:00Z", "90s", "2h", "*/5 * * * *"),
        ]
    ),
)
JSON_BODIES = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=5), VALUES, max_size=6)
PATHS = st.one_of(
    st.sampled_from(
        [
            *("/fire", "/run", "/routines", "/healthz", "/wakeups", "/wakeups/x", "/metrics"),
            *("/routines/daily/history", "/routines/nope/history", "/", "", "/tools"),
            *("/tools?style=openai", "/tools?style=x", "/replicas"),
        ]
    ),
    st.text(max_size=30),
    st.text(max_size=20).map(lambda s: f"/routines/{s}/history"),
    st.text(max_size=20).map(lambda s: f"/wakeups/{s}"),
)
HEADER_NAMES = st.sampled_from(
    [b"content-type", b"content-length", b"authorization", b"transfer-encoding", b"x-y"]
)
HEADER_VALUES = st.one_of(
    st.binary(max_size=30),
    st.sampled_from(
        [
            *(b"application/json", b"application/json; charset=utf-8", b"text/plain", b"10"),
            *(b"99999999999999999999999", b"Bearer " + TOKEN.encode(), b"Bearer", b"-1"),
        ]
    ),
)


ENDPOINTS = [
    ("POST", "/fire"),
    ("POST", "/run"),
    ("GET", "/routines"),
    ("GET", "/routines/daily/history"),
    ("GET", "/routines/adhoc/history"),
    ("POST", "/wakeups"),
    ("GET", "/wakeups"),
    ("DELETE", "/wakeups/x"),
    ("GET", "/healthz"),
    ("HEAD", "/healthz"),
]


# The strategies a request is drawn from, built once: built inside the composite, each example
# paid for building and validating them again (about half of the test's time).
TENTHS = st.integers(0, 9)
ENDPOINT = st.sampled_from(ENDPOINTS)
ANY_METHOD = st.sampled_from(["GET", "POST", "DELETE", "PUT", "PATCH"]) | st.text()
FIELDS = st.dictionaries(st.sampled_from(KEYS), VALUES, min_size=1, max_size=5)
NESTED = st.recursive(VALUES, lambda kids: st.lists(kids) | st.dictionaries(st.text(), kids))
ANY_BODY = st.binary(max_size=200) | NESTED.map(json.dumps).map(str.encode)
FEW_HEADERS = st.lists(st.tuples(HEADER_NAMES, HEADER_VALUES), max_size=2)
MORE_HEADERS = st.lists(st.tuples(HEADER_NAMES, HEADER_VALUES), max_size=5)
QUERIES = st.sampled_from([b"", b"session=s", b"session=%FF"]) | st.binary(max_size=30)


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    """Mostly near-valid requests (a real route, JSON, the token), so the examples reach the
    handlers; the rest anything at all."""

    def likely(tenths: int) -> bool:
        return draw(TENTHS) < tenths

    if likely(7):
        method, path = draw(ENDPOINT)
    else:
        method = draw(ANY_METHOD)
        path = draw(PATHS)
    if likely(6):
        body = json.dumps({**draw(FIELDS), **draw(JSON_BODIES)}).encode()
    else:
        body = draw(ANY_BODY)
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=3)))
    chunks = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    token = TOKEN if likely(3) else None
    headers = draw(FEW_HEADERS if likely(7) else MORE_HEADERS)
    if likely(8):
        headers.append((b"content-type", b"application/json"))
    if likely(8):
        headers.append((b"authorization", b"Bearer " + TOKEN.encode()))
    return {
        "method": method,
        "path": path,
        "query": draw(QUERIES),
        "headers": draw(st.permutations(headers)),
        "chunks": chunks,
        "token": token,
    }


async def _call_app(request: dict[str, Any]) -> None:
    agent = ScriptedAgent()
    store = MemoryStore()
    scheduler = Scheduler(
        agent=agent, store=store, routines=ROUTINES, external_clock=True, wakeups=False
    )
    app = make_app(scheduler, token=request["token"])
    pending = [
        {"type": "http.request", "body": chunk, "more_body": i < len(request["chunks"]) - 1}
        for i, chunk in enumerate(request["chunks"])
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        await trio.lowlevel.checkpoint()
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request["method"],
        "path": request["path"],
        "raw_path": request["path"].encode("utf-8", "surrogatepass"),
        "query_string": request["query"],
        "headers": request["headers"],
    }
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        with trio.fail_after(10):
            await app(scope, receive, send)
        scheduler.stop(grace=5)
    if not sent:  # only a client that went away mid-body goes unanswered
        assert not pending
        assert store.claims == {}
        assert store.wakeups == []
        assert agent.turns == []
        return
    start, body = sent
    status = start["status"]
    assert status < 500 or status == 503, body
    if status == 503:
        assert any(k == b"retry-after" and v.isdigit() for k, v in start["headers"])
    payload = body["body"]
    kind = dict(start["headers"]).get(b"content-type", b"")  # text: /metrics, the page
    if request["method"] != "HEAD" and not kind.startswith(b"text/"):
        parsed = json.loads(payload)
        if status >= 400:
            assert set(parsed) == {"error"}
    assert SECRET.encode() not in payload
    if status >= 400:
        assert all(not fires for fires in store.claims.values())
        assert store.wakeups == []
        assert agent.turns == []


@settings(deadline=None)
@given(requests())
def test_arbitrary_requests_never_fail_the_server_nor_change_state_when_refused(
    request: dict[str, Any],
) -> None:
    trio.run(_call_app, request)


async def test_metrics_count_fires_refusals_durations_and_lateness() -> None:
    agent = ScriptedAgent(Complete(duration=0.2))
    async with serving(agent=agent, token=TOKEN) as server:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert (await server.call("GET", "/metrics")).status == 401
        fired = await server.call(
            "POST", "/fire", {"name": "daily", "slot": ON_GRID, "wait": True}, headers=auth
        )
        assert fired.json["outcome"] == "completed"
        again = await server.call("POST", "/fire", {"name": "daily", "slot": ON_GRID}, headers=auth)
        assert again.json["reason"] == "duplicate"
        reply = await server.call("GET", "/metrics", headers=auth)
        assert reply.status == 200
        assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
        text = reply.raw.decode()
        assert 'trio_routines_fires_total{routine="daily",outcome="completed"} 1' in text
        assert 'trio_routines_claims_refused_total{routine="daily",reason="duplicate"} 1' in text
        assert 'trio_routines_turn_seconds_count{routine="daily"} 1' in text
        assert 'trio_routines_turn_seconds_bucket{routine="daily",le="0.1"} 0' in text
        assert 'trio_routines_turn_seconds_bucket{routine="daily",le="0.5"} 1' in text
        # ON_GRID lies months in the past: the fire began far behind its slot
        assert 'trio_routines_lateness_seconds_bucket{routine="daily",le="300"} 0' in text
        assert 'trio_routines_lateness_seconds_bucket{routine="daily",le="+Inf"} 1' in text
        assert "trio_routines_in_flight 0" in text
        assert SECRET not in text
        for line in text.splitlines():  # every sample line is `name{labels} value`
            assert line.startswith("#") or re.fullmatch(r"[a-z_]+(\{[^}]*\})? \S+", line), line


async def test_replicas_lists_the_live_members_of_the_store() -> None:
    async with serving() as server:
        reply = await server.call("GET", "/replicas")
        assert reply.status == 200
        (member,) = reply.json
        assert (member["id"], member["alive"], member["inFlight"]) == (
            server.scheduler.replica,
            True,
            0,
        )
        assert set(member) == {
            "id",
            "version",
            "host",
            "pid",
            "started",
            "lastSeen",
            "inFlight",
            "alive",
        }
        assert (await server.call("POST", "/replicas")).status == 405
