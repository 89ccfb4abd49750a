"""``GET /tools``: the wake-up tools' definitions for an agent in another process, stating the
limits of the scheduler that serves them; ``POST /tools/call``: that agent's calls of them,
made as its turn with the turn's ticket. A real hypercorn server on loopback, and a real agent
server beside it for the whole path."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from functools import partial

import pytest
import trio
from agent_server import AgentServer, Request, reply
from test_http import (
    ROUTINES,
    TOKEN,
    Reply,
    Server,
    assert_error,
    body_of,
    raw_exchange,
    serving,
    status_of,
)

from trio_routines import Scheduler
from trio_routines.agent_http import HttpAgent
from trio_routines.context import FireContext
from trio_routines.http import serve_http
from trio_routines.records import Origin, OriginKind, Outcome
from trio_routines.testing import MemoryStore, ScriptedAgent
from trio_routines.tickets import make_ticket
from trio_routines.tools import definitions
from trio_routines.wakelimits import WakeLimits

LIMITS = WakeLimits(rate=3, depth=2, lifetime=timedelta(days=5))


@asynccontextmanager
async def limited() -> AsyncIterator[Server]:
    """A server whose scheduler has limits of its own, not the defaults."""
    agent, store = ScriptedAgent(), MemoryStore()
    scheduler = Scheduler(
        agent=agent, store=store, routines=ROUTINES, external_clock=True, wake_limits=LIMITS
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        port = await nursery.start(partial(serve_http, scheduler, "127.0.0.1", 0))
        yield Server(port, scheduler, agent, store)
        scheduler.stop(grace=0)


@pytest.mark.parametrize("style", ["plain", "openai", "anthropic"])
async def test_the_definitions_are_served_in_each_style_with_the_limits_in_force(
    style: str,
) -> None:
    async with limited() as server:
        reply = await server.call("GET", f"/tools?style={style}")
    assert reply.status == 200
    assert reply.json == {"style": style, "tools": definitions(style, limits=LIMITS)}  # type: ignore[arg-type]
    assert reply.json["tools"] != definitions(style)  # type: ignore[arg-type]  # not the defaults
    text = str(reply.json)
    assert "at most 3 self-scheduled turns per session in any hour" in text
    assert "at most 2 deep" in text


async def test_without_a_style_the_plain_shape_is_served() -> None:
    async with serving() as server:
        reply = await server.call("GET", "/tools")
    assert reply.status == 200
    assert reply.json == {"style": "plain", "tools": definitions()}
    assert [tool["name"] for tool in reply.json["tools"]] == [
        tool["name"] for tool in definitions()
    ]


async def test_a_bad_style_or_method_is_refused_in_one_line() -> None:
    async with serving() as server:
        message = assert_error(await server.call("GET", "/tools?style=cobol"), 400)
        assert message == "style must be one of plain, openai, anthropic, not 'cobol'"
        assert_error(await server.call("GET", "/tools?style=a&style=b"), 400)
        reply = await server.call("POST", "/tools", {})
        assert reply.status == 405
        assert reply.headers["allow"] == "GET, HEAD"


async def test_the_token_guards_the_definitions_like_every_other_read() -> None:
    async with serving(token=TOKEN) as server:
        assert (await server.call("GET", "/tools")).status == 401
        authorized = {"Authorization": f"Bearer {TOKEN}"}
        assert (await server.call("GET", "/tools", headers=authorized)).status == 200


# -- POST /tools/call: an agent in another process calls the tools as its turn ----------------

SLOT = datetime(2026, 7, 7, 7, 0, tzinfo=UTC)
DAILY = FireContext("routine", "routine:daily", routine="daily", slot=SLOT)


def chained(depth: int, session: str = "chat:42") -> FireContext:
    """A wake-up's turn ``depth`` deep in a chain of turns that woke each other."""
    origin = Origin(kind=OriginKind.WAKEUP, parent="w-0", depth=depth)
    return FireContext("wakeup", session, wakeup="w-1", origin=origin)


async def call(
    server: Server, turn: FireContext | str | None, name: str, **arguments: object
) -> Reply:
    """``POST /tools/call`` of ``name`` as ``turn`` (its ticket, or the text given as one)."""
    ticket = turn if turn is None or isinstance(turn, str) else make_ticket(turn)
    sent = {} if ticket is None else {"Authorization": f"Ticket {ticket}"}
    body = {"name": name, "arguments": arguments}
    return await server.call("POST", "/tools/call", body, headers=sent)


async def text_of(server: Server, turn: FireContext, name: str, **arguments: object) -> str:
    reply = await call(server, turn, name, **arguments)
    assert reply.status == 200, reply.raw
    text: str = reply.json["text"]
    return text


async def test_a_tool_call_with_a_routines_ticket_adds_the_turns_wake_up() -> None:
    async with limited() as server:
        text = await text_of(server, DAILY, "schedule_wakeup", prompt="check", **{"in": "2h"})
        (added,) = await server.store.list_wakeups()
    assert text.startswith(f"Scheduled {added.id}: next at ")
    assert added.session == "routine:daily"  # the ticket's session: the body names none
    assert added.origin == Origin(kind=OriginKind.ROUTINE, routine="daily", slot=SLOT, depth=1)


async def test_a_tool_call_naming_a_key_it_does_not_take_is_refused() -> None:
    async with limited() as server:
        body = {"name": "schedule_wakeup", "arguments": {"prompt": "p", "in": "2h"}, "args": {}}
        sent = {"Authorization": f"Ticket {make_ticket(DAILY)}"}
        reply = await server.call("POST", "/tools/call", body, headers=sent)
        assert reply.status == 400
        assert reply.json["error"] == (
            'unknown key "args": POST /tools/call takes "name", "arguments"'
        )
        assert await server.store.list_wakeups() == []


async def test_the_rate_and_the_depth_refuse_a_ticketed_call_as_they_refuse_the_turns_own() -> None:
    async with limited() as server:
        for minutes in (10, 20, 30):
            text = await text_of(
                server, DAILY, "schedule_wakeup", prompt="p", **{"in": f"{minutes}m"}
            )
            assert text.startswith("Scheduled")
        refused = await text_of(server, DAILY, "schedule_wakeup", prompt="p", **{"in": "40m"})
        assert refused.startswith("schedule_wakeup: refused — rate limit — this session would")
        # The operator's call is counted, never refused: the ticket is what makes it the turn's.
        operator = {"session": "routine:daily", "prompt": "p", "in": "40m"}
        assert (await server.call("POST", "/wakeups", operator)).status == 201
        deep = chained(LIMITS.depth)
        refused = await text_of(server, deep, "schedule_wakeup", prompt="p", **{"in": "1h"})
        assert refused.startswith("schedule_wakeup: refused — chain-depth limit — this wake-up")
        shallow = chained(LIMITS.depth - 1)
        text = await text_of(server, shallow, "schedule_wakeup", prompt="p", **{"in": "1h"})
        assert text.startswith("Scheduled")
        pending = await server.store.list_wakeups()
    chain = [w.origin for w in pending if w.session == "chat:42"]
    assert chain == [Origin(kind=OriginKind.WAKEUP, parent="w-1", depth=LIMITS.depth)]


async def test_a_ticket_lists_and_cancels_its_own_sessions_wake_ups_alone() -> None:
    async with limited() as server:
        theirs = {"session": "chat:other", "prompt": "p", "in": "1h"}
        other_id = (await server.call("POST", "/wakeups", theirs)).json["wakeup"]["id"]
        mine = await text_of(server, chained(1), "schedule_wakeup", prompt="mine", **{"in": "1h"})
        assert mine.startswith("Scheduled")
        listed = await text_of(server, chained(1), "list_wakeups")
        assert listed.startswith("1 pending")
        assert other_id not in listed
        refused = await text_of(server, chained(1), "cancel_wakeup", id=other_id)
        assert refused.startswith(f'cancel_wakeup: no pending wake-up "{other_id}"')
        assert other_id in [w.id for w in await server.store.list_wakeups()]


async def test_no_valid_ticket_no_call_and_a_bad_call_is_said_in_one_line() -> None:
    async with limited() as server:
        message = assert_error(await call(server, None, "list_wakeups"), 403)
        assert message == (
            "a tool call is made as a turn: send Authorization: Ticket <the ticket the turn was "
            "given>"
        )
        for ticket, said in (
            ("forged.ticket", "the turn ticket is damaged or not one of this scheduler's"),
            ("x" * 12_289, "the turn ticket is longer than 12288 characters"),
            (make_ticket(DAILY, now=0.0), "the turn ticket ended at 1970-01-01T01:00:00.000Z"),
        ):
            message = assert_error(await call(server, ticket, "list_wakeups"), 403)
            assert message.startswith(said)
        latin = await server.call(
            "POST",
            "/tools/call",
            {"name": "list_wakeups"},
            raw=None,
            headers={"Authorization": "Ticket caf\xe9.x"},
        )
        assert (
            assert_error(latin, 403) == "the turn ticket is damaged or not one of this scheduler's"
        )
        twice = [("authorization", f"Ticket {make_ticket(DAILY)}")] * 2
        repeated = await raw_exchange(server.port, raw_request(twice))
        assert status_of(repeated) == 400
        assert body_of(repeated) == {"error": "the authorization header is repeated"}
        # The scheme's name in any case, and any spaces before the credentials (RFC 9110).
        spaced = {"Authorization": f"ticket   {make_ticket(DAILY)}"}
        listed = await server.call("POST", "/tools/call", {"name": "list_wakeups"}, headers=spaced)
        assert listed.json == {"text": "No wake-ups pending for this conversation."}
        ticket = {"Authorization": f"Ticket {make_ticket(DAILY)}"}
        nameless = await server.call("POST", "/tools/call", {"arguments": {}}, headers=ticket)
        assert (
            assert_error(nameless, 400)
            == '"name" must be a non-empty string, e.g. "schedule_wakeup"'
        )
        unknown = await text_of(server, DAILY, "rm -rf")
        assert unknown == (
            "unknown tool 'rm -rf': the tools are schedule_wakeup, list_wakeups, cancel_wakeup."
        )
        assert (await server.call("GET", "/tools/call", headers=ticket)).status == 405
        assert await server.store.list_wakeups() == []


async def test_with_a_token_the_ticket_is_the_tool_calls_credential_read_before_its_body() -> None:
    async with serving(token=TOKEN) as server:
        text = await text_of(
            server, DAILY, "schedule_wakeup", prompt="p", **{"in": "1h"}
        )  # no bearer
        assert text.startswith("Scheduled")
        assert_error(await call(server, "x.y", "list_wakeups"), 403)
        # Without a ticket, whoever is not the operator hears what every other path says.
        assert (await call(server, None, "list_wakeups")).status == 401
        assert (await server.call("GET", "/tools/call")).status == 401
        twice = [("authorization", f"Ticket {make_ticket(DAILY)}")] * 2
        assert status_of(await raw_exchange(server.port, raw_request(twice))) == 401
        operator = {"Authorization": f"Bearer {TOKEN}"}
        told = await server.call("POST", "/tools/call", {"name": "list_wakeups"}, headers=operator)
        assert assert_error(told, 403).startswith("a tool call is made as a turn")
        # A caller without a valid ticket is answered before its body is read: a body that
        # never comes holds nothing.
        head = b"POST /tools/call HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        for auth in (b"", b"Authorization: Ticket x.y\r\n"):
            answered = await raw_exchange(
                server.port, head + auth + b"Content-Length: 100\r\n\r\n{", hold_open
            )
            assert status_of(answered) in (401, 403)
        # The definitions are the tools' too: a turn's holder reads them with its ticket.
        held = {"Authorization": f"Ticket {make_ticket(DAILY)}"}
        defined = await server.call("GET", "/tools?style=openai", headers=held)
        assert defined.json == {"style": "openai", "tools": definitions("openai")}
        spaced = {"Authorization": f"TICKET  {make_ticket(DAILY)}"}
        assert (await server.call("GET", "/tools", headers=spaced)).status == 200
        forged = {"Authorization": "Ticket x.y"}
        assert_error(await server.call("GET", "/tools", headers=forged), 403)
        # Every other path still asks for the token, a ticket or none.
        assert (await server.call("GET", "/wakeups")).status == 401
        assert (await server.call("GET", "/wakeups", headers=held)).status == 401
        (added,) = await server.store.list_wakeups()
    assert added.origin is not None
    assert added.origin.kind is OriginKind.ROUTINE


def raw_request(extra: list[tuple[str, str]]) -> bytes:
    """A tool call's request as bytes, with ``extra`` headers (repeated ones included)."""
    body = b'{"name": "list_wakeups"}'
    head = "".join(f"{name}: {value}\r\n" for name, value in extra)
    return (
        f"POST /tools/call HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"{head}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


async def hold_open(stream: trio.abc.Stream) -> None:
    """Send nothing more: a body that never comes."""
    await trio.sleep(30)


async def test_an_agent_in_another_process_calls_back_with_the_ticket_its_turn_brought() -> None:
    # The whole path: the scheduler posts a turn to an agent server; the server's model asks
    # for a wake-up, which the server carries out with the request's ticket.
    answers: list[dict[str, object]] = []
    scheduler_port: list[int] = []

    async def agent_server(request: Request, stream: trio.abc.Stream) -> None:
        back = Server(scheduler_port[0], None, None, None)  # type: ignore[arg-type]
        answer = await call(
            back, request.json["turn"], "schedule_wakeup", prompt="follow up", **{"in": "3h"}
        )
        answers.append(answer.json)
        await reply(200, "asked for a follow-up", "text/plain")(request, stream)

    async with trio.open_nursery() as nursery:
        agent_side = await nursery.start(AgentServer(agent_server).run)
        store = MemoryStore()
        scheduler = Scheduler(
            agent=HttpAgent(agent_side.url()), store=store, routines=ROUTINES, external_clock=True
        )
        await nursery.start(scheduler.run)
        scheduler_port.append(
            await nursery.start(partial(serve_http, scheduler, "127.0.0.1", 0, token=TOKEN))
        )
        result = await scheduler.fire("daily", SLOT)
        scheduler.stop(grace=0)
        nursery.cancel_scope.cancel()
    assert result.claimed
    assert result.outcome is Outcome.COMPLETED
    (answer,) = answers
    (added,) = await store.list_wakeups()
    assert str(answer["text"]).startswith(f"Scheduled {added.id}: next at ")
    assert added.prompt == "follow up"
    assert added.origin == Origin(kind=OriginKind.ROUTINE, routine="daily", slot=SLOT, depth=1)
