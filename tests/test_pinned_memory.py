"""Pins of the memory store's fault injection and members (``scripts/mutation.py memory``):
each operation fails, or stalls, under its own name and no other's; a fault given a routine
fails only the calls about that routine (a ledger's: a routine's, not a session's); a fault
for a number of calls ends after them and a later ``fail`` replaces it whole; a settle's fault
is logged and swallowed; and a member's flags as the store's ``replicas`` shows them.

Written for the mutation run of ``trio_routines/testing/`` (docs/mutation.md): embedders test
their code against this store, so what it promises them is tested as a store's would be.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import attrs
import pytest
import trio

from trio_routines.errors import StateFault, UnsafeName
from trio_routines.records import ClaimStatus, Gap, GapReason, Outcome, Wakeup
from trio_routines.replicas import ReplicaInfo
from trio_routines.testing import MemoryPresence, MemoryStore
from trio_routines.usage import Usage
from trio_routines.wakelimits import RATE_WINDOW
from trio_routines.wakeups import WakeupRequest

T0 = datetime(2026, 7, 7, 10, 0, tzinfo=UTC)
_IDS = itertools.count(1)
Call = Callable[["Ready", str], Awaitable[object]]


class Boom(Exception):
    pass


def _info() -> ReplicaInfo:
    return ReplicaInfo(f"replica-{next(_IDS)}", "0.1.0", "host", 1, T0, T0)


@attrs.define
class Ready:
    """A store with a wake-up pending (not due at T0) and a member, made before any fault."""

    store: MemoryStore
    wakeup: Wakeup
    member: MemoryPresence


async def ready_store() -> Ready:
    store = MemoryStore()
    later = WakeupRequest(session="s", prompt="hi", fire_at=T0 + timedelta(hours=1))
    wakeup = await store.add_wakeup(later, T0)
    return Ready(store, wakeup, await store.join(_info()))


GAP = Gap(T0, T0, 1, GapReason.DOWN)
USAGE = Usage(input_tokens=1)
ASKED = WakeupRequest(session="s", prompt="hi", fire_at=T0 + timedelta(hours=2))

# Every operation the store can be made to fail or stall, and a call of it about a routine.
CALLS: dict[str, Call] = {
    "claim": lambda x, r: x.store.claim(r, T0, T0),
    "latest_fire": lambda x, r: x.store.latest_fire(r),
    "history": lambda x, r: x.store.history(r),
    "add_wakeup": lambda x, r: x.store.add_wakeup(ASKED, T0),
    "take_due_wakeup": lambda x, r: x.store.take_due_wakeup(T0),
    "defer_wakeup": lambda x, r: x.store.defer_wakeup(x.wakeup, T0 + timedelta(hours=3)),
    "remove_wakeup": lambda x, r: x.store.remove_wakeup("w"),
    "list_wakeups": lambda x, r: x.store.list_wakeups(),
    "ready": lambda x, r: x.store.ready(),
    "set_paused": lambda x, r: x.store.set_paused(r, True),
    "resumed_at": lambda x, r: x.store.resumed_at(r),
    "paused_since": lambda x, r: x.store.paused_since(r),
    "resumed_pause_since": lambda x, r: x.store.resumed_pause_since(r),
    "record_gap": lambda x, r: x.store.record_gap(r, GAP),
    "gaps": lambda x, r: x.store.gaps(r),
    "record_usage": lambda x, r: x.store.record_usage("routine", r, T0, USAGE),
    "usage_since": lambda x, r: x.store.usage_since("routine", r, T0),
    "first_armed": lambda x, r: x.store.first_armed([r], T0),
    "note_wake_turn": lambda x, r: x.store.note_wake_turn("s", T0),
    "wake_turns": lambda x, r: x.store.wake_turns("s", T0 - timedelta(hours=1)),
    "paused": lambda x, r: x.store.paused(),
    "join": lambda x, r: x.store.join(_info()),
    "open_claims": lambda x, r: x.store.open_claims([r], 10),
    "claims_alive": lambda x, r: x.store.claims_alive([(r, T0)]),
    "sessions_held": lambda x, r: x.store.sessions_held([f"routine:{r}"]),
    "replicas": lambda x, r: x.store.replicas(),
    "take": lambda x, r: x.member.take([next(_IDS)]),
    "beat": lambda x, r: x.member.beat(0, T0),
}
# Operations made of another: joining takes the replica's own hold.
AS_WELL = {"take": ("join",)}
# Those whose fault may be given a routine: only the calls about it fail.
ABOUT_A_ROUTINE = ["claim", "latest_fire", "history", "set_paused", "resumed_at", "record_gap"]
ABOUT_A_ROUTINE += ["paused_since", "resumed_pause_since"]
ABOUT_A_ROUTINE += ["gaps", "record_usage", "usage_since"]


@pytest.mark.parametrize("operation", sorted(CALLS))
async def test_a_fault_fails_its_own_operation_and_no_other(operation: str) -> None:
    x = await ready_store()
    x.store.fail(operation, Boom(operation))
    with pytest.raises(Boom) as caught:
        await CALLS[operation](x, "r")
    assert str(caught.value) == operation
    for other, call in CALLS.items():
        if other not in (operation, *AS_WELL.get(operation, ())):
            await call(x, "r")  # the others answer


@pytest.mark.parametrize("operation", sorted(CALLS))
async def test_a_stall_stalls_its_own_operation_until_cancelled_and_no_other(
    operation: str, autojump_clock: trio.testing.MockClock
) -> None:
    x = await ready_store()
    x.store.hang(operation)
    with trio.move_on_after(60) as scope:
        await CALLS[operation](x, "r")
    assert scope.cancelled_caught
    for other, call in CALLS.items():
        if other not in (operation, *AS_WELL.get(operation, ())):
            with trio.fail_after(60):
                await call(x, "r")  # the others answer
    x.store.hangs.discard(operation)
    with trio.fail_after(60):
        await CALLS[operation](x, "r")


@pytest.mark.parametrize("operation", ABOUT_A_ROUTINE)
async def test_a_fault_given_a_routine_fails_only_the_calls_about_it(operation: str) -> None:
    x = await ready_store()
    x.store.fail(operation, Boom(operation), routine="a")
    await CALLS[operation](x, "b")  # another routine's
    with pytest.raises(Boom):
        await CALLS[operation](x, "a")
    with pytest.raises(Boom):
        await CALLS[operation](x, "a")  # until removed
    del x.store.faults[operation]
    await CALLS[operation](x, "a")


@pytest.mark.parametrize("operation", ["record_usage", "usage_since"])
async def test_a_ledger_fault_given_a_routine_leaves_the_sessions_ledgers_alone(
    operation: str,
) -> None:
    store = MemoryStore()
    store.fail(operation, Boom(operation), routine="a")
    if operation == "record_usage":
        await store.record_usage("session", "a", T0, USAGE)
    else:
        await store.usage_since("session", "a", T0)
    with pytest.raises(Boom):
        await CALLS[operation](Ready(store, None, None), "a")  # type: ignore[arg-type]
    # Without a routine, a session's ledger fails too.
    store.fail(operation, Boom(operation))
    call = (
        store.record_usage("session", "a", T0, USAGE)
        if operation == "record_usage"
        else store.usage_since("session", "a", T0)
    )
    with pytest.raises(Boom):
        await call


async def test_a_fault_for_some_calls_ends_after_them_and_a_later_fail_replaces_it() -> None:
    store = MemoryStore()
    store.fail("latest_fire", Boom("twice"), times=2, routine="a")
    await store.latest_fire("b")  # not about "a": does not count
    for _ in range(2):
        with pytest.raises(Boom):
            await store.latest_fire("a")
    assert await store.latest_fire("a") is None
    assert "latest_fire" not in store.faults
    # A count and a routine set once are gone when the fault is set again without them.
    store.fail("history", Boom("once"), times=1, routine="a")
    store.fail("history", Boom("always"))
    for routine in ("a", "b", "a"):
        with pytest.raises(Boom) as caught:
            await store.history(routine)
        assert str(caught.value) == "always"


async def test_a_routine_scoped_claim_fault_and_every_new_name_checked() -> None:
    store = MemoryStore()
    store.fail("claim", Boom("claim"), routine="a")
    assert (await store.claim("b", T0, T0)).status is ClaimStatus.TAKEN
    assert (await store.claim("b", T0 + timedelta(minutes=1), T0)).status is ClaimStatus.TAKEN
    with pytest.raises(Boom):
        await store.claim("a", T0, T0)
    del store.faults["claim"]
    assert (await store.claim("a", T0, T0)).status is ClaimStatus.TAKEN
    with pytest.raises(UnsafeName):
        await store.claim("a/b", T0, T0)  # a name is checked, even after others were known


async def test_a_settle_fault_is_logged_with_its_slot_and_swallowed_for_its_routine_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    for routine in ("a", "b"):
        await store.claim(routine, T0, T0)
    store.fail("settle", Boom("disk gone"), routine="a")
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert await store.settle("b", T0, Outcome.COMPLETED, 5) is True
        assert await store.settle("a", T0, Outcome.FAILED, 5) is False
    assert [r.getMessage() for r in caplog.records] == [
        "a: could not record the failed outcome of slot 2026-07-07T10:00:00.000Z: disk gone"
    ]
    assert (await store.latest_fire("b")).outcome is Outcome.COMPLETED  # type: ignore[union-attr]
    assert (await store.latest_fire("a")).outcome is None  # type: ignore[union-attr]


async def test_latest_fire_of_a_routine_never_claimed_is_none_and_its_history_empty() -> None:
    store = MemoryStore()
    await store.claim("other", T0, T0)
    assert await store.latest_fire("never") is None
    assert await store.history("never") == []


async def test_a_member_alive_vanished_and_lost_as_replicas_shows_them() -> None:
    store = MemoryStore()
    infos = [ReplicaInfo(name, "0.1.0", "host", 1, T0, T0) for name in ("up", "gone", "cut")]
    up, gone, cut = [await store.join(info) for info in infos]
    assert [(r.id, r.alive) for r in await store.replicas()] == [
        ("up", True),
        ("gone", True),
        ("cut", True),
    ]
    assert up.dead is False
    gone.vanish()
    cut.lose()
    assert (gone.dead, cut.dead) == (True, True)
    assert [(r.id, r.alive) for r in await store.replicas()] == [
        ("up", True),
        ("gone", False),
        ("cut", False),
    ]
    with pytest.raises(StateFault) as caught:
        await cut.take([1])
    assert str(caught.value) == "replica cut lost its hold on the memory store"
    assert await up.take([1]) == [True]


async def test_turns_of_other_sessions_are_kept_only_inside_the_window_before_the_newest() -> None:
    store = MemoryStore()
    await store.note_wake_turn("a", T0)
    await store.note_wake_turn("c", T0 + timedelta(seconds=1))
    # The newest turn of any session: "a"'s is then exactly a window old, "c"'s inside it.
    await store.note_wake_turn("b", T0 + RATE_WINDOW)
    since = T0 - timedelta(hours=2)
    assert await store.wake_turns("a", since) == []
    assert await store.wake_turns("c", since) == [T0 + timedelta(seconds=1)]
    assert sorted(store.turns) == ["b", "c"]  # a session with none left is forgotten


def test_only_the_stores_own_operations_can_be_made_to_fail_or_hang() -> None:
    # A misspelt one ("claims") did nothing: a test then passed for the wrong reason.
    from trio_routines.testing.faults import OPERATIONS

    assert set(CALLS) | {"settle"} == OPERATIONS  # (a settle that fails answers False)
    store = MemoryStore()
    for misspelt in ("claims", "Claim", ""):
        said = f"the memory store has no operation {misspelt!r}: one of add_wakeup, beat, claim,"
        with pytest.raises(ValueError, match=f"^{re.escape(said)}"):
            store.fail(misspelt, StateFault("x"))
        with pytest.raises(ValueError, match=f"^{re.escape(said)}"):
            store.hang(misspelt)
    assert store.faults == {}
    assert store.hangs == set()
