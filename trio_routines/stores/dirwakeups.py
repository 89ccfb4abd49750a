"""Wake-ups in the state directory: the store's async calls on ``wakeups.json``.

Each call runs in a worker thread of the store's (see directory.py); the file itself --
its lock, its bounded reads, its atomic saves -- is handled in wakeupfile.py.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from ..errors import InvalidWakeup
from ..records import Wakeup
from ..wakeups import WakeupRequest, plan_add, plan_defer, remove, take_first_due
from .wakeupfile import TooLarge, WakeupFile

T = TypeVar("T")


class WakeupsInFile:
    """The wake-up calls of :class:`~.directory.DirectoryStore`."""

    _wakeups: WakeupFile

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        raise NotImplementedError  # the store's: a call in one of its worker threads

    def _mutate(self, change: Callable[[list[Wakeup]], tuple[list[Wakeup] | None, T]]) -> T:
        with self._wakeups.locked() as directory:
            entries, damaged = self._wakeups.load(directory)
            updated, result = change(entries)
            if updated is not None:
                self._wakeups.save(directory, updated, damaged)
            return result

    async def add_wakeup(self, request: WakeupRequest, now: datetime) -> Wakeup:
        def change(entries: list[Wakeup]) -> tuple[list[Wakeup] | None, Wakeup]:
            wakeup = plan_add(entries, request, now)
            return [*entries, wakeup], wakeup

        try:
            return await self._run(self._mutate, change)
        except TooLarge as exc:
            raise InvalidWakeup(str(exc)) from None

    async def take_due_wakeup(self, now: datetime) -> Wakeup | None:
        return await self._run(self._take_due, now)

    def _take_due(self, now: datetime) -> Wakeup | None:
        entries, _ = self._wakeups.load(cached=True)
        if all(w.fire_at > now for w in entries):
            return None  # the common poll: nothing due, no lock, no write

        def change(entries: list[Wakeup]) -> tuple[list[Wakeup] | None, Wakeup | None]:
            rest, wakeup = take_first_due(entries, now)
            return (rest if wakeup is not None else None), wakeup

        return self._mutate(change)

    async def defer_wakeup(self, wakeup: Wakeup, fire_at: datetime) -> bool:
        def change(entries: list[Wakeup]) -> tuple[list[Wakeup] | None, bool]:
            deferred = plan_defer(entries, wakeup, fire_at)  # under the lock: the cap holds
            if deferred is None:
                return None, False
            return [*entries, deferred], True

        return await self._run(self._mutate, change)

    async def remove_wakeup(self, wakeup_id: str, session: str | None = None) -> bool:
        def change(entries: list[Wakeup]) -> tuple[list[Wakeup] | None, bool]:
            kept, removed = remove(entries, wakeup_id, session)
            return (kept if removed else None), removed

        return await self._run(self._mutate, change)

    async def list_wakeups(self) -> list[Wakeup]:
        entries, _ = await self._run(lambda: self._wakeups.load(cached=True))
        return entries
