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
from test_http import ROUTINES, TOKEN, Server, assert_error, serving

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


def call(turn: FireContext | str, name: str, **arguments: object) -> dict[str, object]:
    ticket = turn if isinstance(turn, str) else make_ticket(turn)
    return {"turn": ticket, "name": name, "arguments": arguments}


async def test_a_tool_call_with_a_routines_ticket_adds_the_turns_wake_up() -> None:
    async with limited() as server:
        reply = await server.call(
            "POST",
            "/tools/call",
            call(DAILY, "schedule_wakeup", prompt="check again", **{"in": "2h"}),
        )
        assert reply.status == 200, reply.raw
        text = reply.json["text"]
        (added,) = await server.store.list_wakeups()
    assert text.startswith("Scheduled ")
    assert f'cancel_wakeup(id="{added.id}")' in text
    assert added.session == "routine:daily"  # the ticket's session: the body names none
    assert added.origin == Origin(kind=OriginKind.ROUTINE, routine="daily", slot=SLOT, depth=1)


async def test_the_rate_and_the_depth_refuse_a_ticketed_call_as_they_refuse_the_turns_own() -> None:
    async with limited() as server:
        for minutes in (10, 20, 30):
            body = call(DAILY, "schedule_wakeup", prompt="p", **{"in": f"{minutes}m"})
            assert (
                (await server.call("POST", "/tools/call", body))
                .json["text"]
                .startswith("Scheduled")
            )
        body = call(DAILY, "schedule_wakeup", prompt="p", **{"in": "40m"})
        refused = (await server.call("POST", "/tools/call", body)).json["text"]
        assert refused.startswith("schedule_wakeup: refused — rate limit — this session would")
        # The operator's call is counted, never refused: the ticket is what makes it the turn's.
        operator = {"session": "routine:daily", "prompt": "p", "in": "40m"}
        assert (await server.call("POST", "/wakeups", operator)).status == 201
        deep = call(chained(LIMITS.depth), "schedule_wakeup", prompt="p", **{"in": "1h"})
        refused = (await server.call("POST", "/tools/call", deep)).json["text"]
        assert refused.startswith("schedule_wakeup: refused — chain-depth limit — this wake-up")
        shallow = call(chained(LIMITS.depth - 1), "schedule_wakeup", prompt="p", **{"in": "1h"})
        assert (
            (await server.call("POST", "/tools/call", shallow)).json["text"].startswith("Scheduled")
        )
        pending = await server.store.list_wakeups()
    depths = sorted(w.origin.depth for w in pending if w.session == "chat:42")  # type: ignore[union-attr]
    assert depths == [LIMITS.depth]


async def test_a_ticket_lists_and_cancels_its_own_sessions_wake_ups_alone() -> None:
    async with limited() as server:
        theirs = {"session": "chat:other", "prompt": "p", "in": "1h"}
        other_id = (await server.call("POST", "/wakeups", theirs)).json["wakeup"]["id"]
        mine = call(chained(1), "schedule_wakeup", prompt="mine", **{"in": "1h"})
        assert (await server.call("POST", "/tools/call", mine)).status == 200
        listed = (await server.call("POST", "/tools/call", call(chained(1), "list_wakeups"))).json
        assert listed["text"].startswith("1 pending")
        assert other_id not in listed["text"]
        cancel = call(chained(1), "cancel_wakeup", id=other_id)
        refused = (await server.call("POST", "/tools/call", cancel)).json["text"]
        assert refused.startswith(f'cancel_wakeup: no pending wake-up "{other_id}"')
        assert other_id in [w.id for w in await server.store.list_wakeups()]


async def test_no_valid_ticket_no_call_and_a_bad_call_is_said_in_one_line() -> None:
    async with limited() as server:
        for body in (
            {"name": "list_wakeups"},
            call("forged.ticket", "list_wakeups"),
            call(make_ticket(DAILY, now=0.0), "list_wakeups"),  # long ended
        ):
            message = assert_error(await server.call("POST", "/tools/call", body), 403)
            assert message.startswith("the turn ticket ")
        message = assert_error(
            await server.call("POST", "/tools/call", {"turn": make_ticket(DAILY)}), 400
        )
        assert message == '"name" must be a non-empty string, e.g. "schedule_wakeup"'
        unknown = (await server.call("POST", "/tools/call", call(DAILY, "rm -rf"))).json["text"]
        assert unknown == (
            "unknown tool 'rm -rf': the tools are schedule_wakeup, list_wakeups, cancel_wakeup."
        )
        assert (await server.call("GET", "/tools/call")).status == 405
        assert await server.store.list_wakeups() == []


async def test_with_a_token_the_ticket_is_the_tool_calls_credential() -> None:
    async with serving(token=TOKEN) as server:
        body = call(DAILY, "schedule_wakeup", prompt="p", **{"in": "1h"})
        assert (await server.call("POST", "/tools/call", body)).status == 200  # no bearer
        assert_error(await server.call("POST", "/tools/call", call("x.y", "list_wakeups")), 403)
        # Every other path still asks for the token.
        assert (await server.call("GET", "/wakeups")).status == 401
        assert (
            await server.call("POST", "/wakeups", {"session": "s", "prompt": "p"})
        ).status == 401
        (added,) = await server.store.list_wakeups()
    assert added.origin is not None
    assert added.origin.kind is OriginKind.ROUTINE


async def test_an_agent_in_another_process_calls_back_with_the_ticket_its_turn_brought() -> None:
    # The whole path: the scheduler posts a turn to an agent server; the server's model asks
    # for a wake-up, which the server carries out with the request's ticket.
    answers: list[dict[str, object]] = []
    scheduler_port: list[int] = []

    async def agent_server(request: Request, stream: trio.abc.Stream) -> None:
        body = call(request.json["turn"], "schedule_wakeup", prompt="follow up", **{"in": "3h"})
        answer = await Server(scheduler_port[0], None, None, None).call(  # type: ignore[arg-type]
            "POST", "/tools/call", body
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
