"""Group commit: many writers, one flush that makes all of them durable.

Theory of operation. A writer (a claim, a settle) writes its file without an fsync and then
asks :meth:`GroupCommit.durable` for a flush that *starts after* its write (a batch of
writes: :meth:`GroupCommit.cover`, then :meth:`GroupCommit.wait`). If no flush is running,
its own starts at once: a lone fire waits for exactly one flush, as before. If one is
running, the writer joins the next batch, which starts the moment the running flush returns;
every writer that arrived meanwhile rides on it. Under a burst the flushes run back to back
and each one covers everything written while the previous one ran. A leader may first wait
for a ``lull`` (the state directory's claims: until a herd's claims are all written); no
other flush starts meanwhile, and everything covered by then rides on its flush.

The flush is ``syncfs(2)`` on a directory of the state's file system: one journal commit makes
every file and directory entry created there durable, whatever their number. Its error
reporting covers writeback errors since the descriptor was opened (Linux 5.8), so each batch
syncs through the earliest opened of its writers' descriptors: each writer opens its own
before its writes and takes an :func:`.durable.opened` ticket right after, so the one with
the lowest ticket was opened before every write of the batch began, and its flush reports an
error in any of them. (The first caller's descriptor may have been opened after another's write, and
an error in that write's writeback in between would go unreported.) Without ``syncfs`` (not
Linux, or an old C library) :data:`.durable.SYNCFS` is None and the store keeps per-file
fsyncs. What needs no event loop (the call itself, the tickets, the descriptors a flush goes
through) is durable.py's, which the writer process imports alone.

A flush that fails fails its whole batch: every writer of the batch gets the ``OSError`` and
must treat its write as not durable (a claim is removed again and reported as a state fault).
The flush runs in its own thread. A writer cancelled while it waits (its deadline passed, a
stop's grace ran out) leaves at once, and a flush whose leader is cancelled is abandoned:
the thread goes on alone (a ``syncfs`` cannot be called back; a stalled disk may hold it for
minutes) and closes its descriptors when it returns, and every writer of its batch gets
:class:`Abandoned` -- its write may or may not become durable, and it cannot be undone now
(the disk does not answer): a claim stays, unrun, for the reconcile of open claims.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from .durable import Descriptors, hand_in


class Abandoned(OSError):
    """A flush given up before it returned (its leader was cancelled): whether the writes it
    covered became durable is unknown."""


class Batch:
    """One flush to come: the descriptors it goes through, and whether it is done."""

    def __init__(self) -> None:
        self.fds: Descriptors = {}
        self.done = False
        self.error: OSError | None = None
        # Its riders, parked until it is done, or until it may lead its flush (the running
        # one ended): they wake then, not at every flush of a long herd.
        self.riders: list[trio.lowlevel.Task] = []

    def wake(self) -> None:
        riders, self.riders = self.riders, []
        for task in riders:
            trio.lowlevel.reschedule(task)


class GroupCommit:
    """Batches durability requests into one ``flush`` per file system at a time."""

    def __init__(self, flush: Callable[[int], None]) -> None:
        self._flush = flush
        self._next: Batch | None = None
        self._flushing = False
        self._limiter = trio.CapacityLimiter(1)
        self.flushes = 0  # how many flushes ran (tests and benchmarks look)
        self.flushing_since: float | None = None  # Trio time the running flush began

    async def durable(self, device: int, fd: int, ticket: int) -> None:
        """Return once a flush that started after this call covered ``device``.

        Takes ownership of ``fd`` (a descriptor on that file system, opened before the write
        it must cover, ``ticket`` from :func:`.durable.opened` right after). Raises the flush's
        ``OSError`` if it failed.
        """
        await self.wait(self.cover({device: (ticket, fd)}))

    def cover(self, fds: Descriptors) -> Batch:
        """The flush to come that will cover writes done before this call through ``fds``
        (taken over; each opened before the writes on its file system): :meth:`wait` for it.
        """
        batch = self._next
        if batch is None:
            batch = self._next = Batch()
        for device, (ticket, fd) in fds.items():
            hand_in(batch.fds, device, fd, ticket)
        return batch

    async def wait(self, batch: Batch, lull: Callable[[], Awaitable[None]] | None = None) -> None:
        """Return once ``batch`` (from :meth:`cover`) was flushed; raise its ``OSError``.

        ``lull``: what a flush this call leads waits for before it starts (the claims of a herd
        all written, see directory/store.py); meanwhile no other flush starts. Bounded, as the
        flush.
        """
        while not batch.done:
            if not self._flushing:
                await self._lead(lull)  # cancelled: the flush is abandoned (the module doc)
            else:
                task = trio.lowlevel.current_task()
                batch.riders.append(task)

                def leave(_: Any, task: trio.lowlevel.Task = task) -> trio.lowlevel.Abort:
                    with contextlib.suppress(ValueError):
                        batch.riders.remove(task)
                    return trio.lowlevel.Abort.SUCCEEDED

                await trio.lowlevel.wait_task_rescheduled(leave)
        if batch.error is not None:
            raise batch.error

    async def _lead(self, lull: Callable[[], Awaitable[None]] | None) -> None:
        self._flushing = True
        if lull is not None:
            try:
                await lull()
            except BaseException:
                self._flushing = False  # the batch stays next, for the next leader
                if self._next is not None:
                    self._next.wake()
                raise
        batch, self._next = self._next, None
        assert batch is not None
        batch.error = OSError(errno.EIO, "the flush did not complete")
        self.flushing_since = trio.current_time()
        fds = [fd for _, fd in batch.fds.values()]
        owner = threading.Lock()  # whoever takes it closes the descriptors: the thread, or us
        try:
            batch.error = await trio.to_thread.run_sync(
                self._flush_all, fds, owner, limiter=self._limiter, abandon_on_cancel=True
            )
        except trio.Cancelled:  # its leader gave up: so does everyone of the batch
            batch.error = Abandoned(errno.EIO, "the flush was given up before it returned")
            raise
        finally:
            self._flushing = False
            self.flushing_since = None
            self.flushes += 1
            if owner.acquire(blocking=False):  # the thread never started
                for fd in fds:
                    os.close(fd)
            batch.done = True
            batch.wake()
            if self._next is not None:
                self._next.wake()  # its riders: one of them leads its flush

    def _flush_all(self, fds: list[int], owner: threading.Lock) -> OSError | None:
        if not owner.acquire(blocking=False):
            return Abandoned(errno.EIO, "the flush was given up before it started")
        try:
            for fd in fds:
                self._flush(fd)
        except OSError as exc:
            return exc
        finally:
            for fd in fds:
                os.close(fd)
        return None
