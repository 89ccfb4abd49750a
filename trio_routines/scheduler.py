"""The runtime: cron loops and a wake loop in one Trio nursery.

Theory of operation
-------------------

Two clocks, never mixed. *When to wake up* is Trio's clock (``trio.sleep_until``); *what time
it is, which slot* is the injected wall clock. Each cron routine has one task::

    due = next slot after (newest claim's firedAt, or now on a first boot)
    loop:
        sleep towards due, at most 6 h at a time, re-reading the wall clock after every wake
        claim due (the grid instant, never now) -> run the turn -> settle      [shielded]
        due = next slot after now                                              [wall clock]

so a backward jump never fires early (the loop just sleeps again), a forward jump past a slot
fires it once, and slots that pass during a slow turn are skipped, never queued. A catch-up is
simply a first ``due`` that is already past: it fires at once, once.

A fire (claim -> turn -> settle) runs in a shielded cancel scope, so cancelling the loops never
leaves a claim unsettled by our own doing. The shield has a bound: ``stop(grace)`` cancels the
loops at once, then gives in-flight turns ``grace`` seconds before cancelling them through
their own scope and settling them ``interrupted``. A process that dies instead leaves its
claim unsettled, and the next boot records it as interrupted -- never replayed.

After every sleep a loop compares how far the wall clock and Trio's clock moved; the offset
between them is shared, so one jump is logged once however many loops notice it. The wake loop
(or, without wake-ups, a clock watch) looks every poll interval, and a jump it sees wakes every
sleeping cron loop to re-read the wall clock: a clock set forward past a daily slot fires it
within a poll, not at the end of the 6-hour sleep.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import attrs
import trio
import trio_util

from .agent import Agent
from .context import firing_slot
from .cron import next_run
from .errors import InvalidRoutine, StateFault, TrioRoutinesError
from .instants import format_iso, slot_name, truncate_ms
from .metrics import Metrics
from .records import ClaimResult, ClaimStatus, Fire, Outcome, Wakeup
from .routines import Routine
from .sessions import SessionGate
from .store import Store
from .turns import TurnResult, run_turn
from .wakeups import POLL_INTERVAL, envelope

log = logging.getLogger("trio_routines")

MAX_WAIT = 6 * 3600.0  # seconds: the longest single sleep before the wall clock is re-read
DEFAULT_GRACE = 10.0
JUMP_THRESHOLD = 5.0


def system_now() -> datetime:
    return datetime.now(UTC)


class UnknownRoutine(TrioRoutinesError, LookupError):
    """Raised by :meth:`Scheduler.fire` and :meth:`Scheduler.run_now` for a name not loaded."""


class NotOnGrid(TrioRoutinesError, ValueError):
    """Raised by :meth:`Scheduler.fire` for a slot that is not on the routine's cron grid."""


class NotYetDue(TrioRoutinesError, ValueError):
    """Raised by :meth:`Scheduler.fire` for a slot still in the future on our wall clock.

    Firing it would run it early, and a far-future claim would make every real slot before it
    stale. ``wait`` is how many seconds remain: an external clock a little ahead of ours can
    simply retry then (the HTTP surface answers 503 with that ``Retry-After``).
    """

    def __init__(self, message: str, wait: float) -> None:
        super().__init__(message)
        self.wait = wait


class Stopping(TrioRoutinesError, RuntimeError):
    """Raised when a fire is requested from a scheduler that is stopping."""


@attrs.frozen
class FireResult:
    """What became of one requested slot."""

    name: str
    slot: datetime
    claimed: bool
    reason: str | None = None  # "duplicate" or "stale" when not claimed
    outcome: Outcome | None = None
    ms: int | None = None
    failed: str | None = None


@attrs.frozen
class Statistics:
    """A snapshot of the runtime, for health checks and dashboards."""

    armed: tuple[str, ...]
    in_flight: int
    next_due: Mapping[str, datetime | None]
    outcomes: Mapping[str, int]
    clock_jumps: int
    stopping: bool


def on_grid(routine: Routine, slot: datetime) -> bool:
    """Whether ``slot`` is an instant the routine's cron produces (any instant without cron)."""
    if routine.cron is None:
        return True
    slot = truncate_ms(slot)
    try:
        return next_run(routine.cron, routine.tz, slot - timedelta(milliseconds=1)) == slot
    except OverflowError:  # the first instant datetime can hold
        return False


class Scheduler:
    """Fires routines and wake-ups into an agent; see the module doc.

    Start it inside a nursery: ``scheduler = await nursery.start(serve_routines, ...)``, or
    ``await nursery.start(scheduler.run)``. :meth:`fire` and :meth:`run_now` also work on a
    scheduler that was never started (the command line's one-shot paths use them so).
    """

    def __init__(
        self,
        *,
        agent: Agent,
        store: Store,
        routines: Iterable[Routine] = (),
        now: Callable[[], datetime] = system_now,
        external_clock: bool = False,
        wakeups: bool = True,
        max_wait: float = MAX_WAIT,
        poll_interval: float = POLL_INTERVAL,
        jump_threshold: float = JUMP_THRESHOLD,
        default_grace: float = DEFAULT_GRACE,
    ) -> None:
        self.agent = SessionGate(agent)
        self.store = store
        self.routines: dict[str, Routine] = {}
        for routine in routines:
            if routine.name in self.routines:
                raise InvalidRoutine(f"two routines are named {routine.name!r}")
            self.routines[routine.name] = routine
        self.now = now
        self.external_clock = external_clock
        self.wakeups = wakeups
        self.max_wait = max_wait
        self.poll_interval = poll_interval
        self.jump_threshold = jump_threshold
        self.default_grace = default_grace
        self._stopping = trio_util.AsyncBool(False)
        self._loops = trio.CancelScope()
        self._grace_deadline = math.inf
        self._grace_scopes: set[trio.CancelScope] = set()
        self._nursery: trio.Nursery | None = None
        self._next_due: dict[str, datetime | None] = {}
        self._armed: list[str] = []
        self._outcomes: Counter[str] = Counter()
        self.metrics = Metrics()
        self._in_flight = trio_util.AsyncValue(0)
        self._jumps = 0
        self._offset: float | None = None
        self._clock_moved = trio.Event()

    # -- the service ----------------------------------------------------------------------

    async def run(
        self, *, task_status: trio.TaskStatus[Scheduler] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Boot (reconcile, plan catch-ups), start the loops, and run until stopped.

        A fault reading a routine's newest claim raises from here before anything runs:
        a routine whose last fire cannot be known must not run blind.
        """
        first_due = {} if self.external_clock else await self._boot()
        for name, due in first_due.items():
            self._armed.append(name)
            self._next_due[name] = due
        self._note_offset()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._run_loops, first_due)
            task_status.started(self)
        self._nursery = None

    async def _boot(self) -> dict[str, datetime]:
        newest = await self._read_newest_claims()
        latest = {}
        for name in self.routines:
            fire = newest[name]
            if fire is not None and fire.outcome is None:
                log.warning(
                    "%s: the fire claimed at %s never finished — the process stopped mid-turn "
                    "and that slot stays skipped (see `python -m trio_routines history %s`)",
                    name,
                    format_iso(fire.fired_at),
                    name,
                )
                # Only if still unsettled: another scheduler sharing the store may be the one
                # mid-turn, and may settle the real outcome just before we write.
                await self.store.settle(name, fire.slot, Outcome.INTERRUPTED, if_unsettled=True)
            if fire is not None:
                latest[name] = fire.fired_at
        current = self.now()
        first_due = {}
        for name, routine in self.routines.items():
            if routine.cron is None:
                continue
            due = next_run(routine.cron, routine.tz, latest.get(name, current))
            if due is None:
                log.warning('%s: cron "%s" will never fire again — not armed', name, routine.cron)
                continue
            if due <= current:
                log.info("%s: catching up a missed run", name)
            first_due[name] = due
        return first_due

    async def _read_newest_claims(self) -> dict[str, Fire | None]:
        """Every routine's newest claim, read concurrently (the store bounds its threads)."""
        newest: dict[str, Fire | None] = {}
        faults: dict[str, StateFault] = {}

        async def read(name: str) -> None:
            try:
                newest[name] = await self.store.latest_fire(name)
            except StateFault as exc:
                faults[name] = exc

        async with trio.open_nursery() as nursery:
            for name in self.routines:
                nursery.start_soon(read, name)
        for name in self.routines:  # the first broken routine in order, as one plain error
            if name in faults:
                raise faults[name]
        return newest

    async def _run_loops(self, first_due: dict[str, datetime]) -> None:
        with self._loops:
            async with trio.open_nursery() as loops:
                for name, due in first_due.items():
                    loops.start_soon(self._cron_loop, self.routines[name], due)
                if self.wakeups:
                    loops.start_soon(self._wake_loop)
                elif first_due:
                    loops.start_soon(self._watch_clock)
                try:
                    await trio.sleep_forever()
                finally:
                    if not self._stopping.value:
                        # Cancelled by the host's scope rather than by stop(): bound the
                        # shielded fires all the same, before waiting for them.
                        self._begin_stop(self.default_grace)

    def stop(self, grace: float | None = None) -> None:
        """Stop arming at once; give in-flight turns ``grace`` seconds, then interrupt them.

        Safe to call from inside a turn (that fire still settles) and more than once (the
        shortest grace wins).
        """
        self._begin_stop(self.default_grace if grace is None else grace)
        self._loops.cancel()

    def _begin_stop(self, grace: float) -> None:
        self._stopping.value = True
        self._grace_deadline = min(self._grace_deadline, trio.current_time() + max(0.0, grace))
        for scope in self._grace_scopes:
            scope.deadline = min(scope.deadline, self._grace_deadline)

    @property
    def stopping(self) -> bool:
        return bool(self._stopping.value)

    async def wait_drained(self) -> None:
        """Return once a stop was requested and no turn is in flight any more."""
        await self._stopping.wait_value(True)
        await self._in_flight.wait_value(0)

    def render_metrics(self) -> str:
        """The runtime's counters in the Prometheus text format (``GET /metrics``)."""
        stats = self.statistics()
        return self.metrics.render(
            in_flight=stats.in_flight, armed=len(stats.armed), clock_jumps=stats.clock_jumps
        )

    def statistics(self) -> Statistics:
        return Statistics(
            armed=tuple(self._armed),
            in_flight=int(self._in_flight.value),
            next_due=MappingProxyType(dict(self._next_due)),
            outcomes=MappingProxyType(dict(self._outcomes)),
            clock_jumps=self._jumps,
            stopping=self._stopping.value,
        )

    # -- clocks ---------------------------------------------------------------------------

    def _note_offset(self) -> None:
        """Compare wall and Trio clocks; log a jump once, whichever loop notices it first."""
        offset = self.now().timestamp() - trio.current_time()
        if self._offset is None:
            self._offset = offset
            return
        jump = offset - self._offset
        if abs(jump) > self.jump_threshold:
            self._offset = offset
            self._jumps += 1
            direction = "forward" if jump > 0 else "backward"
            log.warning(
                "the wall clock jumped %s by %s — slots are re-read from the new time",
                direction,
                _duration(abs(jump)),
            )
            self._clock_moved.set()  # every sleeping loop re-reads the wall clock
            self._clock_moved = trio.Event()

    async def _watch_clock(self) -> None:
        """Without a wake loop, something must still look at the clocks every poll interval."""
        while True:
            await trio.sleep(self.poll_interval)
            self._note_offset()

    # -- cron routines --------------------------------------------------------------------

    async def _cron_loop(self, routine: Routine, due: datetime | None) -> None:
        # One frame per routine, sleeping included: at 10,000 routines every frame is memory.
        assert routine.cron is not None
        try:
            while due is not None:
                # Sleep towards the slot, re-reading the wall clock after every wake.
                while (remaining := (due - self.now()).total_seconds()) > 0:
                    with trio.move_on_after(min(remaining, self.max_wait)):
                        await self._clock_moved.wait()
                    self._note_offset()
                if self._stopping.value:
                    return
                with trio.CancelScope(shield=True):
                    try:
                        await self._fire(routine, due)
                    except StateFault as exc:
                        log.error(
                            "%s: fire failed (skipping this run, schedule stays armed): %s",
                            routine.name,
                            exc,
                        )
                due = next_run(routine.cron, routine.tz, self.now())
                self._next_due[routine.name] = due
                if due is None:
                    log.warning(
                        '%s: cron "%s" will never fire again — not armed',
                        routine.name,
                        routine.cron,
                    )
                    self._armed.remove(routine.name)
        except Exception as exc:
            log.error("%s: stopped unexpectedly: %s", routine.name, exc)

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
        routine = self.routine(name)
        slot = truncate_ms(slot)
        if not on_grid(routine, slot):
            raise NotOnGrid(
                f"{slot_name(slot)} is not on the cron grid of {name!r} ({routine.cron})"
            )
        now = self.now()
        if slot > now:
            raise NotYetDue(
                f"slot {format_iso(slot)} of {name!r} has not arrived yet — "
                "a slot never fires before its instant",
                (slot - now).total_seconds(),
            )
        if self._stopping.value:
            raise Stopping("the scheduler is stopping; no new fires are accepted")
        with trio.CancelScope(shield=True):
            result = await self._fire(routine, slot, task_status)
        await trio.lowlevel.checkpoint_if_cancelled()  # a cancelled caller hears of it now
        return result

    async def start_fire(self, name: str, slot: datetime) -> ClaimResult:
        """Claim ``slot`` now and let the turn continue in the running scheduler's nursery."""
        if self._nursery is None:
            raise Stopping("the scheduler is not running")
        result: ClaimResult = await self._nursery.start(self.fire, name, slot)
        return result

    async def _fire(
        self,
        routine: Routine,
        slot: datetime,
        task_status: trio.TaskStatus[ClaimResult] = trio.TASK_STATUS_IGNORED,
    ) -> FireResult:
        with self._working():
            return await self._claim_turn_settle(routine, slot, task_status)

    async def _claim_turn_settle(
        self, routine: Routine, slot: datetime, task_status: trio.TaskStatus[ClaimResult]
    ) -> FireResult:
        name = routine.name
        claim = await self.store.claim(name, slot, self.now())
        task_status.started(claim)
        if claim.status is ClaimStatus.DUPLICATE:
            log.info(
                "%s: skipping — slot %s is already claimed — a duplicate delivery, or another "
                "scheduler has it",
                name,
                format_iso(slot),
            )
            self._outcomes["duplicate"] += 1
            self.metrics.refuse(name, "duplicate")
            return FireResult(name, slot, claimed=False, reason="duplicate")
        if claim.status is ClaimStatus.STALE:
            log.warning(
                "%s: skipping — slot %s is stale: %s was already claimed, "
                "so this instant is skipped",
                name,
                format_iso(slot),
                claim.newest,
            )
            self._outcomes["stale"] += 1
            self.metrics.refuse(name, "stale")
            return FireResult(name, slot, claimed=False, reason="stale")
        late = (self.now() - slot).total_seconds()
        with firing_slot(slot):
            turn = await self._turn(name, routine.session, routine.prompt, routine.timeout)
        await self.store.settle(name, slot, turn.outcome, turn.ms)
        self._outcomes[turn.outcome.value] += 1
        self.metrics.fired(name, turn.outcome.value, turn.ms, late)
        return FireResult(
            name, slot, claimed=True, outcome=turn.outcome, ms=turn.ms, failed=turn.failed
        )

    @contextmanager
    def _working(self) -> Iterator[None]:
        """Count one fire (claim to settle) or wake-up (turn to deferral) as in flight."""
        self._in_flight.value += 1
        try:
            yield
        finally:
            self._in_flight.value -= 1

    @contextmanager
    def _turn_scope(self) -> Iterator[trio.CancelScope]:
        """The scope a stop cancels once its grace runs out."""
        scope = trio.CancelScope(deadline=self._grace_deadline)
        self._grace_scopes.add(scope)
        try:
            yield scope
        finally:
            self._grace_scopes.discard(scope)

    async def _turn(
        self,
        label: str,
        session: str,
        text: str,
        timeout: float | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> TurnResult:
        with self._turn_scope() as grace, self.agent.hold(session) as agent:
            return await run_turn(
                agent,
                label,
                session,
                text,
                timeout=timeout,
                grace_scope=grace,
                on_text=on_text,
            )

    def routine(self, name: str) -> Routine:
        try:
            return self.routines[name]
        except KeyError:
            available = ", ".join(sorted(self.routines)) or "(none)"
            raise UnknownRoutine(
                f"unknown routine {name[:64]!r} (available: {available})"
            ) from None

    async def run_now(
        self, name: str, *, on_text: Callable[[str], None] | None = None
    ) -> TurnResult:
        """Run one turn of a routine now, without a claim: no slot, no history."""
        routine = self.routine(name)
        if self._stopping.value:
            raise Stopping("the scheduler is stopping; no new turns are accepted")
        with trio.CancelScope(shield=True), self._working():
            result = await self._turn(
                name, routine.session, routine.prompt, routine.timeout, on_text
            )
        return result

    async def start_run(self, name: str) -> bool:
        """Start one turn of a routine in the running scheduler's nursery, without a claim.

        Returns False, starting nothing, when the routine's session is busy; otherwise the
        session is already held for this turn when this returns, so no other turn can slip
        in between the answer and the start.
        """
        routine = self.routine(name)
        if self._stopping.value or self._nursery is None:
            raise Stopping("the scheduler is stopping; no new turns are accepted")
        if self.agent.busy(routine.session):
            return False
        await self._nursery.start(self._run_in_background, routine)
        return True

    async def _run_in_background(
        self, routine: Routine, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        with (
            trio.CancelScope(shield=True),
            self._working(),
            self._turn_scope() as grace,
            self.agent.hold(routine.session) as agent,
        ):
            task_status.started()
            await run_turn(
                agent,
                routine.name,
                routine.session,
                routine.prompt,
                timeout=routine.timeout,
                grace_scope=grace,
            )

    # -- wake-ups -------------------------------------------------------------------------

    async def _wake_loop(self) -> None:
        try:
            while True:
                while not self._stopping.value and await self._wake_once():
                    pass
                await trio.sleep(self.poll_interval)
                self._note_offset()
        except Exception as exc:
            log.error("wake-up poll: stopped unexpectedly: %s", exc)

    async def _wake_once(self) -> bool:
        """Take and fire one due wake-up; False when none was due or the store failed."""
        fired = False
        with trio.CancelScope(shield=True):
            try:
                wakeup = await self.store.take_due_wakeup(self.now())
                if wakeup is not None:
                    with self._working():
                        await self._wake(wakeup)
                    fired = True
            except StateFault as exc:
                log.error("wake-up poll failed (continuing next poll): %s", exc)
        return fired

    async def _wake(self, wakeup: Wakeup) -> None:
        label = f"wake {wakeup.id[:8]}"
        turn = await self._turn(label, wakeup.session, envelope(wakeup))
        if not turn.busy:
            return
        if wakeup.recurring:
            log.info("%s: next fires per cron", label)
            return
        retry_at = self.now() + timedelta(seconds=self.poll_interval)
        if await self.store.defer_wakeup(wakeup, retry_at):
            log.info("%s: session busy — retrying next poll", label)
        else:
            log.error("%s: dropped after too many busy retries", label)


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    if seconds or not parts:
        parts.append(f"{seconds}s")
    return " ".join(parts)


async def serve_routines(
    *,
    agent: Agent,
    store: Store,
    routines: Iterable[Routine] = (),
    task_status: trio.TaskStatus[Scheduler] = trio.TASK_STATUS_IGNORED,
    **options: object,
) -> None:
    """Run a :class:`Scheduler` until it is stopped; ``nursery.start`` returns its handle."""
    scheduler = Scheduler(agent=agent, store=store, routines=routines, **options)  # type: ignore[arg-type]
    await scheduler.run(task_status=task_status)
