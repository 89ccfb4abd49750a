"""What every part of the runtime shares: its state, its records and its errors."""

from __future__ import annotations

import inspect
import itertools
import logging
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta

import attrs
import trio
import trio_util

from ..agent import Agent
from ..cron import next_run
from ..errors import InvalidOption, InvalidRoutine, StateFault, TrioRoutinesError
from ..instants import format_iso, truncate_ms
from ..metrics import Metrics
from ..presence import Presence
from ..records import Fire, Outcome
from ..replicas import check_replica, default_replica
from ..routines import Routine
from ..sessions import SessionGate
from ..store import Store
from ..wakeups import POLL_INTERVAL
from .deadlines import StoreDeadlines
from .holds import Holds
from .sleepers import Sleepers, Unpark

log = logging.getLogger("trio_routines")

MAX_WAIT = 6 * 3600.0  # seconds: the longest single sleep before the wall clock is re-read
DEFAULT_GRACE = 10.0
JUMP_THRESHOLD = 5.0
STORE_TIMEOUT = 30.0  # seconds: the longest we wait for one store call
#: Why a turn was ended when the store could no longer vouch for our holds (presence.py).
LOST_HOLD = "interrupted: this replica lost its hold on the store, so the turn was ended"


def system_now() -> datetime:
    return datetime.now(UTC)


class UnknownRoutine(TrioRoutinesError, LookupError):
    """Raised by :meth:`Scheduler.fire` and :meth:`Scheduler.run_now` for a name not loaded."""


class NotOnGrid(TrioRoutinesError, ValueError):
    """Raised by :meth:`Scheduler.fire` for a slot that is not on the routine's cron grid."""


class NotYetDue(TrioRoutinesError, ValueError):
    """Raised by :meth:`Scheduler.fire` for a slot still in the future on our wall clock.

    Firing it would run it early, and a far-future claim would make every real slot before it
    stale. ``wait`` is how many seconds remain: an external clock a little ahead of ours can
    simply retry then (the HTTP surface answers 503 with that ``Retry-After``).
    """

    def __init__(self, message: str, wait: float) -> None:
        super().__init__(message)
        self.wait = wait


class Stopping(TrioRoutinesError, RuntimeError):
    """Raised when a fire is requested from a scheduler that is stopping, and by ``run()`` on
    a scheduler that has run already or was stopped (a scheduler runs once)."""


@attrs.frozen
class FireResult:
    """What became of one requested slot."""

    name: str
    slot: datetime
    claimed: bool
    # "duplicate" or "stale" when not claimed; why a claimed slot was skipped (busy_reason)
    reason: str | None = None
    outcome: Outcome | None = None
    ms: int | None = None
    failed: str | None = None


@attrs.frozen
class Statistics:
    """A snapshot of the runtime, for health checks and dashboards."""

    armed: tuple[str, ...]
    in_flight: int
    next_due: Mapping[str, datetime | None]
    outcomes: Mapping[str, int]
    clock_jumps: int
    stopping: bool
    #: Restarts after an unexpected exception, by loop: ``cron:<routine>``, ``wake``, ``clock``.
    loop_restarts: Mapping[str, int] = attrs.field(factory=dict)
    #: Routines whose newest claim is in the future (a clock that ran ahead when it was made):
    #: the claimed slot, behind which nothing can fire; ``next_due`` is the first slot after it.
    #: The newest claim is the one the boot or the routine's last re-arm read, compared with
    #: the wall clock at each call (a clock that goes back can put it in the future again).
    future_claims: Mapping[str, datetime] = attrs.field(factory=dict)
    #: Paused routines, as last read from the store (before every claim, every poll).
    paused: frozenset[str] = frozenset()
    #: Outcomes given up after the settle's retries, by routine (the claims stay unsettled).
    settle_failures: Mapping[str, int] = attrs.field(factory=dict)


def busy_reason(name: str) -> str:
    """Why a claimed slot was skipped: its routine's session still had a turn in flight."""
    return (
        f'the previous turn of "{name[:64]}" is still running — this occurrence is skipped, '
        "the next fires per cron"
    )


def on_grid(routine: Routine, slot: datetime) -> bool:
    """Whether ``slot`` is an instant the routine's cron produces (any instant without cron)."""
    if routine.cron is None:
        return True
    slot = truncate_ms(slot)
    try:
        return (
            next_run(routine.cron, routine.tz, slot - timedelta(milliseconds=1), routine.name)
            == slot
        )
    except OverflowError:  # the first instant datetime can hold
        return False


class SharedRead:
    """One store read under way, whose answer (or fault) every waiter shares.

    The waiters park themselves rather than wait on a ``trio.Event``: 9,999 fires of one
    instant wait on the first one's read, and an event's wait is three coroutines and a
    closure each, all in flight at once (see sleepers.py).
    """

    def __init__(self) -> None:
        self.result: frozenset[str] | None = None
        self.error: StateFault | None = None
        self._waiters: dict[trio.lowlevel.Task, int] | None = {}  # None once finished

    def wait(self) -> Awaitable[object]:
        """Await it to return once the read has finished (at once if it has).

        Not a coroutine of its own (see :meth:`Sleepers.sleep_until`): the caller is parked
        here and awaits Trio's wait at once.
        """
        waiters = self._waiters
        if waiters is None:
            return trio.lowlevel.checkpoint()  # noqa: ASYNC105 -- awaited by the caller
        task = trio.lowlevel.current_task()
        waiters[task] = 0
        return trio.lowlevel.wait_task_rescheduled(Unpark(waiters, task, 0))  # noqa: ASYNC105

    def finish(self) -> None:
        """The read is over: wake every waiter."""
        waiters, self._waiters = self._waiters, None
        for task in waiters or ():
            trio.lowlevel.reschedule(task)


# The context managers of every fire are classes rather than generators: at 10,000 fires at
# once, a generator's frame and wrapper per block are measurable CPU and collector work.


class Working:
    """What ``with self._working():`` enters: one more turn in flight for the block."""

    __slots__ = ("_count",)

    def __init__(self, count: trio_util.AsyncValue[int]) -> None:
        self._count = count

    def __enter__(self) -> None:
        self._count.value += 1

    def __exit__(self, *exc_info: object) -> None:
        self._count.value -= 1


class TurnScope:
    """What ``with self._turn_scope() as grace:`` enters: a scope a stop's grace can reach.

    The scope itself is entered by the turn (:func:`~trio_routines.turns.run_turn`).
    """

    __slots__ = ("_scope", "_scopes")

    def __init__(self, scopes: set[trio.CancelScope], deadline: float) -> None:
        self._scopes = scopes
        self._scope = trio.CancelScope(deadline=deadline)

    def __enter__(self) -> trio.CancelScope:
        self._scopes.add(self._scope)
        return self._scope

    def __exit__(self, *exc_info: object) -> None:
        self._scopes.discard(self._scope)


_INSTANCES = itertools.count(1)


def _default_replica() -> str:
    """``host:pid``; a second scheduler in one process gets ``host:pid.2``, and so on."""
    number = next(_INSTANCES)
    return default_replica() if number == 1 else f"{default_replica()}.{number}"


def _takes_replica(store: Store) -> bool:
    try:
        parameters = inspect.signature(store.claim).parameters
    except (TypeError, ValueError):
        return False
    return "replica" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


def _seconds(option: str, value: float, *, zero: bool) -> float:
    """``value`` if it is a finite number of seconds (``zero``: 0 allowed), else a one-line
    :class:`InvalidOption`: a NaN deadline, say, would leave store calls without a bound."""
    if not (math.isfinite(value) and (value > 0 or (zero and value == 0))):
        wanted = "0 or more" if zero else "more than 0"
        raise InvalidOption(f"{option} must be a finite number of seconds, {wanted}: {value!r}")
    return float(value)


class SchedulerState:
    """The state the boot, the loops and the fire path share; :class:`Scheduler` is the API."""

    def __init__(
        self,
        *,
        agent: Agent,
        store: Store,
        routines: Iterable[Routine] = (),
        now: Callable[[], datetime] = system_now,
        external_clock: bool = False,
        wakeups: bool = True,
        max_wait: float = MAX_WAIT,
        poll_interval: float = POLL_INTERVAL,
        jump_threshold: float = JUMP_THRESHOLD,
        default_grace: float = DEFAULT_GRACE,
        store_timeout: float = STORE_TIMEOUT,
        replica: str | None = None,
    ) -> None:
        self.agent = SessionGate(agent)
        self.store = store
        #: This scheduler's replica id, stored with every claim it makes (replicas.py).
        self.replica = check_replica(replica) if replica is not None else _default_replica()
        # A store written before replicas were recorded takes no ``replica``: it gets none.
        self._claim_options = {"replica": self.replica} if _takes_replica(store) else {}
        self._presence: Presence | None = None  # joined by run() (or for one fire)
        self._joining = trio.Lock()
        self._members = 0  # blocks sharing the membership (see calls.py's _present)
        self._holds = Holds(self.agent, self._current_presence)
        self._swept: set[str] = set()  # dead replicas whose open claims were reconciled
        # The turns' scopes ended because the presence was lost: each says so as it settles.
        self._lost_scopes: set[trio.CancelScope] = set()
        self.routines: dict[str, Routine] = {}
        for routine in routines:
            if routine.name in self.routines:
                raise InvalidRoutine(f"two routines are named {routine.name!r}")
            self.routines[routine.name] = routine
        self.now = now
        self.external_clock = external_clock
        self.wakeups = wakeups
        self.max_wait = max_wait
        self.poll_interval = poll_interval
        self.jump_threshold = jump_threshold
        self.default_grace = _seconds("default_grace", default_grace, zero=True)
        self.store_timeout = _seconds("store_timeout", store_timeout, zero=False)
        self._stopping = trio_util.AsyncBool(False)
        self._loops = trio.CancelScope()
        self._grace_deadline = math.inf
        self._grace_scopes: set[trio.CancelScope] = set()
        self._deadlines = StoreDeadlines()  # of the store calls under way (deadlines.py)
        self._settle_failures: Counter[str] = Counter()
        self._paused: frozenset[str] = frozenset()  # as last read from the store
        self._kept_broken: tuple[str, ...] = ()  # broken files the last reload kept running
        self._pending_wakeups: int | None = None  # as last counted by the wake loop
        self._paused_read: SharedRead | None = None  # the read under way (see calls.py)
        # The newest claim of each routine as the boot or its last re-arm read it; those
        # stamped ahead of the wall clock are the future claims (see _future_claims).
        self._future: dict[str, Fire] = {}
        self._nursery: trio.Nursery | None = None
        self._next_due: dict[str, datetime | None] = {}
        self._armed: dict[str, None] = {}  # an ordered set of the routines with a next slot
        self._firing: dict[str, object] = {}  # a cron loop's fire under way: its marker
        self._waiters: dict[object, trio.Event] = {}  # marker -> set once that fire settled
        self._restarts: Counter[str] = Counter()
        self._loop_nursery: trio.Nursery | None = None
        self._watching = False
        self._outcomes: Counter[str] = Counter()
        self.metrics = Metrics()
        self._in_flight = trio_util.AsyncValue(0)
        self._jumps = 0
        self._offset: float | None = None
        self._sleepers = Sleepers()  # where cron loops sleep (see sleepers.py)

    def _current_presence(self) -> Presence:
        presence = self._presence
        if presence is None:
            raise StateFault(f"replica {self.replica} has not joined its store")
        return presence

    def _note_future_claim(self, name: str, newest: Fire | None, now: datetime) -> None:
        """Remember the newest claim just read, and warn if it is stamped after ``now``.

        A claim behind ``now`` is kept too: if the wall clock later goes back behind its
        stamp, it is in the future again, and :meth:`_future_claims` says so.
        """
        if newest is None:
            self._future.pop(name, None)
            return
        self._future[name] = newest
        if newest.fired_at <= now:
            return
        log.warning(
            "%s: newest claim is in the future (slot %s, stamped %s) — the wall clock was ahead "
            "when it was made; nothing can fire before the first slot after it. If the clock "
            "is right now, stop and delete that claim (README: A clock that ran ahead)",
            name,
            format_iso(newest.slot),
            format_iso(newest.fired_at),
        )

    def _future_claims(self) -> dict[str, datetime]:
        now = self.now()
        return {n: f.slot for n, f in self._future.items() if f.fired_at > now}

    @property
    def stopping(self) -> bool:
        """Whether a stop was requested (no new fire or turn is accepted then)."""
        return bool(self._stopping.value)

    def routine(self, name: str) -> Routine:
        """The loaded routine ``name``; raises :class:`UnknownRoutine` naming the others."""
        try:
            return self.routines[name]
        except KeyError:
            available = ", ".join(sorted(self.routines)) or "(none)"
            raise UnknownRoutine(
                f"unknown routine {name[:64]!r} (available: {available})"
            ) from None

    def _working(self) -> Working:
        """Count one fire (claim to settle) or wake-up (turn to deferral) as in flight."""
        return Working(self._in_flight)

    def _turn_scope(self) -> TurnScope:
        """The scope a stop cancels once its grace runs out."""
        return TurnScope(self._grace_scopes, self._grace_deadline)
