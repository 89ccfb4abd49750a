"""Wake-ups asked for through the scheduler: by a host, or by an agent from inside its turn.

The store's guardrails apply as for every other way in (:mod:`trio_routines.wakeups`: the
minimum delay, the recurring limit, the cap per session), and every call has the deadline of
every other store call: the store timeout, and a stop's bound. A model-facing surface over
these is :mod:`trio_routines.tools`.

Each wake-up records who asked (:func:`trio_routines.origins.asked_by`): the turn running
in the calling task -- a routine's, or a wake-up's, one deeper in the chain -- or, outside
any turn, the embedding API.

The operator's limits on what turns schedule (:mod:`trio_routines.wakelimits`) go with each
request. For the rate limit a turn's request carries the session's wake-up turns of the last
hour, read from the store (:class:`~trio_routines.wakelimits.WakeTurns`, shared by every
replica) just before the add; the wake loop records each turn there before it starts. A turn
taken by another replica between that read and the add, or whose record is not yet written,
is not counted: at most one per replica in flight.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ..context import current_fire
from ..errors import InvalidWakeup, StateFault
from ..instants import shifted
from ..origins import asked_by
from ..records import Wakeup
from ..store import Store
from ..wakelimits import RATE_WINDOW, WakeLimits, WakeTurns, by_turn, model_asks, room_at
from ..wakeups import WakeupRequest, parse_delay
from ..wakeuptexts import bad_delay_reply
from .calls import StoreCalls
from .state import Runtime, log


class WakeupCalls:
    """Adding, listing and removing wake-ups, and recording wake-up turns, bounded (owns
    only the limits; handed the store, the runtime for its clock, and the store calls for
    their deadlines)."""

    def __init__(
        self, store: Store, runtime: Runtime, calls: StoreCalls, limits: WakeLimits
    ) -> None:
        self._store = store
        self._runtime = runtime
        self._calls = calls
        self.limits = limits

    async def add(
        self,
        session: str,
        prompt: str,
        *,
        delay: float | str | timedelta | None = None,
        fire_at: datetime | None = None,
        cron: str | None = None,
        tz: str | None = None,
        until: datetime | None = None,
    ) -> Wakeup:
        if sum(value is not None for value in (delay, fire_at, cron)) != 1:
            raise InvalidWakeup("give exactly one of delay, fire_at (once) or cron (recurring).")
        now = self._runtime.host_now()
        if delay is not None:
            seconds = delay.total_seconds() if isinstance(delay, timedelta) else parse_delay(delay)
            if seconds is None or seconds <= 0:
                raise InvalidWakeup(bad_delay_reply(delay))
            try:
                fire_at = now + timedelta(seconds=seconds)
            except OverflowError:
                raise InvalidWakeup("the delay is too far in the future.") from None
        if cron is None and tz is not None:
            raise InvalidWakeup("tz goes with cron only.")
        for what, instant in (("fire_at", fire_at), ("until", until)):
            if instant is not None and (
                not isinstance(instant, datetime) or instant.utcoffset() is None
            ):
                raise InvalidWakeup(f"{what} must be an aware instant (with its zone).")
        # The turn in progress, or a model's tool call outside our turns (a host's chat), or
        # the embedding API.
        origin = asked_by(current_fire(), model=model_asks())
        with self._calls.bounded():
            recent: tuple[datetime, ...] = ()
            if by_turn(origin) and self.limits.rate is not None:
                recent = await self._recent(session, now)
            request = WakeupRequest(
                session=session,
                prompt=prompt,
                fire_at=fire_at,
                cron=cron,
                tz=tz,
                origin=origin,
                limits=self.limits,
                recent=recent,
                until=until,
            )
            return await self._store.add_wakeup(request, now)
        raise self._calls.no_answer("the wake-up was not added")

    async def _recent(self, session: str, now: datetime) -> tuple[datetime, ...]:
        if not isinstance(self._store, WakeTurns):
            return ()
        # (held at the calendar's first instant: a wake-up stored due in year 1)
        return tuple(await self._store.wake_turns(session, shifted(now, -RATE_WINDOW)))

    async def room_at(self, session: str, at: datetime) -> datetime | None:
        """When a wake-up turn of ``session`` due at ``at`` may run, if the session has had
        the rate's turns in the hour up to ``at``; None when it has room
        (:func:`~trio_routines.wakelimits.room_at`). The rate holds when the turns come,
        whatever was weighed when they were asked for (a cron whose occurrences gather past
        the horizon the add weighs). A store keeping no turns has room; one that does not
        answer too, with a warning (a limit is no reason to lose a wake-up already taken)."""
        rate = self.limits.rate
        if rate is None or not isinstance(self._store, WakeTurns):
            return None
        try:
            with self._calls.bounded():
                return room_at(await self._recent(session, at), at, rate)
            raise self._calls.no_answer("the session's recent wake-up turns are unreadable")
        except StateFault as exc:
            log.warning("the rate of %r was not checked (its turn runs): %s", session, exc)
            return None

    async def note_turn(self, session: str, at: datetime) -> None:
        """Record a wake-up turn of ``session`` starting now, due at ``at``, for the rate
        limit (counted at the instant it was due, as the add weighs it: a late start, behind a
        poll or another turn, does not crowd the next hour); a fault is logged (the turn runs:
        a limit is no reason to lose a wake-up already taken)."""
        if not isinstance(self._store, WakeTurns):
            return
        try:
            with self._calls.bounded():
                await self._store.note_wake_turn(session, at)
                return
            raise self._calls.no_answer("the wake-up turn was not recorded")
        except StateFault as exc:
            log.warning("a wake-up turn of %r went unrecorded (rate limit): %s", session, exc)

    async def pending(self, session: str | None) -> list[Wakeup]:
        with self._calls.bounded():
            pending = await self._store.list_wakeups()
            return [w for w in pending if session is None or w.session == session]
        raise self._calls.no_answer("the wake-ups are unreadable")

    async def remove(self, wakeup_id: str, session: str) -> bool:
        if not isinstance(session, str) or not session:
            # The store would take None for "any session's": another session's wake-up gone.
            raise InvalidWakeup(
                f"remove_wakeup needs the session it is of, as text: {session!r:.80}"
            )
        with self._calls.bounded():
            return await self._store.remove_wakeup(wakeup_id, session)
        raise self._calls.no_answer("the wake-up was not removed")

    # -- the wake loop's -----------------------------------------------------------------

    async def take_due(self, now: datetime) -> Wakeup | None:
        with self._calls.bounded():
            return await self._store.take_due_wakeup(now)
        raise self._calls.no_answer("could not take a due wake-up")

    async def defer(self, wakeup: Wakeup, fire_at: datetime) -> bool:
        with self._calls.bounded():
            return await self._store.defer_wakeup(wakeup, fire_at)
        raise self._calls.no_answer(f"could not re-queue wake-up {wakeup.id}", change=True)

    async def count(self) -> int:
        """How many wake-ups are pending: the store's count where it offers one (PostgreSQL
        counts rows, not reading a prompt), else a full list (cheap for the state directory,
        which keeps its parse)."""
        count = getattr(self._store, "count_wakeups", None)
        with self._calls.bounded():
            if count is not None:
                counted: int = await count()
                return counted
            return len(await self._store.list_wakeups())
        raise self._calls.no_answer("the pending wake-ups could not be counted")
