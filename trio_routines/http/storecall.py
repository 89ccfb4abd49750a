"""A handler's call on the state store, within the scheduler's ``store_timeout``.

Every wait on the store has a deadline of ours, the one the runtime gives each of its own
store calls (scheduler/calls.py): a store that does not answer by then is answered as one that
fails, with a 503 of one line and ``Retry-After``, the cause logged, never a request held
until the client gives up. The call cut off is left to its thread (both stores allow it).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TypeVar

import trio

from ..errors import StateFault, Unconfirmed
from ..scheduler import Scheduler
from .wire import unavailable

log = logging.getLogger("trio_routines.http")
T = TypeVar("T")


async def store_call(
    scheduler: Scheduler,
    route: str,
    call: Awaitable[T],
    refusal: str,
    unanswered: str | None = None,
    unconfirmed: str | None = None,
) -> T:
    """``await call`` within ``scheduler.store_timeout``. A :class:`StateFault`, or no answer
    by then, is logged under ``route`` (``GET /wakeups``) and refused 503 with ``refusal``;
    when the store did not answer, with ``unanswered`` instead if given: a change cut off is
    not confirmed, which is not "nothing was changed"; and so with ``unconfirmed`` when the
    store itself says so (:class:`Unconfirmed`: its commit was sent, its answer did not come)."""
    problem = f"the store did not answer within {scheduler.store_timeout:g}s"
    message = refusal if unanswered is None else unanswered
    with trio.move_on_after(scheduler.store_timeout):
        try:
            return await call
        except Unconfirmed as exc:
            problem, message = str(exc), unconfirmed or refusal
        except StateFault as exc:
            problem, message = str(exc), refusal
    log.error("%s: %s", route, problem)
    raise unavailable(message)
