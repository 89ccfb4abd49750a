"""The replica's membership of its store: joined while anything runs, and whose claims live.

:class:`Membership` owns the replica's :class:`~trio_routines.presence.Presence` -- the hold
of its id in the store -- and who shares it: :meth:`Membership.present` is entered by the
run, by each external fire and by each claim-less run, and the last block to end leaves the
store. The holds of turns (:mod:`.holds`) ask it for the current presence, the boot and the
watches ask it whether an open claim's holder is alive, and the member watch replaces a
lost presence (:meth:`Membership.rejoin`).
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TypeVar

import outcome
import trio

from ..errors import StateFault
from ..presence import LocalPresence, Presence
from ..records import Fire
from ..replicas import ReplicaInfo, claim_key
from ..store import Store
from .calls import STOP_MARGIN, StoreCalls
from .foreach import for_each
from .grace import Grace
from .state import Runtime, log

T = TypeVar("T")
#: Seconds between two looks of a one-shot's guard at its presence, besides every hint.
GUARD_EVERY = 30.0
LOOK_AT_LEAST = 1.0  # seconds between two looks at a presence, whatever the hints


class Looks:
    """The pace at which a watch looks at ``presence``: at each hint that it may be lost
    (:meth:`~trio_routines.presence.Presence.stirred`) and every ``every`` seconds, never
    sooner than :data:`LOOK_AT_LEAST` after the last look (a hint never makes a spin)."""

    def __init__(self, presence: Presence, every: float) -> None:
        self._presence = presence
        self._every = every
        self._looked = -math.inf

    async def next(self) -> bool:
        """Wait for the next look: True when it is time for one, False (at once) once the
        presence is lost."""
        lost = self._presence.lost
        with trio.move_on_after(self._every):
            await self._presence.stirred()  # lost, or a hint that it may be: look now
        if lost.is_set():
            return False
        await trio.sleep_until(self._looked + LOOK_AT_LEAST)
        self.looked()
        return not lost.is_set()  # lost meanwhile

    def looked(self) -> None:
        """A look is made now: the next comes no sooner than :data:`LOOK_AT_LEAST` after."""
        self._looked = trio.current_time()


class Membership:
    """This replica's presence in ``store``; collaborators: the :class:`Runtime` (its id,
    the wall clock, the turns in flight), the :class:`StoreCalls` (the bound of each call)
    and the :class:`Grace` (whose turns a one-shot's guard ends, see :meth:`guarded`)."""

    def __init__(self, store: Store, runtime: Runtime, calls: StoreCalls, grace: Grace) -> None:
        self._store = store
        self._runtime = runtime
        self._calls = calls
        self._grace = grace
        #: The presence while joined (None before the first block and after the last).
        self.presence: Presence | None = None
        #: Whether the run's member watch looks at the presence (else a one-shot's guard).
        self.watched = False
        self._joining = trio.Lock()
        self._members = 0  # blocks sharing the membership
        #: When this replica first joined: its record's ``started`` ever after (a join again,
        #: after a lost presence, is the same replica, up since then).
        self._started: datetime | None = None

    def current(self) -> Presence:
        """The presence now; StateFault when not joined."""
        presence = self.presence
        if presence is None:
            raise StateFault(f"replica {self._runtime.replica} has not joined its store")
        return presence

    async def join(self) -> Presence:
        """Join the store as this replica: its own hold, and its record (see replicas.py).

        A store without ``join`` gives holds that exclude within this process only.
        """
        from .. import __version__

        now = self._runtime.now()
        replica = self._runtime.replica
        started = self._started or now
        info = ReplicaInfo(replica, __version__, socket.gethostname(), os.getpid(), started, now)
        join = getattr(self._store, "join", None)
        if join is None:
            return LocalPresence(info)
        with self._calls.bounded():
            presence: Presence = await join(info)
            self._started = started
            return presence
        raise self._calls.no_answer(f"could not join the store as replica {replica}")

    async def rejoin(self) -> None:
        """Join again (a lost presence), then leave the old one (bounded). Raises
        StateFault, changing nothing, when the store does not take us back."""
        presence = await self.join()
        old, self.presence = self.presence, presence
        if old is not None:
            with trio.CancelScope(shield=True), trio.move_on_after(self._calls.store_timeout):
                await old.leave()

    @asynccontextmanager
    async def present(self) -> AsyncIterator[None]:
        """Joined for the block: the run's, a fire's or a run's. Blocks at once share one
        membership; the last to end leaves the store (bounded, whatever it does)."""
        if self.presence is None:
            async with self._joining:
                if self.presence is None:
                    self.presence = await self.join()
                self._members += 1
        else:  # joined already: no schedule point (fires that come together stay together)
            self._members += 1
        try:
            yield
        finally:
            self._members -= 1
            if self._members == 0:
                with trio.CancelScope(shield=True):
                    async with self._joining:  # a join waits for this leave to finish
                        if self._members == 0 and self.presence is not None:
                            presence, self.presence = self.presence, None
                            with trio.move_on_after(STOP_MARGIN):
                                await presence.leave()

    async def let_go_now(self, deadline: float) -> None:
        """Send the let-gos queued for the store on their way, and return once it has heard
        them, or at ``deadline`` (Trio's clock), shielded; a store that cannot answer lets go
        later, or with the connection (logged at DEBUG)."""
        presence = self.presence
        if presence is None:
            return
        with trio.CancelScope(shield=True, deadline=deadline):
            try:
                await presence.let_go_now()
            except StateFault as exc:
                log.debug("could not let go of a turn's holds at once: %s", exc)

    async def guarded(self, block: Callable[[], Awaitable[T]]) -> T:
        """``block()``; outside a run (a one-shot ``fire`` or ``run``), with the presence
        watched meanwhile and the block's turn ended once the store stops vouching for its
        holds, as the run's member watch does: another replica may then take its session.
        What ``block`` raises comes out as it is."""
        presence = self.presence
        if self.watched or presence is None or isinstance(presence, LocalPresence):
            return await block()
        # Shielded as the block is (a fire, a run): a caller's cancel must not end the guard
        # while the turn it guards runs on.
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._guard, presence)
                done = await outcome.acapture(block)
                nursery.cancel_scope.cancel()
        return done.unwrap()

    async def _guard(self, presence: Presence) -> None:
        # A look at once: the record says the turn is in flight from its start (the block has
        # entered it by now), not only from the first look thirty seconds in.
        looks = Looks(presence, GUARD_EVERY)
        looks.looked()
        present = not presence.lost.is_set()
        while present:
            try:
                await self.beat(presence)
            except StateFault as exc:  # a store that loses us says so with ``lost``
                log.warning("replica %s: the store did not answer: %s", presence.replica, exc)
            present = await looks.next()
        self._grace.end_lost()

    async def beat(self, presence: Presence) -> None:
        """Tell the store we are here (last seen, turns in flight), bounded; on PostgreSQL
        this also proves that the connection carrying our holds still answers. Raises
        StateFault."""
        with self._calls.bounded() as bound:
            await presence.beat(self._runtime.in_flight.value, self._runtime.now())
        if bound.cancelled_caught:
            raise self._calls.no_answer("the replica's record was not refreshed")

    async def claims_alive(self, claims: Sequence[tuple[str, Fire]]) -> list[bool]:
        """Whether each open claim's holder is alive. A claim naming our own id is alive only
        if we hold it now (from memory: one naming us that we do not hold was made by an
        earlier process under our id, which is dead); any other, as the store says."""
        presence = self.presence
        alive = [
            presence is not None and presence.holds(claim_key(routine, fire.slot))
            for routine, fire in claims
        ]
        replica = self._runtime.replica
        theirs = [i for i, (_, fire) in enumerate(claims) if fire.replica != replica]
        read = getattr(self._store, "claims_alive", None)
        if read is None or not theirs:
            return alive
        with self._calls.bounded():
            answers: list[bool] = await read([(claims[i][0], claims[i][1].slot) for i in theirs])
            for i, live in zip(theirs, answers, strict=True):
                alive[i] = alive[i] or live
            return alive
        raise self._calls.no_answer("the holds of the open claims are unreadable")

    async def replicas(self) -> list[ReplicaInfo]:
        """The members of the store (see ``Scheduler.replicas``). Raises StateFault."""
        read = getattr(self._store, "replicas", None)
        if read is None:
            presence = self.presence
            return [] if presence is None else [presence.info]
        with self._calls.bounded():
            members: list[ReplicaInfo] = await read()
            return members
        raise self._calls.no_answer("the replicas are unreadable")

    async def sessions_held(self, sessions: Sequence[str]) -> frozenset[str]:
        """Those of ``sessions`` whose hold is held now, by any member of the store (a turn
        of it under way there); a store without holds answers none. Raises StateFault."""
        read = getattr(self._store, "sessions_held", None)
        if read is None or not sessions:
            return frozenset()
        with self._calls.bounded():
            answers: list[bool] = await read(list(sessions))
            return frozenset(s for s, held in zip(sessions, answers, strict=True) if held)
        raise self._calls.no_answer("the sessions' holds are unreadable")

    async def newest_claims(self, names: Sequence[str]) -> dict[str, tuple[Fire | None, bool]]:
        """Each routine's newest claim and whether it is open and held by a live replica now
        (see ``Scheduler.newest_claims``). Raises StateFault."""
        newest = await for_each(self._calls.latest_fire, names)
        open_claims = [(n, f) for n, f in newest.items() if f is not None and f.is_open]
        answers = await self.claims_alive(open_claims)
        alive = {(n, f.slot): live for (n, f), live in zip(open_claims, answers, strict=True)}
        return {
            name: (fire, fire is not None and alive.get((name, fire.slot), False))
            for name, fire in newest.items()
        }
