"""Wake-ups in the state directory: the store's async calls.

Each call runs in a worker thread of the store's (see store.py); the index, the journal and
the lock are wakeuplog.py's (over wakeupindex.py, wakeupjournal.py and wakeupfile.py).

The calls of one store take turns (a ``trio.Lock``, fair) before their thread starts: they
share one in-memory index, and calls side by side would each wait in a thread for the
``flock`` the one before holds, then time out blaming "another process". Waiting for a turn
holds no thread, is bounded by ``lock_timeout`` like the ``flock`` after it, and says so when
it runs out.

A call's thread may stall in the kernel (a frozen file system), so its caller never waits
for it past its own cancellation (a deadline of the runtime's, a stop) nor past twice
``lock_timeout`` (the ``flock``, then as long again for the file): it leaves with a
:class:`~trio_routines.errors.StateFault` and the thread goes on alone (abandon.py). A
change whose caller left is never made behind its back, so the caller's error is the truth:

* before its append, the thread looks whether its caller gave up, and if so makes no change;
* an append that was under way when the caller gave up (the stall itself) lands later: the
  thread learns it when it hands its answer over, still holding the ``flock``, and appends
  the inverse change (a WARN names the wake-ups). Holding the lock throughout, nobody else
  changed the store in between, so putting back is exact, stored order included: a wake-up
  taken for nobody is pending again in its place, an add refused is not there, a removal
  refused is undone. If even that write fails, an ERROR carries the change made.

A deferral is the exception: it puts back a wake-up already taken, so it is made even when
its caller gave up (it says so in its error, and a WARN when it lands). The next call of
this store waits for a thread given up (within its turn's bound) rather than contend with it
for the ``flock``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import trio

from ...errors import StateFault
from ...records import Wakeup
from ...wakeups import WakeupRequest, plan_add, plan_defer, remove, take_first_due
from ..abandon import Handoff, OneAtATime, run_abandoning
from ..safefile import open_dirs
from .wakeupindex import Op, WakeupIndex, add_op, del_op, set_op
from .wakeuplog import WakeupLog

log = logging.getLogger("trio_routines")
T = TypeVar("T")

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
        self.log = WakeupLog(root, lock_timeout)
        self._limiter = limiter
        self._begun = begun
        self._turns = OneAtATime()  # see the module doc

    async def _in_turn(self, fn: Callable[..., T], *args: Any, given_up: str = UNDONE) -> T:
        """``fn(handoff, *args)`` in a worker thread, once the calls on the file before it
        are done; ``given_up`` ends the error when its thread does not answer in time."""
        path, bound = self.log.path, self.log.file.lock_timeout

        def busy(ahead: int) -> StateFault:
            return StateFault(
                f"the wake-up store {path} was busy in this process for {bound:g}s (its "
                f"wake-up calls go one at a time; {ahead} more waiting) — try again"
            )

        def still_under_way() -> StateFault:
            return StateFault(
                f"the wake-up store {path}: a call given up earlier is still under way "
                f"after {bound:g}s (a stalled disk?) — try again"
            )

        deadline = trio.current_time() + bound
        async with self._turns.turn(deadline, busy, still_under_way) as ended:
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

    async def add_wakeup(self, request: WakeupRequest, now: datetime) -> Wakeup:
        def plan(index: WakeupIndex) -> tuple[list[Op], Wakeup]:
            stored = (len(index) + index.kept, index.text)
            wakeup = plan_add(index.of_session(request.session), request, now, stored=stored)
            return [add_op(wakeup, index.next_n)], wakeup

        return await self._in_turn(self.log.change, plan)

    async def take_due_wakeup(self, now: datetime) -> Wakeup | None:
        return await self._in_turn(self._take_due, now)

    def _take_due(self, handoff: Handoff, now: datetime) -> Wakeup | None:
        if self.log.refresh() and self.log.index.first_due(now) is None:
            return None  # the common poll: nothing due, no lock, no write

        def plan(index: WakeupIndex) -> tuple[list[Op], Wakeup | None]:
            ops: list[Op] = []
            for due in index.due(now):
                rest, wakeup = take_first_due([due], now)
                if wakeup is None:  # expired: it leaves (logged), never taken
                    ops.append(del_op(due.id))
                    continue
                ops.append(set_op(rest[0]) if rest else del_op(due.id))
                return ops, wakeup
            return ops, None

        return self.log.change(handoff, plan)

    async def defer_wakeup(self, wakeup: Wakeup, fire_at: datetime) -> bool:
        def plan(index: WakeupIndex) -> tuple[list[Op], bool]:
            # under the lock: the cap holds
            deferred = plan_defer(index.of_session(wakeup.session), wakeup, fire_at)
            if deferred is None:
                return [], False
            # Still there (a recurring one advanced), or kept unused since (another replica
            # set it in a form this version cannot read): gone before it is added again.
            there = index.get(wakeup.id) is not None or index.kept_session(wakeup.id) is not None
            gone = [del_op(wakeup.id)] if there else []
            return [*gone, add_op(deferred, index.next_n)], True

        def defer(handoff: Handoff) -> bool:
            return self.log.change(handoff, plan, undo=False)

        made = f"given up — wake-up {wakeup.id} may still be re-queued"
        return await self._in_turn(defer, given_up=made)

    async def remove_wakeup(self, wakeup_id: str, session: str | None = None) -> bool:
        def plan(index: WakeupIndex) -> tuple[list[Op], bool]:
            held = index.get(wakeup_id)
            if held is None:  # kept unused here (a newer version's, a zone unknown here)?
                kept = index.kept_session(wakeup_id)
                removed = kept is not None and session in (None, kept)
                return ([del_op(wakeup_id)] if removed else []), removed
            _, removed = remove([held], wakeup_id, session)
            return ([del_op(wakeup_id)] if removed else []), removed

        return await self._in_turn(self.log.change, plan)

    async def list_wakeups(self) -> list[Wakeup]:
        def read(_: Handoff) -> list[Wakeup]:
            if not self.log.refresh():
                found = self._as_found()
                if found is not None:
                    return found
                self.log.take_over()
            return list(self.log.index)

        return await self._in_turn(read, given_up="given up")

    def _as_found(self) -> list[Wakeup] | None:
        """What a process that may not take a waiting ``wakeups.json`` over reads: the
        journal's wake-ups and the file's, nothing written. A process of another user than the
        state's owner (an operator's ``list`` as root, say) would leave the journal and its
        lock owned by that user, which the service could then not write. None: this process
        owns the state, and takes the file over."""
        log = self.log
        try:
            directory = open_dirs(log.root, ("schedule",))
        except OSError as exc:
            raise log.file.unreadable(exc) from None
        try:
            if os.fstat(directory).st_uid == os.geteuid():
                return None
            log.catch_up(directory)
            entries, _ = log.file.load(directory)
        finally:
            os.close(directory)
        return [*log.index, *(e for e in entries if log.index.get(e.id) is None)]
