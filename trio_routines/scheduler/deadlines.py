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
handed to Trio as usual, so no store call is ever without a bound. A call enters its scope
through :class:`Bounded`, which notes it and forgets it.
"""

from __future__ import annotations

import heapq
import itertools
import math
from types import TracebackType

import trio

PRUNE_SLACK = 64  # ended calls' heap entries tolerated beyond the open calls (at least)


class StoreDeadlines:
    """The open store calls' scopes and deadlines; :meth:`watch` enforces them.

    Nearly every call's deadline is its start plus the same store timeout, so deadlines
    mostly arrive in order: ``_open`` keeps the open calls in the order they were noted, and
    while each noted deadline is at least every one before it, the earliest open deadline is
    the first entry's -- a note and a forget are one dict step each. A deadline earlier than
    one noted before it (a call with a shorter bound, or a stop that pulled deadlines in) goes
    into a heap as well, so the watch finds it in time: an entry there whose call has ended,
    or whose deadline was pulled in since, stays until popped or pruned, and ``_open`` says
    which is current. (After a call with a later deadline than the rest, those noted while it
    is open go into the heap too, until no call is open: never slower than a heap of all.)
    """

    def __init__(self) -> None:
        self._open: dict[trio.CancelScope, float] = {}  # scope -> its current deadline
        self._latest = -math.inf  # the latest deadline noted in order (``_open``'s order)
        self._heap: list[tuple[float, int, trio.CancelScope]] = []  # the out-of-order ones
        self._kept = 0  # the heap's size after its last rebuild
        self._tickets = itertools.count()  # ties in the heap never compare scopes
        self._watching = False
        self._next_look = math.inf  # when the watch looks next (never later than a deadline)
        self._wake = trio.Event()  # a deadline earlier than the next look was noted

    def note(self, scope: trio.CancelScope, deadline: float) -> None:
        """``scope`` (holding one store call) is cancelled at ``deadline``."""
        if not self._watching:
            scope.deadline = deadline  # first: a bad deadline raises before anything is kept
        open_ = self._open
        open_.pop(scope, None)  # noted again while open: its place is the new deadline's
        open_[scope] = deadline
        if deadline >= self._latest:
            self._latest = deadline  # in order: ``_open`` itself keeps it
        elif self._watching:
            heapq.heappush(self._heap, (deadline, next(self._tickets), scope))
        if deadline < self._next_look:
            self._next_look = deadline
            self._wake.set()

    def forget(self, scope: trio.CancelScope) -> None:
        """The call in ``scope`` is over; the scope itself may go on without a deadline."""
        open_ = self._open
        open_.pop(scope, None)
        if scope.deadline != math.inf:  # handed to Trio before or after the watch ran
            scope.deadline = math.inf
        if self._heap or not open_:
            self._prune_if_stale()

    def pull_in(self, latest: float) -> None:
        """No open call may go on past ``latest`` (a stop began)."""
        for scope, deadline in self._open.items():
            if deadline > latest:
                self._open[scope] = latest
                if self._watching:
                    heapq.heappush(self._heap, (latest, next(self._tickets), scope))
                else:
                    scope.deadline = min(scope.deadline, latest)
        self._latest = min(self._latest, latest)
        if latest < self._next_look:
            self._next_look = latest
            self._wake.set()

    def _expire(self, now: float) -> float:
        """Cancel every open call whose deadline is ``now`` or earlier; the next deadline.

        A method, not the watch's own loop: the watch's frame, waiting, must hold no heap
        (pruned away meanwhile) and no scope, or the ended calls' scopes would live on.
        """
        open_, heap = self._open, self._heap
        due = []
        # In order, from the first: an entry not yet due means none after it in order is
        # (those out of order are in the heap).
        for scope, deadline in open_.items():
            if deadline > now:
                break
            due.append(scope)
        while heap and heap[0][0] <= now:
            deadline, _, scope = heapq.heappop(heap)
            if open_.get(scope) == deadline:  # else ended, or pulled in since
                due.append(scope)
        for scope in due:
            if open_.pop(scope, None) is not None:
                scope.cancel()
        heap = self._prune_if_stale()
        first = next(iter(open_.values()), math.inf)
        return min(first, heap[0][0]) if heap else first

    def _prune_if_stale(self) -> list[tuple[float, int, trio.CancelScope]]:
        """The heap, rebuilt without the entries of ended calls once they may outnumber the
        open calls by more than the slack, or than the heap's size after the last rebuild
        (so that each rebuild's work is paid for by the ended entries it drops). With no call
        open, both are emptied and the next note starts the order afresh."""
        open_ = self._open
        if not open_:
            self._latest = -math.inf
            # A new table: a dictionary keeps the room of its largest herd (10,000 claims at
            # once, or the boot's reads) after its entries are gone.
            self._open = {}
            self._heap.clear()
            self._kept = 0
        elif len(self._heap) > len(open_) + max(PRUNE_SLACK, self._kept):
            self._heap = [entry for entry in self._heap if open_.get(entry[2]) == entry[0]]
            heapq.heapify(self._heap)
            self._kept = len(self._heap)
        return self._heap

    async def watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Cancel each open call at its deadline, until cancelled."""
        self._watching = True
        # Noted before the watch began: each one as an entry out of order, whatever its place.
        for scope, deadline in self._open.items():
            heapq.heappush(self._heap, (deadline, next(self._tickets), scope))
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
            self._kept = 0
            for scope, deadline in self._open.items():  # Trio keeps them from now on
                scope.deadline = min(scope.deadline, deadline)


class Bounded:
    """A store call's cancel scope, its deadline noted with the store deadlines while open.

    A class rather than a generator: every fire enters one, and at 10,000 fires at once the
    generator's frame and wrapper are measurable CPU and garbage-collector work.
    """

    __slots__ = ("_deadline", "_deadlines", "_scope")

    def __init__(self, deadlines: StoreDeadlines, deadline: float) -> None:
        self._deadlines = deadlines
        self._deadline = deadline
        self._scope = trio.CancelScope()

    def __enter__(self) -> trio.CancelScope:
        self._deadlines.note(self._scope, self._deadline)
        return self._scope.__enter__()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        self._deadlines.forget(self._scope)
        return self._scope.__exit__(kind, error, traceback)
