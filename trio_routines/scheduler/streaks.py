"""Failure streaks read from the history, after the boot rather than inside it.

/metrics shows each routine's failures in a row and its last success, which only its history
knows in full. A boot seeds both from the newest claim alone (one failure, failing since its
slot) and leaves the history to this part: reading it is a listing and a read of every
retained claim, up to 512 a routine, and a boot after an outage that failed or cut short a
herd of thousands would otherwise read all of theirs before its first slot could fire (the
measurements are in the git history of benchmarks/README.md). So the histories are read
beside the first fires, a few at a time, and each one's streak replaces the seed -- unless
the routine fired since the claim its seed was made from (the history holds a newer claim,
whose settle may or may not be counted yet) or a fire of it was counted while its history
was read: its series are then newer than the read, and left as they are. A history that
cannot be read leaves the seed (logged at debug: the streak is the metrics' only loss).
"""

from __future__ import annotations

from datetime import datetime

import trio

from ..errors import StateFault
from ..history import ended, failing_streak
from ..metrics import Metrics
from .calls import StoreCalls
from .state import log

#: Histories read at once: housekeeping beside the fires, never many of the store's threads.
READERS = 2


class Streaks:
    """The routines whose streak is still the seed; collaborators: the :class:`StoreCalls`
    (the bounded history reads) and the :class:`Metrics` (the series set)."""

    def __init__(self, calls: StoreCalls, metrics: Metrics) -> None:
        self._calls = calls
        self._metrics = metrics
        #: Each routine waiting for its read: whether its series are a cron routine's (armed:
        #: a last success is shown even when none is retained), and the newest claim its seed
        #: was made from.
        self._waiting: dict[str, tuple[bool, datetime]] = {}
        self._more = trio.Event()

    @property
    def waiting(self) -> int:
        """How many routines' streaks are still the seed (tests look)."""
        return len(self._waiting)

    def later(self, name: str, *, armed: bool, newest: datetime) -> None:
        """Read ``name``'s history once the loops run, and set its streak from it: the seed
        was made from its claim of slot ``newest``."""
        was_armed, seeded = self._waiting.get(name, (False, newest))
        self._waiting[name] = (was_armed or armed, max(seeded, newest))
        self._more.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read the waiting histories, :data:`READERS` at a time, until cancelled."""
        task_status.started()
        readers = trio.Semaphore(READERS)
        async with trio.open_nursery() as nursery:
            while True:
                await self._more.wait()
                self._more = trio.Event()
                while self._waiting:
                    name = next(iter(self._waiting))
                    armed, newest = self._waiting.pop(name)
                    await readers.acquire()
                    nursery.start_soon(self._read, name, armed, newest, readers)

    async def _read(
        self, name: str, armed: bool, newest: datetime, readers: trio.Semaphore
    ) -> None:
        try:
            counted = self._metrics.tally(name)
            try:
                fires = await self._calls.history(name)
            except StateFault as exc:
                log.debug("%s: the failure streak stays as its newest claim says: %s", name, exc)
                return
            except Exception as exc:  # a store's bug: housekeeping, never the end of the loops
                log.error(
                    "%s: the history for the failure streak could not be read: %s: %s",
                    name,
                    type(exc).__name__,
                    exc,
                )
                return
            if not fires or fires[-1].slot > newest or self._metrics.tally(name) != counted:
                # A claim newer than the seed's (a fire since, whose settle may be counted
                # yet, or not), or a fire counted meanwhile: the series are newer than this.
                return
            failing, success = failing_streak(fires)
            self._metrics.streak_read(
                name,
                failing,
                None if success is None else ended(success),
                oldest=fires[0].slot if armed else None,
            )
        finally:
            readers.release()
