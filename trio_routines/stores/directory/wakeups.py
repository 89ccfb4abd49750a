"""Wake-ups in the state directory: the store's async calls on ``wakeups.json``.

Each call runs in a worker thread of the store's (see store.py); the file itself --
its lock, its bounded reads, its atomic saves -- is handled in wakeupfile.py.

The calls of one store take turns (a ``trio.Lock``, fair) before their thread starts: the
file is read and parsed whole, so calls side by side would each hold a parse of it (16 of
a file near its 16 MiB bound drove a process past 500 MiB), and each would wait in a thread
for the ``flock`` the one before holds, then time out blaming "another process". Waiting
for a turn holds no thread and no memory, is bounded by ``lock_timeout`` like the
``flock`` after it, and says so when it runs out.

A call's thread may stall in the kernel (a frozen file system), so its caller never waits
for it past its own cancellation (a deadline of the runtime's, a stop) nor past twice
``lock_timeout`` (the ``flock``, then as long again for the file): it leaves with a
:class:`~trio_routines.errors.StateFault` and the thread goes on alone (abandon.py). A
change whose caller left is never made behind its back, so the caller's error is the truth:

* before its rename, the thread looks whether its caller gave up, and if so makes no change;
* a rename that was under way when the caller gave up (the stall itself) lands later: the
  thread learns it when it hands its answer over, still holding the ``flock``, and writes
  the list as it was back (a WARN names the wake-ups). Holding the lock throughout, nobody
  else changed the file in between, so putting back is exact: a wake-up taken for nobody is
  pending again, an add refused is not there, a removal refused is undone. If even that
  write fails, an ERROR carries the entries that are gone.

A deferral is the exception: it puts back a wake-up already taken, so it is made even when
its caller gave up (it says so in its error, and a WARN when it lands). The next call of
this store waits for a thread given up (within its turn's bound) rather than contend with it
for the ``flock``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import trio

from ...converter import dumps, wakeup_to_json
from ...errors import InvalidWakeup, StateFault
from ...records import Wakeup
from ...wakeups import WakeupRequest, plan_add, plan_defer, remove, take_first_due
from ..abandon import Handoff, run_abandoning
from .wakeupfile import TooLarge, WakeupFile

log = logging.getLogger("trio_routines")
T = TypeVar("T")
Change = Callable[[list[Wakeup]], tuple[list[Wakeup] | None, T]]

UNDONE = "given up — a change that lands later is undone"


class Wakeups:
    """The wake-up calls of :class:`~.store.DirectoryStore`."""

    def __init__(
        self,
        root: Path,
        lock_timeout: float,
        *,
        limiter: trio.CapacityLimiter,
        begun: dict[object, float],
    ) -> None:
        """``limiter``: the store's worker threads; ``begun``: its thread calls under way, by
        start time (its ``ready``'s), which this part's calls join."""
        self.file = WakeupFile(root, lock_timeout)
        self._limiter = limiter
        self._begun = begun
        self._turns = trio.Lock()  # see the module doc
        self._ended: trio.Event | None = None  # set once the thread of the last call returned

    async def _in_turn(self, fn: Callable[..., T], *args: Any, given_up: str = UNDONE) -> T:
        """``fn(handoff, *args)`` in a worker thread, once the calls on the file before it
        are done; ``given_up`` ends the error when its thread does not answer in time."""
        path, bound = self.file.path, self.file.lock_timeout
        deadline = trio.current_time() + bound
        with trio.move_on_at(deadline) as waited:
            await self._turns.acquire()
        if waited.cancelled_caught:
            ahead = self._turns.statistics().tasks_waiting
            raise StateFault(
                f"the wake-up store {path} was busy in this process for {bound:g}s (its "
                f"wake-up calls go one at a time; {ahead} more waiting) — try again"
            )
        try:
            before = self._ended
            if before is not None:
                with trio.move_on_at(deadline):
                    await before.wait()
                if not before.is_set():
                    raise StateFault(
                        f"the wake-up store {path}: a call given up earlier is still under way "
                        f"after {bound:g}s (a stalled disk?) — try again"
                    )
            ended = self._ended = trio.Event()
            with trio.move_on_after(2 * bound):
                return await run_abandoning(
                    fn,
                    *args,
                    limiter=self._limiter,
                    handoff=Handoff(),
                    begun=self._begun,
                    ended=ended,
                )
            raise StateFault(
                f"the wake-up store {path} did not answer within {2 * bound:g}s "
                f"(a stalled disk?): {given_up}"
            )
        finally:
            self._turns.release()

    def _mutate(self, handoff: Handoff, change: Change[T], *, undo: bool = True) -> T:
        with self.file.locked() as directory:
            entries, damaged = self.file.load(directory)
            updated, result = change(entries)
            if updated is None:
                return result
            if undo and handoff.gave_up:
                return result  # nobody waits for it: no change behind the caller's back
            self.file.save(directory, updated, damaged)
            if not handoff.hand_over():
                if undo:
                    self._undo(directory, entries, updated)
                else:
                    log.warning(
                        "the wake-up store %s: a change given up by its caller was made after "
                        "all (wake-ups %s)",
                        self.file.path,
                        _changed(entries, updated),
                    )
            return result

    def _undo(self, directory: int, before: list[Wakeup], after: list[Wakeup]) -> None:
        """Put ``before`` back (a change that landed after its caller gave up)."""
        changed = _changed(before, after)
        try:
            self.file.save(directory, before, False)
        except StateFault as exc:
            kept = {w.id for w in after}
            gone = dumps([wakeup_to_json(w) for w in before if w.id not in kept])
            log.error(
                "the wake-up store %s: a change given up by its caller was made after all "
                "(wake-ups %s) and could not be undone: %s — wake-ups no longer stored: %s",
                self.file.path,
                changed,
                exc,
                gone,
            )
            return
        log.warning(
            "the wake-up store %s: a change given up by its caller was made after all "
            "(wake-ups %s), and undone",
            self.file.path,
            changed,
        )

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

    def _take_due(self, handoff: Handoff, now: datetime) -> Wakeup | None:
        entries, _ = self.file.load(cached=True)
        if all(w.fire_at > now for w in entries):
            return None  # the common poll: nothing due, no lock, no write

        def change(entries: list[Wakeup]) -> tuple[list[Wakeup] | None, Wakeup | None]:
            rest, wakeup = take_first_due(entries, now)  # expired ones leave, never taken
            changed = wakeup is not None or len(rest) != len(entries)
            return (rest if changed else None), wakeup

        return self._mutate(handoff, change)

    async def defer_wakeup(self, wakeup: Wakeup, fire_at: datetime) -> bool:
        def change(entries: list[Wakeup]) -> tuple[list[Wakeup] | None, bool]:
            deferred = plan_defer(entries, wakeup, fire_at)  # under the lock: the cap holds
            if deferred is None:
                return None, False
            return [*entries, deferred], True

        def defer(handoff: Handoff) -> bool:
            return self._mutate(handoff, change, undo=False)

        made = f"given up — wake-up {wakeup.id} may still be re-queued"
        return await self._in_turn(defer, given_up=made)

    async def remove_wakeup(self, wakeup_id: str, session: str | None = None) -> bool:
        def change(entries: list[Wakeup]) -> tuple[list[Wakeup] | None, bool]:
            kept, removed = remove(entries, wakeup_id, session)
            return (kept if removed else None), removed

        return await self._in_turn(self._mutate, change)

    async def list_wakeups(self) -> list[Wakeup]:
        def read(_: Handoff) -> list[Wakeup]:
            return self.file.load(cached=True)[0]

        return await self._in_turn(read, given_up="given up")


def _changed(before: list[Wakeup], after: list[Wakeup]) -> str:
    """The ids of the wake-ups that differ between two lists (a log line's)."""
    old = {w.id: w for w in before}
    new = {w.id: w for w in after}
    return ", ".join(sorted(i for i in old.keys() | new.keys() if old.get(i) != new.get(i)))
