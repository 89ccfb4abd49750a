"""A command sent to a running ``serve`` (``trio_routines.cli.client``), pinned in this process:
where the URL and the token come from, what a request carries as it reaches a server on a
loopback port (method, path, headers, body, no proxy), and what each kind of answer becomes
(the body, the server's reason, one line for an answer that is not ours or none at all)."""

from __future__ import annotations

import argparse
import http.client
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial

import pytest
import trio

from trio_routines.cli import client
from trio_routines.cli.client import Answer, Server, path_part, query, url_arg
from trio_routines.cli.output import CliError

Reply = Callable[[bytes], bytes]  # the request's head and body -> the raw answer


def reply(status: str, body: bytes, kind: str = "application/json") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


@asynccontextmanager
async def answering(answer: Reply) -> AsyncIterator[tuple[str, list[bytes]]]:
    """A server on a loopback port: each request read whole (head and body, as sent) and
    answered with ``answer(request)``; its URL, and the requests."""
    seen: list[bytes] = []

    async def serve(stream: trio.SocketStream) -> None:
        received = b""
        while b"\r\n\r\n" not in received:
            received += await stream.receive_some()
        head = received.partition(b"\r\n\r\n")[0]
        length = sum(
            int(line.split(b":")[1])
            for line in head.lower().split(b"\r\n")
            if line.startswith(b"content-length:")
        )
        while len(received) < len(head) + 4 + length:
            received += await stream.receive_some()
        seen.append(received)
        raw = answer(received)
        try:
            await stream.send_all(raw)
        finally:
            await stream.aclose()

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        yield f"http://127.0.0.1:{listener.socket.getsockname()[1]}", seen
        nursery.cancel_scope.cancel()


@pytest.fixture(autouse=True)
def no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TRIO_ROUTINES_URL", "TRIO_ROUTINES_TOKEN", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)


# --- the URL, the token, the names in a path ---------------------------------------------------


def test_the_url_comes_from_the_option_else_from_the_environment_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert url_arg(argparse.Namespace()) is None
    assert url_arg(argparse.Namespace(url=None)) is None
    monkeypatch.setenv("TRIO_ROUTINES_URL", "")
    assert url_arg(argparse.Namespace(url=None)) is None
    monkeypatch.setenv("TRIO_ROUTINES_URL", "http://127.0.0.1:8080")
    assert url_arg(argparse.Namespace(url=None)) == "http://127.0.0.1:8080"
    assert url_arg(argparse.Namespace(url="http://h:1")) == "http://h:1"
    monkeypatch.setenv("TRIO_ROUTINES_URL", "ftp://h")
    assert url_arg(argparse.Namespace(url="http://h:1")) == "http://h:1"  # not even checked
    with pytest.raises(CliError) as refused:
        url_arg(argparse.Namespace(url=None))
    assert refused.value.code == 2
    assert str(refused.value).startswith("TRIO_ROUTINES_URL: ")
    assert "ftp://h" in str(refused.value)
    assert refused.value.__cause__ is None
    assert refused.value.__suppress_context__


def test_names_in_a_path_and_a_query_are_percent_encoded() -> None:
    assert path_part("a b/c?d%é") == "a%20b%2Fc%3Fd%25%C3%A9"
    assert query(session="chat:1 /x", n="2") == "?session=chat%3A1+%2Fx&n=2"


def test_the_server_is_the_url_without_its_trailing_slashes_and_the_environments_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Server("http://h:1//").url == "http://h:1"
    assert Server("http://h:1/X/").url == "http://h:1/X"
    assert Server("http://h:1").token is None
    monkeypatch.setenv("TRIO_ROUTINES_TOKEN", "")
    assert Server("http://h:1").token is None
    monkeypatch.setenv("TRIO_ROUTINES_TOKEN", "secret")
    assert Server("http://h:1").token == "secret"
    assert Server("http://h:1", token="mine").token == "mine"
    assert Server("http://h:1", token="").token == ""


def test_a_url_with_the_state_or_an_agent_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Server.from_args(argparse.Namespace(url=None, state="s", agent="echo")) is None
    found = Server.from_args(argparse.Namespace(url="http://h:1/", state=None, agent=""))
    assert found is not None
    assert (found.url, found.token) == ("http://h:1", None)
    assert Server.from_args(argparse.Namespace(url="http://h:1")) is not None
    given = argparse.Namespace(url="http://h:1", routines="routines", routines_given=False)
    assert Server.from_args(given) is not None  # the default routines directory
    for option in ("state", "agent", "routines"):
        args = argparse.Namespace(url="http://h:1", state=None, agent=None)
        setattr(args, option, "x")
        if option == "routines":
            args.routines_given = True
        with pytest.raises(CliError) as refused:
            Server.from_args(args)
        assert refused.value.code == 2
        assert str(refused.value) == (
            f"--{option} is for working on the state itself; with --url (or "
            f"TRIO_ROUTINES_URL) the server uses its own {option} — drop one of them"
        )
    monkeypatch.setenv("TRIO_ROUTINES_URL", "http://h:2")
    with pytest.raises(CliError, match=r"^--state is for working"):
        Server.from_args(argparse.Namespace(state="s"))


# --- the answers' meaning -------------------------------------------------------------------


def test_an_answers_reason_is_its_error_field_else_its_status_phrase() -> None:
    assert Answer(409, {"error": "busy"}).error() == "busy"
    assert Answer(409, {"error": 3}).error() == "Conflict"
    assert Answer(409, {"reason": "busy"}).error() == "Conflict"
    assert Answer(404, ["error"]).error() == "Not Found"
    assert Answer(404, None).error() == "Not Found"
    assert Answer(599, None).error() == "an unknown status"


def test_a_refusal_names_the_status_and_the_reason_and_a_401_the_token() -> None:
    server = Server("http://h:1", token=None)
    assert str(server.refused(Answer(401, {"error": "no token"}))) == (
        "http://h:1 answered 401: no token — set TRIO_ROUTINES_TOKEN to the server's token"
    )
    assert str(server.refused(Answer(403, None))) == "http://h:1 answered 403: Forbidden"
    # Every 3xx is a redirect not followed; a 400 or a 299 is no redirect.
    hint = " — a redirect, not followed: give --url the server's own address"
    for status, phrase in [(300, "Multiple Choices"), (399, "an unknown status")]:
        assert str(server.refused(Answer(status, None))) == (
            f"http://h:1 answered {status}: {phrase}{hint}"
        )
    assert str(server.refused(Answer(400, None))) == "http://h:1 answered 400: Bad Request"
    assert str(server.refused(Answer(299, None))) == "http://h:1 answered 299: an unknown status"
    assert server.ok(Answer(201, {"a": 1}), 200, 201) == {"a": 1}
    # Another success than the request's: another server answered (never ours).
    not_ours = "http://h:1: the answer is not a trio_routines server's"
    with pytest.raises(CliError) as other:
        server.ok(Answer(201, {"a": 1}), 200)
    assert str(other.value) == f"{not_ours} (it said 201 where this request is answered 200)"
    with pytest.raises(CliError) as other:
        server.ok(Answer(200, {"a": 1}), 201, 202)
    assert str(other.value) == (
        f"{not_ours} (it said 200 where this request is answered 201 or 202)"
    )
    for status in (299, 300, 199):  # the edges: 2xx is a success, neither side is
        with pytest.raises(CliError) as other:
            server.ok(Answer(status, None), 200)
        assert ("not a trio_routines" in str(other.value)) is (status == 299)
    assert str(server.not_ours()) == "http://h:1: the answer is not a trio_routines server's"
    assert str(server.not_ours("no id")) == (
        "http://h:1: the answer is not a trio_routines server's (no id)"
    )
    assert str(server.not_ours(0)) == "http://h:1: the answer is not a trio_routines server's (0)"


# --- a request, and what its answer becomes ------------------------------------------------------


async def test_a_request_carries_its_method_path_headers_and_json_body() -> None:
    async with answering(lambda _: reply("200 OK", b'{"ok": true}')) as (url, seen):
        server = Server(url + "/", token="tok")
        got = await server.call("POST", "/run?x=1", {"name": "é"})
        assert got == Answer(200, {"ok": True})
        assert await Server(url, token=None).get("/routines") == {"ok": True}
    sent, asked = seen
    head, _, body = sent.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
    assert lines[0] == b"POST /run?x=1 HTTP/1.1"
    assert body == json.dumps({"name": "é"}).encode("utf-8")
    assert (headers[b"accept"], headers[b"content-type"], headers[b"authorization"]) == (
        b"application/json",
        b"application/json",
        b"Bearer tok",
    )
    head = asked.partition(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[0] == b"GET /routines HTTP/1.1"
    names = {line.partition(b":")[0].lower() for line in head[1:]}
    assert b"accept" in names
    assert b"content-type" not in names
    assert b"authorization" not in names


async def test_no_proxy_from_the_environment_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    async with answering(lambda _: reply("200 OK", b'"proxy"')) as (proxy, through):
        monkeypatch.setenv("http_proxy", proxy)
        monkeypatch.setenv("HTTP_PROXY", proxy)
        async with answering(lambda _: reply("200 OK", b'"direct"')) as (url, direct):
            assert await Server(url).get("/healthz") == "direct"
    assert (len(direct), through) == (1, [])


async def test_a_refusal_is_an_answer_with_its_status_and_its_body_when_json() -> None:
    answers = iter(
        [
            reply("404 Not Found", b'{"error": "no routine named \\"x\\""}'),
            reply("502 Bad Gateway", b"<html>gateway</html>", "text/html"),
            reply("503 Service Unavailable", b""),
            reply("500 Internal Server Error", b"\xff\xfe"),
            reply("201 Created", b"{}"),
        ]
    )
    async with answering(lambda _: next(answers)) as (url, _):
        server = Server(url)
        assert await server.call("GET", "/a") == Answer(404, {"error": 'no routine named "x"'})
        assert await server.call("GET", "/b") == Answer(502, None)
        assert await server.call("GET", "/c") == Answer(503, None)
        assert await server.call("GET", "/d") == Answer(500, None)
        with pytest.raises(CliError) as refused:
            await server.get("/e")
    assert str(refused.value) == (
        f"{url}: the answer is not a trio_routines server's "
        "(it said 201 where this request is answered 200)"
    )


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"not json", None),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
async def test_an_answer_that_is_not_json_is_not_ours(raw: bytes, problem: str | None) -> None:
    async with answering(lambda _: reply("200 OK", raw)) as (url, _):
        with pytest.raises(CliError) as refused:
            await Server(url).get("/routines")
    said = str(refused.value)
    assert said.startswith(f"{url}: the answer is not a trio_routines server's (")
    if problem is not None:
        assert said == f"{url}: the answer is not a trio_routines server's ({problem})"
    assert refused.value.__suppress_context__


async def test_an_empty_answer_is_none_and_one_over_the_bound_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client, "MAX_ANSWER", 2 << 20)
    bodies = iter([b"", b'"' + b"x" * ((2 << 20) - 2) + b'"', b'"' + b"x" * ((2 << 20) - 1) + b'"'])
    async with answering(lambda _: reply("200 OK", next(bodies))) as (url, _):
        server = Server(url)
        assert await server.call("GET", "/a") == Answer(200, None)
        exactly = await server.call("GET", "/b")
        assert len(exactly.body) == (2 << 20) - 2
        with pytest.raises(CliError) as refused:
            await server.call("GET", "/c")
    assert str(refused.value) == (
        f"{url}: the answer is not a trio_routines server's (an answer over 2 MiB)"
    )


async def test_a_server_that_is_not_there_or_hangs_up_is_no_answer() -> None:
    with trio.socket.socket() as unused:
        await unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(CliError) as refused:
        await Server(url).call("GET", "/healthz")
    assert str(refused.value) == f"{url}: no answer: [Errno 111] Connection refused"
    assert refused.value.__suppress_context__

    async with answering(lambda _: b"") as (url, _):
        with pytest.raises(CliError) as gone:
            await Server(url).call("GET", "/healthz")
    assert str(gone.value) == f"{url}: no answer: Remote end closed connection without response"
    assert gone.value.__suppress_context__


NOT_HTTP = [
    (b"SSH-2.0-OpenSSH_9.0\r\n", "SSH-2.0-OpenSSH_9.0"),  # another service on the port
    (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70_000 + b"\r\n\r\n", "got more than 65536 bytes"),
    (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 101 + b"\r\n", "got more than 100 headers"),
    (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
        "its body ended before the length it gave)",
    ),
    # A body cut short of its length (a JSON number cut would still parse).
    (
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n123",
        "its body ended before the length it gave)",
    ),
]


@pytest.mark.parametrize(("raw", "problem"), NOT_HTTP)
@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_an_answer_that_is_not_http_is_one_line_and_a_change_unconfirmed(
    raw: bytes, problem: str, method: str
) -> None:
    async with answering(lambda _: raw) as (url, _):
        with trio.fail_after(30), pytest.raises(CliError) as refused:
            await Server(url).call(method, "/routines/r/pause", None)
    said = str(refused.value)
    assert said.startswith(f"{url}: the answer is not a trio_routines server's (not HTTP: ")
    assert f"(not HTTP: {problem}" in said
    assert len(said) < 300
    assert said.isprintable()
    assert refused.value.__suppress_context__
    unconfirmed = (
        "; the change is not confirmed: it may still be made there — look before asking again"
    )
    assert said.endswith(unconfirmed) is (method != "GET")


async def test_a_body_cut_short_at_the_bound_is_cut_short_not_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Exactly the bound's bytes came, and the length said more: a number cut there would parse.
    monkeypatch.setattr(client, "MAX_ANSWER", 5)
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n12345"
    async with answering(lambda _: raw) as (url, _):
        with trio.fail_after(30), pytest.raises(CliError) as refused:
            await Server(url).call("GET", "/healthz")
    assert str(refused.value) == (
        f"{url}: the answer is not a trio_routines server's (not HTTP: its body ended before "
        "the length it gave)"
    )


async def test_an_http_fault_without_words_is_named_by_its_kind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fails(*_: object) -> None:
        raise http.client.HTTPException

    server = Server("http://127.0.0.1:1")
    monkeypatch.setattr(server, "_send", fails)
    with pytest.raises(CliError) as refused:
        await server.call("GET", "/healthz")
    assert str(refused.value) == (
        "http://127.0.0.1:1: the answer is not a trio_routines server's (not HTTP: HTTPException)"
    )


@asynccontextmanager
async def endless(status: str) -> AsyncIterator[str]:
    """A server on a loopback port that answers ``status`` with a body that never ends."""

    async def serve(stream: trio.SocketStream) -> None:
        received = b""
        while b"\r\n\r\n" not in received:
            received += await stream.receive_some()
        head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n\r\n"
        try:
            await stream.send_all(head.encode() + b'"')
            while True:
                await stream.send_all(b"x" * 65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client has read enough and hung up: the point

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        yield f"http://127.0.0.1:{listener.socket.getsockname()[1]}"
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("status", ["200 OK", "500 Internal Server Error"])
async def test_an_answer_that_never_ends_is_read_up_to_the_bound_only(
    monkeypatch: pytest.MonkeyPatch, status: str
) -> None:
    monkeypatch.setattr(client, "MAX_ANSWER", 1 << 20)
    async with endless(status) as url:
        with trio.fail_after(30):  # a bound for the test itself, not a measurement
            if status == "200 OK":
                with pytest.raises(CliError) as refused:
                    await Server(url).call("GET", "/routines")
                assert str(refused.value) == (
                    f"{url}: the answer is not a trio_routines server's (an answer over 1 MiB)"
                )
            else:  # a refusal too long to be ours: its status says enough
                assert await Server(url).call("GET", "/routines") == Answer(500, None)


async def test_a_refusal_exactly_at_the_bound_is_read_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client, "MAX_ANSWER", 1024)
    reason = "x" * (1024 - len(b'{"error": ""}'))
    body = json.dumps({"error": reason}).encode()
    assert len(body) == 1024
    async with answering(lambda _: reply("409 Conflict", body)) as (url, _):
        assert await Server(url).call("GET", "/a") == Answer(409, {"error": reason})


@pytest.mark.parametrize("waits", [False, True, "change"])
async def test_no_answer_within_the_bound_says_which_bound_and_what_may_still_run(
    monkeypatch: pytest.MonkeyPatch, waits: bool | str
) -> None:
    monkeypatch.setattr(client, "ASK_TIMEOUT", 0.25)
    monkeypatch.setattr(client, "TURN_WAIT", 0.5)
    with trio.socket.socket() as listener:  # accepts (the kernel's backlog), never answers
        await listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        server = Server(url)
        ask = (
            partial(server.call, "POST", "/wakeups", {"session": "s"})
            if waits == "change"
            else partial(server.call, "POST", "/run", {"name": "x"}, waits=True)
            if waits
            else partial(server.get, "/routines")
        )
        with trio.fail_after(30), pytest.raises(CliError) as refused:
            await ask()
    unconfirmed = (
        "; the change is not confirmed: it may still be made there — look before asking again"
    )
    if waits == "change":  # a server stopped (SIGSTOP) carries it out once it runs again
        assert str(refused.value) == f"{url}: no answer within 0.25s{unconfirmed}"
    elif waits:
        assert str(refused.value) == (
            f"{url}: no answer within 0.5s (a turn may still be running there: see its history)"
            + unconfirmed
        )
    else:
        assert str(refused.value) == f"{url}: no answer within 0.25s"


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
async def test_a_connection_closed_unanswered_says_whether_a_change_is_unconfirmed(
    method: str,
) -> None:
    with trio.socket.socket() as listener:
        await listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"

        async def close_each() -> None:
            while True:
                conn, _ = await listener.accept()
                await conn.recv(65536)  # the request read, then no answer
                conn.close()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(close_each)
            with trio.fail_after(30), pytest.raises(CliError) as refused:
                await Server(url).call(method, "/wakeups/x?session=s", None)
            nursery.cancel_scope.cancel()
    said = str(refused.value)
    assert said.startswith(f"{url}: no answer: ")
    unconfirmed = (
        "; the change is not confirmed: it may still be made there — look before asking again"
    )
    assert said.endswith(unconfirmed) is (method != "GET")
