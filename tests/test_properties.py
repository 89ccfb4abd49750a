"""Property tests of the runtime: several schedulers, one store, clocks that jump, crashes.

Each example runs in its own ``trio.run`` under ``MockClock(autojump_threshold=0)``: two to four
:class:`Scheduler` instances share one :class:`MemoryStore`, each with its own wall clock
(a :class:`WallClock` that Hypothesis makes jump forward and backward) and its own scripted
agent (turns that complete or fail after random durations). A random plan then waits, jumps a
clock, stops a scheduler with a random grace, crashes one, or boots one again. Invariants:

* no slot is claimed twice, and no slot's turn runs twice;
* no slot is claimed before its instant on the claiming scheduler's wall clock;
* a boot catches a routine up at most once (checked for boots whose clock never went back);
* after a stop with grace, every claim that scheduler made is settled;
* after a crash (the store raises :class:`Crash` on every call from then on, and the
  scheduler is cancelled), the next boot records the crashed fire ``interrupted``.

The ``ci`` Hypothesis profile (``CI`` set) runs four times as many examples (200). An example
costs about a second of CPU (a plan covers hours of virtual time, every loop of every scheduler
waking through it), so the examples are split into :data:`SHARDS` tests, each running its
share with its own random seed: pytest-xdist runs them side by side, where one test would be
the suite's longest critical path.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_routines.context import current_fire
from trio_routines.instants import slot_name
from trio_routines.records import ClaimResult, ClaimStatus, Fire, Outcome
from trio_routines.routines import Routine
from trio_routines.scheduler import Scheduler
from trio_routines.testing import Complete, Fail, MemoryStore, ScriptedAgent, Turn, WallClock

EXAMPLES = settings().max_examples // 2  # 50 by default, 200 under the ci profile
SHARDS = max(1, min(8, EXAMPLES))  # tests that share the EXAMPLES between them
BASE = datetime(2026, 7, 7, 9, 3, 17, tzinfo=UTC)
CRONS = ["* * * * *", "*/2 * * * *", "*/5 * * * *", "*/15 * * * *", "0 * * * *"]


class Crash(BaseException):
    """The process died: nothing after this point reaches the store."""


@attrs.define
class Boot:
    number: int
    scheduler: int
    wall_at_boot: datetime
    crashed: bool = False
    went_back: bool = False
    claims: list[tuple[str, datetime, datetime]] = attrs.Factory(list)  # routine, slot, fired


class View:
    """One scheduler's way into the shared store; after a crash, every call raises."""

    def __init__(self, store: MemoryStore, boot: Boot, taken: list[tuple[str, str]]) -> None:
        self.store = store
        self.boot = boot
        self.taken = taken
        self.crashed = False

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.store, name)
        if not callable(attribute):
            return attribute

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.crashed:
                raise Crash
            return await attribute(*args, **kwargs)

        return call

    async def claim(self, routine: str, slot: datetime, fired_at: datetime) -> ClaimResult:
        if self.crashed:
            raise Crash
        result = await self.store.claim(routine, slot, fired_at)
        if result.status is ClaimStatus.TAKEN:
            self.taken.append((routine, slot_name(slot)))
            self.boot.claims.append((routine, slot, fired_at))
        return result


STEP = st.tuples(
    st.floats(0, 3 * 3600),  # virtual seconds to wait first
    st.sampled_from(["jump", "jump", "stop", "crash", "start", "start", "wait"]),
    st.integers(0, 3),  # which scheduler (modulo how many there are)
    st.integers(-180, 180).filter(bool),  # minutes, for a jump
    st.floats(0, 300),  # grace, for a stop
)
BEHAVIOUR = st.tuples(st.booleans(), st.floats(0, 900)).map(
    lambda pair: Complete(pair[1]) if pair[0] else Fail("no", duration=pair[1])
)


@st.composite
def plans(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(2, 4))
    names = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True))
    routines = [Routine(name=n, prompt=f"do {n}", cron=draw(st.sampled_from(CRONS))) for n in names]
    seeded = draw(st.lists(st.sampled_from(names), max_size=3, unique=True))
    return {
        "count": count,
        "routines": routines,
        "seeded": {name: draw(st.integers(1, 48)) for name in seeded},  # hours before BASE
        "agents": [draw(st.lists(BEHAVIOUR, max_size=6)) for _ in range(count)],
        "durations": [draw(st.floats(0, 600)) for _ in range(count)],
        "steps": draw(st.lists(STEP, min_size=1, max_size=12)),
    }


class World:
    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan
        self.store = MemoryStore()
        self.routines: list[Routine] = plan["routines"]
        self.clocks = [WallClock(BASE) for _ in range(plan["count"])]
        self.taken: list[tuple[str, str]] = []
        self.turns: list[tuple[str, str]] = []
        self.boots: list[Boot] = []
        self.running: dict[int, tuple[Scheduler, View, trio.CancelScope, trio.Event]] = {}

    def on_turn(self, turn: Turn) -> None:
        fire = current_fire()
        assert fire is not None  # every turn here is a routine's fire
        assert fire.slot is not None
        self.turns.append((turn.session, slot_name(fire.slot)))

    def newest(self) -> dict[str, tuple[str, Fire]]:
        found = {}
        for routine, claims in self.store.claims.items():
            if claims:
                name = max(claims)
                found[routine] = (name, claims[name])
        return found

    def owner(self, routine: str, name: str) -> Boot | None:
        for boot in self.boots:
            if any(r == routine and slot_name(s) == name for r, s, _ in boot.claims):
                return boot
        return None

    async def start(self, index: int, nursery: trio.Nursery) -> None:
        if index in self.running:
            return
        boot = Boot(len(self.boots), index, self.clocks[index]())
        self.boots.append(boot)
        view = View(self.store, boot, self.taken)
        agent = ScriptedAgent(
            Complete(self.plan["durations"][index]), wall=self.clocks[index], on_turn=self.on_turn
        )
        agent.script(*self.plan["agents"][index])
        scheduler = Scheduler(
            agent=agent,
            store=view,  # type: ignore[arg-type]
            routines=self.routines,
            now=self.clocks[index],
            wakeups=False,
        )
        before = self.newest()
        done = trio.Event()
        scope = trio.CancelScope()

        async def life(*, task_status: trio.TaskStatus[None]) -> None:
            try:
                with scope:
                    try:
                        await scheduler.run(task_status=task_status)
                    except* Crash:
                        pass
            finally:
                self.running.pop(index, None)
                done.set()

        self.running[index] = (scheduler, view, scope, done)
        await nursery.start(life)
        self.check_reconciled(before)

    def check_reconciled(self, before: dict[str, tuple[str, Fire]]) -> None:
        """The crashed fire that was newest is now recorded interrupted."""
        after = self.newest()
        for routine, (name, fire) in before.items():
            owner = self.owner(routine, name)
            if fire.outcome is not None or owner is None or not owner.crashed:
                continue
            if after[routine][0] != name:
                continue  # a live scheduler claimed a later slot meanwhile
            assert after[routine][1].outcome is Outcome.INTERRUPTED, (routine, name)

    async def stop(self, index: int, grace: float) -> None:
        if index not in self.running:
            return
        scheduler, _, _, done = self.running[index]
        boot = next(b for b in reversed(self.boots) if b.scheduler == index)
        scheduler.stop(grace)
        await done.wait()
        for routine, slot, _ in boot.claims:
            fire = self.store.claims[routine].get(slot_name(slot))
            assert fire is None or fire.outcome is not None, (routine, slot)

    async def crash(self, index: int) -> None:
        if index not in self.running:
            return
        _, view, scope, done = self.running[index]
        view.crashed = True
        next(b for b in reversed(self.boots) if b.scheduler == index).crashed = True
        scope.cancel()
        await done.wait()

    def jump(self, index: int, minutes: int) -> None:
        self.clocks[index].jump(timedelta(minutes=minutes))
        if minutes < 0:
            for boot in self.boots:
                if boot.scheduler == index:
                    boot.went_back = True

    def check(self) -> None:
        assert len(self.taken) == len(set(self.taken)), self.taken
        assert len(self.turns) == len(set(self.turns)), self.turns
        for boot in self.boots:
            for routine, slot, fired_at in boot.claims:
                assert fired_at >= slot, (routine, slot, fired_at)
            if boot.went_back:
                continue
            for routine in {r.name for r in self.routines}:
                caught_up = [s for r, s, _ in boot.claims if r == routine and s < boot.wall_at_boot]
                assert len(caught_up) <= 1, (routine, caught_up, boot)


async def _play(plan: dict[str, Any]) -> None:
    world = World(plan)
    for name, hours in plan["seeded"].items():
        old = BASE - timedelta(hours=hours)
        await world.store.claim(name, old, old)
        await world.store.settle(name, old, Outcome.COMPLETED, 1)
    async with trio.open_nursery() as nursery:
        for index in range(plan["count"]):
            await world.start(index, nursery)
        for wait, action, which, minutes, grace in plan["steps"]:
            await trio.sleep(wait)
            index = which % plan["count"]
            if action == "jump":
                world.jump(index, minutes)
            elif action == "stop":
                await world.stop(index, grace)
            elif action == "crash":
                await world.crash(index)
            elif action == "start":
                await world.start(index, nursery)
            world.check()
        for index in list(world.running):
            await world.stop(index, 60)
    world.check()
    # Everything stopped gracefully in the end: only crashed fires may be left open, and
    # only when no boot came after them to record them.
    for routine, claims in world.store.claims.items():
        for name, fire in claims.items():
            if fire.outcome is None:
                owner = world.owner(routine, name)
                assert owner is not None, (routine, name)
                assert owner.crashed, (routine, name)


def share(shard: int) -> int:
    """How many of the :data:`EXAMPLES` the test ``shard`` runs: all of them between the shards."""
    return EXAMPLES // SHARDS + (shard < EXAMPLES % SHARDS)


@pytest.mark.slow
@pytest.mark.longest
@pytest.mark.parametrize("shard", range(SHARDS))
def test_schedulers_sharing_a_store_keep_every_promise(shard: int) -> None:
    @settings(max_examples=share(shard))
    @given(plans())
    def play(plan: dict[str, Any]) -> None:
        trio.run(_play, plan, clock=trio.testing.MockClock(autojump_threshold=0))

    play()


def test_the_shards_run_every_example_between_them() -> None:
    assert sum(share(shard) for shard in range(SHARDS)) == EXAMPLES
    assert all(share(shard) > 0 for shard in range(SHARDS))
