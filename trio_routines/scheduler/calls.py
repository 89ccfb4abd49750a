"""Every store call the runtime makes, bounded on our side, and the settle's retries.

Nothing outside the process is trusted to answer: a store stalled at the TCP level, a
locked file, a server that stops replying. Each call runs in a cancel scope with a deadline
of ours (``store_timeout``, 30 s by default; kept by one watch task, see :mod:`.deadlines`),
and a stop pulls every such deadline in to the stop's grace plus ``STOP_MARGIN``, so
``stop(grace)`` ends the runtime within that bound whatever the store does. A call cut off
counts as a fault: a claim, a read or a wake-up poll raises
:class:`~trio_routines.errors.StateFault` (nothing was claimed, nothing fires); a settle is
logged. (A store that runs blocking calls in threads must let them be abandoned for the
deadline to bite: both stores do.)

A settle that cannot be written is retried with a back-off (0.25 s doubling to 4 s) for up to
the default grace, within a stop's bound; only then is the outcome given up, logged as an
ERROR and counted (``statistics().settle_failures``, ``trio_routines_settle_failures_total``):
the claim stays unsettled, and the next boot records it as interrupted.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from types import TracebackType

import trio

from ..errors import StateFault
from ..instants import format_iso
from ..presence import LocalPresence, Presence
from ..records import Fire, Outcome, Wakeup
from ..replicas import ReplicaInfo, claim_key
from .clock import duration
from .deadlines import StoreDeadlines
from .state import SchedulerState, SharedRead, log

STOP_MARGIN = 2.0  # seconds a store call may take past a stop's grace
SETTLE_RETRY_FIRST = 0.25
SETTLE_RETRY_MAX = 4.0


class Bounded:
    """A store call's cancel scope, its deadline noted with the store deadlines while open.

    A class rather than a generator: every fire enters one, and at 10,000 fires at once the
    generator's frame and wrapper are measurable CPU and garbage-collector work.
    """

    __slots__ = ("_deadline", "_deadlines", "_scope")

    def __init__(self, deadlines: StoreDeadlines, deadline: float) -> None:
        self._deadlines = deadlines
        self._deadline = deadline
        self._scope = trio.CancelScope()

    def __enter__(self) -> trio.CancelScope:
        self._deadlines.note(self._scope, self._deadline)
        return self._scope.__enter__()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        self._deadlines.forget(self._scope)
        return self._scope.__exit__(kind, error, traceback)


class StoreCalls(SchedulerState):
    def _bounded(self, seconds: float | None = None) -> Bounded:
        """A scope for store calls: ``seconds`` (``store_timeout``), and a stop's bound."""
        return Bounded(self._deadlines, self._store_deadline(seconds))

    def _store_deadline(self, seconds: float | None = None) -> float:
        limit = self.store_timeout if seconds is None else seconds
        return min(trio.current_time() + limit, self._grace_deadline + STOP_MARGIN)

    def _no_answer(self, what: str) -> StateFault:
        return StateFault(
            f"{what}: the store did not answer within {duration(self.store_timeout)} "
            "(or before the stop's grace ran out)"
        )

    async def _join(self) -> Presence:
        """Join the store as this replica: its own hold, and its record (see replicas.py).

        A store without ``join`` gives holds that exclude within this process only.
        """
        from .. import __version__

        now = self.now()
        info = ReplicaInfo(self.replica, __version__, socket.gethostname(), os.getpid(), now, now)
        join = getattr(self.store, "join", None)
        if join is None:
            return LocalPresence(info)
        with self._bounded():
            presence: Presence = await join(info)
            return presence
        raise self._no_answer(f"could not join the store as replica {self.replica}")

    @asynccontextmanager
    async def _present(self) -> AsyncIterator[None]:
        """Joined for the block: :meth:`run`'s, a fire's or a run's. Blocks at once share one
        membership; the last to end leaves the store (bounded, whatever it does)."""
        if self._presence is None:
            async with self._joining:
                if self._presence is None:
                    self._presence = await self._join()
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
                        if self._members == 0 and self._presence is not None:
                            presence, self._presence = self._presence, None
                            with trio.move_on_after(STOP_MARGIN):
                                await presence.leave()

    async def _claims_alive(self, claims: Sequence[tuple[str, Fire]]) -> list[bool]:
        """Whether each open claim's holder is alive. A claim naming our own id is alive only
        if we hold it now (from memory: one naming us that we do not hold was made by an
        earlier process under our id, which is dead); any other, as the store says."""
        presence = self._presence
        alive = [
            presence is not None and presence.holds(claim_key(routine, fire.slot))
            for routine, fire in claims
        ]
        theirs = [i for i, (_, fire) in enumerate(claims) if fire.replica != self.replica]
        read = getattr(self.store, "claims_alive", None)
        if read is None or not theirs:
            return alive
        with self._bounded():
            answers: list[bool] = await read([(claims[i][0], claims[i][1].slot) for i in theirs])
            for i, live in zip(theirs, answers, strict=True):
                alive[i] = alive[i] or live
            return alive
        raise self._no_answer("the holds of the open claims are unreadable")

    async def _latest_fire(self, routine: str) -> Fire | None:
        with self._bounded():
            return await self.store.latest_fire(routine)
        raise self._no_answer(f"the newest claim of {routine!r} is unreadable")

    async def _history(self, name: str) -> list[Fire]:
        with self._bounded():
            return await self.store.history(name)
        raise self._no_answer(f"the history of {name!r} is unreadable")

    async def _resumed_at(self, routine: str) -> datetime | None:
        with self._bounded():
            return await self.store.resumed_at(routine)
        raise self._no_answer(f"the resume of {routine!r} is unreadable")

    async def _take_due_wakeup(self, now: datetime) -> Wakeup | None:
        with self._bounded():
            return await self.store.take_due_wakeup(now)
        raise self._no_answer("could not take a due wake-up")

    async def _defer_wakeup(self, wakeup: Wakeup, fire_at: datetime) -> bool:
        with self._bounded():
            return await self.store.defer_wakeup(wakeup, fire_at)
        raise self._no_answer(f"could not re-queue wake-up {wakeup.id}")

    async def _read_paused(self) -> frozenset[str]:
        """The paused routines, as the store says now (remembered for statistics).

        One read serves every fire that asks while it is under way: a thousand routines due
        at one instant cost one read, not a thousand. (A pause written meanwhile is as
        concurrent with those fires as it would be with separate reads.)
        """
        while (shared := self._paused_read) is not None:
            await shared.wait()
            if shared.error is not None:
                raise shared.error
            if shared.result is not None:
                return shared.result
            # The reader was cancelled (its caller stopped): read again ourselves.
        shared = self._paused_read = SharedRead()
        try:
            with self._bounded():
                shared.result = self._paused = await self.store.paused()
                return shared.result
            shared.error = self._no_answer("the paused routines are unreadable")
            raise shared.error
        except StateFault as exc:
            shared.error = exc
            raise
        finally:
            self._paused_read = None
            shared.finish()

    async def _refresh_paused(self) -> None:
        """Re-read the paused routines for statistics; a fault keeps the last answer."""
        try:
            await self._read_paused()
        except StateFault as exc:
            log.debug("the paused routines could not be re-read: %s", exc)

    async def _settle_once(
        self,
        routine: str,
        slot: datetime,
        outcome: Outcome,
        ms: int | None,
        *,
        if_unsettled: bool,
        error: str | None,
    ) -> bool:
        """One bounded settle (a retry's, the boot's); False when it failed or was cut off
        (logged)."""
        with self._bounded():
            return await self.store.settle(
                routine, slot, outcome, ms, if_unsettled=if_unsettled, error=error
            )
        self._settle_timed_out(routine, slot, outcome)
        return False

    def _settle_timed_out(self, routine: str, slot: datetime, outcome: Outcome) -> None:
        log.warning(
            "%s: could not record the %s outcome of slot %s: the store did not answer in time",
            routine,
            outcome.value,
            format_iso(slot),
        )

    async def _settle(
        self,
        routine: str,
        slot: datetime,
        outcome: Outcome,
        ms: int | None,
        error: str | None,
        within: trio.CancelScope,
    ) -> None:
        """Settle a fire, retrying with a back-off for up to the default grace.

        The first attempt is bounded by ``within``, the fire's own shielded scope, whose last
        step it is, rather than by a scope of its own: for 10,000 fires at once that scope was
        about 13 % of their CPU. Its deadline's ``Cancelled`` is then caught here, since the fire
        goes on (the retries, in a shielded scope of their own). A settle given up is logged
        and counted; the fire path goes on either way.
        """
        give_up = trio.current_time() + self.default_grace
        self._deadlines.note(within, self._store_deadline())
        try:
            if await self.store.settle(routine, slot, outcome, ms, error=error):
                return
        except* trio.Cancelled:  # bare, or grouped by a nursery inside the store
            if not within.cancel_called:  # not our deadline (it cannot be): never swallowed
                raise
            self._settle_timed_out(routine, slot, outcome)
        finally:
            self._deadlines.forget(within)
        with trio.CancelScope(shield=True):  # ``within`` may be cancelled now
            await self._settle_again(routine, slot, outcome, ms, error, give_up)

    async def _settle_again(
        self,
        routine: str,
        slot: datetime,
        outcome: Outcome,
        ms: int | None,
        error: str | None,
        give_up: float,
    ) -> None:
        """The retries after a first settle that failed, each bounded, until ``give_up``."""
        delay = SETTLE_RETRY_FIRST
        attempts = 1
        while True:
            if trio.current_time() + delay > min(give_up, self._grace_deadline + STOP_MARGIN):
                break
            with self._bounded(delay):  # a stop meanwhile cuts the wait short
                await trio.sleep_forever()
            delay = min(delay * 2, SETTLE_RETRY_MAX)
            attempts += 1
            if await self._settle_once(routine, slot, outcome, ms, if_unsettled=False, error=error):
                log.info(
                    "%s: the %s outcome of slot %s recorded at attempt %d",
                    routine,
                    outcome.value,
                    format_iso(slot),
                    attempts,
                )
                return
        self._settle_failures[routine] += 1
        self.metrics.settle_failed(routine)
        log.error(
            "%s: the %s outcome of slot %s is lost after %d attempts — the claim stays "
            "unsettled and the next boot records it as interrupted",
            routine,
            outcome.value,
            format_iso(slot),
            attempts,
        )
