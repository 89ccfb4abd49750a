"""Cron loops: one task per routine, sleeping towards its next slot and firing it."""

from __future__ import annotations

from datetime import datetime

import trio

from ..cron import next_run
from ..errors import StateFault
from ..routines import Routine
from .clock import ClockWatch
from .fire import FirePath
from .state import log


class CronLoops(FirePath, ClockWatch):
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
