"""Pins of the test tools embedders use (``scripts/mutation.py testingtools``): the wall clock
that moves with Trio's and jumps on its own, and the scripted agent's cues (complete, fail,
busy, hang, raise; their durations and usage), their queues per session, and its record of
every turn it was asked for.

Written for the mutation run of ``trio_routines/testing/scripted.py`` and ``clock.py``
(docs/mutation.md). On a MockClock: a duration is read off Trio's clock, never waited for.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from trio_routines.agent import SESSION_BUSY, Completed, Event, Failed, TextDelta, Usage
from trio_routines.context import FireContext, firing
from trio_routines.testing import (
    Busy,
    Complete,
    Fail,
    Hang,
    Raise,
    ScriptedAgent,
    Turn,
    WallClock,
)

T0 = datetime(2026, 7, 7, 10, 0, tzinfo=UTC)


# -- the wall clock ------------------------------------------------------------------------------


def test_a_wall_clock_refuses_a_naive_start_and_keeps_an_aware_one_in_utc() -> None:
    with pytest.raises(ValueError, match=r"^start must be an aware datetime$"):
        WallClock(datetime(2026, 7, 7, 10, 0))
    berlin = WallClock(datetime(2026, 7, 7, 12, 0, tzinfo=timezone(timedelta(hours=2))))
    assert berlin.start == T0
    assert berlin.start.tzinfo is UTC


async def test_a_wall_clock_refuses_to_be_set_to_a_naive_instant(autojump_clock: Any) -> None:
    # It was read as the machine's local time: 12:00 became 16:00Z in New York.
    wall = WallClock(T0)
    with pytest.raises(ValueError, match=r"^when must be an aware datetime$"):
        wall.set(datetime(2026, 7, 7, 12, 0))
    assert wall() == T0
    wall.set(datetime(2026, 7, 7, 12, 0, tzinfo=timezone(timedelta(hours=2))))
    assert wall() == T0


async def test_a_wall_clock_moves_with_trios_from_its_first_reading_and_jumps_on_its_own(
    mock_clock: MockClock,
) -> None:
    mock_clock.jump(100)  # before the first reading: not counted
    wall = WallClock(T0)
    assert wall() == T0
    mock_clock.jump(90)
    assert wall() == T0 + timedelta(seconds=90)
    wall.jump(timedelta(hours=-1))
    assert wall() == T0 + timedelta(seconds=90) - timedelta(hours=1)
    mock_clock.jump(10)
    assert wall() == T0 + timedelta(seconds=100) - timedelta(hours=1)
    wall.set(datetime(2026, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=1))))
    assert wall() == datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
    mock_clock.jump(5)
    assert wall() == datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)


# -- the scripted agent ---------------------------------------------------------------------------


async def events(agent: ScriptedAgent, session: str = "s", text: str = "go") -> list[Event]:
    return [event async for event in agent.invoke(session, text)]


async def test_by_default_a_turn_replies_ok_at_once_and_is_recorded_finished(
    mock_clock: MockClock,
) -> None:
    agent = ScriptedAgent()
    mock_clock.jump(7)
    assert await events(agent, "main", "hello") == [TextDelta("ok"), Completed()]
    assert agent.turns == [Turn("main", "hello", 7.0, None, None)]
    assert agent.finished == agent.turns
    assert trio.current_time() == 7.0
    assert agent.sessions() == ["main"]


async def test_a_turn_records_its_wall_time_its_fire_and_tells_on_turn_first(
    mock_clock: MockClock,
) -> None:
    seen: list[tuple[Turn, int]] = []
    agent = ScriptedAgent(wall=lambda: T0, on_turn=lambda turn: seen.append((turn, len(seen))))
    context = FireContext("routine", "main", routine="r", slot=T0)
    with firing(context):
        await events(agent, "main", "tick")
    (turn,) = agent.turns
    assert turn == Turn("main", "tick", 0.0, T0, context)
    assert seen == [(turn, 0)]


async def test_complete_and_fail_take_their_duration_report_usage_first_then_end(
    autojump_clock: MockClock,
) -> None:
    usage = Usage(input_tokens=3)
    agent = ScriptedAgent(Complete(duration=5, reply="done", usage=usage))
    assert await events(agent) == [usage, TextDelta("done"), Completed()]
    assert trio.current_time() == 5
    agent.default = Fail("broke", "E1", duration=2, usage=usage)
    assert await events(agent) == [usage, Failed("broke", "E1")]
    assert trio.current_time() == 7
    agent.default = Fail()
    assert await events(agent) == [Failed("it failed", None)]
    assert trio.current_time() == 7
    assert len(agent.finished) == 3


def test_busy_is_a_failure_with_the_busy_code() -> None:
    assert Busy() == Fail("the session already has a turn in flight", SESSION_BUSY)


async def test_a_hanging_turn_ends_only_when_cancelled_and_is_never_finished(
    autojump_clock: MockClock,
) -> None:
    agent = ScriptedAgent(Hang())
    with trio.move_on_after(3600) as scope:
        await events(agent)
    assert scope.cancelled_caught
    assert len(agent.turns) == 1
    assert agent.finished == []


async def test_a_raising_turn_raises_after_its_duration_and_is_never_finished(
    autojump_clock: MockClock,
) -> None:
    class Oops(Exception):
        pass

    agent = ScriptedAgent(Raise(Oops("no"), duration=4))
    with pytest.raises(Oops) as caught:
        await events(agent)
    assert str(caught.value) == "no"
    assert trio.current_time() == 4
    assert len(agent.turns) == 1
    assert agent.finished == []


async def test_cues_are_taken_in_order_a_sessions_own_before_anyones(
    mock_clock: MockClock,
) -> None:
    agent = ScriptedAgent(Complete(reply="default"))
    agent.script(Complete(reply="any-1"), Complete(reply="any-2"))
    agent.script(Complete(reply="a-1"), session="a")
    agent.script(Complete(reply="a-2"), session="a")
    replies = []
    for session in ("a", "b", "a", "a", "b"):
        (reply, _) = await events(agent, session)
        assert isinstance(reply, TextDelta)
        replies.append(reply.text)
    assert replies == ["a-1", "any-1", "a-2", "any-2", "default"]
    assert agent.sessions() == ["a", "b", "a", "a", "b"]
