"""A dead claim found by several replicas at once is recorded, said and counted once.

Replicas that find one claim dead at the same moment -- two boots, two sweeps of a dead
member, two walks of the open claims -- each settle it ``interrupted`` if still unsettled:
only the first write lands, and the store answers every one of them "recorded". Each record
names the replica that wrote it, so each replica reads back whose landed: the writer says
"recorded as interrupted" (a warning) and counts it; the others say it was settled meanwhile
(info) and count nothing. The store here holds every such settle until all of the replicas
have sent theirs, so that they do race.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import pytest
import trio
import trio.testing
from scheduler_rig import T0, at, rig

from trio_routines import Outcome, Routine, Scheduler, StateFault
from trio_routines.replicas import ReplicaInfo
from trio_routines.scheduler.boot import BOOT_INTERRUPTED
from trio_routines.scheduler.members import SWEPT_INTERRUPTED
from trio_routines.scheduler.openclaims import (
    NOT_READ_BACK,
    OPEN_INTERRUPTED,
    SETTLED_MEANWHILE,
    found_by,
)
from trio_routines.testing import Complete, MemoryPresence, MemoryStore

HOURLY = Routine(name="hourly", prompt="p", cron="0 * * * *")


class Racing(MemoryStore):
    """Holds each settle ``if_unsettled`` of ``slot`` until ``racers`` of them are waiting."""

    def __init__(self, slot: datetime, racers: int, patience: float = 600) -> None:
        super().__init__()
        self.slot = slot
        self.racers = racers
        self.patience = patience
        self.waiting = 0
        self.all_in = trio.Event()

    async def settle(self, routine: str, slot: datetime, *args: Any, **kwargs: Any) -> bool:
        if kwargs.get("if_unsettled") and slot == self.slot and not self.all_in.is_set():
            self.waiting += 1
            if self.waiting >= self.racers:
                self.all_in.set()
            with trio.move_on_after(self.patience):  # one that never comes: fails below
                await self.all_in.wait()
        return await super().settle(routine, slot, *args, **kwargs)


async def behind_a_newer_claim(store: MemoryStore) -> None:
    """A dead replica's open claim at 07:00 behind its settled one at 09:00: the walk's."""
    await store.claim("hourly", at(7), at(7), replica="old")
    await store.claim("hourly", at(9), at(9), replica="old")
    await store.settle("hourly", at(9), Outcome.COMPLETED, 5)


async def run_a_second(*schedulers: Scheduler) -> None:
    """Run ``schedulers`` side by side for a second (their boots, their first walks)."""
    async with trio.open_nursery() as nursery:
        for scheduler in schedulers:
            nursery.start_soon(scheduler.run)
        await trio.sleep(1)
        for scheduler in schedulers:
            scheduler.stop(0)


def said(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    """The lines about the dead claim, as (level, how they end but for what follows in
    parentheses: where to read the record)."""
    return [
        (r.levelno, r.getMessage().rpartition("; ")[2].partition(" (")[0])
        for r in caplog.records
        if "never finished" in r.getMessage()
    ]


def assert_once(
    caplog: pytest.LogCaptureFixture,
    store: Racing,
    schedulers: list[Scheduler],
    reason: str,
) -> None:
    assert store.all_in.is_set(), "the replicas did not race"
    ((_, fire),) = [(n, f) for n, f in store.claims["hourly"].items() if f.slot == store.slot]
    writers = [s for s in schedulers if fire.error == found_by(reason, s.replica)]
    assert fire.outcome is Outcome.INTERRUPTED
    assert len(writers) == 1, fire.error
    counted = {s.replica: s.metrics.fires["hourly", "interrupted"] for s in schedulers}
    assert counted == {s.replica: int(s is writers[0]) for s in schedulers}
    lines = said(caplog)
    assert sorted(lines) == sorted(
        [(logging.WARNING, "recorded as interrupted")]
        + [(logging.INFO, SETTLED_MEANWHILE)] * (store.racers - 1)
    )


async def test_two_boots_record_a_dead_newest_claim_once(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_routines")
    store = Racing(at(9), racers=2)
    await store.claim("hourly", at(9), at(9), replica="gone")  # its replica died mid-turn
    schedulers = [rig(HOURLY, store=store, wakeups=False)[0] for _ in range(2)]
    await run_a_second(*schedulers)
    assert_once(caplog, store, schedulers, BOOT_INTERRUPTED)
    # The other boot's line still points at the history, where the writer's words are.
    (elsewhere,) = [r for r in caplog.records if SETTLED_MEANWHILE in r.getMessage()]
    assert elsewhere.getMessage().endswith(
        f"; {SETTLED_MEANWHILE} (see `python -m trio_routines history hourly`)"
    )


async def test_two_live_replicas_record_a_dead_members_claim_once(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_routines")
    store = Racing(at(10), racers=2)
    dying, agent, _, _ = rig(external_clock=True, store=store, poll_interval=30)
    agent.default = Complete(duration=3600)
    live = [rig(external_clock=True, store=store, poll_interval=30)[0] for _ in range(2)]
    async with trio.open_nursery() as nursery:
        for scheduler in live:
            await nursery.start(scheduler.run)
        dying_scope = trio.CancelScope()

        async def run_dying() -> None:
            with dying_scope:
                await dying.run()

        nursery.start_soon(run_dying)
        await trio.sleep(1)
        await dying.start_fire("hourly", at(10))
        await trio.sleep(5)
        presence = store.members[dying.replica]
        assert isinstance(presence, MemoryPresence)
        presence.vanish()  # the process dies: its holds go, nothing is settled
        await trio.sleep(65)  # two watches of each live replica
        assert_once(caplog, store, live, SWEPT_INTERRUPTED)
        dying_scope.cancel()  # before its stop could settle the turn it still runs here
        for scheduler in [dying, *live]:
            scheduler.stop(0)


async def test_two_walks_record_an_older_dead_claim_once(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_routines")
    store = Racing(at(7), racers=2)
    await behind_a_newer_claim(store)
    await store.join(ReplicaInfo("unrelated", "1", "h", 1, T0, T0))
    schedulers = [rig(HOURLY, store=store, wakeups=False)[0] for _ in range(2)]
    await run_a_second(*schedulers)
    assert_once(caplog, store, schedulers, OPEN_INTERRUPTED)


async def test_the_boot_whose_record_did_not_land_still_reads_the_routine_failing(
    autojump_clock: Any,
) -> None:
    # Nothing due for a year: no catch-up settles anything after the boots. The failing
    # series of each replica is seeded from the record the store holds, whoever wrote it.
    yearly = Routine(name="hourly", prompt="p", cron="0 0 1 1 *")
    store = Racing(at(9), racers=2)
    await store.claim("hourly", at(9), at(9), replica="gone")
    schedulers = [rig(yearly, store=store, wakeups=False)[0] for _ in range(2)]
    await run_a_second(*schedulers)
    assert store.all_in.is_set()
    assert [s.metrics.failing["hourly"] for s in schedulers] == [1, 1]
    assert sorted(s.metrics.fires["hourly", "interrupted"] for s in schedulers) == [0, 1]


class Unreadable(Racing):
    """Racing settles, then no claim read answered: no replica can tell whose landed."""

    async def latest_fire(self, routine: str) -> Any:
        if self.all_in.is_set():
            raise StateFault("the claims are unreadable")
        return await super().latest_fire(routine)

    async def history(self, routine: str) -> Any:
        if self.all_in.is_set():
            raise StateFault("the claims are unreadable")
        return await super().history(routine)


class Buggy(MemoryStore):
    """A store whose claim reads raise what no store may (its bug) once a claim is settled."""

    broken = False

    async def settle(self, routine: str, slot: datetime, *args: Any, **kwargs: Any) -> bool:
        written = await super().settle(routine, slot, *args, **kwargs)
        self.broken = self.broken or bool(kwargs.get("if_unsettled"))
        return written

    async def latest_fire(self, routine: str) -> Any:
        if self.broken:
            raise RuntimeError("a bug")
        return await super().latest_fire(routine)


async def test_a_store_s_bug_in_a_walk_s_read_back_is_an_error_not_the_end(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_routines")
    store = Buggy()
    await behind_a_newer_claim(store)
    scheduler, _, _, _ = rig(HOURLY, store=store, wakeups=False)
    await run_a_second(scheduler)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [
        "hourly: slot 2026-07-07T07:00:00.000Z could not be read back: RuntimeError: a bug"
    ]
    assert said(caplog) == [(logging.WARNING, NOT_READ_BACK.partition(" (")[0])]
    assert scheduler.metrics.fires["hourly", "interrupted"] == 0


@pytest.mark.parametrize("newest", [True, False], ids=["boot", "walk"])
async def test_a_record_that_cannot_be_read_back_is_said_so_and_counted_by_no_one(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture, newest: bool
) -> None:
    caplog.set_level(logging.INFO, logger="trio_routines")
    store = Unreadable(at(7), racers=2)
    if newest:
        await store.claim("hourly", at(7), at(7), replica="old")
    else:
        await behind_a_newer_claim(store)
    schedulers = [rig(HOURLY, store=store, wakeups=False)[0] for _ in range(2)]
    await run_a_second(*schedulers)
    assert store.all_in.is_set()
    assert [s.metrics.fires["hourly", "interrupted"] for s in schedulers] == [0, 0]
    lines = [
        (r.levelno, r.getMessage()) for r in caplog.records if "never finished" in r.getMessage()
    ]
    assert [(level, text.rpartition("; ")[2]) for level, text in lines] == [
        (logging.WARNING, NOT_READ_BACK)
    ] * 2


class Pruned(MemoryStore):
    """Once a claim is settled ``if_unsettled``, its history no longer holds it (pruned
    meanwhile, as a store keeping only its newest claims may)."""

    def __init__(self) -> None:
        super().__init__()
        self.pruned: set[datetime] = set()

    async def settle(self, routine: str, slot: datetime, *args: Any, **kwargs: Any) -> bool:
        written = await super().settle(routine, slot, *args, **kwargs)
        if kwargs.get("if_unsettled"):
            self.pruned.add(slot)
        return written

    async def history(self, routine: str) -> Any:
        return [f for f in await super().history(routine) if f.slot not in self.pruned]


async def test_a_claim_gone_from_the_history_when_read_back_is_counted_by_no_one(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_routines")
    store = Pruned()
    await behind_a_newer_claim(store)
    scheduler, _, _, _ = rig(HOURLY, store=store, wakeups=False)
    await run_a_second(scheduler)
    assert store.pruned == {at(7)}
    assert scheduler.metrics.fires["hourly", "interrupted"] == 0
    # Whose record landed cannot be told: said so, as a warning, as a failed read is.
    assert said(caplog) == [(logging.WARNING, NOT_READ_BACK.partition(" (")[0])]


async def test_the_walks_of_one_replica_take_turns(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The first walk's settle waits (a slow store) past several watches, each of which
    # would walk the same claims in the same words: they pass while it is under way.
    caplog.set_level(logging.INFO, logger="trio_routines")
    store = Racing(at(7), racers=2, patience=3.5)  # within the store calls' bound (5 s)
    await behind_a_newer_claim(store)
    scheduler, _, _, _ = rig(HOURLY, store=store, wakeups=False, poll_interval=1)
    beats: list[float] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        started = trio.current_time()
        presence = store.members[scheduler.replica]
        beat = presence.beat

        async def counted(*args: Any, **kwargs: Any) -> None:
            beats.append(trio.current_time() - started)
            await beat(*args, **kwargs)

        presence.beat = counted  # type: ignore[method-assign]
        await trio.sleep(30)
        scheduler.stop(0)
    assert store.waiting == 1  # the first walk's settle, alone
    # The watches went on beating meanwhile: none waited for the walk under way.
    assert len([at for at in beats if at < 3]) >= 2
    assert not store.all_in.is_set()
    assert scheduler.metrics.fires["hourly", "interrupted"] == 1
    assert said(caplog) == [(logging.WARNING, "recorded as interrupted")]
