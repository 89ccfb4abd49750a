"""current_fire(): why a turn runs, as the runtime tells it for each kind of turn (virtual time)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

import trio_routines
from trio_routines import Completed, Event, FireContext, TextDelta, current_fire
from trio_routines.context import cron_context, firing
from trio_routines.records import Outcome
from trio_routines.routines import Routine
from trio_routines.scheduler import Scheduler
from trio_routines.testing import MemoryStore, WallClock
from trio_routines.wakeups import WakeupRequest

START = datetime(2026, 7, 7, 8, 59, 30, tzinfo=UTC)
DAILY = Routine(name="daily", prompt="morning brief", cron="0 9 * * *")
SLOT = datetime(2026, 7, 7, 9, tzinfo=UTC)


class Recorder:
    """An agent that notes what current_fire() says inside each turn, and when."""

    def __init__(self, wall: WallClock) -> None:
        self.wall = wall
        self.seen: list[tuple[FireContext | None, datetime]] = []
        self.turned = trio.Event()

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        self.seen.append((current_fire(), self.wall()))
        await trio.sleep(1)  # the context holds across checkpoints of the turn
        assert current_fire() is self.seen[-1][0]
        self.turned.set()
        yield TextDelta("ok")
        yield Completed()


async def test_a_cron_fire_knows_its_routine_and_slot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    wall = WallClock(START)
    agent = Recorder(wall)
    scheduler = Scheduler(agent=agent, store=MemoryStore(), routines=[DAILY], now=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await agent.turned.wait()
        scheduler.stop()
    slot = datetime(2026, 7, 7, 9, tzinfo=UTC)
    ((fire, at),) = agent.seen
    assert fire == FireContext(
        "routine", "routine:daily", routine="daily", slot=slot, replica=scheduler.replica
    )
    assert at == slot
    assert fire.idempotency_key == "daily/2026-07-07T09-00-00-000Z"
    assert current_fire() is None


async def test_an_external_fire_of_a_past_slot_names_that_slot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    wall = WallClock(START + timedelta(days=1))
    agent = Recorder(wall)
    scheduler = Scheduler(agent=agent, store=MemoryStore(), routines=[DAILY], now=wall)
    slot = datetime(2026, 7, 7, 9, tzinfo=UTC)
    result = await scheduler.fire("daily", slot)
    assert result.outcome is Outcome.COMPLETED
    assert agent.seen[0][0] == FireContext(
        "routine", "routine:daily", routine="daily", slot=slot, replica=scheduler.replica
    )


async def test_a_wakeup_knows_its_id(autojump_clock: trio.testing.MockClock) -> None:
    wall = WallClock(START)
    agent = Recorder(wall)
    store = MemoryStore()
    wakeup = await store.add_wakeup(
        WakeupRequest(
            session="chat-7", prompt="check the oven", fire_at=START + timedelta(minutes=5)
        ),
        START,
    )
    scheduler = Scheduler(agent=agent, store=store, now=wall, poll_interval=10)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await agent.turned.wait()
        scheduler.stop()
    ((fire, at),) = agent.seen
    assert fire == FireContext("wakeup", "chat-7", wakeup=wakeup.id, replica=scheduler.replica)
    assert fire.idempotency_key is None
    assert at == START + timedelta(minutes=5)  # polled every 10 s from 08:59:30


async def test_runs_on_demand_say_run(autojump_clock: trio.testing.MockClock) -> None:
    wall = WallClock(START)
    agent = Recorder(wall)
    scheduler = Scheduler(agent=agent, store=MemoryStore(), routines=[DAILY], now=wall)
    await scheduler.run_now("daily")
    run = FireContext("run", "routine:daily", routine="daily", replica=scheduler.replica)
    assert agent.seen[0][0] == run
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        agent.turned = trio.Event()
        assert await scheduler.start_run("daily")
        await agent.turned.wait()
        scheduler.stop()
    assert agent.seen[1][0] == run
    assert len(agent.seen) == 2  # stopped before 09:00: no cron fire


async def test_outside_a_turn_there_is_no_fire() -> None:
    assert trio_routines.current_fire() is None
    why = FireContext("run", "s", routine="r")
    with firing(why):
        assert current_fire() is why
        with firing(FireContext("wakeup", "s", wakeup="w")):
            assert current_fire() != why
        assert current_fire() is why
    assert current_fire() is None


async def test_concurrent_turns_never_see_each_others_fire() -> None:
    seen: dict[str, FireContext | None] = {}

    async def turn(why: FireContext) -> None:
        with firing(why):
            await trio.sleep(0.01)
            seen[why.session] = current_fire()

    one = FireContext("run", "one", routine="one")
    two = FireContext("wakeup", "two", wakeup="w-2")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(turn, one)
        nursery.start_soon(turn, two)
    assert seen == {"one": one, "two": two}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"kind": "cron", "session": "s", "routine": "r"}, "kind must be one of"),
        ({"kind": "routine", "session": "s", "routine": "r"}, "a slot is given exactly"),
        (
            {
                "kind": "run",
                "session": "s",
                "routine": "r",
                "slot": datetime(2026, 1, 1, tzinfo=UTC),
            },
            "a slot is given exactly",
        ),
        ({"kind": "wakeup", "session": "s"}, "a wake-up id is given exactly"),
        ({"kind": "run", "session": "s", "wakeup": "w", "routine": "r"}, "a wake-up id"),
        ({"kind": "run", "session": "s"}, "a run turn names its routine"),
        (
            {"kind": "routine", "session": "s", "routine": "r", "slot": datetime(2026, 1, 1)},
            "must be an aware datetime",
        ),
    ],
)
def test_a_fire_context_refuses_what_cannot_be(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FireContext(**arguments)


async def test_the_scripted_agent_keeps_each_turns_fire(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from trio_routines.testing import ScriptedAgent

    wall = WallClock(START)
    agent = ScriptedAgent(wall=wall)
    scheduler = Scheduler(agent=agent, store=MemoryStore(), routines=[DAILY], now=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        while not agent.finished:  # noqa: ASYNC110 — virtual time jumps to the fire
            await trio.sleep(1)
        scheduler.stop()
    (turn,) = agent.turns
    assert turn.fire == FireContext(
        "routine",
        "routine:daily",
        routine="daily",
        slot=datetime(2026, 7, 7, 9, tzinfo=UTC),
        replica=scheduler.replica,
    )
    assert turn.wall == turn.fire.slot


@given(st.text(min_size=1))
def test_the_idempotency_key_is_a_header_value_that_gives_the_name_back(name: str) -> None:
    fire = FireContext("routine", f"routine:{name}", routine=name, slot=SLOT)
    key = fire.idempotency_key
    assert key is not None
    assert all("!" <= char <= "~" for char in key)  # visible ASCII: any HTTP header takes it
    encoded, _, slot = key.rpartition("/")
    assert slot == "2026-07-07T09-00-00-000Z"
    assert unquote(encoded, errors="strict") == name


@pytest.mark.parametrize(
    ("name", "encoded"),
    [
        ("daily", "daily"),  # visible ASCII: as it was
        ("report-2+(x)", "report-2+(x)"),
        ("café", "caf%C3%A9"),
        ("日報", "%E6%97%A5%E5%A0%B1"),
        ("my report", "my%20report"),
        ("100%", "100%25"),  # "%" itself, so "caf%C3%A9" the name is not "café"
        ("x\r\nEvil: 1", "x%0D%0AEvil:%201"),
    ],
)
def test_the_idempotency_key_encodes_only_what_a_header_cannot_carry(
    name: str, encoded: str
) -> None:
    fire = FireContext("routine", f"routine:{name}", routine=name, slot=SLOT)
    assert fire.idempotency_key == f"{encoded}/2026-07-07T09-00-00-000Z"


def test_a_cron_fires_context_built_unchecked_is_the_checked_one() -> None:
    slot = datetime(2026, 7, 7, 9, tzinfo=UTC)
    fast = cron_context("routine:daily", "daily", slot, "r1")
    checked = FireContext("routine", "routine:daily", routine="daily", slot=slot, replica="r1")
    # Every field is set (one added to FireContext and not to cron_context fails here).
    assert attrs.asdict(fast, recurse=False) == attrs.asdict(checked, recurse=False)
    assert fast == checked
    assert hash(fast) == hash(checked)
    assert (fast.idempotency_key, fast.depth) == ("daily/2026-07-07T09-00-00-000Z", 0)
    assert cron_context("s", "d", slot, None).replica is None
