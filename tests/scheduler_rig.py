"""What the tests/test_pinned_scheduler*.py files share: one scheduler under virtual time; and
what a part of the scheduler driven on its own is handed (:func:`part_rig`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import trio

from trio_routines import Outcome, Routine, Scheduler
from trio_routines.metrics import Metrics
from trio_routines.scheduler.calls import StoreCalls
from trio_routines.scheduler.grace import Grace
from trio_routines.scheduler.state import Runtime
from trio_routines.store import Store
from trio_routines.testing import MemoryStore, ScriptedAgent, WallClock

T0 = datetime(2026, 7, 7, 10, 30, tzinfo=UTC)
HOURLY = Routine(name="hourly", prompt="Check the queue.", cron="0 * * * *")
NO_ANSWER = "the store did not answer within 5s (or before the stop's grace ran out)"


def at(hour: int, minute: int = 0, *, day: int = 7) -> datetime:
    return datetime(2026, 7, day, hour, minute, tzinfo=UTC)


class Recording(MemoryStore):
    """The memory store, remembering the arguments of the calls the tests pin."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, ...]] = []

    async def set_paused(self, routine: str, paused: bool, at: datetime | None = None) -> None:
        self.calls.append(("set_paused", routine, paused, at))
        await super().set_paused(routine, paused, at)

    async def settle(self, routine: str, slot: datetime, *args: Any, **options: Any) -> bool:
        self.calls.append(("settle", routine, slot, *args, options))
        return await super().settle(routine, slot, *args, **options)


async def completed(store: Any, name: str, slot: datetime) -> None:
    """A claim of ``name`` for ``slot``, made at the slot and settled completed in 1 ms."""
    await store.claim(name, slot, slot)
    await store.settle(name, slot, Outcome.COMPLETED, 1)


async def until(wall: WallClock, when: datetime) -> None:
    """Sleep (Trio's clock) until ``wall`` reads ``when``."""
    await trio.sleep((when - wall()).total_seconds())


def rig(
    *routines: Routine, store: MemoryStore | None = None, **options: Any
) -> tuple[Scheduler, ScriptedAgent, Any, WallClock]:
    """A scheduler of ``routines`` (``HOURLY``) on a wall clock at ``T0``; store calls 5 s."""
    wall = WallClock(T0)
    agent = ScriptedAgent(wall=wall)
    store = store if store is not None else Recording()
    options.setdefault("store_timeout", 5.0)
    scheduler = Scheduler(
        agent=agent, store=store, routines=routines or (HOURLY,), now=wall, **options
    )
    return scheduler, agent, store, wall


def part_rig(
    store: Store, *, now: datetime = T0, replica: str = "r1", default_grace: float = 1.0
) -> tuple[Runtime, StoreCalls, WallClock]:
    """A runtime with no routines on a wall clock at ``now``, and store calls bounded at 5 s
    (``NO_ANSWER``): what a part of the scheduler is handed when a test drives it alone."""
    wall = WallClock(now)
    runtime = Runtime(
        routines={}, now=wall, replica=replica, metrics=Metrics(), default_grace=default_grace
    )
    return runtime, StoreCalls(store, runtime, Grace(), store_timeout=5.0), wall


def lines(caplog: pytest.LogCaptureFixture, level: int | None = None) -> list[tuple[int, str]]:
    """Every record as (level, message), or only the messages of ``level``."""
    return [
        (r.levelno, r.getMessage()) for r in caplog.records if level is None or r.levelno == level
    ]


def messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [m for _, m in lines(caplog, level)]


async def one_shot(scheduler: Scheduler, call: str, name: str, slot: datetime) -> Any:
    """One turn of ``name`` outside a run: ``call`` is ``"fire"`` (its ``slot`` claimed) or
    ``"run_now"`` (no claim); what the call returns."""
    if call == "fire":
        return await scheduler.fire(name, slot)
    return await scheduler.run_now(name)
