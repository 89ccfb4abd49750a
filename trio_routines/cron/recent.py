"""The newest few slots of a cron in a span, without walking every slot of the span.

The status page draws, per routine, at most its last 50 slots of the last 24 hours. Walking the
span forward from its start costs one ``next_run`` per slot: 1,440 for ``* * * * *``, all to
keep the last 50. A cron has no "previous slot" search, so :func:`newest_slots` halves the span
instead, newest half first:

    newest(lo, hi, n):
        first = the first slot at or after lo          # one search
        if there is none up to hi: nothing
        if hi - first spans at most n minutes: walk it  # at most n + 1 slots
        later = newest(middle, hi, n)
        if later has n: those
        else: newest(first, just before middle, n - len(later)) + later

A span with no slot costs one search, a short span at most ``n + 2``, and the halving goes
``log2(span / n)`` levels deep, so the searches are bounded by the count asked for and the
depth, whatever the cron's density: about ``2n`` for an every-minute cron over a day, never
near the 1,440 slots of the walk. Slots are whole minutes (the cron has no seconds), which
is what makes a span of ``n`` minutes hold at most ``n + 1`` of them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

MINUTE = timedelta(minutes=1)
_TICK = timedelta(milliseconds=1)  # slots are whole minutes: "just before" one


def newest_slots(
    fire_after: Callable[[datetime], datetime | None], lo: datetime, hi: datetime, n: int
) -> list[datetime]:
    """The newest ``n`` instants ``fire_after`` yields in ``[lo, hi]``, oldest first.

    ``fire_after(t)`` is the first slot strictly after ``t``, or ``None`` for none (for
    example ``functools.partial(next_run, cron, tz)`` with the ``after`` left open).
    """
    if n <= 0 or hi < lo:
        return []
    first = fire_after(lo - _TICK)
    if first is None or first > hi:
        return []
    return _newest_from(fire_after, first, hi, n)


def _newest_from(
    fire_after: Callable[[datetime], datetime | None], first: datetime, hi: datetime, n: int
) -> list[datetime]:
    """As :func:`newest_slots`, knowing that ``first`` is the first slot of the span."""
    if hi - first <= n * MINUTE:
        slots = [first]
        while (following := fire_after(slots[-1])) is not None and following <= hi:
            slots.append(following)
        return slots[-n:]
    middle = first + (hi - first) / 2
    later = newest_slots(fire_after, middle, hi, n)
    if len(later) >= n:
        return later[-n:]
    return _newest_from(fire_after, first, middle - _TICK, n - len(later)) + later
