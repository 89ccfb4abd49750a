"""Wake-up tools for models: definitions, and an agent that schedules, lists and cancels its
own wake-ups through the Scheduler under virtual time."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import trio
from scheduler_rig import T0

from trio_routines import Completed, Routine, Scheduler, current_fire
from trio_routines.agent import Event
from trio_routines.errors import InvalidWakeup, StateFault
from trio_routines.testing import MemoryStore, ScriptedAgent, WallClock
from trio_routines.tools import CANCEL, LIST, SCHEDULE, call_tool, definitions, limits_text
from trio_routines.wakelimits import DEFAULT_LIMITS, WakeLimits


def test_definitions_come_in_the_shapes_model_apis_take() -> None:
    plain = definitions()
    assert [tool["name"] for tool in plain] == [SCHEDULE, LIST, CANCEL]
    assert plain[0]["parameters"]["required"] == ["prompt"]
    assert plain[2]["parameters"]["required"] == ["id"]
    openai = definitions("openai")
    assert openai[0] == {"type": "function", "function": plain[0]}
    anthropic = definitions("anthropic")
    assert anthropic[1] == {
        "name": LIST,
        "description": plain[1]["description"],
        "input_schema": plain[1]["parameters"],
    }
    json.dumps([plain, openai, anthropic])  # plain JSON, as the APIs take it
    plain[0]["parameters"]["required"].append("x")  # a copy each call
    assert definitions()[0]["parameters"]["required"] == ["prompt"]
    with pytest.raises(ValueError, match="unknown style"):
        definitions("nope")  # type: ignore[arg-type]


def test_definitions_tell_the_limits_in_force() -> None:
    def told(**given: Any) -> str:
        (schedule, _, _) = definitions("anthropic", **given)
        description: str = schedule["description"]
        return description

    default = told()
    assert "at most 12 self-scheduled turns per session in any hour" in default
    assert "chains of wake-ups set by wake-ups at most 16 deep" in default
    assert "by default (and at the latest) 30 days after it was scheduled" in default
    assert "at most 20 pending per session" in default
    assert default == told(limits=DEFAULT_LIMITS) == told(scheduler=object())
    strict = WakeLimits(rate=3, depth=2, lifetime=timedelta(hours=12))
    store = MemoryStore()
    scheduler = Scheduler(agent=ScriptedAgent(), store=store, routines=[], wake_limits=strict)
    for text in (told(limits=strict), told(scheduler=scheduler)):
        assert "at most 3 self-scheduled turns per session in any hour" in text
        assert "chains of wake-ups set by wake-ups at most 2 deep" in text
        assert "by default (and at the latest) 12 hours after it was scheduled" in text
        assert "12 self-scheduled" not in text
        assert "16 deep" not in text
        assert "30 days" not in text
    free = told(limits=WakeLimits(rate=None, depth=None, lifetime=timedelta(days=1)))
    assert "no limit on self-scheduled turns per hour" in free
    assert "no limit on chains of wake-ups set by wake-ups" in free
    assert "1 day after" in free
    assert "90 minutes after" in told(limits=WakeLimits(lifetime=timedelta(minutes=90)))
    with pytest.raises(ValueError, match="not both"):
        definitions(scheduler=scheduler, limits=strict)


async def test_a_refusal_quotes_the_limits_in_force() -> None:
    strict = WakeLimits(rate=3, depth=2, lifetime=timedelta(hours=12))
    scheduler = Scheduler(
        agent=ScriptedAgent(), store=MemoryStore(), now=WallClock(T0), wake_limits=strict
    )
    text = await call_tool(scheduler, "chat:1", SCHEDULE, {"prompt": "x", "in": 5})
    assert "refused — too soon" in text
    assert f"(limits: {limits_text(strict)})." in text
    assert "at most 3 self-scheduled turns" in text


class SelfScheduling:
    """A routine turn schedules a wake-up, lists it and schedules a recurring one; the woken
    turn cancels the recurring one. Every tool answer is kept."""

    def __init__(self) -> None:
        self.scheduler: Scheduler | None = None
        self.answers: list[str] = []
        self.turns: list[tuple[str, str, str]] = []

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        fire = current_fire()
        assert fire is not None
        assert self.scheduler is not None
        self.turns.append((fire.kind, session, text))

        async def use(name: str, arguments: Any) -> str:
            assert self.scheduler is not None
            answer = await call_tool(self.scheduler, fire.session, name, arguments)
            self.answers.append(answer)
            return answer

        if fire.kind == "routine":
            await use(SCHEDULE, '{"prompt": "look at the build again", "in": "30m"}')
            await use(SCHEDULE, {"prompt": "weekly report", "cron": "0 9 * * 1", "tz": "UTC"})
            await use(LIST, {})
        elif text.endswith("] look at the build again"):  # a wake-up says what woke it
            listed = await use(LIST, None)
            weekly = next(line for line in listed.splitlines() if "weekly report" in line)
            await use(CANCEL, {"id": weekly.split(":")[0].removeprefix("- ")})
            await use(LIST, "")
        yield Completed()


async def test_an_agent_schedules_lists_and_cancels_its_own_wakeups(autojump_clock: Any) -> None:
    store = MemoryStore()
    agent = SelfScheduling()
    routine = Routine(name="build", prompt="check the build", cron="45 10 * * *")
    scheduler = Scheduler(
        agent=agent, store=store, routines=[routine], now=WallClock(T0), poll_interval=30
    )
    agent.scheduler = scheduler
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(timedelta(hours=1).total_seconds())
        scheduler.stop(0)
    assert [kind for kind, _, _ in agent.turns] == ["routine", "wakeup"]
    assert agent.turns[0][2] == "check the build"
    assert agent.turns[1][2].endswith("] look at the build again")
    assert {session for _, session, _ in agent.turns} == {"routine:build"}
    scheduled, recurring, listed, relisted, cancelled, empty = agent.answers
    assert scheduled.startswith("Scheduled ")
    assert "2026-07-07T11:15:00.000Z" in scheduled
    assert f"{CANCEL}(id=" in scheduled
    # The default lifetime: 30 days from the turn that scheduled it (10:45).
    assert 'recurring (cron "0 9 * * 1" UTC until 2026-08-06T10:45:00.000Z)' in recurring
    assert listed.startswith("2 pending (at most 20):")
    assert "look at the build again" in listed
    assert "weekly report" in listed
    assert relisted.startswith("1 pending")
    assert "weekly report" in relisted
    assert cancelled.startswith("Cancelled wake-up ")
    assert empty == "No wake-ups pending for this conversation."
    assert await store.list_wakeups() == []


async def test_every_wrong_call_is_answered_and_changes_nothing() -> None:
    store = MemoryStore()
    scheduler = Scheduler(agent=ScriptedAgent(), store=store, routines=[], now=WallClock(T0))

    async def answer(name: str, arguments: Any) -> str:
        return await call_tool(scheduler, "chat:1", name, arguments)

    cases = [
        (SCHEDULE, "{not json", "not valid JSON"),
        (SCHEDULE, "[" * 100_000, "not valid JSON"),  # nested past the parser's recursion
        (SCHEDULE, {"prompt": "x" * 65_537, "in": "30m"}, "at most 65,536 characters"),
        (SCHEDULE, "[1]", "must be a JSON object"),
        (SCHEDULE, {"in": "30m"}, "give `prompt`"),
        (SCHEDULE, {"prompt": "x"}, "exactly one of `in`"),
        (SCHEDULE, {"prompt": "x", "in": "30m", "cron": "* * * * *"}, "exactly one of `in`"),
        (SCHEDULE, {"prompt": "x", "in": "soon"}, "could not read `in`"),
        (SCHEDULE, {"prompt": "x", "in": 5}, "refused — too soon"),
        (SCHEDULE, {"prompt": "x", "in": 1e300}, "refused"),
        (SCHEDULE, {"prompt": "x", "in": "30m", "tz": "UTC"}, "`tz` goes with `cron` only"),
        (SCHEDULE, {"prompt": "x", "cron": "* * * * *"}, "at most every 10 minutes"),
        (SCHEDULE, {"prompt": "x", "cron": "0 9 * * *", "tz": "Mars/Base"}, "refused"),
        (SCHEDULE, {"prompt": "x", "cron": 7}, "`cron` must be"),
        (SCHEDULE, {"prompt": "x", "in": "30m", "when": 1}, "unknown argument(s) when"),
        (LIST, {"session": "other"}, "unknown argument(s) session"),
        (CANCEL, {}, "give `id`"),
        (CANCEL, {"id": "nope"}, "no pending wake-up"),
        ("sleep", {}, "unknown tool 'sleep'"),
        ("wake", {}, "schedule_wakeup: give `prompt`"),  # the reference's names: ours
        ("unwake", {"id": "nope"}, "no pending wake-up"),
    ]
    for name, arguments, expected in cases:
        text = await answer(name, arguments)
        assert expected in text, (name, arguments, text)
    assert await store.list_wakeups() == []
    # Another session's wake-up can be neither listed nor cancelled from this one.
    theirs = await scheduler.add_wakeup("chat:2", "theirs", delay=3600)
    assert await answer(LIST, {}) == "No wake-ups pending for this conversation."
    assert "no pending wake-up" in await answer(CANCEL, {"id": theirs.id})
    assert "no pending wake-up" in await answer("unwake", {"id": theirs.id})
    assert [w.id for w in await store.list_wakeups()] == [theirs.id]
    # A host that has no session to give (a turn of no fire) gets an error, not every
    # session's wake-ups.
    for none in (None, ""):
        with pytest.raises(ValueError, match="call_tool needs the session whose turn it is"):
            await call_tool(scheduler, none, LIST, {})  # type: ignore[arg-type]
        with pytest.raises(InvalidWakeup, match="remove_wakeup needs the session it is of"):
            await scheduler.remove_wakeup(theirs.id, none)  # type: ignore[arg-type]
    assert [w.id for w in await store.list_wakeups()] == [theirs.id]
    # The store not answering is ours to say, and the model is told to look before asking
    # again: an add cut off by its deadline may still land.
    store.fail("add_wakeup", StateFault("down"), times=1)
    text = await answer(SCHEDULE, {"prompt": "x", "in": "30m"})
    assert text == (
        "schedule_wakeup: the scheduler's store did not confirm this just now, so it may or "
        "may not have been added; call list_wakeups before asking again."
    )
    assert len(await store.list_wakeups()) == 1


def test_the_example_agent_schedules_and_cancels_through_the_tools(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import importlib.util
    from pathlib import Path

    import trio.testing

    path = Path(__file__).parent.parent / "examples" / "self_scheduling.py"
    spec = importlib.util.spec_from_file_location("self_scheduling", path)
    assert spec is not None
    assert spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    trio.run(example.main, clock=trio.testing.MockClock(autojump_threshold=0))
    out = capsys.readouterr().out
    assert out.count("schedule_wakeup(") == 2
    assert "[wakeup turn of routine:deploy-check]" in out
    assert "Cancelled wake-up" in out
    assert out.rstrip().endswith("pending at the end: []")
