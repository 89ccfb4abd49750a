"""Group commit for the PostgreSQL store: calls that arrive together go to the server together.

Theory of operation. A caller with nothing in flight ahead of it becomes the *leader*: it
yields once (so that every task woken at the same instant can queue behind it), takes the
queue as one batch, and flushes it -- one transaction, one commit. Callers that arrive while a
batch is in flight queue for the next one; when a flush ends, its leader hands the lead to the
first caller still queued, whose flush then carries everyone queued by then. A lone call
waits for nobody; a herd of them costs one round trip per batch instead of one per call.

A batch holds at most one item per key (a routine for claims, a slot for settles): a second
item with the same key waits for the next batch, so that items of one key are decided one
after the other, in arrival order, exactly as without batching.

The flush is shielded and bounded by the store's own deadline, so a leader's cancellation
never strands the callers riding on its batch. A caller cancelled while queued leaves the
queue; one cancelled while its batch is in flight is marked ``gave_up``, so that the flush
can undo what it will not hear about (a claim taken for nobody is settled interrupted).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

import attrs
import trio

I = TypeVar("I")  # noqa: E741 -- the item a caller brings
R = TypeVar("R")  # what it gets back


@attrs.define  # not frozen: a herd makes thousands, and a frozen init costs twice as much
class Answer(Generic[R]):
    """What a flush gives one caller: a value, or the error to raise at it."""

    value: R | None = None
    error: Exception | None = None

    def unwrap(self) -> R:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]  # None only with an error


@attrs.define(eq=False)
class Entry(Generic[I, R]):
    """One caller's item, and where its answer goes."""

    item: I
    gave_up: bool = False  # set by the caller's task, read by the flush's thread
    answer: Answer[R] | None = None
    woken: trio.Event = attrs.field(factory=trio.Event)
    in_flight: bool = False


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
    ) -> None:
        self._flush = flush
        self._key = key
        self._max_batch = max_batch
        self._queue: list[Entry[I, R]] = []
        self._busy = False
        self.batches = 0  # how many flushes ran (for tests and benchmarks)

    async def submit(self, item: I) -> R:
        entry: Entry[I, R] = Entry(item)
        self._queue.append(entry)
        if self._busy:
            try:
                await entry.woken.wait()
            except BaseException:
                if entry.in_flight:
                    entry.gave_up = True
                else:
                    self._queue.remove(entry)
                    if entry.woken.is_set():  # handed the lead just now: pass it on
                        self._hand_over()
                raise
        else:
            self._busy = True
        if entry.answer is None:  # our turn to lead
            await self._lead()
        assert entry.answer is not None
        return entry.answer.unwrap()

    async def _lead(self) -> None:
        try:
            with trio.CancelScope(shield=True):  # bounded by the flush's own deadline
                await trio.lowlevel.checkpoint()  # let the rest of the herd queue up
                batch = self._take()
                try:
                    answers = await self._flush(batch)
                except Exception as exc:
                    answers = [Answer(error=exc)] * len(batch)
            for entry, answer in zip(batch, answers, strict=True):
                entry.answer = answer
                entry.woken.set()
        finally:
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

    def _hand_over(self) -> None:
        if self._queue:
            self._queue[0].woken.set()
        else:
            self._busy = False
