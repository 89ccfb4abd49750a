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
from .replicas import ReplicaInfo


class Presence:
    """One replica's membership of a store. Subclasses say how a hold is taken and seen."""

    def __init__(self, info: ReplicaInfo) -> None:
        self.info = info
        self._held: set[int] = set()
        self._left = False
        #: Set once the store can no longer vouch for our holds (a connection lost): turns
        #: under way may now be seen as dead by the other replicas.
        self.lost = trio.Event()

    @property
    def replica(self) -> str:
        return self.info.id

    def holds(self, key: int) -> bool:
        """Whether this presence holds ``key`` now."""
        return key in self._held

    def held(self) -> frozenset[int]:
        return frozenset(self._held)

    async def take(self, keys: Sequence[int]) -> list[bool]:
        """Try to take each of ``keys`` (never waiting for one): which were taken.

        A key held here already, or listed twice, is refused. Raises StateFault when the
        store cannot answer (nothing is held then).
        """
        if self._left:
            raise StateFault(f"replica {self.replica} has left its store")
        wanted: list[int] = []
        for key in keys:
            if key not in self._held and key not in wanted:
                wanted.append(key)
        self._held.update(wanted)  # reserved here while the store decides
        try:
            got = dict(zip(wanted, await self._take(wanted), strict=True)) if wanted else {}
        except BaseException:
            # Cancelled (or failed) while the store decided: it may have granted some. Let go
            # of them all (a key we do not hold is left alone), or a session would stay busy.
            self._held.difference_update(wanted)
            if not self._left:
                self._let_go(wanted)
            raise
        self._held.difference_update(key for key, taken in got.items() if not taken)
        answers = []
        for key in keys:
            answers.append(got.pop(key, False))
        return answers

    def let_go(self, keys: Sequence[int]) -> None:
        """Let go of ``keys`` (those not held are ignored) without waiting: the store hears of
        it at once or soon after, and always before a later take of ours. Never raises: a
        hold that cannot be let go is let go with the process, or the store's connection."""
        mine = [key for key in dict.fromkeys(keys) if key in self._held]
        self._held.difference_update(mine)
        if mine and not self._left:
            self._let_go(mine)

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
