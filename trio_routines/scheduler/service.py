"""The :class:`Scheduler` itself: boot, start the loops, stop with a grace, report."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import datetime
from types import MappingProxyType

import trio

from ..agent import Agent
from ..metrics import Family, render
from ..records import Fire
from ..replicas import ReplicaInfo
from ..routines import Routine
from ..store import Store
from .boot import Boot, _for_each
from .calls import STOP_MARGIN
from .members import Members
from .reload import Reload
from .state import Statistics, Stopping
from .wake import WakeLoop


class Scheduler(Boot, Members, Reload, WakeLoop):
    """Fires routines and wake-ups into an agent; :mod:`trio_routines.scheduler` says how.

    Start it inside a nursery: ``scheduler = await nursery.start(serve_routines, ...)``, or
    ``await nursery.start(scheduler.run)``. :meth:`fire` and :meth:`run_now` also work on a
    scheduler that was never started (the command line's one-shot paths use them so).

    ``scheduler.default_grace`` (seconds, 10 unless given) is the grace in-flight turns get
    from a :meth:`stop` without one and from a signal to :func:`~trio_routines.serve` (the
    command line's ``--grace`` sets it), and how long a failed settle is retried.

    A scheduler runs once: build a new one to run again.
    """

    _ran = False  # run() was called: a second call is refused before it touches the store

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
        scope can be entered once.
        """
        if self._ran or self._stopping.value:
            what = "has already run" if self._ran else "was stopped"
            raise Stopping(
                f"this scheduler {what}: a Scheduler runs once — build a new one to run again"
            )
        self._ran = True
        booted = dict(self.routines)
        async with self._present():
            await self._note_dead_members()
            first_due = await self._boot(plan=not self.external_clock)  # reads the pauses
            for name, due in first_due.items():
                self._armed[name] = None
                self._next_due[name] = due
            self._note_offset()
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._run_loops, booted, first_due)
                task_status.started(self)
            self._nursery = None

    async def _run_loops(self, booted: dict[str, Routine], first_due: dict[str, datetime]) -> None:
        with self._loops:
            async with trio.open_nursery() as loops:
                await loops.start(self._sleepers.run)  # before any loop sleeps
                await loops.start(self._deadlines.watch)  # before any fire's claim
                loops.start_soon(self._watch_presence)
                # Published only now: an update_routines() during the await above must not
                # start a loop that the arming below would start a second time.
                self._loop_nursery = loops
                for name, routine in self.routines.items():
                    if self.external_clock or routine.cron is None:
                        continue
                    if booted.get(name) is not routine:  # updated during the boot: arm anew
                        loops.start_soon(
                            functools.partial(self._cron_loop, routine, None, rearm=True)
                        )
                    elif name in first_due:
                        loops.start_soon(
                            functools.partial(
                                self._cron_loop, routine, first_due[name], rearm=False
                            )
                        )
                if self.wakeups:
                    loops.start_soon(self._wake_loop)
                elif first_due or booted != self.routines:
                    # A cron loop sleeps (one updated during the boot, too): watch the clocks.
                    self._start_clock_watch()
                try:
                    await trio.sleep_forever()
                finally:
                    self._loop_nursery = None
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
        self._deadlines.pull_in(self._grace_deadline + STOP_MARGIN)

    async def replicas(self) -> list[ReplicaInfo]:
        """The members of the store, this one included while it runs, each alive or not
        (a store without replicas knows only this one). Raises StateFault."""
        read = getattr(self.store, "replicas", None)
        if read is None:
            presence = self._presence
            return [] if presence is None else [presence.info]
        with self._bounded():
            members: list[ReplicaInfo] = await read()
            return members
        raise self._no_answer("the replicas are unreadable")

    async def newest_claims(self, names: Sequence[str]) -> dict[str, tuple[Fire | None, bool]]:
        """Each routine's newest claim (None: none yet) and whether it is open and held by a
        live replica now; the reads go together, bounded. Raises StateFault."""
        newest = await _for_each(self._latest_fire, names)
        open_claims = [(n, f) for n, f in newest.items() if f is not None and f.outcome is None]
        answers = await self._claims_alive(open_claims)
        alive = {(n, f.slot): live for (n, f), live in zip(open_claims, answers, strict=True)}
        return {
            name: (fire, fire is not None and alive.get((name, fire.slot), False))
            for name, fire in newest.items()
        }

    async def wait_drained(self) -> None:
        """Return once a stop was requested and no turn is in flight any more."""
        await self._stopping.wait_value(True)
        await self._in_flight.wait_value(0)

    def metric_families(self) -> list[Family]:
        """The runtime's series (:mod:`trio_routines.metrics`), one snapshot."""
        stats = self.statistics()
        return self.metrics.families(
            in_flight=stats.in_flight,
            armed=len(stats.armed),
            clock_jumps=stats.clock_jumps,
            future_claims=stats.future_claims,
            next_due=stats.next_due,
            paused=stats.paused,
            kept_broken=self._kept_broken,
            pending_wakeups=self._pending_wakeups,
        )

    def render_metrics(self) -> str:
        """The runtime's series in the Prometheus text format (``GET /metrics``)."""
        return render(self.metric_families())

    def statistics(self) -> Statistics:
        """A snapshot: armed routines, turns in flight, next slots, outcomes, clock jumps."""
        return Statistics(
            armed=tuple(self._armed),
            in_flight=int(self._in_flight.value),
            next_due=MappingProxyType(dict(self._next_due)),
            outcomes=MappingProxyType(dict(self._outcomes)),
            clock_jumps=self._jumps,
            stopping=self._stopping.value,
            loop_restarts=MappingProxyType(dict(self._restarts)),
            settle_failures=MappingProxyType(dict(self._settle_failures)),
            future_claims=MappingProxyType(self._future_claims()),
            paused=self._paused,
        )


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
