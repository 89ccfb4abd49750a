"""The state directory's claim and settle writes: by worker threads, or by the writer process.

A claim is written without an fsync, then waits for a group commit (groupcommit.py): one
``syncfs`` covers every claim and settle written while the previous one ran. A claim whose
flush fails is removed again and reported as a state fault: a retry, never a burned slot, and
never a turn. The writes are batched (batch.py): the claims (and, apart, the settles) that
arrive together are written by one worker-thread call, file after file, instead of a thread
hand-off each; a herd of 10,000 pays a few dozen hand-offs, not 20,000. A store that serves
many routines hands its batches to a child process instead (writer/), which has an
interpreter lock of its own and flushes each batch itself before it answers (a flush that
fails is handled there the same way); threads write whenever the child is not up.

:class:`Writes` owns all of it -- the group commit, the two batchers, the turns of the one
writer thread, the writer process -- and is handed the rest: the claim files, the store's
capacity limiter, and the store's record of thread writes under way (its ``ready``'s).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeAlias, TypeVar

import trio

from ...errors import StateFault
from ...records import ClaimResult, Outcome
from ...usage import Usage
from ..abandon import run_abandoning
from ..batch import Answer, Batcher, Entry, Turns
from ..durable import Descriptors, close_held
from ..groupcommit import Abandoned, Batch, GroupCommit
from ..safefile import describe
from .claimbatch import ClaimItem, Contended, SettleItem, SettleWrite, Written
from .claimfiles import ClaimFiles
from .settlefiles import SettleFiles, settle_warning
from .writer.process import Call, WriterProcess

log = logging.getLogger("trio_routines")
T = TypeVar("T")
I = TypeVar("I")  # noqa: E741 -- a claim or settle item
Covered: TypeAlias = tuple[T, Batch | None]  # a write, and the flush that will cover it
BatchWrites: TypeAlias = tuple[list[Answer[T]], Descriptors]  # a batch's answers, what to flush

#: The most claims (or settles) one worker-thread call writes. A herd's flush waits for its
#: writes, but for at most 16 such calls (``batch.LULL_BATCHES``) of a steady stream.
WRITE_BATCH = 256
#: Routines read (a boot's), or claims in one batch, that start the writer process.
PROCESS_AT = 64
#: Writer processes started before threads write for good (each start after one ended).
MAX_STARTS = 4
#: The longest a taken claim waits for its pruning (``keep=1``), whatever its caller.
PRUNE_WAIT = 1.0


class Writes:
    """The claims and settles of one :class:`~.store.DirectoryStore`."""

    def __init__(
        self,
        root: Path,
        files: ClaimFiles,
        *,
        keep: int,
        lock_timeout: float,
        syncfs: Callable[[int], None] | None,
        writer_process: bool | Sequence[str],
        limiter: trio.CapacityLimiter,
        begun: dict[object, float],
    ) -> None:
        """``begun``: the store's thread calls under way, by start time (its ``ready``)."""
        self._root = root
        self._files = files
        self._settles = SettleFiles(files)
        self._limiter = limiter
        self._begun = begun
        self.commit = GroupCommit(syncfs) if syncfs is not None else None
        # A write in a worker thread cannot be called back, and a stalled disk may hold it
        # for minutes: a caller cancelled meanwhile (a deadline, a stop) leaves, and a
        # leader cancelled abandons the thread; what it made for nobody (a claim) stays,
        # unrun, for the reconcile of open claims (docs/design.md).
        self.claim_writes: Batcher[ClaimItem, Covered[Written[ClaimResult]]] = Batcher(
            self._write_claims,
            key=lambda item: item[0],
            max_batch=WRITE_BATCH,
            abandon=self._abandoned,
        )
        self.settle_writes: Batcher[SettleItem, Covered[Written[bool]]] = Batcher(
            self._write_settles,
            key=lambda item: (item[0], item[1]),
            max_batch=WRITE_BATCH,
            abandon=self._abandoned,
        )
        self._writer = Turns(urgent_next=lambda: self.claim_writes.queued)
        #: Each kind of write by a thread (see :meth:`_submit`).
        self._threaded: dict[str, Callable[[Any], Awaitable[Call]]] = {
            "claims": functools.partial(self._by_thread, self.claim_writes),
            "settles": functools.partial(self._by_thread, self.settle_writes),
        }
        self.process: WriterProcess | None = None
        if writer_process and self.commit is not None:
            argv = None if writer_process is True else writer_process
            self.process = WriterProcess(root, keep, lock_timeout, max_batch=WRITE_BATCH, argv=argv)
        self._reads = 0
        #: The routines read since, each once, for the writer process's spares (read_done).
        self._read: dict[str, None] = {}

    @property
    def flushes(self) -> int:
        """How many group-commit flushes ran (0 without ``syncfs``)."""
        return self.commit.flushes if self.commit is not None else 0

    def under_way(self) -> list[float | None]:
        """When each write, flush or batch in the child that has not answered yet began."""
        process, commit = self.process, self.commit
        return [
            *self._begun.values(),
            process.waiting_since() if process is not None else None,
            commit.flushing_since if commit is not None else None,
        ]

    def reading(self, routine: str) -> None:
        """``routine``'s newest claim is being read: the :data:`PROCESS_AT`-th read starts
        the writer process (a store serving many routines: herds to come)."""
        self._reads += 1
        self._read[routine] = None
        if self._reads == PROCESS_AT:
            self.start_writer()

    def read_done(self) -> None:
        """Ask the writer process for a spare claim file (spares.py) for each routine read
        since, sent together (a boot's reads are answered in batches). Kept until a writer
        process is up; dropped when threads write, which make no spares."""
        process = self.process
        if not self._read or (process is not None and not process.alive):
            if process is not None:
                process.push()  # what an earlier call's requests left in the socket's queue
            return
        if process is not None:
            process.hint("spares", list(self._read))
        self._read = {}

    def start_writer(self) -> None:
        process = self.process
        if process is None or process.alive:
            return
        if process.started >= MAX_STARTS:
            log.warning("the state directory's writer process keeps ending: threads write now")
            self.process = None
            return
        try:
            process.start()
        except (OSError, ValueError) as exc:  # ValueError: an environment it cannot be given
            why = describe(exc) if isinstance(exc, OSError) else str(exc)
            log.warning("could not start the writer process (threads write): %s", why)
            self.process = None

    async def aclose(self) -> None:
        process = self.process
        if process is not None:
            process.stop()  # the child exits once its socket is closed
            # At most 10 s (reap's two rounds); abandoned on cancel, as ready(): a child stuck
            # in a hung disk is killed, and left if even that does not end it.
            await trio.to_thread.run_sync(process.reap, 5.0, abandon_on_cancel=True)

    async def _write(
        self, fn: Callable[[Sequence[Any]], BatchWrites[T]], items: Sequence[Any], *, urgent: bool
    ) -> BatchWrites[T]:
        """One batch written by a worker thread (the writer process is not up). One batch of
        claims or settles at a time, claims first: two threads making files side by side
        contend for the interpreter lock at every system call and each runs ~4x slower
        (10,000 creates by two threads 1.25 s, by one 0.62 s)."""
        if len(items) >= PROCESS_AT:
            self.start_writer()
        async with self._writer.hold(urgent=urgent):
            # Abandoned on cancel: the batch's leader gave up (see __init__); the thread then
            # closes the descriptors nobody will flush, and counts as under way until it ends.
            return await run_abandoning(
                fn,
                items,
                limiter=self._limiter,
                late=lambda writes: close_held(writes[1]),
                begun=self._begun,
            )

    def _abandoned(self) -> StateFault:
        return StateFault(
            f"the state directory {self._root} did not answer in time (a stalled disk?): "
            "the write was given up, and may or may not have been made"
        )

    def _submit(self, op: str, item: Any) -> Awaitable[Call]:
        """A claim or settle written by the writer process if it is up, else by a thread (also
        when the process went away before its batch was sent: nothing was written then). Not
        a coroutine of its own: at 10,000 claims at once, every frame a parked claim keeps is
        the collector's work (benchmarks/README.md)."""
        process = self.process
        if process is not None and process.ready():
            return process.submit(op, item, self._threaded[op])
        return self._threaded[op](item)

    async def _by_thread(self, batcher: Batcher[I, Covered[Written[T]]], item: I) -> Call:
        (value, later), flush = await batcher.submit(item)
        call = Call(item)
        call.value, call.later, call.flush = value, later, flush
        return call

    def _covered(self, writes: BatchWrites[T]) -> list[Answer[Covered[T]]]:
        """A batch's answers, each with the flush to come that covers the batch's writes."""
        answers, fds = writes
        batch = self.commit.cover(fds) if self.commit is not None and fds else None
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
        call = await self._submit("claims", (routine, slot, fired_at, replica))
        result: ClaimResult = call.value
        if call.later is None:  # nothing awaits a flush (the writer process's is done)
            return result
        assert self.commit is not None
        assert call.flush is not None
        try:
            # Written by a thread, the flush waits until the herd's claims are written: were
            # the first turns to start meanwhile, the event loop and the writer thread would
            # contend for the interpreter lock at every system call of the writer's (see
            # docs/design.md).
            await self.commit.wait(call.flush, self.claim_writes.lull)
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
        item: SettleItem = (routine, slot, outcome, ms, if_unsettled, error, output, usage)
        try:
            call = await self._submit("settles", item)
            written: bool = call.value
            after, batch = call.later, call.flush
        except Contended:
            # Another settle (another process) holds the claim: wait for it in a thread of its
            # own, up to lock_timeout, never in the writer that the claims need. Abandoned
            # on cancel: the outcome may land later, its descriptor then closed by the thread.
            written, pending = await run_abandoning(
                self._settles.write_outcome,
                *item,
                limiter=self._limiter,
                late=_close_pending,
                begun=self._begun,
            )
            if pending is None:
                return written
            assert self.commit is not None  # a write awaits a flush only with group commit
            after = pending.prune_later
            batch = self.commit.cover({pending.device: (pending.ticket, pending.fd)})
        if after is None:  # nothing awaits a flush
            return written
        assert self.commit is not None
        assert batch is not None
        try:
            await self.commit.wait(batch)
        except OSError as exc:
            settle_warning(routine, slot, outcome, exc)
            return False
        return True

    async def _write_settles(
        self, entries: Sequence[Entry[SettleItem, Covered[Written[bool]]]]
    ) -> list[Answer[Covered[Written[bool]]]]:
        items = [entry.item for entry in entries]
        return self._covered(await self._write(self._settles.write_each, items, urgent=False))


def _close_pending(write: SettleWrite) -> None:
    """A settle's descriptor, which no flush will take over now (its caller gave up)."""
    if write[1] is not None:
        os.close(write[1].fd)
