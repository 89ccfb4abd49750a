"""An agent that schedules its own next turn through the wake-up tools.

The "model" here is a stand-in that decides by rule (no network): on the routine's turn it
asks to be woken in 30 minutes and sets a weekly reminder; on the woken turn it lists what is
pending and cancels the reminder. A real agent passes ``definitions(...)`` to its model and
``call_tool`` each call the model makes, exactly as ``ModelAgent.invoke`` does below.

Run it: ``python examples/self_scheduling.py`` -- virtual time (Trio's ``MockClock``), so the
half hour passes at once; it prints every tool call and its answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import trio
import trio.testing

from trio_routines import Completed, Event, Routine, Scheduler, current_fire
from trio_routines.testing import MemoryStore, WallClock
from trio_routines.tools import call_tool, definitions


def stand_in_model(text: str, tools: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """The tool calls a model might make for ``text`` (``tools`` is what it was offered)."""
    assert {tool["function"]["name"] for tool in tools} >= {"schedule_wakeup", "cancel_wakeup"}
    if "self-scheduled turn" in text:  # how a woken turn's text begins
        return [("list_wakeups", {}), ("cancel_wakeup", "FIRST RECURRING")]
    return [
        ("schedule_wakeup", {"prompt": "Check whether the deploy went through.", "in": "30m"}),
        ("schedule_wakeup", {"prompt": "Weekly summary.", "cron": "0 9 * * 1", "tz": "UTC"}),
    ]


class ModelAgent:
    def __init__(self) -> None:
        self.scheduler: Scheduler | None = None
        self.tools: list[dict[str, Any]] = []
        self.recurring: list[str] = []

    def serve(self, scheduler: Scheduler) -> None:
        """Use ``scheduler``'s tools: their descriptions tell the model its limits."""
        self.scheduler = scheduler
        self.tools = definitions("openai", scheduler=scheduler)

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        fire = current_fire()
        assert fire is not None
        assert self.scheduler is not None
        print(f"\n[{fire.kind} turn of {session}] {text}")
        for name, arguments in stand_in_model(text, self.tools):
            if arguments == "FIRST RECURRING":  # the model remembers the id it was given
                arguments = {"id": self.recurring[0]}
            answer = await call_tool(self.scheduler, fire.session, name, arguments)
            print(f"  {name}({arguments}) -> {answer}")
            if answer.startswith("Scheduled recurring") or "recurring (cron" in answer:
                self.recurring.append(answer.split(" ")[1].rstrip(":"))
        yield Completed()


async def main() -> None:
    agent = ModelAgent()
    deploy = Routine(name="deploy-check", prompt="Look at today's deploy.", cron="0 10 * * *")
    scheduler = Scheduler(
        agent=agent,
        store=MemoryStore(),  # a DirectoryStore or PostgresStore in a real host
        routines=[deploy],
        now=WallClock(datetime(2026, 7, 7, 9, 59, tzinfo=UTC)),
    )
    agent.serve(scheduler)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(60 * 60)  # an hour of virtual time: the routine, then the wake-up
        scheduler.stop()
    print("\npending at the end:", [w.prompt for w in await scheduler.list_wakeups()])


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
