"""Boot: reconcile the claims a dead process left open, and plan each routine's first slot.

Every store call a boot makes per routine (its newest claim, the settle of a claim left open,
the last resume of a routine that would catch up) is made for all routines at once, so that a
store that batches concurrent calls (the state directory's reads and group commit, the
PostgreSQL store's queries) serves thousands of routines in a few round trips. A call that
fails fails the boot with the first failing routine's error, in the routines' order -- but
only after every routine whose claims could be read was reconciled: one routine's damaged
claims do not leave the others' interrupted fires unreported.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from datetime import datetime, timedelta
from typing import TypeVar

import trio

from ..cron import next_run
from ..errors import StateFault
from ..instants import format_iso
from ..records import Fire, Outcome
from .openclaims import BOOT_BUDGET, OpenClaims
from .state import log

BOOT_INTERRUPTED = "the process stopped mid-turn (found unsettled at the next boot)"
T = TypeVar("T")


class Boot(OpenClaims):
    async def _boot(self, *, plan: bool = True) -> dict[str, datetime]:
        """Reconcile every routine's open claim; with ``plan``, each cron routine's first slot."""
        routines = dict(self.routines)  # update_routines() may change them meanwhile
        unreadable: dict[str, StateFault] = {}
        newest = await self._read_newest_claims(routines, unreadable, tolerant=not plan)
        latest = {name: fire.fired_at for name, fire in newest.items() if fire is not None}
        open_claims = {
            name: fire
            for name in routines
            if (fire := newest.get(name)) is not None and fire.outcome is None
        }
        alive = await self._claims_alive([(n, f.slot) for n, f in open_claims.items()])
        unsettled = {}
        for (name, fire), live in zip(open_claims.items(), alive, strict=True):
            if live:  # its holder runs it now: another replica, or this one's fire
                log.info(
                    "%s: slot %s is running on replica %s — left to it",
                    name,
                    format_iso(fire.slot),
                    fire.replica or "(unnamed)",
                )
                continue
            log.warning(
                "%s: the fire claimed at %s never finished — its process stopped mid-turn; "
                "recorded as interrupted (see `python -m trio_routines history %s`)",
                name,
                format_iso(fire.fired_at),
                name,
            )
            unsettled[name] = fire.slot

        async def interrupted(name: str) -> None:
            # Only if still unsettled: another scheduler sharing the store may have been the
            # one mid-turn, and may have settled the real outcome just before we write.
            await self._settle_once(
                name,
                unsettled[name],
                Outcome.INTERRUPTED,
                None,  # no duration: the turn's end was never seen
                if_unsettled=True,
                error=BOOT_INTERRUPTED,
            )

        await _for_each(interrupted, unsettled)
        await self._reconcile_open(BOOT_BUDGET)  # older claims left open (openclaims.py)
        if not plan:  # an external clock decides every slot
            return {}
        for name in routines:  # the readable ones are reconciled; now fail, naming the first
            if name in unreadable:
                raise unreadable[name]
        current = self.now()
        for name in routines:
            self._note_future_claim(name, newest[name], current)
        first_due: dict[str, datetime | None] = {}
        for name, routine in routines.items():
            if routine.cron is not None:
                first_due[name] = next_run(
                    routine.cron, routine.tz, latest.get(name, current), routine.name
                )
        # A catch-up: never of a slot that passed while the routine was paused.
        catching_up = [
            name for name, due in first_due.items() if due is not None and due <= current
        ]
        resumes = await _for_each(self._resumed_at, catching_up)
        planned = {}
        for name, routine in routines.items():
            if routine.cron is None:
                continue
            due = first_due[name]
            resumed = resumes.get(name)
            if resumed is not None and resumed > latest[name]:
                due = next_run(routine.cron, routine.tz, resumed, routine.name)
            if due is None:
                log.warning('%s: cron "%s" will never fire again — not armed', name, routine.cron)
                continue
            if due <= current:
                log.info("%s: catching up a missed run", name)
            planned[name] = due
        return planned

    async def _read_newest_claims(
        self,
        routines: Collection[str],
        unreadable: dict[str, StateFault],
        *,
        tolerant: bool = False,
    ) -> dict[str, Fire | None]:
        """Every routine's newest claim, read concurrently (the store bounds its threads).

        A routine whose newest claim is unreadable is left out of the answer and its fault
        put in ``unreadable``; ``tolerant`` (an external-clock boot, which plans nothing from
        them and reads them only to reconcile) also logs it, and the boot goes on
        (docs/design.md).
        """

        def fault(name: str, exc: StateFault) -> None:
            unreadable[name] = exc
            if tolerant:
                _not_reconciled(name, exc)

        newest = await _for_each(self._latest_fire, routines, on_fault=fault)
        for name, fire in newest.items():  # /metrics' last success, before this boot
            if fire is not None and fire.outcome is Outcome.COMPLETED:
                self.metrics.succeeded(name, fire.fired_at + timedelta(milliseconds=fire.ms or 0))
        return newest


def _not_reconciled(name: str, fault: StateFault) -> None:
    log.error(
        "%s: its newest claim is unreadable, so a fire it left open is not reconciled at this "
        "boot (its fires will report the fault): %s",
        name,
        fault,
    )


async def _for_each(
    call: Callable[[str], Awaitable[T]],
    names: Collection[str],
    *,
    on_fault: Callable[[str, StateFault], None] | None = None,
) -> dict[str, T]:
    """``call(name)`` for every name at once; the first StateFault in the names' order, as one
    plain error, if any failed -- or, with ``on_fault``, each fault handed to it and its name
    left out of the answer."""
    results: dict[str, T] = {}
    faults: dict[str, StateFault] = {}

    async def one(name: str) -> None:
        try:
            results[name] = await call(name)
        except StateFault as exc:
            faults[name] = exc

    async with trio.open_nursery() as nursery:
        for name in names:
            nursery.start_soon(one, name)
    for name in names:
        if name in faults:
            if on_fault is None:
                raise faults[name]
            on_fault(name, faults[name])
    return results
