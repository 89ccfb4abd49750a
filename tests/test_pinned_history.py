"""Pinned: what history.py reads of a store, and the lines and order it shows.

Written for the mutation run of history.py (docs/mutation.md). The views' tests reach it
through stores of ours, which keep gaps, a ledger and holds: a store of claims only (one of
yours) went unseen, and so did a claim running now, a gap line whole and a tie in slot order.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest

from trio_routines.agent import Usage
from trio_routines.errors import StateFault
from trio_routines.gaps import add_gap
from trio_routines.history import day_spent, gap_line, in_slot_order, read_history, running_slots
from trio_routines.ledger import Spent
from trio_routines.records import Fire, Gap, GapReason, Outcome
from trio_routines.replicas import ReplicaInfo, claim_key
from trio_routines.store import Store
from trio_routines.testing import MemoryStore

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
HOUR = timedelta(hours=1)


SLOT = datetime(2026, 11, 30, 9, tzinfo=UTC)


class ClaimsOnly:
    """A store that keeps claims and nothing else (no gaps, no ledger, no replicas): the
    history of a memory store."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    async def history(self, routine: str) -> list[Fire]:
        return await self.store.history(routine)


class WithHolds(ClaimsOnly):
    """:class:`ClaimsOnly` with the holds of its claims, recording each question; ``short``
    answers for one claim fewer than asked (a broken store)."""

    def __init__(self, store: MemoryStore, *, short: bool = False) -> None:
        super().__init__(store)
        self.short = short
        self.asked: list[list[tuple[str, datetime]]] = []

    async def claims_alive(self, claims: Sequence[tuple[str, datetime]]) -> list[bool]:
        self.asked.append(list(claims))
        alive = await self.store.claims_alive(claims)
        return alive[:-1] if self.short else alive


def fire(hours: int, outcome: Outcome | None) -> Fire:
    return Fire(T0 + hours * HOUR, T0 + hours * HOUR, outcome)


async def test_a_store_of_claims_only_shows_its_claims_and_no_gap() -> None:
    memory = MemoryStore()
    await memory.claim("r", T0, T0)
    fires, gaps = await read_history(cast(Store, ClaimsOnly(memory)), "r")
    assert fires == [Fire(T0, T0)]
    assert gaps == []


async def test_only_the_open_claims_held_by_a_live_replica_are_running() -> None:
    memory = MemoryStore()
    member = await memory.join(ReplicaInfo("a", "0.1.0", "host", 42, T0, T0))
    fires = [fire(0, None), fire(1, Outcome.COMPLETED), fire(2, None), fire(3, None)]
    # The completed claim's hold is still held: it is not asked about, so not running.
    assert await member.take([claim_key("r", T0 + HOUR), claim_key("r", T0 + 2 * HOUR)]) == [
        True,
        True,
    ]
    store = WithHolds(memory)
    assert await running_slots(cast(Store, store), "r", fires) == {T0 + 2 * HOUR}
    assert store.asked == [[("r", T0), ("r", T0 + 2 * HOUR), ("r", T0 + 3 * HOUR)]]


async def test_no_open_claim_or_no_holds_asks_nothing_and_nothing_is_running() -> None:
    memory = MemoryStore()
    store = WithHolds(memory)
    settled = [fire(0, Outcome.COMPLETED), fire(1, Outcome.FAILED)]
    assert await running_slots(cast(Store, store), "r", settled) == set()
    assert await running_slots(cast(Store, store), "r", []) == set()
    assert store.asked == []
    # A store without holds: an open claim is never shown running.
    assert await running_slots(cast(Store, ClaimsOnly(memory)), "r", [fire(0, None)]) == set()


async def test_a_store_answering_for_fewer_claims_than_asked_is_an_error() -> None:
    memory = MemoryStore()
    member = await memory.join(ReplicaInfo("a", "0.1.0", "host", 42, T0, T0))
    assert await member.take([claim_key("r", T0)]) == [True]
    store = WithHolds(memory, short=True)
    with pytest.raises(ValueError, match="shorter"):
        await running_slots(cast(Store, store), "r", [fire(0, None), fire(1, None)])


async def test_without_a_ledger_the_spent_is_what_the_claims_of_the_last_24_hours_say() -> None:
    now = T0 + 30 * HOUR
    fires = [
        # Fired a second before the window: left out.
        Fire(T0, now - 24 * HOUR - timedelta(seconds=1), Outcome.COMPLETED, usage=Usage(1000)),
        # Fired as the window opens: counted.
        Fire(T0 + HOUR, now - 24 * HOUR, Outcome.COMPLETED, usage=Usage(5, 7, 0.25, "USD")),
        Fire(T0 + 2 * HOUR, now - HOUR, Outcome.FAILED, usage=Usage(input_tokens=3)),
        Fire(T0 + 3 * HOUR, now - HOUR, Outcome.COMPLETED),  # reported nothing
    ]
    store = cast(Store, ClaimsOnly(MemoryStore()))
    assert await day_spent(store, "routine", "r", now, fires) == Spent(8, 7, (("USD", 0.25),))
    assert await day_spent(store, "routine", "r", now) == Spent()


def test_a_gap_line_names_its_count_its_span_and_why() -> None:
    one = Gap(T0, T0, 1, GapReason.PAUSED)
    assert gap_line(one) == "missed 1 slot 2026-07-07T10:00:00.000Z: the routine was paused"
    two = Gap(T0, T0 + HOUR, 2, GapReason.OVERLAP)
    assert gap_line(two) == (
        "missed 2 slots 2026-07-07T10:00:00.000Z–2026-07-07T11:00:00.000Z:"
        " the previous turn was still running"
    )
    long = Gap(T0, T0 + 5000 * HOUR, 4000, GapReason.LATE, estimated=True)
    assert gap_line(long, lambda at: at.strftime("%y-%m-%d %H:%M")) == (
        "missed about 4000 slots 26-07-07 10:00–27-01-31 18:00:"
        " no scheduler ran, or it woke late; older than the catch-up window"
    )
    assert gap_line(one, lambda at: at.strftime("%H:%M")) == (
        "missed 1 slot 10:00: the routine was paused"
    )


def test_records_on_the_same_slot_keep_their_order_claims_first() -> None:
    # A gap recorded before the clock went back and a claim of its first slot once it did;
    # and a gap from that same first slot ending later, for another reason, which the gap
    # records keep beside it.
    first = Gap(T0, T0 + HOUR, 2, GapReason.DOWN)
    longer = Gap(T0, T0 + 3 * HOUR, 4, GapReason.LATE)
    gaps = add_gap([first], longer)
    assert gaps == [first, longer]
    claim = fire(0, Outcome.COMPLETED)
    before = fire(-1, Outcome.FAILED)
    assert in_slot_order([before, claim], gaps) == [before, claim, first, longer]


async def test_unreadable_gaps_are_a_fault_unless_the_caller_takes_them_as_none() -> None:
    store = MemoryStore()
    await store.claim("r", SLOT, SLOT)
    fault = StateFault("the gaps are torn")
    store.fail("gaps", fault)
    with pytest.raises(StateFault) as raised:
        await read_history(store, "r")  # the HTTP history: whole, or nothing
    assert raised.value is fault
    told: list[StateFault] = []
    fires, gaps = await read_history(store, "r", told.append)  # the command: its claims
    assert ([f.slot for f in fires], gaps, told) == ([SLOT], [], [fault])
