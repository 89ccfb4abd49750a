"""Newest-claim reads that arrive together share worker threads.

A boot asks for every routine's newest claim at once: 1,000 routines, 1,000 calls. Handing
each to a worker thread costs about as much as the read itself (one directory listing, one
small file), so concurrent calls share thread calls.

Theory of operation. At most ``READERS`` callers are readers at once. A caller that finds a
reader's place free takes it; the others queue their request and wait. A reader makes one
thread call for its own request plus up to ``BATCH - 1`` queued ones, answers them, and
leaves: it never reads on under its own deadline once its own answer is in. Whenever a
reader leaves -- answered, cancelled or failed -- its place goes to the next queued request,
whose caller wakes up as a reader, so a queue is never left without one. A reader cut off
before its thread call returned puts the others of its batch back at the head of the queue.
A caller cancelled while waiting takes its request out of the queue (or leaves it unanswered
in a batch), and passes on a reader's place it was given.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ..records import Fire

READERS = 4  # thread calls at once, each under the store's limiter
BATCH = 32  # routines per thread call

# A request's states: waiting in the queue; given a reader's place; in a batch being read;
# answered; abandoned by its cancelled caller.
QUEUED, READER, TAKEN, ANSWERED, GONE = range(5)


class _Request:
    __slots__ = ("error", "fire", "routine", "state", "wake")

    def __init__(self, routine: str) -> None:
        self.routine = routine
        self.state = QUEUED
        self.wake = trio.Event()
        self.fire: Fire | None = None
        self.error: Exception | None = None


class NewestReads:
    """``await reads.read(routine)``: ``read_sync(routine)``, batched with concurrent calls."""

    def __init__(
        self,
        read_sync: Callable[[str], Fire | None],
        run: Callable[..., Awaitable[Any]],
    ) -> None:
        self._read_sync = read_sync
        self._run = run  # runs a sync function in a worker thread under the store's limiter
        self._queue: deque[_Request] = deque()
        self._readers = 0  # places taken: readers at work, and callers woken to become one

    async def read(self, routine: str) -> Fire | None:
        request = _Request(routine)
        if self._readers < READERS:
            self._readers += 1
            request.state = READER
        else:
            self._queue.append(request)
        try:
            while request.state != ANSWERED:
                if request.state == READER:
                    await self._read_batch_of(request)
                else:
                    request.wake = trio.Event()
                    await request.wake.wait()
        finally:
            if request.state == QUEUED:
                self._queue.remove(request)
            elif request.state == READER:  # woken as a reader, cancelled before reading
                self._readers -= 1
                self._promote()
            if request.state != ANSWERED:
                request.state = GONE
        if request.error is not None:
            raise request.error
        return request.fire

    async def _read_batch_of(self, request: _Request) -> None:
        batch = [request]
        while self._queue and len(batch) < BATCH:
            batch.append(self._queue.popleft())
        for each in batch:
            each.state = TAKEN
        finished = False
        try:
            await self._run(self._read_batch, batch)
            finished = True
        finally:
            self._readers -= 1
            if finished:
                for each in batch:
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
        """Give free readers' places to the queue's first requests, and wake their callers."""
        while self._readers < READERS and self._queue:
            request = self._queue.popleft()
            request.state = READER
            self._readers += 1
            request.wake.set()

    def _read_batch(self, batch: list[_Request]) -> None:
        for request in batch:  # in a worker thread; the answers are read once it returned
            try:
                request.fire = self._read_sync(request.routine)
            except Exception as exc:
                request.error = exc
