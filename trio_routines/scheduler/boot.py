"""Boot: reconcile the claims a dead process left open, and plan each routine's first slot."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta

import trio

from ..cron import next_run
from ..errors import StateFault
from ..instants import format_iso
from ..records import Fire, Outcome
from .calls import StoreCalls
from .state import log

BOOT_INTERRUPTED = "the process stopped mid-turn (found unsettled at the next boot)"


class Boot(StoreCalls):
    async def _boot(self, *, plan: bool = True) -> dict[str, datetime]:
        """Reconcile every routine's open claim; with ``plan``, each cron routine's first slot."""
        routines = dict(self.routines)  # update_routines() may change them meanwhile
        newest = await self._read_newest_claims(routines)
        latest = {}
        for name in routines:
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
                await self._settle_once(
                    name,
                    fire.slot,
                    Outcome.INTERRUPTED,
                    if_unsettled=True,
                    error=BOOT_INTERRUPTED,
                )
            if fire is not None:
                latest[name] = fire.fired_at
        if not plan:  # an external clock decides every slot
            return {}
        current = self.now()
        for name in routines:
            self._note_future_claim(name, newest[name], current)
        first_due = {}
        for name, routine in routines.items():
            if routine.cron is None:
                continue
            due = next_run(routine.cron, routine.tz, latest.get(name, current), routine.name)
            if due is not None and due <= current:
                # A catch-up: never of a slot that passed while the routine was paused.
                resumed = await self._resumed_at(name)
                if resumed is not None and resumed > latest[name]:
                    due = next_run(routine.cron, routine.tz, resumed, routine.name)
            if due is None:
                log.warning('%s: cron "%s" will never fire again — not armed', name, routine.cron)
                continue
            if due <= current:
                log.info("%s: catching up a missed run", name)
            first_due[name] = due
        return first_due

    async def _read_newest_claims(self, routines: Collection[str]) -> dict[str, Fire | None]:
        """Every routine's newest claim, read concurrently (the store bounds its threads)."""
        newest: dict[str, Fire | None] = {}
        faults: dict[str, StateFault] = {}

        async def read(name: str) -> None:
            try:
                newest[name] = await self._latest_fire(name)
            except StateFault as exc:
                faults[name] = exc

        async with trio.open_nursery() as nursery:
            for name in routines:
                nursery.start_soon(read, name)
        for name in routines:  # the first broken routine in order, as one plain error
            if name in faults:
                raise faults[name]
        for name, fire in newest.items():  # /metrics' last success, before this boot
            if fire is not None and fire.outcome is Outcome.COMPLETED:
                self.metrics.succeeded(name, fire.fired_at + timedelta(milliseconds=fire.ms or 0))
        return newest
