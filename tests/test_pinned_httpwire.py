"""The HTTP surface's reading of untrusted requests, pinned whole (http/wire.py).

Every refusal a caller can meet is compared whole (status and its one line) over a real server
on a loopback port; what a real server never hands the application (a Content-Length that is
not a number, a ``receive`` that skips or ends early) is given to the pure functions directly,
as are the two ASGI messages an answer becomes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from test_http import ON_GRID, assert_error, body_of, raw_exchange, serving, status_of

from trio_routines.http.wire import (
    Disconnected,
    Raw,
    Refusal,
    Response,
    Text,
    check_path_text,
    encode,
    is_json,
    local_path,
    mount_point,
    only_keys,
    query,
    read_body,
    unavailable,
)

NO_ENDPOINT = (
    "no such endpoint — the routes are POST /fire, POST /run, GET /routines, "
    "GET /routines/{name}/history, POST /routines/{name}/pause|resume, /wakeups, "
    "GET /replicas, GET /tools, POST /tools/call, GET /healthz, GET /readyz, GET /metrics, "
    "the page at GET / (its data: GET /ui/state)"
)
WAKE = {"session": "s", "prompt": "p", "cron": "0 9 * * *"}

# (method, path, JSON body or None, status, the whole error line)
REFUSED: list[tuple[str, str, Any, int, str]] = [
    ("GET", "/routines/a/b/history", None, 404, NO_ENDPOINT),
    ("POST", "/routines/a/b/pause", None, 404, NO_ENDPOINT),
    ("DELETE", "/wakeups/a/b?session=s", None, 404, NO_ENDPOINT),
    ("DELETE", "/wakeups/x", None, 400, "give ?session=<the session the wake-up belongs to>"),
    ("DELETE", "/wakeups/\x00?session=s", None, 400, '"id" must not contain NUL characters'),
    ("GET", "/wakeups?session=\x00", None, 400, '"session" must not contain NUL characters'),
    ("GET", "/wakeups?session=a&session=", None, 400, "the query parameter 'session' is repeated"),
    ("GET", "/wakeups?session=" + "s" * 513, None, 400, '"session" is longer than 512 characters'),
    (
        "POST",
        "/fire",
        {"name": "a\x00", "slot": ON_GRID},
        400,
        '"name" must not contain NUL characters',
    ),
    (
        "POST",
        "/fire",
        {"name": "daily", "slot": "\ud800"},
        400,
        '"slot" is not valid Unicode text',
    ),
    (
        "POST",
        "/fire",
        {"name": "daily"},
        400,
        '"slot" must be a non-empty string, e.g. "2026-07-07T10:00:00.000Z"',
    ),
    (
        "POST",
        "/fire",
        {"name": "daily", "slot": "today"},
        400,
        '"slot" must be an ISO instant with a zone, e.g. "2026-07-07T10:00:00.000Z"',
    ),
    ("POST", "/fire", [1], 400, "the body must be a JSON object"),
    *(
        ("POST", "/wakeups", WAKE | {"tz": tz}, 400, '"tz" must be a non-empty string when given')
        for tz in ["", 5]
    ),
    (
        "POST",
        "/wakeups",
        WAKE | {"until": "2026-07-31T18:00:00Z\x00"},
        400,
        '"until" must not contain NUL characters',
    ),
]


async def test_every_refusal_of_a_request_is_its_whole_line() -> None:
    async with serving() as server:
        for method, path, body, status, expected in REFUSED:
            reply = await server.call(method, path, body)
            assert assert_error(reply, status) == expected, (method, path, body)
        # A session of exactly the longest length is read.
        listed = await server.call("GET", "/wakeups?session=" + "s" * 512)
        assert listed.status == 200, listed.raw
        assert await server.store.list_wakeups() == []
        assert await server.store.history("daily") == []


async def test_the_body_refusals_are_their_whole_line() -> None:
    async with serving() as server:
        untyped = await server.call("POST", "/fire", raw=b"{}")
        assert assert_error(untyped, 415) == "send a JSON body with Content-Type: application/json"
        broken = await server.call(
            "POST", "/fire", raw=b"{", headers={"Content-Type": "application/json"}
        )
        assert assert_error(broken, 400) == "the body is not valid JSON (UTF-8)"
        twice = await server.call(
            "POST",
            "/wakeups",
            raw=b'{"session": "a", "prompt": "p", "in": "1h", "session": "b"}',
            headers={"Content-Type": "application/json"},
        )
        assert assert_error(twice, 400) == 'the body names the key "session" twice'
        assert await server.store.list_wakeups() == []


async def test_a_routine_name_is_echoed_as_it_was_written() -> None:
    async with serving() as server:
        reply = await server.call("POST", "/fire", {"name": "café", "slot": ON_GRID})
        assert assert_error(reply, 404).startswith('no routine named "café" (this deployment')


async def test_a_query_that_is_not_utf8_is_refused() -> None:
    async with serving() as server:
        for query in [b"session=%ff", b"session=%c3"]:
            answer = await raw_exchange(
                server.port,
                b"GET /wakeups?" + query + b" HTTP/1.1\r\nHost: localhost\r\n"
                b"Connection: close\r\n\r\n",
            )
            assert status_of(answer) == 400, answer
            assert body_of(answer) == {"error": "the query string is not valid UTF-8"}


async def test_answers_carry_no_store_and_nosniff() -> None:
    async with serving() as server:
        for path in ["/routines", "/nowhere"]:
            reply = await server.call("GET", path)
            assert reply.headers["cache-control"] == "no-store"
            assert reply.headers["x-content-type-options"] == "nosniff"


def test_an_answer_is_two_asgi_messages_with_lowercase_header_names() -> None:
    json_body = b'{"a":[1,"\\u00e9"],"b":null}'
    start, body = encode(Response(503, {"a": [1, "é"], "b": None}, (("retry-after", "5"),)), "GET")
    assert start == {
        "type": "http.response.start",
        "status": 503,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(json_body)).encode()),
            (b"cache-control", b"no-store"),
            (b"x-content-type-options", b"nosniff"),
            (b"retry-after", b"5"),
        ],
    }
    assert body == {"type": "http.response.body", "body": json_body}
    # HEAD: the same head, with the length of the body it does not send.
    head_start, head_body = encode(Response(200, {"a": 1}), "HEAD")
    assert (b"content-length", b"7") in head_start["headers"]
    assert head_body == {"type": "http.response.body", "body": b""}
    assert encode(Response(200, {"a": 1}), "head")[1]["body"] == b'{"a":1}'


def test_raw_and_text_bodies_are_sent_as_they_are() -> None:
    start, body = encode(Response(200, Raw(b"text/css", b"p{}")), "GET")
    assert start["headers"][:2] == [(b"content-type", b"text/css"), (b"content-length", b"3")]
    assert body["body"] == b"p{}"
    start, body = encode(Response(200, Text("é 1\n")), "GET")
    assert start["headers"][:2] == [(b"content-type", Text.KIND), (b"content-length", b"5")]
    assert body["body"] == "é 1\n".encode()


def test_a_503_says_when_to_come_back() -> None:
    assert unavailable("later").response == Response(
        503, {"error": "later"}, (("retry-after", "5"),)
    )


@pytest.mark.parametrize(
    ("content_type", "accepted"),
    [
        ('application/json; charset="UTF-8"', True),
        ("application/json ; Charset = utf-8 ; q=1", True),
        ("application/json; charset=x=utf-8", False),
        ('application/json; charset="Xutf-8X"', False),
        ("application/json; charset=utf-8X", False),
        ("text/json", False),
    ],
)
def test_which_content_types_are_json(content_type: str, accepted: bool) -> None:
    assert is_json(content_type) is accepted


@pytest.mark.parametrize(
    ("root", "path", "local"),
    [
        ("/api/", "/api/fire", "/fire"),
        ("/api", "/api", "/"),
        ("/X", "/X/fire", "/fire"),
        ("/api", "/apifire", "/apifire"),
        ("", "/fire", "/fire"),
    ],
)
def test_the_path_below_the_mount_point(root: str, path: str, local: str) -> None:
    assert local_path({"path": path, "root_path": root}) == local


def test_a_scope_without_its_optional_parts_is_a_request_at_the_root() -> None:
    # A server that leaves out what ASGI lets it omit (or gives it as another type): no mount
    # point, no path, no query, no raw path to look at.
    assert mount_point({}) == ""
    assert mount_point({"root_path": None}) == ""
    assert mount_point({"root_path": b"/api"}) == ""
    assert local_path({}) == ""
    assert local_path({"path": "/fire"}) == "/fire"
    assert query({}) == {}
    check_path_text({})
    check_path_text({"raw_path": "/routines/%ff/pause"})  # not bytes: as the server decoded it


@pytest.mark.parametrize(
    "raw",
    [b"/routines/%ff/pause", b"/routines/%ef%bf/pause", b"/routines/%3F%ff/pause", b"/%80?a=b"],
)
def test_a_raw_path_whose_escapes_are_no_utf8_is_refused(raw: bytes) -> None:
    with pytest.raises(Refusal) as refused:
        check_path_text({"raw_path": raw})
    assert refused.value.response == Response(400, {"error": "the path is not valid UTF-8"})
    assert str(refused.value) == "the path is not valid UTF-8"


@pytest.mark.parametrize("raw", [b"/routines/%EF%BF%BD/pause", b"/wakeups?session=%ff", b"/"])
def test_a_raw_path_in_utf8_is_taken_whatever_its_query(raw: bytes) -> None:
    check_path_text({"raw_path": raw})  # the query's own bytes are query()'s to refuse


@pytest.mark.parametrize(
    ("keys", "named"),
    [
        (["b", "a", "c"], '"a", "b", "c"'),
        (["d", "b", "a", "c"], '"a", "b", "c", …'),
    ],
)
def test_unknown_keys_are_named_three_at_most(keys: list[str], named: str) -> None:
    with pytest.raises(Refusal) as refused:
        only_keys(dict.fromkeys([*keys, "session"], 1), "POST /x", ("session", "prompt"))
    error = f'unknown keys {named}: POST /x takes "session", "prompt"'
    assert refused.value.response == Response(400, {"error": error})


def _receive(*messages: Mapping[str, Any]) -> Any:
    """A ``receive`` that hands out ``messages``, then reports the client gone."""
    queue = list(messages)

    async def receive() -> Mapping[str, Any]:
        return queue.pop(0) if queue else {"type": "http.disconnect"}

    return receive


def _length(value: str) -> dict[str, Any]:
    return {"headers": [(b"content-length", value.encode())]}


async def _refused(scope: Any, receive: Any, limit: int = 65536) -> Response:
    with pytest.raises(Refusal) as refused:
        await read_body(scope, receive, limit)
    return refused.value.response


async def test_a_body_is_read_from_every_request_message_until_the_last() -> None:
    request = {"type": "http.request"}
    assert await read_body({}, _receive(request)) == b""  # no "body", no "more_body"
    assert await read_body({}, _receive(request | {"body": b"ab"})) == b"ab"
    chunks = [request | {"body": b"a", "more_body": True}, {"type": "http.other"}]
    assert await read_body({}, _receive(*chunks, request | {"body": b"b"})) == b"ab"
    with pytest.raises(Disconnected):
        await read_body({}, _receive({"type": "http.disconnect"}, request | {"body": b"x"}))


async def test_a_declared_length_is_a_number_of_at_most_twelve_significant_digits() -> None:
    for bad in ["x", "1x", "-1", "１"]:
        refused = await _refused(_length(bad), _receive())
        assert refused == Response(400, {"error": "Content-Length is not a number"})
    for padded in ["000000000002", "0" * 5000 + "2", "2"]:  # zeros in front count for nothing
        body = _receive({"type": "http.request", "body": b"ab"})
        assert await read_body(_length(padded), body) == b"ab"
    assert await read_body(_length("0" * 40), _receive({"type": "http.request"})) == b""
    for long in ["9" * 13, "1" + "0" * 12, "0" * 40 + "9" * 5000]:  # refused unread
        refused = await _refused(_length(long), _receive())
        assert refused == Response(413, {"error": "the body is over 64 KiB"})


async def test_a_body_over_the_limit_is_refused_with_its_size_in_the_message() -> None:
    big = {"type": "http.request", "body": b"x" * 1025}
    close = (("connection", "close"),)
    assert await _refused({}, _receive(big), 1024) == Response(
        413, {"error": "the body is over 1 KiB"}, close
    )
    assert await _refused({}, _receive(big), 1023) == Response(
        413, {"error": "the body is too large"}, close
    )
    assert await _refused(_length("1024"), _receive(), 1023) == Response(
        413, {"error": "the body is too large"}
    )
