"""Pins ``scheduler/calls.py`` where the scheduler's selection left it open: a settle retried
after its first attempt failed, and a settle made once (a retry's, the boot's), each carry
the turn's output and usage to the store; the faults of the reads that have no caller of
their own to name them.

The part is driven on its own, over the memory store, under virtual time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trio
import trio.testing
from scheduler_rig import NO_ANSWER, part_rig

from trio_routines.agent import Usage
from trio_routines.errors import StateFault
from trio_routines.records import Outcome
from trio_routines.scheduler.calls import StoreCalls
from trio_routines.scheduler.wakecalls import WakeupCalls
from trio_routines.testing import MemoryStore
from trio_routines.wakelimits import WakeLimits

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
SPENT = Usage(input_tokens=12, output_tokens=3)


def calls_of(store: MemoryStore) -> StoreCalls:
    return part_rig(store, now=T0, default_grace=30.0)[1]


def wakeup_calls_of(store: MemoryStore) -> WakeupCalls:
    runtime, calls, _ = part_rig(store, now=T0, default_grace=30.0)
    return WakeupCalls(store, runtime, calls, WakeLimits())


async def test_a_settle_retried_keeps_the_turns_output_and_usage(autojump_clock: Any) -> None:
    store = MemoryStore()
    calls = calls_of(store)
    await store.claim("digest", T0, T0)
    store.fail("settle", StateFault("disk busy"), times=1)
    with trio.CancelScope(shield=True) as within:
        await calls.settle("digest", T0, Outcome.COMPLETED, 7, None, within, "the reply", SPENT)
    fire = (await store.history("digest"))[0]
    assert (fire.outcome, fire.ms, fire.output, fire.usage) == (
        Outcome.COMPLETED,
        7,
        "the reply",
        SPENT,
    )


async def test_a_settle_made_once_carries_the_turns_output_and_usage(autojump_clock: Any) -> None:
    store = MemoryStore()
    await store.claim("digest", T0, T0)
    settled = await calls_of(store).settle_once(
        "digest",
        T0,
        Outcome.FAILED,
        9,
        if_unsettled=True,
        error="exit status 2",
        output="half a reply",
        usage=SPENT,
    )
    assert settled is True
    fire = (await store.history("digest"))[0]
    assert (fire.outcome, fire.error, fire.output, fire.usage) == (
        Outcome.FAILED,
        "exit status 2",
        "half a reply",
        SPENT,
    )


@pytest.mark.parametrize(
    ("operation", "call", "what"),
    [
        (
            "list_wakeups",
            lambda store: wakeup_calls_of(store).count(),
            "the pending wake-ups could not be counted",
        ),
        (
            "history",
            lambda store: calls_of(store).history("digest"),
            "the history of 'digest' is unreadable",
        ),
    ],
)
async def test_a_read_never_answered_fails_at_its_bound_naming_itself(
    autojump_clock: Any, operation: str, call: Any, what: str
) -> None:
    store = MemoryStore()
    store.hang(operation)
    with pytest.raises(StateFault) as fault:
        await call(store)
    assert str(fault.value) == f"{what}: {NO_ANSWER}"


class Counting(MemoryStore):
    """A store that counts its pending wake-ups itself (as PostgreSQL does), never listing
    them for a count; ``stalled``: its count never answers."""

    stalled = False

    async def count_wakeups(self) -> int:
        if self.stalled:
            await trio.sleep_forever()
        return 41

    async def list_wakeups(self) -> Any:
        raise AssertionError("listed to be counted")


async def test_a_store_that_counts_its_wake_ups_is_asked_for_its_count(
    autojump_clock: Any,
) -> None:
    store = Counting()
    assert await wakeup_calls_of(store).count() == 41
    store.stalled = True
    with pytest.raises(StateFault) as fault:
        await wakeup_calls_of(store).count()
    assert str(fault.value) == f"the pending wake-ups could not be counted: {NO_ANSWER}"


async def test_a_first_settle_writes_the_outcome_over_an_interrupted_written_meanwhile(
    autojump_clock: Any,
) -> None:
    # While the turn ran, another replica (its boot, its sweep) took this one for dead and
    # recorded the claim interrupted; the turn's own settle still writes what happened.
    store = MemoryStore()
    calls = calls_of(store)
    await store.claim("digest", T0, T0)
    await store.settle("digest", T0, Outcome.INTERRUPTED, None, if_unsettled=True, error="boot")
    with trio.CancelScope(shield=True) as within:
        await calls.settle("digest", T0, Outcome.COMPLETED, 7, None, within)
    fire = (await store.history("digest"))[0]
    assert (fire.outcome, fire.ms, fire.error) == (Outcome.COMPLETED, 7, None)


async def test_a_read_begun_before_the_slot_that_was_cut_off_is_made_again_by_the_next_asker(
    autojump_clock: Any,
) -> None:
    # A read under way since before ``since`` is cut off (its caller stopped) while the wall
    # clock is still behind ``since`` (it went back): it has no answer to give, so the one
    # waiting on it reads the store itself.
    store = MemoryStore()
    _, calls, wall = part_rig(store, now=T0)
    store.hang("paused")
    answers: list[Any] = []

    async def ask() -> None:
        answers.append(await calls.read_paused(T0 + timedelta(hours=1)))

    async def read_first(task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            await calls.read_paused()

    async with trio.open_nursery() as nursery:
        first = await nursery.start(read_first)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        store.hangs.discard("paused")
        await store.set_paused("digest", True)
        wall.set(T0 + timedelta(minutes=30))  # on, yet still behind ``since``
        first.cancel()
    (answer,) = answers
    assert (answer.names, answer.started) == (frozenset({"digest"}), T0 + timedelta(minutes=30))


async def test_a_settle_refused_with_no_time_left_to_retry_is_said_lost_not_unanswered(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The store answered the one attempt (it refused the write): the outcome is lost, which
    # is not the "not known" of a write that may still land.
    store = MemoryStore()
    calls = part_rig(store, now=T0, default_grace=0.01)[1]  # shorter than the first back-off
    await store.claim("digest", T0, T0)
    store.fail("settle", StateFault("disk full"))
    with trio.CancelScope(shield=True) as within:
        await calls.settle("digest", T0, Outcome.COMPLETED, 7, None, within)
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == [
        "digest: the completed outcome of slot 2026-07-07T10:00:00.000Z is lost after 1 "
        "attempts — the claim stays unsettled and the next boot records it as interrupted"
    ]
    assert calls.settle_failures["digest"] == 1
