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

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import TypeVar

from ..claims import claimed_through
from ..cron import next_run
from ..errors import StateFault
from ..gaps import ON_TIME, BootPlan, passed_over, plan_boot, unfired_gaps
from ..history import ended
from ..instants import format_iso
from ..records import Fire, GapReason, Outcome
from ..routines import Routine
from ..text import shell_name
from . import bootlines
from .arming import Arming
from .calls import StoreCalls
from .foreach import for_each
from .gaps import GapRecording
from .membership import Membership
from .openclaims import LEFT_OPEN, SETTLED_MEANWHILE, count_interrupted, found_by, said
from .state import Runtime, log
from .streaks import Streaks

BOOT_INTERRUPTED = "the process stopped mid-turn (found unsettled at the next boot)"
T = TypeVar("T")


class Boot:
    """The run's first step. Collaborators: the :class:`Runtime` (routines, wall clock,
    metrics), the :class:`StoreCalls` (reads, the paused routines, settles), the
    :class:`Membership` (whose open claims live), the :class:`GapRecording`, the
    :class:`Arming` (the newest claims read) and the :class:`Streaks` (histories read once
    the loops run)."""

    def __init__(
        self,
        runtime: Runtime,
        calls: StoreCalls,
        membership: Membership,
        gaps: GapRecording,
        arming: Arming,
        streaks: Streaks,
    ) -> None:
        self._runtime = runtime
        self._calls = calls
        self._membership = membership
        self._gaps = gaps
        self._arming = arming
        self._streaks = streaks
        #: The routines the last boot read and planned, as they were loaded when it began.
        self.booted: dict[str, Routine] = {}

    async def run(self, *, plan: bool) -> dict[str, datetime]:
        """Reconcile every routine's open claim; with ``plan``, each cron routine's first slot
        (of the routines still loaded as :attr:`booted` holds them)."""
        # update_routines() may change them meanwhile: what was booted is kept for the loops.
        self.booted = routines = dict(self._runtime.routines)
        unreadable: dict[str, StateFault] = {}
        newest = await self._read_newest_claims(routines, unreadable, tolerant=not plan)
        latest = {name: claimed_through(fire) for name, fire in newest.items() if fire is not None}
        open_claims = {
            name: fire
            for name in routines
            if (fire := newest.get(name)) is not None and fire.is_open
        }
        alive = await self._membership.claims_alive(list(open_claims.items()))
        unsettled: dict[str, Fire] = {}
        running: set[str] = set()
        for (name, fire), live in zip(open_claims.items(), alive, strict=True):
            if live:  # its holder runs it now: another replica, or this one's fire
                running.add(name)
                if plan and routines[name].cron is not None:  # seeded as _seed_failing would
                    self._runtime.metrics.armed(name, min(fire.slot, self._runtime.now()))
                log.info(
                    "%s: slot %s is running on replica %s — left to it",
                    name,
                    format_iso(fire.slot),
                    fire.replica or "(unnamed)",
                )
                continue
            unsettled[name] = fire

        reason = found_by(BOOT_INTERRUPTED, self._runtime.replica)

        async def interrupted(name: str) -> tuple[bool | None, bool | None]:
            """Whether the store took this boot's record (None: no answer), and whether the
            record read back is this boot's (counted; None: unread)."""
            # Only if still unsettled: another scheduler sharing the store may have been the
            # one mid-turn, and may have settled the real outcome just before we write.
            slot = unsettled[name].slot
            seeded = plan and routines[name].cron is not None  # as _seed_failing's routines
            recorded = await self._calls.settle_once(
                name,
                slot,
                Outcome.INTERRUPTED,
                None,  # no duration: the turn's end was never seen
                if_unsettled=True,
                error=reason,
            )
            metrics = self._runtime.metrics
            mine, record = None, None
            if recorded:
                mine, record = await count_interrupted(
                    self._calls, metrics, self._streaks, name, slot, reason, arm=seeded
                )
                if mine:
                    return recorded, mine  # counted, its series seeded from the record
            if seeded and record is not None:  # another's record: seeded from it, uncounted
                self._seed_failing({name: record})
            elif seeded:  # seeded from the claim, as one left to its holder
                metrics.armed(name, min(slot, self._runtime.now()))
            return recorded, mine

        # Said once answered (a store that did not take it said why), in the routines' order.
        for name, (recorded, mine) in (await for_each(interrupted, unsettled)).items():
            history = f"see `python -m trio_routines history {shell_name(name)}`"
            fire = unsettled[name]
            ending = said(recorded, mine, LEFT_OPEN)
            if recorded and mine is not None:  # where to read it
                ending = f"{SETTLED_MEANWHILE if mine is False else ending} ({history})"
            log.log(
                logging.INFO if recorded and mine is False else logging.WARNING,
                "%s: the fire of slot %s claimed at %s never finished — its process stopped "
                "mid-turn; %s",
                name,
                format_iso(fire.slot),
                format_iso(fire.fired_at),
                ending,
            )
        if not plan:  # an external clock decides every slot
            await self._calls.refresh_paused()  # for statistics
            return {}
        for name in routines:  # the readable ones are reconciled; now fail, naming the first
            if name in unreadable:
                raise unreadable[name]
        current = self._runtime.now()
        for name in routines:
            self._arming.note_future_claim(name, newest[name], current)
        await self._gaps.behind_stamps(routines, newest, current, running)  # before overlaps
        overlap_ends = await self._overlapped(routines, newest, latest, current)
        first_due: dict[str, datetime | None] = {}
        for name, routine in routines.items():
            if routine.cron is not None:
                first_due[name] = next_run(
                    routine.cron, routine.tz, latest.get(name, current), routine.name
                )
        # A catch-up: never of a slot that passed while the routine was paused, nor of one
        # older than the routine's window; every slot passed over is recorded (gaps.py).
        catching_up = [
            name for name, due in first_due.items() if due is not None and due <= current
        ]
        resumes = await for_each(self._calls.resumed_at, catching_up)
        self._calls.resumes_read_at = current
        bootlines.future_resumes(resumes, current)
        # A routine whose overlap was just looked at: its gaps read once (its newest gap then
        # ends at the latest accounted for, which ``latest`` holds already).
        gap_ends: dict[str, datetime | None] = {
            name: overlap_ends[name] for name in catching_up if name in overlap_ends
        }
        gap_ends |= await for_each(
            self._gaps.newest_gap_end, [name for name in catching_up if name not in gap_ends]
        )
        # A routine that never fired is not caught up, but the slots it passed over since it
        # was first armed are accounted for (one store call for every routine without a claim:
        # a new one is recorded as armed now). Best effort: a fault leaves them unrecorded.
        armed = await self._gaps.first_armed([name for name in first_due if newest[name] is None])
        unfired = [name for name in armed if self._gaps.passed_since(routines[name], armed[name])]
        unfired_resumes = await for_each(
            self._calls.resumed_at, unfired, on_fault=bootlines.unaccounted
        )
        bootlines.future_resumes(unfired_resumes, current)
        unfired_gap_ends = await for_each(
            self._gaps.newest_gap_end, unfired, on_fault=bootlines.unaccounted
        )
        await self._calls.refresh_paused()  # for statistics too; a fault: taken as pausing none
        paused = self._calls.paused
        # When each paused one's pause began: the slots before it were missed, not paused. A
        # fault: unknown, every slot it missed taken for paused (as a store that keeps none).
        pauses = await for_each(
            self._calls.paused_since,
            [name for name in (*unfired, *catching_up) if name in paused],
            on_fault=bootlines.pause_unread,
        )
        # And when the pause a resume since ended began (a store that keeps it), likewise.
        since = [(resumes.get(name), latest[name], name) for name in catching_up]
        since += [(unfired_resumes.get(name), armed[name], name) for name in unfired]
        resumed_pauses = await for_each(
            self._calls.resumed_pause_since,
            [name for resumed, accounted, name in since if resumed and resumed > accounted],
            on_fault=bootlines.pause_unread,
        )
        plans: dict[str, BootPlan] = {}
        for name in unfired:
            if name not in unfired_resumes or name not in unfired_gap_ends:
                continue
            routine = routines[name]
            assert routine.cron is not None
            gap_end = unfired_gap_ends[name]
            gaps = unfired_gaps(
                routine.cron,
                routine.tz,
                name,
                accounted=armed[name]
                if gap_end is None
                else max(armed[name], min(gap_end, current)),
                now=current,
                resumed=unfired_resumes[name],
                paused=name in paused,
                paused_since=pauses.get(name),
                resumed_pause_since=resumed_pauses.get(name),
            )
            plans[name] = BootPlan(first_due[name], gaps)
        for name in catching_up:
            routine = routines[name]
            assert routine.cron is not None
            gap_end = gap_ends.get(name)
            plans[name] = plan_boot(
                routine.cron,
                routine.tz,
                name,
                # A gap never reaches past now here: one recorded by a clock that ran ahead
                # must not keep a slot from firing (only claims decide that).
                accounted=latest[name]
                if gap_end is None
                else max(latest[name], min(gap_end, current)),
                now=current,
                resumed=resumes.get(name),
                paused=name in paused,
                catchup=routine.catchup,
                paused_since=pauses.get(name),
                resumed_pause_since=resumed_pauses.get(name),
            )

        async def record(name: str) -> None:
            for gap in plans[name].gaps:
                await self._gaps.record_gap(name, gap)

        await for_each(record, [name for name, made in plans.items() if made.gaps])
        planned = {}
        for name, routine in routines.items():
            if routine.cron is None:
                continue
            due = first_due[name]
            planned_here = plans.get(name)
            if planned_here is not None:
                due = planned_here.due
            if due is None:
                self._arming.never_due(name, routine.cron, routine.tz, current)
                continue
            if due <= current - ON_TIME:  # (a slot less late is on time: no catch-up)
                log.info("%s: catching up a missed run", name)
            if planned_here is not None and planned_here.missed is not None:
                bootlines.log_missed(name, planned_here, due, current, routine.catchup)
            planned[name] = due
        # Those an update_routines() removed or replaced meanwhile are not armed from here:
        # a replaced one's loop arms anew once the loops run.
        loaded = self._runtime.routines
        return {name: due for name, due in planned.items() if loaded.get(name) is routines[name]}

    async def _overlapped(
        self,
        routines: dict[str, Routine],
        newest: dict[str, Fire | None],
        latest: dict[str, datetime],
        current: datetime,
    ) -> dict[str, datetime | None]:
        """The slots that passed while a turn a stop cut short still ran: its loop, stopped,
        could not record them as the turn's ``overlap``, and the boot must not take them
        for slots missed while no scheduler ran, nor catch one up. Recorded here (unless a
        gap already reaches them), and accounted for: ``latest`` moves to the turn's end.
        Returns the newest gap's end read for each routine with such slots (None: none),
        for the plan to reuse."""
        cut = {
            name: (fire, min(ended(fire), current))
            for name, fire in newest.items()
            if fire is not None
            and fire.outcome is Outcome.INTERRUPTED
            and routines[name].cron is not None
            and ended(fire) > fire.fired_at
        }

        read: dict[str, datetime | None] = {}

        async def one(name: str) -> None:
            fire, end = cut[name]
            routine = routines[name]
            assert routine.cron is not None
            gap = passed_over(routine.cron, routine.tz, name, fire.fired_at, end, GapReason.OVERLAP)
            if gap is None:
                return
            latest[name] = max(latest[name], end)
            try:
                recorded = read[name] = await self._gaps.newest_gap_end(name)
            except StateFault:  # read again by the plan, which fails the boot if it must
                recorded = None  # written, at worst twice: the store keeps one of equal gaps
            if recorded is None or recorded < gap.last:
                await self._gaps.record_gap(name, gap)

        await for_each(one, cut)
        return read

    async def _read_newest_claims(
        self,
        routines: Mapping[str, Routine],
        unreadable: dict[str, StateFault],
        *,
        tolerant: bool,
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
                bootlines.not_reconciled(name, exc)

        newest = await for_each(self._calls.latest_fire, routines, on_fault=fault)
        for name, fire in newest.items():  # /metrics' last success, before this boot
            if fire is not None and fire.outcome is Outcome.COMPLETED:
                self._runtime.metrics.succeeded(name, ended(fire))
        if not tolerant:
            cron = {name: fire for name, fire in newest.items() if routines[name].cron is not None}
            self._seed_failing(cron)
        return newest

    def _seed_failing(self, newest: dict[str, Fire | None]) -> None:
        """Seed each routine's failure streak and last success for /metrics from its newest
        claim, so that a routine failing since its first run has both series from the boot
        on: a routine whose newest claim failed reads one failure, since its slot, until its
        history is read after the boot (:class:`Streaks`; a boot after a herd failed would
        otherwise read every retained claim of thousands of routines before its first slot).
        A routine whose newest claim is open is seeded once the boot knows whether its turn
        runs elsewhere (from that claim) or died (when the boot records it interrupted)."""
        metrics, now = self._runtime.metrics, self._runtime.now()
        for name, fire in newest.items():
            if fire is not None and fire.outcome in (Outcome.FAILED, Outcome.INTERRUPTED):
                metrics.armed(name, fire.slot, 1)
                self._streaks.later(name, armed=True, newest=fire.slot)
            elif fire is not None and fire.is_open:
                continue  # open: seeded by the reconcile (see the docstring)
            else:
                metrics.armed(name, now if fire is None else min(fire.slot, now))
