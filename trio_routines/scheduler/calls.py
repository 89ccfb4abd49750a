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

from collections import Counter
from collections.abc import Awaitable
from datetime import datetime
from typing import Any, TypeVar

import trio

from ..errors import StateFault, Unconfirmed
from ..instants import FIRST_INSTANT, format_iso
from ..records import Fire, Outcome
from ..store import Store
from ..usage import Usage
from .deadlines import Bounded, StoreDeadlines
from .grace import Grace
from .state import RESUME_LAG, PausedRead, Runtime, SharedRead, duration, log, takes_keyword

T = TypeVar("T")

STOP_MARGIN = 2.0  # seconds a store call may take past a stop's grace
SETTLE_RETRY_FIRST = 0.25
SETTLE_RETRY_MAX = 4.0
#: Seconds the cron loops' timer waits for a herd's paused read before it wakes the herd
#: anyway (each fire then reads for itself): a slow store never holds other loops' wakes
#: for longer.
PREFETCH_LIMIT = 1.0


class StoreCalls:
    """The runtime's store calls, each bounded (see the module doc); owns their deadlines,
    the paused routines as last read, and the count of settles given up.

    Collaborators: the ``store``, the :class:`Runtime` (wall clock, default grace, metrics)
    and the :class:`Grace` (a stop's deadline bounds every call).
    """

    def __init__(
        self, store: Store, runtime: Runtime, grace: Grace, *, store_timeout: float
    ) -> None:
        self.store = store
        self.store_timeout = store_timeout
        self._runtime = runtime
        self._grace = grace
        #: The deadlines of the calls under way; its watch runs with the loops.
        self.deadlines = StoreDeadlines()
        #: Set once no run is under way or to come (it ended, or a stop came first): a stop
        #: bounds the calls of a drain (a run's, a one-shot fire's or turn's still in flight),
        #: not a host's calls after it.
        self.run_over = False
        #: Outcomes given up after the settle's retries, by routine.
        self.settle_failures: Counter[str] = Counter()
        #: The paused routines as last read from the store (or written by pause/resume).
        self.paused: frozenset[str] = frozenset()
        #: The wall clock when the boot read the resumes of the routines it catches up: a
        #: slot before it was planned knowing them (the fire path asks again after it).
        self.resumes_read_at = FIRST_INSTANT
        self._paused_read: SharedRead | None = None  # the read under way
        #: A store that reads the latest resumes with the paused routines (optional).
        self._reads_resumes = callable(getattr(store, "paused_with_resumes", None))
        # A store written before output takes no ``output``: it is given none (keeps none);
        # the same for ``usage``.
        self._takes_output = takes_keyword(store.settle, "output")
        self._takes_usage = takes_keyword(store.settle, "usage")

    def bounded(self, seconds: float | None = None) -> Bounded:
        """A scope for store calls: ``seconds`` (``store_timeout``), and a stop's bound."""
        return Bounded(self.deadlines, self.store_deadline(seconds))

    def store_deadline(self, seconds: float | None = None, *, start: float | None = None) -> float:
        """The deadline of a store call starting now, or at ``start`` (Trio's clock, read just
        now by the caller): ``store_timeout`` or ``seconds`` later, a stop's bound at most."""
        limit = self.store_timeout if seconds is None else seconds
        begun = trio.current_time() if start is None else start
        ours = begun + limit
        if self.run_over and not self._runtime.in_flight.value:  # a host's call, no drain
            return ours
        stops = self._grace.deadline + STOP_MARGIN
        return stops if stops < ours else ours  # as min(), without its keyword parsing

    def no_answer(self, what: str, *, change: bool = False) -> StateFault:
        """The fault of a call cut off by its deadline; of a ``change``, :class:`Unconfirmed`
        (the store may make it yet: both stores let a call cut off go on in its thread)."""
        timeout = self.store_timeout  # under a minute as given (0.5s), never rounded to 0s
        within = f"{timeout:g}s" if timeout < 60 else duration(timeout)
        said = (
            f"{what}: the store did not answer within {within} (or before the stop's grace ran out)"
        )
        return Unconfirmed(f"{said}; it may be made") if change else StateFault(said)

    async def latest_fire(self, routine: str) -> Fire | None:
        with self.bounded():
            return await self.store.latest_fire(routine)
        raise self.no_answer(f"the newest claim of {routine!r} is unreadable")

    async def history(self, name: str) -> list[Fire]:
        with self.bounded():
            return await self.store.history(name)
        raise self.no_answer(f"the history of {name!r} is unreadable")

    async def resumed_at(self, routine: str) -> datetime | None:
        with self.bounded():
            return await self.store.resumed_at(routine)
        raise self.no_answer(f"the resume of {routine!r} is unreadable")

    async def paused_since(self, routine: str) -> datetime | None:
        """When ``routine``'s pause began, where the store keeps it (None: not kept)."""
        return await self._kept_instant("paused_since", routine, "pause")

    async def resumed_pause_since(self, routine: str) -> datetime | None:
        """When the pause ``routine``'s latest resume ended began, where the store keeps it."""
        return await self._kept_instant("resumed_pause_since", routine, "resume")

    async def _kept_instant(self, read: str, routine: str, what: str) -> datetime | None:
        """The store's optional read ``read`` of ``routine`` (None: a store without it)."""
        call = getattr(self.store, read, None)
        if call is None:
            return None
        with self.bounded():
            since: datetime | None = await call(routine)
            return since
        raise self.no_answer(f"the {what} of {routine!r} is unreadable")

    async def read_paused(self, since: datetime | None = None) -> PausedRead:
        """The paused routines, as the store says now (remembered for statistics), and when
        the read that found them began.

        One read serves every fire that asks while it is under way: a thousand routines due
        at one instant cost one read, not a thousand. ``since``: the read must have begun
        then or later (a fire's slot: a pause written before the slot is honoured), so a
        read under way since before it is waited out and a new one made -- unless the wall
        clock is behind ``since`` even then (it went back): its answer is returned, and the
        fire, whose slot is not due, does not use it (a herd makes no read after read).
        """
        while (shared := self._paused_read) is not None:
            await shared.wait()
            if since is None or shared.started >= since:
                if shared.error is not None:
                    raise shared.error
                if shared.result is not None:
                    return shared.result
            elif shared.result is not None and self._runtime.now() < since:
                return shared.result
            # The reader was cancelled (its caller stopped), or began before ``since``: read
            # again ourselves.
        return await self._read_paused()

    async def prefetch_paused(self) -> PausedRead | None:
        """The paused routines, read for the loops the timer is about to wake at their slots
        (see :class:`~.sleepers.Sleepers`): their fires then need no read of their own.
        None during a stop, while another read is under way (the timer does not wait on a
        read begun before the slot: the fires see to it), when the read takes longer than
        :data:`PREFETCH_LIMIT` (it is given up), or when the store did not answer or
        failed: each fire then reads for itself, and meets the fault itself."""
        if self._runtime.stopping.value or self._paused_read is not None:
            return None
        try:
            with trio.move_on_after(PREFETCH_LIMIT):
                return await self._read_paused()
        except Exception:  # the fires' own reads report it, each for its slot
            pass
        return None

    async def _read_paused(self) -> PausedRead:
        """A read of our own, which others may join while it is under way."""
        shared = self._paused_read = SharedRead(self._runtime.now())
        try:
            with self.bounded():
                if self._reads_resumes:  # one read: the paused, and the latest resumes
                    since = shared.started - 2 * RESUME_LAG
                    names, resumed = await self.store.paused_with_resumes(since)  # type: ignore[attr-defined]
                    self.paused = names
                    shared.result = PausedRead(names, shared.started, resumed)
                else:
                    names = self.paused = await self.store.paused()
                    shared.result = PausedRead(names, shared.started)
                return shared.result
            shared.error = self.no_answer("the paused routines are unreadable")
            raise shared.error
        except StateFault as exc:
            shared.error = exc
            raise
        finally:
            self._paused_read = None
            shared.finish()

    async def set_paused(self, name: str, paused: bool) -> None:
        """Pause or resume ``name`` in the store (stamped now: a boot tells the slots before a
        pause from those during it), and remember it."""
        now = self._runtime.host_now()
        with self.bounded():
            if paused:
                await self.store.set_paused(name, True, now)
                self.paused = self.paused | {name}
            else:
                await self.store.set_paused(name, False, now)
                self.paused = self.paused - {name}
            return
        raise self.no_answer(f"could not {'pause' if paused else 'resume'} {name!r}", change=True)

    async def refresh_paused(self) -> None:
        """Re-read the paused routines for statistics; a fault keeps the last answer."""
        try:
            await self.read_paused()
        except StateFault as exc:
            log.debug("the paused routines could not be re-read: %s", exc)

    async def settle_once(
        self,
        routine: str,
        slot: datetime,
        outcome: Outcome,
        ms: int | None,
        *,
        if_unsettled: bool,
        error: str | None,
        output: str | None = None,
        usage: Usage | None = None,
    ) -> bool | None:
        """One bounded settle (a retry's, the boot's); False when it failed, None when the
        store did not answer it (logged): a write that may still land."""
        with self.bounded():
            return await self._store_settle(
                routine, slot, outcome, ms, if_unsettled, error, output, usage
            )
        self._settle_timed_out(routine, slot, outcome)
        return None

    def _store_settle(
        self,
        routine: str,
        slot: datetime,
        outcome: Outcome,
        ms: int | None,
        if_unsettled: bool,
        error: str | None,
        output: str | None,
        usage: Usage | None = None,
    ) -> Awaitable[bool]:
        """The store's settle, given ``output`` and ``usage`` when there are some and the store
        takes them."""
        extra: dict[str, Any] = {}
        if output is not None and self._takes_output:
            extra["output"] = output
        if usage is not None and self._takes_usage:
            extra["usage"] = usage
        return self.store.settle(
            routine, slot, outcome, ms, if_unsettled=if_unsettled, error=error, **extra
        )

    def _stop_passed(self) -> bool:
        """Whether a stop's bound on store calls has passed (a second interrupt, or a stop of
        no grace): what cut a call then is the stop, not the store."""
        bounds = not self.run_over or self._runtime.in_flight.value
        return bool(bounds) and trio.current_time() >= self._grace.deadline + STOP_MARGIN

    def _settle_timed_out(self, routine: str, slot: datetime, outcome: Outcome) -> None:
        log.warning(
            "%s: could not record the %s outcome of slot %s: %s",
            routine,
            outcome.value,
            format_iso(slot),
            "the stop ended it before the store answered"
            if self._stop_passed()
            else "the store did not answer in time",
        )

    async def settle(
        self,
        routine: str,
        slot: datetime,
        outcome: Outcome,
        ms: int | None,
        error: str | None,
        within: trio.CancelScope,
        output: str | None = None,
        usage: Usage | None = None,
    ) -> None:
        """Settle a fire, retrying with a back-off for up to the default grace.

        The first attempt is bounded by ``within``, the fire's own shielded scope, whose last
        step it is, rather than by a scope of its own: for 10,000 fires at once that scope was
        about 13 % of their CPU. Its deadline's ``Cancelled`` is then caught here, since the fire
        goes on (the retries, in a shielded scope of their own). A settle given up is logged
        and counted; the fire path goes on either way.
        """
        started = trio.current_time()  # one read: the first attempt's deadline, the give-up
        self.deadlines.note(within, self.store_deadline(start=started))
        try:
            if await self._store_settle(routine, slot, outcome, ms, False, error, output, usage):
                return
        except* trio.Cancelled:  # bare, or grouped by a nursery inside the store
            if not within.cancel_called:  # not our deadline (it cannot be): never swallowed
                raise
            self._settle_timed_out(routine, slot, outcome)
            unanswered = True
        else:
            unanswered = False
        finally:
            self.deadlines.forget(within)
        with trio.CancelScope(shield=True):  # ``within`` may be cancelled now
            give_up = started + self._runtime.default_grace
            await self._settle_again(
                routine, slot, outcome, ms, error, give_up, output, usage, unanswered
            )

    async def _settle_again(
        self,
        routine: str,
        slot: datetime,
        outcome: Outcome,
        ms: int | None,
        error: str | None,
        give_up: float,
        output: str | None,
        usage: Usage | None,
        unanswered: bool,
    ) -> None:
        """The retries after a first settle that failed, each bounded, until ``give_up``;
        ``unanswered``: the store did not answer the first."""
        delay = SETTLE_RETRY_FIRST
        attempts = 1
        while True:
            if trio.current_time() + delay > min(give_up, self._grace.deadline + STOP_MARGIN):
                break
            with self.bounded(delay):  # a stop meanwhile cuts the wait short
                await trio.sleep_forever()
            delay = min(delay * 2, SETTLE_RETRY_MAX)
            attempts += 1
            settled = await self.settle_once(
                routine,
                slot,
                outcome,
                ms,
                if_unsettled=False,
                error=error,
                output=output,
                usage=usage,
            )
            unanswered = settled is None
            if settled:
                log.info(
                    "%s: the %s outcome of slot %s recorded at attempt %d",
                    routine,
                    outcome.value,
                    format_iso(slot),
                    attempts,
                )
                return
        self.settle_failures[routine] += 1
        self._runtime.metrics.settle_failed(routine)
        if unanswered:
            # The last write may still be under way (a stalled disk or database): what
            # happens to the claim is not known here.
            log.error(
                "%s: the %s outcome of slot %s is not recorded after %d attempts, %s — if "
                "that write never lands, the claim stays unsettled and the next boot records "
                "it as interrupted",
                routine,
                outcome.value,
                format_iso(slot),
                attempts,
                "the stop ending the last"
                if self._stop_passed()
                else "the store not answering the last",
            )
            return
        log.error(
            "%s: the %s outcome of slot %s is lost after %d attempts — the claim stays "
            "unsettled and the next boot records it as interrupted",
            routine,
            outcome.value,
            format_iso(slot),
            attempts,
        )
