"""``GET /tools``: the wake-up tools' definitions for an agent in another process, stating the
limits of the scheduler that serves them. A real hypercorn server on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from functools import partial

import pytest
import trio
from test_http import ROUTINES, TOKEN, Server, assert_error, serving

from trio_routines import Scheduler
from trio_routines.http import serve_http
from trio_routines.testing import MemoryStore, ScriptedAgent
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
