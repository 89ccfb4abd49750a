"""Wake-up tools for models: their definitions, and the calls executed for one session.

An agent schedules its own next turn by calling a tool. :func:`definitions` gives the three
tools (``schedule_wakeup``, ``list_wakeups``, ``cancel_wakeup``) as JSON-schema function
descriptions in the shape the common model APIs take (``"openai"``: ``{"type": "function",
"function": {...}}``; ``"anthropic"``: ``{"name", "description", "input_schema"}``; ``"plain"``:
``{"name", "description", "parameters"}``); built for a scheduler
(``definitions(style, scheduler=scheduler)``), ``schedule_wakeup``'s description states the
limits in force there, as the operator configured them, not the defaults. :func:`call_tool`
executes one call the model made, for the session whose turn it is, against a
:class:`~trio_routines.Scheduler` (anything with its ``add_wakeup``, ``list_wakeups`` and
``remove_wakeup``), and returns the text to give back to the model: what was done, or why
not and what the limits are. A call the model got wrong is answered, never raised; only a
failure of ours (the store did not answer) says to try again later.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from .converter import DuplicateKey, loads_request
from .errors import InvalidWakeup, StateFault
from .instants import format_iso, parse_instant
from .records import Wakeup
from .text import quoted
from .wakelimits import DEFAULT_LIMITS, WakeLimits, model_asking
from .wakeups import MAX_PENDING_PER_SESSION, MIN_DELAY, MIN_RECURRING_GAP, parse_delay

SCHEDULE, LIST, CANCEL = "schedule_wakeup", "list_wakeups", "cancel_wakeup"
#: The names the texts a model is woken with use (``unwake({ id: ... })``, as the reference's
#: tools were named): a call by them is the call of ours they name.
_ALIASES = {"wake": SCHEDULE, "unwake": CANCEL}
_ID_CHARS = 64  # of an id the model sent, echoed back


def _span(span: timedelta) -> str:
    """``30 days``, ``1 day``, ``12 hours``, ``90 minutes``: a lifetime as a model reads it."""
    seconds = int(span.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}" + ("" if count == 1 else "s")
    return f"{seconds} seconds"


def limits_text(limits: WakeLimits = DEFAULT_LIMITS) -> str:
    """The limits on wake-ups as a model is told them: the fixed guardrails and ``limits``,
    the operator's (``Scheduler(wake_limits=...)``, ``serve --wake-rate/--wake-depth/
    --wake-lifetime``)."""
    rate = (
        f"at most {limits.rate} self-scheduled turns per session in any hour"
        if limits.rate is not None
        else "no limit on self-scheduled turns per hour"
    )
    depth = (
        f"chains of wake-ups set by wake-ups at most {limits.depth} deep"
        if limits.depth is not None
        else "no limit on chains of wake-ups set by wake-ups"
    )
    return (
        f"one-shots at least {int(MIN_DELAY.total_seconds())} s ahead; recurring ones at most "
        f"every {int(MIN_RECURRING_GAP.total_seconds() // 60)} minutes; at most "
        f"{MAX_PENDING_PER_SESSION} pending per session; {rate}, and {depth}; a recurring one "
        f"ends at its `until`, by default (and at the latest) {_span(limits.lifetime)} after "
        "it was scheduled"
    )


#: The limits as :func:`limits_text` tells them with the default :class:`WakeLimits`.
LIMITS = limits_text()


def _tools(limits: WakeLimits) -> list[dict[str, Any]]:
    return [
        {
            "name": SCHEDULE,
            "description": (
                "Schedule a later turn of this conversation: you will be woken with `prompt` "
                'as the message. Give `in` for once (a delay such as "30m", "2h", "1d", or '
                "seconds as a number) or `cron` (with an optional IANA `tz`) to repeat. "
                f"Limits: {limits_text(limits)}."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "prompt": {
                        "type": "string",
                        "description": "What the woken turn should do, written to yourself.",
                    },
                    "in": {
                        "type": ["string", "number"],
                        "description": 'Once, after this delay: "90s", "30m", "1.5h", "2d", '
                        "or a number of seconds.",
                    },
                    "cron": {
                        "type": "string",
                        "description": 'Repeat on this 5-field cron, e.g. "0 9 * * 1-5".',
                    },
                    "tz": {
                        "type": "string",
                        "description": 'The cron\'s time zone, e.g. "Europe/Berlin" (default UTC).',
                    },
                    "until": {
                        "type": "string",
                        "description": "With `cron`: stop repeating after this ISO 8601 "
                        'instant with its zone, e.g. "2026-07-31T18:00:00Z".',
                    },
                },
                "required": ["prompt"],
                "additionalProperties": False,
            },
        },
        {
            "name": LIST,
            "description": "List the wake-ups this conversation has pending: id, when, what.",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        },
        {
            "name": CANCEL,
            "description": (
                "Cancel a pending wake-up of this conversation by its id (what the text of a "
                "recurring wake-up's turn calls unwake)."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "The id schedule_wakeup gave."},
                },
                "required": ["id"],
                "additionalProperties": False,
            },
        },
    ]


def limits_of(scheduler: object) -> WakeLimits:
    """The limits in force in ``scheduler`` (its ``wake_limits``), or the defaults when it
    has none (an API of yours without them)."""
    limits = getattr(scheduler, "wake_limits", None)
    return limits if isinstance(limits, WakeLimits) else DEFAULT_LIMITS


def definitions(
    style: Literal["openai", "anthropic", "plain"] = "plain",
    *,
    scheduler: object = None,
    limits: WakeLimits | None = None,
) -> list[dict[str, Any]]:
    """The three tools' descriptions, in the shape ``style`` names (a fresh list each call).

    ``schedule_wakeup``'s description tells the model the limits in force: those of
    ``scheduler`` (its ``wake_limits``), or ``limits``, or without either the defaults.
    Raises ValueError for an unknown style, or both ``scheduler`` and ``limits`` given.
    """
    if scheduler is not None and limits is not None:
        raise ValueError("give the scheduler or the limits, not both")
    tools = _tools(limits if limits is not None else limits_of(scheduler))
    if style == "plain":
        return tools
    if style == "anthropic":
        return [
            {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
            for t in tools
        ]
    if style == "openai":
        return [{"type": "function", "function": t} for t in tools]
    raise ValueError(f"unknown style {style!r}: openai, anthropic or plain")


class WakeupApi(Protocol):
    """What :func:`call_tool` needs: the wake-up methods of a Scheduler."""

    async def add_wakeup(
        self,
        session: str,
        prompt: str,
        *,
        delay: float | None = None,
        cron: str | None = None,
        tz: str | None = None,
        until: datetime | None = None,
    ) -> Wakeup:
        """Add a wake-up of ``session`` (``Scheduler.add_wakeup``)."""
        ...

    async def list_wakeups(self, session: str | None = None) -> list[Wakeup]:
        """The pending wake-ups, ``session``'s only when given."""
        ...

    async def remove_wakeup(self, wakeup_id: str, session: str) -> bool:
        """Cancel a pending wake-up of ``session``; False when there is none."""
        ...


def _arguments(raw: object) -> Mapping[str, Any] | str:
    """The call's arguments as a mapping (a JSON text is parsed), or why they are unusable."""
    if isinstance(raw, str):
        try:
            raw = loads_request(raw) if raw.strip() else {}
        except DuplicateKey as twice:
            return f"the arguments name the key {quoted(twice.key)} twice; send each once."
        except ValueError:  # not JSON, or nested too deep
            return 'the arguments are not valid JSON; send an object such as {"prompt": ...}.'
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        return "the arguments must be a JSON object."
    return raw


def _unknown(arguments: Mapping[str, Any], allowed: Sequence[str]) -> str | None:
    extra = sorted(str(key) for key in arguments if key not in allowed)
    if extra:
        takes = f"takes: {', '.join(allowed)}" if allowed else "takes no arguments"
        return f"unknown argument(s) {', '.join(extra)}; this tool {takes}."
    return None


def _line(wakeup: Wakeup) -> str:
    when = f"next at {format_iso(wakeup.fire_at)}"
    if wakeup.cron is not None:
        zone = f" {wakeup.tz}" if wakeup.tz else ""
        end = f" until {format_iso(wakeup.until)}" if wakeup.until is not None else ""
        when = f'recurring (cron "{wakeup.cron}"{zone}{end}), {when}'
    return f"- {wakeup.id}: {when}: {wakeup.prompt}"


async def call_tool(api: WakeupApi, session: str, name: str, arguments: object) -> str:
    """Execute the model's call of tool ``name`` for ``session``; the text for the model.

    ``arguments``: the call's arguments, a mapping or its JSON text. A refusal quotes the
    limits in force (``api.wake_limits``, when it has them). Raises nothing the model
    caused; a scheduler that cannot answer is said so in the text. ``wake`` and ``unwake``
    (the names a woken turn's text uses) are taken for ``schedule_wakeup`` and
    ``cancel_wakeup``. A ``session`` that is no non-empty text is a ``ValueError`` (the
    host's mistake: a list or a cancel of no session would reach every session's).

    The model is limited wherever it asks: inside a turn of ours, what it adds is the turn's
    (its origin, the chain's depth, the rate); outside one (a host's own turn, a chat), what
    it adds has the origin ``model``, depth 1, and the same limits
    (:func:`~trio_routines.wakelimits.model_asking`).
    """
    if not isinstance(session, str) or not session:
        # The host's mistake, not the model's: with no session, a list or a cancel would reach
        # every session's wake-ups.
        raise ValueError(f"call_tool needs the session whose turn it is, as text: {session!r:.80}")
    name = _ALIASES.get(name, name) if isinstance(name, str) else name
    args = _arguments(arguments)
    if isinstance(args, str):
        return f"{name}: {args}"
    try:
        if name == SCHEDULE:
            with model_asking():  # a host's own turn's model is limited as ours are
                return await _schedule(api, session, args)
        if name == LIST:
            return await _list(api, session, args)
        if name == CANCEL:
            return await _cancel(api, session, args)
    except StateFault:
        return _unanswered(name)
    return f"unknown tool {str(name)[:_ID_CHARS]!r}: the tools are {SCHEDULE}, {LIST}, {CANCEL}."


def _unanswered(name: str) -> str:
    """What a call the store failed, or did not answer in time, may have done. A change cut
    off by the deadline may still land (a commit already under way): so the model looks
    before asking again, rather than being told that nothing changed."""
    if name == SCHEDULE:
        return (
            f"{name}: the scheduler's store did not confirm this just now, so it may or may "
            f"not have been added; call {LIST} before asking again."
        )
    if name == CANCEL:
        return (
            f"{name}: the scheduler's store did not confirm this just now; try again (a "
            "second cancel of the same id is harmless)."
        )
    return f"{name}: the scheduler could not read its store just now; try again later."


async def _schedule(api: WakeupApi, session: str, args: Mapping[str, Any]) -> str:
    problem = _unknown(args, ("prompt", "in", "cron", "tz", "until"))
    if problem:
        return f"{SCHEDULE}: {problem}"
    prompt = args.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return f"{SCHEDULE}: give `prompt`, the message you will be woken with."
    if ("in" in args) == ("cron" in args):
        return f"{SCHEDULE}: give exactly one of `in` (once, after a delay) or `cron` (to repeat)."
    tz = args.get("tz")
    if tz is not None and not isinstance(tz, str):
        return f'{SCHEDULE}: `tz` must be a time zone name such as "Europe/Berlin".'
    until = args.get("until")
    if until is not None:
        if "cron" not in args:
            return f"{SCHEDULE}: `until` goes with `cron` only (a one-shot fires once)."
        until = parse_instant(until)
        if until is None:
            return (
                f"{SCHEDULE}: `until` must be an ISO 8601 instant with its zone, such as "
                '"2026-07-31T18:00:00Z".'
            )
    try:
        if "in" in args:
            if tz is not None:
                return f"{SCHEDULE}: `tz` goes with `cron` only."
            delay = parse_delay(args["in"])
            if delay is None:
                return (
                    f'{SCHEDULE}: could not read `in`; use a unit like "30m", "2h", "1d", '
                    "or a number of seconds."
                )
            wakeup = await api.add_wakeup(session, prompt, delay=delay)
        else:
            cron = args["cron"]
            if not isinstance(cron, str):
                return f'{SCHEDULE}: `cron` must be a 5-field cron text such as "0 9 * * 1-5".'
            wakeup = await api.add_wakeup(session, prompt, cron=cron, tz=tz, until=until)
    except InvalidWakeup as exc:
        return f"{SCHEDULE}: refused — {exc} (limits: {limits_text(limits_of(api))})."
    except OverflowError:
        return f"{SCHEDULE}: refused — `in` is too far in the future."
    what = _line(wakeup)[2:]
    return (
        f'Scheduled {what} — cancel it with {CANCEL}(id="{wakeup.id}") if it is no longer needed.'
    )


async def _list(api: WakeupApi, session: str, args: Mapping[str, Any]) -> str:
    problem = _unknown(args, ())
    if problem:
        return f"{LIST}: {problem}"
    pending = await api.list_wakeups(session)
    if not pending:
        return "No wake-ups pending for this conversation."
    lines = "\n".join(_line(wakeup) for wakeup in pending)
    return f"{len(pending)} pending (at most {MAX_PENDING_PER_SESSION}):\n{lines}"


async def _cancel(api: WakeupApi, session: str, args: Mapping[str, Any]) -> str:
    problem = _unknown(args, ("id",))
    if problem:
        return f"{CANCEL}: {problem}"
    wakeup_id = args.get("id")
    if not isinstance(wakeup_id, str) or not wakeup_id:
        return f"{CANCEL}: give `id`, as {SCHEDULE} or {LIST} showed it."
    shown = json.dumps(wakeup_id[:_ID_CHARS], ensure_ascii=False)
    if await api.remove_wakeup(wakeup_id, session):
        return f"Cancelled wake-up {shown}."
    return (
        f"{CANCEL}: no pending wake-up {shown} for this conversation (already fired, "
        f"cancelled, or never scheduled here); {LIST} shows what is pending."
    )
