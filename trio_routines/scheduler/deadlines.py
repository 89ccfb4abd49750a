"""The deadlines of the store calls under way, kept by one watch task.

Every store call has a deadline of ours (see :mod:`.calls`). Given to Trio as a cancel
scope's deadline, each one is an entry in Trio's timer heap, added on the way in and dropped
on the way out; 10,000 routines due at once make 20,000 such calls, nearly all done in
milliseconds against a deadline 30 s away. Here a call's scope carries no deadline of Trio's:
the call is noted with its deadline, and one watch task sleeps towards the earliest noted
deadline and cancels the scope of every call still under way once its deadline has passed.
A call that times out ends exactly as under a Trio deadline: its scope is cancelled and
catches the ``Cancelled``.

The watch runs with the loops. Before it starts and once it has stopped (a scheduler never
started, or one whose loops ended while a settle is still under way), every noted deadline is
handed to Trio as usual, so no store call is ever without a bound.
"""

from __future__ import annotations

import heapq
import itertools
import math

import trio

PRUNE_SLACK = 64  # stale heap entries tolerated beyond twice the open calls


class StoreDeadlines:
    """The open store calls' scopes and deadlines; :meth:`watch` enforces them.

    The deadlines sit in a heap (a stalled store makes thousands of calls time out one after
    another: each look costs a pop, not a scan); an entry whose call has ended, or whose
    deadline a stop pulled in, stays in the heap until popped or pruned, and ``_open`` says
    which entry is current.
    """

    def __init__(self) -> None:
        self._open: dict[trio.CancelScope, float] = {}  # scope -> its current deadline
        self._heap: list[tuple[float, int, trio.CancelScope]] = []
        self._tickets = itertools.count()  # ties in the heap never compare scopes
        self._watching = False
        self._next_look = math.inf  # when the watch looks next (never later than a deadline)
        self._wake = trio.Event()  # a deadline earlier than the next look was noted

    def note(self, scope: trio.CancelScope, deadline: float) -> None:
        """``scope`` (holding one store call) is cancelled at ``deadline``."""
        if not self._watching:
            scope.deadline = deadline  # first: a bad deadline raises before anything is kept
        self._open[scope] = deadline
        if self._watching:
            self._push(scope, deadline)

    def forget(self, scope: trio.CancelScope) -> None:
        """The call in ``scope`` is over; the scope itself may go on without a deadline."""
        self._open.pop(scope, None)
        if scope.deadline != math.inf:  # handed to Trio before or after the watch ran
            scope.deadline = math.inf
        self._prune_if_stale()

    def pull_in(self, latest: float) -> None:
        """No open call may go on past ``latest`` (a stop began)."""
        for scope, deadline in self._open.items():
            if deadline > latest:
                self._open[scope] = latest
                if self._watching:
                    self._push(scope, latest)
                else:
                    scope.deadline = min(scope.deadline, latest)

    def _push(self, scope: trio.CancelScope, deadline: float) -> None:
        heapq.heappush(self._heap, (deadline, next(self._tickets), scope))
        if deadline < self._next_look:
            self._next_look = deadline
            self._wake.set()

    def _expire(self, now: float) -> float:
        """Cancel every open call whose deadline is ``now`` or earlier; the next deadline.

        A method, not the watch's own loop: the watch's frame, waiting, must hold no heap
        (pruned away meanwhile) and no scope, or the ended calls' scopes would live on.
        """
        heap, open_ = self._heap, self._open
        while heap and heap[0][0] <= now:
            deadline, _, scope = heapq.heappop(heap)
            if open_.get(scope) == deadline:  # else ended, or pulled in since
                del open_[scope]
                scope.cancel()
        heap = self._prune_if_stale()
        return heap[0][0] if heap else math.inf

    def _prune_if_stale(self) -> list[tuple[float, int, trio.CancelScope]]:
        """The heap, rebuilt without the entries of ended calls once they outnumber the rest."""
        open_ = self._open
        if len(self._heap) > 2 * len(open_) + PRUNE_SLACK:
            self._heap = [entry for entry in self._heap if open_.get(entry[2]) == entry[0]]
            heapq.heapify(self._heap)
        return self._heap

    async def watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Cancel each open call at its deadline, until cancelled."""
        self._watching = True
        for scope, deadline in self._open.items():  # noted before the watch began
            self._push(scope, deadline)
        task_status.started()
        try:
            while True:
                self._next_look = self._expire(trio.current_time())
                if self._wake.is_set():
                    self._wake = trio.Event()
                with trio.move_on_at(self._next_look):
                    await self._wake.wait()
        finally:
            self._watching = False
            self._next_look = math.inf
            self._heap.clear()
            for scope, deadline in self._open.items():  # Trio keeps them from now on
                scope.deadline = min(scope.deadline, deadline)
