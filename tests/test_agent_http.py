"""The HTTP agent against a real agent server on a loopback port (tests/agent_server.py)."""

from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from urllib.parse import unquote

import pytest
import trio
from agent_server import AgentServer, Request, Respond, events, head, never_answer, reply
from procs import Env

from trio_routines import agent_http
from trio_routines.agent import SESSION_BUSY, Agent, Completed, Event, Failed, TextDelta
from trio_routines.agent_http import (
    HttpAgent,
    classify,
    first_line,
    masked,
    reason_of,
    request_body,
)
from trio_routines.agents import agent_from_spec
from trio_routines.agentspec import describe_agent
from trio_routines.cli.table import reason as history_reason
from trio_routines.context import FireContext, firing
from trio_routines.errors import InvalidAgent
from trio_routines.records import ClaimStatus, Origin, OriginKind, Outcome
from trio_routines.routines import Routine
from trio_routines.scheduler import Scheduler
from trio_routines.sse import MAX_LINE
from trio_routines.testing import MemoryStore, WallClock
from trio_routines.tickets import read_ticket

SLOT = datetime(2026, 7, 7, 9, 0, tzinfo=UTC)
DAILY = FireContext("routine", "routine:daily", routine="daily", slot=SLOT)


@asynccontextmanager
async def serving(
    respond: Respond, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[AgentServer]:
    async with trio.open_nursery() as nursery:
        server = await nursery.start(AgentServer(respond, ssl_context).run)
        yield server
        nursery.cancel_scope.cancel()


async def collect(agent: Agent, fire: FireContext | None = DAILY, text: str = "go") -> list[Event]:
    session = fire.session if fire is not None else "chat-1"
    with trio.fail_after(30):  # every wait has a bound; the agent's own are far shorter
        if fire is None:
            async with aclosing(agent.invoke(session, text)) as stream:  # type: ignore[type-var]
                return [event async for event in stream]
        with firing(fire):
            async with aclosing(agent.invoke(session, text)) as stream:  # type: ignore[type-var]
                return [event async for event in stream]


def text_of(found: list[Event]) -> str:
    return "".join(e.text for e in found if isinstance(e, TextDelta))


# --- the request ----------------------------------------------------------------------------------


async def test_a_cron_fire_posts_json_with_the_idempotency_key_and_takes_a_json_body() -> None:
    async with serving(reply(200, '{"reply": "done"}')) as server:
        found = await collect(HttpAgent(server.url()), text="good morning")
    assert text_of(found) == '{"reply": "done"}'
    assert found[-1] == Completed()
    (request,) = server.requests
    assert request.method == "POST"
    assert request.path == "/turn"
    body = dict(request.json)
    assert read_ticket(body.pop("turn")) == DAILY  # the turn's ticket for its tool calls
    assert body == {
        "session": "routine:daily",
        "prompt": "good morning",
        "routine": "daily",
        "slot": "2026-07-07T09:00:00.000Z",
    }
    assert request.headers["content-type"] == "application/json"
    assert request.headers["idempotency-key"] == "daily/2026-07-07T09-00-00-000Z"
    assert "authorization" not in request.headers


@pytest.mark.parametrize(
    ("fire", "body"),
    [
        (
            FireContext("wakeup", "chat-9", wakeup="w-42"),
            {"session": "chat-9", "prompt": "p", "wakeup": "w-42"},
        ),
        (
            FireContext("run", "routine:daily", routine="daily"),
            {"session": "routine:daily", "prompt": "p", "run": True, "routine": "daily"},
        ),
        (None, {"session": "chat-1", "prompt": "p"}),
    ],
)
async def test_wakeups_runs_and_plain_calls_say_why_and_carry_no_key(
    fire: FireContext | None, body: dict[str, object]
) -> None:
    made = request_body(fire.session if fire else "chat-1", "p", fire)
    assert (made.pop("turn", None) is None) == (fire is None)  # a ticket exactly for a turn
    assert made == body
    async with serving(reply(200, "ok", "text/plain")) as server:
        found = await collect(HttpAgent(server.url()), fire, text="p")
    assert found == [TextDelta("ok"), Completed()]
    (request,) = server.requests
    sent = dict(request.json)
    if fire is not None:
        assert read_ticket(sent.pop("turn")) == fire
    assert sent == body
    assert "idempotency-key" not in request.headers


# --- event streams --------------------------------------------------------------------------------


async def test_an_event_stream_arrives_as_deltas() -> None:
    respond = events("data: Hel", "lo\n\n", ": a comment\r\ndata: , wor", "ld\r\n\r\n", "data: !\r")
    async with serving(respond) as server:
        found = await collect(HttpAgent(server.url()))
    assert found == [TextDelta("Hello"), TextDelta(", world"), TextDelta("!"), Completed()]


async def test_a_failed_event_fails_the_turn_with_its_reason() -> None:
    respond = events("data: partial\n\n", "event: failed\ndata: model overloaded\n\n")
    async with serving(respond) as server:
        found = await collect(HttpAgent(server.url()))
    assert found == [TextDelta("partial"), Failed("model overloaded")]


async def test_a_busy_event_is_busy() -> None:
    async with serving(events("event: busy\ndata: one turn at a time\n\n")) as server:
        found = await collect(HttpAgent(server.url()))
    assert found == [Failed("one turn at a time", SESSION_BUSY)]


async def test_a_stream_that_closes_mid_way_fails_and_says_so() -> None:
    async with serving(events("data: half a rep", end=False)) as server:
        found = await collect(HttpAgent(server.url()))
    assert found[:-1] == []  # the unfinished event was never complete
    last = found[-1]
    assert isinstance(last, Failed)
    assert last.details.startswith(f"the connection to http://127.0.0.1:{server.port} broke")
    assert last.details.endswith("(not retried)")
    assert len(server.requests) == 1


# --- statuses -------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [409, 423])
async def test_409_and_423_are_busy(status: int) -> None:
    async with serving(reply(status, "session busy\nmore", "text/plain")) as server:
        found = await collect(HttpAgent(server.url()))
    assert found == [Failed(f"the agent answered {status} (busy): session busy", SESSION_BUSY)]


async def test_a_500_fails_with_the_status_and_the_first_line_of_the_body_bounded() -> None:
    async with serving(reply(500, "\n  boom: the model  \nsecond line", "text/plain")) as server:
        found = await collect(HttpAgent(server.url()))
    assert found == [Failed("the agent answered 500: boom: the model")]
    async with serving(reply(502, "x" * 100_000, "text/plain")) as server:
        (last,) = await collect(HttpAgent(server.url()))
    assert isinstance(last, Failed)
    assert len(last.details) < 400


async def test_a_busy_answer_settles_the_slot_skipped_through_the_runtime() -> None:
    clock = WallClock(datetime(2026, 7, 7, 9, 0, 5, tzinfo=UTC))
    routine = Routine(name="daily", prompt="go", cron="0 9 * * *")
    store = MemoryStore()
    done = "daily/2026-07-07T09-00-00-000Z was already done"
    async with serving(reply(409, done, "text/plain")) as server:
        scheduler = Scheduler(
            agent=HttpAgent(server.url()), store=store, routines=[routine], now=clock
        )
        result = await scheduler.fire("daily", SLOT)
    assert result.outcome is Outcome.SKIPPED
    fire = await store.latest_fire("daily")
    assert fire is not None
    assert fire.outcome is Outcome.SKIPPED
    # History says what the agent said, not that a previous turn of ours was still running.
    assert fire.error == f"the agent answered 409 (busy): {done}"
    assert history_reason(fire) == fire.error
    assert result.reason is not None
    assert result.reason.endswith(f"({fire.error})")  # the caller hears it too
    assert result.failed is None  # skipped, not failed
    assert server.requests[0].headers["idempotency-key"] == "daily/2026-07-07T09-00-00-000Z"
    again = await store.claim("daily", SLOT, clock())
    assert again.status is ClaimStatus.DUPLICATE


# --- limits ---------------------------------------------------------------------------------------


async def test_a_server_that_never_answers_fails_on_the_read_timeout() -> None:
    async with serving(never_answer) as server:
        found = await collect(HttpAgent(server.url(), read_timeout=0.5))
    assert found == [
        Failed(f"http://127.0.0.1:{server.port} sent nothing for 0.5s — read timeout (not retried)")
    ]
    assert len(server.requests) == 1


@pytest.mark.slow
async def test_the_routine_timeout_bounds_a_turn_whose_server_trickles() -> None:
    # A server sending a comment every 0.1 s never trips the read timeout: only the routine's
    # timeout (the runtime's scope) ends the turn.
    from trio_routines.turns import run_turn

    respond = events(*([": still thinking\n"] * 10_000), pause=0.1)
    async with serving(respond) as server:
        agent = HttpAgent(server.url(), read_timeout=5)
        with firing(DAILY):
            result = await run_turn(agent, "daily", "routine:daily", "go", timeout=1)
    assert result.outcome is Outcome.FAILED
    assert result.failed == "timed out after 1s"


async def test_a_refused_connection_fails_once_and_is_not_retried() -> None:
    async with serving(reply(200, "unused")) as server:
        port = server.port
    found = await collect(HttpAgent(f"http://127.0.0.1:{port}/turn"))
    (last,) = found
    assert isinstance(last, Failed)
    assert last.details.startswith(f"could not connect to http://127.0.0.1:{port}: ")
    assert last.details.endswith("(not retried)")


@pytest.mark.parametrize(
    ("content_type", "body", "text"),
    [
        ("text/plain; charset=latin-1", "café".encode("latin-1"), "café"),
        ("text/plain; charset=no-such-thing", "café".encode(), "café"),
        ("text/plain; charset=rot13", b"abc", "abc"),  # not a text encoding: UTF-8
        # Text encodings that fail as they decode: UTF-8 from there on.
        ("text/plain; charset=idna", "café".encode(), "café"),  # refuses errors="replace"
        ("text/plain; charset=undefined", b"abc", "abc"),  # refuses everything
        ("text/plain; charset=punycode", b"ok \xff", "ok \ufffd"),
        ("application/octet-stream", b"\xff ok", "\ufffd ok"),
    ],
)
async def test_a_body_is_decoded_by_its_charset_or_as_utf8(
    content_type: str, body: bytes, text: str
) -> None:
    async with serving(reply(200, body, content_type)) as server:
        found = await collect(HttpAgent(server.url()))
    assert found == [TextDelta(text), Completed()]


async def test_a_reply_is_kept_up_to_the_limit() -> None:
    async with serving(reply(200, "a" * 5000, "text/plain")) as server:
        found = await collect(HttpAgent(server.url(), max_reply=1000))
    assert text_of(found) == "a" * 1000
    assert found[-1] == Completed()
    endless = events(*(["data: " + "b" * 500 + "\n\n"] * 10), pause=0)
    async with serving(endless) as server:
        found = await collect(HttpAgent(server.url(), max_reply=1000))
    last = found[-1]
    assert isinstance(last, Failed)
    assert "passed 1000 bytes" in last.details


def gzipped(status: int, content_type: str, body: bytes, coding: str = "gzip") -> Respond:
    packed = body if coding == "identity" else gzip.compress(body)

    async def respond(request: Request, stream: trio.abc.Stream) -> None:
        extra = f"Content-Encoding: {coding}\r\n"
        await stream.send_all(head(status, content_type, extra, len(packed)) + packed)

    return respond


@pytest.mark.parametrize("content_type", ["text/plain", "text/event-stream"])
async def test_a_compressed_answer_is_never_inflated(content_type: str) -> None:
    bomb = b"data: " + b"x" * (8 << 20) + b"\n\n"  # 8 MiB that gzip packs into a few KiB
    async with serving(gzipped(200, content_type, bomb, "GZip")) as server:
        found = await collect(HttpAgent(server.url()))
    assert found == [
        Failed("the agent answered in Content-Encoding gzip, not the identity asked for — not read")
    ]
    async with serving(gzipped(200, "text/plain", b"fine", "identity")) as server:
        found = await collect(HttpAgent(server.url()))
    assert found == [TextDelta("fine"), Completed()]
    for status, busy in ((500, None), (409, SESSION_BUSY)):
        async with serving(gzipped(status, "text/plain", b"boom\n" + bomb)) as server:
            found = await collect(HttpAgent(server.url()))
        reason = f"the agent answered {status}" + (" (busy)" if busy else "")
        assert found == [Failed(f"{reason}: its body in Content-Encoding gzip was not read", busy)]


async def test_an_endless_line_in_small_pieces_fails_the_turn_at_the_line_cap() -> None:
    pieces = ["data: ok\n\n", "data: ", *(["y" * 4096] * (MAX_LINE // 4096 + 1)), "\n\n"]
    async with serving(events(*pieces, pause=0)) as server:
        found = await collect(HttpAgent(server.url()))
    assert found == [
        TextDelta("ok"),
        Failed(
            f"the agent's event stream sent a line longer than {MAX_LINE} characters — "
            "stopped reading"
        ),
    ]


async def test_redirects_are_followed_only_within_the_origin() -> None:
    async def moved(request: Request, stream: trio.abc.Stream) -> None:
        if request.path == "/old":
            await stream.send_all(
                b"HTTP/1.1 308 Moved\r\nLocation: /new\r\nContent-Length: 0\r\n"
                b"Connection: close\r\n\r\n"
            )
        else:
            await reply(200, "moved fine", "text/plain")(request, stream)

    async with serving(moved) as server:
        found = await collect(HttpAgent(server.url("/old")))
    assert found == [TextDelta("moved fine"), Completed()]
    assert [r.path for r in server.requests] == ["/old", "/new"]
    assert server.requests[1].json == server.requests[0].json

    async with serving(reply(200, "elsewhere", "text/plain")) as other:

        async def away(request: Request, stream: trio.abc.Stream) -> None:
            location = other.url("/steal").encode()
            await stream.send_all(
                b"HTTP/1.1 307 Moved\r\nLocation: " + location + b"\r\nContent-Length: 0\r\n"
                b"Connection: close\r\n\r\n"
            )

        async with serving(away) as server:
            found = await collect(HttpAgent(server.url()))
    assert found == [Failed("the agent answered 307 to another origin — not followed")]
    assert other.requests == []


# --- the token ------------------------------------------------------------------------------------


async def test_the_token_is_sent_and_never_logged(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trio_routines.turns import run_turn

    monkeypatch.setenv("TRIO_ROUTINES_AGENT_TOKEN", "s3cret-token")
    caplog.set_level(logging.DEBUG)  # every logger, httpx and httpcore included
    for respond in (reply(200, "ok"), reply(500, "nope"), events("data: x", end=False)):
        async with serving(respond) as server:
            agent = agent_from_spec(server.url())
            with firing(DAILY):
                result = await run_turn(agent, "daily", "routine:daily", "go")
        assert server.requests[0].headers["authorization"] == "Bearer s3cret-token"
        assert "s3cret" not in repr(agent)
        assert "s3cret" not in (result.failed or "")
    assert caplog.records  # the loggers did speak
    assert "s3cret" not in caplog.text
    with pytest.raises(InvalidAgent) as info:
        agent_from_spec("http://user:s3cret@127.0.0.1/turn")
    assert "s3cret" not in str(info.value)


@pytest.mark.parametrize("token", ["s3cret\nX-Evil: 1", "s3cret\x00", "s3crét", "s3 cret"])
def test_a_token_that_cannot_be_a_header_is_refused_without_showing_it(
    token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(InvalidAgent, match="must be printable ASCII") as info:
        HttpAgent("http://127.0.0.1:9/turn", token=token)
    assert "s3c" not in str(info.value)
    monkeypatch.setenv("TRIO_ROUTINES_AGENT_TOKEN", "  s3cret\n")  # as read from a file
    assert agent_from_spec("http://127.0.0.1:9/turn").headers(None)["Authorization"] == (
        "Bearer s3cret"
    )


# --- TLS ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    assert openssl, "the TLS tests need the openssl command (Debian's openssl package)"
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


async def test_tls_is_verified_and_a_private_ca_is_taken_from_the_environment(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    async with serving(reply(200, "secure"), context) as server:
        (refused,) = await collect(HttpAgent(server.url()))
        monkeypatch.setenv("TRIO_ROUTINES_AGENT_CA", str(cert))
        trusted = await collect(agent_from_spec(server.url()))
    assert isinstance(refused, Failed)
    assert "CERTIFICATE_VERIFY_FAILED" in refused.details
    assert trusted == [TextDelta("secure"), Completed()]


# --- specs and the pure core ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("http://", "must be http:// or https:// with a host"),
        ("http:///path", "must be http:// or https:// with a host"),
        ("https://a b/", "is not a valid URL"),
        ("http://[::1/x", "is not a valid URL"),
        ("http://host:99999/", "is not a valid URL"),
        ("http://me:pw@example.test/x", "carries credentials"),
    ],
)
def test_bad_urls_are_one_line_invalid_agent(spec: str, message: str) -> None:
    with pytest.raises(InvalidAgent, match=message) as info:
        agent_from_spec(spec)
    assert "\n" not in str(info.value)


def test_a_ca_file_that_cannot_be_read_is_invalid(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TRIO_ROUTINES_AGENT_CA", str(tmp_path / "missing.pem"))
    with pytest.raises(InvalidAgent, match="cannot be loaded as a CA file"):
        agent_from_spec("https://127.0.0.1:9/turn")
    agent_from_spec("http://127.0.0.1:9/turn")  # plain http never reads it


def test_specs_are_logged_without_query_or_credentials() -> None:
    assert describe_agent("https://u:p@host:8443/turn?key=1#x") == "https://host:8443/turn"
    # A command by its program: never its arguments nor its environment, where secrets go.
    assert describe_agent("cmd:/opt/agent/run --token s3cret") == "cmd:/opt/agent/run …"
    assert describe_agent("cmd:API_KEY=s3cret OTHER=x ./agent") == "cmd:./agent"
    assert describe_agent("cmd:llm") == "cmd:llm"
    for unclear in ("cmd:$(cat /run/key) x", "cmd:'open quote", "cmd:  ", "cmd:KEY=s3cret"):
        assert describe_agent(unclear) == "cmd:…", unclear
    assert describe_agent("cmd:https://u:s3cret@h/x") == "cmd:…"
    assert describe_agent("echo") == "echo"


def test_classify_and_first_line() -> None:
    assert classify(200, "text/event-stream; charset=utf-8").kind == "events"
    assert classify(201, "application/json").kind == "text"
    assert classify(409, "").kind == "busy"
    assert classify(302, "").kind == "failed"
    assert classify(308, "").kind == "redirect"
    assert classify(401, "").reason == "the agent answered 401"
    assert first_line(b"\n\n  a\tb  \nc") == "a b"
    assert first_line(b"x" * 500, limit=10) == "x" * 9 + "…"


# --- real processes ------------------------------------------------------------------------------


@pytest.mark.slow
async def test_replicas_racing_for_a_slot_post_once_and_share_the_idempotency_key(
    env: Env,
) -> None:
    # Two `fire` processes on one state directory race for one slot: the claim lets one POST
    # through. A third, on a state directory of its own (a restored backup, a second deploy:
    # "some other path"), posts the very same key, and the receiver refuses it as busy.
    seen: set[str] = set()

    async def receiver(request: Request, stream: trio.abc.Stream) -> None:
        key = request.headers["idempotency-key"]
        if key in seen:
            await reply(409, "already done", "text/plain")(request, stream)
            return
        seen.add(key)
        await trio.sleep(0.5)  # the turn takes a while: the race is decided by the claim
        await events("data: done\n\n")(request, stream)

    env.routine("daily", cron="0 9 * * *")
    slot = "2026-01-05T09:00:00Z"
    environ = env.environ() | {"TRIO_ROUTINES_AGENT_TOKEN": "tok-8f3a"}

    async def fire(state: Path, results: list[subprocess.CompletedProcess[bytes]]) -> None:
        argv = env.argv("fire", "daily", "--slot", slot, "--agent", server.url(), "--json")
        argv[argv.index(str(env.state))] = str(state)
        argv += ["--log-level", "debug"]
        done = await trio.run_process(
            argv, env=environ, capture_stdout=True, capture_stderr=True, check=False
        )
        results.append(done)

    results: list[subprocess.CompletedProcess[bytes]] = []
    with trio.fail_after(120):
        async with serving(receiver) as server:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(fire, env.state, results)
                nursery.start_soon(fire, env.state, results)
            assert len(server.requests) == 1
            await fire(env.root / "restored-state", results)
    assert [r.returncode for r in results] == [0, 0, 0]
    answers = [json.loads(r.stdout) for r in results]
    decided = sorted(str(a["outcome"] or a["reason"]) for a in answers)
    assert decided == ["completed", "duplicate", "skipped"]
    assert answers[2]["outcome"] == "skipped"  # the receiver refused the key it had seen
    assert "failed" not in answers[2]  # busy is an overlap, not a failure
    first, again = server.requests
    assert first.headers["idempotency-key"] == again.headers["idempotency-key"]
    assert first.headers["idempotency-key"] == "daily/2026-01-05T09-00-00-000Z"
    bodies = [dict(first.json), dict(again.json)]
    for body in bodies:  # each process signs its turn's ticket with a key of its own
        assert isinstance(body.pop("turn"), str)
    assert (
        bodies[0]
        == bodies[1]
        == {
            "session": "routine:daily",
            "prompt": "do the thing",
            "routine": "daily",
            "slot": "2026-01-05T09:00:00.000Z",
        }
    )
    assert all(r.headers["authorization"] == "Bearer tok-8f3a" for r in server.requests)
    logs = b"".join(r.stderr for r in results).decode()
    assert "firing" in logs  # debug logs were on, and said things
    assert "tok-8f3a" not in logs


EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "agent_server.py"


@asynccontextmanager
async def example_server(
    *options: str, env: dict[str, str] | None = None, log: Path | None = None
) -> AsyncIterator[str]:
    """``examples/agent_server.py`` with ``options``, as a process: the URL it listens on."""
    argv = [sys.executable, str(EXAMPLE), "--port", "0", "--pause", "0.01", *options]
    if log is None:
        proc = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE, env=env)
    else:
        with log.open("wb") as errors:
            proc = await trio.lowlevel.open_process(
                argv, stdout=subprocess.PIPE, stderr=errors, env=env
            )
    try:
        assert proc.stdout is not None
        line = b""
        with trio.fail_after(30):
            while not line.endswith(b"\n"):
                line += await proc.stdout.receive_some(1)
        yield line.decode().removeprefix("listening on ").strip()
    finally:
        proc.terminate()
        with trio.fail_after(10):
            await proc.wait()
        if proc.stdout is not None:
            await proc.stdout.aclose()


@pytest.mark.slow
async def test_the_example_receiver_turns_at_most_once_into_exactly_once(tmp_path: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if k != "AGENT_TOKEN"} | {"AGENT_TOKEN": "t-1"}
    errors = tmp_path / "server.log"
    database = ("--db", str(tmp_path / "turns.sqlite"))
    async with example_server(*database, env=environ, log=errors) as url:
        agent = HttpAgent(url, token="t-1")
        first = await collect(agent, text="summarize")
        assert text_of(first) == (
            "Working on routine daily for 2026-07-07T09:00:00.000Z: summarize — done."
        )
        assert first[-1] == Completed()
        again = await collect(agent, text="summarize")  # the same slot by another path
        assert again == [
            Failed(
                "the agent answered 409 (busy): daily/2026-07-07T09-00-00-000Z was already done",
                SESSION_BUSY,
            )
        ]
        woken = await collect(agent, FireContext("wakeup", "chat-3", wakeup="w-9"), "ping")
        assert text_of(woken) == "Working on wake-up w-9: ping — done."
        (refused,) = await collect(HttpAgent(url, token="not-the-right-one"))
        assert refused == Failed("the agent answered 401: missing or wrong bearer token")
    assert "POST /turn" in errors.read_text()
    assert "t-1" not in errors.read_text()


@pytest.mark.slow
async def test_the_example_receiver_asks_for_a_follow_up_with_the_turns_ticket() -> None:
    from trio_routines.http import bind_http, serve_http

    store = MemoryStore()
    routine = Routine(name="daily", prompt="summarize", cron="0 9 * * *")
    # The scheduler's address first, held open: the example is told where it answers.
    listener = bind_http("127.0.0.1", 0)
    scheduler_url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        async with (
            example_server("--scheduler", scheduler_url) as url,
            trio.open_nursery() as nursery,
        ):
            scheduler = Scheduler(
                agent=HttpAgent(url), store=store, routines=[routine], external_clock=True
            )
            await nursery.start(scheduler.run)
            await nursery.start(partial(serve_http, scheduler, sock=listener))
            with trio.fail_after(30):
                result = await scheduler.fire("daily", SLOT)
            scheduler.stop(grace=0)
    finally:
        listener.close()
    assert result.outcome is Outcome.COMPLETED
    (added,) = await store.list_wakeups()
    assert added.prompt == "Follow up on: summarize"
    assert added.origin == Origin(kind=OriginKind.ROUTINE, routine="daily", slot=SLOT, depth=1)


async def test_no_turn_loads_certificates_on_the_trio_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loads: list[object] = []
    original = ssl.SSLContext.load_verify_locations

    def counting(self: ssl.SSLContext, *args: object, **kwargs: object) -> None:
        loads.append(args or kwargs)
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    async with serving(reply(200, "ok", "text/plain")) as server:
        agent = HttpAgent(server.url())  # whatever it loads, it loads once, here
        monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
        for _ in range(2):
            assert await collect(agent) == [TextDelta("ok"), Completed()]
    assert loads == []


async def test_a_stops_grace_cancels_a_turn_waiting_on_the_server() -> None:
    clock = WallClock(datetime(2026, 7, 7, 9, 0, 5, tzinfo=UTC))
    routine = Routine(name="daily", prompt="go", cron="0 9 * * *")
    store = MemoryStore()
    results = []
    async with serving(never_answer) as server:
        agent = HttpAgent(server.url())  # the read timeout (300 s) is not what ends it
        scheduler = Scheduler(agent=agent, store=store, routines=[routine], now=clock)
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:

                async def fire() -> None:
                    results.append(await scheduler.fire("daily", SLOT))

                nursery.start_soon(fire)
                while not server.requests:  # noqa: ASYNC110 — the server is another task
                    await trio.sleep(0.01)
                scheduler.stop(grace=0.2)
    (result,) = results
    assert result.outcome is Outcome.INTERRUPTED
    assert len(server.requests) == 1


@pytest.mark.slow
async def test_a_server_whose_backlog_is_full_fails_on_the_connect_timeout() -> None:
    # A listener that never accepts, its queue filled: further connections are never completed.
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(2):
            filler = trio.socket.socket()
            fillers.append(filler)
            with trio.move_on_after(0.5):
                await filler.connect(("127.0.0.1", port))
        found = await collect(HttpAgent(f"http://127.0.0.1:{port}/turn", connect_timeout=0.5))
    finally:
        for sock in [*fillers, listener]:
            sock.close()
    assert found == [
        Failed(f"could not connect to http://127.0.0.1:{port} within 0.5s (not retried)")
    ]


def test_the_docs_state_the_limits_the_code_has() -> None:
    from trio_routines import agent_http

    agents = (Path(__file__).resolve().parent.parent / "docs" / "agents.md").read_text()
    section = agents[agents.index("## The HTTP agent's contract") :]
    assert f"{agent_http.CONNECT_TIMEOUT:g} s to connect" in section
    assert f"{agent_http.READ_TIMEOUT:g} s of silence" in section
    assert f"at most {agent_http.MAX_REPLY >> 20} MiB" in section
    assert f"at most {agent_http.REASON_LIMIT} characters" in section
    assert f"at most {agent_http.MAX_REDIRECTS})" in section


async def test_a_server_echoing_the_token_never_puts_it_in_a_reason() -> None:
    secret = "sk-echoed-7f2b"
    body = f"invalid token 'Bearer {secret}'"
    async with serving(reply(401, body, "text/plain")) as server:
        found = await collect(HttpAgent(server.url(), token=secret))
    assert found == [Failed("the agent answered 401: invalid token 'Bearer ***'")]
    stream = f"event: failed\ndata: the key {secret} expired\n\n"
    async with serving(reply(200, stream, "text/event-stream")) as server:
        (last,) = await collect(HttpAgent(server.url(), token=secret))
    assert last == Failed("the key *** expired")


LEAKY = "sk-LEAKY-0123456789abcdef"


def straddling(limit: int) -> str:
    """A text whose token starts 8 characters before ``limit``: a cut there halves it."""
    return "x" * (limit - 8) + LEAKY + " and more after it"


@pytest.mark.parametrize(
    "respond",
    [
        reply(500, straddling(agent_http.REASON_LIMIT), "text/plain"),
        reply(409, straddling(agent_http.REASON_LIMIT)),
        events(f"event: failed\ndata: {straddling(agent_http.REASON_LIMIT)}\n\n"),
        events(f"event: busy\ndata: {straddling(agent_http.REASON_LIMIT)}\n\n"),
        # The error body read stops at ERROR_BODY_LIMIT bytes, in the token; the blanks fold
        # into one, so what was read of it would come right after the status in the reason.
        reply(500, "a" + " " * (agent_http.ERROR_BODY_LIMIT - 9) + LEAKY, "text/plain"),
    ],
    ids=["500", "409", "failed-event", "busy-event", "body-cut"],
)
async def test_no_part_of_the_token_reaches_a_reason_cut_in_it(respond: Respond) -> None:
    async with serving(respond) as server:
        (last,) = await collect(HttpAgent(server.url(), token=LEAKY))
    assert isinstance(last, Failed)
    assert "sk-" not in last.details
    assert "***" in last.details or last.details.endswith("…")


async def test_no_part_of_the_token_reaches_the_stored_reason_or_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = WallClock(datetime(2026, 7, 7, 9, 0, 5, tzinfo=UTC))
    store = MemoryStore()
    respond = events(f"event: failed\ndata: {straddling(agent_http.REASON_LIMIT)}\n\n")
    async with serving(respond) as server:
        agent = HttpAgent(server.url(), token=LEAKY)
        routine = Routine(name="daily", prompt="go", cron="0 9 * * *")
        scheduler = Scheduler(agent=agent, store=store, routines=[routine], now=clock)
        result = await scheduler.fire("daily", SLOT)
    assert result.outcome is Outcome.FAILED
    fire = await store.latest_fire("daily")
    assert fire is not None
    assert fire.error is not None
    assert fire.error.startswith("xxx")
    assert "sk-" not in fire.error
    assert "xxx" in caplog.text
    assert "sk-" not in caplog.text


def test_masked_hides_the_secret_and_a_cut_beginning_of_it() -> None:
    assert masked("a sk-1 b sk-1", "sk-1") == "a *** b ***"
    assert masked("ends in sk-", "sk-1") == "ends in sk-"  # not cut: nothing was behind it
    assert masked("ends in sk-", "sk-1", cut=True) == "ends in ***"
    assert masked("ends in s", "sk-1", cut=True) == "ends in ***"
    assert masked("ends in k", "sk-1", cut=True) == "ends in k"
    assert masked("anything", None, cut=True) == "anything"
    assert reason_of("x" * 10 + "sk-1", "sk-1", limit=12) == "x" * 10 + "*…"


NAMES = ["café ☕", "日報", "my report", "100%", "caf%C3%A9", "x\r\nEvil: 1"]


@pytest.mark.parametrize("name", NAMES)
async def test_a_cron_fire_of_any_legal_name_reaches_the_server_with_its_key(name: str) -> None:
    clock = WallClock(datetime(2026, 7, 7, 9, 0, 5, tzinfo=UTC))
    routine = Routine(name=name, prompt="go", cron="0 9 * * *")
    store = MemoryStore()
    async with serving(reply(200, "done", "text/plain")) as server:
        scheduler = Scheduler(
            agent=HttpAgent(server.url()), store=store, routines=[routine], now=clock
        )
        result = await scheduler.fire(name, SLOT)
    assert result.outcome is Outcome.COMPLETED
    (request,) = server.requests
    assert request.json["routine"] == name
    key = request.headers["idempotency-key"]
    assert key.isascii()
    assert "evil" not in request.headers  # no header of the name's making
    encoded, _, slot = key.rpartition("/")
    assert (unquote(encoded), slot) == (name, "2026-07-07T09-00-00-000Z")


@pytest.mark.slow
def test_the_fire_command_posts_a_non_ascii_routine(env: Env) -> None:
    received: list[Request] = []

    async def main() -> subprocess.CompletedProcess[bytes]:
        async with serving(reply(200, "done", "text/plain")) as server:
            argv = env.argv("fire", "日報 café", "--slot", "2026-07-07T09:00:00Z")
            done = await trio.run_process(
                [*argv, "--agent", server.url(), "--json"],
                env=env.environ(),
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
            received.extend(server.requests)
            return done

    env.routine("日報 café", cron="0 9 * * *")
    done = trio.run(main)
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout)["outcome"] == "completed"
    (request,) = received
    assert request.headers["idempotency-key"] == (
        "%E6%97%A5%E5%A0%B1%20caf%C3%A9/2026-07-07T09-00-00-000Z"
    )
