"""What is armed: each cron routine's next slot, and the newest claims that lie ahead.

:class:`Arming` owns the answers :meth:`Scheduler.statistics` gives about the schedule -- the
armed routines, their next slots, the future claims -- written by the boot (the first
slots), the cron loops (each slot after) and the reload (a routine removed or changed). It
reads nothing but the wall clock it is handed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from datetime import datetime

from ..claims import claimed_through
from ..cron import next_run
from ..instants import format_iso
from ..records import Fire
from ..routines import Routine
from .state import log


class Arming:
    """The routines armed, their next slots and their newest claims as last read."""

    def __init__(self) -> None:
        self.next_due: dict[str, datetime | None] = {}
        self.armed: dict[str, None] = {}  # an ordered set of the routines with a next slot
        # The newest claim of each routine as the boot or its last re-arm read it; those
        # stamped ahead of the wall clock are the future claims (see future_claims).
        self._newest: dict[str, Fire] = {}
        # The slot shown after a slot whose turn runs: (the routine's version, the instant it
        # was worked out from, the first slot after that instant).
        self._after: dict[str, tuple[Routine, datetime, datetime | None]] = {}

    def arm(self, name: str, due: datetime) -> None:
        """``name`` is armed for ``due`` (the boot's first slot)."""
        self.armed[name] = None
        self.next_due[name] = due

    def set_due(self, routine: Routine, due: datetime | None) -> None:
        """A cron loop's next slot; None: its cron never fires again (said so, unarmed)."""
        self.next_due[routine.name] = due
        if due is None:
            log.warning(
                '%s: cron "%s" will never fire again — not armed', routine.name, routine.cron
            )
            self.armed.pop(routine.name, None)
        else:
            self.armed[routine.name] = None

    def shown_due(
        self, now: datetime, firing: Collection[str], routines: Mapping[str, Routine]
    ) -> ShownSlots:
        """Each armed routine's next slot as reported, as of ``now``: a routine whose slot is
        firing (``firing``, its turn perhaps long) shows the first slot after ``now``, as a
        reader of its cron would, not the slot it is at; one whose slot has passed unfired (a
        loop held up) still shows that slot, which an alert on overdue slots reads. Copied
        now; the slot after ``now`` of one firing is worked out when first read, if it is
        (a snapshot taken during a herd of 10,000 and never asked for its slots costs none).
        """
        return ShownSlots(self, dict(self.next_due), set(firing), now, routines)

    def slot_after(self, name: str, now: datetime, routine: Routine) -> datetime | None:
        """The first slot of ``routine`` after ``now``, shown while a slot of it fires: worked
        out once per slot passed, not per snapshot read (a scrape during a herd of 10,000)."""
        known = self._after.get(name)
        if known is not None:
            # The first slot after an instant ``since`` no later than ``now``: with no slot
            # in between (it comes after ``now``, or never), the first after ``now`` too. Of
            # this very version: a snapshot read after a reload works out its own version's.
            of, since, after = known
            if of is routine and since <= now and (after is None or after > now):
                return after
        assert routine.cron is not None
        after = next_run(routine.cron, routine.tz, now, name)
        self._after[name] = (routine, now, after)
        return after

    def disarm(self) -> None:
        """The run ended: no loop is left, so nothing is armed and no slot comes next."""
        self.next_due.clear()
        self.armed.clear()
        self._after.clear()

    def forget(self, name: str) -> None:
        """``name`` was removed or changed: nothing of it is armed until its new loop says."""
        self.next_due.pop(name, None)
        self.armed.pop(name, None)
        self._newest.pop(name, None)
        self._after.pop(name, None)

    def note_future_claim(self, name: str, newest: Fire | None, now: datetime) -> None:
        """Remember the newest claim just read, and warn if it is stamped after ``now``.

        A claim behind ``now`` is kept too: if the wall clock later goes back behind its
        stamp, it is in the future again, and :meth:`future_claims` says so.
        """
        if newest is None:
            self._newest.pop(name, None)
            return
        self._newest[name] = newest
        if claimed_through(newest) <= now:
            return
        log.warning(
            "%s: newest claim is in the future (slot %s, stamped %s by %s) — made while a "
            "wall clock was ahead (this one's, or that replica's), or by hand; nothing can fire "
            "before the first slot after it. If this clock is behind the other replicas', set "
            "it right; if every clock is right, stop and delete that claim "
            "(docs/command-line.md: A clock that ran ahead)",
            name,
            format_iso(newest.slot),
            format_iso(newest.fired_at),
            newest.replica or "an unnamed replica",
        )

    def never_due(self, name: str, cron: str, tz: str | None, now: datetime) -> None:
        """Say why ``name`` is not armed: its cron fires no slot after what it accounts for,
        ever, or none after its newest claim's stamp (a claim stamped after ``now``, at the
        calendar's end: a row or a file edited by hand), which holds its every slot back."""
        newest = self._newest.get(name)
        held = newest is not None and claimed_through(newest) > now
        if not held or next_run(cron, tz, now, name) is None:  # (no slot even after now)
            log.warning('%s: cron "%s" will never fire again — not armed', name, cron)
            return
        assert newest is not None
        log.warning(
            '%s: cron "%s" fires no slot after its newest claim\'s stamp (%s) — not armed: '
            "stop, delete that claim, and start again "
            "(docs/command-line.md: A clock that ran ahead)",
            name,
            cron,
            format_iso(claimed_through(newest)),
        )

    def future_claims(self, now: datetime) -> dict[str, datetime]:
        """The claimed slot of each routine whose newest claim lies after ``now`` (its stamp,
        or its slot: :func:`~trio_routines.claims.claimed_through`)."""
        return {n: f.slot for n, f in self._newest.items() if claimed_through(f) > now}


class ShownSlots(Mapping[str, datetime | None]):
    """:attr:`Statistics.next_due <trio_routines.Statistics.next_due>`: each armed routine's
    next slot as one snapshot shows it (see :meth:`Arming.shown_due`), read-only."""

    __slots__ = ("_arming", "_due", "_firing", "_now", "_routines", "_shown")

    def __init__(
        self,
        arming: Arming,
        due: dict[str, datetime | None],
        firing: set[str],
        now: datetime,
        routines: Mapping[str, Routine],
    ) -> None:
        self._arming = arming
        self._due = due
        self._firing = firing
        self._now = now
        self._routines = routines  # the runtime's, replaced whole by a reload, never changed
        self._shown: dict[str, datetime | None] = {}  # those firing, once worked out

    def __getitem__(self, name: str) -> datetime | None:
        due = self._due[name]
        if due is None or name not in self._firing or due > self._now:
            return due
        if name in self._shown:
            return self._shown[name]
        routine = self._routines.get(name)
        if routine is None or not routine.cron:
            return due
        shown = self._shown[name] = self._arming.slot_after(name, self._now, routine)
        return shown

    def __contains__(self, name: object) -> bool:
        return name in self._due

    def __iter__(self) -> Iterator[str]:
        return iter(self._due)

    def __len__(self) -> int:
        return len(self._due)

    def __repr__(self) -> str:
        return repr(dict(self))  # shown as the dict it stands for (the README prints one)
