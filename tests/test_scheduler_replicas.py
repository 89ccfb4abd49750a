"""Replicas sharing one store, under virtual time: busy is store-wide, live claims stay
alone, a dead member's open claim is recorded interrupted by a live one."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from scheduler_rig import HOURLY, T0, at, rig

from trio_routines import Outcome, Routine, Scheduler
from trio_routines.agent import Completed, Event
from trio_routines.presence import Presence
from trio_routines.replicas import ReplicaInfo, claim_key, session_key
from trio_routines.scheduler.members import SWEPT_INTERRUPTED
from trio_routines.scheduler.openclaims import found_by
from trio_routines.scheduler.state import LOST_HOLD
from trio_routines.testing import Complete, MemoryPresence, MemoryStore, WallClock

MINUTELY = Routine(name="slow", prompt="p", cron="* * * * *")


class Timed:
    """An agent whose turns take ``seconds`` and are recorded as (start, end) Trio times."""

    def __init__(self, seconds: float, turns: list[tuple[float, float]]) -> None:
        self.seconds = seconds
        self.turns = turns

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        started = trio.current_time()
        await trio.sleep(self.seconds)
        self.turns.append((started, trio.current_time()))
        yield Completed()


async def test_a_session_runs_one_turn_at_a_time_across_replicas(autojump_clock: Any) -> None:
    store = MemoryStore()
    turns: list[tuple[float, float]] = []
    first = Scheduler(agent=Timed(150, turns), store=store, routines=[MINUTELY], now=WallClock(T0))
    second = Scheduler(agent=Timed(150, turns), store=store, routines=[MINUTELY], now=WallClock(T0))
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        await nursery.start(second.run)
        await trio.sleep(6 * 60)
        first.stop(0)
        second.stop(0)
    turns.sort()
    assert turns, "no turn ran"
    for (_, end), (start, _) in itertools.pairwise(turns):
        assert start >= end, f"two turns of one session overlapped: {turns}"
    history = await store.history("slow")
    skipped = [f for f in history if f.outcome is Outcome.SKIPPED]
    assert skipped, "the slots during a turn were not settled skipped (busy)"
    assert {f.replica for f in history} <= {first.replica, second.replica}


async def test_a_dead_members_open_claim_is_recorded_interrupted_by_a_live_one(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    first, agent, _, _ = rig(external_clock=True, store=store, poll_interval=30)
    second, _, _, _ = rig(external_clock=True, store=store, poll_interval=30)
    agent.default = Complete(duration=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(second.run)
        first_scope = trio.CancelScope()

        async def run_first() -> None:
            with first_scope:
                await first.run()

        nursery.start_soon(run_first)
        await trio.sleep(1)
        await first.start_fire("hourly", at(10))
        await trio.sleep(60)
        assert [f.outcome for f in await store.history("hourly")] == [None]  # alive
        presence = store.members[first.replica]
        assert isinstance(presence, MemoryPresence)
        presence.vanish()  # the process dies: its holds go, nothing is settled
        await trio.sleep(31)  # one watch of the live replica
        (fire,) = await store.history("hourly")
        assert (fire.outcome, fire.error) == (
            Outcome.INTERRUPTED,
            found_by(SWEPT_INTERRUPTED, second.replica),
        )
        first_scope.cancel()
        first.stop(0)
        second.stop(0)


async def test_a_lost_presence_ends_the_turns_it_held(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    scheduler, agent, _, _ = rig(external_clock=True, store=store, poll_interval=30)
    agent.default = Complete(duration=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await scheduler.start_fire("hourly", at(10))
        await trio.sleep(5)
        presence = store.members[scheduler.replica]
        assert isinstance(presence, MemoryPresence)
        presence.lose()  # as a connection the server dropped
        await trio.sleep(5)
        (fire,) = await store.history("hourly")
        assert (fire.outcome, fire.error) == (Outcome.INTERRUPTED, LOST_HOLD)
        # Its line says what ended it: no stop was under way.
        [record] = [r for r in caplog.records if " interrupted: " in r.getMessage()]
        assert record.getMessage().startswith(
            "hourly interrupted: this replica lost its hold on the store ("
        )
        assert record.error == "interrupted: this replica lost its hold on the store"
        await trio.sleep(60)  # it joins again
        assert scheduler.replica in store.members
        scheduler.stop(0)
    assert HOURLY.name == "hourly"


class GrantThenStall(Presence):
    """A store that grants every hold, then never answers (a reply lost on the way)."""

    def __init__(self) -> None:
        super().__init__(ReplicaInfo("a", "0", "h", 1, T0, T0))
        self.granted: set[int] = set()

    async def _take(self, keys: list[int]) -> list[bool]:
        self.granted.update(keys)
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    def _let_go(self, keys: list[int]) -> None:
        self.granted.difference_update(keys)


async def test_a_take_cut_off_by_its_deadline_leaves_no_hold_behind(autojump_clock: Any) -> None:
    presence = GrantThenStall()
    with trio.move_on_after(5):
        await presence.take([session_key("chat-1"), claim_key("r", T0)])
    assert presence.granted == set()  # or the session would stay busy on every replica
    assert not presence.holds(session_key("chat-1"))
