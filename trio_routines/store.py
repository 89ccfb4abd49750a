"""The store contract every backend keeps.

A store holds two things: the **claims** of each routine (one per slot it decided to run,
which are also that routine's history) and the **pending wake-ups**. Everything the runtime
knows across restarts and across processes lives here, so the contract is stated exactly:

Claims
    ``claim(routine, slot, fired_at)`` decides one slot, atomically with respect to every
    other caller of every process sharing the store:

    * **stale** when a claim of a later slot exists: nothing is written;
    * **duplicate** when this slot's claim exists (and is the newest): nothing is written;
    * **taken** otherwise: the claim exists, stamped with ``fired_at`` and no outcome, and is
      durable (it survives a crash or power loss of this machine) *before* this returns.

    Exactly one concurrent caller gets ``taken`` for a slot. After a taken claim the oldest
    claims beyond the store's retention (default 512) are pruned; the newest is never pruned.
    Any fault before the claim exists raises :class:`~trio_routines.errors.StateFault` and
    leaves no claim, so the slot can still fire once the fault is repaired.

    ``settle(routine, slot, outcome, ms, error=None)`` writes the outcome (and the duration, if
    measured, and the reason it did not complete, if given: stored as one visible line of at
    most 1 KiB, :func:`trio_routines.text.error_text`; and with ``output=``, the end of the
    turn's reply, stored as :func:`trio_routines.output.stored_output` makes it: at most 64 KiB,
    never a reason to fail; and with ``usage=``, what the turn spent, a
    :class:`~trio_routines.agent.Usage` read back as given) into the existing claim, keeping
    its stamp (with ``if_unsettled``, only if it has no outcome yet: the check and the write
    are one atomic step). It never raises: a fault is logged as a warning, the claim stays as
    it was, and ``settle`` returns False so that the caller may try again; otherwise it
    returns True. A claim that no longer
    exists (pruned meanwhile) is not recreated (True: there is nothing left to write).

    ``latest_fire(routine)`` reads the newest claim (``None`` when there is none); a fault
    reading it raises StateFault. Older claims are not read, and its ``output`` and ``usage``
    may be left out (a boot reads every routine's newest claim and needs neither).
    ``history(routine)`` returns every retained claim, oldest first, with its output and
    usage (ours read at most the newest ``keep``: claims beyond them, left by a hand or by
    an older process until the next claim prunes them, are not all read); a fault on any of
    them raises StateFault. Content that cannot be a claim record (torn, corrupt, or a
    state-directory entry that is no regular file) is a warning, not a fault: it reads as a
    claim of its slot without stamp or outcome.

Wake-ups
    Pending wake-ups form one ordered list. ``add_wakeup`` applies the guardrails of
    :mod:`trio_routines.wakeups` against the current list atomically (so the per-session cap
    holds across processes) and raises :class:`~trio_routines.errors.InvalidWakeup` for a
    refused request. ``take_due_wakeup`` removes (one-shot) or advances (recurring) the first
    due entry in stored order and returns it as it was; two callers never take the same
    occurrence. ``defer_wakeup`` re-queues a busy one-shot at the end, or returns False at the
    retry ceiling or when its session already has the most pending wake-ups it may have
    (checked atomically, as an add's: the cap holds across a deferral too). ``remove_wakeup``
    is scoped to a session when one is given. All wake-up calls raise StateFault when the
    store cannot be read or written.

Pause
    ``set_paused(routine, paused, at)`` pauses (True) or resumes (False) a routine for every
    scheduler sharing the store; it is idempotent, and durable before it returns. A resume
    of a paused routine given ``at`` (the wall-clock instant) keeps it, or, when it took long
    to land (a slow disk, a lock another transaction held: past ``RESUME_LANDED_LATE``), ``at``
    moved on by as long, when the pause ended: ``resumed_at(routine)`` returns the latest one
    (``None`` when there is none), so that a boot after a resume
    catches up nothing from before it; a resume of a routine that is not paused changes
    nothing. ``paused()`` returns the names of the paused routines. A scheduler reads it
    before every claim, so a paused routine claims nothing. All raise StateFault when the
    store cannot be read or written. Optional: a pause given ``at`` keeps it too (a routine
    paused already keeps its first), and ``paused_since(routine)`` returns it (``None``
    when the routine is not paused, or its pause's instant is unknown), so that a boot
    records the slots missed before the pause as missed, not as paused; without it, every
    slot missed by a routine paused now is taken for paused. Likewise optional: a resume
    keeps that instant of the pause it ends, and ``resumed_pause_since(routine)`` returns it
    for the latest resume (``None`` when unknown), for a routine paused and resumed while no
    scheduler ran. Likewise optional: ``paused_with_resumes(since)`` returns, in one read,
    what ``paused()`` does and the routines resumed at ``since`` or later, each with its
    latest resume's instant and when the pause it ended began (``None`` when unknown), a
    resume made while the read is under way in it wherever its pause is not; so that a
    replica that comes to a slot late (up to a minute) never runs one the others left
    paused, with no call more; without it, that holds for a replica a minute late or more.

Replicas (optional: a store without these gives holds that exclude within one process)
    ``join(info)`` makes the calling scheduler a member: it takes the hold of its replica id
    (a :class:`~trio_routines.errors.StateFault` when a live member has that id) and returns
    a :class:`~trio_routines.presence.Presence`, through which the scheduler takes and lets
    go of the holds of claims and sessions. A hold dies with the process that holds it --
    the kernel or the database server releases it, no clock decides -- and is never
    granted to two holders at once. ``claims_alive(claims)`` says, for each ``(routine,
    slot)``, whether its open claim's holder is alive now (its claim's hold is held; for a
    store whose ``claims_live_with_replica`` is true, the replica a written claim names is
    alive: the scheduler then lets the store go of a claim's hold once the claim is made,
    keeping its key in its own process only; a store whose ``claims_appear_whole`` is true as
    well -- no reader ever sees one of its claims half made -- is never asked for a claim's
    hold; and a store whose ``claims_take_holds`` is true takes no claim hold at all, and the
    session's hold in the claim's own step);
    ``sessions_held(sessions)`` (optional even here: without it, what runs is known from
    this replica's turns and the newest claims) says, for each session, whether a turn of it
    holds its session's hold now, on any member;
    ``replicas()`` lists every member that joined, each marked alive or not by its own hold;
    ``open_claims(routines, budget)`` finds the claims still without an outcome, a bounded
    piece per call, so that every one whose holder is gone is eventually recorded
    ``interrupted``. See :mod:`trio_routines.replicas`.

Gaps (optional: a store without these records no gaps; every other part works)
    ``record_gap(routine, gap, extends=None)`` adds a :class:`~trio_routines.records.Gap` --
    slots passed over, with a reason (:mod:`trio_routines.gaps`) -- atomically with respect
    to every other caller, by :func:`trio_routines.gaps.add_gap`'s rule: a gap ending at or
    before the newest one's last slot is already accounted for (False, nothing written); with
    ``extends``, a gap following the newest one of the same reason that ends there extends it;
    beyond the store's retention (256) the oldest gaps are dropped. Durable before it returns
    True. ``gaps(routine)`` returns the retained gaps, oldest first; a stored gap that cannot
    be read is a warning and is left out. Both raise StateFault when the store cannot be read
    or written. Gaps never decide a claim: ``claim`` reads claims only. A ``store`` gap (the
    slots whose claim the store did not answer) is recorded late, so it may be older than
    the newest gap: it takes its place in slot order unless a retained gap overlaps it, and
    it is recorded only when no claim exists of any slot from its first to its last, checked
    in the same step (a claim whose answer was lost may have been made: it is not also a gap).

First armed (optional: a store without it records no gaps for a routine that never fired)
    ``first_armed(routines, at)`` returns, for each routine named, the instant it was first
    armed: the ``at`` of the first call that named it, kept durably before this returns, and
    never moved by a later call (two concurrent first calls keep one of their instants). One
    call names every routine a boot arms without a claim, so that a boot costs one read and,
    for routines armed for the first time, one write. Raises StateFault when the store
    cannot be read or written.

Usage ledger (optional: a store without it keeps no budgets; every other part works)
    ``record_usage(kind, name, at, usage)`` adds a turn's :class:`~trio_routines.agent.Usage`,
    spent at ``at``, to the ledger of routine ``name`` (``kind="routine"``) or session
    ``name`` (``kind="session"``), atomically with respect to every other caller (two records
    of one key never lose each other's), durable before it returns; what is older than
    :data:`~trio_routines.ledger.LEDGER_SPAN` before ``at`` may be dropped.
    ``usage_since(kind, name, since)`` sums, as a :class:`~trio_routines.ledger.Spent`, what
    was recorded from ``since`` on, to the minute (:mod:`trio_routines.ledger`). Both raise
    StateFault when the store cannot be read or written.
Pending count (optional: a store without it is counted by a full list)
    ``count_wakeups()`` returns how many wake-ups are pending, for the runtime's gauge, without
    reading them (a list of 100,000 reads every prompt); an entry ``list_wakeups`` would skip
    as malformed may be counted. Raises StateFault when the store cannot be read.
Wake-up turns (optional: a store without these counts only pending wake-ups for the rate limit)
    ``note_wake_turn(session, at)`` records a wake-up turn of ``session`` (run now, due at
    ``at``), durably before it returns, for every replica sharing the store; turns older
    than :data:`~trio_routines.wakelimits.RATE_WINDOW` before the newest may be forgotten,
    and a store may keep only the newest :data:`~trio_routines.wakelimits.MAX_TURNS_KEPT`
    of a session.
    ``wake_turns(session, since)`` returns the session's recorded turns after ``since``,
    oldest first. Both raise StateFault when the store cannot be read or written
    (:class:`~trio_routines.wakelimits.WakeTurns`).

Routine names are checked (:func:`trio_routines.names.check_name`) by every call taking one.
Text that some store cannot hold (NUL, a lone surrogate) gets the same answer from every
store: a wake-up request carrying it is an InvalidWakeup, an id or session carrying it is not
found (:func:`trio_routines.wakeups.storable`).

Cancellation: the scheduler bounds every call on its side and ends one that runs too long by
cancelling it (a store running blocking work in a thread must let it be abandoned). The bound
is kept by the scheduler, not given to Trio as a deadline, so
``trio.current_effective_deadline()`` inside a store does not show it: a store with timeouts
of its own sets them itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from .ledger import Spent
from .presence import Presence
from .records import ClaimResult, Fire, Gap, Outcome, Wakeup
from .replicas import ReplicaInfo
from .usage import Usage
from .wakeups import WakeupRequest


@runtime_checkable
class Store(Protocol):
    """The state store contract (``trio_routines.store`` states it exactly): claims and wake-ups.

    Ours: :class:`~trio_routines.DirectoryStore`, ``PostgresStore``, and
    :class:`~trio_routines.testing.MemoryStore`. Every one is an async context manager.
    """

    async def claim(
        self, routine: str, slot: datetime, fired_at: datetime, *, replica: str | None = None
    ) -> ClaimResult:
        """Decide ``slot`` for ``routine``: taken, duplicate or stale (see the store contract);
        a taken claim keeps ``replica``, the id of the scheduler that claimed it."""
        ...

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
        """Record how a claimed slot ended, why when it did not complete, what the turn
        said when its routine keeps output, and what it spent. Never raises.

        Returns False when a fault kept the outcome from being written (logged as a warning;
        the claim stays as it was, so a later settle may still succeed), True otherwise:
        written, or nothing to write (no such claim; with ``if_unsettled``, one already
        settled).

        A settle replaces the outcome, duration, reason, output and usage together: one
        without ``error`` leaves no reason behind, one without ``output`` no output, one
        without ``usage`` no usage. A store written before ``output`` or ``usage`` may leave
        the keyword out: the scheduler then passes none.

        With ``if_unsettled``, only a claim without an outcome is written, atomically with
        respect to other settles: the boot's "interrupted" never overwrites a real outcome
        that another process settled a moment before.
        """
        ...

    async def latest_fire(self, routine: str) -> Fire | None:
        """The newest claim of ``routine``, or None. Raises StateFault if it cannot be read."""
        ...

    async def history(self, routine: str) -> list[Fire]:
        """Every retained claim of ``routine``, oldest first."""
        ...

    async def add_wakeup(self, request: WakeupRequest, now: datetime) -> Wakeup:
        """Store a new wake-up, or raise InvalidWakeup with the guardrail's text: as
        :func:`~trio_routines.wakeups.plan_add` decides it, given the session's pending
        wake-ups and, under the same lock as the write, how many the whole store holds and
        their text's bytes (``stored=``: the store's room,
        :func:`~trio_routines.wakelimits.text_bytes`)."""
        ...

    async def take_due_wakeup(self, now: datetime) -> Wakeup | None:
        """Take the first due wake-up in stored order (see the store contract)."""
        ...

    async def defer_wakeup(self, wakeup: Wakeup, fire_at: datetime) -> bool:
        """Re-queue a busy one-shot at ``fire_at``; False (nothing written) past the ceiling,
        or when its session is at the cap of pending wake-ups."""
        ...

    async def remove_wakeup(self, wakeup_id: str, session: str | None = None) -> bool:
        """Cancel a wake-up; True when something was removed."""
        ...

    async def list_wakeups(self) -> list[Wakeup]:
        """Pending wake-ups in stored order."""
        ...

    async def ready(self) -> None:
        """A cheap check that the store answers (``GET /readyz``): a stat of the state
        directory, ``SELECT 1``. Raises StateFault when it does not; the caller bounds it."""
        ...

    async def set_paused(self, routine: str, paused: bool, at: datetime | None = None) -> None:
        """Pause or resume ``routine`` for every replica (idempotent); a resume keeps ``at``,
        and so does a pause, where the store keeps it (``paused_since``)."""
        ...

    async def resumed_at(self, routine: str) -> datetime | None:
        """When ``routine`` was last resumed (with an instant), or None."""
        ...

    async def paused(self) -> frozenset[str]:
        """The names of the paused routines."""
        ...

    async def aclose(self) -> None:
        """Release connections and threads: the store is not to be used afterwards (a state
        directory's calls would still work, starting what they need again; PostgreSQL's fail)."""
        ...

    async def __aenter__(self) -> Self:
        """``async with store:`` (or ``async with open_store(...) as store:``) is the store."""
        ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Leaving the block closes the store (:meth:`aclose`), whatever ended it."""
        ...


@runtime_checkable
class Replicated(Protocol):
    """The optional part of the contract for stores shared by replicas, as
    :mod:`trio_routines.store` states it."""

    async def join(self, info: ReplicaInfo) -> Presence:
        """Become a member as ``info.id``; StateFault when a live member has that id."""
        ...

    async def claims_alive(self, claims: Sequence[tuple[str, datetime]]) -> list[bool]:
        """For each ``(routine, slot)``, whether its open claim's holder is alive now."""
        ...

    async def replicas(self) -> list[ReplicaInfo]:
        """Every member that joined (and was not forgotten), alive or not."""
        ...

    async def open_claims(self, routines: Sequence[str], budget: int) -> list[tuple[str, Fire]]:
        """Claims of ``routines`` without an outcome that name their replica, found with at
        most ``budget`` units of work (a claim read, a directory listed) or through an index.
        Each call goes on where the last stopped; a claim that stays open is returned again
        after a while, so repeated calls return every such claim. StateFault when the store
        cannot be read."""
        ...


@runtime_checkable
class GapRecords(Protocol):
    """The optional part of the contract that keeps a routine's gaps, as
    :mod:`trio_routines.store` states it."""

    async def record_gap(self, routine: str, gap: Gap, *, extends: datetime | None = None) -> bool:
        """Add ``gap`` to ``routine``'s gaps; False when it was already accounted for."""
        ...

    async def gaps(self, routine: str) -> list[Gap]:
        """The retained gaps of ``routine``, oldest first."""
        ...


@runtime_checkable
class ArmedRecords(Protocol):
    """The optional part of the contract that keeps when each routine was first armed."""

    async def first_armed(self, routines: Sequence[str], at: datetime) -> dict[str, datetime]:
        """When each of ``routines`` was first armed; ``at`` for those named the first time."""
        ...


class Lifetime:
    """What makes a store an async context manager: every store of ours inherits it, and a
    store of yours may too. Closing twice is harmless for ours."""

    async def aclose(self) -> None:
        raise NotImplementedError  # each store releases its own resources

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


@runtime_checkable
class UsageRecords(Protocol):
    """The optional part of the contract that keeps the usage ledgers, as
    :mod:`trio_routines.store` states it."""

    async def record_usage(self, kind: str, name: str, at: datetime, usage: Usage) -> None:
        """Add ``usage``, spent at ``at``, to the ledger of a routine or a session."""
        ...

    async def usage_since(self, kind: str, name: str, since: datetime) -> Spent:
        """What the turns of a routine or a session spent from ``since`` on."""
        ...
