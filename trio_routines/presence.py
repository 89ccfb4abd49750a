"""A replica's presence in a store: the holds it takes and lets go (see :mod:`.replicas`).

Every store of ours gives one through ``await store.join(info)``; a store without ``join``
gets a :class:`LocalPresence`, whose holds exclude only within this process.

A hold is exclusive within the process too: a key this presence already holds is refused to
a second taker here (PostgreSQL's advisory locks and ``fcntl`` range locks would both grant
it again to their own holder).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import trio

from .errors import StateFault
from .replicas import ReplicaInfo, replica_key


class IdInUse(StateFault):
    """A join refused: the replica's id is held in the store (by a live replica, or by this
    replica's own earlier connection until the server lets it go)."""


class Presence:
    """One replica's membership of a store. Subclasses say how a hold is taken and seen."""

    def __init__(self, info: ReplicaInfo) -> None:
        self.info = info
        self._held: set[int] = set()
        self._left = False
        #: Set once the store can no longer vouch for our holds (a connection lost): turns
        #: under way may now be seen as dead by the other replicas.
        self.lost = trio.Event()

    #: Where its holds are, as its messages name it.
    held_in = "its store"

    @property
    def replica(self) -> str:
        """This replica's id (its :class:`~trio_routines.replicas.ReplicaInfo`'s)."""
        return self.info.id

    async def stirred(self) -> None:
        """Return once this presence is lost, or something suggests the store may have
        dropped it (a store that can tell: PostgreSQL): the watch then looks at once rather
        than at its next beat."""
        await self.lost.wait()

    def lost_fault(self) -> StateFault:
        """What a hold asked of a lost presence answers (until the store takes us back)."""
        return StateFault(f"replica {self.replica} lost its hold on {self.held_in}")

    def holds(self, key: int) -> bool:
        """Whether this presence holds ``key`` now."""
        return key in self._held

    @property
    def holder(self) -> int:
        """This replica's own key: the holder a store records for its holds."""
        return replica_key(self.replica)

    def reserve(self, keys: Sequence[int]) -> list[bool]:
        """Which of ``keys`` are free here (not held, not listed before), reserving those
        while the store decides: then :meth:`granted` says what it decided."""
        if self._left:
            raise StateFault(f"replica {self.replica} has left its store")
        free = []
        for key in keys:
            ok = key not in self._held
            if ok:
                self._held.add(key)
            free.append(ok)
        return free

    def granted(self, keys: Sequence[int], taken: Sequence[bool]) -> None:
        """The store's answer for reserved ``keys``: the taken stay held, the rest are not."""
        if len(keys) != len(taken):
            raise ValueError(f"{len(taken)} answers for {len(keys)} keys")
        if not all(taken):  # else nothing to undo: the common case, once per fire
            self._held.difference_update(key for key, ok in zip(keys, taken, strict=True) if not ok)

    def abandoned(self, keys: Sequence[int]) -> None:
        """A decision on reserved ``keys`` was cut off (cancelled, failed): the store may have
        granted some, so let go of them all (a key we do not hold is left alone), or a session
        would stay busy on every replica."""
        self._held.difference_update(keys)
        if keys and not self._left:
            self._let_go(list(keys))

    async def take(self, keys: Sequence[int]) -> list[bool]:
        """Try to take each of ``keys`` (never waiting for one): which were taken.

        A key held here already, or listed twice, is refused. Raises StateFault when the
        store cannot answer (nothing is held then).
        """
        free = self.reserve(keys)
        # Every key free here: the common case, a fire's claim and session.
        every = all(free)
        wanted = list(keys) if every else [key for key, ok in zip(keys, free, strict=True) if ok]
        try:
            answers = await self._take(wanted) if wanted else []
        except BaseException:
            self.abandoned(wanted)
            raise
        self.granted(wanted, answers)
        if every:
            return list(answers)
        got = iter(answers)
        return [ok and next(got) for ok in free]

    def forget(self, keys: Sequence[int]) -> None:
        """Let go of ``keys`` held in this process only (the store never heard of them)."""
        self._held.difference_update(keys)

    def keep_here(self, keys: Sequence[int]) -> None:
        """The store lets go of ``keys`` (as :meth:`let_go`), but this presence still holds
        them, in this process only, until :meth:`forget`."""
        mine = [key for key in dict.fromkeys(keys) if key in self._held]
        if mine and not self._left:
            self._let_go(mine)

    def let_go(self, keys: Sequence[int]) -> None:
        """Let go of ``keys`` (those not held are ignored) without waiting: the store hears of
        it at once or soon after, and always before a later take of ours. Never raises: a
        hold that cannot be let go is let go with the process, or the store's connection."""
        self.keep_here(keys)
        self._held.difference_update(keys)

    def let_go_orphans(self, keys: Sequence[int]) -> None:
        """Let go in the store of ``keys`` this presence does not hold: holds an earlier,
        lost presence of this replica was granted after this one joined, each naming this
        replica (a key held here now is left alone)."""
        orphans = [key for key in dict.fromkeys(keys) if key not in self._held]
        if orphans and not self._left and not self.lost.is_set():
            self._let_go(orphans)

    def letting_go(self, keys: Sequence[int]) -> bool:
        """Whether a let-go of one of ``keys`` is on its way to the store, not there yet."""
        return False

    async def let_go_now(self) -> None:
        """Send every let-go on its way now (before a claim takes one of those keys on another
        connection: there the let-go, come later, would delete the new turn's hold).
        Raises StateFault when the store cannot answer."""
        await trio.lowlevel.checkpoint()

    async def release(self, keys: Sequence[int]) -> None:
        """:meth:`let_go`, and return once the store has heard of it."""
        self.let_go(keys)
        await self._sent()

    async def beat(self, in_flight: int, now: datetime) -> None:
        """Tell the store we are here (last seen, turns in flight); StateFault if it cannot
        vouch for our holds any more."""
        await self._beat(in_flight, now)

    async def leave(self) -> None:
        """Let go of every hold and of the replica's record (a clean stop)."""
        if self._left:
            return
        self._left = True
        self._held.clear()
        await self._leave()

    # -- what a store provides ------------------------------------------------------------

    async def _take(self, keys: list[int]) -> list[bool]:
        await trio.lowlevel.checkpoint()
        return [True] * len(keys)

    def _let_go(self, keys: list[int]) -> None:
        """Let the store know (now, or soon: see :meth:`_sent`)."""

    async def _sent(self) -> None:
        """Return once every let-go so far has reached the store."""
        await trio.lowlevel.checkpoint()

    async def _beat(self, in_flight: int, now: datetime) -> None:
        await trio.lowlevel.checkpoint()

    async def _leave(self) -> None:
        await trio.lowlevel.checkpoint()


class LocalPresence(Presence):
    """Holds that exclude within this process only: for a store that has no ``join``."""
