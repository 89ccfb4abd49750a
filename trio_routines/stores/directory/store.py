"""The state directory store: claims as files, wake-ups as an append-only journal.

Layout (the claims byte-compatible with the original scheduler's 0.22 state, so either can
read the other's; its ``wakeups.json`` is taken over on first use)::

    <root>/schedule/claims/<routine>/<slot name>   one file per claimed slot
    <root>/schedule/claims/<routine>/.next-claim   ours: the next claim's file (spares.py)
    <root>/schedule/wakeups.journal                ours: pending wake-ups (wakeupjournal.py)
    <root>/schedule/wakeups.json                   an earlier version's: taken over, moved aside
    <root>/schedule/wakeups.lock                   serializes wake-up writers
    <root>/schedule/gaps/<routine>                 ours: the slots passed over (gaps.py)
    <root>/schedule/armed.json                     ours: when each routine was first armed
    <root>/schedule/wake-turns.json                ours: recent wake-up turns (waketurns.py)

Theory of operation. A claim is decided by the filesystem: a file written unnamed and then
linked in under the slot's name lets exactly one maker win, across threads and processes, as
``O_CREAT|O_EXCL`` would, and no reader ever sees a claim half made (claimfiles.py). Before a
taken claim is reported, the file and its directory entry are durable, so a power loss cannot
forget that the slot was decided and let it run twice (the original never fsyncs).
Durability is shared: the claim is written without an fsync, then waits for a group commit
(groupcommit.py), one ``syncfs`` covering every claim and settle written while the previous
one ran. A claim whose flush fails is removed again and reported as a state fault: a retry,
never a burned slot, and never a turn.
The writes are batched too (batch.py): the claims (and, apart, the settles) that arrive
together are written by one worker-thread call, file after file, instead of a thread hand-off
each; a herd of 10,000 pays a few dozen hand-offs, not 20,000.
Settling rewrites the same file in place -- never through a rename, which could resurrect a
file pruning just removed.

Nothing below the root is trusted (safefile.py): no link is followed, no open can block, no
read is unbounded. A claim entry that is not a regular file (a link, a FIFO, a device, a
directory) or is too large is never opened or written; its name still holds its slot (the
stale and duplicate gates count names), and reading it warns once and reads it as a claim
without stamp or outcome, as a torn write reads.

This module is the async shell, made of parts that each own their state and are handed what
they need (the root, the claim files, the store's capacity limiter, its thread runner): the
claim and settle writes, by threads or the writer process (writes.py), the blocking calls
(blocking.py), the wake-up calls (wakeups.py over wakeuplog.py), the pause, gap and
first-armed records (records.py) and the replicas' membership (members.py). Claim files are
handled in claimfiles.py; every blocking call runs in a worker thread bounded by the store's
own capacity limiter.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import trio

from ...checks import checked_count, checked_seconds
from ...claims import KEEP_CLAIMS
from ...errors import InvalidOption, StateFault
from ...ledger import Spent
from ...presence import Presence
from ...records import ClaimResult, Fire, Gap, Outcome, Wakeup
from ...replicas import ReplicaInfo
from ...store import Lifetime
from ...usage import Usage
from ...wakeups import WakeupRequest
from ..abandon import run_abandoning
from ..durable import SYNCFS
from ..newest import BatchedReads, in_threads
from .blocking import BlockingClaims
from .claimfiles import ClaimFiles
from .members import DirectoryMembers
from .ready import stalled_for, writable
from .records import Records
from .wakeups import Wakeups
from .writes import Writes

__all__ = ["DirectoryStore"]

T = TypeVar("T")

#: A write (a batch, a flush) under way this long makes the store not ready (``ready``).
STALLED_AFTER = 10.0


class DirectoryStore(Lifetime):
    """Claims and wake-ups in a state directory.

    The claims' layout is that of the TypeScript agent server's routines scheduler (version
    0.22), kept byte-compatible so that either can read the other's:
    ``schedule/claims/<routine>/<slot name>`` holds one file per claimed slot, and
    ``schedule/claims/<routine>/.next-claim`` the file the routine's next claim will take
    (made ahead by the writer process; a name that scheduler passes over). The pending
    wake-ups are in ``schedule/wakeups.journal``; a ``schedule/wakeups.json`` (where that
    scheduler and earlier versions kept them) is taken over on first use and moved aside.
    ``schedule/wakeups.lock``, ``schedule/paused/``, ``schedule/resumed/``,
    ``schedule/gaps/``, ``schedule/gaps.lock``, ``schedule/armed.json``, ``schedule/usage/``
    and ``schedule/usage.lock`` are ours.
    """

    #: A written claim is alive while the replica it names is (members.py).
    claims_live_with_replica = True
    #: No reader sees a claim half made (claimfiles.py): it names its replica from the first,
    #: so a fire takes no hold of its claim here, only in its own process.
    claims_appear_whole = True

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        keep: int = KEEP_CLAIMS,
        limiter: trio.CapacityLimiter | None = None,
        lock_timeout: float = 10.0,
        syncfs: Callable[[int], None] | None = SYNCFS,
        writer_process: bool | Sequence[str] = True,
    ) -> None:
        """``syncfs``: the flush behind group commit; None keeps per-file fsyncs instead.

        ``writer_process``: whether a store that serves many routines writes its claims and
        settles in a child process (writer/), once it has read :data:`~.writes.PROCESS_AT`
        routines or met a batch that large; a command line to start it instead of the default
        one. Only with ``syncfs``."""
        keep = checked_count("keep", keep, least=1)
        lock_timeout = checked_seconds("lock_timeout", lock_timeout, zero=False)
        if limiter is not None and not isinstance(limiter, trio.CapacityLimiter):
            raise InvalidOption(f"limiter must be a trio.CapacityLimiter: {limiter!r:.80}")
        if not os.fspath(root).strip():  # Path("") is the working directory: never meant
            raise ValueError("the state directory is empty: name one (. for this directory)")
        self.root = Path(root)
        self.keep = keep
        self.lock_timeout = lock_timeout
        self._limiter = limiter or trio.CapacityLimiter(16)
        self._begun: dict[object, float] = {}  # thread calls under way (ready())
        self._files = ClaimFiles(self.root, keep, lock_timeout, syncfs)
        self._writes = Writes(
            self.root,
            self._files,
            keep=keep,
            lock_timeout=lock_timeout,
            syncfs=syncfs,
            writer_process=writer_process,
            limiter=self._limiter,
            begun=self._begun,
        )
        self._blocking = BlockingClaims(self.root, self._files, syncfs)
        self._newest = BatchedReads(in_threads(self.latest_fire_sync, self._run))
        self._wakeups = Wakeups(self.root, lock_timeout, limiter=self._limiter, begun=self._begun)
        self._records = Records(self.root, self._run, limiter=self._limiter, bound=lock_timeout)
        self._members = DirectoryMembers(self.root, self._files, self._limiter, self._begun)

    def __repr__(self) -> str:
        return f"DirectoryStore({str(self.root)!r})"

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        # Abandoned on cancel (abandon.py): reads, and writes that may land late (a pause, a
        # gap), each one's own thread; the caller's deadline, or a stop's bound, holds.
        return await run_abandoning(fn, *args, limiter=self._limiter)

    @property
    def flushes(self) -> int:
        """How many group-commit flushes ran (0 without ``syncfs``)."""
        return self._writes.flushes

    # -- claims (writes.py, blocking.py) --------------------------------------------------

    def claim_dir(self, routine: str) -> Path:
        """The directory holding ``routine``'s claims (its name checked first)."""
        return self._files.claim_dir(routine)

    async def claim(
        self, routine: str, slot: datetime, fired_at: datetime, *, replica: str | None = None
    ) -> ClaimResult:
        return await self._writes.claim(routine, slot, fired_at, replica=replica)

    def claim_sync(
        self, routine: str, slot: datetime, fired_at: datetime, *, replica: str | None = None
    ) -> ClaimResult:
        """:meth:`claim`, blocking: for a thread, or a process without Trio."""
        return self._blocking.claim(routine, slot, fired_at, replica=replica)

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
        return await self._writes.settle(
            routine,
            slot,
            outcome,
            ms,
            if_unsettled=if_unsettled,
            error=error,
            output=output,
            usage=usage,
        )

    def settle_sync(
        self,
        routine: str,
        slot: datetime,
        outcome: Outcome,
        ms: int | None,
        if_unsettled: bool = False,
        error: str | None = None,
        output: str | None = None,
        usage: Usage | None = None,
    ) -> bool:
        """The store's ``settle``, in the calling thread: False when a fault was logged."""
        return self._blocking.settle(routine, slot, outcome, ms, if_unsettled, error, output, usage)

    async def latest_fire(self, routine: str) -> Fire | None:
        self._writes.reading(routine)  # a store serving many routines starts its writer
        fire = await self._newest.read(routine)  # batched with concurrent calls (a boot's)
        self._writes.read_done()
        return fire

    def latest_fire_sync(self, routine: str) -> Fire | None:
        """:meth:`latest_fire`, blocking: for a thread, or a process without Trio."""
        return self._blocking.latest_fire(routine)

    async def history(self, routine: str) -> list[Fire]:
        return await self._run(self.history_sync, routine)

    def history_sync(self, routine: str) -> list[Fire]:
        """:meth:`history`, blocking: for a thread, or a process without Trio."""
        return self._blocking.history(routine)

    async def ready(self) -> None:
        stalled = stalled_for(trio.current_time(), self._writes.under_way())
        if stalled is not None and stalled > STALLED_AFTER:
            raise StateFault(
                f"the state directory's writes have not answered for {stalled:.0f}s "
                f"(a stalled disk, or a stopped writer process): {self.root}"
            )
        # Abandoned on cancel: a hung file system must not hold the caller past its deadline.
        await run_abandoning(self._ready, limiter=self._limiter)

    def _ready(self) -> None:
        writable(self.root)

    # -- wake-ups (wakeups.py) ------------------------------------------------------------

    async def add_wakeup(self, request: WakeupRequest, now: datetime) -> Wakeup:
        return await self._wakeups.add_wakeup(request, now)

    async def take_due_wakeup(self, now: datetime) -> Wakeup | None:
        return await self._wakeups.take_due_wakeup(now)

    async def defer_wakeup(self, wakeup: Wakeup, fire_at: datetime) -> bool:
        return await self._wakeups.defer_wakeup(wakeup, fire_at)

    async def remove_wakeup(self, wakeup_id: str, session: str | None = None) -> bool:
        return await self._wakeups.remove_wakeup(wakeup_id, session)

    async def list_wakeups(self) -> list[Wakeup]:
        return await self._wakeups.list_wakeups()

    # -- pauses, gaps, first armed (records.py) -------------------------------------------

    async def set_paused(self, routine: str, paused: bool, at: datetime | None = None) -> None:
        await self._records.set_paused(routine, paused, at)

    async def resumed_at(self, routine: str) -> datetime | None:
        return await self._records.resumed_at(routine)

    async def resumed_pause_since(self, routine: str) -> datetime | None:
        """When the pause ``routine``'s latest resume ended began; None when not known."""
        return await self._records.resumed_pause_since(routine)

    async def paused_since(self, routine: str) -> datetime | None:
        """When ``routine``'s pause began (its pause file's instant); None when it is not
        paused, or was paused by a version that kept no instant."""
        return await self._records.paused_since(routine)

    async def paused(self) -> frozenset[str]:
        return await self._records.paused()

    async def paused_with_resumes(
        self, since: datetime
    ) -> tuple[frozenset[str], dict[str, tuple[datetime, datetime | None]]]:
        """The paused routines, and those resumed at ``since`` or later, each with its latest
        resume's instant and when the pause it ended began (None: not known), in one call
        (only resumes written in the last minutes are read)."""
        return await self._records.paused_with_resumes(since)

    async def record_gap(self, routine: str, gap: Gap, *, extends: datetime | None = None) -> bool:
        """Add ``gap`` to ``routine``\'s gaps (the store contract); False when already there."""
        return await self._records.record_gap(routine, gap, extends=extends)

    async def gaps(self, routine: str) -> list[Gap]:
        """The retained gaps of ``routine``, oldest first."""
        return await self._records.gaps(routine)

    async def first_armed(self, routines: Sequence[str], at: datetime) -> dict[str, datetime]:
        """When each of ``routines`` was first armed; ``at`` for those named the first time."""
        return await self._records.first_armed(routines, at)

    async def record_usage(self, kind: str, name: str, at: datetime, usage: Usage) -> None:
        """Add ``usage``, spent at ``at``, to the ledger of a routine or a session."""
        await self._records.record_usage(kind, name, at, usage)

    async def usage_since(self, kind: str, name: str, since: datetime) -> Spent:
        """What the turns of a routine or a session spent from ``since`` on (the ledger)."""
        return await self._records.usage_since(kind, name, since)

    async def note_wake_turn(self, session: str, at: datetime) -> None:
        """Record a wake-up turn of ``session`` at ``at``, for the rate limit."""
        await self._records.note_wake_turn(session, at)

    async def wake_turns(self, session: str, since: datetime) -> list[datetime]:
        """The recorded wake-up turns of ``session`` after ``since``, oldest first."""
        return await self._records.wake_turns(session, since)

    # -- replicas (see replicas.py and members.py) ----------------------------------------

    async def join(self, info: ReplicaInfo) -> Presence:
        """Become a member of the store as ``info.id`` (see :mod:`trio_routines.replicas`)."""
        return await self._members.join(info)

    async def claims_alive(self, claims: Sequence[tuple[str, datetime]]) -> list[bool]:
        """For each ``(routine, slot)``, whether the hold of its claim is held now."""
        return await self._members.claims_alive(claims)

    async def sessions_held(self, sessions: Sequence[str]) -> list[bool]:
        """For each session, whether a process holds its hold now (a turn of it under way)."""
        return await self._members.sessions_held(sessions)

    async def open_claims(self, routines: Sequence[str], budget: int) -> list[tuple[str, Fire]]:
        """Open claims of ``routines`` that name their replica, a bounded walk at a time:
        at most ``budget`` directories listed and claims read per call (openscan.py)."""
        return await self._members.open_claims(routines, budget)

    async def replicas(self) -> list[ReplicaInfo]:
        """Every member that joined (and was not forgotten), each marked alive or not."""
        return await self._members.replicas()

    async def aclose(self) -> None:
        await self._writes.aclose()
        await trio.lowlevel.checkpoint()
