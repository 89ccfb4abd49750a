"""Wake-ups asked for through the scheduler: by a host, or by an agent from inside its turn.

The store's guardrails apply as for every other way in (:mod:`trio_routines.wakeups`: the
minimum delay, the recurring limit, the cap per session), and every call has the deadline of
every other store call: the store timeout, and a stop's bound. A model-facing surface over
these is :mod:`trio_routines.tools`.

Each wake-up records who asked (:func:`trio_routines.wakeups.asked_by`): the turn running
in the calling task -- a routine's, or a wake-up's, one deeper in the chain -- or, outside
any turn, the embedding API.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ..context import current_fire
from ..errors import InvalidWakeup
from ..records import Wakeup
from ..store import Store
from ..wakeups import WakeupRequest, asked_by, bad_delay_reply, parse_delay
from .calls import StoreCalls
from .state import Runtime


class WakeupCalls:
    """Adding, listing and removing wake-ups, bounded (owns nothing; handed the store, the
    runtime for its clock, and the store calls for their deadlines)."""

    def __init__(self, store: Store, runtime: Runtime, calls: StoreCalls) -> None:
        self._store = store
        self._runtime = runtime
        self._calls = calls

    async def add(
        self,
        session: str,
        prompt: str,
        *,
        delay: float | str | timedelta | None = None,
        fire_at: datetime | None = None,
        cron: str | None = None,
        tz: str | None = None,
    ) -> Wakeup:
        if sum(value is not None for value in (delay, fire_at, cron)) != 1:
            raise InvalidWakeup("give exactly one of delay, fire_at (once) or cron (recurring).")
        now = self._runtime.now()
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
        request = WakeupRequest(
            session=session,
            prompt=prompt,
            fire_at=fire_at,
            cron=cron,
            tz=tz,
            origin=asked_by(current_fire()),  # the turn in progress, or the embedding API
        )
        with self._calls.bounded():
            return await self._store.add_wakeup(request, now)
        raise self._calls.no_answer("the wake-up was not added")

    async def pending(self, session: str | None) -> list[Wakeup]:
        with self._calls.bounded():
            pending = await self._store.list_wakeups()
            return [w for w in pending if session is None or w.session == session]
        raise self._calls.no_answer("the wake-ups are unreadable")

    async def remove(self, wakeup_id: str, session: str) -> bool:
        with self._calls.bounded():
            return await self._store.remove_wakeup(wakeup_id, session)
        raise self._calls.no_answer("the wake-up was not removed")
