"""Who may run a turn now: one per session in this process and across every replica.

:class:`Holds` owns the two things that decide it -- the process's
:class:`~trio_routines.sessions.SessionGate` and the replica's
:class:`~trio_routines.presence.Presence` in the store -- and hands out a :class:`TurnHold`
per turn. A fire asks for the hold of its claim in the same step (see
:mod:`trio_routines.replicas`): a claim hold taken elsewhere means another replica is deciding
or running that very slot.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..agent import Agent
from ..errors import StateFault
from ..presence import Presence
from ..records import ClaimResult
from ..replicas import session_key
from ..sessions import Hold, SessionGate
from .state import log


class TurnHold:
    """One turn's holds: ``agent`` to run it with (the busy answer when ``busy``)."""

    __slots__ = (
        "_current",
        "_gate_hold",
        "_keys",
        "_local",
        "_presence",
        "_session",
        "agent",
        "busy",
        "claimed",
    )

    def __init__(
        self,
        gate_hold: Hold,
        agent: Agent,
        presence: Presence,
        keys: list[int],
        *,
        busy: bool,
        claimed: bool,
        current: Callable[[], Presence],
        session: int | None = None,
    ) -> None:
        self._gate_hold: Hold | None = gate_hold
        self._session = session  # the session's key, when it is among ``keys``
        self._presence = presence
        self._current = current  # the replica's presence now: another once this one is lost
        self._keys = keys
        self._local: int | None = None  # held in this process only: the store never heard
        self.agent = agent
        #: The session has a turn in flight, here or in another replica: nothing may start.
        self.busy = busy
        #: The claim's hold was taken (True when none was asked for).
        self.claimed = claimed

    def hold_locally(self, key: int) -> None:
        """``key`` is held in this process only: let go of here, the store never told."""
        if key in self._keys:
            self._keys.remove(key)
            self._local = key

    def let_store_go(self, key: int) -> None:
        """The store lets go of ``key`` now; this process holds it until the turn ends (as
        :meth:`hold_locally`): a claim made and written, which names its replica from then
        on, needs its own hold no more."""
        if key in self._keys:
            self._presence.keep_here((key,))
            self.hold_locally(key)

    def lost(self) -> bool:
        """Whether the store stopped vouching for this turn's holds (its presence was lost,
        perhaps while the claim was on its way): the turn must not start."""
        return self._presence.lost.is_set()

    def end_turn(self) -> None:
        """The turn ended (its usage recorded): let go of its session, here and in the
        store, so that the session's next turn need not wait for this one's settle; the
        claim's hold stays until :meth:`release`. Never raises, never waits."""
        gate_hold, self._gate_hold = self._gate_hold, None
        if gate_hold is not None:
            gate_hold.__exit__(None, None, None)
        if self._session is not None and self._session in self._keys:
            self._keys.remove(self._session)
            self._let_go([self._session])

    def release(self) -> None:
        """Let go of everything this turn holds (once; never raises, never waits)."""
        gate_hold, self._gate_hold = self._gate_hold, None
        if gate_hold is not None:
            gate_hold.__exit__(None, None, None)
        keys, self._keys = self._keys, []
        if keys:
            self._let_go(keys)
        local, self._local = self._local, None
        if local is not None:
            self._presence.forget((local,))

    def _let_go(self, keys: list[int]) -> None:
        self._presence.let_go(keys)
        if self.lost():
            # A hold written for the lost presence after the replica joined again (a claim
            # committed late) names this replica as the holder: nobody else could take its
            # session while the replica lives. The presence now lets it go.
            try:
                now = self._current()
            except StateFault:  # not joined now: a join after this drops our rows
                now = self._presence
            if now is not self._presence:
                now.let_go_orphans(keys)


class Holds:
    """The process's session gate and the replica's presence, as one decision per turn."""

    def __init__(self, gate: SessionGate, presence: Callable[[], Presence]) -> None:
        self.gate = gate
        self._presence = presence  # the current one: a lost presence is replaced

    async def enter(self, session: str, claim: int | None = None) -> TurnHold:
        """Hold ``session`` (and the claim ``claim``, a key) for one turn.

        Raises StateFault when the store cannot answer; nothing is held then.
        """
        presence, gate_hold, agent, wanted = self._begin(session, claim)
        try:
            taken = await presence.take(wanted)
        except BaseException:
            gate_hold.__exit__(None, None, None)
            raise
        return self._finish(presence, gate_hold, agent, wanted, taken, claim)

    async def enter_whole(
        self,
        session: str,
        claim: int,
        decide: Callable[..., Awaitable[ClaimResult]],
        args: tuple[Any, ...],
        options: Mapping[str, Any],
    ) -> tuple[TurnHold, ClaimResult | None]:
        """:meth:`enter` for a store whose claims no reader sees half made
        (``claims_appear_whole``): each names its replica from the first, and is alive while
        that replica is. The claim's key is held in this process only (a second fire of the
        slot here is a duplicate without asking); ``decide(*args, **options)`` claims the
        slot, and only then, if it was taken, is the session's hold taken in the store: the
        replicas that lose the slot never ask for it, so a session found busy is another
        turn's, never another replica's fire of this very slot. None: the slot is held here
        already. A session's hold the store cannot answer for after the slot is taken makes
        the turn busy (the slot is claimed: it is settled, not left open)."""
        presence, gate_hold, agent, wanted = self._begin(session, claim)
        try:
            if not presence.reserve(wanted[:1])[0]:  # this very slot is decided or run here
                refused = [False] * len(wanted)
                return self._finish(presence, gate_hold, agent, wanted, refused, claim), None
            result = await decide(*args, **options)
            taken = [False] * (len(wanted) - 1)
            if not result.taken:
                presence.forget(wanted[:1])
            elif taken:
                try:
                    taken = await presence.take(wanted[1:])
                except StateFault as exc:
                    log.warning("%s: could not take the session's hold: %s", session, exc)
        except BaseException:
            presence.forget(wanted[:1])
            gate_hold.__exit__(None, None, None)
            raise
        hold = self._finish(presence, gate_hold, agent, wanted, [result.taken, *taken], claim)
        hold.hold_locally(claim)
        return hold, result

    async def enter_claiming(
        self,
        session: str,
        claim: int,
        decide: Callable[..., Awaitable[ClaimResult]],
        args: tuple[Any, ...],
        options: Mapping[str, Any],
    ) -> tuple[TurnHold, ClaimResult | None]:
        """:meth:`enter` for a store whose claims are their own holds (``claims_take_holds``:
        a claim names its replica, and is alive while that replica is):
        ``decide(*args, holds=..., **options)`` claims the slot and takes the session's hold
        in the same step. The claim's key is held in this process only, so that a second
        fire of the slot here is a duplicate without asking. No claim is asked for when it is
        held here already (None then)."""
        presence, gate_hold, agent, wanted = self._begin(session, claim)
        free = presence.reserve(wanted)
        if not free[0]:  # this very slot is being decided or run here
            presence.granted(wanted, [not ok for ok in free])  # keep what was held before
            return self._finish(
                presence, gate_hold, agent, wanted, [False] * len(wanted), claim
            ), None
        sent = tuple(key for key, ok in zip(wanted[1:], free[1:], strict=True) if ok)
        del free
        try:
            if presence.letting_go(sent):  # our previous turn's, say: it reaches the store first
                await presence.let_go_now()
            result = await decide(*args, holds=(presence.holder, sent), **options)
        except BaseException:
            presence.forget((claim,))
            presence.abandoned(sent)
            gate_hold.__exit__(None, None, None)
            raise
        answers = dict(zip(sent, result.holds or (False,) * len(sent), strict=True))
        presence.granted(sent, [answers[key] for key in sent])
        if not result.taken:
            presence.forget((claim,))
        answers[claim] = result.taken
        taken = [answers.get(key, False) for key in wanted]
        hold = self._finish(presence, gate_hold, agent, wanted, taken, claim)
        hold.hold_locally(claim)
        return hold, result

    def _begin(self, session: str, claim: int | None) -> tuple[Presence, Hold, Agent, list[int]]:
        presence = self._presence()
        if presence.lost.is_set():
            # Until the store takes us back, nothing is held, so nothing is claimed: a claim
            # whose session's hold the store then refused would burn its slot as busy.
            raise presence.lost_fault()
        gate_hold = self.gate.hold(session)
        agent = gate_hold.__enter__()
        wanted = [] if claim is None else [claim]
        if not gate_hold.refused:  # busy here already: the store need not be asked
            wanted.append(session_key(session))
        return presence, gate_hold, agent, wanted

    def _finish(
        self,
        presence: Presence,
        gate_hold: Hold,
        agent: Agent,
        wanted: list[int],
        taken: list[bool],
        claim: int | None,
    ) -> TurnHold:
        # One answer per key, by construction (a store's count is checked by Presence.granted).
        # Every key taken, the common case: no zip (its ``strict=`` is a keyword to parse).
        if all(taken):
            got = list(wanted)
        else:
            got = [key for key, ok in zip(wanted, taken, strict=True) if ok]
        claimed = claim is None or taken[0]
        busy = gate_hold.refused or not taken[-1]
        session = wanted[-1] if wanted and not gate_hold.refused else None
        hold = TurnHold(
            gate_hold,
            agent,
            presence,
            got,
            busy=busy,
            claimed=claimed,
            current=self._presence,
            session=session,
        )
        if busy and not gate_hold.refused:
            # Another replica runs a turn of the session: answer busy, as the gate does here.
            gate_hold.__exit__(None, None, None)
            hold._gate_hold = None
            hold.agent = self.gate.busy_agent
        return hold
