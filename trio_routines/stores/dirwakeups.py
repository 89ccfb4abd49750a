"""Wake-ups in the state directory: the store's async calls on ``wakeups.json``.

Each call runs in a worker thread of the store's (see directory.py); the file itself --
its lock, its bounded reads, its atomic saves -- is handled in wakeupfile.py.

The calls of one store take turns (a ``trio.Lock``, fair) before their thread starts: the
file is read and parsed whole, so calls side by side would each hold a parse of it (16 of
a file near its 16 MiB bound drove a process past 500 MiB), and each would wait in a thread
for the ``flock`` the one before holds, then time out blaming "another process". Waiting
for a turn holds no thread and no memory, is bounded by ``lock_timeout`` like the
``flock`` after it, and says so when it runs out.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import trio

from ..errors import InvalidWakeup, StateFault
from ..records import Wakeup
from ..wakeups import WakeupRequest, plan_add, plan_defer, remove, take_first_due
from .wakeupfile import TooLarge, WakeupFile

T = TypeVar("T")


class WakeupsInFile:
    """The wake-up calls of :class:`~.directory.DirectoryStore`."""

    _wakeups: WakeupFile
    _wakeup_turns: trio.Lock  # see the module doc

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        raise NotImplementedError  # the store's: a call in one of its worker threads

    async def _in_turn(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn`` in a worker thread, once the calls on the file before it are done."""
        with trio.move_on_after(self._wakeups.lock_timeout) as waited:
            await self._wakeup_turns.acquire()
        if waited.cancelled_caught:
            ahead = self._wakeup_turns.statistics().tasks_waiting
            raise StateFault(
                f"the wake-up store {self._wakeups.path} was busy in this process for "
                f"{self._wakeups.lock_timeout:g}s (its wake-up calls go one at a time; "
                f"{ahead} more waiting) — try again"
            )
        try:
            return await self._run(fn, *args)
        finally:
            self._wakeup_turns.release()

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
            return await self._in_turn(self._mutate, change)
        except TooLarge as exc:
            raise InvalidWakeup(str(exc)) from None

    async def take_due_wakeup(self, now: datetime) -> Wakeup | None:
        return await self._in_turn(self._take_due, now)

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

        return await self._in_turn(self._mutate, change)

    async def remove_wakeup(self, wakeup_id: str, session: str | None = None) -> bool:
        def change(entries: list[Wakeup]) -> tuple[list[Wakeup] | None, bool]:
            kept, removed = remove(entries, wakeup_id, session)
            return (kept if removed else None), removed

        return await self._in_turn(self._mutate, change)

    async def list_wakeups(self) -> list[Wakeup]:
        entries, _ = await self._in_turn(lambda: self._wakeups.load(cached=True))
        return entries
