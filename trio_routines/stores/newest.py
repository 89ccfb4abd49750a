"""One routine's reads that arrive together are read together (newest claims, resumes, gaps).

A boot asks for every routine's newest claim at once: 1,000 routines, 1,000 calls. For the
state directory, handing each to a worker thread costs about as much as the read itself (one
directory listing, one small file); for PostgreSQL each would be a round trip. So concurrent
calls share one batch read: a thread call that reads each routine in turn (the directory, see
:func:`in_threads`), or one query for them all (PostgreSQL).

Theory of operation. At most ``readers`` callers are readers at once. A caller that finds a
reader's place free, and no reader about to start, takes it and yields once, so that a herd
arriving with it queues (even while places are free) and joins its batch; the others queue
their request and wait. A reader makes one batch read of its own request plus up to
``batch - 1`` queued ones, answers them, and leaves: it never reads on under its own deadline
once its own answer is in. Whenever a reader leaves -- answered, cancelled or failed -- or
takes its batch, free places go to the next queued requests, whose callers wake up as
readers: as many as it takes to read the queue in full batches (readers woken but not yet
started count for theirs), so a herd of n is read in about ``n / batch`` reads, a few at a
time, and a queue is never left without a reader. A reader cut off before its batch read
returned (or whose read raised) puts the others of its batch back at the head of the queue.
A caller cancelled while waiting takes its request out of the queue (or leaves it unanswered
in a batch), and passes on a reader's place it was given.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeAlias, TypeVar, cast

import trio

READERS = 4  # batch reads at once (the directory: thread calls, each under its limiter)
BATCH = 32  # routines per batch read

T = TypeVar("T")
# Each routine's answer, in the batch's order: what was read (a newest claim or None), or the
# error to raise at its caller.
Reading: TypeAlias = T | Exception
ReadBatch: TypeAlias = Callable[[list[str]], Awaitable[Sequence[Reading[T]]]]

# A request's states: waiting in the queue; given a reader's place; in a batch being read;
# answered; abandoned by its cancelled caller.
QUEUED, READER, TAKEN, ANSWERED, GONE = range(5)


class _Request(Generic[T]):
    __slots__ = ("error", "routine", "state", "value", "wake")

    def __init__(self, routine: str) -> None:
        self.routine = routine
        self.state = QUEUED
        self.wake = trio.Event()
        self.value: T | None = None
        self.error: Exception | None = None


def in_threads(read_sync: Callable[[str], T], run: Callable[..., Awaitable[Any]]) -> ReadBatch[T]:
    """A batch read that calls ``read_sync`` for each routine in one ``run``: a thread call
    under the store's limiter."""

    def read_all(routines: list[str]) -> list[Reading[T]]:
        readings: list[Reading[T]] = []
        for routine in routines:
            try:
                readings.append(read_sync(routine))
            except Exception as exc:
                readings.append(exc)
        return readings

    async def read_batch(routines: list[str]) -> Sequence[Reading[T]]:
        return await run(read_all, routines)  # type: ignore[no-any-return]

    return read_batch


class BatchedReads(Generic[T]):
    """``await reads.read(routine)``: one routine's reading from ``read_batch([routine, ...])``,
    batched with concurrent calls. ``read_batch`` answers each routine in order; an error it
    raises (or a cancellation) reaches its reader alone, the rest of the batch is read again.
    """

    def __init__(
        self, read_batch: ReadBatch[T], *, readers: int = READERS, batch: int = BATCH
    ) -> None:
        self._read = read_batch
        self._most = readers
        self._batch = batch
        self._queue: deque[_Request[T]] = deque()
        self._readers = 0  # places taken: readers at work, and callers woken to become one
        self._unstarted = 0  # readers yet to take their batch: they will take the queue's first
        self.reads = 0  # how many batch reads began (for tests and benchmarks)

    async def read(self, routine: str) -> T:
        request: _Request[T] = _Request(routine)
        if self._readers < self._most and not self._unstarted:
            self._readers += 1
            self._unstarted += 1
            request.state = READER
        else:
            self._queue.append(request)
        try:
            if request.state == READER:
                await trio.lowlevel.checkpoint()  # a herd arriving with us joins our batch
            while request.state != ANSWERED:
                if request.state == READER:
                    await self._read_batch_of(request)
                else:
                    request.wake = trio.Event()
                    await request.wake.wait()
        finally:
            if request.state == QUEUED:
                self._queue.remove(request)
            elif request.state == READER:  # a reader cancelled before reading
                self._readers -= 1
                self._unstarted -= 1
                self._promote()
            if request.state != ANSWERED:
                request.state = GONE
        if request.error is not None:
            raise request.error
        return cast(T, request.value)

    async def _read_batch_of(self, request: _Request[T]) -> None:
        self._unstarted -= 1
        batch = [request]
        while self._queue and len(batch) < self._batch:
            batch.append(self._queue.popleft())
        for each in batch:
            each.state = TAKEN
        self._promote()  # what is left of a herd goes to free places
        readings: Sequence[Reading[T]] | None = None
        self.reads += 1
        try:
            answered = await self._read([each.routine for each in batch])
            if len(answered) != len(batch):
                raise RuntimeError(f"a batch read answered {len(answered)} of {len(batch)}")
            readings = answered
        finally:
            self._readers -= 1
            if readings is not None:
                for each, reading in zip(batch, readings, strict=True):
                    if isinstance(reading, Exception):
                        each.error = reading
                    else:
                        each.value = reading
                    if each.state == TAKEN:
                        each.state = ANSWERED
                        each.wake.set()
            else:  # cut off: the others go back to the head of the queue, in their order
                for each in reversed(batch):
                    if each is not request and each.state == TAKEN:
                        each.state = QUEUED
                        self._queue.appendleft(each)
            self._promote()

    def _promote(self) -> None:
        """Give free readers' places to the queue's first requests, and wake their callers: as
        many as it takes to read the queue (readers yet to start will take part of it)."""
        while self._readers < self._most and len(self._queue) > self._unstarted * (self._batch - 1):
            request = self._queue.popleft()
            request.state = READER
            self._readers += 1
            self._unstarted += 1
            request.wake.set()
