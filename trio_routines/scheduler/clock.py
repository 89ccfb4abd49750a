"""Clock watch: notice the wall clock jumping against Trio's clock, and say so once.

The offset between the two clocks is owned here and shared by every loop that wakes: the
cron loops after each sleep, the wake loop each poll, and, without a wake loop, the watch's
own poll (:meth:`ClockWatch.start`). A change of more than the threshold is logged once,
counted, and wakes every sleeping cron loop to re-read the wall clock.
"""

from __future__ import annotations

from datetime import datetime

import trio

from .calls import StoreCalls
from .restarts import RESTART_FIRST, Restarts
from .sleepers import Sleepers
from .state import Runtime, duration, log

__all__ = ["ClockWatch", "duration"]


class ClockWatch:
    """The clocks' offset and its jumps; collaborators: the :class:`Runtime` (the wall
    clock), the :class:`Sleepers` (woken by a jump), and, for its own poll, the
    :class:`StoreCalls` (the paused routines re-read) and the :class:`Restarts`."""

    def __init__(
        self,
        runtime: Runtime,
        sleepers: Sleepers,
        calls: StoreCalls,
        restarts: Restarts,
        *,
        jump_threshold: float,
        poll_interval: float,
    ) -> None:
        self._runtime = runtime
        self._sleepers = sleepers
        self._calls = calls
        self._restarts = restarts
        self._jump_threshold = jump_threshold
        self._poll_interval = poll_interval
        self._offset: float | None = None
        self._watching = False
        #: Jumps seen since the start.
        self.jumps = 0
        #: Backward jumps seen since the start: a loop that planned its slot before one plans
        #: it again from the store, as a boot would (its newest claim may now lie ahead).
        self.back_jumps = 0

    def note_offset(self, now: datetime | None = None) -> None:
        """Compare wall and Trio clocks; log a jump once, whichever loop notices it first.

        ``now``: the wall clock, read just now by the caller (else it is read here)."""
        wall = self._runtime.now() if now is None else now
        offset = wall.timestamp() - trio.current_time()
        if self._offset is None:
            self._offset = offset
            return
        jump = offset - self._offset
        if abs(jump) > self._jump_threshold:
            self._offset = offset
            self.jumps += 1
            if jump < 0:
                self.back_jumps += 1
            direction = "forward" if jump > 0 else "backward"
            log.warning(
                "the wall clock jumped %s by %s — slots are re-read from the new time",
                direction,
                duration(abs(jump)),
            )
            self.wake_sleepers()

    def wake_sleepers(self) -> None:
        """Wake every sleeping cron loop to re-read the wall clock and its routine."""
        self._sleepers.wake_all()

    def start(self, nursery: trio.Nursery) -> None:
        """Poll the clocks in ``nursery`` (once: later calls do nothing). For a runtime
        without a wake loop, whose cron loops would otherwise see a jump only as they wake."""
        if not self._watching:
            self._watching = True
            nursery.start_soon(self._watch)

    async def _watch(self) -> None:
        backoff = RESTART_FIRST
        while True:
            try:
                while True:
                    await trio.sleep(self._poll_interval)
                    self.note_offset()
                    await self._calls.refresh_paused()
            except Exception as exc:
                backoff = await self._restarts.restart_after("clock", "clock watch", exc, backoff)
