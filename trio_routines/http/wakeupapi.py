"""The wake-up API handlers: ``POST /wakeups``, ``GET /wakeups``, ``DELETE /wakeups/{id}``,
and ``POST /tools/call``, an agent's tool call made as its turn.

As :mod:`.api`'s, one function per route, each from parsed input to a :class:`Response`, run
once every gate of the package doc has passed. Each call on the store is bounded by the
scheduler's ``store_timeout`` (:mod:`.storecall`): a fault is a 503 saying nothing was
changed; no answer by then, a 503 saying the change is not confirmed (a wake-up change that
lands after its caller left is undone or rolled back, but for a PostgreSQL commit already
sent), and to try a removal again, or to list the session's wake-ups before adding one again.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import attrs

from .. import tracing
from ..context import FireContext, firing
from ..converter import wakeup_to_json
from ..errors import InvalidWakeup
from ..instants import parse_instant
from ..records import Origin, OriginKind, Wakeup
from ..scheduler import Scheduler
from ..tools import call_tool
from ..wakeups import WakeupRequest, parse_delay
from ..wakeuptexts import bad_delay_reply, removed_reply, stored_reply
from .paging import Page, next_link, one_page
from .spending import listed_sessions_spent
from .storecall import store_call
from .wire import (
    ECHO,
    Refusal,
    Response,
    checked_session,
    only_keys,
    optional_text,
    required_text,
)

#: Who asks through ``POST /wakeups`` (whatever the client: the server cannot tell).
ASKED = Origin(kind=OriginKind.HTTP)


def _hidden(wakeup: Wakeup) -> dict[str, Any]:
    """A wake-up as the HTTP surface shows it: everything but the prompt."""
    shown = wakeup_to_json(wakeup)
    shown.pop("prompt", None)
    return shown


def _not_confirmed(scheduler: Scheduler, change: str, then: str = "try again") -> str:
    """The 503 of a change the store did not answer within its deadline."""
    return (
        f"the wake-up state did not answer within {scheduler.store_timeout:g}s; "
        f"the {change} is not confirmed — {then}"
    )


def _unconfirmed(change: str, then: str = "try again") -> str:
    """The 503 of a change the store says may be made (its commit was sent, unanswered)."""
    return f"the wake-up state did not confirm the {change}: it may be made — {then}"


#: What ``POST /wakeups`` adds to its answer on a server that runs no wake-ups.
NOT_FIRED_HERE = (
    "this server fires no wake-ups (serve --no-wakeups): a replica of its store that runs "
    "them fires this one, and none does it if none runs them"
)
#: What ``POST /wakeups`` takes.
_WAKE_KEYS = ("session", "prompt", "in", "cron", "tz", "until")
#: An add cut off: asked again, it could be made twice, were the first to land after all.
LIST_FIRST = "list the session's wake-ups before adding it again"


async def wake(scheduler: Scheduler, body: Mapping[str, Any], mount: str) -> Response:
    """``POST /wakeups``; ``mount``: where the surface is mounted (its reply's ``DELETE``)."""
    # An ``origin`` is the server's to record (http): one in the body is ignored, as said.
    only_keys(body, "POST /wakeups", _WAKE_KEYS, frozenset({"origin"}))
    session = checked_session(required_text(body, "session", '"chat:42"'))
    prompt = required_text(body, "prompt", '"check the build"')
    if ("in" in body) == ("cron" in body):
        raise Refusal(400, 'give exactly one of "in" (a delay such as "30m") or "cron"')
    tz = optional_text(body, "tz")
    until = _until(body)
    now = scheduler.now()
    if "in" in body:
        if tz is not None:
            raise Refusal(400, '"tz" goes with "cron" only')
        try:
            seconds = parse_delay(body["in"])
            fire_at = None if seconds is None else now + timedelta(seconds=seconds)
        except OverflowError:
            raise Refusal(400, '"in" is too far in the future') from None
        if fire_at is None:
            raise Refusal(400, bad_delay_reply(body["in"]))
        if until is not None:
            raise Refusal(400, '"until" goes with "cron" only')
        request = WakeupRequest(session=session, prompt=prompt, fire_at=fire_at)
    else:
        cron = required_text(body, "cron", '"0 9 * * 1-5"')
        request = WakeupRequest(session=session, prompt=prompt, cron=cron, tz=tz, until=until)
    request = attrs.evolve(request, origin=ASKED, limits=scheduler.wake_limits)

    async def add() -> Wakeup:
        with tracing.step("wakeup.add", {tracing.SESSION: session}) as span:
            added = await scheduler.store.add_wakeup(request, now)
            if span is not None:
                span.set_attribute(tracing.WAKEUP, added.id)
            return added

    try:
        wakeup = await store_call(
            scheduler,
            "POST /wakeups",
            add(),
            "the wake-up state is unavailable; nothing was added",
            _not_confirmed(scheduler, "wake-up", LIST_FIRST),
            _unconfirmed("wake-up", LIST_FIRST),
        )
    except InvalidWakeup as exc:  # as the surface shows wake-ups: without their prompts
        raise Refusal(400, exc.public) from None
    answer = {"wakeup": _hidden(wakeup), "reply": stored_reply(wakeup, mount)}
    if not scheduler.wakeups:  # stored for the replicas that run them: say so
        answer["note"] = NOT_FIRED_HERE
    return Response(201, answer)


def _until(body: Mapping[str, Any]) -> datetime | None:
    """The ``until`` of a recurring wake-up: an ISO 8601 instant with its zone, when given."""
    given = optional_text(body, "until")
    if given is None:
        return None
    until = parse_instant(given)
    if until is None:
        raise Refusal(
            400, '"until" must be an ISO 8601 instant with its zone, such as "2026-07-31T18:00:00Z"'
        )
    return until


async def wakeups(scheduler: Scheduler, session: str | None, page: Page, mount: str) -> Response:
    """A page of the pending wake-ups (``session``'s, if given; :mod:`.paging`) without
    prompts; each with what its session's wake-up turns spent in 24 h (``sessionSpent24h``;
    null: ledger unreadable). More to come: a ``Link`` to the next page, below ``mount``."""
    now = scheduler.now()
    pending = await store_call(
        scheduler,
        "GET /wakeups",
        scheduler.store.list_wakeups(),
        "the wake-up state is unreadable right now",
    )
    shown, last = one_page([w for w in pending if session is None or w.session == session], page)
    listed = [_hidden(w) for w in shown]
    spent = await listed_sessions_spent(scheduler, [e["session"] for e in listed], now)
    if spent is not None:  # what each listed session spent, shown
        for entry in listed:
            entry["sessionSpent24h"] = spent.get(entry["session"])
    headers = () if last is None else (next_link(mount, session, page, last),)
    return Response(200, listed, headers)


async def unwake(scheduler: Scheduler, wakeup_id: str, session: str) -> Response:
    removed = await store_call(
        scheduler,
        f"DELETE /wakeups/{wakeup_id[:ECHO]}",
        scheduler.store.remove_wakeup(wakeup_id, session),
        "the wake-up state is unavailable; nothing was removed",
        _not_confirmed(scheduler, "cancellation"),
        _unconfirmed("cancellation"),
    )
    if not removed:
        raise Refusal(404, removed_reply(wakeup_id[:ECHO], False))
    return Response(200, {"removed": True, "reply": removed_reply(wakeup_id[:ECHO], True)})


async def tool_call(scheduler: Scheduler, fire: FireContext, body: Mapping[str, Any]) -> Response:
    """``{"name", "arguments"}``: the wake-up tool ``name`` called as the turn ``fire`` (read
    from its ticket by the gate), for that turn's session alone; ``{"text"}``, what
    :func:`~trio_routines.tools.call_tool` says to the model inside the turn (a refusal by
    the limits included)."""
    only_keys(body, "POST /tools/call", ("name", "arguments"))
    name = required_text(body, "name", '"schedule_wakeup"')
    with firing(fire):
        text = await call_tool(scheduler, fire.session, name, body.get("arguments"))
    return Response(200, {"text": text})
