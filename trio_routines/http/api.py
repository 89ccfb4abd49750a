"""The API handlers: one function per route, each from parsed input to a :class:`Response`
(the wake-up routes': :mod:`.wakeupapi`).

Only the handlers read or write the state store, and only after every gate of the package
doc has passed; each answers a store fault with 503 (nothing claimed or changed, but for a
change the store reports :class:`~trio_routines.errors.Unconfirmed`: it may be made).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import trio

from ..budgets import budgets_text
from ..claims import arm_from
from ..converter import history_json, history_to_json
from ..cron import next_run
from ..errors import StateFault, Unconfirmed
from ..history import in_slot_order, read_history, running_slots
from ..instants import format_iso
from ..names import name_problem
from ..records import ClaimStatus, Fire, Gap
from ..replicas import replica_json
from ..routines import Routine, catchup_text
from ..scheduler import FireResult, NotOnGrid, NotYetDue, Scheduler, Stopping, UnknownRoutine
from ..scheduler.state import with_agents_words
from ..tools import definitions
from ..turns import TurnResult
from .spending import routines_spent
from .storecall import store_call
from .wire import (
    ECHO,
    Refusal,
    Response,
    ToolStyle,
    flag,
    quoted,
    required_text,
    slot,
    unavailable,
)

log = logging.getLogger("trio_routines.http")

NEAR_FUTURE = 300.0  # seconds: a slot this close is "retry later" (503), further is an error
READY_DEADLINE = 2.0  # seconds GET /readyz waits for the store
MAX_REPLY = 64 * 1024  # bytes of UTF-8 reply text that POST /run returns


NAMES_LISTED = 20  # an unknown name's 404 lists this many of the routines there are


#: The longest name a routine file gives (a file name's 255 bytes, less ``.md``).
_NAME_BYTES = 252


def _routine(scheduler: Scheduler, name: str) -> Routine:
    try:
        return scheduler.routine(name)
    except UnknownRoutine:
        # As the original: the caller learns what it could have asked for (names only).
        names = sorted(scheduler.routines)
        listed = ", ".join(quoted(n) for n in names[:NAMES_LISTED]) or "(none)"
        more = f" and {len(names) - NAMES_LISTED} more" if len(names) > NAMES_LISTED else ""
        raise Refusal(
            404, f"no routine named {quoted(name)} (this deployment has: {listed}{more})"
        ) from None


def _fire_body(name: str, at: datetime, result: FireResult) -> dict[str, Any]:
    body: dict[str, Any] = {"claimed": result.claimed, "name": name[:ECHO], "slot": format_iso(at)}
    if not result.claimed:
        body["reason"] = result.reason
        return body
    body["outcome"] = result.outcome.value if result.outcome is not None else None
    body["ms"] = result.ms
    if result.reason is not None:  # a busy session: skipped, still running, not a failure
        body["reason"] = result.reason
    if result.failed is not None:
        body["failed"] = result.failed
    return body


def _run_body(routine: Routine, name: str, turn: TurnResult) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name[:ECHO], "session": routine.session}
    if turn.busy:  # our own turn of the session, or the agent's answer (its words kept)
        said = _busy_reason(name) if turn.failed is None else _agent_busy(name)
        reason = with_agents_words(said, turn.failed)
        body.update(ran=False, reason=reason, ms=turn.ms)
        return body
    body.update(ran=True, outcome=turn.outcome.value, ms=turn.ms)
    if turn.failed is not None:
        body["failed"] = turn.failed
    return body


def _busy_reason(name: str) -> str:
    return (
        f"another turn in the session of {quoted(name)} is still running (its last, a run or "
        "a wake-up)"
    )


def _agent_busy(name: str) -> str:
    return f"the agent answered busy for {quoted(name)}"


class _Reply:
    """The agent's reply text, kept up to :data:`MAX_REPLY` bytes of UTF-8 (cut whole
    characters), the rest dropped and noted."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._room = MAX_REPLY
        self.truncated = False

    def add(self, text: str) -> None:
        if self.truncated:
            return
        encoded = text.encode("utf-8", "surrogatepass")
        if len(encoded) > self._room:
            text = encoded[: self._room].decode("utf-8", "ignore")
            self.truncated = True
        self._room -= len(text.encode("utf-8", "surrogatepass"))
        self._parts.append(text)

    def text(self) -> str:
        return "".join(self._parts)


def healthz(scheduler: Scheduler) -> Response:
    in_flight = scheduler.statistics().in_flight
    status = "busy" if in_flight else "ok"
    return Response(200, {"status": status, "inFlight": in_flight, "stopping": scheduler.stopping})


def tools(scheduler: Scheduler, style: ToolStyle) -> Response:
    """The wake-up tools' definitions in ``style``, stating this scheduler's limits: what an
    agent in another process hands its model (it carries the model's calls out as
    ``POST /tools/call`` with its turn's ticket, under the same limits)."""
    return Response(200, {"style": style, "tools": definitions(style, scheduler=scheduler)})


async def readyz(scheduler: Scheduler) -> Response:
    """Ready when running (its boot done, no stop asked) and the store answers within
    :data:`READY_DEADLINE` seconds."""
    if scheduler.stopping:
        raise unavailable("the scheduler is stopping")
    if not scheduler.booted:
        raise unavailable("the scheduler is not running yet: its boot has not completed")
    problem = f"the state store did not answer within {READY_DEADLINE:g}s"
    with trio.move_on_after(READY_DEADLINE):
        try:
            await scheduler.store.ready()
        except StateFault as exc:
            problem = f"the state store is unavailable: {exc}"
        else:
            return Response(200, {"status": "ready"})
    log.warning("GET /readyz: %s", problem)
    raise unavailable(problem)


async def fire(scheduler: Scheduler, body: Mapping[str, Any]) -> Response:
    name = required_text(body, "name", '"daily"')
    wait = flag(body, "wait", False)
    routine = _routine(scheduler, name)
    at = slot(body)
    try:
        if wait:
            result = await scheduler.fire(name, at)
        else:
            claim = await scheduler.start_fire(name, at)
            if claim.status is ClaimStatus.TAKEN:
                return Response(202, {"claimed": True, "name": name[:ECHO], "slot": format_iso(at)})
            result = FireResult(name, at, claimed=False, reason=claim.status.value)
    except NotOnGrid:
        zone = f" {routine.tz}" if routine.tz else ""
        resolved = routine.resolved_cron
        shown = "" if resolved == routine.cron else f' = "{resolved}"'  # its H resolved
        raise Refusal(
            400,
            f"slot {format_iso(at)} is not on the cron grid of {quoted(name)} "
            f'("{routine.cron}"{shown}{zone})',
        ) from None
    except NotYetDue as exc:
        if exc.wait <= NEAR_FUTURE:  # a delivering clock a little ahead of ours: retry
            retry = str(max(1, math.ceil(exc.wait)))
            raise Refusal(503, str(exc), [("retry-after", retry)]) from None
        raise Refusal(400, str(exc)) from None
    except OverflowError:
        raise Refusal(400, f"slot {format_iso(at)} is out of range") from None
    except Stopping as exc:  # stopping, or not running (yet) for a fire without ``wait``
        raise unavailable(str(exc)) from None
    except StateFault as exc:
        log.error("POST /fire %s at %s: %s", name[:ECHO], format_iso(at), exc)
        raise unavailable(
            f"the claim state of {quoted(name)} is unavailable; nothing was claimed — retry"
        ) from None
    return Response(200, _fire_body(name, at, result))


async def run(scheduler: Scheduler, body: Mapping[str, Any]) -> Response:
    name = required_text(body, "name", '"daily"')
    wait = flag(body, "wait", True)
    routine = _routine(scheduler, name)
    if not wait:
        try:
            started = await scheduler.start_run(name)
        except Stopping as exc:  # stopping, or not running (yet)
            raise unavailable(str(exc)) from None
        except StateFault as exc:
            raise _unheld(name, exc) from None
        if not started:
            return Response(
                200,
                {
                    "name": name[:ECHO],
                    "session": routine.session,
                    "ran": False,
                    "reason": _busy_reason(name),
                },
            )
        return Response(202, {"name": name[:ECHO], "session": routine.session, "started": True})
    reply = _Reply()
    try:
        turn = await scheduler.run_now(name, on_text=reply.add)
    except Stopping:
        raise unavailable("the scheduler is stopping; no new turns are accepted") from None
    except StateFault as exc:
        raise _unheld(name, exc) from None
    body = _run_body(routine, name, turn)
    if body["ran"]:
        body.update(reply=reply.text(), truncated=reply.truncated)
    return Response(200, body)


def _unheld(name: str, exc: StateFault) -> Refusal:
    """A run whose session the store could not hold: nothing ran, a retry is safe."""
    log.error("POST /run %s: %s", name[:ECHO], exc)
    return unavailable(f"the session of {quoted(name)} could not be held; nothing ran — retry")


async def routines(scheduler: Scheduler) -> Response:
    """Every loaded routine: schedule, next instant, paused, its newest claim (slot, outcome,
    the replica that made it), whether a turn of it runs now on any replica, and its budgets
    (``budget``, and ``overBudget``: why its slots are skipped now, or null), and, from a
    store keeping usage ledgers, what its turns spent in the last 24 hours (``spent24h``, as
    ``status --json``; null when the ledger is unreadable)."""
    names = sorted(scheduler.routines)
    try:
        newest = await scheduler.newest_claims(names)
    except StateFault as exc:
        log.error("GET /routines: %s", exc)
        raise unavailable("the routines' claims are unreadable right now") from None
    try:
        paused = await scheduler.paused()  # read now: another replica may have paused one
    except StateFault as exc:
        log.error("GET /routines: %s", exc)
        raise unavailable("the paused routines are unreadable right now") from None
    try:  # a turn of a routine's session on any replica: a fire, a run, a wake-up
        sessions = sorted({r.session for r in scheduler.routines.values()})
        busy = await scheduler.sessions_running(sessions)
    except StateFault as exc:
        log.error("GET /routines: %s", exc)
        raise unavailable("the sessions' holds are unreadable right now") from None
    now = scheduler.now()
    stats = scheduler.statistics()
    next_due = stats.next_due  # what the loops will really do
    spent = await routines_spent(scheduler, names, now)
    listing = []
    for name in names:
        routine = scheduler.routines.get(name)
        if routine is None:  # removed by a reload meanwhile
            continue
        if name in next_due:
            upcoming = next_due[name]
        elif routine.cron is None:
            upcoming = None
        else:  # not armed here: an external clock, a scheduler not running, or never (as list)
            after = arm_from(newest.get(name, (None, False))[0], now)
            upcoming = next_run(routine.cron, routine.tz, after, routine.name)
        held = name in paused  # no slot fires while paused: no next, as ``status --json``
        entry: dict[str, Any] = {
            "name": name,
            "cron": routine.cron,
            "tz": routine.tz,
            "next": format_iso(upcoming) if upcoming is not None and not held else None,
            "paused": held,
        }
        if routine.resolved_cron != routine.cron:
            entry["resolved_cron"] = routine.resolved_cron
        last, running = newest[name]
        entry["last"] = None if last is None else history_json(last, running)
        if routine.catchup is not None:  # the catch-up window (gaps.py); absent: any age
            entry["catchup"] = catchup_text(routine.catchup)
        # A turn of its session runs: here, or (its newest claim held) on another replica.
        entry["running"] = routine.session in busy or running
        if spent is not None:  # what its budgets count, shown
            entry["spent24h"] = spent.get(name)
        if routine.budgets:  # its budgets, and why its slots are skipped now, if they are
            entry["budget"] = budgets_text(routine.budgets)
            entry["overBudget"] = stats.over_budget.get(name)
        listing.append(entry)
    return Response(200, listing)


async def history(scheduler: Scheduler, name: str) -> Response:
    """A routine's claims and gaps, read within the scheduler's ``store_timeout``: a
    routine's that is not loaded here too (removed, or loaded by other replicas only), as the
    command line reads them from the store; a name with neither is the 404 of any route."""
    loaded = name in scheduler.routines
    if not loaded and (name_problem(name) is not None or len(name.encode()) > _NAME_BYTES):
        _routine(scheduler, name)  # no routine file could have named it: no store call

    async def read() -> tuple[list[Fire], list[Gap], set[datetime]]:
        fires, gaps = await read_history(scheduler.store, name)
        return fires, gaps, await running_slots(scheduler.store, name, fires)

    fires, gaps, running = await store_call(
        scheduler,
        f"GET /routines/{name[:ECHO]}/history",
        read(),
        f"the history of {quoted(name)} is unreadable right now",
    )
    if not (loaded or fires or gaps):
        _routine(scheduler, name)
    return Response(200, history_to_json(in_slot_order(fires, gaps), running))


async def replicas(scheduler: Scheduler) -> Response:
    """The live members of the scheduler's store (see :mod:`trio_routines.replicas`)."""
    try:
        members = await scheduler.replicas()
    except StateFault as exc:
        log.error("GET /replicas: %s", exc)
        raise unavailable("the replicas are unreadable right now") from None
    return Response(200, [replica_json(m) for m in members if m.alive])


async def pause(scheduler: Scheduler, name: str, *, paused: bool) -> Response:
    """Pause or resume a routine for every scheduler sharing the store (idempotent)."""
    routine = _routine(scheduler, name)
    try:
        change = scheduler.pause if paused else scheduler.resume
        if not await change(routine.name):  # paused already, or not paused: said so
            return Response(200, {"name": routine.name, "paused": paused, "changed": False})
    except StateFault as exc:
        log.error("POST /routines/%s/%s: %s", name[:ECHO], "pause" if paused else "resume", exc)
        if isinstance(exc, Unconfirmed):  # its commit was sent: made, or not
            raise unavailable(
                f"the change of {quoted(name)} is not confirmed: it may be made — try again"
            ) from None
        raise unavailable(f"could not change {quoted(name)} right now") from None
    return Response(200, {"name": routine.name, "paused": paused})
