"""The fire path's branches by kind of store, and its rarer ends pinned whole.

Each store decides a slot and a session's turn its own way (scheduler/holds.py): the memory
store takes the claim's and the session's holds before the claim, the state directory holds
the claim's key in this process only (no replica sees its claim half made), and PostgreSQL
takes the session's hold in the claim's own step. Whatever the way, a second fire of a slot
this process is deciding or running is a duplicate naming that slot, counted and logged as
one; on PostgreSQL no hold is asked for apart from the claim. Then the ends a fire reaches
seldom: a claim answered after its deadline, a routine over its budget, a paused routine's
span.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from scheduler_rig import T0, at, rig
from span_rig import recorded_spans

from trio_routines import Completed, Outcome, Routine, Scheduler
from trio_routines.instants import format_iso, slot_name
from trio_routines.presence import Presence
from trio_routines.records import ClaimResult, ClaimStatus
from trio_routines.replicas import claim_key, session_key
from trio_routines.scheduler import FireResult
from trio_routines.scheduler.fire import CLAIMED_TOO_LATE
from trio_routines.store import Store
from trio_routines.stores import DirectoryStore
from trio_routines.testing import Complete, MemoryStore, WallClock
from trio_routines.usage import Usage

YEARLY = Routine(name="r", prompt="p", cron="0 0 1 1 *")  # nothing due while a test runs
SLOT = datetime(2026, 1, 1, tzinfo=UTC)
EARLIER = datetime(2025, 1, 1, tzinfo=UTC)


class Gated:
    """An agent whose turns end once ``go`` is set."""

    def __init__(self) -> None:
        self.go = trio.Event()
        self.turns = 0

    async def invoke(self, session: str, text: str) -> AsyncIterator[Any]:
        self.turns += 1
        await self.go.wait()
        yield Completed()


class ClaimTooLate(MemoryStore):
    """A claim taken, but answered only after its deadline passed (shielded from the cut)."""

    async def claim(
        self, routine: str, slot: datetime, fired_at: datetime, *, replica: str | None = None
    ) -> ClaimResult:
        result = await super().claim(routine, slot, fired_at, replica=replica)
        with trio.CancelScope(shield=True):
            await trio.sleep(31)
        return result


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    """The spans ended while the test runs, kept in memory."""
    return recorded_spans(monkeypatch)


def fires(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == "routine.fire"]


async def test_a_second_fire_of_a_slot_under_way_here_is_a_duplicate_naming_it(
    store: Store, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_routines")
    asked: list[list[int]] = []
    real_take = Presence.take

    async def take(self: Presence, keys: Any) -> list[bool]:
        asked.append(list(keys))
        return await real_take(self, keys)

    monkeypatch.setattr(Presence, "take", take)
    agent = Gated()
    scheduler = Scheduler(
        agent=agent,
        store=store,
        routines=[YEARLY],
        now=lambda: datetime.now(UTC),
        wakeups=False,
        replica="here",
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        taken = await scheduler.start_fire("r", SLOT)
        assert (taken.status, taken.newest) == (ClaimStatus.TAKEN, slot_name(SLOT))
        # Its turn runs: the slot is this process's, whatever the store's way of holding it.
        again = await scheduler.start_fire("r", SLOT)
        assert (again.status, again.newest) == (ClaimStatus.DUPLICATE, slot_name(SLOT))
        assert await scheduler.fire("r", SLOT) == FireResult("r", SLOT, False, reason="duplicate")
        agent.go.set()
        with trio.fail_after(10):  # a bound of the test's own, not a timing
            while scheduler.statistics().in_flight:  # noqa: ASYNC110 -- no event for a settle
                await trio.sleep(0.01)
        assert await scheduler.fire("r", EARLIER) == FireResult("r", EARLIER, False, reason="stale")
        scheduler.stop(0)
    assert agent.turns == 1
    assert scheduler.statistics().outcomes == {"completed": 1, "duplicate": 2, "stale": 1}
    refused = [r for r in caplog.records if "skipping" in r.getMessage()]
    assert [(r.levelno, r.routine, r.slot, r.replica) for r in refused] == [  # type: ignore[attr-defined]
        (logging.DEBUG, "r", SLOT, "here"),
        (logging.DEBUG, "r", SLOT, "here"),
        (logging.WARNING, "r", EARLIER, "here"),
    ]
    claim, session = claim_key("r", SLOT), session_key("routine:r")
    if isinstance(store, MemoryStore):  # the claim's and the session's holds, before the claim
        assert [claim, session] in asked
    elif isinstance(store, DirectoryStore):  # the session's, once the claim is made whole
        assert [session] in asked
        assert not any(claim in keys for keys in asked)
    else:  # PostgreSQL: the session's hold comes with the claim itself
        assert not any(claim in keys or session in keys for keys in asked)


async def test_a_claim_answered_after_its_deadline_is_logged_counted_and_traced(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture, spans: InMemorySpanExporter
) -> None:
    caplog.set_level(logging.WARNING, logger="trio_routines")
    wall = WallClock(T0)
    scheduler = Scheduler(
        agent=Gated(),
        store=ClaimTooLate(),  # answers 31 s after the claim's 30 s bound began
        store_timeout=30,
        routines=[YEARLY, attrs.evolve(YEARLY, name="s")],
        now=wall,
        replica="here",
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        result = await scheduler.fire("r", SLOT)
        await scheduler.fire("s", SLOT)  # counted: one more
        scheduler.stop(0)
    assert result == FireResult(
        "r", SLOT, True, outcome=Outcome.INTERRUPTED, failed=CLAIMED_TOO_LATE
    )
    assert scheduler.statistics().outcomes == {"interrupted": 2}
    line, _ = [r for r in caplog.records if "deadline" in r.getMessage()]
    assert line.getMessage() == (
        f"r: slot {format_iso(SLOT)} was claimed only after the store's deadline — not run; "
        "recorded as interrupted"
    )
    assert (line.levelno, line.routine, line.slot, line.replica) == (  # type: ignore[attr-defined]
        logging.WARNING,
        "r",
        SLOT,
        "here",
    )
    assert [(f.attributes or {})["trio_routines.outcome"] for f in fires(spans)] == [
        "interrupted"
    ] * 2


async def test_a_paused_routines_fire_ends_its_span_as_paused(
    autojump_clock: Any, spans: InMemorySpanExporter
) -> None:
    scheduler, _, _, _ = rig()
    await scheduler.pause("hourly")
    assert (await scheduler.fire("hourly", at(10))).reason == "paused"
    (fire,) = fires(spans)
    assert (fire.attributes or {})["trio_routines.outcome"] == "paused"


async def test_a_fire_over_its_routines_budget_is_settled_skipped_and_counted(
    autojump_clock: Any,
) -> None:
    hourly = Routine(name="hourly", prompt="p", cron="0 * * * *", budgets="250 tokens/day")
    scheduler, agent, _, wall = rig(hourly, store=MemoryStore())
    agent.script(Complete(duration=1, usage=Usage(input_tokens=300)))
    spent = await scheduler.fire("hourly", at(8))
    wall.jump(timedelta(seconds=5))
    over = await scheduler.fire("hourly", at(9))
    again = await scheduler.fire("hourly", at(10))
    assert spent.outcome is Outcome.COMPLETED
    assert over == FireResult(
        "hourly",
        at(9),
        True,
        outcome=Outcome.SKIPPED,
        ms=0,
        reason="over budget (300 of 250 tokens in the last 24 h)",
    )
    assert over.settled_at == wall()
    assert again.outcome is Outcome.SKIPPED
    assert scheduler.statistics().outcomes == {"completed": 1, "skipped": 2}
    assert len(agent.turns) == 1


class SeesItsHolds(MemoryStore):
    """The memory store, noting at each claim whether the claim's hold is held in it."""

    def __init__(self) -> None:
        super().__init__()
        self.held_at_claim: list[bool] = []

    async def claim(
        self, routine: str, slot: datetime, fired_at: datetime, *, replica: str | None = None
    ) -> ClaimResult:
        self.held_at_claim.append(claim_key(routine, slot) in self.holds)
        return await super().claim(routine, slot, fired_at, replica=replica)


class LiveWithReplica(SeesItsHolds):
    """Claims alive while their replica is, made in steps: the claim's hold covers the making."""

    claims_live_with_replica = True


class WholeOnly(SeesItsHolds):
    """Claims no reader sees half made, yet alive only while their own hold is."""

    claims_appear_whole = True


@pytest.mark.parametrize(
    ("kind", "held_in_the_turn"),
    [(SeesItsHolds, True), (LiveWithReplica, False), (WholeOnly, True)],
)
async def test_a_stores_claim_flags_each_decide_where_the_claims_hold_is_kept(
    autojump_clock: Any, kind: type[SeesItsHolds], held_in_the_turn: bool
) -> None:
    # Each flag alone, as a store of someone else's may declare it: the claim's hold is taken
    # in the store before the claim unless the store's claims both name their replica and
    # appear whole; the store lets go of it once the claim is written only where a written
    # claim lives with its replica -- and this process keeps the slot either way.
    store = kind()
    agent = Gated()
    scheduler = Scheduler(agent=agent, store=store, routines=[YEARLY], now=WallClock(T0))
    key = claim_key("r", SLOT)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await scheduler.start_fire("r", SLOT)
        await trio.testing.wait_all_tasks_blocked()  # the turn runs
        in_the_turn = key in store.holds
        assert await scheduler.fire("r", SLOT) == FireResult("r", SLOT, False, reason="duplicate")
        agent.go.set()
        await trio.testing.wait_all_tasks_blocked()
        scheduler.stop(0)
    assert store.held_at_claim == [True]
    assert in_the_turn is held_in_the_turn
    assert key not in store.holds  # let go with the turn
    assert agent.turns == 1
