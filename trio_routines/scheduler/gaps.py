"""Recording the slots a routine passed over: the runtime's side of :mod:`trio_routines.gaps`.

The cron loop, after each slot it tried (see :meth:`GapRecording.after_slot`), and the boot
(:meth:`Boot.plan`) decide what was passed over; this part writes it to the store, counts it
(``trio_routines_slots_missed_total``) and logs it. A gap that cannot be written is logged
and otherwise forgotten: it never holds up a fire. A store without ``record_gap`` (one of
yours, written before gaps) still gets the log lines and the counter.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime, timedelta

from ..claims import claimed_through
from ..cron import next_run
from ..errors import StateFault
from ..gaps import passed_over, unfired_gaps
from ..history import GAP_WHY as WHY
from ..instants import format_iso
from ..records import Fire, Gap, GapReason
from ..routines import Routine
from ..store import ArmedRecords, GapRecords, Store
from .calls import StoreCalls
from .foreach import for_each
from .state import FireResult, Runtime, log

_MS = timedelta(milliseconds=1)


def gap_words(gap: Gap) -> str:
    """``2 slots 23:58–23:59`` / ``1 slot 23:58`` (ISO instants), ``about`` when estimated."""
    about = "about " if gap.estimated else ""
    slots = "slot" if gap.count == 1 else "slots"
    span = (
        format_iso(gap.first)
        if gap.first == gap.last
        else f"{format_iso(gap.first)} to {format_iso(gap.last)}"
    )
    return f"{about}{gap.count} {slots} {span}"


class GapRecording:
    """Writes, counts and logs the slots passed over; collaborators: the ``store``, the
    :class:`Runtime` (wall clock, metrics) and the :class:`StoreCalls` (bounds, reads)."""

    def __init__(self, store: Store, runtime: Runtime, calls: StoreCalls) -> None:
        self._store = store
        self._runtime = runtime
        self._calls = calls

    async def record_gap(
        self, name: str, gap: Gap | None, *, extends: datetime | None = None
    ) -> None:
        """Write ``gap`` of routine ``name`` (if any), count it and log it; never raises."""
        if gap is None:
            return
        try:
            await self.write_gap(name, gap, extends)
        except StateFault as exc:
            log.error(
                "%s: %s passed over (%s) could not be recorded: %s",
                name,
                gap_words(gap),
                gap.reason.value,
                exc,
            )
            self._count_gap(name, gap, "not in its history: its record failed", extends)

    async def write_gap(self, name: str, gap: Gap, extends: datetime | None = None) -> bool:
        """Write ``gap``, then count and log it; False (nothing counted) when the store had it
        already. StateFault when the store does not answer."""
        if not isinstance(self._store, GapRecords):
            self._count_gap(name, gap, "this store keeps no gaps", extends)
            return True
        if not await self._store_gap(name, gap, extends):
            return False  # another replica recorded these very slots
        self._count_gap(name, gap, "in its history as a gap", extends)
        return True

    def _count_gap(self, name: str, gap: Gap, kept: str, extends: datetime | None) -> None:
        """Count ``gap`` and log it, saying where it is ``kept`` (or why not). A pause's slots
        after its first (a gap that ``extends`` the one before) are at DEBUG: a paused routine
        of every minute said so twice a minute, all day."""
        self._runtime.metrics.slots_missed(name, gap.reason.value, gap.count)
        if gap.reason is not GapReason.PAUSED:
            level = log.warning
        else:
            level = log.info if extends is None else log.debug
        level(
            "%s: missed %s — %s (%s, reason %s)",
            name,
            gap_words(gap),
            WHY[gap.reason],
            kept,
            gap.reason.value,
        )

    async def _store_gap(self, name: str, gap: Gap, extends: datetime | None) -> bool:
        assert isinstance(self._store, GapRecords)
        with self._calls.bounded():
            return await self._store.record_gap(name, gap, extends=extends)
        raise self._calls.no_answer(f"could not record a gap of {name!r}")

    async def _gaps_of(self, name: str) -> list[Gap]:
        """``name``'s retained gaps, bounded (none for a store without gaps). Raises
        StateFault."""
        if not isinstance(self._store, GapRecords):
            return []
        with self._calls.bounded():
            return await self._store.gaps(name)
        raise self._calls.no_answer(f"the gaps of {name!r} are unreadable")

    async def newest_gap_end(self, name: str) -> datetime | None:
        """The last slot of ``name``'s newest gap, or None (none, or a store without gaps)."""
        gaps = await self._gaps_of(name)
        return gaps[-1].last if gaps else None

    async def recorded_paused(self, name: str, slot: datetime) -> bool:
        """Whether a replica recorded ``slot`` of ``name`` as paused (False for a store
        without gaps). Raises StateFault."""
        gaps = await self._gaps_of(name)
        return any(g.reason is GapReason.PAUSED and g.first <= slot <= g.last for g in gaps)

    async def first_armed(self, names: list[str], *, seen: bool = True) -> dict[str, datetime]:
        """When each of ``names`` was first armed (now, for those armed for the first time);
        empty for a store that does not keep it, or one that does not answer (logged).
        ``seen``: each is known from then (its metric's seed); not for a routine with claims,
        whose series its newest claim seeds."""
        if not names or not isinstance(self._store, ArmedRecords):
            return {}
        try:
            with self._calls.bounded():
                armed = await self._store.first_armed(names, self._runtime.now())
                for name, at in armed.items() if seen else ():
                    self._runtime.metrics.known_since(name, at)
                return armed
            raise self._calls.no_answer("when the routines were first armed is unknown")
        except StateFault as exc:
            log.error("the slots of routines that never fired are not accounted for: %s", exc)
            return {}

    async def after_claims(self, name: str, after: datetime) -> datetime:
        """``after``, or ``name``'s newest claim's slot if it is later: every slot up to that
        claim was claimed by some replica, or is stale, so none was passed over. ``after`` as
        it is when the store does not answer."""
        try:
            newest = await self._calls.latest_fire(name)
        except StateFault:
            return after
        return newest.slot if newest is not None and newest.slot > after else after

    async def accounted_for(self, name: str, before: datetime | None = None) -> datetime | None:
        """The last slot of ``name`` that a claim or a gap accounts for (its newest claim's
        slot or its newest gap's end, the later; with ``before``, of those before it, which
        reads the whole history); None when neither is known, or the store does not answer
        (logged: see :meth:`passed_before`). A routine that never fired and has no gap counts
        from when it was first armed, as a boot does (a store that does not keep it: nothing
        accounted for)."""
        try:
            if before is None:
                newest = await self._calls.latest_fire(name)
                slots = [] if newest is None else [newest.slot]
            else:
                slots = [f.slot for f in await self._calls.history(name) if f.slot < before]
            gap_end = await self.newest_gap_end(name)
        except StateFault as exc:
            log.warning("%s: what a caller's fire passed over is unread: %s", name, exc)
            return None
        if gap_end is not None and (before is None or gap_end < before):
            slots.append(gap_end)
        if not slots and before is None:  # never fired: from when it was first armed, if kept
            return (await self.first_armed([name])).get(name)  # as a boot counts (gaps.py)
        return max(slots) if slots else None

    async def passed_before(self, routine: Routine, accounted: datetime, slot: datetime) -> None:
        """A caller's fire of ``slot`` was claimed: record the slots after ``accounted`` (as
        :meth:`accounted_for` read it before the claim) and before ``slot`` as passed over
        while no scheduler fired them (``down``), as a boot would have, had it run first --
        less any claimed or recorded meanwhile (a loop, a replica, a caller's earlier slot),
        read again once something looks passed."""
        cron, tz, name = routine.cron, routine.tz, routine.name
        if (
            cron is None
            or passed_over(cron, tz, name, accounted, slot - _MS, GapReason.DOWN) is None
        ):
            return  # nothing passed: the common case, one cron step
        since = await self.accounted_for(name, before=slot)
        if since is not None:  # else nothing newer was found (or the store did not say: logged)
            accounted = max(accounted, since)
        passed = passed_over(cron, tz, name, accounted, slot - _MS, GapReason.DOWN)
        await self.record_gap(name, passed)

    async def before_turn(
        self,
        routine: Routine,
        slot: datetime,
        passed_from: datetime | None,
        started: datetime | None,
    ) -> None:
        """A fire of ``slot`` was claimed: what it passed over, recorded before its turn, so
        that a turn whose process dies leaves nothing unaccounted (whichever replica finds it
        dead). A caller's fire: the slots after ``passed_from`` before it
        (:meth:`passed_before`). A loop's late fire (a boot's catch-up, a loop that woke
        late), begun at ``started``: the slots after it until then, ``caught-up``; those its
        turn overlaps, :meth:`after_slot` records after it."""
        if passed_from is not None:
            await self.passed_before(routine, passed_from, slot)
        elif started is not None and routine.cron is not None:
            cron, tz, name = routine.cron, routine.tz, routine.name
            gap = passed_over(cron, tz, name, slot, started, GapReason.CAUGHT_UP)
            await self.record_gap(name, gap)

    async def behind_stamps(
        self,
        routines: Mapping[str, Routine],
        newest: Mapping[str, Fire | None],
        now: datetime,
        running: Collection[str] = (),
    ) -> None:
        """A boot's: record the slots that came after a routine's newest claim's slot and
        before its stamp, which no gap holds: a slot fired by hand once the next ones had come
        (``fire --slot`` after a downtime), or a catch-up whose loop never recorded what it
        passed over (its process died). The boot counts missed slots from a claim's stamp
        (:func:`~..claims.claimed_through`) and arms after it: they would be neither claims
        nor gaps. ``down``, or ``paused`` before a resume that came between them and the
        stamp (a claim made at the stamp shows no pause held the routine then); only those
        since the routine was first armed, as a boot counts; best effort, as the other gaps of
        a boot. ``running``: the routines whose newest claim a live replica's turn still holds
        (its loop records what it passed over, as ``caught-up`` or ``overlap``, at its end)."""
        behind: dict[str, tuple[Routine, datetime, datetime]] = {}
        for name, fire in newest.items():
            routine = routines.get(name)
            if fire is None or routine is None or routine.cron is None or name in running:
                continue
            end = min(claimed_through(fire), now)
            if passed_over(routine.cron, routine.tz, name, fire.slot, end, GapReason.DOWN):
                behind[name] = (routine, fire.slot, end)
        if not behind:
            return  # the rule: each stamp within a cron step of its slot
        gap_ends = await for_each(self.newest_gap_end, behind, on_fault=_unread)
        armed = await self.first_armed(list(gap_ends), seen=False)
        resumes = await for_each(self._calls.resumed_at, gap_ends, on_fault=_unread)
        for name, resumed in resumes.items():
            routine, slot, end = behind[name]
            assert routine.cron is not None
            gap_end, since = gap_ends[name], armed.get(name, slot)
            accounted = max(slot, since) if gap_end is None else max(slot, since, min(gap_end, now))
            for gap in unfired_gaps(
                routine.cron,
                routine.tz,
                name,
                accounted=accounted,
                now=end,
                resumed=resumed if resumed is not None and resumed <= end else None,
            ):
                await self.record_gap(name, gap)

    def passed_since(self, routine: Routine, armed: datetime) -> bool:
        """Whether a slot of ``routine`` passed since ``armed`` (cheap: one cron step)."""
        assert routine.cron is not None
        first = next_run(routine.cron, routine.tz, armed, routine.name)
        return first is not None and first <= self._runtime.now()

    async def after_slot(
        self,
        routine: Routine,
        due: datetime,
        result: FireResult,
        started: datetime,
        paused_tail: datetime | None,
        held: datetime | None = None,
    ) -> datetime | None:
        """Record what passed while the loop tried ``due``; the new paused tail. ``held``: the
        resume of a pause that held ``due``, resumed since (the slots up to it were paused).

        A claimed slot: those during its turn, passed over by the turn (``overlap``) -- less
        any another replica claimed meanwhile; those between it and the fire's start (a late
        fire's, ``caught-up``) were recorded before the turn (:meth:`before_turn`). A paused one:
        it and any passed since (``paused``), extending the gap of the slot before it, less
        those another replica claimed in time (the pause came after it had read).
        Duplicates and stale slots are another scheduler's to account for.
        """
        assert routine.cron is not None
        cron, tz, name = routine.cron, routine.tz, routine.name
        now = self._runtime.now()
        if result.claimed:
            overlap = passed_over(cron, tz, name, max(due, started), now, GapReason.OVERLAP)
            if overlap is not None:  # less what a replica fired while we ran
                after = await self.after_claims(name, max(due, started))
                await self.record_gap(name, passed_over(cron, tz, name, after, now, overlap.reason))
            return None
        if result.reason == "paused":
            # Found paused after its slot (this replica stalled, or the pause came as the
            # slot did): another replica may have claimed it in time, before the pause. Such
            # slots are its to record.
            after = await self.after_claims(name, due - _MS)
            if after >= due:
                paused_tail = None  # a claim between: the next gap extends none before it
            # Paused still: every slot up to now; held by a pause resumed since, those up to
            # its resume (the slots after it are the loop's again).
            until = max(now, due) if held is None else max(min(held, now), due)
            paused = passed_over(cron, tz, name, after, until, GapReason.PAUSED)
            await self.record_gap(name, paused, extends=paused_tail)
            return paused.last if paused is not None else paused_tail
        return None


def _unread(name: str, fault: StateFault) -> None:
    log.error("%s: the slots behind its newest claim's instant are not recorded: %s", name, fault)
