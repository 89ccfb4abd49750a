"""Gaps: the slots a routine passed over, counted and named, so that none goes missing silently.

Between a routine's first claim and now, every slot of its cron is either claimed (a
:class:`~trio_routines.records.Fire` in its history) or inside a recorded
:class:`~trio_routines.records.Gap`, with a reason:

* ``overlap``: it passed while the routine's previous turn still ran (the loop arms the next
  slot after the turn ends, and never queues);
* ``paused``: the routine was paused (each refused slot, or, at a boot, those that passed
  before its resume, or since its pause began for one still paused);
* ``caught-up``: no scheduler ran (or its loop woke late: a suspended machine, a clock set
  forward), and the catch-up fired an earlier slot instead -- the catch-up fires the *oldest*
  missed slot within the window, once;
* ``late``: no scheduler ran, and the slot was older than the routine's catch-up window
  (``catchup: 2h``), so it was not fired;
* ``down``: no scheduler ran, and nothing was caught up: the routine wants no catch-up
  (``catchup: none``), it had never fired (a routine that never fired never back-fires;
  its slots count from when it was first armed, :func:`unfired_gaps`), or it was paused
  since (a routine still paused is not caught up);
* ``store``: the store failed or did not answer when the slot was to be claimed (recorded
  once it answers again, and only for slots that have no claim: see ``scheduler.gaps``);
* ``removed``: the routine was not loaded: a reload removed it, and a later one added it
  again (the reload records them as it arms it, and catches nothing up, as a reload never
  does; a boot that finds it back takes the slots for missed while no scheduler ran).

A gap is a range with its count -- not a record per slot -- and consecutive paused slots
extend one gap. This module is pure: counting slots, the boot's plan, and the rule every
store applies when it adds a gap (:func:`add_gap`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import attrs

from .cron import next_run
from .records import Gap, GapReason

#: Slots counted one by one in a gap; past this, the count is extrapolated (``estimated``).
#: A routine every minute down for a year has 525,600 slots: counting each (some 25 µs) would
#: stall a boot. The estimate is exact for a regular grid, rough for an irregular one.
COUNT_LIMIT = 2000
#: Gaps kept per routine, newest last; older ones are pruned as claims are.
KEEP_GAPS = 256
#: A slot this late is still on time, whatever the catch-up window: a loop that just woke,
#: a scheduler that started a few seconds after the minute.
ON_TIME = timedelta(seconds=60)
_MS = timedelta(milliseconds=1)


def passed_over(
    cron: str, tz: str | None, seed: str, after: datetime, upto: datetime, reason: GapReason
) -> Gap | None:
    """The gap of the slots ``s`` with ``after < s <= upto``, or None when there is none."""
    first = next_run(cron, tz, after, seed)
    if first is None or first > upto:
        return None
    count, last = 1, first
    while count < COUNT_LIMIT:
        following = next_run(cron, tz, last, seed)
        if following is None or following > upto:
            return Gap(first, last, count, reason)
        count, last = count + 1, following
    if (following := next_run(cron, tz, last, seed)) is None or following > upto:
        return Gap(first, last, count, reason)
    counted = last
    last = _last_slot(cron, tz, seed, counted, upto)
    rate = (count - 1) / max((counted - first).total_seconds(), 1.0)
    more = max(1, round((last - counted).total_seconds() * rate))
    return Gap(first, last, count + more, reason, estimated=True)


def _last_slot(cron: str, tz: str | None, seed: str, slot: datetime, upto: datetime) -> datetime:
    """The newest slot at or before ``upto``, given ``slot``, one at or before it (bisection:
    ``next_run`` never goes back as its start moves forward)."""
    low, high = slot, upto  # next_run(low) <= upto < next_run(high)
    while high - low > _MS:
        middle = low + (high - low) / 2
        found = next_run(cron, tz, middle, seed)
        if found is not None and found <= upto:
            low = found
        else:
            high = middle
    return low


def is_late(slot: datetime, now: datetime, catchup: float | None) -> bool:
    """Whether ``slot`` is too old to fire at ``now`` under a catch-up window of ``catchup``
    seconds (None: no window, any age fires; 0: ``none``). :data:`ON_TIME` is never late."""
    cutoff = window_start(now, catchup)
    return cutoff is not None and slot < cutoff


def window_start(now: datetime, catchup: float | None) -> datetime | None:
    """The oldest slot a catch-up window of ``catchup`` seconds fires at ``now``: None when
    any age fires (no window, or one reaching past the calendar's first day)."""
    if catchup is None:
        return None
    try:
        return now - max(timedelta(seconds=catchup), ON_TIME)
    except OverflowError:  # longer than the calendar holds (a timedelta's, or now's past)
        return None


def old_reason(catchup: float | None) -> GapReason:
    """How a slot too old to fire is recorded: ``down`` without catch-up, else ``late``."""
    return GapReason.DOWN if catchup == 0 else GapReason.LATE


@attrs.frozen
class BootPlan:
    """What a boot does for one routine: the first slot to arm (perhaps past: a catch-up),
    the gaps to record now, and what was missed while no scheduler ran (for the log)."""

    due: datetime | None
    gaps: tuple[Gap, ...] = ()
    missed: Gap | None = None


def plan_boot(
    cron: str,
    tz: str | None,
    seed: str,
    *,
    accounted: datetime,
    now: datetime,
    resumed: datetime | None = None,
    paused: bool = False,
    catchup: float | None = None,
    paused_since: datetime | None = None,
    resumed_pause_since: datetime | None = None,
) -> BootPlan:
    """Plan a routine's first slot after a boot, and the gaps since ``accounted``.

    ``accounted``: every slot up to it is claimed or in a gap (the newest claim's stamp, or the
    newest gap's last slot if later). ``resumed``: the routine's latest resume. Slots before a
    resume are ``paused``, but those before the pause it ended began (``resumed_pause_since``,
    when known), which are ``down``; so is every slot of a routine paused now, but those
    before its pause began (``paused_since``, when known), which are ``down`` too. Of those
    that passed while no scheduler ran, the ones older than the window are recorded now
    (``late``, or ``down`` for ``catchup: none``) and the oldest of the rest is the catch-up;
    the slots after it are recorded by the loop once the catch-up has fired (``caught-up``:
    see ``scheduler.loops``), as the slots a late fire passed over always are.
    """
    gaps, accounted = _paused_until_resumed(
        cron, tz, seed, accounted, now, resumed, resumed_pause_since
    )
    if paused:
        gaps += _paused_now(cron, tz, seed, accounted, now, paused_since)
        return BootPlan(next_run(cron, tz, max(accounted, now), seed), tuple(gaps))
    missed = passed_over(cron, tz, seed, accounted, now, GapReason.CAUGHT_UP)
    if missed is None:
        return BootPlan(next_run(cron, tz, accounted, seed), tuple(gaps))
    cutoff = window_start(now, catchup)
    if cutoff is not None:
        old = passed_over(cron, tz, seed, accounted, cutoff - _MS, old_reason(catchup))
        if old is not None:
            gaps.append(old)
            accounted = old.last
    # The oldest slot within the window is the catch-up; with none left, the next slot.
    return BootPlan(next_run(cron, tz, accounted, seed), tuple(gaps), missed)


def _paused_now(
    cron: str,
    tz: str | None,
    seed: str,
    accounted: datetime,
    now: datetime,
    since: datetime | None,
) -> list[Gap]:
    """The gaps of a routine paused now: the slots before its pause began (``since``, when
    known) ``down`` -- no scheduler ran then, and none is caught up while it is paused --
    and the rest ``paused``. A pause stamped after ``now`` (by a clock that ran ahead) says
    nothing of when it began: every slot is taken for paused, as with none known."""
    return _down_then_paused(cron, tz, seed, accounted, now, since)


def _down_then_paused(
    cron: str,
    tz: str | None,
    seed: str,
    accounted: datetime,
    until: datetime,
    since: datetime | None,
) -> list[Gap]:
    """The slots after ``accounted`` up to ``until`` of a pause that began at ``since``
    (None: unknown): ``down`` before it began, when it began after ``accounted`` and by
    ``until``, and ``paused`` from then on."""
    gaps = []
    if since is not None and accounted < since <= until:
        gap = passed_over(cron, tz, seed, accounted, since - _MS, GapReason.DOWN)
        if gap is not None:
            gaps.append(gap)
        accounted = since - _MS
    gap = passed_over(cron, tz, seed, accounted, until, GapReason.PAUSED)
    if gap is not None:
        gaps.append(gap)
    return gaps


def _paused_until_resumed(
    cron: str,
    tz: str | None,
    seed: str,
    accounted: datetime,
    now: datetime,
    resumed: datetime | None,
    pause_since: datetime | None = None,
) -> tuple[list[Gap], datetime]:
    """The gaps of the slots before the latest resume (if any): ``paused``, but ``down``
    before the pause it ended began (``pause_since``, when known); and what is accounted for
    after it. A resume stamped after ``now`` (by a clock that ran ahead) is taken as made
    now: it holds nothing back beyond it."""
    if resumed is None or resumed <= accounted:
        return [], accounted
    resumed = min(resumed, now)
    gaps = _down_then_paused(cron, tz, seed, accounted, resumed, pause_since)
    return gaps, max(resumed, accounted)


def unfired_gaps(
    cron: str,
    tz: str | None,
    seed: str,
    *,
    accounted: datetime,
    now: datetime,
    resumed: datetime | None = None,
    paused: bool = False,
    paused_since: datetime | None = None,
    resumed_pause_since: datetime | None = None,
) -> tuple[Gap, ...]:
    """The gaps a boot records for a routine that never fired (no claim), and fires nothing.

    ``accounted``: when the routine was first armed, or the newest gap's last slot if later.
    It is not caught up -- a routine that never fired never back-fires, as on a first boot --
    so every slot after ``accounted`` up to ``now`` is ``down``; ``paused`` before its latest
    resume from the pause it ended (``resumed_pause_since``; unknown: all of them), and,
    while it is paused now, since its pause began (``paused_since``; unknown: all of them).
    """
    gaps, accounted = _paused_until_resumed(
        cron, tz, seed, accounted, now, resumed, resumed_pause_since
    )
    if paused:
        return (*gaps, *_paused_now(cron, tz, seed, accounted, now, paused_since))
    gap = passed_over(cron, tz, seed, accounted, now, GapReason.DOWN)
    if gap is not None:
        gaps.append(gap)
    return tuple(gaps)


def add_gap(
    gaps: Sequence[Gap], gap: Gap, extends: datetime | None = None, keep: int = KEEP_GAPS
) -> list[Gap] | None:
    """A routine's gaps (oldest first) once ``gap`` is added; None when nothing changes.

    * A gap ending at or before the newest gap's last slot is already accounted for (another
      replica recorded it, or this one before a restart): nothing changes.
    * With ``extends``: when the newest gap has the same reason and ends at ``extends`` (the
      slot before ``gap``'s first, as the caller knows it), ``gap`` is added to it -- one
      record for a routine paused all week.
    * A ``store`` gap is recorded late (once the store answers again), so it may be older
      than the newest: it takes its place in slot order unless a retained gap overlaps it.
    * A gap of the newest's reason that holds all of the newest and ends later (another
      replica counted from an older view of the same run) replaces it: each slot is in one
      record, and the count is the longer gap's own.
    * Beyond ``keep`` gaps, the oldest are dropped.
    """
    newest = gaps[-1] if gaps else None
    if newest is not None and gap.last <= newest.last:
        if gap.reason is not GapReason.STORE or any(_overlap(g, gap) for g in gaps):
            return None
        placed = sorted([*gaps, gap], key=lambda g: g.last)[-keep:]
        return placed if gap in placed else None
    if newest is not None and gap.first <= newest.first and gap.reason is newest.reason:
        return [*gaps[:-1], gap]
    if newest is not None and extends_newest(gaps, gap, extends):
        merged = attrs.evolve(
            newest,
            last=gap.last,
            count=newest.count + gap.count,
            estimated=newest.estimated or gap.estimated,
        )
        return [*gaps[:-1], merged]
    return [*gaps, gap][-keep:]


def _overlap(one: Gap, other: Gap) -> bool:
    return one.first <= other.last and other.first <= one.last


def extends_newest(gaps: Sequence[Gap], gap: Gap, extends: datetime | None) -> bool:
    """Whether :func:`add_gap` adds ``gap`` to the newest of ``gaps`` rather than after it."""
    if not gaps or extends is None:
        return False
    newest = gaps[-1]
    return newest.reason is gap.reason and newest.last == extends and gap.last > newest.last
