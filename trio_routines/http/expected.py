"""The cron slots each status-page timeline expects, remembered from one render to the next.

A timeline shows at most :data:`~.views.MAX_MARKS` marks, and every slot of the span that is
older than a minute is a mark (fired, or missed), so only the newest :data:`COUNT` slots of
the span can be drawn: :func:`~trio_routines.cron.recent.newest_slots` finds those with a
bounded number of searches, whatever the cron's density.

Between two renders (the page polls every few seconds) at most a slot or two has passed, so
:class:`ExpectedSlots` keeps, per routine, what it found and the first slot after it; the next
render extends that with the slots since (usually none: no search at all) instead of searching
again. What it keeps is bounded by the routines loaded: :meth:`ExpectedSlots.keep_only` drops
the rest after each render.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from functools import partial

import attrs

from ..cron import next_run
from ..cron.recent import newest_slots
from ..errors import TrioRoutinesError
from ..routines import Routine
from .views import MAX_MARKS, SETTLING

# The marks drawn, plus the slots too fresh to be called missed (one a minute at most).
COUNT = MAX_MARKS + 1 + int(SETTLING.total_seconds() // 60)

Key = tuple[str, str | None, str]  # cron, zone, name (the seed of H fields)


@attrs.frozen
class _Found:
    start: datetime  # the span searched: [start, now]
    now: datetime
    slots: tuple[datetime, ...]  # its newest COUNT slots, oldest first
    following: datetime | None  # the first slot after now


def _fire_after(routine: Routine, after: datetime) -> datetime | None:
    assert routine.cron is not None
    try:
        return next_run(routine.cron, routine.tz, after, routine.name)
    except (TrioRoutinesError, ValueError, OverflowError):
        return None  # a cron that cannot be searched shows no expected slot


class ExpectedSlots:
    """Per routine, the newest :data:`COUNT` slots of its cron in a span, remembered."""

    def __init__(
        self, fire_after: Callable[[Routine, datetime], datetime | None] = _fire_after
    ) -> None:
        self._fire_after = fire_after
        self._found: dict[Key, _Found] = {}

    def slots(self, routine: Routine, start: datetime, now: datetime) -> tuple[datetime, ...]:
        """The newest :data:`COUNT` slots of ``routine``'s cron in ``[start, now]``."""
        if routine.cron is None:
            return ()
        key = (routine.cron, routine.tz, routine.name)
        fire_after = partial(self._fire_after, routine)
        known = self._found.get(key)
        found = self._extended(known, fire_after, start, now) if known is not None else None
        if found is None:
            slots = newest_slots(fire_after, start, now, COUNT)
            # The slot after the newest one of the span is the first after now.
            found = _Found(start, now, tuple(slots), fire_after(slots[-1] if slots else now))
        self._found[key] = found
        return tuple(slot for slot in found.slots if slot >= start)

    def _extended(
        self,
        known: _Found,
        fire_after: Callable[[datetime], datetime | None],
        start: datetime,
        now: datetime,
    ) -> _Found | None:
        """``known`` brought up to ``now``, or ``None`` when a new search is cheaper or due.

        The newest slots of a span, cut to a later start, are the newest of the shorter
        span; a span that starts earlier, or a clock that went back, needs a new search.
        """
        if start < known.start or now < known.now:
            return None
        added: list[datetime] = []
        following = known.following
        while following is not None and following <= now:
            if len(added) > COUNT:
                return None  # long unseen: the search is bounded, this walk is not
            added.append(following)
            following = fire_after(following)
        if not added:
            return attrs.evolve(known, now=now)
        return _Found(known.start, now, (*known.slots, *added)[-COUNT:], following)

    def keep_only(self, routines: Iterable[Routine]) -> None:
        """Forget the routines not in ``routines`` (removed, or changed since)."""
        wanted = {(r.cron, r.tz, r.name) for r in routines if r.cron is not None}
        for key in [key for key in self._found if key not in wanted]:
            del self._found[key]
