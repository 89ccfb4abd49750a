"""The HTTP agent's shell pinned where tests/test_agent_http.py only samples it
(docs/mutation.md), over the same real agent server on a loopback port.

The request whole (headers, body bytes, the client's bounds, no proxy from the environment);
refusals of a URL, a port, a CA file whole; an origin's port and IPv6 brackets; an error body
read across pieces and at exactly its limit; codings, charsets and a reply that ends or is cut
mid-character; the reply's limit across pieces and at exactly its size; redirects counted;
errors described with the token masked.
"""

from __future__ import annotations

import itertools
import logging
import ssl
from typing import Any

import httpx
import pytest
import trio
from agent_server import END, Request, Respond, chunk, events, head, reply
from test_agent_http import DAILY, collect, serving, text_of

from trio_routines.agent import Completed, Failed, TextDelta, Usage
from trio_routines.agent_http import HttpAgent, _detail
from trio_routines.errors import InvalidAgent, InvalidOption
from trio_routines.tickets import read_ticket

TOKEN = "s3cret-token"


def pieces(status: int, content_type: str, *parts: bytes | str, extra: str = "") -> Respond:
    """A chunked answer sent one piece at a time, a pause apart (each read on its own)."""

    async def respond(request: Request, stream: trio.abc.Stream) -> None:
        await stream.send_all(head(status, content_type, extra))
        for part in parts:
            await stream.send_all(chunk(part))
            await trio.sleep(0.05)
        await stream.send_all(END)

    return respond


def raw(answer: bytes) -> Respond:
    async def respond(request: Request, stream: trio.abc.Stream) -> None:
        await stream.send_all(answer)

    return respond


def refusal(url: str, **kwargs: Any) -> str:
    with pytest.raises(InvalidAgent) as info:
        HttpAgent(url, **kwargs)
    return str(info.value)


# --- the request ----------------------------------------------------------------------------


async def test_the_request_is_pinned_whole() -> None:
    async with serving(reply(200, "ok", "text/plain")) as server:
        found = await collect(HttpAgent(server.url(), token="!tok~"), text="café")
    assert found == [TextDelta("ok"), Completed()]
    (request,) = server.requests
    assert request.headers == {
        "host": f"127.0.0.1:{server.port}",
        "connection": "keep-alive",
        "content-type": "application/json",
        "accept": "text/event-stream, application/json;q=0.9, text/plain;q=0.8, */*;q=0.5",
        "accept-encoding": "identity",
        "user-agent": "trio-routines",
        "idempotency-key": "daily/2026-07-07T09-00-00-000Z",
        "authorization": "Bearer !tok~",
        "content-length": str(len(request.body)),
    }
    ticket = request.json["turn"]
    assert read_ticket(ticket) == DAILY
    assert (
        request.body
        == (
            '{"session": "routine:daily", "prompt": "café", "routine": "daily", '
            f'"slot": "2026-07-07T09:00:00.000Z", "turn": "{ticket}"}}'
        ).encode()
    )


async def test_the_client_has_our_bounds_and_loads_no_certificate_for_plain_http(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[dict[str, Any]] = []

    class Recording(httpx.AsyncClient):
        def __init__(self, **kwargs: Any) -> None:
            built.append(kwargs)
            super().__init__(**kwargs)

    monkeypatch.setattr(httpx, "AsyncClient", Recording)
    async with serving(reply(200, "ok", "text/plain")) as server:
        agent = HttpAgent(server.url(), connect_timeout=0.5, read_timeout=7.0)
        assert await collect(agent) == [TextDelta("ok"), Completed()]
    (kwargs,) = built
    assert kwargs["timeout"] == httpx.Timeout(connect=0.5, read=7.0, write=7.0, pool=0.5)
    verify = kwargs["verify"]
    assert isinstance(verify, ssl.SSLContext)
    assert verify.cert_store_stats() == {"x509": 0, "crl": 0, "x509_ca": 0}


async def test_no_proxy_is_taken_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with serving(reply(200, "direct", "text/plain")) as server:
        assert await collect(HttpAgent(server.url())) == [TextDelta("direct"), Completed()]


# --- refusals and origins -------------------------------------------------------------------


def test_a_port_is_1_to_65535() -> None:
    assert HttpAgent("http://agent.example:1/turn").origin == "http://agent.example:1"
    assert HttpAgent("http://agent.example:65535/t").origin == "http://agent.example:65535"
    for port in (0, 65536):
        url = f"http://agent.example:{port}/turn"
        assert refusal(url) == f'agent URL "{url}" is not a valid URL'


def test_a_url_is_shown_whole_up_to_60_characters_then_cut() -> None:
    sixty = "http://agent.example/a b" + "x" * 36
    assert len(sixty) == 60
    assert refusal(sixty) == f'agent URL "{sixty}" is not a valid URL'
    assert refusal(sixty + "y") == f'agent URL "{sixty}…" is not a valid URL'


def test_a_ca_file_named_by_the_caller_is_loaded_and_its_failure_shown_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TRIO_ROUTINES_AGENT_CA", raising=False)
    assert refusal("https://agent.example/turn", ca_file="/nonexistent/ca.pem") == (
        'ca_file="/nonexistent/ca.pem" cannot be loaded as a CA file: No such file or directory'
    )
    # Named by the variable, it is said as the variable (the command line's agent).
    monkeypatch.setenv("TRIO_ROUTINES_AGENT_CA", "/nonexistent/ca.pem")
    assert refusal("https://agent.example/turn") == (
        'TRIO_ROUTINES_AGENT_CA="/nonexistent/ca.pem" cannot be loaded as a CA file: '
        "No such file or directory"
    )


FINITE = " must be a finite number of seconds, more than 0: "


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        (
            "connect_timeout",
            -1,
            "connect_timeout" + FINITE + "-1",
        ),
        (
            "read_timeout",
            "10",
            "read_timeout" + FINITE + "'10'",
        ),
        (
            "read_timeout",
            float("nan"),
            "read_timeout" + FINITE + "nan",
        ),
        ("max_reply", 0, "max_reply must be at least 1"),
        ("max_reply", 1.5, "max_reply must be a whole number, at least 1: 1.5"),
    ],
)
def test_an_option_no_turn_could_use_is_refused_in_one_line(
    option: str, value: Any, said: str
) -> None:
    with pytest.raises(InvalidOption) as refused:
        HttpAgent("http://agent.example/turn", **{option: value})
    assert str(refused.value) == said


@pytest.mark.parametrize("token", ["a b", "tökén", 5])
def test_a_token_no_header_can_carry_is_refused_by_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch, token: Any
) -> None:
    monkeypatch.delenv("TRIO_ROUTINES_AGENT_TOKEN", raising=False)
    assert refusal("http://agent.example/turn", token=token) == (
        "token must be printable ASCII without spaces (a bearer token)"
    )
    if isinstance(token, str):
        monkeypatch.setenv("TRIO_ROUTINES_AGENT_TOKEN", token)
        assert refusal("http://agent.example/turn") == (
            "TRIO_ROUTINES_AGENT_TOKEN must be printable ASCII without spaces (a bearer token)"
        )


def test_an_origin_has_a_port_only_when_the_url_does_and_brackets_an_ipv6_host() -> None:
    plain = HttpAgent("http://agent.example/turn?q=1")
    assert plain.origin == "http://agent.example"
    assert repr(plain) == "HttpAgent(http://agent.example/turn)"
    assert HttpAgent("http://[::1]:8080/turn").origin == "http://[::1]:8080"


# --- errors ---------------------------------------------------------------------------------


def test_a_connect_timeout_names_the_bound() -> None:
    agent = HttpAgent("http://agent.example/turn", connect_timeout=0.5)
    assert agent._describe(httpx.ConnectTimeout("")) == (
        "could not connect to http://agent.example within 0.5s (not retried)"
    )


def test_an_errors_words_have_the_token_masked() -> None:
    agent = HttpAgent("http://agent.example/turn", token=TOKEN)
    assert agent._describe(httpx.ConnectError(f"refused for {TOKEN}")) == (
        "could not connect to http://agent.example: refused for *** (not retried)"
    )


def test_an_error_without_words_is_named_by_its_type_within_five_causes() -> None:
    assert _detail(httpx.ReadError(""), None) == "ReadError"
    chain = [httpx.ReadError("") for _ in range(5)] + [OSError("the sixth")]
    for outer, inner in itertools.pairwise(chain):
        outer.__cause__ = inner
    assert _detail(chain[0], None) == "ReadError"
    assert _detail(chain[1], None) == "the sixth"


async def test_an_empty_error_body_adds_nothing_to_the_status() -> None:
    async with serving(reply(500, "", "text/plain")) as server:
        assert await collect(HttpAgent(server.url())) == [Failed("the agent answered 500")]


async def test_an_error_body_is_read_across_its_pieces() -> None:
    async with serving(pieces(500, "text/plain", "first ", "line\nsecond")) as server:
        found = await collect(HttpAgent(server.url()))
    assert found == [Failed("the agent answered 500: first line")]


@pytest.mark.parametrize(("more", "shown"), [(True, "err ***"), (False, "err s3c")])
async def test_an_error_body_of_exactly_the_limit_is_cut_only_if_more_follows(
    more: bool, shown: str
) -> None:
    # Its only line ends the 4096 bytes with the token's beginning: masked only when cut.
    first = "\n" * (4096 - 7) + "err s3c"
    parts = [first, "ret-token\n"] if more else [first]
    async with serving(pieces(500, "text/plain", *parts)) as server:
        found = await collect(HttpAgent(server.url(), token=TOKEN))
    assert found == [Failed(f"the agent answered 500: {shown}")]


# --- codings and charsets -------------------------------------------------------------------


async def test_each_declared_coding_is_named_but_identity_with_the_token_masked() -> None:
    extra = f"Content-Encoding: identity, gzip\r\nContent-Encoding: x-{TOKEN}\r\n"
    async with serving(pieces(200, "text/plain", "zz", extra=extra)) as server:
        found = await collect(HttpAgent(server.url(), token=TOKEN))
    assert found == [
        Failed(
            "the agent answered in Content-Encoding gzip, x-***, not the identity asked for "
            "— not read"
        )
    ]


async def test_a_declared_charset_decodes_a_reply_with_replacements() -> None:
    respond = pieces(200, "text/plain; charset=us-ascii", b"a\xffb")
    async with serving(respond) as server:
        assert text_of(await collect(HttpAgent(server.url()))) == "a\ufffdb"


async def test_an_event_stream_is_utf8_whatever_charset_it_declares() -> None:
    respond = pieces(200, "text/event-stream; charset=iso-8859-1", "data: café\n\n")
    async with serving(respond) as server:
        assert await collect(HttpAgent(server.url())) == [TextDelta("café"), Completed()]


async def test_an_answer_without_a_content_type_is_the_reply() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nplain"
    async with serving(raw(answer)) as server:
        assert await collect(HttpAgent(server.url())) == [TextDelta("plain"), Completed()]


async def test_a_reply_ending_mid_character_ends_with_a_replacement() -> None:
    async with serving(pieces(200, "text/plain; charset=utf-8", b"ab\xe2\x82")) as server:
        found = await collect(HttpAgent(server.url()))
    assert text_of(found) == "ab\ufffd"
    assert found[-1] == Completed()


async def test_a_reply_cut_mid_character_ends_there_with_a_replacement() -> None:
    respond = pieces(200, "text/plain; charset=utf-8", "ab€")
    async with serving(respond) as server:
        found = await collect(HttpAgent(server.url(), max_reply=3))
    assert found == [TextDelta("ab\ufffd"), Completed()]


# --- the reply's limit ----------------------------------------------------------------------


async def test_the_limit_counts_every_piece() -> None:
    respond = pieces(200, "text/plain", "a" * 400, "b" * 400, "c" * 400)
    async with serving(respond) as server:
        found = await collect(HttpAgent(server.url(), max_reply=1000))
    assert text_of(found) == "a" * 400 + "b" * 400 + "c" * 200
    assert found[-1] == Completed()


async def test_an_event_stream_that_passes_the_limit_is_not_read_past_it() -> None:
    async with serving(events("data: x\n\ndata: y\n\n")) as server:
        found = await collect(HttpAgent(server.url(), max_reply=10))
    assert found == [
        TextDelta("x"),
        Failed("the agent's event stream passed 10 bytes without ending — stopped reading"),
    ]


async def test_an_event_stream_that_ends_exactly_at_the_limit_is_whole() -> None:
    async with serving(events("data: x\n\n")) as server:
        found = await collect(HttpAgent(server.url(), max_reply=9))
    assert found == [TextDelta("x"), Completed()]


async def test_a_reply_that_ends_exactly_at_the_limit_keeps_its_usage() -> None:
    body = '{"usage": {"input_tokens": 5}}'
    async with serving(reply(200, body)) as server:
        found = await collect(HttpAgent(server.url(), max_reply=len(body)))
    assert found == [TextDelta(body), Usage(input_tokens=5), Completed()]


async def test_a_json_reply_cut_at_the_limit_reports_no_usage() -> None:
    body = '{"usage": {"input_tokens": 5}}'
    async with serving(reply(200, body + " " * 20)) as server:
        found = await collect(HttpAgent(server.url(), max_reply=len(body)))
    assert found == [TextDelta(body), Completed()]


async def test_usage_left_out_is_logged_with_the_agents_origin(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "trio_routines")
    body = '{"usage": 5}'
    async with serving(reply(200, body)) as server:
        found = await collect(HttpAgent(server.url()))
    assert found == [TextDelta(body), Completed()]
    (record,) = [r for r in caplog.records if "usage" in r.getMessage()]
    assert record.getMessage() == (
        f"the agent at http://127.0.0.1:{server.port} sent usage that is left out: "
        "usage must be a JSON object, got int"
    )


# --- redirects ------------------------------------------------------------------------------


def redirecting(hops: int) -> Respond:
    """``/turn`` moves to ``/1``, that to ``/2``, ... up to ``/<hops>``, which answers."""

    async def respond(request: Request, stream: trio.abc.Stream) -> None:
        at = 0 if request.path == "/turn" else int(request.path[1:])
        if at < hops:
            await stream.send_all(
                f"HTTP/1.1 307 Moved\r\nLocation: /{at + 1}\r\nContent-Length: 0\r\n"
                "Connection: close\r\n\r\n".encode()
            )
        else:
            await reply(200, f"after {hops}", "text/plain")(request, stream)

    return respond


async def test_three_redirects_are_followed_and_a_fourth_is_not() -> None:
    async with serving(redirecting(3)) as server:
        assert await collect(HttpAgent(server.url())) == [TextDelta("after 3"), Completed()]
    async with serving(redirecting(4)) as server:
        found = await collect(HttpAgent(server.url()))
    assert found == [Failed("the agent redirected more than 3 times — not followed")]
    assert [r.path for r in server.requests] == ["/turn", "/1", "/2", "/3"]


async def test_a_redirect_without_a_location_is_not_followed() -> None:
    answer = b"HTTP/1.1 307 Moved\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    async with serving(raw(answer)) as server:
        found = await collect(HttpAgent(server.url()))
    assert found == [Failed("the agent answered 307 to another origin — not followed")]
    assert len(server.requests) == 1
