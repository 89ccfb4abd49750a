"""A small Trio agent server that embeds trio_routines: the pattern, end to end.

* an agent (here a fake one) that streams its reply, word by word;
* a Starlette application served by hypercorn's Trio worker: ``POST /chat`` streams the
  agent's reply to the caller, and the scheduler's HTTP surface is mounted at ``/scheduler``;
* a :class:`~trio_routines.Scheduler` over a state store opened with ``async with``;
* ``trio_routines.serve`` runs the scheduler and stops it on SIGINT/SIGTERM with the grace;
  once its last turn has settled, the web server shuts down too, and the process exits.

Run it: ``python examples/embed/embedding_host.py --state .state --port 8080``, then
``curl -N -X POST localhost:8080/chat -d 'hello'`` and ``curl localhost:8080/scheduler/routines``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import AsyncIterator, Sequence
from functools import partial
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as serve_asgi
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Mount, Route

from trio_routines import (
    Completed,
    Event,
    Routine,
    Scheduler,
    TextDelta,
    current_fire,
    open_store,
    serve,
)
from trio_routines.http import make_app

log = logging.getLogger("embedding_host")

ROUTINES = [
    Routine(
        name="digest",
        prompt="Post the morning digest.",
        cron="0 9 * * *",
        tz="Europe/Berlin",
    ),
    Routine(name="cleanup", prompt="Tidy the scratch space."),  # on demand: POST /scheduler/run
]


class FakeAgent:
    """Streams a reply word by word, as a model would. It knows why it runs: a routine's slot,
    a wake-up, an on-demand run, or (outside any of them) a chat."""

    def __init__(self, delay: float = 0.01) -> None:
        self.delay = delay
        self.said: list[str] = []  # every reply in full, for tests

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        fire = current_fire()
        if fire is not None and fire.slot is not None:
            why = f"for the {fire.routine} slot {fire.slot:%Y-%m-%d %H:%M}Z"
        elif fire is not None:
            why = f"({fire.kind})"
        else:
            why = "(chat)"
        reply = f"[{session}] {why}: {text}"
        for word in reply.split(" "):
            await trio.sleep(self.delay)
            yield TextDelta(word + " ")
        self.said.append(reply)
        yield Completed()


async def _chat_reply(agent: FakeAgent, session: str, text: str) -> AsyncIterator[bytes]:
    async for event in agent.invoke(session, text):
        if isinstance(event, TextDelta):
            yield event.text.encode()


def build_app(scheduler: Scheduler, agent: FakeAgent, token: str | None = None) -> Starlette:
    """The host's web application: its own routes, and the scheduler mounted under a prefix."""

    async def chat(request: Request) -> StreamingResponse:
        text = (await request.body()).decode("utf-8", "replace")[:4096]
        session = request.query_params.get("session", "chat:web")
        return StreamingResponse(_chat_reply(agent, session, text), media_type="text/plain")

    return Starlette(
        routes=[
            Route("/chat", chat, methods=["POST"]),
            Mount("/scheduler", app=make_app(scheduler, token=token)),
        ]
    )


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--state", default=".state", help="state directory or postgresql:// URL")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--grace", type=float, default=None, help="seconds (default: 10)")
    args = parser.parse_args(argv)
    token = os.environ.get("TRIO_ROUTINES_TOKEN") or None
    agent = FakeAgent()
    async with open_store(args.state) as store:
        scheduler = Scheduler(agent=agent, store=store, routines=ROUTINES)
        config = Config()
        config.bind = [f"{args.host}:{args.port}"]
        config.accesslog = None
        config.graceful_timeout = scheduler.default_grace
        app: Any = build_app(scheduler, agent, token)
        async with trio.open_nursery() as nursery:
            # The scheduler and the signals; returns once stopped and settled.
            await nursery.start(partial(serve, scheduler, grace=args.grace))
            binds = await nursery.start(
                partial(serve_asgi, app, config, shutdown_trigger=scheduler.wait_drained)
            )
            print(f"listening on {binds[0]}", flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    trio.run(main)
