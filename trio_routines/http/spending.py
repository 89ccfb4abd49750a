"""What turns spent, for the API's listings: each routine's and each listed session's last
24 hours, from the store's usage ledger (what the budgets count), read within one deadline
per listing so that a stalled store shows null figures instead of holding the request."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import trio

from ..errors import StateFault
from ..history import day_spent, sessions_spent
from ..ledger import Spent, spent_to_json
from ..scheduler import Scheduler
from ..store import UsageRecords
from .wire import ECHO

log = logging.getLogger("trio_routines")

SPENT_DEADLINE = 5.0  # seconds a listing waits for its spending figures, then shows null

Figures = dict[str, dict[str, Any] | None]


async def routines_spent(scheduler: Scheduler, names: list[str], now: datetime) -> Figures | None:
    """What each routine's turns spent in the last 24 h (a name left out, or None: not read),
    all within SPENT_DEADLINE; None when the store keeps no ledger."""
    if not isinstance(scheduler.store, UsageRecords):
        return None
    found: Figures = {}
    with trio.move_on_after(SPENT_DEADLINE):
        for name in names:
            try:
                found[name] = spent_to_json(await day_spent(scheduler.store, "routine", name, now))
            except StateFault as exc:
                log.error("GET /routines: what the turns of %s spent: %s", name[:ECHO], exc)
                found[name] = None
        return found
    log.error(
        "GET /routines: what the turns spent was not read within %gs (%d of %d routines)",
        SPENT_DEADLINE,
        len(found),
        len(names),
    )
    return found


async def listed_sessions_spent(
    scheduler: Scheduler, sessions: list[str], now: datetime
) -> Figures | None:
    """What the wake-up turns of each of ``sessions`` spent in the last 24 h (a session left
    out, or None: not read), within SPENT_DEADLINE; None when the store keeps no ledger."""
    if not isinstance(scheduler.store, UsageRecords):
        return None
    spent: dict[str, Spent | StateFault] = {}
    with trio.move_on_after(SPENT_DEADLINE) as waited:
        spent = await sessions_spent(scheduler.store, sessions, now)
    if waited.cancelled_caught:
        log.error("GET /wakeups: what the sessions spent was not read within %gs", SPENT_DEADLINE)
    return {session: _shown(found, session) for session, found in spent.items()}


def _shown(spent: Spent | StateFault, session: str) -> dict[str, Any] | None:
    if isinstance(spent, StateFault):
        log.error("GET /wakeups: what the turns of session %r spent: %s", session[:ECHO], spent)
        return None
    return spent_to_json(spent)
