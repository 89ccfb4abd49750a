"""Pins ``scheduler/members.py``: the sweep of a member found dead (only its open newest
claims, those whose holds are free, each settled ``interrupted`` with one warning, never over
an outcome its holder wrote meanwhile), the watch's warning when the store does not answer,
and a lost presence joined again (a warning per failed try, then one line).

Under virtual time, one scheduler (external clock) and members joined straight to the
memory store."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
import trio.testing
from scheduler_rig import T0, at, rig

from trio_routines import Outcome, Routine
from trio_routines.errors import StateFault
from trio_routines.instants import format_iso
from trio_routines.replicas import ReplicaInfo, claim_key
from trio_routines.scheduler.members import SWEPT_INTERRUPTED
from trio_routines.scheduler.openclaims import OPEN_INTERRUPTED
from trio_routines.testing import MemoryPresence, MemoryStore

ROUTINES = [Routine(name=name, prompt="p", cron="0 * * * *") for name in "abcd"]


def warned(caplog: pytest.LogCaptureFixture, part: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and part in r.getMessage()
    ]


async def member(store: MemoryStore, replica: str) -> MemoryPresence:
    presence = await store.join(ReplicaInfo(replica, "1", "h", 1, T0, T0))
    assert isinstance(presence, MemoryPresence)
    return presence


async def test_a_dead_members_free_open_claims_are_swept_and_no_others(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    doomed, live = await member(store, "r2"), await member(store, "r3")
    scheduler, _, _, _ = rig(*ROUTINES, external_clock=True, store=store, poll_interval=30)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.testing.wait_all_tasks_blocked()  # the first look for open claims is done
        # Made after the boot and that look, which would otherwise find them first.
        for name in "abd":
            await store.claim(name, at(9), at(9), replica="r2")
        await store.settle("d", at(9), Outcome.COMPLETED, 5)  # settled: nothing to sweep
        await store.claim("c", at(9), at(9), replica="r3")  # a live member's: not swept
        assert await live.take([claim_key("a", at(9))]) == [True]  # held: running elsewhere
        doomed.vanish()
        await trio.sleep(31)  # one watch
        scheduler.stop(0)
    outcomes = {
        name: (fire.outcome, fire.error) for name in "abcd" for fire in await store.history(name)
    }
    assert outcomes == {
        "a": (None, None),
        "b": (Outcome.INTERRUPTED, SWEPT_INTERRUPTED),  # after "a", left: the sweep goes on
        "c": (Outcome.INTERRUPTED, OPEN_INTERRUPTED),  # the walk's, not the sweep's
        "d": (Outcome.COMPLETED, None),
    }
    assert warned(caplog, "that replica stopped") == [
        f"b: the fire claimed at {format_iso(at(9))} by replica r2 never finished — that "
        "replica stopped mid-turn; recorded as interrupted"
    ]


class SettledMeanwhile(MemoryStore):
    """The holder settles its claim just as the sweep asks whether it lives."""

    async def claims_alive(self, claims: Any) -> list[bool]:
        for routine, slot in claims:
            await self.settle(routine, slot, Outcome.COMPLETED, 7)
        return await super().claims_alive(claims)


async def test_the_sweep_never_overwrites_an_outcome_written_meanwhile(
    autojump_clock: Any,
) -> None:
    store = SettledMeanwhile()
    doomed = await member(store, "r2")
    scheduler, _, _, _ = rig(*ROUTINES, external_clock=True, store=store, poll_interval=30)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.testing.wait_all_tasks_blocked()  # the first look for open claims is done
        await store.claim("a", at(9), at(9), replica="r2")
        doomed.vanish()
        await trio.sleep(31)
        scheduler.stop(0)
    (fire,) = await store.history("a")
    assert (fire.outcome, fire.ms) == (Outcome.COMPLETED, 7)


async def test_a_watch_the_store_does_not_answer_is_a_warning_and_the_next_one_goes_on(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    scheduler, _, _, _ = rig(external_clock=True, store=store, poll_interval=30)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        store.fail("beat", StateFault("disk full"), times=1)
        await trio.sleep(61)
        assert store.members[scheduler.replica].info.last_seen > T0  # the second watch beat
        scheduler.stop(0)
    assert warned(caplog, "the watch") == [
        f"replica {scheduler.replica}: the store did not answer the watch: disk full"
    ]


async def test_a_lost_presence_tries_to_join_again_each_interval_until_the_store_takes_it(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_routines")
    store = MemoryStore()
    scheduler, _, _, _ = rig(external_clock=True, store=store, poll_interval=30)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        lost = store.members[scheduler.replica]
        assert isinstance(lost, MemoryPresence)
        store.fail("join", StateFault("connection refused"), times=2)
        lost.lose()
        await trio.sleep(100)
        assert store.members[scheduler.replica] is not lost
        scheduler.stop(0)
    replica = scheduler.replica
    assert warned(caplog, "could not join") == 2 * [
        f"replica {replica} could not join its store again: connection refused"
    ]
    assert [r.getMessage() for r in caplog.records if "joined its store" in r.getMessage()] == [
        f"replica {replica} joined its store again"
    ]
