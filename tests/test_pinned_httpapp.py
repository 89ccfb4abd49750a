"""The ASGI application's gates, pinned whole (http/app.py).

The application is called directly with a hand-made scope, ``receive`` and ``send``: a body
that never arrives is waited for in virtual time (MockClock), and the lifespan and websocket
scopes, which the HTTP tests never send, are sent here. Answers are compared whole.
"""

from __future__ import annotations

import json
import logging
import math
import time
from typing import Any

import pytest
import trio
import trio.testing

from trio_routines.http import make_app
from trio_routines.http.signin import COOKIE, cookie_value
from trio_routines.routines import Routine
from trio_routines.scheduler import Scheduler
from trio_routines.testing import Complete, MemoryStore, ScriptedAgent

WAKE = b'{"session": "s"}'  # read whole, then refused for its missing prompt
MISSING_PROMPT = '"prompt" must be a non-empty string, e.g. "check the build"'


class Broken(MemoryStore):
    async def list_wakeups(self) -> Any:
        raise RuntimeError("a bug in the store")


def app(store: MemoryStore | None = None, **options: Any) -> Any:
    scheduler = Scheduler(agent=ScriptedAgent(), store=store or MemoryStore(), external_clock=True)
    return make_app(scheduler, **options)


def scope(method: str, path: str, headers: list[tuple[bytes, bytes]] | None = None) -> Any:
    return {
        "type": "http",
        "method": method,
        "path": path,
        "query_string": b"",
        "headers": headers
        if headers is not None
        else [(b"host", b"localhost"), (b"content-type", b"application/json")],
    }


class Client:
    """One request's two ends: what the application receives, fed by hand; what it sends."""

    def __init__(self) -> None:
        self.feed, self._messages = trio.open_memory_channel[Any](math.inf)
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> Any:
        return await self._messages.receive()

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def answer(self) -> tuple[int, dict[bytes, bytes], Any]:
        start, body = self.sent
        return start["status"], dict(start["headers"]), json.loads(body["body"])


async def call(application: Any, request: Any, *messages: dict[str, Any]) -> Client:
    client = Client()
    for message in messages:
        client.feed.send_nowait(message)
    await application(request, client.receive, client.send)
    return client


async def test_a_body_that_does_not_arrive_in_time_is_408_and_its_place_given_back(
    autojump_clock: Any,
) -> None:
    application = app(body_timeout=3, body_readers=1)
    started = trio.current_time()
    part = {"type": "http.request", "body": b'{"ses', "more_body": True}
    client = await call(application, scope("POST", "/wakeups"), part)
    status, headers, body = client.answer()
    assert (status, body) == (408, {"error": "the body did not arrive within 3s of the request"})
    assert headers[b"connection"] == b"close"
    assert trio.current_time() - started == 3  # virtual time: the deadline, to the instant
    # The one place for a body is free again.
    whole = await call(
        application, scope("POST", "/wakeups"), {"type": "http.request", "body": WAKE}
    )
    assert whole.answer()[2] == {"error": MISSING_PROMPT}


async def test_at_most_body_readers_requests_wait_for_their_body() -> None:
    application = app(body_readers=1)
    for _ in range(2):  # the second time, the place is back, and there is still only one
        first = Client()
        first.feed.send_nowait({"type": "http.request", "body": WAKE[:5], "more_body": True})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(application, scope("POST", "/wakeups"), first.receive, first.send)
            await trio.testing.wait_all_tasks_blocked()
            second = await call(application, scope("POST", "/wakeups"), {"type": "http.request"})
            status, headers, body = second.answer()
            assert (status, body) == (
                503,
                {"error": "1 requests are sending their body already; try again later"},
            )
            assert (headers[b"retry-after"], headers[b"connection"]) == (b"1", b"close")
            first.feed.send_nowait({"type": "http.request", "body": WAKE[5:]})
        assert first.answer()[2] == {"error": MISSING_PROMPT}


async def test_two_places_for_a_body_hold_two_requests() -> None:
    application = app(body_readers=2)
    waiting = [Client(), Client()]
    async with trio.open_nursery() as nursery:
        for client in waiting:
            client.feed.send_nowait({"type": "http.request", "body": b"{", "more_body": True})
            nursery.start_soon(application, scope("POST", "/wakeups"), client.receive, client.send)
        await trio.testing.wait_all_tasks_blocked()
        third = await call(application, scope("POST", "/wakeups"), {"type": "http.request"})
        assert third.answer()[2] == {
            "error": "2 requests are sending their body already; try again later"
        }
        for client in waiting:
            client.feed.send_nowait({"type": "http.disconnect"})


async def test_once_its_body_is_whole_a_request_holds_no_place_and_no_deadline(
    autojump_clock: Any,
) -> None:
    agent = ScriptedAgent(Complete(duration=60))
    scheduler = Scheduler(
        agent=agent,
        store=MemoryStore(),
        routines=[Routine(name="adhoc", prompt="p")],
        external_clock=True,
    )
    application = make_app(scheduler, body_timeout=3, body_readers=1)
    waiting = Client()
    waiting.feed.send_nowait({"type": "http.request", "body": b'{"name": "adhoc"}'})
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        nursery.start_soon(application, scope("POST", "/run"), waiting.receive, waiting.send)
        await trio.testing.wait_all_tasks_blocked()
        assert len(agent.turns) == 1
        # The waiting request listens for its client going away, past the body's deadline,
        # and holds no place for a body meanwhile.
        await trio.sleep(10)
        whole = {"type": "http.request", "body": WAKE}
        other = await call(application, scope("POST", "/wakeups"), whole)
        assert other.answer()[2] == {"error": MISSING_PROMPT}
        # A stop refuses new fires and turns before their body is read.
        scheduler.stop(grace=100)
        for path in ["/fire", "/run"]:
            broken = {"type": "http.request", "body": b"{"}
            refused = await call(application, scope("POST", path), broken)
            status, _, body = refused.answer()
            assert (status, body) == (
                503,
                {"error": "the scheduler is stopping; no new turns are accepted"},
            ), path
    status, _, body = waiting.answer()
    assert (status, body["outcome"]) == (200, "completed")


async def test_head_is_answered_without_a_body_and_the_page_cookie_allows_reads() -> None:
    application = app(token="tok")
    until = int(time.time()) + 3600
    cookie = (b"cookie", f"{COOKIE}={cookie_value(b'tok', until)}".encode())
    for method in ["GET", "HEAD"]:
        client = await call(application, scope(method, "/ui/state", [cookie]))
        start, body = client.sent
        assert start["status"] == 200, method
        assert (body["body"] == b"") is (method == "HEAD")
    posted = await call(application, scope("POST", "/fire", [cookie]))
    assert posted.answer()[0] == 401


async def test_a_client_gone_mid_body_frees_its_place_and_is_not_answered() -> None:
    application = app(body_readers=1)
    part = {"type": "http.request", "body": b"{", "more_body": True}
    gone = await call(application, scope("POST", "/wakeups"), part, {"type": "http.disconnect"})
    assert gone.sent == []
    whole = await call(
        application, scope("POST", "/wakeups"), {"type": "http.request", "body": WAKE}
    )
    assert whole.answer()[2] == {"error": MISSING_PROMPT}


async def test_an_unexpected_error_is_a_500_and_one_logged_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="trio_routines")
    client = await call(app(Broken()), scope("GET", "/wakeups"))
    status, _, body = client.answer()
    assert (status, body) == (500, {"error": "internal error (logged by the server)"})
    [record] = caplog.records
    assert record.getMessage() == "GET /wakeups: unexpected error"
    assert record.exc_info is not None
    assert str(record.exc_info[1]) == "a bug in the store"


async def test_a_wrong_method_is_405_with_the_allowed_ones() -> None:
    client = await call(app(), scope("POST", "/routines"))
    status, headers, body = client.answer()
    assert (status, body) == (405, {"error": "use GET or HEAD here"})
    assert headers[b"allow"] == b"GET, HEAD"


async def test_a_missing_token_is_401_with_the_scheme_to_use() -> None:
    application = app(token="tok")
    client = await call(application, scope("GET", "/routines", []))
    status, headers, body = client.answer()
    assert status == 401
    assert body == {
        "error": "missing or wrong token: send Authorization: Bearer <TRIO_ROUTINES_TOKEN>"
    }
    assert headers[b"www-authenticate"] == b"Bearer"
    for given in [b"Bearer tok", b"bearer  tok ", b"BEARER tok"]:
        ok = await call(application, scope("GET", "/routines", [(b"authorization", given)]))
        assert ok.answer()[0] == 200, given
    for given in [b"Basic tok", b"Bearer tok2", b"Bearertok", b"tok"]:
        refused = await call(application, scope("GET", "/routines", [(b"authorization", given)]))
        assert refused.answer()[0] == 401, given


async def test_lifespan_is_answered_and_websockets_are_refused() -> None:
    application = app()
    lifespan = await call(
        application,
        {"type": "lifespan"},
        {"type": "lifespan.other"},
        {"type": "lifespan.startup"},
        {"type": "lifespan.shutdown"},
    )
    assert lifespan.sent == [
        {"type": "lifespan.startup.complete"},
        {"type": "lifespan.shutdown.complete"},
    ]
    websocket = await call(application, {"type": "websocket", "path": "/"})
    assert websocket.sent == [{"type": "websocket.close", "code": 1008}]
    other = await call(application, {"type": "other"})
    assert other.sent == []
