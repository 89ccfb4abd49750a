"""Serving the application next to the scheduler, pinned (http/serving.py).

Real servers on loopback, in the test's own Trio run: the bind's refusal whole, the socket
``bind_http`` hands over, IPv6, the port and the log line ``serve_http`` reports. What the
server is configured with and cannot be read back from its answers (hypercorn's ``Config``,
the cap and the application's body readers) is recorded on its way to
``connections.serve_connections`` and ``app.make_app``, which are called as they are.
"""

from __future__ import annotations

import http.client
import logging
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import pytest
import trio

from trio_routines.http import InsecureBind, NoServer, check_bind, serve_http, serving
from trio_routines.http.connections import connection_cap, descriptor_limit
from trio_routines.scheduler import Scheduler
from trio_routines.testing import MemoryStore, ScriptedAgent


def refusal(host: str, how: str = "give a token") -> str:
    return f"refusing to serve HTTP on {host} without a token — {how}, or bind 127.0.0.1"


@pytest.mark.parametrize(
    ("host", "named"), [("", "(all interfaces)"), ("0.0.0.0", "0.0.0.0"), ("::", "::")]
)
def test_an_open_bind_without_a_token_is_refused_naming_the_address(host: str, named: str) -> None:
    with pytest.raises(InsecureBind) as refused:
        check_bind(host, None)
    assert str(refused.value) == refusal(named)
    with pytest.raises(InsecureBind) as refused:  # the command line's, from its variable
        check_bind(host, None, "TRIO_ROUTINES_TOKEN")
    assert str(refused.value) == refusal(named, "set TRIO_ROUTINES_TOKEN")
    with pytest.raises(InsecureBind):
        check_bind(host, "")  # an empty token is none
    check_bind(host, "t")


def descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_serving_without_the_http_extra_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = serving.importlib.util.find_spec

    def without(name: str, *args: object) -> object:
        return None if name == "hypercorn" else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(serving.importlib.util, "find_spec", without)
    with pytest.raises(NoServer) as refused:
        check_bind("127.0.0.1", None)
    assert str(refused.value) == (
        'the HTTP surface needs hypercorn: pip install "trio-routines[http]"'
    )
    assert isinstance(refused.value, ImportError)


def test_bind_http_listens_now_on_either_family_and_lets_a_restart_rebind() -> None:
    for host, family in (("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6)):
        with serving.bind_http(host, 0) as sock:
            assert sock.family == family
            assert sock.type == socket.SOCK_STREAM
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) == 1
            # Listening already: a client connects before anything accepts.
            with socket.create_connection(sock.getsockname()[:2], timeout=5):
                pass


def test_a_taken_address_fails_at_once_and_keeps_no_descriptor() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        before = descriptors()
        with pytest.raises(OSError, match="Address already in use"):
            serving.bind_http("127.0.0.1", taken.getsockname()[1])
        assert descriptors() == before


class Recorded:
    """What serve_http handed to hypercorn's side and to the application."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.config: Any = None
        self.gate: Any = None
        self.app: dict[str, Any] = {}
        real_serve, real_app = serving.serve_connections, serving.make_app

        async def serve_connections(app: Any, config: Any, gate: Any, *args: Any, **kw: Any) -> Any:
            self.config, self.gate = config, gate
            return await real_serve(app, config, gate, *args, **kw)

        def make_app(scheduler: Scheduler, **options: Any) -> Any:
            self.app = options
            return real_app(scheduler, **options)

        monkeypatch.setattr(serving, "serve_connections", serve_connections)
        monkeypatch.setattr(serving, "make_app", make_app)


@asynccontextmanager
async def served(host: str = "127.0.0.1", **options: Any) -> AsyncIterator[tuple[int, Scheduler]]:
    scheduler = Scheduler(agent=ScriptedAgent(), store=MemoryStore(), external_clock=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        port = await nursery.start(partial(serve_http, scheduler, host, 0, **options))
        yield port, scheduler
        scheduler.stop(grace=0)


async def get(host: str, port: int) -> http.client.HTTPResponse:
    def go() -> http.client.HTTPResponse:
        conn = http.client.HTTPConnection(host, port, timeout=10)
        try:
            conn.request("GET", "/healthz")
            response = conn.getresponse()
            response.read()
            return response
        finally:
            conn.close()

    return await trio.to_thread.run_sync(go)


async def test_the_server_is_configured_as_the_docs_say(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "trio_routines.http")
    recorded = Recorded(monkeypatch)
    async with served(max_connections=7, body_timeout=3.5, token="t") as (port, scheduler):
        config = recorded.config
        assert config.bind == ["127.0.0.1:0"]
        assert config.backlog == serving.BACKLOG == 100
        assert config.accesslog is None
        assert config.errorlog is serving.log
        assert config.include_server_header is False
        assert config.graceful_timeout == scheduler.default_grace + 2.0
        assert (recorded.gate.cap, recorded.gate._limit) == (7, "{open} open, the cap is 7")
        assert recorded.app == {"token": "t", "body_timeout": 3.5, "body_readers": 3}
        answer = await get("127.0.0.1", port)
        assert answer.status == 200
        assert answer.getheader("server") is None  # no server header, hypercorn's or any
        messages = [r.getMessage() for r in caplog.records if r.name == "trio_routines.http"]
        assert messages == [f"HTTP surface on http://127.0.0.1:{port} (at most 7 connections open)"]


@pytest.mark.parametrize(("asked", "cap", "readers"), [(0, 1, 1), (1, 1, 1), (2, 2, 1), (5, 5, 2)])
async def test_a_cap_asked_for_is_at_least_one_and_half_of_it_may_send_bodies(
    monkeypatch: pytest.MonkeyPatch, asked: int, cap: int, readers: int
) -> None:
    recorded = Recorded(monkeypatch)
    async with served(max_connections=asked):
        assert recorded.gate.cap == cap
        assert recorded.app["body_readers"] == readers


async def test_without_a_cap_it_is_half_the_descriptors_left_free(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from trio_routines.http import serving

    caplog.set_level(logging.INFO, "trio_routines.http")
    recorded = Recorded(monkeypatch)
    monkeypatch.setattr(serving, "open_descriptors", lambda: 100)  # the store's among them
    free = descriptor_limit() - 100
    cap = connection_cap(free)
    async with served() as (port, _):
        assert recorded.gate.cap == cap
        assert recorded.gate._limit == (
            f"{{open}} open, the cap is {cap} (half of the {free} descriptors free)"
        )
        assert recorded.app["body_readers"] == max(1, cap // 2)
        assert f"(at most {cap} connections open)" in caplog.text
        assert (await get("127.0.0.1", port)).status == 200


async def test_ipv6_is_bound_in_brackets_and_its_port_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorded = Recorded(monkeypatch)
    async with served("::1") as (port, _):
        assert recorded.config.bind == ["[::1]:0"]
        assert port > 0
        assert (await get("::1", port)).status == 200


async def test_a_socket_bound_already_is_taken_over_and_its_port_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorded = Recorded(monkeypatch)
    sock = serving.bind_http("127.0.0.1", 0)
    bound = sock.getsockname()[1]
    number = sock.fileno()
    async with served(sock=sock) as (port, _):
        assert port == bound
        assert recorded.config.bind == [f"fd://{number}"]
        assert sock.fileno() == -1  # detached: the server owns the descriptor now
        assert (await get("127.0.0.1", port)).status == 200


async def test_by_default_it_serves_port_8080_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    binds: list[list[str]] = []

    async def serve_connections(
        app: Any, config: Any, gate: Any, stop: Any, *, task_status: Any
    ) -> None:
        binds.append(config.bind)  # nothing bound: the port may be taken on this machine
        task_status.started(["http://127.0.0.1:8080"])

    monkeypatch.setattr(serving, "serve_connections", serve_connections)
    scheduler = Scheduler(agent=ScriptedAgent(), store=MemoryStore(), external_clock=True)
    async with trio.open_nursery() as nursery:
        assert await nursery.start(serve_http, scheduler) == 8080
    assert binds == [["127.0.0.1:8080"]]
