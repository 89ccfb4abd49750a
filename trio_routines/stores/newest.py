"""Newest-claim reads that arrive together share worker threads.

A boot asks for every routine's newest claim at once: 1,000 routines, 1,000 calls. Handing
each to a worker thread costs about as much as the read itself (one directory listing, one
small file), so concurrent calls queue their routine, and a caller that finds fewer than
``READERS`` readers at work becomes one: it takes up to ``BATCH`` queued routines into a
single thread call, and goes on until the queue is empty. Every other caller waits for its
own answer. A reader cut off before its thread started (cancelled while waiting for the
store's limiter) hands its batch back: those callers queue again, and one of them reads.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ..records import Fire

READERS = 4  # thread calls at once, each under the store's limiter
BATCH = 32  # routines per thread call


class _Request:
    __slots__ = ("done", "error", "fire", "retry", "routine")

    def __init__(self, routine: str) -> None:
        self.routine = routine
        self.done = trio.Event()
        self.fire: Fire | None = None
        self.error: Exception | None = None
        self.retry = False


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
        self._readers = 0

    async def read(self, routine: str) -> Fire | None:
        request = _Request(routine)
        self._queue.append(request)
        while True:
            if self._readers < READERS:
                await self._drain()
            await request.done.wait()
            if not request.retry:
                break
            request.done = trio.Event()  # its reader was cut off: queue again
            request.retry = False
            self._queue.append(request)
        if request.error is not None:
            raise request.error
        return request.fire

    async def _drain(self) -> None:
        self._readers += 1
        try:
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(BATCH, len(self._queue)))]
                finished = False
                try:
                    await self._run(self._read_batch, batch)
                    finished = True
                finally:
                    for request in batch:
                        request.retry = not finished
                        request.done.set()
        finally:
            self._readers -= 1

    def _read_batch(self, batch: list[_Request]) -> None:
        for request in batch:  # in a worker thread; the answers are read once it returned
            try:
                request.fire = self._read_sync(request.routine)
            except Exception as exc:
                request.error = exc
