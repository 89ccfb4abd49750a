"""Sleeping cron loops, woken by one timer rather than by one cancel scope each.

Trio wakes a task sleeping to a deadline by cancelling that task's scope: a ``Cancelled``
exception with its traceback and frames per task, garbage with reference cycles that only
the collector frees. When 10,000 routines are due at 09:00 that is 10,000 exceptions before
the first claim, and much of what the collector then does during the burst.

Here a sleeping loop parks itself (``trio.lowlevel.wait_task_rescheduled``) in a heap ordered
by its deadline on Trio's clock; one timer task sleeps towards the earliest deadline and
reschedules every loop whose deadline has come, in one pass (those due at their slot together
in their routines' order). A cancellation (a stop, the loop nursery ending) still reaches a
parked loop through its abort function, and :meth:`wake_all` (the wall clock jumped, the
routines changed) reschedules every one. A loop re-reads the wall clock after every wake, so
a wake too early costs one more turn of its loop, never an early fire. Without a running
timer, :meth:`sleep_until` falls back to a plain timed wait, so no loop can sleep for ever.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Awaitable, Callable
from typing import Any

import outcome
import trio

PRUNE_SLACK = 64  # stale heap entries tolerated beyond twice the parked loops


class Unpark:
    """A parked task's abort function: it leaves ``parked`` if still there with ``ticket``.

    One object while the task waits: a closure would be five, and at 10,000 sleeping loops
    (or fires waiting on one read) each is work for every full pass of the collector.
    """

    __slots__ = ("_parked", "_task", "_ticket")

    def __init__(
        self, parked: dict[trio.lowlevel.Task, int], task: trio.lowlevel.Task, ticket: int
    ):
        self._parked = parked
        self._task = task
        self._ticket = ticket

    def __call__(self, _: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        if self._parked.get(self._task) == self._ticket:
            del self._parked[self._task]
        return trio.lowlevel.Abort.SUCCEEDED


class Sleepers:
    """Where cron loops sleep; :meth:`run` is the timer, in the loops' nursery."""

    def __init__(self, prefetch: Callable[[], Awaitable[Any]] | None = None) -> None:
        # (deadline, ticket, task, its ``slot``: None if not a slot's deadline)
        self._heap: list[tuple[float, int, trio.lowlevel.Task, str | None]] = []
        self._parked: dict[trio.lowlevel.Task, int] = {}  # task -> its heap entry's ticket
        self._tickets = itertools.count()
        self._replan = trio.Event()  # a deadline earlier than the timer's was parked
        self._timer_at = math.inf
        self._running = False
        self._woken = trio.Event()  # for the fallback's sleepers
        #: Awaited by the timer before it wakes the loops whose slot has come (the paused
        #: routines' read: see :meth:`sleep_until`); what it returns, their sleep returns.
        self.prefetch = prefetch

    def sleep_until(self, deadline: float, *, slot: str | None = None) -> Awaitable[Any]:
        """Await it to return once Trio's clock reaches ``deadline``, or at :meth:`wake_all`.

        Not a coroutine of its own: it parks the calling task and hands back Trio's wait,
        which the task awaits at once, so a sleeping loop holds one coroutine fewer.

        ``slot``: given when the deadline is the loop's slot (a cron loop gives its
        routine's name). When it comes, the timer first awaits :attr:`prefetch` once for
        every loop due with it, and their sleeps return its answer (any other wake returns
        None). A herd of routines due at one instant then shares one read of the paused
        routines, made before any of them wakes, instead of each waking to park on the first
        one's read: a task switch fewer per fire. The timer wakes no other loop until the
        read is back, so the read is bounded short (see
        :meth:`~.calls.StoreCalls.prefetch_paused`). It then wakes them in the order of
        their ``slot``, not of their deadlines' last digits: a herd claims its slots in its
        names' order, and a state directory writes neighbouring claim directories together
        (docs/design.md).
        """
        if not self._running:
            return self._sleep_unwatched(deadline)
        task = trio.lowlevel.current_task()
        ticket = next(self._tickets)
        heapq.heappush(self._heap, (deadline, ticket, task, slot))
        self._parked[task] = ticket
        if deadline < self._timer_at:
            self._replan.set()
        return trio.lowlevel.wait_task_rescheduled(Unpark(self._parked, task, ticket))  # noqa: ASYNC105

    async def _sleep_unwatched(self, deadline: float) -> None:
        with trio.move_on_at(deadline):
            await self._woken.wait()

    def wake_all(self) -> None:
        """Wake every sleeping loop now."""
        for task in self._parked:
            trio.lowlevel.reschedule(task)
        self._parked.clear()
        self._heap.clear()
        self._woken.set()
        self._woken = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The timer: wake each parked loop at its deadline, until cancelled."""
        self._running = True
        task_status.started()
        try:
            while True:
                now = trio.current_time()
                heap, parked = self._heap, self._parked
                fetch = self.prefetch
                # Woken once fetched, in their slots' order (a tie goes to the ticket, never to
                # the task).
                slots: list[tuple[str, int, trio.lowlevel.Task]] = []
                while heap and heap[0][0] <= now:
                    _, ticket, task, slot = heapq.heappop(heap)
                    if parked.get(task) == ticket:  # else cancelled, or parked again since
                        if slot is not None:
                            slots.append((slot, ticket, task))  # still parked: cancellable
                        else:
                            del parked[task]
                            trio.lowlevel.reschedule(task)
                if slots:
                    fetched = await fetch() if fetch is not None else None
                    slots.sort()
                    for _, ticket, task in slots:
                        # Not if cancelled meanwhile, or woken by wake_all (then without it).
                        if parked.get(task) == ticket:
                            del parked[task]
                            trio.lowlevel.reschedule(task, outcome.Value(fetched))
                    del slots, fetched  # not kept while the herd runs: collector work
                if len(heap) > 2 * len(parked) + PRUNE_SLACK:
                    self._heap = heap = [
                        entry for entry in heap if parked.get(entry[2]) == entry[1]
                    ]
                    heapq.heapify(heap)
                self._timer_at = heap[0][0] if heap else math.inf
                if self._replan.is_set():
                    self._replan = trio.Event()
                with trio.move_on_at(self._timer_at):
                    await self._replan.wait()
        finally:
            self._running = False
            self._timer_at = math.inf
            self.wake_all()  # nothing may stay parked without a timer
