"""The restart policy: a loop that dies of an unexpected exception comes back, loudly.

A bug, or a store raising something other than :class:`~trio_routines.errors.StateFault`,
must never leave a routine silently dead. The loop logs an ERROR, counts the restart (in
``statistics().loop_restarts`` and ``trio_routines_loop_restarts_total``), sleeps a back-off
that starts at 1 s and doubles up to 5 minutes, and starts again: a cron loop re-arms from its
newest claim and the wall clock (so it never fires a slot twice and never back-fires), the
wake loop simply polls again. A slot that goes through resets the back-off.
"""

from __future__ import annotations

from collections import Counter

import trio

from ..logs import one_line
from ..metrics import Metrics
from .state import duration, log

RESTART_FIRST = 1.0  # seconds before the first restart
RESTART_MAX = 300.0  # the longest back-off


class Restarts:
    """The loops' restarts, counted by loop (``cron:<routine>``, ``wake``, ``clock``)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self.counts: Counter[str] = Counter()

    async def restart_after(self, key: str, label: str, exc: Exception, backoff: float) -> float:
        """Log and count one loop's death, sleep the back-off; return the next back-off."""
        self.counts[key] += 1
        loop, _, routine = key.partition(":")
        self._metrics.restarted(loop, routine or None)
        log.error(
            "%s: stopped unexpectedly: %s: %s — restarting in %s (restart %d)",
            label,
            type(exc).__name__,
            one_line(str(exc)),
            duration(backoff),
            self.counts[key],
            exc_info=exc,  # a bug: where it was raised, and the traceback in JSON
        )
        await trio.sleep(backoff)
        return min(backoff * 2, RESTART_MAX)
