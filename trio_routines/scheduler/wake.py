"""The wake loop: poll the store for due wake-ups and fire them, one at a time.

One at a time, so a turn that never returns holds back every wake-up due after it on this
replica. The scheduler's optional ``wakeup_timeout`` bounds each turn, as a routine's
``timeout`` bounds its fires: the turn is cancelled and ends ``failed``, ``timed out after
<n>s`` (:func:`~trio_routines.turns.run_turn`, the path a cron fire takes), and the next due
wake-up runs. None by default: an agent's turn may legitimately be long.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import trio

from ..context import FireContext
from ..converter import dumps, wakeup_to_json
from ..errors import StateFault, Unconfirmed
from ..instants import format_iso
from ..names import session_routine
from ..records import Wakeup
from ..routines import Routine
from ..wakelimits import by_turn
from ..wakeups import MAX_ATTEMPTS, POLL_INTERVAL, defer_dropped
from ..wakeuptexts import envelope
from .calls import StoreCalls
from .clock import ClockWatch
from .restarts import RESTART_FIRST, Restarts
from .state import Runtime, log
from .turning import SessionTurns
from .wakecalls import WakeupCalls

#: Wake-up polls between two counts of the pending wake-ups (a gauge, not a decision).
COUNT_EVERY = 10
#: The deferred one-shots whose retries log quietly, and the put-back ones whose turn the
#: rate counted already, each at most (see ``WakeLoop._wake``).
SAID_KEPT = 1024
#: Why a taken one-shot did not run, as its lines say: its session busy, or never held.
BUSY = "session busy"
NOT_RUN = "not run"
#: How many times a wake-up whose turn never began is offered back to the store.
PUT_BACK_TRIES = 3


def _whole(wakeup: Wakeup) -> str:
    """``wakeup`` as one line of JSON, its prompt included: what adds it again."""
    return dumps(wakeup_to_json(wakeup))


class WakeLoop:
    """Polls for due wake-ups and runs each as a turn; owns the count of pending ones.

    Collaborators: the :class:`Runtime` (wall clock, stop, turns in flight), the
    :class:`SessionTurns` (the turn; its spending, for the session's budgets), the
    :class:`StoreCalls` (take, defer, count), the :class:`ClockWatch` (the offset, each
    poll), the :class:`Restarts`, and the :class:`WakeupCalls` (each turn recorded for the
    rate limit). ``turn_timeout``: the seconds each turn may take (None: no bound).
    """

    def __init__(
        self,
        runtime: Runtime,
        turns: SessionTurns,
        calls: StoreCalls,
        clock: ClockWatch,
        restarts: Restarts,
        wakeups: WakeupCalls,
        *,
        poll_interval: float,
        turn_timeout: float | None,
    ) -> None:
        self._runtime = runtime
        self._turns = turns
        self._calls = calls
        self._clock = clock
        self._restarts = restarts
        self._wakeups = wakeups
        self._poll_interval = poll_interval
        self._turn_timeout = turn_timeout
        #: The pending wake-ups as last counted (None: not yet).
        self.pending: int | None = None
        #: The one-shots whose busy session this process said it retries (in the order said,
        #: at most :data:`SAID_KEPT`): their retries log at DEBUG.
        self._said: dict[str, None] = {}
        #: The one-shots put back whose turn was recorded for the rate limit though it never
        #: began (their hold lost meanwhile; at most :data:`SAID_KEPT`): recorded once, their
        #: turn is not recorded again when it runs here.
        self._counted: dict[str, None] = {}
        #: One-shots taken for turns that never began, which the store would not take back
        #: yet: offered again at each poll, and named as lost if the stop comes first.
        self._unreturned: dict[str, tuple[str, Wakeup]] = {}

    async def run(self) -> None:
        """Poll every poll interval until cancelled or stopped (see the package doc)."""
        try:
            await self._poll()
        finally:
            self._say_lost()

    async def _poll(self) -> None:
        backoff = RESTART_FIRST
        polls = 0
        stopping = self._runtime.stopping
        while True:
            try:
                while True:
                    # Shielded, each call bounded: a stop does not cut a return whose answer
                    # would say whether it is back (one cut would be named lost, maybe back).
                    with trio.CancelScope(shield=True):
                        await self._return_unreturned()
                    while not stopping.value and await self._wake_once():
                        backoff = RESTART_FIRST
                    if polls % COUNT_EVERY == 0:
                        await self._count_pending()
                    polls += 1
                    await trio.sleep(self._poll_interval)
                    self._clock.note_offset()
                    await self._calls.refresh_paused()
            except Exception as exc:
                if stopping.value:
                    return
                backoff = await self._restarts.restart_after("wake", "wake-up poll", exc, backoff)

    async def _count_pending(self) -> None:
        """Count the pending wake-ups for ``trio_routines_pending_wakeups``; a fault keeps the
        last count."""
        try:
            self.pending = await self._wakeups.count()
        except StateFault as exc:
            log.debug("the pending wake-ups could not be counted: %s", exc)

    async def _wake_once(self) -> bool:
        """Take and fire one due wake-up; False when none was due or the store failed."""
        # A stop's drain that began during the take waits for the wake-up it returns, whose
        # turn still runs (it was taken: it is not in the store); a take that finds none is
        # no turn in flight (``/healthz`` says "ok" through the polls).
        in_flight = self._runtime.in_flight
        with trio.CancelScope(shield=True):
            try:
                with self._runtime.taking():
                    wakeup = await self._wakeups.take_due(self._runtime.now())
                    if wakeup is None:
                        return False
                    in_flight.enter()  # before the take ends: the drain never sees 0 between
                try:
                    await self._wake(wakeup)
                finally:
                    in_flight.leave()
            except StateFault as exc:
                if self._runtime.stopping.value:  # no next poll: the stop's bound ended it
                    log.warning("wake-up poll ended by the stop: %s", exc)
                else:
                    log.error("wake-up poll failed (continuing next poll): %s", exc)
                return False
        return True

    async def _wake(self, wakeup: Wakeup) -> None:
        label = f"wake {wakeup.id[:8]}"
        why = FireContext(
            "wakeup",
            wakeup.session,
            wakeup=wakeup.id,
            replica=self._runtime.replica,
            origin=wakeup.origin,
        )
        spending = self._turns.spending
        over = None
        if spending.session_budgets:
            over = await spending.over_budget("session", wakeup.session, spending.session_budgets)
        routine = self._routine_of(wakeup.session)
        if over is None and routine is not None and routine.budgets:
            over = await spending.over_budget("routine", routine.name, routine.budgets)
        if over is not None:  # docs/design.md: dropped, not deferred
            log.info(
                "%s: %s — %s",
                label,
                over,
                "this occurrence is not run; the next fires per cron"
                if wakeup.recurring
                else f"dropped, not run (session {wakeup.session})",
            )
            return
        if by_turn(wakeup.origin):  # an agent's: the rate holds as it comes, too
            room = await self._wakeups.room_at(wakeup.session, wakeup.fire_at)
            if room is not None and await self._held_by_rate(label, wakeup, room):
                return

        counted = False

        async def started() -> None:  # recorded once it runs (a busy one never did)
            nonlocal counted
            counted = True
            if wakeup.id in self._counted:  # recorded when it was taken before, put back
                del self._counted[wakeup.id]
                return
            await self._wakeups.note_turn(wakeup.session, wakeup.fire_at)

        # A one-shot retried while its session stays busy says so once, at its first
        # deferral in this process (after a restart too): a turn that runs for an hour would
        # otherwise fill the log every poll.
        said = wakeup.id in self._said
        turn = await self._turns.turn(
            why, label, envelope(wakeup), self._turn_timeout, on_start=started, quiet=said
        )
        self._said.pop(wakeup.id, None)
        if turn.began and not turn.busy:
            return
        if wakeup.recurring:
            log.info("%s: next fires per cron", label)
            return
        if not turn.busy:  # taken, never run: its session could not be held (logged)
            if counted:
                remember(self._counted, wakeup.id)
            await self._put_back(label, wakeup)
            return
        try:
            deferred = await self._defer(label, wakeup, BUSY)
        except StateFault as exc:  # taken, and not back: held here, offered at each poll
            self._hold(label, wakeup, BUSY, exc)
            return
        if deferred is None:
            return
        if not deferred:
            log.error("%s: %s", label, defer_dropped(wakeup))
            return
        remember(self._said, wakeup.id)
        if said:
            log.debug("%s: session busy — retry %d, next poll", label, wakeup.attempts)
        else:
            log.info(
                "%s: session busy — retrying %s, up to %d times%s (logged at DEBUG)",
                label,
                "each poll"
                if self._poll_interval >= POLL_INTERVAL
                else f"each poll at first, every {POLL_INTERVAL:g}s at the most",
                MAX_ATTEMPTS,
                f" (retry {wakeup.attempts} now)" if wakeup.attempts else "",
            )

    async def _put_back(self, label: str, wakeup: Wakeup) -> None:
        """Put back a one-shot taken for a turn that never began (its session could not be
        held: the store did not answer, or this replica's hold was lost): a crash loses at
        most the wake-up whose turn was in flight, and this one's never was. The store that
        failed may answer again in a moment (a connection replaced): asked up to
        :data:`PUT_BACK_TRIES` times, a second apart, then at each poll until it takes it
        back, unless a stop begins (it is then named as lost, whole, to be added again)."""
        for attempt in range(PUT_BACK_TRIES):
            try:
                await self._offer_back(label, wakeup)
                return
            except StateFault as exc:
                if attempt + 1 < PUT_BACK_TRIES and not self._runtime.stopping.value:
                    await trio.sleep(1)
                    continue
                self._hold(label, wakeup, NOT_RUN, exc)
                return

    async def _offer_back(self, label: str, wakeup: Wakeup) -> None:
        """Offer ``wakeup`` back to the store once: put back, or dropped at its limits (said).
        StateFault when the store did not answer."""
        deferred = await self._defer(label, wakeup, NOT_RUN)
        if deferred:
            log.warning("%s: not run: put back, tried again at the next poll", label)
        elif deferred is not None:
            log.error("%s: %s", label, defer_dropped(wakeup))

    async def _defer(self, label: str, wakeup: Wakeup, why: str) -> bool | None:
        """Give the taken one-shot ``wakeup`` back to the store, due a retry's wait from now:
        whether it took it (False: dropped at its limits), or None when its return is not
        confirmed, which settles it: it may be back, and given again it could be there
        twice (said, ``why`` it did not run, with the record). StateFault when the store did
        not answer."""
        retry_at = self._runtime.now() + timedelta(seconds=self._retry_after(wakeup))
        try:
            return await self._wakeups.defer(wakeup, retry_at)
        except Unconfirmed as exc:
            log.error(
                "%s: %s; its return is not confirmed (%s): %s", label, why, exc, _whole(wakeup)
            )
            return None

    def _hold(self, label: str, wakeup: Wakeup, why: str, exc: StateFault) -> None:
        """Keep the one-shot the store did not take back, to offer it at each poll."""
        log.warning(
            "%s: %s, and not put back yet (%s): offered again at each poll", label, why, exc
        )
        self._unreturned[wakeup.id] = (label, wakeup)

    async def _return_unreturned(self) -> None:
        """Offer each one-shot the store would not take back before, once (see
        :meth:`_put_back`)."""
        for wakeup_id, (label, wakeup) in list(self._unreturned.items()):
            try:
                await self._offer_back(label, wakeup)
            except StateFault:
                continue  # the next poll asks again
            del self._unreturned[wakeup_id]

    def _say_lost(self) -> None:
        """Name, whole, each one-shot still not taken back when the loop ends: lost."""
        for label, wakeup in self._unreturned.values():
            log.error(
                "%s: lost: its turn never began, and the store did not take it back before "
                "the stop — add it again: %s",
                label,
                _whole(wakeup),
            )
        self._unreturned.clear()

    def _retry_after(self, wakeup: Wakeup) -> float:
        """Seconds until a busy one-shot is tried again: a poll; under a poll shorter than
        the default's 30 s, twice as long at each retry up to 30 s. The retries are counted
        (:data:`MAX_ATTEMPTS`): a poll apart at ``--poll 0.05``, a session busy for 6 s
        would drop it; so they span close to an hour whatever the poll."""
        poll = self._poll_interval
        if poll >= POLL_INTERVAL:
            return poll
        doubled: float = poll * 2.0 ** min(wakeup.attempts or 0, 32)
        return min(POLL_INTERVAL, doubled)

    def _routine_of(self, session: str) -> Routine | None:
        """The loaded routine whose session ``session`` is (its budgets hold there too)."""
        name = session_routine(session)
        return None if name is None else self._runtime.routines.get(name)

    async def _held_by_rate(self, label: str, wakeup: Wakeup, room: datetime) -> bool:
        """A turn-set wake-up come due while its session has had the rate's turns in the hour:
        a recurring one's occurrence is not run; a one-shot waits for ``room``, re-queued
        (counted against its retries). False: it runs now after all (a re-queue the store did
        not make: a limit is no reason to lose a wake-up already taken)."""
        rate = self._wakeups.limits.rate
        over = f"rate limit — {rate} wake-up turns of session {wakeup.session!r} in the hour"
        if wakeup.recurring:
            log.info("%s: %s: this occurrence is not run; the next fires per cron", label, over)
            return True
        try:
            deferred = await self._wakeups.defer(wakeup, room)
        except Unconfirmed as exc:  # it may be deferred: run now, it could run twice
            log.warning("%s: %s; its deferral is not confirmed (%s): not run now", label, over, exc)
            return True
        except StateFault as exc:
            log.warning("%s: %s, but it could not be deferred (%s): it runs now", label, over, exc)
            return False
        if not deferred:
            log.error("%s: %s: %s", label, over, defer_dropped(wakeup))
        else:
            log.info("%s: %s: deferred to %s", label, over, format_iso(room))
        return True


def remember(memo: dict[str, None], wakeup_id: str) -> None:
    """Add ``wakeup_id`` to ``memo``, forgetting the oldest beyond :data:`SAID_KEPT` (retried
    elsewhere since: another replica's)."""
    memo[wakeup_id] = None
    if len(memo) > SAID_KEPT:
        del memo[next(iter(memo))]
