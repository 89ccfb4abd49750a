"""DNS rebinding and cross-site requests, against a real hypercorn server on loopback.

Without a token the server answers only to loopback host names, and refuses a state-changing
request from a browser on another origin; with a token it answers to any name.
"""

from __future__ import annotations

import pytest
from test_http import ON_GRID, TOKEN, assert_error, serving

from trio_routines.http.origin import check_origin, is_loopback
from trio_routines.http.wire import Refusal

LOOPBACK_HOSTS = [
    "localhost",
    "LocalHost:8080",
    "127.0.0.1",
    "127.0.0.1:80",
    "127.0.0.2:65535",  # every address of 127.0.0.0/8 is this machine
    "127.0.0.1:0080",
    "127.0.0.1:00",  # port 0, written so
    "127.0.0.1:0000065535",  # zeros in front are no size
    "[::1]",
    "[::1]:9",
]
FOREIGN_HOSTS = [
    "evil.example",
    "evil.example:8080",
    "127.0.0.1.evil.example",
    "localhost.evil.example",
    "10.0.0.1",
    "::1",  # an IPv6 literal needs its brackets in Host
    "[::1]x",
    "[::1",  # an unclosed bracket
    "[localhost]",  # brackets hold an IPv6 address, nothing else
    "[127.0.0.1]:80",
    "[::1]:x",  # a port that is not a number after a bracketed literal
    "::1:8080",  # a bare IPv6 literal with a port
    "127.0.0.1:http",
    "127.0.0.1:65536",  # no port
    "127.0.0.1:99999",
    "[::1]:0065536",
    "127.0.0.1:1000080",  # not port 80
    "127.0.0.1:100000",
    "",
]
REFUSED_HOST = (
    "this server answers only to localhost, 127.0.0.1 or [::1] without a token — "
    "set TRIO_ROUTINES_TOKEN to reach it by another name"
)
REFUSED_ORIGIN = (
    "cross-origin requests are refused: call from this server's own page, or without a browser"
)


@pytest.mark.parametrize("host", LOOPBACK_HOSTS)
async def test_loopback_host_names_are_served(host: str) -> None:
    async with serving() as server:
        reply = await server.call("GET", "/routines", headers={"Host": host})
        assert reply.status == 200, reply.raw
        fired = await server.call(
            "POST", "/fire", {"name": "adhoc", "slot": ON_GRID}, headers={"Host": host}
        )
        assert fired.status == 202


async def test_a_rebound_host_name_is_refused_on_every_route_and_changes_nothing() -> None:
    async with serving() as server:
        for host in FOREIGN_HOSTS:
            headers = {"Host": host}
            for method, path, body in [
                ("GET", "/routines", None),
                ("GET", "/healthz", None),
                ("GET", "/wakeups", None),
                ("POST", "/fire", {"name": "adhoc", "slot": ON_GRID}),
                ("POST", "/run", {"name": "adhoc"}),
                ("POST", "/wakeups", {"session": "s", "prompt": "p", "in": "1h"}),
            ]:
                reply = await server.call(method, path, body, headers=headers)
                assert assert_error(reply, 421) == REFUSED_HOST, host
        assert server.agent.turns == []
        assert await server.store.history("adhoc") == []
        assert await server.store.list_wakeups() == []


async def test_cross_origin_browser_requests_cannot_change_state() -> None:
    async with serving() as server:
        for origin in [
            "https://evil.example",
            "null",
            "http://127.0.0.1.evil.example",
            "x",
            "http://localhost:port",  # not a number: no origin at all
            "http://[::1",  # not a URL
        ]:
            headers = {"Origin": origin}
            fire = await server.call(
                "POST", "/fire", {"name": "adhoc", "slot": ON_GRID}, headers=headers
            )
            assert assert_error(fire, 403) == REFUSED_ORIGIN, origin
            wake = await server.call(
                "POST", "/wakeups", {"session": "s", "prompt": "p", "in": "1h"}, headers=headers
            )
            assert_error(wake, 403)
            gone = await server.call("DELETE", "/wakeups/x?session=s", headers=headers)
            assert_error(gone, 403)
            # Reading is harmless: the browser keeps a cross-origin answer from the page.
            assert (await server.call("GET", "/routines", headers=headers)).status == 200
        assert server.agent.turns == []
        assert await server.store.history("adhoc") == []
        assert await server.store.list_wakeups() == []
        # Its own page (the origin its Host names) may; a page of another local server may not.
        own = f"http://127.0.0.1:{server.port}"  # http.client names the server so in Host
        for origin in [own, f" {own} "]:
            reply = await server.call("POST", "/run", {"name": "adhoc"}, headers={"Origin": origin})
            assert reply.status == 200, (origin, reply.raw)
        assert len(server.agent.turns) == 2


@pytest.mark.parametrize(
    "origin",
    [
        "http://localhost:3000",  # another local server's page
        "http://127.0.0.1",  # port 80
        "https://[::1]:8443",
        "http://localhost:{port}",  # another name for this port: another origin to a browser
        "http://[::1]:{port}",
        "https://127.0.0.1:{port}",  # another scheme
        "http://127.0.0.1:{port}/page",  # no origin: a path
        "http://127.0.0.1:{port}?x",
    ],
)
async def test_a_page_of_another_local_origin_cannot_change_state(origin: str) -> None:
    async with serving() as server:
        headers = {"Origin": origin.format(port=server.port)}
        fire = await server.call(
            "POST", "/fire", {"name": "adhoc", "slot": ON_GRID}, headers=headers
        )
        assert assert_error(fire, 403) == REFUSED_ORIGIN
        run = await server.call("POST", "/run", {"name": "adhoc"}, headers=headers)
        assert_error(run, 403)
        assert server.agent.turns == []
        assert await server.store.history("adhoc") == []


def test_without_a_host_any_loopback_origin_may_and_no_other() -> None:
    # HTTP/1.0 sends no Host: no browser's request, and no origin of its own to compare with.
    for origin in ["http://localhost:3000", "https://[::1]", "http://127.0.0.1:1"]:
        check_origin({"headers": [(b"origin", origin.encode())]}, "POST")
    for origin in ["https://evil.example", "null", "http://10.0.0.1:80", "ftp://localhost:3000"]:
        with pytest.raises(Refusal) as refused:
            check_origin({"headers": [(b"origin", origin.encode())]}, "POST")
        assert refused.value.response.status == 403


def test_an_https_request_takes_its_own_scheme_and_default_port() -> None:
    scope = {"scheme": "https", "headers": [(b"host", b"localhost"), (b"origin", b"")]}
    for origin, ours in [
        (b"https://localhost", True),
        (b"https://localhost:443", True),
        (b"http://localhost", False),
        (b"https://localhost:80", False),
    ]:
        scope["headers"][1] = (b"origin", origin)
        if ours:
            check_origin(scope, "DELETE")
        else:
            with pytest.raises(Refusal):
                check_origin(scope, "DELETE")


async def test_with_a_token_any_host_and_origin_is_served() -> None:
    async with serving(token=TOKEN) as server:
        headers = {
            "Host": "scheduler.internal.example:8080",
            "Origin": "https://dashboard.example",
            "Authorization": f"Bearer {TOKEN}",
        }
        reply = await server.call(
            "POST", "/fire", {"name": "adhoc", "slot": ON_GRID}, headers=headers
        )
        assert reply.status == 202
        await server.settled("adhoc")
        # The token still comes first: a foreign name without it learns nothing.
        anonymous = await server.call("GET", "/routines", headers={"Host": "evil.example"})
        assert_error(anonymous, 401)


def test_one_helper_for_loopback_names() -> None:
    assert all(is_loopback(h) for h in ["localhost", "127.0.0.1", "127.1.2.3", "::1", "[::1]"])
    refused = ["0.0.0.0", "::", "example.com", "", "[::1", "::1]", "xlocalhost]", "x::1]"]
    refused += ["[localhost]", "[127.0.0.1]", "[]", "[::]", "[::ffff:127.0.0.1]"]
    assert not any(is_loopback(h) for h in refused)


def test_a_repeated_host_header_is_refused() -> None:
    scope = {"headers": [(b"host", b"localhost"), (b"host", b"evil.example")]}
    with pytest.raises(Refusal) as refused:
        check_origin(scope, "GET")
    assert refused.value.response.status == 400


def test_a_scope_without_a_scheme_is_taken_for_http() -> None:
    # ASGI's default: a server may leave the scheme out of the scope.
    scope = {"headers": [(b"host", b"localhost:8080"), (b"origin", b"http://localhost:8080")]}
    check_origin(scope, "POST")
    scope["headers"][1] = (b"origin", b"https://localhost:8080")
    with pytest.raises(Refusal):
        check_origin(scope, "POST")
