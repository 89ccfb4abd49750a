"""``make_app`` mounted under a prefix by a host, on a real hypercorn Trio server.

Two hosts: a Starlette application with ``Mount("/scheduler", app)``, and a hand-written ASGI
dispatcher. Both pass the full path and the mount point in ``root_path``, as the ASGI spec
says; the dispatcher also runs in the style of some older frameworks, which strip the prefix
from ``path`` as well.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route
from test_http import ON_GRID, ROUTINES

from trio_routines.http import ASGIApp, make_app
from trio_routines.http.wire import local_path
from trio_routines.scheduler import Scheduler
from trio_routines.testing import MemoryStore, ScriptedAgent


def starlette_host(app: ASGIApp) -> Any:
    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse("the host's own page")

    return Starlette(routes=[Route("/hello", hello), Mount("/scheduler", app=app)])


def dispatcher_host(app: ASGIApp, *, strip: bool) -> Any:
    """Routes ``/scheduler/...`` to ``app``, the prefix in ``root_path`` (and cut from ``path``
    when ``strip``)."""

    async def host(scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] == "lifespan":
            await app(scope, receive, send)
        elif scope["type"] == "http" and path.startswith("/scheduler/"):
            inner = dict(scope, path=path[len("/scheduler") :] if strip else path)
            inner["root_path"] = scope.get("root_path", "") + "/scheduler"
            await app(inner, receive, send)
        elif scope["type"] == "http" and path == "/hello":
            body = b"the host's own page"
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/plain")],
                }
            )
            await send({"type": "http.response.body", "body": body})
        else:
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b"not the host's"})

    return host


@asynccontextmanager
async def hosted(kind: str) -> AsyncIterator[tuple[int, Scheduler, MemoryStore]]:
    store = MemoryStore()
    scheduler = Scheduler(
        agent=ScriptedAgent(), store=store, routines=ROUTINES, external_clock=True
    )
    app = make_app(scheduler)
    if kind == "starlette":
        host = starlette_host(app)
    else:
        host = dispatcher_host(app, strip=kind == "stripping dispatcher")
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        shutdown = trio.Event()
        binds = await nursery.start(partial(serve, host, config, shutdown_trigger=shutdown.wait))
        yield int(binds[0].rsplit(":", 1)[1]), scheduler, store
        shutdown.set()
        scheduler.stop(grace=0)


async def call(port: int, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
    def go() -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        try:
            data = None if body is None else json.dumps(body).encode()
            headers = {} if body is None else {"Content-Type": "application/json"}
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    return await trio.to_thread.run_sync(go)


@pytest.mark.parametrize("kind", ["starlette", "dispatcher", "stripping dispatcher"])
async def test_mounted_under_a_prefix_every_route_answers(kind: str) -> None:
    async with hosted(kind) as (port, _scheduler, store):
        status, raw = await call(port, "GET", "/scheduler/routines")
        assert status == 200
        assert [r["name"] for r in json.loads(raw)][:2] == ["L" * 80, "adhoc"]
        status, raw = await call(port, "GET", "/scheduler/healthz")
        assert (status, json.loads(raw)["status"]) == (200, "ok")
        status, raw = await call(
            port, "POST", "/scheduler/fire", {"name": "adhoc", "slot": ON_GRID, "wait": True}
        )
        assert status == 200, raw
        assert json.loads(raw)["outcome"] == "completed"
        assert len(await store.history("adhoc")) == 1
        status, raw = await call(port, "GET", "/scheduler/routines/adhoc/history")
        assert status == 200
        assert len(json.loads(raw)) == 1
        status, raw = await call(port, "GET", "/scheduler/metrics")
        assert status == 200
        assert b'trio_routines_fires_total{routine="adhoc",outcome="completed"} 1' in raw
        # Our own 404 below the prefix; the host's answers around it.
        status, raw = await call(port, "GET", "/scheduler/nothing")
        assert status == 404
        assert "error" in json.loads(raw)
        assert await call(port, "GET", "/hello") == (200, b"the host's own page")
        status, _ = await call(port, "GET", "/routines")
        assert status == 404
        # The reply to a wake-up names the call that cancels it, below the mount point.
        status, raw = await call(
            port, "POST", "/scheduler/wakeups", {"session": "chat 1", "prompt": "p", "in": "5m"}
        )
        assert status == 201, raw
        answer = json.loads(raw)
        cancel = f"DELETE /scheduler/wakeups/{answer['wakeup']['id']}?session=chat%201"
        assert answer["reply"].endswith(f"; cancel with {cancel}")
        method, path = cancel.split(" ")
        status, raw = await call(port, method, path)
        assert (status, json.loads(raw)["removed"]) == (200, True), raw
        assert await store.list_wakeups() == []


SEGMENT = st.text(
    alphabet=st.characters(blacklist_characters="/", blacklist_categories=["Cs"]),
    min_size=1,
    max_size=8,
)


@given(
    prefix=st.lists(SEGMENT, min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts)),
    path=st.lists(SEGMENT, max_size=3).map(lambda parts: "/" + "/".join(parts)),
    strip=st.booleans(),
)
def test_routes_see_the_path_below_the_mount_point(prefix: str, path: str, strip: bool) -> None:
    full = prefix + path if path != "/" else prefix + "/"
    scope = {"path": full, "root_path": prefix}
    assert local_path(scope) == path
    assert local_path({"path": path}) == path  # not mounted: the path as it is
    if strip and not (path == prefix or path.startswith(prefix + "/")):
        # A dispatcher that also cut the prefix from ``path``.
        assert local_path({"path": path, "root_path": prefix}) == path


@pytest.mark.parametrize("kind", ["starlette", "dispatcher", "stripping dispatcher"])
async def test_the_next_page_of_wake_ups_is_named_below_the_mount_point(kind: str) -> None:
    async with hosted(kind) as (port, _scheduler, _store):
        for delay in ("5m", "6m"):
            body = {"session": "chat 1", "prompt": "p", "in": delay}
            status, raw = await call(port, "POST", "/scheduler/wakeups", body)
            assert status == 201, raw

        def get(path: str) -> tuple[list[Any], str | None]:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
            try:
                conn.request("GET", path)
                response = conn.getresponse()
                return json.loads(response.read()), response.getheader("Link")
            finally:
                conn.close()

        first, link = await trio.to_thread.run_sync(get, "/scheduler/wakeups?limit=1")
        assert link is not None
        assert link.startswith("</scheduler/wakeups?limit=1&after=")
        second, last = await trio.to_thread.run_sync(get, link[1 : link.index(">")])
        assert last is None
        assert [len(first), len(second)] == [1, 1]
        assert first[0]["fireAt"] < second[0]["fireAt"]
