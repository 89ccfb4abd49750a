"""What the parts of the runtime share: a small runtime record, the grace, the records and
the errors."""

from __future__ import annotations

import inspect
import itertools
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any, Generic, TypeVar

import attrs
import trio
import trio_util

from ..cron import next_run
from ..errors import StateFault, TrioRoutinesError
from ..instants import format_iso, truncate_ms
from ..metrics import Metrics
from ..records import Outcome
from ..replicas import default_replica
from ..routines import Routine
from ..store import Store
from .inflight import InFlight, Taking, Working
from .options import checked_now
from .sleepers import Unpark

T = TypeVar("T")

log = logging.getLogger("trio_routines")

MAX_WAIT = 6 * 3600.0  # seconds: the longest single sleep before the wall clock is re-read
DEFAULT_GRACE = 10.0
JUMP_THRESHOLD = 5.0
STORE_TIMEOUT = 30.0  # seconds: the longest we wait for one store call
#: Why a turn was ended when the store could no longer vouch for our holds (presence.py).
LOST_HOLD = "interrupted: this replica lost its hold on the store, so the turn was ended"
#: The reason of a turn whose holds the store stopped vouching for before it began.
LOST_BEFORE = "interrupted: this replica lost its hold on the store before the turn began: not run"
#: What a turn's log line says ended it then.
LOST_ENDED = "this replica lost its hold on the store"


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

    @classmethod
    def of(cls, name: str, slot: datetime, now: datetime) -> NotYetDue:
        """The refusal of ``slot`` of routine ``name`` while the wall clock reads ``now``."""
        return cls(
            f"slot {format_iso(slot)} of {name!r} has not arrived yet — "
            "a slot never fires before its instant",
            (slot - now).total_seconds(),
        )


class Stopping(TrioRoutinesError, RuntimeError):
    """Raised when a fire is requested from a scheduler that is stopping, when a turn is to be
    started in a scheduler that is not running (``start_fire``, ``start_run`` before ``run()``
    or after it returned: the message says which), and by ``run()`` on a scheduler that has
    run already or was stopped (a scheduler runs once)."""


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
    #: When the slot's settle returned, by the scheduler's wall clock as read (not cut to
    #: milliseconds); None for a slot not claimed, and in a result rebuilt from another
    #: process's answer (the command line's fire through a served API). Not compared: two
    #: results of one slot are equal whenever they settled.
    settled_at: datetime | None = attrs.field(default=None, eq=False)


@attrs.frozen
class Statistics:
    """A snapshot of the runtime, for health checks and dashboards."""

    armed: tuple[str, ...]
    in_flight: int
    #: Each cron routine's next slot (None: its cron never fires again); while a slot's turn
    #: runs, the first slot after now, as ``list`` computes it.
    next_due: Mapping[str, datetime | None]
    #: This process's fires since it started, by how each ended: its outcome (``completed``,
    #: ``failed``, ``skipped``, ``interrupted``) for a slot it claimed, or why it claimed none
    #: (``paused``, ``duplicate``: another claim has it, ``stale``: a newer slot is claimed).
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
    #: Routines, and sessions (for their wake-ups), whose turns do not start now: over a
    #: budget (the reason, as the last check found it; :mod:`trio_routines.budgets`).
    over_budget: Mapping[str, str] = attrs.field(factory=dict)
    sessions_over_budget: Mapping[str, str] = attrs.field(factory=dict)
    #: The routine files the last reload could not load (skipped, or their previous version
    #: kept), as it named them: the next start refuses to start while any is so.
    broken_files: tuple[str, ...] = ()


def duration(seconds: float) -> str:
    """``1h 5m``, ``3s``: a span of seconds for a log line."""
    seconds = round(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    if seconds or not parts:
        parts.append(f"{seconds}s")
    return " ".join(parts)


def busy_reason(name: str, said: str | None = None, *, on_cron: bool = True) -> str:
    """Why a claimed slot was skipped: its routine's session still had a turn in flight; with
    what the agent ``said`` when it was the agent that answered busy (a 409 may also mean
    that it did this slot already, by its idempotency key: the history keeps its words).
    ``on_cron``: whether the routine has a cron, whose next slot fires (one without fires only
    when a caller asks again)."""
    if said is None:  # our own hold: a turn of its session runs (on some replica)
        reason = (
            f'another turn in the session of "{name[:64]}" is still running (its last, a run '
            "or a wake-up) — this occurrence is skipped"
        )
    else:  # the agent's answer, which may mean it ran this slot already: its words say
        reason = f'the agent answered busy for "{name[:64]}" — this occurrence is skipped'
    if on_cron:
        reason += ", the next fires per cron"
    return with_agents_words(reason, said)


def with_agents_words(reason: str, said: str | None) -> str:
    """``reason`` of a busy turn, with what the agent ``said`` when it was the agent that
    answered busy (None: our own turn of the session held it)."""
    return reason if said is None else f"{reason} ({said})"


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


#: The longest a resume is taken to land after the instant it keeps (stamped, then written:
#: a slow disk, a commit that waits). A paused read brings the resumes of twice as long
#: before it, and a fire that begins as late as this after its slot asks the store instead.
RESUME_LAG = timedelta(seconds=60)
#: How far apart replicas' clocks may be: a resume stamped later than this ahead of ours (a
#: clock that ran ahead) says nothing of when it was made.
CLOCKS_APART = timedelta(seconds=1)
#: A resume read with the paused routines: its instant, and when the pause it ended began
#: (None: not known).
Resumed = tuple[datetime, datetime | None]
#: No resume read (the store keeps none, or none was made lately).
NO_RESUMES: Mapping[str, Resumed] = MappingProxyType({})


class PausedRead:
    """The paused routines (``names``), as a read begun at ``started`` (the wall clock)
    found them, and the routines resumed from ``2 * RESUME_LAG`` before it on, each with
    its latest resume (``resumed``; empty where the store cannot tell)."""

    __slots__ = ("names", "resumed", "started")

    def __init__(
        self,
        names: frozenset[str],
        started: datetime,
        resumed: Mapping[str, Resumed] = NO_RESUMES,
    ) -> None:
        self.names = names
        self.started = started
        self.resumed = resumed


class SharedRead:
    """One read of the paused routines under way, begun at ``started`` (the wall clock),
    whose answer (or fault) every waiter shares.

    The waiters park themselves rather than wait on a ``trio.Event``: 9,999 fires of one
    instant wait on the first one's read, and an event's wait is three coroutines and a
    closure each, all in flight at once (see sleepers.py).
    """

    def __init__(self, started: datetime) -> None:
        self.started = started
        self.result: PausedRead | None = None
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


_INSTANCES = itertools.count(1)


def new_replica_id() -> str:
    """``host:pid``; a second scheduler in one process gets ``host:pid.2``, and so on."""
    number = next(_INSTANCES)
    return default_replica() if number == 1 else f"{default_replica()}.{number}"


def takes_replica(store: Store) -> bool:
    return takes_keyword(store.claim, "replica")


def takes_keyword(call: Callable[..., object], name: str) -> bool:
    """Whether ``call`` takes the keyword ``name``: a store written before it does not."""
    try:
        parameters = inspect.signature(call).parameters
    except (TypeError, ValueError):
        return False
    return name in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


class Runtime:
    """The little the parts share, each field written by the one part named beside it.

    Everything else is owned by one part and reached through its methods (see
    docs/design.md, Runtime). The parts keep a reference to the record, never copies of
    ``now`` or ``routines``: a host (or a test) may swap the wall clock, and a reload swaps
    the routines, for every part at once.
    """

    __slots__ = (
        "default_grace",
        "in_flight",
        "loop_nursery",
        "metrics",
        "now",
        "nursery",
        "replica",
        "routines",
        "stopping",
    )

    def __init__(
        self,
        *,
        routines: dict[str, Routine],
        now: Callable[[], datetime],
        replica: str,
        metrics: Metrics,
        default_grace: float,
    ) -> None:
        #: The loaded routines: replaced whole by the reload, read by every part.
        self.routines = routines
        #: The wall clock (set by the host; never mixed with Trio's clock).
        self.now = now
        #: This scheduler's replica id, stored with every claim it makes (replicas.py).
        self.replica = replica
        self.metrics = metrics
        #: The grace of a stop without one, and how long a failed settle is retried.
        self.default_grace = default_grace
        #: A stop was requested: set by the scheduler's stop only, read by every loop.
        self.stopping = trio_util.AsyncBool(False)
        #: Fires (claim to settle) and wake-up turns in flight, and wake-up takes under way:
        #: counted by the fire path and the wake loop, read by the watch's heartbeat and the
        #: statistics (turns), and waited for by a stop's drain (both).
        self.in_flight = InFlight()
        #: The run's nursery (fires and runs started for a host) and the loops' nursery,
        #: while they run: set by the scheduler's run only.
        self.nursery: trio.Nursery | None = None
        self.loop_nursery: trio.Nursery | None = None

    def routine(self, name: str) -> Routine:
        """The loaded routine ``name``; raises :class:`UnknownRoutine` naming the others."""
        try:
            return self.routines[name]
        except KeyError:
            available = ", ".join(sorted(self.routines)) or "(none)"
            raise UnknownRoutine(
                f"unknown routine {name[:64]!r} (available: {available})"
            ) from None

    def host_now(self) -> datetime:
        """The wall clock read for a host's call (a fire, a wake-up, a pause): a naive reading
        is the clock's :class:`~trio_routines.errors.InvalidOption`, not the call's failure."""
        now = self.now()
        checked_now(now)
        return now

    def working(self) -> Working:
        """Count one fire (claim to settle) or wake-up turn as in flight."""
        return Working(self.in_flight)

    def taking(self) -> Taking:
        """Count a wake-up take as under way: a drain waits for it; no turn yet."""
        return Taking(self.in_flight)


class Shared(Generic[T]):
    """An attribute of the scheduler kept in its :class:`Runtime`, where the parts read it:
    ``scheduler.now = clock`` reaches every part, as a plain attribute did when the
    scheduler was one object."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, scheduler: Any, owner: type | None = None) -> T:
        value: T = getattr(scheduler._runtime, self._name)
        return value

    def __set__(self, scheduler: Any, value: T) -> None:
        setattr(scheduler._runtime, self._name, value)
