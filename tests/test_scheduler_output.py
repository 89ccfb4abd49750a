"""A routine's kept output under virtual time: the end of the streamed reply, with the claim."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import trio

from trio_routines import Outcome, Routine, Scheduler
from trio_routines.agent import Completed, Event, Failed, TextDelta
from trio_routines.testing import MemoryStore, WallClock

T0 = datetime(2026, 7, 7, 10, 30, tzinfo=UTC)
KEEPS = Routine(name="keeps", prompt="Report.", cron="0 * * * *", output=16)
SILENT = Routine(name="silent", prompt="Report.", cron="0 * * * *")
PIECES = ["Checked 12 queues. ", "Nothing stuck.\n", "Résumé: all ", "green ✓"]


class Streaming:
    """Streams :data:`PIECES` a second apart, then completes (or fails, for ``fails``)."""

    def __init__(self, fails: bool = False) -> None:
        self.fails = fails

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        for piece in PIECES:
            await trio.sleep(1)
            yield TextDelta(piece)
        yield Failed("exit status 1") if self.fails else Completed()


async def run_until(store: Any, agent: Any, *routines: Routine, until: datetime) -> None:
    wall = WallClock(T0)
    scheduler = Scheduler(agent=agent, store=store, routines=routines, now=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep((until - wall()).total_seconds())
        scheduler.stop()


async def test_a_routine_with_output_keeps_the_last_bytes_of_its_reply(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    await run_until(store, Streaming(), KEEPS, SILENT, until=T0 + timedelta(hours=1))
    # The last 16 bytes begin inside "é" (two bytes): its half is dropped, 15 bytes are kept.
    expected = ": all green ✓"
    assert len(expected.encode()) == 15
    assert "".join(PIECES).encode()[-16:] == "é".encode()[1:] + expected.encode()
    (kept,) = await store.history("keeps")
    assert (kept.slot, kept.outcome, kept.ms, kept.output) == (
        datetime(2026, 7, 7, 11, tzinfo=UTC),
        Outcome.COMPLETED,
        4000,
        expected,
    )
    (silent,) = await store.history("silent")
    assert (silent.outcome, silent.output) == (Outcome.COMPLETED, None)


async def test_a_failed_turn_keeps_what_it_said_and_why_it_failed(autojump_clock: Any) -> None:
    store = MemoryStore()
    await run_until(store, Streaming(fails=True), KEEPS, until=T0 + timedelta(hours=1))
    (fire,) = await store.history("keeps")
    assert (fire.outcome, fire.error, fire.output) == (
        Outcome.FAILED,
        "exit status 1",
        ": all green ✓",
    )


class OlderStore(MemoryStore):
    """A store written before output: its settle takes no ``output`` keyword."""

    async def settle(  # type: ignore[override]
        self,
        routine: str,
        slot: datetime,
        outcome: Outcome,
        ms: int | None = None,
        *,
        if_unsettled: bool = False,
        error: str | None = None,
    ) -> bool:
        return await super().settle(
            routine, slot, outcome, ms, if_unsettled=if_unsettled, error=error
        )


async def test_a_store_without_output_still_settles_every_turn(autojump_clock: Any) -> None:
    store = OlderStore()
    await run_until(store, Streaming(), KEEPS, until=T0 + timedelta(hours=2))
    fires = await store.history("keeps")
    assert [(f.outcome, f.output) for f in fires] == [(Outcome.COMPLETED, None)] * 2
