"""Limits on turns an agent schedules for itself: a rate per session, a chain depth, the
lifetime of a recurring wake-up, and the room a store has for pending wake-ups.

The rules here are pure, like :mod:`trio_routines.wakeups` (which applies them when a wake-up
is added): every store gets the same answer. The texts are model-facing: the agent's ``wake``
tool returns them, so each says which limit was hit and when, if ever, it resets.

Rate (``rate`` turns per session in any rolling hour, default :data:`DEFAULT_RATE`). Only a
wake-up asked for by a turn (its origin a routine's or a wake-up's turn), or by a model's
tool call outside one (:func:`~trio_routines.tools.call_tool` in a host's own turn: origin
``model``, see :func:`model_asking`), is ever refused by it; an operator's (HTTP, command
line, the API outside a turn) never is, but everything the session does counts. Counted when a
turn asks, at ``now``, for a wake-up first due at ``F``:

* the session's wake-up turns run in the hour before ``now``, each counted at the instant it
  was due (each store keeps them, bounded to that hour: :class:`WakeTurns`);
* the session's pending wake-ups, whoever asked: a one-shot at its time, a recurring one at
  each of its occurrences (up to its ``until``);
* the new wake-up's own occurrences.

It is refused when some hour-long window holding one of the new wake-up's occurrences would
hold more than ``rate`` of these. A one-shot is checked at its time; a recurring one over its
first :data:`RATE_HORIZON`, eight days: every hour of every day of the week, where the
session's other recurring wake-ups meet it (two hours were checked before, and three crons
of the same evening hour, each added in the morning, ran 18 turns in that hour every night).
A cron that fires only in some months or on some days of the month is weighed over its first
eight days alone. So an agent can neither re-schedule itself every minute for long nor queue
a burst ahead of time. And what no add weighs (occurrences gathered past the horizon) is
held when the turns come: a turn-set wake-up due while its session has had ``rate`` turns
in the hour waits for room, or, a recurring one's occurrence, is not run (the wake loop,
``WakeupCalls.room_at``). Counting each turn at its due instant, as the add weighs it, a
turn started late (behind a poll, or another turn) does not crowd out the next hour's; and
a backlog (turns held up behind a long one) may run its turns closer together than the rate,
as many as were due in their hours, never more.

Depth (default :data:`DEFAULT_DEPTH`): a wake-up whose origin's chain depth -- turns each
set by the turn of a wake-up before -- exceeds it is refused. It never resets with time: a
wake-up set by a routine's turn or by an operator starts a new chain.

Lifetime (default :data:`DEFAULT_LIFETIME`), for every recurring wake-up, whoever asked: it
ends at its ``until``; one added without gets ``until`` = added + lifetime, and an ``until``
past that, or before its first occurrence, is refused. Each occurrence up to the ``until``
fires; when the next would come after it the entry is removed, logged. One found past its
``until`` when it comes due (:func:`expired`) is removed the same way, never fired.

Room (:data:`MAX_PENDING` wake-ups in a store, every session's, their text -- sessions,
prompts, crons and time zones -- :data:`MAX_PENDING_TEXT` bytes in all), whoever asks: the
disk's and the memory's bound, not a guardrail on agents. Each store counts what it holds
under the lock of its adds and hands it to :func:`~trio_routines.wakeups.plan_add`, which
checks it last (:func:`check_room`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

import attrs

from .cron import parse_cron, wakeup_seed
from .errors import InvalidOption, InvalidWakeup
from .instants import format_iso, shifted, truncate_ms
from .records import Origin, OriginKind, Wakeup

#: The rolling window of the rate limit (each store keeps this much of each session's turns).
RATE_WINDOW = timedelta(hours=1)
#: Wake-up turns a session may have in any rolling hour, by default.
DEFAULT_RATE = 12
#: The deepest chain of wake-ups, each set by the turn of the one before, by default.
DEFAULT_DEPTH = 16
#: The longest a recurring wake-up lives (its ``until`` at most this after it was added).
DEFAULT_LIFETIME = timedelta(days=30)
#: The longest lifetime an operator may set: far past any session, well inside the calendar.
MAX_LIFETIME = timedelta(days=36_500)
#: How late after its ``until`` a recurring wake-up's last occurrence may still be taken.
EXPIRY_GRACE = timedelta(minutes=10)
#: How far ahead a new recurring wake-up's occurrences are weighed against the rate: a week
#: and a day, so that every hour of every day of the week meets the session's other
#: recurring wake-ups (whose occurrences the rate itself keeps sparse: a few thousand at most).
RATE_HORIZON = timedelta(days=8)
#: The most turns a store keeps for one session (far more than any rate allows).
MAX_TURNS_KEPT = 1000
#: The most wake-ups one store keeps pending, every session's: an add past it is refused,
#: whoever asks (sessions are many, and each may have
#: :data:`~trio_routines.wakeups.MAX_PENDING_PER_SESSION`).
MAX_PENDING = 100_000
#: The most bytes (UTF-8) the text of one store's pending wake-ups holds in all (32 MiB): their
#: sessions, prompts, crons and time zones (:func:`text_bytes`). An add that would pass it is
#: refused, whoever asks. With :data:`MAX_PENDING`, what the pending wake-ups take on disk and
#: in a serving process's memory is bounded.
MAX_PENDING_TEXT = 32 * 1024 * 1024
_TURNS = (OriginKind.ROUTINE, OriginKind.WAKEUP, OriginKind.MODEL)


def _positive_or_none(_i: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InvalidOption(f"{attribute.name} must be a positive integer or None, got {value!r}")


def _lifetime(_i: object, _a: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, timedelta) or not RATE_WINDOW <= value <= MAX_LIFETIME:
        raise InvalidOption(
            f"lifetime must be a timedelta of an hour to {MAX_LIFETIME.days} days, got {value!r}"
        )


@attrs.frozen(kw_only=True)
class WakeLimits:
    """The operator's limits on self-scheduled turns (each rule is stated in
    :mod:`trio_routines.wakelimits`).

    ``rate``: wake-up turns a session may have in any rolling hour (None: no limit);
    ``depth``: the deepest chain a turn may extend (None: no limit); ``lifetime``: the
    longest a recurring wake-up lives, and its ``until`` when none is given.
    """

    rate: int | None = attrs.field(default=DEFAULT_RATE, validator=_positive_or_none)
    depth: int | None = attrs.field(default=DEFAULT_DEPTH, validator=_positive_or_none)
    lifetime: timedelta = attrs.field(default=DEFAULT_LIFETIME, validator=_lifetime)


#: The limits a scheduler applies unless given others.
DEFAULT_LIMITS = WakeLimits()


@runtime_checkable
class WakeTurns(Protocol):
    """The optional part of the store contract that keeps each session's recent wake-up
    turns, shared by every replica, for the rate limit. A store without it counts only the
    pending wake-ups."""

    async def note_wake_turn(self, session: str, at: datetime) -> None:
        """Record a wake-up turn of ``session`` due at ``at``, run now (durable before it
        returns); turns older than :data:`RATE_WINDOW` before ``at`` may be forgotten."""
        ...

    async def wake_turns(self, session: str, since: datetime) -> list[datetime]:
        """The recorded wake-up turns of ``session`` after ``since``, oldest first."""
        ...


def kept_turns(turns: Iterable[datetime], at: datetime) -> list[datetime]:
    """A session's recorded turns once one at ``at`` is added: oldest first, only those after
    :func:`turns_kept_after` ``at``, at most :data:`MAX_TURNS_KEPT` (the newest). The memory
    store and the state directory keep a session's turns by this rule; PostgreSQL keeps every
    turn of the window (a row each), which answers the same for any rate up to
    :data:`MAX_TURNS_KEPT`."""
    at = truncate_ms(at)
    since = turns_kept_after(at)
    return [t for t in sorted([*turns, at]) if t > since][-MAX_TURNS_KEPT:]


def turns_kept_after(at: datetime) -> datetime:
    """The instant after which the recorded turns of every session are kept once one at
    ``at`` is recorded: the :data:`RATE_WINDOW` before it, and any later (a wall clock set
    back leaves turns ahead of it, which count again once it gets there). Kept by the
    window of the newest turn instead, a turn recorded behind it would be dropped as it is
    written, and the rate would count nothing until the clock came back to the newest."""
    return shifted(truncate_ms(at), -RATE_WINDOW)  # (a stored instant of year 1: no crash)


def by_turn(origin: Origin | None) -> bool:
    """Whether a turn (a routine's, or a wake-up's) or a model outside one (origin
    ``model``) asked: only those are ever refused by the rate."""
    return origin is not None and origin.kind in _TURNS


_model_asks: ContextVar[bool] = ContextVar("trio_routines_model_asks", default=False)


@contextmanager
def model_asking() -> Iterator[None]:
    """For the block, the wake-ups this task adds are a model's asking (a tool call), even
    outside any turn of ours: a host's own turn (a chat) hands its model the same tools, and
    their limits are the model's, not the operator's: what it adds outside a turn has the
    origin ``model`` (:func:`~trio_routines.origins.asked_by`). :func:`~trio_routines.tools.
    call_tool` enters it around every call."""
    token = _model_asks.set(True)
    try:
        yield
    finally:
        _model_asks.reset(token)


def model_asks() -> bool:
    """Whether this task is in :func:`model_asking`'s block."""
    return _model_asks.get()


def room_at(ran: Iterable[datetime], at: datetime, rate: int | None) -> datetime | None:
    """When a wake-up turn due at ``at`` may run, if the session's turns ``ran`` (each at
    the instant it was due) number ``rate`` or more in the hour up to it (after ``at`` less
    an hour, up to ``at``): the instant the oldest of the newest ``rate`` leaves that hour.
    None when there is room, or no rate. The add's windows, held as the turns come."""
    if rate is None:
        return None
    since = shifted(at, -RATE_WINDOW)  # (a wake-up stored due in year 1: no crash)
    counted = sorted(t for t in ran if since < t <= at)
    return shifted(counted[-rate], RATE_WINDOW) if len(counted) >= rate else None


def check_depth(origin: Origin | None, limits: WakeLimits) -> None:
    """Refuse a wake-up whose chain would be deeper than ``limits.depth``."""
    if limits.depth is None or origin is None or origin.depth <= limits.depth:
        return
    raise InvalidWakeup(
        f"chain-depth limit — this wake-up would be number {origin.depth} in a chain of "
        f"wake-ups, each set by the turn of the one before (at most {limits.depth}). "
        "This limit does not reset with time: a wake-up set by a routine's turn or by the "
        "operator starts a new chain."
    )


def occurrences(wakeup: Wakeup, start: datetime, end: datetime) -> Iterator[datetime]:
    """The instants in ``[start, end)`` at which ``wakeup`` is due (a recurring one's
    occurrences from its ``fire_at``, up to its ``until``)."""
    if wakeup.cron is None:
        if start <= wakeup.fire_at < end:
            yield wakeup.fire_at
        return
    schedule = parse_cron(wakeup.cron, wakeup.tz, wakeup_seed(wakeup.session, wakeup.id))
    at: datetime | None = wakeup.fire_at
    while at is not None and at < start:
        at = schedule.next_after(max(at, start - timedelta(minutes=1)))
    while at is not None and at < end and (wakeup.until is None or at <= wakeup.until):
        yield at
        at = schedule.next_after(at)


def check_rate(
    pending: Sequence[Wakeup],
    new: Wakeup,
    recent: Iterable[datetime],
    now: datetime,
    limits: WakeLimits,
) -> None:
    """Refuse ``new`` (asked for by a turn, or by a model outside one) when a rolling hour
    around one of its occurrences would hold more than ``limits.rate`` wake-up turns of its
    session (the rate rule)."""
    if limits.rate is None or not by_turn(new.origin):
        return
    start = now - RATE_WINDOW
    ran = sorted(t for t in recent if start < t <= now)
    # Near the calendar's last instant each bound is held there (shifted), never past it.
    horizon = shifted(new.fire_at, RATE_HORIZON) if new.recurring else new.fire_at
    mine = list(occurrences(new, now, shifted(horizon, timedelta(milliseconds=1))))
    lo, hi = shifted(mine[0], -RATE_WINDOW), shifted(mine[-1], RATE_WINDOW)
    queued = [
        at
        for w in pending
        if w.session == new.session
        for at in occurrences(w, max(lo, now - RATE_WINDOW), hi)
    ]
    points = sorted([*ran, *queued, *mine])
    for at in mine:
        # Each window holding ``at`` holds no more than the one starting at its first point.
        lowest = bisect.bisect_right(points, at - RATE_WINDOW)
        for index in range(lowest, bisect.bisect_right(points, at)):
            end = bisect.bisect_left(points, shifted(points[index], RATE_WINDOW))
            if end - index > limits.rate:
                raise InvalidWakeup(_rate_text(points[index:end], ran, now, limits.rate))


def _rate_text(held: list[datetime], ran: list[datetime], now: datetime, rate: int) -> str:
    past = [p for p in held if p in ran and p <= now]
    over = len(held) - rate
    head = (
        f"rate limit — this session would have {len(held)} wake-up turns within one hour "
        f"(at most {rate} in any rolling hour, counting the turns run in the last hour and "
        "the wake-ups pending)"
    )
    if len(past) >= over:
        resets = past[over - 1] + RATE_WINDOW
        return (
            f"{head}; it resets at {format_iso(resets)}, when the turns run before then "
            "leave the hour. Or cancel a pending wake-up, or schedule this one later."
        )
    return (
        f"{head}; waiting does not make room: cancel a pending wake-up, or schedule this one later."
    )


def check_room(stored: tuple[int, int], wakeup: Wakeup) -> None:
    """:class:`InvalidWakeup` when the store has no room for one more pending wake-up,
    ``wakeup``: it holds ``stored`` (how many pending, their text's bytes)."""
    count, text = stored
    if count >= MAX_PENDING:
        raise InvalidWakeup(
            f"the store holds {MAX_PENDING:,} pending wake-ups, the most it keeps — none can be "
            "added until some fire or are cancelled."
        )
    size = text_bytes(wakeup)
    if text + size > MAX_PENDING_TEXT:
        raise InvalidWakeup(
            f"the pending wake-ups' text fills the store's room ({MAX_PENDING_TEXT // 2**20} "
            f"MiB in all: their sessions, prompts and schedules) — this wake-up of {size:,} "
            "bytes cannot be added until some fire or are cancelled."
        )


#: A wake-up's fields that take the store's room (:func:`text_bytes`).
ROOM_FIELDS = ("session", "prompt", "cron", "tz")


def text_bytes(wakeup: Wakeup) -> int:
    """What ``wakeup`` takes of the store's room: the UTF-8 bytes of its session, prompt, cron
    and time zone, the text an add makes the store keep (storable text: checked before)."""
    texts = (getattr(wakeup, field) for field in ROOM_FIELDS)
    return sum(len(text.encode("utf-8")) for text in texts if text is not None)


def plan_until(
    cron: str | None, until: datetime | None, first: datetime, now: datetime, limits: WakeLimits
) -> datetime | None:
    """The ``until`` a new wake-up is stored with: none for a one-shot; for a recurring one
    the given instant, or ``now + limits.lifetime`` -- or InvalidWakeup."""
    if cron is None:
        if until is not None:
            raise InvalidWakeup("until goes with a recurring wake-up (cron) only.")
        return None
    latest = now + limits.lifetime
    if until is None:
        if latest < first:
            raise InvalidWakeup(
                f"its first occurrence ({format_iso(first)}) comes after the longest a "
                f"recurring wake-up lives ({_days(limits.lifetime)}, until "
                f"{format_iso(latest)}): it would never fire."
            )
        return latest.replace(microsecond=0)  # to the second: shown in listings
    if until > latest:
        raise InvalidWakeup(
            f"until is too far off — a recurring wake-up lives at most {_days(limits.lifetime)} "
            f"(until {format_iso(latest)} at the latest)."
        )
    if until < first:
        raise InvalidWakeup(
            f"until ({format_iso(until)}) comes before the first occurrence "
            f"({format_iso(first)}): it would never fire."
        )
    return until


def _days(span: timedelta) -> str:
    if span % timedelta(days=1):
        hours = span / timedelta(hours=1)
        return "1 hour" if hours == 1 else f"{hours:g} hours"
    days = span // timedelta(days=1)
    return "1 day" if days == 1 else f"{days} days"


def expired(wakeup: Wakeup, now: datetime) -> bool:
    """Whether ``wakeup``, due at ``now``, is past its ``until``: removed, never fired.

    That is an occurrence after the ``until`` (one written by a reader that does not know
    it), or one taken more than :data:`EXPIRY_GRACE` after the ``until`` (no scheduler ran
    then): the last occurrence still fires when a poll takes it a little late."""
    if wakeup.until is None:
        return False
    return wakeup.fire_at > wakeup.until or now > shifted(wakeup.until, EXPIRY_GRACE)


def expired_line(wakeup: Wakeup) -> str:
    """The log line of an expired wake-up removed."""
    return (
        f"wake-up {wakeup.id} of session {wakeup.session!r} (cron {wakeup.cron!r}) expired at "
        f"{format_iso(wakeup.until) if wakeup.until else '?'}: removed, not fired"
    )
