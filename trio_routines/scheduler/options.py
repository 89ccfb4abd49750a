"""The :class:`~trio_routines.Scheduler`'s arguments, checked as it is made: each numeric
option a number of seconds it can keep as a float and bound a wait with, the agent, the store,
the routines and the wake-up limits what they must be; else a one-line error naming it."""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable
from datetime import datetime

from ..checks import as_seconds
from ..checks import checked_seconds as checked_seconds
from ..errors import InvalidAgent, InvalidOption, InvalidRoutine
from ..routines import Routine
from ..wakelimits import WakeLimits
from ..wakeups import POLL_RANGE


def checked_poll(value: float) -> float:
    """``poll_interval`` if it is a number of seconds within :data:`POLL_RANGE`, else a
    one-line :class:`InvalidOption`."""
    seconds = checked_seconds("poll_interval", value, zero=False)
    low, high = POLL_RANGE
    if not low <= seconds <= high:
        raise InvalidOption(
            f"poll_interval must be between {low:g} and {high:g} seconds: {value!r}"
        )
    return seconds


def checked_clock(now: object) -> None:
    """The scheduler's ``now``: a callable, else a one-line :class:`InvalidOption`. (Not read
    here: a clock may need the Trio run the scheduler is made before, as virtual time does.)"""
    if not callable(now):
        raise InvalidOption(f"now must be a clock, a function giving aware datetimes: {now!r:.80}")


def checked_now(value: object) -> None:
    """A reading of the scheduler's ``now`` clock: an aware :class:`~datetime.datetime`, else a
    one-line :class:`InvalidOption` (read as :meth:`Scheduler.run` begins, and by each call a
    host makes that reads it: a naive instant would fail later, deep in the boot's cron
    arithmetic or the call's, without naming the clock)."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidOption(
            f"now must be a clock of aware datetimes (with their zone, e.g. UTC); it read {value!r}"
        )


def checked_agent(agent: object) -> None:
    """An agent: an object with an ``invoke`` method, else a one-line
    :class:`~trio_routines.errors.InvalidAgent` (a class given for its instance would fail
    every turn of every slot it claimed, each slot then spent)."""
    if isinstance(agent, type):
        raise InvalidAgent(
            f"agent must be an agent object, not a class: {agent.__name__}() builds one"
        )
    invoke = getattr(agent, "invoke", None)
    if not callable(invoke):
        raise InvalidAgent(f"agent has no invoke method: {agent!r:.100}")
    if inspect.iscoroutinefunction(invoke):
        # ``async def`` without ``yield``: every turn would fail on its coroutine.
        raise InvalidAgent(
            "agent's invoke must yield its events (an async generator: async def with yield), "
            f"not return them: {agent!r:.100}"
        )


def checked_store(store: object) -> None:
    """A store: an object that claims and settles, else a one-line :class:`InvalidOption`."""
    if not all(callable(getattr(store, call, None)) for call in ("claim", "settle")):
        raise InvalidOption(
            "store must be a store (DirectoryStore, PostgresStore, open_store(...), or one "
            f"keeping the contract of trio_routines.store): {store!r:.100}"
        )


def checked_routines(routines: Iterable[Routine]) -> dict[str, Routine]:
    """The routines by name: :class:`~trio_routines.routines.Routine` objects of distinct
    names, else a one-line :class:`~trio_routines.errors.InvalidRoutine`."""
    shape = f"routines must be a collection of Routine objects (routines=[...]): {routines!r:.100}"
    if isinstance(routines, Routine | str | bytes):
        raise InvalidRoutine(shape)
    try:
        each = iter(routines)
    except TypeError:  # None, a number
        raise InvalidRoutine(shape) from None
    loaded: dict[str, Routine] = {}
    for routine in each:
        if not isinstance(routine, Routine):
            raise InvalidRoutine(f"routines must be Routine objects: {routine!r:.100}")
        if routine.name in loaded:
            raise InvalidRoutine(f"two routines are named {routine.name!r}")
        loaded[routine.name] = routine
    return loaded


def checked_limits(limits: object) -> WakeLimits:
    """The wake-up guardrails: a :class:`~trio_routines.wakelimits.WakeLimits`, else a
    one-line :class:`InvalidOption`."""
    if not isinstance(limits, WakeLimits):
        raise InvalidOption(f"wake_limits must be a WakeLimits: {limits!r:.100}")
    return limits


def checked_grace(grace: float) -> float:
    """A stop's grace: a number of seconds (below 0 is none, ``inf`` waits for every turn),
    else a one-line :class:`InvalidOption`, raised before the stop changes anything."""
    seconds = as_seconds(grace)
    if math.isnan(seconds):
        raise InvalidOption(f"a stop's grace must be a number of seconds: {grace!r:.100}")
    return seconds
