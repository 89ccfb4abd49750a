"""The fire path: claim a slot -> run the turn -> settle it; and the claim-less runs."""

from __future__ import annotations

import functools
from collections import Counter
from datetime import datetime

import trio

from ..context import cron_context
from ..errors import StateFault
from ..instants import format_iso, require_utc, truncate_ms
from ..logs import log_fields
from ..output import Tail
from ..records import ClaimResult, ClaimStatus, Outcome
from ..routines import Routine
from ..tracing import FireSpans, done, fire_spans
from .calls import StoreCalls
from .claiming import Claiming
from .gaps import GapRecording
from .grace import bounded_by_caller
from .holds import TurnHold
from .membership import Membership
from .results import refused_result, settled_result
from .resumes import PauseHeld
from .state import (
    RESUME_LAG,
    FireResult,
    NotOnGrid,
    NotYetDue,
    PausedRead,
    Runtime,
    Stopping,
    busy_reason,
    log,
    on_grid,
)
from .turning import SessionTurns

CLAIMED_TOO_LATE = "claimed only after the store's deadline (its caller had given up): not run"


class FirePath:
    """Claim -> turn -> settle, and the claim-less runs; owns the outcomes' counts.

    Collaborators: the :class:`Runtime` (routines, wall clock, stop, turns in flight, the
    run's nursery, metrics), the :class:`StoreCalls` (the paused read, deadlines, the
    settle), the :class:`Membership` (joined for an external fire), the :class:`Claiming`
    (the claim, with its holds and the session's), the :class:`SessionTurns` (the turn
    itself; its spending, for a routine's budgets) and the :class:`GapRecording` (the slots
    a caller's fire passed over).
    """

    def __init__(
        self,
        runtime: Runtime,
        calls: StoreCalls,
        membership: Membership,
        claiming: Claiming,
        turns: SessionTurns,
        gaps: GapRecording,
    ) -> None:
        self._gaps = gaps
        self._turns = turns
        self._spending = turns.spending
        self._runtime = runtime
        self._calls = calls
        self._membership = membership
        self._claiming = claiming
        self._pauses = PauseHeld(runtime, calls, gaps)
        # Looked up once: the fire path is hot (10,000 fires at once, see benchmarks/).
        self._in_flight = runtime.in_flight
        self._stopping = runtime.stopping
        self._metrics = runtime.metrics
        self._deadlines = calls.deadlines
        #: Outcomes (and refusals: paused, duplicate, stale) counted for the statistics.
        self.outcomes: Counter[str] = Counter()
        #: For a slot held by a pause resumed since, the resume's instant: every slot up to it
        #: was the pause's (the cron loop takes it, see :meth:`_held_by_a_pause`).
        self.held_until: dict[str, datetime] = {}

    async def fire(
        self,
        name: str,
        slot: datetime,
        *,
        task_status: trio.TaskStatus[ClaimResult] = trio.TASK_STATUS_IGNORED,
    ) -> FireResult:
        """The external-clock path: claim ``slot`` of routine ``name``, run it, settle it.

        Reports the claim decision through ``task_status`` as soon as it is known, so a host
        can answer its caller and let the turn go on in the runtime's nursery
        (``await scheduler.start_fire(...)``). Raises :class:`UnknownRoutine`,
        :class:`NotOnGrid`, :class:`Stopping`, or :class:`StateFault` (nothing was claimed).
        """
        routine = self._runtime.routine(name)
        slot = truncate_ms(require_utc(slot, "the slot"))  # (a clear error for a wrong type)
        if not on_grid(routine, slot):
            resolved = routine.resolved_cron
            shown = "" if resolved == routine.cron else f" = {resolved}"  # its H resolved
            raise NotOnGrid(
                f"slot {format_iso(slot)} is not on the cron grid of {name!r} "
                f"({routine.cron}{shown})"
            )
        now = self._runtime.host_now()
        if slot > now:
            raise NotYetDue.of(name, slot, now)
        if self._stopping.value:
            raise Stopping("the scheduler is stopping; no new fires are accepted")
        async with self._membership.present():
            # What the claims and gaps account for before this slot: a caller's slot after a
            # downtime passes over those since, which no boot would see behind its claim.
            accounted = await self._gaps.accounted_for(name)
            fire = functools.partial(
                self.fire_slot, routine, slot, task_status, external=True, passed_from=accounted
            )
            # Our presence watched; shielded, its turn bounded by the grace once we are
            # cancelled (a caller that gave up does not wait on a hung agent).
            result = await bounded_by_caller(
                functools.partial(self._membership.guarded, fire), self._runtime.default_grace
            )
            # Its session free in the store before it answers (a herd's let-gos still travel
            # together, a moment later): the next slot fired through another replica, right
            # after, found the session held and was skipped.
            await self._membership.let_go_now(self._calls.store_deadline())
        await trio.lowlevel.checkpoint_if_cancelled()  # a cancelled caller hears of it now
        return result

    async def start_fire(self, name: str, slot: datetime) -> ClaimResult:
        """Claim ``slot`` now and let the turn continue in the running scheduler's nursery."""
        if self._stopping.value:
            raise Stopping("the scheduler is stopping; no new fires are accepted")
        if self._runtime.nursery is None:
            raise Stopping("the scheduler is not running")
        result: ClaimResult = await self._runtime.nursery.start(self.fire, name, slot)
        return result

    async def fire_slot(
        self,
        routine: Routine,
        slot: datetime,
        task_status: trio.TaskStatus[ClaimResult] = trio.TASK_STATUS_IGNORED,
        *,
        external: bool = False,
        read: PausedRead | None = None,
        now: datetime | None = None,
        passed_from: datetime | None = None,
        late: datetime | None = None,
    ) -> FireResult:
        """Read the paused routines, claim ``slot`` unless paused, run the turn, settle it:
        shielded, so a stop never cuts a claim or a settle short (the turn has its own grace).

        The shielded scope is also the claim's deadline (see :mod:`.deadlines`), and the
        settle's first attempt's, which catches its own cancel (see
        :meth:`StoreCalls.settle`): scopes fewer for each of 10,000 fires due at once. A
        cancel the scope itself catches is therefore the claim's. One frame from the paused
        read to the claim: every coroutine a fire holds while 10,000 fires wait together is
        collector work. ``external``: a caller's fire, traced as the caller's context's child.
        ``read``: the paused routines as the timer read them for the loops it woke at their
        slots (:meth:`StoreCalls.prefetch_paused`), used when it began at ``slot`` or later;
        ``now``: the wall clock, read by the caller since ``read`` came, with nothing awaited
        in between (one read fewer per fire); used only with that ``read``, never after a
        read of the fire's own. ``passed_from``: for a caller's fire, the last slot the claims
        and gaps accounted for before it; ``late``: a loop's slot a minute behind, when its fire
        began. Once claimed, before its turn, what it passed is recorded (``before_turn``).
        """
        name = routine.name
        spans = fire_spans(name, slot, self._runtime.replica, external=external)  # None: off
        self._in_flight.enter()  # as ``with runtime.working()``, without an object per fire
        try:
            with trio.CancelScope(shield=True) as scope:
                # Every replica honours a pause: read first, in a read begun at the slot or
                # later, so that a pause written before the slot is seen.
                while True:
                    if read is None or read.started < slot:
                        now = None  # read again after the store's answer
                        try:
                            read = await self._calls.read_paused(slot)
                        except StateFault as exc:
                            raise StateFault(
                                f"could not claim slot {format_iso(slot)} of {name!r}: {exc}"
                            ) from None
                    if now is None:
                        now = self._runtime.now()
                    if slot > now:  # the wall clock went back while the paused set was read
                        raise NotYetDue.of(name, slot, now)
                    if read.started >= slot:
                        break
                    # Begun before the slot (the clock was behind it), and the slot has come
                    # since: that read does not decide it.
                    read = None
                if name in read.names or (
                    # Read after its slot (this replica stalled, its loop held up; a caller's
                    # slot of the past): a pause that held the slot when it came may have been
                    # resumed since. A loop's slot the boot planned knew the resumes already.
                    (name in read.resumed or read.started - slot >= RESUME_LAG)
                    and (external or slot > self._calls.resumes_read_at)
                    and await self._held_by_a_pause(name, slot, read, external)
                ):
                    task_status.started(ClaimResult(ClaimStatus.PAUSED))
                    refused = self._refused(name, slot, ClaimResult(ClaimStatus.PAUSED), external)
                    return done(spans, refused)
                self._deadlines.note(scope, self._calls.store_deadline())
                try:
                    hold, claim = await self._claiming.hold_and_claim(routine, slot, now)
                finally:
                    self._deadlines.forget(scope)
                if spans is not None:
                    spans.claimed(claim)
                try:
                    task_status.started(claim)
                    if claim.status is not ClaimStatus.TAKEN:
                        return done(spans, self._refused(name, slot, claim, external))
                    passed = passed_from is not None or late is not None
                    if scope.cancel_called:
                        # The store answered after the claim's deadline (a stalled disk, a
                        # stop's bound): a claim confirmed after its caller gave up must not
                        # start a turn, that late and perhaps during a stop. It is recorded.
                        with trio.CancelScope(shield=True) as scope:
                            if passed:
                                await self._gaps.before_turn(routine, slot, passed_from, late)
                            return done(spans, await self._claimed_too_late(name, slot, scope))
                    if passed:  # a caller's slot after a downtime, a late one's caught-up slots
                        await self._gaps.before_turn(routine, slot, passed_from, late)
                    del claim  # as the context, not kept through the turn
                    return done(
                        spans, await self._turn_and_settle(routine, slot, scope, hold, spans)
                    )
                finally:
                    hold.release()
            raise self._calls.no_answer(f"could not claim slot {format_iso(slot)} of {name!r}")
        except BaseException as exc:
            if spans is not None:
                spans.raised(exc)
            raise
        finally:
            self._in_flight.leave()

    async def _held_by_a_pause(
        self, name: str, slot: datetime, read: PausedRead, external: bool
    ) -> bool:
        """Whether a pause resumed since held ``slot`` (see :class:`.resumes.PauseHeld`); a
        loop's slot so held leaves the loop the resume's instant (:attr:`held_until`)."""
        held = await self._pauses.held(name, slot, read, external=external)
        if held is not None and not external:
            self.held_until[name] = held
        return held is not None

    async def _claimed_too_late(
        self, name: str, slot: datetime, scope: trio.CancelScope
    ) -> FireResult:
        log.warning(
            "%s: slot %s was claimed only after the store's deadline — not run; "
            "recorded as interrupted",
            name,
            format_iso(slot),
            extra={"routine": name, "slot": slot, "replica": self._runtime.replica},
        )
        await self._calls.settle(name, slot, Outcome.INTERRUPTED, None, CLAIMED_TOO_LATE, scope)
        self.outcomes[Outcome.INTERRUPTED.value] += 1
        return FireResult(
            name,
            slot,
            claimed=True,
            outcome=Outcome.INTERRUPTED,
            failed=CLAIMED_TOO_LATE,
            settled_at=self._runtime.now(),
        )

    def _refused(self, name: str, slot: datetime, claim: ClaimResult, external: bool) -> FireResult:
        """Log and count a slot not claimed: paused, a duplicate, or stale."""
        replica = self._runtime.replica
        return refused_result(
            name, slot, claim, replica, self.outcomes, self._metrics, external=external
        )

    async def _turn_and_settle(
        self,
        routine: Routine,
        slot: datetime,
        scope: trio.CancelScope,
        hold: TurnHold,
        spans: FireSpans | None,
    ) -> FireResult:
        """The turn, then its settle, the last step of ``scope`` (see :meth:`StoreCalls.settle`).
        A routine over its budget runs no turn: the slot is settled skipped with the reason."""
        name = routine.name
        if routine.budgets:
            over = await self._spending.over_budget("routine", name, routine.budgets)
            if over is not None:
                await self._calls.settle(name, slot, Outcome.SKIPPED, 0, over, scope)
                self.outcomes[Outcome.SKIPPED.value] += 1
                self._metrics.fires[name, Outcome.SKIPPED.value] += 1
                return FireResult(
                    name,
                    slot,
                    claimed=True,
                    outcome=Outcome.SKIPPED,
                    ms=0,
                    reason=over,
                    settled_at=self._runtime.now(),
                )
        late = (self._runtime.now() - slot).total_seconds()
        replica = self._runtime.replica
        why = cron_context(routine.session, name, slot, replica)
        # The reply's end, for a routine that keeps output (opt-in: replies may be private).
        tail = None if routine.output is None else Tail(routine.output)
        on_text = None if tail is None else tail.add
        with log_fields(late_ms=round(late * 1000)):
            turn = await self._turns.turn(
                why, name, routine.prompt, routine.timeout, on_text, hold=hold, spans=spans
            )
        # The turn is over and its usage recorded: its session is free (here and in every
        # replica) while the outcome is written; the claim's own hold waits for the settle.
        hold.end_turn()
        del why, on_text  # not kept through the settle: at 10,000 at once, collector work
        # The reason goes with the outcome. A busy session is an overlap, not a failure: when
        # our own previous turn of it runs, nothing is stored (history says it was still
        # running); when the agent said busy, its words are -- a 409 may also mean that it
        # already did this slot, by the idempotency key.
        error = turn.failed
        output = None if tail is None else tail.text()
        if spans is not None:
            spans.settling()
        await self._calls.settle(
            name, slot, turn.outcome, turn.ms, error, scope, output, turn.usage
        )
        outcome = turn.outcome.value
        self.outcomes[outcome] += 1
        settled = self._runtime.now()
        self._metrics.fired(name, outcome, turn.ms, late, at=settled)
        busy = turn.busy  # as the original: skipped with the reason, and no failure
        return settled_result(
            name,
            slot,
            turn.outcome,
            turn.ms,
            reason=busy_reason(name, turn.failed, on_cron=routine.cron is not None)
            if busy
            else None,
            failed=None if busy else turn.failed,
            settled_at=settled,
        )
