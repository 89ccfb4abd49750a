"""The wake loop: poll the store for due wake-ups and fire them, one at a time."""

from __future__ import annotations

from datetime import timedelta

import trio

from ..context import FireContext
from ..errors import StateFault
from ..records import Wakeup
from ..wakeups import defer_dropped, envelope
from .clock import ClockWatch
from .fire import FirePath
from .restarts import RESTART_FIRST, Restarts
from .state import log

#: Wake-up polls between two counts of the pending wake-ups (a gauge, not a decision).
COUNT_EVERY = 10


class WakeLoop(FirePath, ClockWatch, Restarts):
    async def _wake_loop(self) -> None:
        backoff = RESTART_FIRST
        polls = 0
        while True:
            try:
                while True:
                    while not self._stopping.value and await self._wake_once():
                        backoff = RESTART_FIRST
                    if polls % COUNT_EVERY == 0:
                        await self._count_pending()
                    polls += 1
                    await trio.sleep(self.poll_interval)
                    self._note_offset()
                    await self._refresh_paused()
            except Exception as exc:
                if self._stopping.value:
                    return
                backoff = await self._restart_after("wake", "wake-up poll", exc, backoff)

    async def _count_pending(self) -> None:
        """Count the pending wake-ups for ``trio_routines_pending_wakeups``; a fault keeps the
        last count (a full list: cheap for the state directory, which caches its parse)."""
        try:
            with self._bounded():
                self._pending_wakeups = len(await self.store.list_wakeups())
        except StateFault as exc:
            log.debug("the pending wake-ups could not be counted: %s", exc)

    async def _wake_once(self) -> bool:
        """Take and fire one due wake-up; False when none was due or the store failed."""
        fired = False
        with trio.CancelScope(shield=True):
            try:
                wakeup = await self._take_due_wakeup(self.now())
                if wakeup is not None:
                    with self._working():
                        await self._wake(wakeup)
                    fired = True
            except StateFault as exc:
                log.error("wake-up poll failed (continuing next poll): %s", exc)
        return fired

    async def _wake(self, wakeup: Wakeup) -> None:
        label = f"wake {wakeup.id[:8]}"
        why = FireContext("wakeup", wakeup.session, wakeup=wakeup.id, replica=self.replica)
        turn = await self._turn(why, label, envelope(wakeup))
        if not turn.busy:
            return
        if wakeup.recurring:
            log.info("%s: next fires per cron", label)
            return
        retry_at = self.now() + timedelta(seconds=self.poll_interval)
        if await self._defer_wakeup(wakeup, retry_at):
            log.info("%s: session busy — retrying next poll", label)
        else:
            log.error("%s: %s", label, defer_dropped(wakeup))
