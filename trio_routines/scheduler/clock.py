"""Clock watch: notice the wall clock jumping against Trio's clock, and say so once.

The offset between the two clocks is owned here and shared by every loop that wakes: the
cron loops after each sleep, the wake loop each poll, and, without a wake loop, the watch's
own poll (:meth:`ClockWatch.start`). A change of more than the threshold is logged once,
counted, and wakes every sleeping cron loop to re-read the wall clock. A jump backward also
reads every cron routine's newest claim once, in a task of its own (the loops stay asleep):
one made while the clock ran ahead now holds the slots before its stamp back, and is said
and shown in ``future_claims`` as a boot would say it (:meth:`Arming.note_future_claim`).
"""

from __future__ import annotations

import functools
from datetime import datetime

import trio

from ..errors import StateFault
from ..records import Fire
from .arming import Arming
from .calls import StoreCalls
from .foreach import for_each
from .restarts import RESTART_FIRST, Restarts
from .sleepers import Sleepers
from .state import Runtime, duration, log

__all__ = ["ClockWatch", "duration"]


def _unsaid(name: str, fault: StateFault) -> None:
    """A newest claim left unread after a jump back (see :meth:`ClockWatch._newest`)."""


class ClockWatch:
    """The clocks' offset and its jumps; collaborators: the :class:`Runtime` (the wall
    clock, the routines, the loops' nursery), the :class:`Sleepers` (woken by a jump), the
    :class:`StoreCalls` (the newest claims read after a jump back; for its own poll, the
    paused routines re-read), the :class:`Arming` (told of those claims) and the
    :class:`Restarts`."""

    def __init__(
        self,
        runtime: Runtime,
        sleepers: Sleepers,
        calls: StoreCalls,
        restarts: Restarts,
        arming: Arming,
        *,
        jump_threshold: float,
        poll_interval: float,
    ) -> None:
        self._runtime = runtime
        self._sleepers = sleepers
        self._calls = calls
        self._restarts = restarts
        self._arming = arming
        self._reading = False  # the newest claims are being read after a jump back
        self._again = False  # another jump back came meanwhile: read them once more
        self._jump_threshold = jump_threshold
        self._poll_interval = poll_interval
        self._offset: float | None = None
        self._watching = False
        #: Jumps seen since the start.
        self.jumps = 0

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
            direction = "forward" if jump > 0 else "backward"
            log.warning(
                "the wall clock jumped %s by %s — slots are re-read from the new time",
                direction,
                duration(abs(jump)),
            )
            self.wake_sleepers()
            if jump < 0:
                self._read_claims_ahead()

    def _read_claims_ahead(self) -> None:
        """Read the newest claims (see the module doc) in the loops' nursery, once at a time."""
        nursery = self._runtime.loop_nursery
        if nursery is None:  # not running: a boot reads them
            return
        if self._reading:
            self._again = True
            return
        self._reading = True
        nursery.start_soon(self._claims_ahead)

    async def _claims_ahead(self) -> None:
        try:
            while True:
                self._again = False
                routines = {n: r for n, r in self._runtime.routines.items() if r.cron is not None}
                faults: list[Exception] = []
                # A StateFault is not said: its loop's fire meets the same store, and says so.
                found = await for_each(
                    functools.partial(self._newest, faults=faults), routines, on_fault=_unsaid
                )
                if faults:  # a store's own fault (not a StateFault): said, once
                    log.warning(
                        "could not read the newest claims of %d routine(s) after the clock "
                        "went back: %s",
                        len(faults),
                        faults[0],
                    )
                now = self._runtime.now()
                loaded = self._runtime.routines
                for name, fire in found.items():  # those still loaded as they were
                    if loaded.get(name) is routines[name]:
                        self._arming.note_future_claim(name, fire, now)
                if not self._again:
                    return
        finally:
            self._reading = False

    async def _newest(self, name: str, *, faults: list[Exception]) -> Fire | None:
        """``name``'s newest claim; a store's own fault, kept in ``faults``, is passed over
        as a StateFault is (this read only informs: it must not end the scheduler)."""
        try:
            return await self._calls.latest_fire(name)
        except StateFault:
            raise
        except Exception as exc:
            faults.append(exc)
            raise StateFault(str(exc)) from None

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
