"""What the status page shows, as plain values: the views :mod:`.page` fills from a snapshot,
and one routine's timeline marks computed from its slots, claims and gaps.

No markup here (that is :mod:`.render`'s) and no clock, store or request read (that is
:mod:`.page`'s): :func:`timeline` decides which slot is drawn as what -- a claim's outcome, or
a "missed" slot, with the recorded gap it lies in -- from values alone.

The timeline of a routine spans at most the last 24 hours, and at most its last 50 slots, fitted
to the marks it has (its caption says since when). Each slot the cron produced in that span is
one mark: a claim's outcome, or a hollow "missed" mark where no claim exists, which says why
when the slot lies in a recorded gap (overlap, downtime caught up or too late, paused, a store
that did not answer: :mod:`trio_routines.gaps`). Slots older than the routine's oldest kept
claim are not counted as missed: nothing is known of them.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta

import attrs

from ..records import Fire, Gap, Origin, OriginKind, Wakeup
from ..replicas import ReplicaInfo

WINDOW = timedelta(hours=24)
MAX_MARKS = 50  # slots on one timeline, and fires on the strip
SETTLING = timedelta(minutes=1)  # a slot this recent without a claim is not missed yet


@attrs.frozen
class Mark:
    """One slot on a timeline."""

    slot: datetime
    kind: str  # a key of KINDS
    fire: Fire | None = None
    gap: Gap | None = None  # for a missed slot: the recorded gap it lies in, if any


@attrs.frozen
class RoutineView:
    name: str
    cron: str | None
    tz: str | None
    resolved: str | None  # the cron with hashed fields resolved, when it differs
    next_due: datetime | None
    paused: bool
    marks: tuple[Mark, ...]  # oldest first
    recent: tuple[Fire, ...]  # the last fires, oldest first
    since: datetime  # where the timeline starts
    problem: str | None = None  # the history could not be read
    external: bool = False  # fired by an external clock: no loop of ours waits for next_due
    spent: str = ""  # what its turns of the last 24 hours spent, as text ("" for nothing)
    budget: str = ""  # its budget's state, as text ("" for no budget)
    over_budget: bool = False  # a budget is spent: its slots are skipped


@attrs.frozen
class InFlight:
    session: str
    started: datetime  # to the second: a refresh changes nothing while the turn runs


@attrs.frozen
class WakeupGroup:
    session: str
    count: int
    next_at: datetime
    origins: tuple[tuple[str, int], ...] = ()  # who asked (a label, unescaped) and how often
    deepest: int = 0  # the deepest chain of turns among them
    over_budget: str = ""  # why its wake-ups are dropped now (its session's budget), if so
    until: datetime | None = None  # when the last of its recurring wake-ups expires
    spent: str = ""  # what its wake-up turns spent in the last 24 hours (the ledger), if any


@attrs.frozen
class PageView:
    now: datetime
    routines: tuple[RoutineView, ...]
    in_flight: tuple[InFlight, ...]
    wakeups: tuple[WakeupGroup, ...]
    clock_jumps: int
    store: str
    stopping: bool
    poll: float  # seconds between refreshes
    wakeups_problem: str | None = None
    replicas: tuple[ReplicaInfo, ...] = ()  # the live members of the store
    replicas_problem: str | None = None
    #: The routine files the last reload could not load (:class:`Statistics`'s).
    broken_files: tuple[str, ...] = ()
    #: The sessions with wake-ups the page leaves out (past :data:`SESSIONS_SHOWN`), and
    #: how many wake-ups they hold.
    wakeups_left_out: tuple[int, int] = (0, 0)


def wakeup_group(session: str, pending: list[Wakeup]) -> WakeupGroup:
    """A session's pending wake-ups: how many, the next, who asked (by kind, a routine by
    name) and the deepest chain of turns -- a runaway agent's wake-ups show a growing one."""
    asked = Counter(asked_by(w.origin) for w in pending)
    return WakeupGroup(
        session,
        len(pending),
        min(w.fire_at for w in pending),
        origins=tuple(sorted(asked.items())),
        deepest=max((w.origin.depth for w in pending if w.origin is not None), default=0),
        until=max((w.until for w in pending if w.until is not None), default=None),
    )


def asked_by(origin: Origin | None) -> str:
    """Who asked for a wake-up, as the page counts them: by kind, a routine by name."""
    if origin is None:
        return "unknown"
    if origin.kind is OriginKind.ROUTINE:
        return f"routine {origin.routine}"
    return "wake-up" if origin.kind is OriginKind.WAKEUP else origin.kind.value


#: The most sessions of pending wake-ups the page shows (those due soonest): a store holding
#: 200,000 wake-ups made a page of 42 MB, each render seconds of CPU beside the event loop.
SESSIONS_SHOWN = 200


def soonest_sessions(groups: dict[str, list[Wakeup]]) -> tuple[list[str], tuple[int, int]]:
    """The :data:`SESSIONS_SHOWN` sessions whose next wake-up is soonest, by name; and the
    sessions and wake-ups left out."""
    if len(groups) <= SESSIONS_SHOWN:
        return sorted(groups), (0, 0)
    nexts = {session: min(w.fire_at for w in pending) for session, pending in groups.items()}
    shown = heapq.nsmallest(SESSIONS_SHOWN, nexts, key=lambda s: (nexts[s], s))
    left = sum(len(pending) for pending in groups.values()) - sum(len(groups[s]) for s in shown)
    return sorted(shown), (len(groups) - len(shown), left)


def axis_end(now: datetime) -> datetime:
    """Where timelines end: the end of the current minute, so that a refresh within a minute
    draws every mark where it was (and the page's version does not change for nothing)."""
    return now.replace(second=0, microsecond=0) + timedelta(minutes=1)


def fire_kind(fire: Fire) -> str:
    return fire.outcome.value if fire.outcome is not None else "running"


def timeline(
    expected: Sequence[datetime],
    fires: Sequence[Fire],
    now: datetime,
    gaps: Sequence[Gap] = (),
) -> tuple[tuple[Mark, ...], datetime]:
    """The marks of one routine's timeline and where it starts.

    ``expected`` are the cron's slots in the last 24 hours, oldest first; ``fires`` the kept
    claims, oldest first. Claims off the expected list (an on-demand routine's, or a fire of a
    slot before a schedule change) are drawn too.
    """
    end = axis_end(now)
    start = end - WINDOW
    # Within the axis: a claim of a slot after its end (stamped by a clock that ran ahead, or
    # planted, up to the calendar's last minute) is not drawn, nor made the span's start.
    by_slot = {fire.slot: fire for fire in fires if start <= fire.slot <= end}
    known_from = fires[0].slot if fires else None
    marks: dict[datetime, Mark] = {}
    for slot in expected:
        if slot < start:
            continue  # a slot before the span, its claim too (an expected list of "24 h ago")
        fire = by_slot.get(slot)
        if fire is not None:
            marks[slot] = Mark(slot, fire_kind(fire), fire)
        elif known_from is not None and known_from <= slot <= now - SETTLING:
            within = next((g for g in gaps if g.first <= slot <= g.last), None)
            marks[slot] = Mark(slot, "missed", gap=within)
    for slot, fire in by_slot.items():
        marks.setdefault(slot, Mark(slot, fire_kind(fire), fire))
    kept = sorted(marks.values(), key=lambda mark: mark.slot)[-MAX_MARKS:]
    if kept:
        # Fit the span to what there is to show, with a little room before the first mark.
        first = kept[0].slot
        start = max(start, first - (end - first) / 20)
    return tuple(kept), start
