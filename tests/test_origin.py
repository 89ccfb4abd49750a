"""Who asked for a wake-up: the origin each gets where it is added (virtual time), and its
record's invariants."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trio
import trio.testing

from trio_routines import Completed, Event, FireContext, TextDelta, current_fire
from trio_routines.context import firing
from trio_routines.errors import InvalidWakeup
from trio_routines.records import MAX_DEPTH, Origin, OriginKind, Wakeup
from trio_routines.routines import Routine
from trio_routines.scheduler import Scheduler
from trio_routines.store import Store
from trio_routines.testing import MemoryStore, WallClock
from trio_routines.wakeups import asked_by, origin_line

START = datetime(2026, 7, 7, 8, 59, 30, tzinfo=UTC)
SLOT = datetime(2026, 7, 7, 9, tzinfo=UTC)
DAILY = Routine(name="daily", prompt="morning brief", cron="0 9 * * *")


class Chainer:
    """An agent whose turns each add a wake-up of their session, two minutes on, until it
    has added ``links``; notes what current_fire() said in each turn, and when."""

    def __init__(self, wall: WallClock, links: int) -> None:
        self.wall = wall
        self.links = links
        self.scheduler: Scheduler | None = None
        self.seen: list[tuple[FireContext | None, datetime]] = []
        self.added: list[Wakeup] = []
        self.done = trio.Event()

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        assert self.scheduler is not None
        self.seen.append((current_fire(), self.wall()))
        if len(self.added) < self.links:
            self.added.append(await self.scheduler.add_wakeup(session, "again", delay="2m"))
        else:
            self.done.set()
        yield TextDelta("ok")
        yield Completed()


async def test_a_chain_of_turns_records_who_asked_and_how_deep(
    autojump_clock: trio.testing.MockClock,
) -> None:
    wall = WallClock(START)
    agent = Chainer(wall, links=2)
    store = MemoryStore()
    scheduler = Scheduler(agent=agent, store=store, routines=[DAILY], now=wall, poll_interval=10)
    agent.scheduler = scheduler
    outside = await scheduler.add_wakeup("chat-1", "from the host", delay="1d")
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await agent.done.wait()
        scheduler.stop()
    assert outside.origin == Origin(kind=OriginKind.API)
    first, second = agent.added
    # The routine's turn: its routine and slot, depth 1.
    assert first.origin == Origin(kind=OriginKind.ROUTINE, routine="daily", slot=SLOT, depth=1)
    # That wake-up's turn adds the next: its parent's id, one deeper.
    assert second.origin == Origin(kind=OriginKind.WAKEUP, parent=first.id, depth=2)
    (routine_turn, at0), (first_turn, at1), (second_turn, at2) = agent.seen
    assert (at0, at1, at2) == (SLOT, SLOT + timedelta(minutes=2), SLOT + timedelta(minutes=4))
    assert routine_turn is not None
    assert (routine_turn.origin, routine_turn.depth) == (None, 0)
    # Each woken turn knows who asked for its wake-up, and how deep it is.
    assert first_turn == FireContext(
        "wakeup",
        "routine:daily",
        wakeup=first.id,
        replica=scheduler.replica,
        origin=first.origin,
    )
    assert first_turn.depth == 1
    assert second_turn is not None
    assert (second_turn.wakeup, second_turn.origin, second_turn.depth) == (
        second.id,
        second.origin,
        2,
    )
    assert [w.origin for w in await scheduler.list_wakeups()] == [outside.origin]


async def test_an_on_demand_run_asks_as_its_routine_without_a_slot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    wall = WallClock(START)
    agent = Chainer(wall, links=1)
    scheduler = Scheduler(agent=agent, store=MemoryStore(), routines=[DAILY], now=wall)
    agent.scheduler = scheduler
    await scheduler.run_now("daily")
    (added,) = agent.added
    assert added.origin == Origin(kind=OriginKind.ROUTINE, routine="daily", depth=1)
    assert origin_line(added.origin) == "routine daily (run)"


def test_asked_by_each_kind_of_turn() -> None:
    assert asked_by(None) == Origin(kind=OriginKind.API)
    assert asked_by(None, OriginKind.HTTP) == Origin(kind=OriginKind.HTTP)
    routine = FireContext("routine", "s", routine="r", slot=SLOT)
    assert asked_by(routine) == Origin(kind="routine", routine="r", slot=SLOT, depth=1)
    unknown = FireContext("wakeup", "s", wakeup="w-old")  # stored before origins: depth 0
    assert asked_by(unknown) == Origin(kind="wakeup", parent="w-old", depth=1)
    deep = FireContext(
        "wakeup", "s", wakeup="w", origin=Origin(kind="wakeup", parent="p", depth=41)
    )
    assert asked_by(deep).depth == 42
    deepest = FireContext(
        "wakeup", "s", wakeup="w", origin=Origin(kind="wakeup", parent="p", depth=MAX_DEPTH)
    )
    assert asked_by(deepest).depth == MAX_DEPTH  # stays at the bound, never refused
    with firing(routine):
        assert asked_by(current_fire()).routine == "r"


def test_origin_lines() -> None:
    assert origin_line(None) == "unknown"
    assert origin_line(Origin(kind="http")) == "http"
    assert origin_line(Origin(kind="cli")) == "cli"
    assert origin_line(Origin(kind="api")) == "api"
    assert (
        origin_line(Origin(kind="routine", routine="daily", slot=SLOT, depth=1))
        == "routine daily at 2026-07-07T09:00:00.000Z"
    )
    assert origin_line(Origin(kind="wakeup", parent="abc", depth=3)) == "wake-up abc (depth 3)"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "robot"}, "robot"),
        ({"kind": "routine", "depth": 1}, "a routine is named exactly"),
        ({"kind": "http", "routine": "r"}, "a routine is named exactly"),
        ({"kind": "wakeup", "depth": 1}, "a parent wake-up is named exactly"),
        ({"kind": "cli", "parent": "p"}, "a parent wake-up is named exactly"),
        ({"kind": "api", "slot": SLOT}, "only a routine's origin has a slot"),
        ({"kind": "routine", "routine": "r", "depth": 2}, "depth 1"),
        ({"kind": "wakeup", "parent": "p", "depth": 0}, "depth 1 or more"),
        ({"kind": "http", "depth": 1}, "any other depth 0"),
        ({"kind": "wakeup", "parent": "p", "depth": -1}, "depth must be 0 to"),
        ({"kind": "wakeup", "parent": "p", "depth": MAX_DEPTH + 1}, "depth must be 0 to"),
        ({"kind": "wakeup", "parent": "p", "depth": True}, "depth must be 0 to"),
        ({"kind": "wakeup", "parent": "", "depth": 1}, "parent must be storable"),
        ({"kind": "wakeup", "parent": "a\x00b", "depth": 1}, "parent must be storable"),
        ({"kind": "routine", "routine": "a\udcffb", "depth": 1}, "routine must be storable"),
    ],
)
def test_an_origin_refuses_what_cannot_be(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Origin(**fields)


def test_only_a_wakeups_turn_has_an_origin() -> None:
    with pytest.raises(ValueError, match="an origin is given only for a wake-up's turn"):
        FireContext("run", "s", routine="r", origin=Origin(kind="http"))


class SelfScheduling:
    """An agent whose turn schedules, lists and tries to cancel a wake-up of its session
    through the scheduler's API, and notes what each call answered."""

    def __init__(self) -> None:
        self.scheduler: Scheduler | None = None
        self.answers: list[Any] = []

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        assert self.scheduler is not None
        added = await self.scheduler.add_wakeup(session, "look again", delay="10m")
        self.answers = [
            current_fire(),
            added,
            await self.scheduler.list_wakeups(session),
            await self.scheduler.list_wakeups("another session"),
            await self.scheduler.remove_wakeup(added.id, "another session"),
        ]
        yield TextDelta("ok")
        yield Completed()


async def test_every_store_an_agent_schedules_lists_and_cancels_its_own_wakeup(
    store: Store,
) -> None:
    agent = SelfScheduling()
    scheduler = Scheduler(agent=agent, store=store, routines=[DAILY])
    agent.scheduler = scheduler
    outside = await scheduler.add_wakeup("chat-1", "from the host", delay="1d")
    with pytest.raises(InvalidWakeup, match="too soon"):
        await scheduler.add_wakeup("chat-1", "now", delay="10s")
    await scheduler.run_now("daily")
    fire, added, mine, others, removed = agent.answers
    assert fire is not None
    assert fire.session == added.session == "routine:daily"
    # Who asked: the routine's turn (an on-demand run: no slot), one deep in the chain.
    assert added.origin == Origin(kind=OriginKind.ROUTINE, routine="daily", depth=1)
    assert outside.origin == Origin(kind=OriginKind.API)
    assert [w.id for w in mine] == [added.id]
    assert others == []
    assert removed is False  # another session's wake-up is not ours to cancel
    # The store gives back what was stored, origins included, in stored order.
    listed = await scheduler.list_wakeups()
    assert [(w.id, w.origin) for w in listed] == [
        (outside.id, outside.origin),
        (added.id, added.origin),
    ]
    assert await scheduler.remove_wakeup(added.id, "routine:daily") is True
    assert await scheduler.remove_wakeup(added.id, "routine:daily") is False
    assert [w.id for w in await scheduler.list_wakeups()] == [outside.id]
