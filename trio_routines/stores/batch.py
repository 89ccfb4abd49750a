"""Group commit for store calls: calls that arrive together are done together.

Theory of operation. A caller with nothing in flight ahead of it becomes the *leader*: it
yields once (so that every task woken at the same instant can queue behind it), takes the
queue as one batch, and flushes it -- for PostgreSQL one transaction and one commit, for the
state directory one worker-thread call writing every file of the batch. Callers that arrive
while a batch is in flight queue for the next one; when a flush ends, its leader hands the
lead to the first caller still queued, whose flush then carries everyone queued by then. A
lone call waits for nobody; a herd of them costs one round trip (or thread hand-off) per
batch instead of one per call.

A batch holds at most one item per key (a routine for claims, a slot for settles): a second
item with the same key waits for the next batch, so that items of one key are decided one
after the other, in arrival order, exactly as without batching.

The flush is shielded and bounded by the store's own deadline (PostgreSQL), so a leader's
cancellation never strands the callers riding on its batch -- or, with ``abandon``, it is
not shielded: a leader cancelled abandons it and every other caller of the batch gets
``abandon()`` as its error (the state directory: a write in a worker thread cannot be called
back, and a stalled disk may hold it for minutes). A caller cancelled while queued leaves the
queue. One cancelled while its batch is in flight either gives up at once, marked
``gave_up`` so that the flush can undo what it will not hear about (PostgreSQL: a claim taken
for nobody is settled interrupted), or, with ``patient``, waits for its answer and gets it,
its cancellation delivered at its next checkpoint.

Waiting callers are parked with ``wait_task_rescheduled`` and woken once, by the flush that
answered them or by the hand-over of the lead: no event per call.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

import attrs
import trio

from .answers import Answer as Answer
from .answers import each as each

I = TypeVar("I")  # noqa: E741 -- the item a caller brings
R = TypeVar("R")  # what it gets back

LULL_BATCHES = 16

_ABORT_FAILED = trio.lowlevel.Abort.FAILED
_ABORT_SUCCEEDED = trio.lowlevel.Abort.SUCCEEDED


@attrs.define(eq=False)
class Entry(Generic[I, R]):
    """One caller's item, and where its answer goes."""

    item: I
    gave_up: bool = False  # set by the caller's task, read by the flush's thread
    answer: Answer[R] | None = None
    in_flight: bool = False
    task: trio.lowlevel.Task | None = None  # while its caller is parked


class Batcher(Generic[I, R]):
    """Queues items and flushes them a batch at a time (see the module doc).

    ``flush(entries)`` returns one answer per entry, in order; it must be bounded. An error it
    raises instead is every entry's answer.
    """

    def __init__(
        self,
        flush: Callable[[Sequence[Entry[I, R]]], Awaitable[list[Answer[R]]]],
        key: Callable[[I], Hashable],
        max_batch: int = 5000,
        *,
        patient: bool = False,
        abandon: Callable[[], Exception] | None = None,
    ) -> None:
        """``abandon``: a flush that cannot bound itself (a write in a worker thread) is not
        shielded: a leader cancelled during it abandons it, and the rest of its batch get
        ``abandon()`` as their error. Without it the flush is shielded (it must be bounded
        by its own deadline)."""
        self._flush = flush
        self._key = key
        self._max_batch = max_batch
        self._patient = patient
        self._abandon = abandon
        self._queue: list[Entry[I, R]] = []
        self._busy = False
        self._lull = trio.lowlevel.ParkingLot()
        self.batches = 0  # how many flushes ran (for tests and benchmarks)

    @property
    def queued(self) -> bool:
        """Whether callers wait for a batch to come (the next one's leader among them)."""
        return bool(self._queue)

    async def submit(self, item: I) -> R:
        entry: Entry[I, R] = Entry(item)
        self._queue.append(entry)
        if self._busy:
            entry.task = trio.lowlevel.current_task()

            def abort(_: Any) -> trio.lowlevel.Abort:
                if not entry.in_flight:
                    self._queue.remove(entry)
                elif self._patient:
                    return _ABORT_FAILED  # answered once its batch is: see the module doc
                else:
                    entry.gave_up = True
                entry.task = None
                return _ABORT_SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort)
        else:
            self._busy = True
        if entry.answer is None:  # our turn to lead
            await self._lead()
        assert entry.answer is not None
        return entry.answer.unwrap()

    async def _lead(self) -> None:
        batch: list[Entry[I, R]] = []
        answers: list[Answer[R]] | None = None
        try:
            with trio.CancelScope(shield=True):  # one checkpoint, and the batch is taken
                await trio.lowlevel.checkpoint()  # let the rest of the herd queue up
                batch = self._take()
            # Shielded: bounded by the flush's own deadline; else abandoned if cancelled.
            with trio.CancelScope(shield=self._abandon is None):
                try:
                    answers = await self._flush(batch)
                except Exception as exc:
                    answers = [Answer(error=exc)] * len(batch)
                if len(answers) != len(batch):
                    wrong = RuntimeError(f"a flush answered {len(answers)} of {len(batch)} calls")
                    answers = [Answer(error=wrong)] * len(batch)
        finally:
            if answers is None:  # abandoned, or cut short (KeyboardInterrupt): wake everyone
                stopped = (
                    self._abandon()
                    if self._abandon is not None
                    else RuntimeError("the batch's flush was interrupted")
                )
                answers = [Answer(error=stopped)] * len(batch)
            for entry, answer in zip(batch, answers, strict=True):
                entry.answer = answer
                _wake(entry)
            self._hand_over()

    def _take(self) -> list[Entry[I, R]]:
        batch: list[Entry[I, R]] = []
        keys: set[Hashable] = set()
        rest: list[Entry[I, R]] = []
        for entry in self._queue:
            key = self._key(entry.item)
            if key in keys or len(batch) >= self._max_batch:
                rest.append(entry)
            else:
                keys.add(key)
                entry.in_flight = True
                batch.append(entry)
        self._queue = rest
        self.batches += 1
        return batch

    async def lull(self) -> None:
        """Return once no batch is queued or in flight, or after at most ``LULL_BATCHES`` more
        batches (a steady stream of calls never holds a caller back for long)."""
        if self._busy:
            await self._lull.park()
        else:
            await trio.lowlevel.checkpoint()

    def _hand_over(self) -> None:
        if self._queue:
            _wake(self._queue[0])  # it leads the next batch
            if self.batches % LULL_BATCHES == 0:
                self._lull.unpark_all()
        else:
            self._busy = False
            self._lull.unpark_all()


def _wake(entry: Entry[Any, Any]) -> None:
    task, entry.task = entry.task, None
    if task is not None:  # parked still: not the leader itself, not gone
        trio.lowlevel.reschedule(task)


class Turns:
    """One holder at a time, urgent waiters served before the others (FIFO within each).

    The state directory's batches of claims and of settles take turns at its one writer
    thread: a herd's claims first, so that turns start while outcomes wait to be written.
    ``urgent_next()`` tells whether an urgent holder is on its way without waiting yet (the
    claims' next batch, whose leader is woken right after the previous batch lets go): a
    release then keeps the turn for it.
    """

    def __init__(self, urgent_next: Callable[[], bool] = lambda: False) -> None:
        self._urgent_next = urgent_next
        self._held = False
        self._kept = False  # held for the next urgent holder
        self._urgent = trio.lowlevel.ParkingLot()
        self._rest = trio.lowlevel.ParkingLot()

    async def acquire(self, *, urgent: bool) -> None:
        if self._held and not (urgent and self._kept):
            await (self._urgent if urgent else self._rest).park()  # handed over by release
        else:
            self._held = True
            self._kept = False
            await trio.lowlevel.cancel_shielded_checkpoint()

    def release(self) -> None:
        if self._urgent:
            self._urgent.unpark()
        elif self._urgent_next():
            self._kept = True
        elif self._rest:
            self._rest.unpark()
        else:
            self._held = False

    @contextlib.asynccontextmanager
    async def hold(self, *, urgent: bool) -> AsyncIterator[None]:
        await self.acquire(urgent=urgent)
        try:
            yield
        finally:
            self.release()
