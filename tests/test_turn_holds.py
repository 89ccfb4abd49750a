"""The scheduler's holds of a turn (scheduler/holds.py), against a presence that records what
its store is asked: the plain way (every key taken in the store), a store that takes the
session's hold in the claim's own step (PostgreSQL), and a store whose claims are never seen
half made (the state directory). Whatever the path, once the turn's hold is released the
presence and the session gate are as they were before it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from trio_routines.agent import Completed, Event
from trio_routines.errors import StateFault
from trio_routines.presence import Presence
from trio_routines.records import ClaimResult, ClaimStatus
from trio_routines.replicas import ReplicaInfo, session_key
from trio_routines.scheduler.holds import Holds
from trio_routines.sessions import SessionGate

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
CLAIM = 7
S = session_key("s")


class Agent:
    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        yield Completed()


class Asked(Presence):
    """A presence whose store grants what ``grant`` says (every key by default), records the
    keys it is asked to take and those it lets go of, and fails with ``error`` if set."""

    def __init__(self) -> None:
        super().__init__(ReplicaInfo("a", "0.1.0", "host", 42, T0, T0))
        self.asked: list[int] = []
        self.gone: list[int] = []
        self.grant = True
        self.error: BaseException | None = None

    async def _take(self, keys: list[int]) -> list[bool]:
        self.asked += keys
        if self.error is not None:
            raise self.error
        return [self.grant] * len(keys)

    def _let_go(self, keys: list[int]) -> None:
        self.gone += keys


def setup() -> tuple[Asked, SessionGate, Holds]:
    presence = Asked()
    gate = SessionGate(Agent())
    return presence, gate, Holds(gate, lambda: presence)


def untouched(presence: Asked, gate: SessionGate) -> None:
    assert not presence.holds(CLAIM)
    assert not presence.holds(S)
    assert not gate.busy("s")


class Decide:
    """A store's claim: answers ``status`` (and ``holds``, the answers for the holds asked
    with the claim), or raises ``error``; records each call's keyword arguments."""

    def __init__(
        self,
        status: ClaimStatus = ClaimStatus.TAKEN,
        holds: tuple[bool, ...] | None = None,
        presence: Asked | None = None,
    ) -> None:
        self.status = status
        self.holds = holds
        self.presence = presence
        self.error: BaseException | None = None
        self.calls: list[dict[str, Any]] = []
        self.args: list[tuple[Any, ...]] = []
        #: With ``presence``: the keys its store had been asked for at each call.
        self.asked: list[list[int]] = []

    async def __call__(self, *args: Any, **options: Any) -> ClaimResult:
        self.calls.append(options)
        self.args.append(args)
        if self.presence is not None:
            self.asked.append(list(self.presence.asked))
        if self.error is not None:
            raise self.error
        return ClaimResult(self.status, "n", self.holds)


# -- the plain way --------------------------------------------------------------------------


async def test_a_turn_without_a_claim_asks_for_its_session_only() -> None:
    presence, gate, holds = setup()
    hold = await holds.enter("s")
    assert (hold.claimed, hold.busy) == (True, False)
    assert hold.agent is gate.agent
    assert presence.asked == [S]
    hold.release()
    assert presence.gone == [S]
    untouched(presence, gate)


async def test_a_session_busy_in_another_replica_answers_busy() -> None:
    presence, gate, holds = setup()
    presence.grant = False
    hold = await holds.enter("s", CLAIM)
    assert (hold.claimed, hold.busy) == (False, True)
    assert hold.agent is gate.busy_agent
    assert not gate.busy("s")  # let go at once: the turn is not ours to run
    hold.release()
    untouched(presence, gate)


async def test_a_session_busy_here_asks_the_store_for_the_claim_only() -> None:
    presence, gate, holds = setup()
    first = await holds.enter("s")
    hold = await holds.enter("s", CLAIM)
    assert (hold.claimed, hold.busy) == (True, True)
    assert hold.agent is gate.busy_agent
    assert presence.asked == [S, CLAIM]
    hold.release()
    first.release()
    untouched(presence, gate)


# -- the session's hold in the claim's own step (PostgreSQL) ---------------------------------


async def test_a_claim_that_takes_its_session_hold_in_its_own_step() -> None:
    presence, gate, holds = setup()
    decide = Decide(holds=(True,))
    hold, claim = await holds.enter_claiming("s", CLAIM, decide, ("r",), {"replica": "a"})
    assert claim is not None
    assert claim.taken
    assert decide.calls == [{"holds": (presence.holder, (S,)), "replica": "a"}]
    assert decide.args == [("r",)]
    assert (hold.claimed, hold.busy) == (True, False)
    assert hold.agent is gate.agent
    assert presence.asked == []  # both in the claim's step
    assert presence.holds(CLAIM)
    assert presence.holds(S)
    hold.release()
    assert presence.gone == [S]  # the claim's key was never the store's to let go of
    untouched(presence, gate)


async def test_a_claim_whose_session_is_busy_elsewhere_is_taken_and_busy() -> None:
    presence, gate, holds = setup()
    hold, claim = await holds.enter_claiming("s", CLAIM, Decide(holds=(False,)), (), {})
    assert claim is not None
    assert claim.taken
    assert (hold.claimed, hold.busy) == (True, True)
    assert hold.agent is gate.busy_agent
    assert presence.holds(CLAIM)
    assert not presence.holds(S)
    assert not gate.busy("s")
    hold.release()
    assert presence.gone == []
    untouched(presence, gate)


@pytest.mark.parametrize("status", [ClaimStatus.DUPLICATE, ClaimStatus.STALE])
async def test_a_claim_lost_keeps_nothing_but_the_session_it_was_granted(
    status: ClaimStatus,
) -> None:
    presence, gate, holds = setup()
    hold, claim = await holds.enter_claiming("s", CLAIM, Decide(status, (True,)), (), {})
    assert claim is not None
    assert claim.status is status
    assert not hold.claimed
    assert not presence.holds(CLAIM)
    hold.release()
    assert presence.gone == [S]
    untouched(presence, gate)


async def test_a_slot_held_here_asks_nothing_and_keeps_what_was_held() -> None:
    presence, gate, holds = setup()
    decide = Decide(holds=(True,))
    first, _ = await holds.enter_claiming("t", CLAIM, decide, (), {})
    hold, claim = await holds.enter_claiming("s", CLAIM, decide, (), {})
    assert claim is None
    assert len(decide.calls) == 1
    assert (hold.claimed, hold.busy) == (False, True)
    assert not gate.busy("s")
    hold.release()
    assert presence.holds(CLAIM)  # still the first turn's
    assert presence.holds(session_key("t"))
    first.release()
    untouched(presence, gate)


async def test_a_store_that_answers_no_holds_granted_none() -> None:
    presence, gate, holds = setup()
    hold, claim = await holds.enter_claiming("s", CLAIM, Decide(holds=None), (), {})
    assert claim is not None
    assert claim.taken
    assert (hold.claimed, hold.busy) == (True, True)
    assert not presence.holds(S)
    hold.release()
    untouched(presence, gate)


async def test_a_session_key_held_here_outside_the_gate_is_not_asked_and_is_busy() -> None:
    presence, gate, holds = setup()
    presence.reserve([S])  # held by this presence for some other turn of the session
    decide = Decide()
    hold, _ = await holds.enter_claiming("s", CLAIM, decide, (), {})
    assert decide.calls == [{"holds": (presence.holder, ())}]
    assert (hold.claimed, hold.busy) == (True, True)
    hold.release()
    assert presence.holds(S)  # still the other turn's
    presence.forget([S])
    untouched(presence, gate)


@pytest.mark.parametrize("enter", ["enter_claiming", "enter_whole"])
async def test_a_slot_held_here_while_its_session_runs_here_answers_busy(enter: str) -> None:
    presence, gate, holds = setup()
    first = await holds.enter("s")
    decide = Decide()
    taken, _ = await getattr(holds, enter)("t", CLAIM, decide, (), {})
    hold, claim = await getattr(holds, enter)("s", CLAIM, decide, (), {})
    assert claim is None
    assert (hold.claimed, hold.busy) == (False, True)
    assert hold.agent is gate.busy_agent
    hold.release()
    taken.release()
    first.release()
    untouched(presence, gate)


async def test_a_session_busy_here_is_not_asked_with_the_claim() -> None:
    presence, gate, holds = setup()
    first = await holds.enter("s")
    decide = Decide()
    hold, claim = await holds.enter_claiming("s", CLAIM, decide, (), {})
    assert claim is not None
    assert claim.taken
    assert decide.calls == [{"holds": (presence.holder, ())}]
    assert (hold.claimed, hold.busy) == (True, True)
    assert hold.agent is gate.busy_agent
    hold.release()
    first.release()
    untouched(presence, gate)


async def test_a_claim_that_fails_lets_go_of_every_hold_it_asked_for() -> None:
    presence, gate, holds = setup()
    decide = Decide()
    decide.error = StateFault("the server went away")
    with pytest.raises(StateFault, match="went away"):
        await holds.enter_claiming("s", CLAIM, decide, (), {})
    assert presence.gone == [S]  # the store may have granted it: let go
    untouched(presence, gate)


# -- claims never seen half made (the state directory) ---------------------------------------


async def test_a_whole_claim_is_held_here_and_its_session_asked_only_once_it_is_taken() -> None:
    presence, gate, holds = setup()
    decide = Decide(presence=presence)
    hold, claim = await holds.enter_whole("s", CLAIM, decide, ("r",), {})
    assert claim is not None
    assert claim.taken
    assert decide.asked == [[]]  # the claim first: the store asked nothing before it
    assert (hold.claimed, hold.busy) == (True, False)
    assert presence.asked == [S]
    assert presence.holds(CLAIM)
    again, none = await holds.enter_whole("t", CLAIM, decide, ("r",), {})  # held here
    assert none is None
    assert (again.claimed, again.busy) == (False, True)
    assert len(decide.calls) == 1  # a duplicate here: the store not asked
    assert not gate.busy("t")
    again.release()
    busy, claim = await holds.enter_whole("s", 8, decide, ("r",), {})  # the session runs here
    assert claim is not None
    assert claim.taken
    assert (busy.claimed, busy.busy) == (True, True)
    busy.release()
    assert not presence.holds(8)
    assert presence.asked == [S]  # neither asked the store for anything
    hold.release()
    assert presence.gone == [S]  # the claim's key was never the store's
    untouched(presence, gate)


@pytest.mark.parametrize("status", [ClaimStatus.DUPLICATE, ClaimStatus.STALE])
async def test_a_slot_lost_asks_for_no_session_hold(status: ClaimStatus) -> None:
    presence, gate, holds = setup()
    hold, claim = await holds.enter_whole("s", CLAIM, Decide(status), (), {})
    assert claim is not None
    assert claim.status is status
    assert not hold.claimed
    assert presence.asked == []  # another replica's fire of this slot never makes ours busy
    assert not presence.holds(CLAIM)
    hold.release()
    untouched(presence, gate)


async def test_a_claim_that_fails_keeps_nothing_held() -> None:
    presence, gate, holds = setup()
    decide = Decide()
    decide.error = StateFault("the disk is gone")
    with pytest.raises(StateFault, match="gone"):
        await holds.enter_whole("s", CLAIM, decide, (), {})
    untouched(presence, gate)
    assert presence.asked == []


async def test_a_session_hold_the_store_cannot_answer_for_makes_a_taken_slot_busy(
    caplog: pytest.LogCaptureFixture,
) -> None:
    presence, gate, holds = setup()
    presence.error = StateFault("the store is down")
    hold, claim = await holds.enter_whole("s", CLAIM, Decide(), (), {})
    assert claim is not None
    assert claim.taken
    assert (hold.claimed, hold.busy) == (True, True)  # settled, never left open
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        "s: could not take the session's hold: the store is down"
    ]
    assert not gate.busy("s")
    hold.release()
    untouched(presence, gate)


async def test_a_session_hold_that_raises_after_the_claim_lets_go_of_everything() -> None:
    presence, gate, holds = setup()
    presence.error = RuntimeError("a presence of someone else's")
    with pytest.raises(RuntimeError, match="someone else"):
        await holds.enter_whole("s", CLAIM, Decide(), (), {})
    untouched(presence, gate)


@pytest.mark.parametrize("ends", ["raises", "lost"])
async def test_a_whole_claim_not_taken_lets_go_of_its_own_key_only(ends: str) -> None:
    presence, gate, holds = setup()
    presence.reserve([S])  # held by this presence for some other turn of the session
    decide = Decide(ClaimStatus.DUPLICATE)
    if ends == "raises":
        decide.error = StateFault("the disk is gone")
        with pytest.raises(StateFault):
            await holds.enter_whole("s", CLAIM, decide, (), {})
    else:
        hold, _ = await holds.enter_whole("s", CLAIM, decide, (), {})
        hold.release()
    assert presence.holds(S)  # the other turn's, untouched
    presence.forget([S])
    untouched(presence, gate)


@pytest.mark.parametrize("path", ["enter", "enter_claiming", "enter_whole"])
async def test_a_lost_presence_holds_nothing_and_claims_nothing(path: str) -> None:
    # Until the store takes the replica back, a fire fails before its claim: a claim whose
    # session's hold the store then refuses would burn its slot as busy (PostgreSQL's own
    # hold rows, of the presence before, answered "busy").
    presence, gate, holds = setup()
    presence.lost.set()
    decided: list[Any] = []

    async def decide(*args: Any, **options: Any) -> ClaimResult:
        decided.append(args)
        return ClaimResult(ClaimStatus.TAKEN, "slot", holds=(True,))

    call = (
        holds.enter("s", CLAIM)
        if path == "enter"
        else getattr(holds, path)("s", CLAIM, decide, (), {})
    )
    with pytest.raises(StateFault) as raised:
        await call
    assert str(raised.value) == "replica a lost its hold on its store"
    assert decided == []
    assert presence.asked == []
    assert not presence.holds(CLAIM)
    free = gate.hold("s")  # the session is free here too
    free.__enter__()
    assert not free.refused
    free.__exit__(None, None, None)


# -- a turn that ended, its settle under way --------------------------------------------------


@pytest.mark.parametrize("path", ["plain", "claiming", "whole"])
async def test_a_turn_that_ended_lets_its_session_go_and_keeps_its_claim(path: str) -> None:
    # The session's next turn need not wait for this one's settle; a second fire of the slot
    # still finds the claim held until the settle.
    presence, gate, holds = setup()
    if path == "plain":
        hold = await holds.enter("s", CLAIM)
    elif path == "claiming":
        hold, _ = await holds.enter_claiming("s", CLAIM, Decide(holds=(True,)), (), {})
    else:
        hold, _ = await holds.enter_whole("s", CLAIM, Decide(), (), {})
    assert gate.busy("s")
    hold.end_turn()
    assert not gate.busy("s")
    assert not presence.holds(S)
    assert presence.gone == [S]
    assert presence.holds(CLAIM)
    hold.end_turn()  # once: nothing more to let go of
    assert presence.gone == [S]
    nxt = await holds.enter("s")  # the session's next turn, here
    assert (nxt.claimed, nxt.busy) == (True, False)
    nxt.release()
    hold.release()
    assert presence.gone == ([S, S, CLAIM] if path == "plain" else [S, S])
    untouched(presence, gate)


async def test_a_busy_turn_that_ended_lets_go_of_nothing_it_did_not_take() -> None:
    presence, gate, holds = setup()
    first = await holds.enter("s")
    busy = await holds.enter("s", CLAIM)  # the session runs here: busy, its claim taken
    busy.end_turn()
    assert gate.busy("s")  # the first turn's, still running
    assert presence.holds(S)
    assert presence.gone == []
    busy.release()
    first.release()
    untouched(presence, gate)


async def test_a_wake_up_turn_records_what_it_spent_before_its_session_goes(
    autojump_clock: Any,
) -> None:
    # The session's next turn, on any replica, checks its budget against the ledger: a turn
    # that let go first could be followed by one that does not yet see what it spent.
    import trio

    from trio_routines import Scheduler
    from trio_routines.agent import Usage
    from trio_routines.testing import MemoryStore, WallClock

    held_then: list[bool] = []

    class Ledger(MemoryStore):
        async def record_usage(self, kind: str, name: str, at: Any, usage: Any) -> None:
            held_then.append(S in self.holds)
            await super().record_usage(kind, name, at, usage)

    class Spends:
        async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
            yield Usage(input_tokens=5, output_tokens=1)
            yield Completed()

    scheduler = Scheduler(agent=Spends(), store=Ledger(), now=WallClock(T0), poll_interval=5)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await scheduler.add_wakeup("s", "p", delay="1m")
        await trio.sleep(120)
        scheduler.stop()
    assert held_then == [True]  # the session's ledger, written while the session is held
