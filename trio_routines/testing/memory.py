"""An in-memory store for tests: :class:`MemoryStore`, the store contract kept in memory with
fault injection. Its members are :class:`~.memberships.MemoryPresence` (memberships.py)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

import attrs
import trio

from ..checks import checked_count
from ..claims import KEEP_CLAIMS, claim_gate, is_stale
from ..gaps import add_gap
from ..instants import format_iso, slot_name, truncate_ms
from ..ledger import Entry, Spent, add_entry, check_key, spent_since
from ..names import check_name
from ..presence import IdInUse
from ..records import (
    ClaimResult,
    ClaimStatus,
    Fire,
    Gap,
    GapReason,
    Outcome,
    Wakeup,
    claim_result,
    fire_record,
)
from ..replicas import ReplicaInfo, claim_key, replica_key, session_key
from ..store import Lifetime
from ..usage import Usage
from ..wakelimits import kept_turns, text_bytes, turns_kept_after
from ..wakeups import WakeupRequest, plan_add, plan_defer, remove, take_first_due
from .faults import Faults
from .memberships import MemoryPresence

log = logging.getLogger("trio_routines")


class MemoryStore(Lifetime):
    """The store contract in memory, for one process.

    ``faults`` maps a method name (``claim``, ``settle``, ``latest_fire``, ``history``,
    ``add_wakeup``, ``take_due_wakeup``, ``defer_wakeup``, ``remove_wakeup``,
    ``list_wakeups``, ``ready``, ``record_gap``, ``gaps``, ``first_armed``,
    ``note_wake_turn``, ``wake_turns``) to an exception
    that method raises until the entry is removed: a way to test what a broken disk does
    without a broken disk.
    A ``settle`` fault is logged and swallowed, as the contract says. :meth:`fail` sets one
    for a number of calls only; :meth:`hang` makes a method stall until it is cancelled, as a
    silent network does.
    """

    def __init__(self, *, keep: int = KEEP_CLAIMS) -> None:
        self.keep = checked_count("keep", keep, least=1)
        self.claims: dict[str, dict[str, Fire]] = {}
        #: Every hold taken through :meth:`join`, across the schedulers sharing this store:
        #: key -> the presence holding it (see :mod:`trio_routines.replicas`).
        self.holds: dict[int, MemoryPresence] = {}
        self.members: dict[str, MemoryPresence] = {}
        self.wakeups: list[Wakeup] = []
        #: The faults it is told to inject (:meth:`fail`, :meth:`hang`), which its members ask
        #: too; ``faults`` and ``hangs`` are theirs, open to a test as they are.
        self.injected = Faults()
        self.faults: dict[str, Exception] = self.injected.errors
        self.hangs: set[str] = self.injected.hangs
        self.paused_routines: set[str] = set()
        self.resumed: dict[str, datetime] = {}
        self.paused_at: dict[str, datetime] = {}  # when each paused routine was paused
        #: When the pause each latest resume ended began, where it was known.
        self.resumed_pauses: dict[str, datetime] = {}
        self.gap_records: dict[str, list[Gap]] = {}
        self.armed: dict[str, datetime] = {}  # when each routine was first armed
        #: The usage ledgers: (kind, name) -> entries (see :mod:`trio_routines.ledger`).
        self.ledgers: dict[tuple[str, str], list[Entry]] = {}
        #: Each session's recent wake-up turns (:class:`~trio_routines.wakelimits.WakeTurns`).
        self.turns: dict[str, list[datetime]] = {}
        self._open_after: tuple[str, str] | None = None  # see open_claims
        self._named: set[str] = set()  # routine names checked already (every claim, settle)

    def fail(
        self,
        operation: str,
        error: Exception,
        *,
        times: int | None = None,
        routine: str | None = None,
    ) -> None:
        """Make ``operation`` raise ``error``: for the next ``times`` calls, or until removed.

        With ``routine``, only calls about that routine fail (and count). An operation the
        store has not (a misspelt one would make a test pass for the wrong reason) is a
        ``ValueError`` naming those it has.
        """
        self.injected.fail(operation, error, times=times, routine=routine)

    def hang(self, operation: str) -> None:
        """Make every later call of ``operation`` stall until cancelled (``hangs.discard``);
        ``ValueError`` for an operation the store has not, as :meth:`fail`."""
        self.injected.hang(operation)

    def _check_new(self, routine: str) -> None:
        """:func:`check_name` for a name not checked before, then remembered: a claim and a
        settle per fire ask only when the name is not in ``_named``."""
        check_name(routine)
        self._named.add(routine)

    async def claim(
        self, routine: str, slot: datetime, fired_at: datetime, *, replica: str | None = None
    ) -> ClaimResult:
        await self.injected.enter("claim")
        # A claim and a settle per fire: no call while the name is known and nothing fails.
        if routine not in self._named:
            self._check_new(routine)
        if self.faults:
            self.injected.check("claim", routine)
        claims = self.claims.setdefault(routine, {})
        newest, prune, _ = claim_gate(claims, self.keep)
        wanted = slot_name(slot)
        stale = is_stale(newest, wanted)
        if stale is not None:
            return ClaimResult(ClaimStatus.STALE, stale)
        if wanted in claims:
            return ClaimResult(ClaimStatus.DUPLICATE, wanted)
        claims[wanted] = fire_record(slot, fired_at, replica=replica)
        for name in prune:
            del claims[name]
        return claim_result(ClaimStatus.TAKEN, wanted)

    async def settle(
        self,
        routine: str,
        slot: datetime,
        outcome: Outcome,
        ms: int | None = None,
        *,
        if_unsettled: bool = False,
        error: str | None = None,
        output: str | None = None,
        usage: Usage | None = None,
    ) -> bool:
        await self.injected.enter("settle")
        if routine not in self._named:
            self._check_new(routine)
        name = slot_name(slot)
        fault = self.injected.consume("settle", routine) if self.faults else None
        if fault is not None:
            log.warning(
                "%s: could not record the %s outcome of slot %s: %s",
                routine,
                outcome.value,
                format_iso(slot),
                fault,
            )
            return False
        fire = self.claims.get(routine, {}).get(name)
        if fire is None or (if_unsettled and fire.outcome is not None):
            return True
        # Built as attrs.evolve would, without its lookups of the fields (a settle per fire).
        self.claims[routine][name] = fire_record(
            fire.slot,
            fire.fired_at,
            outcome,
            None if ms is None else round(ms),
            error,
            fire.replica,
            output,
            usage,
        )
        return True

    async def latest_fire(self, routine: str) -> Fire | None:
        await self.injected.enter("latest_fire")
        if routine not in self._named:  # read at every boot: the first fire's claim asks not
            self._check_new(routine)
        self.injected.check("latest_fire", routine)
        claims = self.claims.get(routine, {})
        return claims[max(claims)] if claims else None

    async def history(self, routine: str) -> list[Fire]:
        await self.injected.enter("history")
        check_name(routine)
        self.injected.check("history", routine)
        claims = self.claims.get(routine, {})
        return [claims[name] for name in sorted(claims)]

    async def add_wakeup(self, request: WakeupRequest, now: datetime) -> Wakeup:
        await self.injected.enter("add_wakeup")
        self.injected.check("add_wakeup")
        stored = (len(self.wakeups), sum(text_bytes(w) for w in self.wakeups))
        wakeup = plan_add(self.wakeups, request, now, stored=stored)
        self.wakeups = [*self.wakeups, wakeup]
        return wakeup

    async def take_due_wakeup(self, now: datetime) -> Wakeup | None:
        await self.injected.enter("take_due_wakeup")
        self.injected.check("take_due_wakeup")
        self.wakeups, wakeup = take_first_due(self.wakeups, now)
        return wakeup

    async def defer_wakeup(self, wakeup: Wakeup, fire_at: datetime) -> bool:
        await self.injected.enter("defer_wakeup")
        deferred = plan_defer(self.wakeups, wakeup, fire_at)
        if deferred is None:
            return False
        self.injected.check("defer_wakeup")
        self.wakeups = [*self.wakeups, deferred]
        return True

    async def remove_wakeup(self, wakeup_id: str, session: str | None = None) -> bool:
        await self.injected.enter("remove_wakeup")
        self.injected.check("remove_wakeup")
        self.wakeups, removed = remove(self.wakeups, wakeup_id, session)
        return removed

    async def list_wakeups(self) -> list[Wakeup]:
        await self.injected.enter("list_wakeups")
        self.injected.check("list_wakeups")
        return list(self.wakeups)

    async def ready(self) -> None:
        await self.injected.enter("ready")
        self.injected.check("ready")

    async def set_paused(self, routine: str, paused: bool, at: datetime | None = None) -> None:
        await self.injected.enter("set_paused")
        check_name(routine)
        self.injected.check("set_paused", routine)
        if paused:
            if routine not in self.paused_routines and at is not None:
                self.paused_at[routine] = truncate_ms(at)  # (paused again: the first instant)
            self.paused_routines.add(routine)
        elif routine in self.paused_routines:  # a resume of a routine not paused: nothing
            self.paused_routines.discard(routine)
            since = self.paused_at.pop(routine, None)
            if at is not None:
                self.resumed[routine] = truncate_ms(at)
                if since is None:
                    self.resumed_pauses.pop(routine, None)
                else:
                    self.resumed_pauses[routine] = since

    async def paused_since(self, routine: str) -> datetime | None:
        """When ``routine``'s pause began (the ``at`` it was paused with); None when not."""
        await self.injected.enter("paused_since")
        check_name(routine)
        self.injected.check("paused_since", routine)
        return self.paused_at.get(routine)

    async def resumed_at(self, routine: str) -> datetime | None:
        await self.injected.enter("resumed_at")
        check_name(routine)
        self.injected.check("resumed_at", routine)
        return self.resumed.get(routine)

    async def resumed_pause_since(self, routine: str) -> datetime | None:
        """When the pause ``routine``'s latest resume ended began; None when not known."""
        await self.injected.enter("resumed_pause_since")
        check_name(routine)
        self.injected.check("resumed_pause_since", routine)
        return self.resumed_pauses.get(routine)

    async def record_gap(self, routine: str, gap: Gap, *, extends: datetime | None = None) -> bool:
        """Add ``gap`` to ``routine``\'s gaps (the store contract); False when already there."""
        check_name(routine)
        await self.injected.enter("record_gap")
        self.injected.check("record_gap", routine)
        if gap.reason is GapReason.STORE and any(
            gap.first <= fire.slot <= gap.last for fire in self.claims.get(routine, {}).values()
        ):
            return False  # a claim whose answer was lost: a claim, not a gap
        changed = add_gap(self.gap_records.get(routine, []), gap, extends)
        if changed is None:
            return False
        self.gap_records[routine] = changed
        return True

    async def gaps(self, routine: str) -> list[Gap]:
        """The retained gaps of ``routine``, oldest first."""
        check_name(routine)
        await self.injected.enter("gaps")
        self.injected.check("gaps", routine)
        return list(self.gap_records.get(routine, []))

    async def record_usage(self, kind: str, name: str, at: datetime, usage: Usage) -> None:
        """Add ``usage``, spent at ``at``, to the ledger of a routine or a session."""
        check_key(kind, name)
        await self.injected.enter("record_usage")
        self.injected.check("record_usage", name if kind == "routine" else None)
        key = (kind, name)
        self.ledgers[key] = add_entry(self.ledgers.get(key, []), at, usage)

    async def usage_since(self, kind: str, name: str, since: datetime) -> Spent:
        """What the turns of a routine or a session spent from ``since`` on (the ledger)."""
        check_key(kind, name)
        await self.injected.enter("usage_since")
        self.injected.check("usage_since", name if kind == "routine" else None)
        return spent_since(self.ledgers.get((kind, name), []), since)

    async def first_armed(self, routines: Sequence[str], at: datetime) -> dict[str, datetime]:
        """When each of ``routines`` was first armed; ``at`` for those named the first time."""
        for routine in routines:
            if routine not in self._named:
                self._check_new(routine)
        await self.injected.enter("first_armed")
        self.injected.check("first_armed")
        return {name: self.armed.setdefault(name, truncate_ms(at)) for name in routines}

    async def note_wake_turn(self, session: str, at: datetime) -> None:
        """Record a wake-up turn of ``session`` at ``at`` (the rate limit's)."""
        await self.injected.enter("note_wake_turn")
        self.injected.check("note_wake_turn")
        self.turns[session] = kept_turns(self.turns.get(session, ()), at)
        since = turns_kept_after(at)
        self.turns = {
            name: kept
            for name, turns in self.turns.items()
            if (kept := [t for t in turns if t > since])
        }

    async def wake_turns(self, session: str, since: datetime) -> list[datetime]:
        """The recorded wake-up turns of ``session`` after ``since``, oldest first."""
        await self.injected.enter("wake_turns")
        self.injected.check("wake_turns")
        return [t for t in self.turns.get(session, ()) if t > since]

    async def paused(self) -> frozenset[str]:
        await self.injected.enter("paused")
        self.injected.check("paused")
        return frozenset(self.paused_routines)

    async def paused_with_resumes(
        self, since: datetime
    ) -> tuple[frozenset[str], dict[str, tuple[datetime, datetime | None]]]:
        """The paused routines (:meth:`paused`: a subclass's own answers too), and those
        resumed at ``since`` or later, each with its latest resume's instant and when the
        pause it ended began (None: not known), in one step."""
        names = await self.paused()
        return names, {
            routine: (at, self.resumed_pauses.get(routine))
            for routine, at in self.resumed.items()
            if at >= since
        }

    async def join(self, info: ReplicaInfo) -> MemoryPresence:
        """Become a member: the replica's own hold, then its holds (see ``replicas.py``)."""
        await self.injected.enter("join")
        self.injected.check("join")
        presence = MemoryPresence(self, info)
        if not (await presence.take([replica_key(info.id)]))[0]:
            raise IdInUse(f"replica id {info.id!r} is in use by a live replica")
        self.members[info.id] = presence
        return presence

    async def open_claims(self, routines: Sequence[str], budget: int) -> list[tuple[str, Fire]]:
        """Open claims of ``routines`` that name their replica, at most ``budget`` per call,
        going on after the last one returned and starting over once all were returned."""
        await self.injected.enter("open_claims")
        for routine in routines:
            check_name(routine)
        self.injected.check("open_claims")
        found = sorted(
            ((routine, name), fire)
            for routine in set(routines)
            for name, fire in self.claims.get(routine, {}).items()
            if fire.outcome is None and fire.replica is not None
        )
        after = self._open_after
        page = [item for item in found if after is None or item[0] > after][:budget]
        self._open_after = page[-1][0] if len(page) == budget else None
        return [(routine, fire) for (routine, _), fire in page]

    async def claims_alive(self, claims: Sequence[tuple[str, datetime]]) -> list[bool]:
        """For each ``(routine, slot)``, whether the hold of its claim is held now."""
        await self.injected.enter("claims_alive")
        self.injected.check("claims_alive")
        return [claim_key(routine, slot) in self.holds for routine, slot in claims]

    async def sessions_held(self, sessions: Sequence[str]) -> list[bool]:
        """For each session, whether its hold is held now (a turn of it under way)."""
        await self.injected.enter("sessions_held")
        self.injected.check("sessions_held")
        return [session_key(session) in self.holds for session in sessions]

    async def replicas(self) -> list[ReplicaInfo]:
        """Every member that joined (and was not forgotten), each marked alive or not."""
        await self.injected.enter("replicas")
        self.injected.check("replicas")
        return [attrs.evolve(m.info, alive=not m.dead) for m in self.members.values()]

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()
