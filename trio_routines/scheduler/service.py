"""The :class:`Scheduler` itself: it composes the parts, starts the loops, stops with a
grace, and reports. Every part owns its state and is handed what it may use (see
docs/design.md, Runtime); the scheduler's public methods are theirs, or built on theirs."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from types import MappingProxyType

import trio

from ..agent import Agent
from ..budgets import Budget, checked_budgets
from ..metrics import Family, Metrics, render
from ..records import ClaimResult, Fire, Wakeup
from ..replicas import ReplicaInfo, check_replica
from ..routines import Routine
from ..sessions import SessionGate
from ..store import Store
from ..tracing import load as load_tracing
from ..turns import TurnResult
from ..wakelimits import DEFAULT_LIMITS, WakeLimits
from ..wakeups import POLL_INTERVAL
from . import report
from .options import (
    checked_agent,
    checked_clock,
    checked_grace,
    checked_limits,
    checked_poll,
    checked_routines,
    checked_seconds,
    checked_store,
)
from .parts import Parts
from .reload import RoutineChanges
from .running import Run
from .state import (
    DEFAULT_GRACE,
    JUMP_THRESHOLD,
    MAX_WAIT,
    STORE_TIMEOUT,
    FireResult,
    Runtime,
    Shared,
    Statistics,
    log,
    new_replica_id,
    system_now,
)


class Scheduler:
    """Fires routines and wake-ups into an agent; :mod:`trio_routines.scheduler` says how.

    Start it inside a nursery: ``scheduler = await nursery.start(partial(serve_routines,
    ...))`` (its options are keywords: ``functools.partial`` carries them), or ``await
    nursery.start(scheduler.run)``. :meth:`fire` and :meth:`run_now` also work on a
    scheduler that was never started (the command line's one-shot paths use them so).

    ``scheduler.default_grace`` (seconds, 10 unless given) is the grace in-flight turns get
    from a :meth:`stop` without one and from a signal to :func:`~trio_routines.serve` (the
    command line's ``--grace`` sets it), and how long a failed settle is retried.
    ``wake_limits`` are the limits on what turns schedule (:mod:`trio_routines.wakelimits`).

    ``wakeup_timeout`` (seconds, none unless given; the command line's ``--wakeup-timeout``)
    bounds each wake-up turn as a routine's ``timeout`` bounds its fires: a longer turn is
    cancelled and ends ``failed`` (``timed out after <n>s``). Due wake-ups run one at a time,
    so without it a turn that never returns holds back every wake-up due after it. None by
    default, as for routines: an agent's turn may legitimately be long.

    ``session_budget`` (text such as ``"200k tokens/day, 5 USD/week"``, or
    :class:`~trio_routines.budgets.Budget` values) is what each session's wake-up turns may
    spend per rolling window; a wake-up due over it is not run (:mod:`trio_routines.budgets`).
    Raises :class:`~trio_routines.errors.InvalidOption` for one that cannot be read.

    The clock and its loops: ``now`` is the wall clock (a function giving aware datetimes,
    ``datetime.now(UTC)`` unless given; a test gives :class:`~trio_routines.testing.WallClock`).
    ``external_clock=True`` arms no cron loop: the slots come from a caller's :meth:`fire`
    (an external clock: Kubernetes CronJobs, a cron daemon, ``POST /fire``), and wake-ups
    still run. ``wakeups=False`` runs no wake-up loop (none fires here; a clock watch takes its
    place). ``poll_interval`` (seconds, 30 unless given; ``--poll``) is how often the wake
    loop looks for due wake-ups and the clock watch for a jump. ``jump_threshold`` (seconds,
    5) is how far the wall clock may move against Trio's before it is a jump (logged, counted,
    and every cron loop re-reads the wall clock). ``max_wait`` (seconds, 6 hours) is the
    longest a cron loop sleeps before it reads the wall clock again. ``store_timeout``
    (seconds, 30) bounds every store call. ``replica`` (``--replica``) names this scheduler in
    the claims it makes, ``host:pid`` unless given (:mod:`trio_routines.replicas`). Each is
    checked as the scheduler is made: a wrong one is an
    :class:`~trio_routines.errors.InvalidOption` naming it.

    A scheduler runs once: build a new one to run again.

    Its attributes, read by the parts as they run: ``scheduler.now`` (the wall clock it was
    given), ``scheduler.routines`` (read-only), ``scheduler.default_grace`` and
    ``scheduler.wake_limits`` (as given, or the defaults).
    """

    now: Shared[Callable[[], datetime]] = Shared()
    default_grace: Shared[float] = Shared()

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
        store_timeout: float = STORE_TIMEOUT,
        replica: str | None = None,
        session_budget: str | Sequence[Budget] | None = None,
        wake_limits: WakeLimits = DEFAULT_LIMITS,
        wakeup_timeout: float | None = None,
    ) -> None:
        # The OpenTelemetry API, when installed, is imported here, not at a first fire.
        load_tracing()
        checked_agent(agent)
        checked_store(store)
        checked_clock(now)
        self.agent = SessionGate(agent)
        self.store = store
        #: This scheduler's replica id, stored with every claim it makes (replicas.py).
        self.replica = check_replica(replica) if replica is not None else new_replica_id()
        loaded = checked_routines(routines)
        self.external_clock = external_clock
        self.wakeups = wakeups
        self.wake_limits = checked_limits(wake_limits)
        self.max_wait = checked_seconds("max_wait", max_wait, zero=False, endless=True)
        self.poll_interval = checked_poll(poll_interval)
        self.jump_threshold = checked_seconds(
            "jump_threshold", jump_threshold, zero=False, endless=True
        )
        grace = checked_seconds("default_grace", default_grace, zero=True)
        self.store_timeout = checked_seconds("store_timeout", store_timeout, zero=False)
        self.wakeup_timeout = (
            None
            if wakeup_timeout is None
            else checked_seconds("wakeup_timeout", wakeup_timeout, zero=False)
        )
        self.metrics = Metrics()
        runtime = self._runtime = Runtime(
            routines=loaded,
            now=now,
            replica=self.replica,
            metrics=self.metrics,
            default_grace=grace,
        )
        # The parts, each handed what it may use (docs/design.md, Runtime).
        self._parts = Parts(
            agent=self.agent,
            store=store,
            runtime=runtime,
            metrics=self.metrics,
            session_budgets=checked_budgets(session_budget),
            wake_limits=self.wake_limits,
            store_timeout=self.store_timeout,
            external_clock=external_clock,
            wakeups=wakeups,
            max_wait=self.max_wait,
            poll_interval=self.poll_interval,
            jump_threshold=self.jump_threshold,
            wakeup_timeout=self.wakeup_timeout,
        )
        self._run = Run(self._parts, runtime, external_clock=external_clock, wakeups=wakeups)

    @property
    def booted(self) -> bool:
        """Whether :meth:`run`'s boot completed: its loops run (until a stop). False before,
        and for good when a stop gave the boot up."""
        return self._parts.starting.completed

    @property
    def routines(self) -> Mapping[str, Routine]:
        """The routines loaded, by name, read-only (:meth:`update_routines` changes them)."""
        return MappingProxyType(self._runtime.routines)

    @property
    def stopping(self) -> bool:
        """Whether a stop was requested (no new fire or turn is accepted then)."""
        return bool(self._runtime.stopping.value)

    def routine(self, name: str) -> Routine:
        """The loaded routine ``name``; raises :class:`UnknownRoutine` naming the others."""
        return self._runtime.routine(name)

    async def run(
        self, *, task_status: trio.TaskStatus[Scheduler] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Boot (reconcile, plan catch-ups), start the loops, and run until stopped.

        A fault reading a routine's newest claim raises from here before anything runs:
        a routine whose last fire cannot be known must not run blind. The reconcile runs
        whatever the clock mode: a claim an external ``fire`` left open when its process died
        is settled ``interrupted`` here too.

        Raises :class:`Stopping`, before anything is read or written, on a scheduler that
        has run (or runs) already or was stopped: its stop is final, and its loops' cancel
        scope can be entered once. A :meth:`stop` during the boot gives the boot up at once:
        nothing is armed, and ``run`` reports started and returns once it left the store.
        """
        await self._run.run(self, task_status)

    def stop(self, grace: float | None = None) -> None:
        """Stop arming at once; give in-flight turns ``grace`` seconds, then interrupt them.

        Safe to call from inside a turn (that fire still settles) and more than once (the
        shortest grace wins). During the boot, it gives the boot up at once (see :meth:`run`).
        A grace of 0 or less interrupts them at once; ``math.inf`` waits for every one.
        A grace that is no number of seconds is an :class:`InvalidOption`, and a call from
        outside the scheduler's Trio thread a ``RuntimeError`` (from another thread:
        ``trio.from_thread.run_sync(scheduler.stop)``), each changing nothing.
        """
        seconds = self._runtime.default_grace if grace is None else checked_grace(grace)
        self._run.stop(seconds)

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
        :class:`NotOnGrid`, :class:`NotYetDue` (a slot after the scheduler's clock),
        :class:`Stopping`, or :class:`StateFault` (nothing was claimed); a ``slot`` that is not
        an aware datetime is a ``TypeError`` (no datetime) or a ``ValueError`` (naive), as a
        wrong argument is in Python.
        The claim, turn and settle are shielded: a :meth:`stop` ends the turn after its grace;
        a caller's cancel leaves it ``default_grace`` seconds, then ends it too (recorded
        ``interrupted: its caller gave up``); the caller hears of its cancel once it settled.
        """
        return await self._parts.fire.fire(name, slot, task_status=task_status)

    async def start_fire(self, name: str, slot: datetime) -> ClaimResult:
        """Claim ``slot`` now and let the turn continue in the running scheduler's nursery."""
        return await self._parts.fire.start_fire(name, slot)

    async def run_now(
        self, name: str, *, on_text: Callable[[str], None] | None = None
    ) -> TurnResult:
        """Run one turn of a routine now, without a claim: no slot, no history.

        Raises StateFault, nothing run, when the store cannot hold the routine's session.
        The turn is shielded, as :meth:`fire`'s: a :meth:`stop` ends it after its grace, and
        so does the routine's ``timeout``; a caller's cancel leaves it ``default_grace``
        seconds, then ends it too; the caller hears of its cancel once the turn has ended.
        """
        return await self._parts.runs.run_now(name, on_text=on_text)

    async def start_run(self, name: str) -> bool:
        """Start one turn of a routine in the running scheduler's nursery, without a claim.

        Returns False, starting nothing, when the routine's session is busy here or in any
        replica sharing the store; otherwise the session is already held for this turn when
        this returns, so no other turn can slip in between the answer and the start.
        Raises StateFault when the store cannot say.
        """
        return await self._parts.runs.start_run(name)

    async def pause(self, name: str) -> bool:
        """Pause routine ``name`` in the store (no scheduler sharing it claims its slots):
        whether it was not paused (:mod:`.pausing`). Raises :class:`UnknownRoutine`, or
        :class:`StateFault`: nothing changed, unless the store stalled during the change
        itself (a frozen disk), when it may land later, though before any later pause or
        resume asked of this process."""
        self._parts.runtime.routine(name)
        if changed := await self._parts.pausing.change(name, True):
            log.info("%s: paused", name)
        return changed

    async def resume(self, name: str) -> bool:
        """Resume routine ``name`` (it fires from its next slot on; nothing missed is run):
        whether it was paused (if not, the store changes nothing). Raises as :meth:`pause`."""
        self._parts.runtime.routine(name)
        if changed := await self._parts.pausing.change(name, False):
            log.info("%s: resumed", name)
        return changed

    async def paused(self) -> frozenset[str]:
        """The paused routines as the store says now, whichever replica or command paused
        them (``statistics().paused`` is the last read: each poll's, or a fire's): a read
        begun now or later, never one under way since before the call (a pause written
        meanwhile would be missed); bounded by ``store_timeout``. Raises
        :class:`StateFault`."""
        return (await self._parts.calls.read_paused(self._parts.runtime.now())).names

    def update_routines(self, routines: Iterable[Routine]) -> RoutineChanges:
        """Replace the loaded routines by ``routines``: a new one arms from now, a removed one
        stops once its fire in flight settled, a changed one re-arms from its newest claim or
        now, whichever is later; nothing fires twice or back-fires.

        Raises :class:`InvalidRoutine`, changing nothing, when two share a name or one is not
        a :class:`Routine`, as the constructor does. Works on a scheduler that is not running
        (nothing is armed then) and with an external clock (the routines change; no loop is
        started).
        """
        return self._parts.reload.update(routines)

    async def reload_routines(self, directory: str | os.PathLike[str]) -> RoutineChanges:
        """Load ``directory`` again and :meth:`update_routines` from it (``SIGHUP`` in serve).

        A file that does not load now keeps the version of its routine loaded before (logged
        as an ERROR with the reason); a directory that is gone or cannot be read changes
        nothing, and neither does one without a routine while some are loaded, unless it holds
        a file named :data:`NO_ROUTINES` (each an ERROR saying so).
        """
        return await self._parts.reload.reload(directory)

    async def replicas(self) -> list[ReplicaInfo]:
        """The members of the store, this one included while it runs, each alive or not
        (a store without replicas knows only this one). Raises StateFault."""
        return await self._parts.membership.replicas()

    async def sessions_running(self, sessions: Sequence[str]) -> frozenset[str]:
        """Those of ``sessions`` with a turn under way now, here or on any replica of the
        store (its session's hold is held: a fire's, a run's, a wake-up's); bounded by
        ``store_timeout``. Raises StateFault."""
        here = frozenset(s for s in sessions if self.agent.busy(s))
        return here | await self._parts.membership.sessions_held(sessions)

    async def newest_claims(self, names: Sequence[str]) -> dict[str, tuple[Fire | None, bool]]:
        """Each routine's newest claim (None: none yet) and whether it is open and held by a
        live replica now; the reads go together, bounded. Raises StateFault."""
        return await self._parts.membership.newest_claims(names)

    async def add_wakeup(
        self,
        session: str,
        prompt: str,
        *,
        delay: float | str | timedelta | None = None,
        fire_at: datetime | None = None,
        cron: str | None = None,
        tz: str | None = None,
        until: datetime | None = None,
    ) -> Wakeup:
        """Schedule a turn of ``session`` with ``prompt``: once, after ``delay`` (seconds, or
        ``"30m"``) or at ``fire_at``, or recurring on ``cron`` (in ``tz``) until ``until``
        (by default the limits' lifetime from now). Callable from inside a turn
        (``current_fire().session`` is the turn's session). Raises :class:`InvalidWakeup`
        with a model-facing reason (the guardrails, the limits; it names the tool's
        parameters, ``in`` for ``delay``; a naive ``fire_at`` or ``until``), or StateFault
        (nothing added; :class:`Unconfirmed`, one too: maybe added). :mod:`trio_routines.tools`
        offers this to a model."""
        return await self._parts.wakeup_calls.add(
            session, prompt, delay=delay, fire_at=fire_at, cron=cron, tz=tz, until=until
        )

    async def list_wakeups(self, session: str | None = None) -> list[Wakeup]:
        """The pending wake-ups, in stored order; only ``session``'s when given."""
        return await self._parts.wakeup_calls.pending(session)

    async def remove_wakeup(self, wakeup_id: str, session: str) -> bool:
        """Cancel the pending wake-up ``wakeup_id`` of ``session``: False when there is none
        (fired, cancelled, or another session's). Raises StateFault (nothing removed; an
        :class:`Unconfirmed` one: maybe removed), or :class:`InvalidWakeup` for a ``session``
        that is no non-empty text (``None`` would reach every session's)."""
        return await self._parts.wakeup_calls.remove(wakeup_id, session)

    async def wait_drained(self) -> None:
        """Return once a stop was requested and no turn is in flight any more."""
        await self._runtime.stopping.wait_value(True)
        await self._runtime.in_flight.wait_none()

    def metric_families(self) -> list[Family]:
        """The runtime's series (:mod:`trio_routines.metrics`), one snapshot."""
        return report.metric_families(self._parts, self.metrics)

    def render_metrics(self) -> str:
        """The runtime's series in the Prometheus text format (``GET /metrics``)."""
        return render(self.metric_families())

    def statistics(self) -> Statistics:
        """A snapshot: armed routines, turns in flight, next slots, outcomes, clock jumps."""
        return report.statistics(self._parts)


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
