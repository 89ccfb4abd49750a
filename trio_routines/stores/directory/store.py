"""The state directory store: claims as files, wake-ups as one JSON file.

Layout (byte-compatible with the original scheduler's 0.22 state, so either can read the
other's)::

    <root>/schedule/claims/<routine>/<slot name>   one file per claimed slot
    <root>/schedule/wakeups.json                   pending wake-ups (see wakeupfile.py)
    <root>/schedule/wakeups.lock                   ours: serializes wake-up writers
    <root>/schedule/gaps/<routine>                 ours: the slots passed over (gaps.py)
    <root>/schedule/armed.json                     ours: when each routine was first armed

Theory of operation. A claim is decided by the filesystem: ``O_CREAT|O_EXCL`` lets exactly
one creator win, across threads and processes. Before a taken claim is reported, the file and
its directory entry are durable, so a power loss cannot forget that the slot was decided and
let it run twice (the original never fsyncs). Durability is shared: the claim is written
without an fsync, then waits for a group commit (groupcommit.py), one ``syncfs`` covering
every claim and settle written while the previous one ran. A claim whose flush fails is
removed again and reported as a state fault: a retry, never a burned slot, and never a turn.
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

This module is the async shell: claim files are handled in claimfiles.py, ``wakeups.json``
in wakeupfile.py, every blocking call in a worker thread bounded by the store's own capacity
limiter.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeAlias, TypeVar

import trio

from ...claims import KEEP_CLAIMS
from ...errors import StateFault
from ...records import ClaimResult, Fire, Outcome
from ...replicas import ReplicaInfo
from ...store import Lifetime
from ..abandon import run_abandoning
from ..batch import Answer, Batcher, Entry, Turns
from ..groupcommit import SYNCFS, Abandoned, Batch, Descriptors, GroupCommit, close_held
from ..newest import BatchedReads, in_threads
from ..safefile import describe
from .blocking import BlockingClaims
from .claimfiles import (
    ClaimFiles,
    ClaimItem,
    Contended,
    SettleItem,
    SettleWrite,
    Written,
)
from .holds import DirectoryPresence
from .members import DirectoryMembers
from .ready import stalled_for, writable
from .records import PausesAndGaps
from .wakeupfile import WakeupFile
from .wakeups import WakeupsInFile
from .writer.process import Call, Unsent, WriterProcess

__all__ = ["DirectoryStore", "describe"]

log = logging.getLogger("trio_routines")
T = TypeVar("T")
I = TypeVar("I")  # noqa: E741 -- a claim or settle item
Covered: TypeAlias = tuple[T, Batch | None]  # a write, and the flush that will cover it
Writes: TypeAlias = tuple[list[Answer[T]], Descriptors]  # a batch's answers, what to flush

#: The most claims (or settles) one worker-thread call writes. A herd's flush waits for its
#: writes, but for at most 16 such calls (``batch.LULL_BATCHES``) of a steady stream.
WRITE_BATCH = 256
#: Routines read (a boot's), or claims in one batch, that start the writer process.
PROCESS_AT = 64
#: Writer processes started before threads write for good (each start after one ended).
MAX_STARTS = 4
#: The longest a taken claim waits for its pruning (``keep=1``), whatever its caller.
PRUNE_WAIT = 1.0
#: A write (a batch, a flush) under way this long makes the store not ready (``ready``).
STALLED_AFTER = 10.0


class DirectoryStore(WakeupsInFile, PausesAndGaps, Lifetime):
    """Claims and wake-ups in a state directory.

    The layout is that of the TypeScript agent server's routines scheduler (version 0.22), kept
    byte-compatible so that either can read the other's state:
    ``schedule/claims/<routine>/<slot name>`` holds one file per claimed slot and
    ``schedule/wakeups.json`` the pending wake-ups; ``schedule/wakeups.lock``,
    ``schedule/paused/``, ``schedule/resumed/``, ``schedule/gaps/``, ``schedule/gaps.lock``
    and ``schedule/armed.json`` are ours.
    """

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
        settles in a child process (writer/), once it has read :data:`PROCESS_AT` routines
        or met a batch that large; a command line to start it instead of the default one.
        Only with ``syncfs``."""
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.root = Path(root)
        self.keep = keep
        self.lock_timeout = lock_timeout
        self._claims = self.root / "schedule" / "claims"
        self._files = ClaimFiles(self.root, keep, lock_timeout, syncfs)
        self._syncfs = syncfs
        self._commit = GroupCommit(syncfs) if syncfs is not None else None
        self._wakeups = WakeupFile(self.root, lock_timeout)
        self._wakeup_turns = trio.Lock()
        self._wakeup_ended: trio.Event | None = None
        self._blocking = BlockingClaims(self.root, self._files, syncfs)
        self._writes_begun: dict[object, float] = {}  # thread batches under way (ready())
        self._limiter = limiter or trio.CapacityLimiter(16)
        self._members = DirectoryMembers(self.root, self._files, self._limiter)
        self._newest = BatchedReads(in_threads(self.latest_fire_sync, self._run))
        # A write in a worker thread cannot be called back, and a stalled disk may hold it
        # for minutes: a caller cancelled meanwhile (a deadline, a stop) leaves, and a
        # leader cancelled abandons the thread; what it made for nobody (a claim) stays,
        # unrun, for the reconcile of open claims (docs/design.md).
        self._claim_writes: Batcher[ClaimItem, Covered[Written[ClaimResult]]] = Batcher(
            self._write_claims,
            key=lambda item: item[0],
            max_batch=WRITE_BATCH,
            abandon=self._abandoned,
        )
        self._settle_writes: Batcher[SettleItem, Covered[Written[bool]]] = Batcher(
            self._write_settles,
            key=lambda item: (item[0], item[1]),
            max_batch=WRITE_BATCH,
            abandon=self._abandoned,
        )
        self._writer = Turns(urgent_next=lambda: self._claim_writes.queued)
        self._process: WriterProcess | None = None
        if writer_process and self._commit is not None:
            argv = None if writer_process is True else writer_process
            self._process = WriterProcess(
                self.root, keep, lock_timeout, self._commit, max_batch=WRITE_BATCH, argv=argv
            )
        self._reads = 0

    def __repr__(self) -> str:
        return f"DirectoryStore({str(self.root)!r})"

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        # Abandoned on cancel (abandon.py): reads, and writes that may land late (a pause, a
        # gap), each one's own thread; the caller's deadline, or a stop's bound, holds.
        return await run_abandoning(fn, *args, limiter=self._limiter)

    async def _write(
        self, fn: Callable[[Sequence[Any]], Writes[T]], items: Sequence[Any], *, urgent: bool
    ) -> Writes[T]:
        """One batch written by a worker thread (the writer process is not up). One batch of
        claims or settles at a time, claims first: two threads making files side by side
        contend for the interpreter lock at every system call and each runs ~4x slower
        (10,000 creates by two threads 1.25 s, by one 0.62 s)."""
        if len(items) >= PROCESS_AT:
            self._start_writer()
        async with self._writer.hold(urgent=urgent):
            # Abandoned on cancel: the batch's leader gave up (see __init__); the thread then
            # closes the descriptors nobody will flush, and counts as under way until it ends.
            return await run_abandoning(
                fn,
                items,
                limiter=self._limiter,
                late=lambda writes: close_held(writes[1]),
                begun=self._writes_begun,
            )

    def _abandoned(self) -> StateFault:
        return StateFault(
            f"the state directory {self.root} did not answer in time (a stalled disk?): "
            "the write was given up, and may or may not have been made"
        )

    async def _submit(self, op: str, item: I, batcher: Batcher[I, Covered[Written[T]]]) -> Call:
        """A claim or settle written by the writer process if it is up, else by a thread."""
        process = self._process
        if process is not None and process.ready():
            try:
                return await process.submit(op, item)
            except Unsent:
                pass  # it went away before the batch was sent: nothing was written
        (value, later), flush = await batcher.submit(item)
        call = Call(item)
        call.value, call.later, call.flush, call.threaded = value, later, flush, True
        return call

    def _start_writer(self) -> None:
        process = self._process
        if process is None or process.alive:
            return
        if process.started >= MAX_STARTS:
            log.warning("the state directory's writer process keeps ending: threads write now")
            self._process = None
            return
        try:
            process.start()
        except OSError as exc:
            log.warning("could not start the writer process (threads write): %s", describe(exc))
            self._process = None

    @property
    def flushes(self) -> int:
        """How many group-commit flushes ran (0 without ``syncfs``)."""
        return self._commit.flushes if self._commit is not None else 0

    # -- claims ---------------------------------------------------------------------------

    def claim_dir(self, routine: str) -> Path:
        """The directory holding ``routine``'s claims (its name checked first)."""
        return self._files.claim_dir(routine)

    def _covered(self, writes: Writes[T]) -> list[Answer[Covered[T]]]:
        """A batch's answers, each with the flush to come that covers the batch's writes."""
        answers, fds = writes
        batch = self._commit.cover(fds) if self._commit is not None and fds else None
        return [
            Answer(value=(answer.unwrap(), batch))
            if answer.error is None
            else Answer(error=answer.error)
            for answer in answers
        ]

    async def _write_claims(
        self, entries: Sequence[Entry[ClaimItem, Covered[Written[ClaimResult]]]]
    ) -> list[Answer[Covered[Written[ClaimResult]]]]:
        items = [entry.item for entry in entries]
        return self._covered(await self._write(self._files.create_each, items, urgent=True))

    async def claim(
        self, routine: str, slot: datetime, fired_at: datetime, *, replica: str | None = None
    ) -> ClaimResult:
        call = await self._submit("claims", (routine, slot, fired_at, replica), self._claim_writes)
        result: ClaimResult = call.value
        if call.later is None:
            return result
        assert self._commit is not None
        assert call.flush is not None
        try:
            # Written by a thread, the flush waits until the herd's claims are written: were
            # the first turns to start meanwhile, the event loop and the writer thread would
            # contend for the interpreter lock at every system call of the writer's (see
            # docs/design.md). The writer process has its own.
            await self._commit.wait(call.flush, self._claim_writes.lull if call.threaded else None)
        except Abandoned:
            raise self._abandoned() from None  # the disk does not answer: nothing to undo now
        except OSError as exc:
            # Started even if the caller was cancelled while its flush ran: a claim that is
            # not durable must be taken back, or the slot would be burned. Not waited for
            # past a cancellation (a stalled disk): the thread takes it back alone.
            await run_abandoning(
                self._files.unclaim_after, routine, slot, limiter=None, must_start=True
            )
            raise self._files.not_durable(routine, slot, exc) from None
        if call.later:
            # The claim is taken: report it, whatever comes. The pruning (``keep=1`` only) is
            # waited for a short while at most: past that, a stalled disk's, it goes on alone.
            with trio.CancelScope(shield=True), trio.move_on_after(PRUNE_WAIT):
                await run_abandoning(
                    self._files.prune_later, routine, call.later, limiter=None, must_start=True
                )
        return result

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
    ) -> bool:
        item: SettleItem = (routine, slot, outcome, ms, if_unsettled, error)
        try:
            call = await self._submit("settles", item, self._settle_writes)
            written: bool = call.value
            after, batch = call.later, call.flush
        except Contended:
            # Another settle (another process) holds the claim: wait for it in a thread of its
            # own, up to lock_timeout, never in the writer that the claims need. Abandoned
            # on cancel: the outcome may land later, its descriptor then closed by the thread.
            written, pending = await run_abandoning(
                self._files.write_outcome,
                *item,
                limiter=self._limiter,
                late=_close_pending,
                begun=self._writes_begun,
            )
            if pending is None:
                return written
            assert self._commit is not None  # a write awaits a flush only with group commit
            after = pending.prune_later
            batch = self._commit.cover({pending.device: (pending.ticket, pending.fd)})
        if after is None:  # nothing awaits a flush
            return written
        assert self._commit is not None
        assert batch is not None
        try:
            await self._commit.wait(batch)
        except OSError as exc:
            self._files.settle_warning(routine, slot, outcome, exc)
            return False
        return True

    async def _write_settles(
        self, entries: Sequence[Entry[SettleItem, Covered[Written[bool]]]]
    ) -> list[Answer[Covered[Written[bool]]]]:
        items = [entry.item for entry in entries]
        return self._covered(await self._write(self._files.write_each, items, urgent=False))

    def settle_sync(
        self,
        routine: str,
        slot: datetime,
        outcome: Outcome,
        ms: int | None,
        if_unsettled: bool = False,
        error: str | None = None,
    ) -> bool:
        """The store's ``settle``, in the calling thread: False when a fault was logged."""
        return self._blocking.settle(routine, slot, outcome, ms, if_unsettled, error)

    async def latest_fire(self, routine: str) -> Fire | None:
        self._reads += 1
        if self._reads == PROCESS_AT:  # a store serving many routines: herds to come
            self._start_writer()
        return await self._newest.read(routine)  # batched with concurrent calls (a boot's)

    def latest_fire_sync(self, routine: str) -> Fire | None:
        """:meth:`latest_fire`, blocking: for a thread, or a process without Trio."""
        return self._blocking.latest_fire(routine)

    async def history(self, routine: str) -> list[Fire]:
        return await self._run(self.history_sync, routine)

    def history_sync(self, routine: str) -> list[Fire]:
        """:meth:`history`, blocking: for a thread, or a process without Trio."""
        return self._blocking.history(routine)

    async def ready(self) -> None:
        process, commit = self._process, self._commit
        stalled = stalled_for(
            trio.current_time(),
            [
                *self._writes_begun.values(),
                process.waiting_since() if process is not None else None,
                commit.flushing_since if commit is not None else None,
            ],
        )
        if stalled is not None and stalled > STALLED_AFTER:
            raise StateFault(
                f"the state directory's writes have not answered for {stalled:.0f}s "
                f"(a stalled disk, or a stopped writer process): {self.root}"
            )
        # Abandoned on cancel: a hung file system must not hold the caller past its deadline.
        await run_abandoning(self._ready, limiter=self._limiter)

    def _ready(self) -> None:
        writable(self.root)

    # -- replicas (see replicas.py and members.py) ----------------------------------------

    async def join(self, info: ReplicaInfo) -> DirectoryPresence:
        """Become a member of the store as ``info.id`` (see :mod:`trio_routines.replicas`)."""
        return await self._members.join(info)

    async def claims_alive(self, claims: Sequence[tuple[str, datetime]]) -> list[bool]:
        """For each ``(routine, slot)``, whether the hold of its claim is held now."""
        return await self._members.claims_alive(claims)

    async def open_claims(self, routines: Sequence[str], budget: int) -> list[tuple[str, Fire]]:
        """Open claims of ``routines`` that name their replica, a bounded walk at a time:
        at most ``budget`` directories listed and claims read per call (openscan.py)."""
        return await self._members.open_claims(routines, budget)

    async def replicas(self) -> list[ReplicaInfo]:
        """Every member that joined (and was not forgotten), each marked alive or not."""
        return await self._members.replicas()

    async def aclose(self) -> None:
        process = self._process
        if process is not None:
            process.stop()  # the child exits once its socket is closed
            # At most 10 s (reap's two rounds); abandoned on cancel, as ready(): a child stuck
            # in a hung disk is killed, and left if even that does not end it.
            await trio.to_thread.run_sync(process.reap, 5.0, abandon_on_cancel=True)
        await trio.lowlevel.checkpoint()


def _close_pending(write: SettleWrite) -> None:
    """A settle's descriptor, which no flush will take over now (its caller gave up)."""
    if write[1] is not None:
        os.close(write[1].fd)
