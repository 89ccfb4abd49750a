"""Turns' timeouts, watched by one task of the run: a timeout that comes late is read first.

A turn's ``timeout`` was its cancel scope's deadline. A process stopped past it (``SIGSTOP``,
a debugger, a host starved of the processor) saw the deadline passed the moment it ran again
and ended the turn then, before it read what the agent had done meanwhile: a ``cmd:``
command that ended within its time, its reply and its exit waiting in the pipe, was recorded
as timed out. Here a timeout is a cancel of the turn's scope by a watch that asks how late it
comes: on time (within :data:`STALLED` seconds), it ends the turn at once; later, it first
lets the turn run for :data:`READ_AFTER_STALL` seconds more, so that an end already there is
read as the end, and a turn still running then is ended as before.

One task for every turn of a run (a system task, started at the first timeout): a task and a
nursery per turn cost a timed fire four times a bare one's steps, and in a herd of 10,000
fires that is half a second of the event loop's. A timeout is an entry in a heap; a turn that
ends leaves its entry, forgotten, to be dropped when it comes up or when forgotten ones are
most of the heap.
"""

from __future__ import annotations

import heapq
import itertools
import math
from types import TracebackType

import trio

#: How late past a turn's timeout the watch may come and still end the turn at once (s).
STALLED = 1.0
#: How long a turn whose timeout came late runs on before it is ended (seconds).
READ_AFTER_STALL = 1.0


class Timeout:
    """One turn's timeout: ``with`` it around the turn, inside ``scope``, which it cancels."""

    __slots__ = ("deadline", "late", "scope", "watch")

    def __init__(self, watch: Watch, deadline: float, scope: trio.CancelScope) -> None:
        self.watch = watch
        self.deadline = deadline
        self.scope: trio.CancelScope | None = scope
        self.late = False  # come late once: its next coming ends the turn

    def __enter__(self) -> Timeout:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.watch.forget(self)


class Watch:
    """The timeouts of one run's turns, and the task that ends the turns at theirs."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Timeout]] = []
        self._order = itertools.count()  # ties, in the order added
        self._forgotten = 0
        self._earlier = trio.Event()  # set when a timeout comes before the one waited for
        self._waiting_until = math.inf

    def add(self, deadline: float, scope: trio.CancelScope) -> Timeout:
        """Cancel ``scope`` at ``deadline`` (Trio's clock), unless forgotten first."""
        timeout = Timeout(self, deadline, scope)
        self._push(timeout)
        return timeout

    def forget(self, timeout: Timeout) -> None:
        if timeout.scope is None:
            return
        timeout.scope = None
        self._forgotten += 1
        if self._forgotten > 64 and self._forgotten * 2 > len(self._heap):
            self._heap = [entry for entry in self._heap if entry[2].scope is not None]
            heapq.heapify(self._heap)
            self._forgotten = 0

    def _push(self, timeout: Timeout) -> None:
        heapq.heappush(self._heap, (timeout.deadline, next(self._order), timeout))
        if timeout.deadline < self._waiting_until:
            self._earlier.set()

    async def run(self) -> None:
        """End each turn at its timeout, or a while after it when the watch comes late."""
        while True:
            now = trio.current_time()
            while self._heap and self._heap[0][0] <= now:
                _, _, timeout = heapq.heappop(self._heap)
                if timeout.scope is None:
                    self._forgotten -= 1
                elif timeout.late or now - timeout.deadline <= STALLED:
                    timeout.scope.cancel()
                    timeout.scope = None
                else:  # this process did not run meanwhile: what the turn did is read first
                    timeout.late = True
                    timeout.deadline = now + READ_AFTER_STALL
                    heapq.heappush(self._heap, (timeout.deadline, next(self._order), timeout))
            self._waiting_until = self._heap[0][0] if self._heap else math.inf
            self._earlier = trio.Event()
            with trio.move_on_at(self._waiting_until):
                await self._earlier.wait()


_WATCH: trio.lowlevel.RunVar[Watch] = trio.lowlevel.RunVar("trio_routines_timeouts")


def timeout_at(deadline: float, scope: trio.CancelScope) -> Timeout:
    """Cancel ``scope`` at ``deadline`` (Trio's clock), by the run's watch (started here the
    first time); ``with`` the answer around the turn, so that its end forgets it."""
    try:
        watch = _WATCH.get()
    except LookupError:
        watch = Watch()
        _WATCH.set(watch)
        trio.lowlevel.spawn_system_task(watch.run, name="trio_routines timeouts")
    return watch.add(deadline, scope)
