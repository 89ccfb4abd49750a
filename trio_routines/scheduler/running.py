"""A scheduler's one run: the boot, the loops it starts, and the stop that ends them.

:class:`Run` owns what a run is and how it ends: whether it ran (a scheduler runs once), the
loops' cancel scope, and the stop that begins the drain (the grace of the turns, the bound of
the store calls under way) and, once the run is over, lifts that bound off a host's calls.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from datetime import datetime
from typing import Any

import trio

from ..records import GapReason
from ..routines import Routine
from .calls import STOP_MARGIN
from .openclaims import BOOT_BUDGET
from .options import checked_now
from .parts import Parts
from .state import Runtime, Stopping


class Run:
    """The run of one scheduler (see the module doc).

    Collaborators: the :class:`Parts` it starts and stops, the :class:`Runtime` (routines,
    the stop's flag, the run's nurseries), and the clock mode and wake-up switch it was built
    with.
    """

    def __init__(
        self, parts: Parts, runtime: Runtime, *, external_clock: bool, wakeups: bool
    ) -> None:
        self._parts = parts
        self._runtime = runtime
        self._external_clock = external_clock
        self._wakeups = wakeups
        #: run() was called: a second call is refused before it touches the store.
        self.ran = False
        self._loops = trio.CancelScope()  # the loops' scope: stop() cancels it

    async def run(self, handle: Any, task_status: trio.TaskStatus[Any]) -> None:
        """Boot, start the loops, run until stopped (``Scheduler.run`` says what it raises);
        ``handle`` is what ``task_status`` reports started."""
        runtime = self._runtime
        if self.ran or runtime.stopping.value:
            what = "has already run" if self.ran else "was stopped"
            raise Stopping(
                f"this scheduler {what}: a Scheduler runs once — build a new one to run again"
            )
        checked_now(runtime.now())  # before anything is read or written
        self.ran = True
        try:
            await self._boot_and_loops(handle, task_status)
        finally:
            self._parts.calls.run_over = True  # a host's calls after it: store_timeout alone
            self._parts.arming.disarm()  # statistics() after the run: nothing armed

    async def _boot_and_loops(self, handle: Any, task_status: trio.TaskStatus[Any]) -> None:
        runtime = self._runtime
        async with AsyncExitStack() as joined:
            first_due = await self._parts.starting.run(joined)
            if first_due is None:  # given up by a stop: reported once the store was left
                await joined.aclose()
                task_status.started(handle)
                return
            booted = self._parts.boot.booted  # the very routines the boot planned
            try:
                async with trio.open_nursery() as nursery:
                    runtime.nursery = nursery
                    nursery.start_soon(self._run_loops, booted, first_due)
                    del booted, first_due  # the boot's maps, not kept for the run (see _run_loops)
                    task_status.started(handle)
            finally:
                # However the run ended, nothing starts in its nursery any more; and it counts
                # as stopped (the loops' own end began the stop as a rule, bounding the turns
                # before the nursery waited for them: this is the backstop).
                runtime.nursery = None
                self._host_stop()

    async def _run_loops(self, booted: dict[str, Routine], first_due: dict[str, datetime]) -> None:
        runtime = self._runtime
        with self._loops:
            async with trio.open_nursery() as loops:
                try:
                    await self._arm(loops, booted, first_due)
                    del booted, first_due  # not kept while the loops run: an entry per routine
                    await trio.sleep_forever()
                finally:
                    runtime.loop_nursery = None
                    # Cancelled by the host's scope rather than by stop() (at any step of the
                    # arming, too): bound the shielded fires all the same, before waiting for
                    # them.
                    self._host_stop()

    async def _arm(
        self, loops: trio.Nursery, booted: dict[str, Routine], first_due: dict[str, datetime]
    ) -> None:
        runtime, parts = self._runtime, self._parts
        await loops.start(parts.sleepers.run)  # before any loop sleeps
        await loops.start(parts.calls.deadlines.watch)  # before any fire's claim
        loops.start_soon(parts.members.watch)
        # The older claims left open are housekeeping, not a part of the boot: the
        # scheduler is ready, and its first slots fire, while they are looked for.
        loops.start_soon(parts.open_claims.reconcile, BOOT_BUDGET)
        # So is the failure streaks' history, read after the boot seeded them.
        loops.start_soon(parts.streaks.run)
        # Published only now: an update_routines() during the await above must not
        # start a loop that the arming below would start a second time.
        runtime.loop_nursery = loops
        for name, routine in runtime.routines.items():
            if self._external_clock or routine.cron is None:
                continue
            if booted.get(name) is not routine:  # updated during the boot: arm anew
                # A replaced one's plan is not taken: what passed since its newest
                # claim (a catch-up it would have fired, too) is recorded instead.
                passed = GapReason.DOWN if name in booted else None
                parts.cron.start(loops, routine, None, rearm=True, passed=passed)
            elif name in first_due:
                parts.cron.start(loops, routine, first_due[name], rearm=False)
        if self._wakeups:
            loops.start_soon(parts.wake.run)
        elif first_due or booted != runtime.routines:
            # A cron loop sleeps (one updated during the boot, too): watch the clocks.
            parts.clock.start(loops)

    def _host_stop(self) -> None:
        """The run ends without a stop (its host's scope was cancelled): begin one, with the
        default grace, as a stop would."""
        if not self._runtime.stopping.value:
            self._begin_stop(self._runtime.default_grace)

    def stop(self, grace: float) -> None:
        """Stop arming; give the turns ``grace`` seconds (see ``Scheduler.stop``). Called in
        the run's Trio thread: from another, a one-line ``RuntimeError``, nothing changed."""
        self._begin_stop(grace)
        self._parts.starting.give_up()
        self._loops.cancel()
        if not self.ran:  # no run to drain, nor any to come
            self._parts.calls.run_over = True

    def _begin_stop(self, grace: float) -> None:
        try:
            now = trio.current_time()  # before anything changes: a call from another thread
        except RuntimeError:
            raise RuntimeError(
                "stop() is called in the scheduler's Trio thread; from another thread: "
                "trio.from_thread.run_sync(scheduler.stop)"
            ) from None
        self._runtime.stopping.value = True
        deadline = self._parts.grace.begin(grace, now)
        self._parts.calls.deadlines.pull_in(deadline + STOP_MARGIN)
