"""What a turn's end is bounded by besides its timeout: a stop's grace, a lost presence,
and a caller who gave up.

:class:`Grace` holds the scope of every turn under way: a stop pulls their deadlines in, and
the member watch ends them all when the store can no longer vouch for our holds.

A fire by hand (``Scheduler.fire``) and an on-demand run (``run_now``) run their turn in the
caller's task, shielded, so that a cancel never cuts a claim or a settle short. Without more,
a caller that gives up (a timeout of its own, its host shutting down) would wait as long as
the agent takes, without end for one that hangs. :func:`bounded_by_caller` watches the
caller's scope beside the call: once it is cancelled, each turn of the call (one begun later,
too) has the scheduler's default grace left, after which it is interrupted and recorded so,
as a stop does; the caller hears of its cancel once the call returned. The turns of a call
find their bound through a context variable, which only these two calls set: a cron fire's
turn reads it and finds nothing.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TypeVar

import outcome
import trio

T = TypeVar("T")

#: Why a turn whose caller gave up was interrupted (its history's error).
CALLER_ENDED = "its caller gave up"
#: Seconds: a turn ended by its caller's bound is said to be the stop's when a stop's
#: deadline came no later than this after it (a host's cancel begins both at once).
STOP_FIRST = 1.0


class CallerGrace:
    """The deadline a caller's cancel set, and the turn scopes of its call meanwhile.

    It bounds the turns of the caller's own task only: a task started from within the call
    (by the agent, say) inherits the context variable, not the bound; and once the call
    returned, the variable is the caller's again.
    """

    __slots__ = ("deadline", "scopes", "task")

    def __init__(self) -> None:
        self.deadline = math.inf
        self.scopes: set[trio.CancelScope] = set()
        self.task = trio.lowlevel.current_task()

    def bound_at(self, deadline: float) -> None:
        """The caller gave up: each turn of the call ends by ``deadline`` (Trio's clock)."""
        self.deadline = min(self.deadline, deadline)
        for scope in self.scopes:
            scope.deadline = min(scope.deadline, self.deadline)

    def applies(self) -> bool:
        """Whether a turn beginning now is one of the call's (in the caller's task)."""
        return trio.lowlevel.current_task() is self.task

    def passed(self) -> bool:
        """Whether the caller's bound has passed (asked of a turn of the call that was ended
        by its scope's deadline: then it was the caller's, unless a stop's came first)."""
        return trio.current_time() >= self.deadline


CALLER: ContextVar[CallerGrace | None] = ContextVar("trio_routines_caller", default=None)


async def bounded_by_caller(call: Callable[[], Awaitable[T]], grace: float) -> T:
    """``await call()``; if the caller's scope is cancelled meanwhile, each turn of the call
    has ``grace`` seconds left from then (see the module doc)."""
    bound = CallerGrace()
    token = CALLER.set(bound)
    ended: outcome.Outcome[T] | None = None
    try:
        async with trio.open_nursery() as watch:
            watch.start_soon(_watch, bound, grace)
            try:
                # Its error, if any, raised as it came (not in the watch's exception group).
                ended = await outcome.acapture(call)
            finally:
                watch.cancel_scope.cancel()  # the call is over: so is the watch
    except BaseExceptionGroup as group:
        # The watch's nursery lets only the caller's cancel out (its checkpoint as it
        # closes): raised bare, as the call alone would have let the caller hear of it --
        # unless the call itself failed, which the caller hears of first, as before.
        cancels, rest = group.split(trio.Cancelled)
        if rest is not None:
            raise
        assert cancels is not None  # (a group holds one exception at least)
        if isinstance(ended, outcome.Error):
            ended.unwrap()
        raise _first(cancels) from None
    finally:
        CALLER.reset(token)
    assert ended is not None
    return ended.unwrap()


def _first(group: BaseException) -> BaseException:
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    return group


async def _watch(bound: CallerGrace, grace: float) -> None:
    try:
        await trio.sleep_forever()
    finally:
        # Cancelled by the caller's scope; or by the call's end, when it bounds nothing left.
        bound.bound_at(trio.current_time() + max(0.0, grace))


# The context managers of every fire are classes rather than generators: at 10,000 fires at
# once, a generator's frame and wrapper per block are measurable CPU and collector work.
class TurnScope:
    """What ``with self._turn_scope() as grace:`` enters: a scope a stop's grace can reach.

    The scope itself is entered by the turn (:func:`~trio_routines.turns.run_turn`).
    """

    __slots__ = ("_caller", "_scope", "_scopes")

    def __init__(self, scopes: set[trio.CancelScope], deadline: float) -> None:
        self._scopes = scopes
        caller = CALLER.get()  # a fire or run by hand: its caller's cancel reaches it
        self._caller = caller if caller is not None and caller.applies() else None
        if self._caller is not None:
            deadline = min(deadline, self._caller.deadline)
        self._scope = trio.CancelScope(deadline=deadline)

    def __enter__(self) -> trio.CancelScope:
        self._scopes.add(self._scope)
        if self._caller is not None:
            self._caller.scopes.add(self._scope)
        return self._scope

    def __exit__(self, *exc_info: object) -> None:
        self._scopes.discard(self._scope)
        if self._caller is not None:
            self._caller.scopes.discard(self._scope)


class Grace:
    """The turns' cancel scopes and the stop's grace deadline: what a stop reaches.

    The fire path opens one scope per turn (:meth:`turn_scope`); the scheduler's stop pulls
    their deadlines in (:meth:`begin`); the member watch ends them all when the store can no
    longer vouch for our holds (:meth:`end_lost`), and each turn asks, as it ends, whether
    that is why (:meth:`was_lost`).
    """

    def __init__(self) -> None:
        #: When a stop's grace runs out (inf until a stop): the bound of turns and store calls.
        self.deadline = math.inf
        #: The scopes of the turns under way.
        self.scopes: set[trio.CancelScope] = set()
        self._lost: set[trio.CancelScope] = set()  # ended because the presence was lost

    def turn_scope(self) -> TurnScope:
        """The scope a stop cancels once its grace runs out."""
        return TurnScope(self.scopes, self.deadline)

    def begin(self, seconds: float, now: float) -> float:
        """A stop with ``seconds`` of grace from ``now`` (Trio's clock; the shortest wins): the
        new deadline."""
        self.deadline = min(self.deadline, now + max(0.0, seconds))
        for scope in self.scopes:
            scope.deadline = min(scope.deadline, self.deadline)
        return self.deadline

    def end_lost(self) -> None:
        """End every turn now: our holds were lost (each says so as it settles)."""
        for scope in list(self.scopes):
            self._lost.add(scope)
            scope.cancel()

    def lost(self, scope: trio.CancelScope) -> bool:
        """Whether ``scope``'s turn was ended by :meth:`end_lost` (not forgotten: see below)."""
        return scope in self._lost

    def was_lost(self, scope: trio.CancelScope) -> bool:
        """Whether ``scope``'s turn was ended by :meth:`end_lost` (asked once, as it ends)."""
        if scope in self._lost:
            self._lost.discard(scope)
            return True
        return False
