"""The members of a :class:`~.memory.MemoryStore`: :class:`MemoryPresence`, a replica that
holds keys in its store's table of holds until it leaves, vanishes (its process died) or
loses them (the store dropped it while it lives)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import attrs
import trio

from ..presence import Presence
from ..replicas import ReplicaInfo

if TYPE_CHECKING:
    from .memory import MemoryStore


class MemoryPresence(Presence):
    """A member of a :class:`MemoryStore`. :meth:`vanish` is its process dying (every hold
    goes, nothing is settled, nobody hears of it); :meth:`lose` is the store dropping its
    holds while it lives (it hears, as a lost connection is heard)."""

    def __init__(self, store: MemoryStore, info: ReplicaInfo) -> None:
        super().__init__(info)
        self._store = store
        self.held_in = "the memory store"
        self.dead = False

    async def _take(self, keys: list[int]) -> list[bool]:
        # Decided at once, as the state directory's locks are (they never wait): no yield
        # unless the take is made to hang. One step fewer for every fire, before its turn.
        if self._store.hangs:
            await self._store.injected.enter("take")
        if self.lost.is_set():  # as PostgreSQL's: a presence lost takes no hold again
            raise self.lost_fault()
        self._store.injected.check("take")
        holds = self._store.holds
        taken = []
        for key in keys:
            free = key not in holds
            if free:
                holds[key] = self
            taken.append(free)
        return taken

    def _let_go(self, keys: list[int]) -> None:
        for key in keys:
            if self._store.holds.get(key) is self:
                del self._store.holds[key]

    async def _beat(self, in_flight: int, now: datetime) -> None:
        await self._store.injected.enter("beat")
        self._store.injected.check("beat")
        self.info = attrs.evolve(self.info, last_seen=now, in_flight=in_flight)

    async def _leave(self) -> None:
        await trio.lowlevel.checkpoint()
        self._drop()
        if self._store.members.get(self.info.id) is self:
            del self._store.members[self.info.id]

    def vanish(self) -> None:
        """Die: every hold goes at once; the member stays listed, not alive."""
        self._drop()
        self.dead = True

    def lose(self) -> None:
        """The store drops every hold of ours, and we hear of it."""
        self.vanish()
        self.lost.set()

    def _drop(self) -> None:
        store = self._store
        for key in [key for key, holder in store.holds.items() if holder is self]:
            del store.holds[key]
