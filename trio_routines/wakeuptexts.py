"""What a wake-up says: the envelope its turn receives, and the answers to its callers.

The texts the agent reads (the envelope, why a delay is none) and the operator's (when a
wake-up fires; the answers to an add over HTTP and to a cancel), apart from the rules that
decide them (:mod:`trio_routines.wakeups`). The agent's texts name its own tools
(``unwake``); the operator's, read by people, never do.
"""

from __future__ import annotations

import json
import urllib.parse

from .instants import format_iso
from .records import OriginKind, Wakeup
from .text import cut
from .wakeups import MIN_DELAY

#: Who scheduled an operator's wake-up, as its envelope says: the surfaces people use.
BY_OPERATOR = {OriginKind.CLI: "the command line", OriginKind.HTTP: "HTTP"}


def envelope(wakeup: Wakeup) -> str:
    """The text the woken turn receives: the prompt, marked as the agent's own scheduling,
    or, for one an operator added (on the command line, over HTTP), as the operator's."""
    zone = f" {wakeup.tz}" if wakeup.tz else ""
    by = BY_OPERATOR.get(wakeup.origin.kind) if wakeup.origin is not None else None
    if by is not None:  # not the agent's: its words would be wrong, and its unwake no one's
        what = "turn" if wakeup.cron is None else f'recurring turn (cron "{wakeup.cron}"{zone})'
        return (
            f"[wake-up {wakeup.id} fired — a {what} an operator scheduled for you ({by}), "
            f"not a user message] {wakeup.prompt}"
        )
    if wakeup.cron is None:
        return (
            f"[wake-up {wakeup.id} fired — YOUR self-scheduled turn, not a user message] "
            f"{wakeup.prompt}"
        )
    return (
        f"[wake-up {wakeup.id} fired — YOUR recurring self-scheduled turn "
        f'(cron "{wakeup.cron}"{zone}), not a user message; '
        f'unwake({{ id: "{wakeup.id}" }}) stops it] {wakeup.prompt}'
    )


def when_text(wakeup: Wakeup) -> str:
    """When a wake-up fires, for its operator: ``at <instant>``, or its cron, zone, first
    instant and end."""
    if wakeup.cron is None:
        return f"at {format_iso(wakeup.fire_at)}"
    zone = f" {wakeup.tz}" if wakeup.tz else ""
    when = f'cron "{wakeup.cron}"{zone}, first at {format_iso(wakeup.fire_at)}'
    if wakeup.until is not None:
        when += f", until {format_iso(wakeup.until)}"
    return when


def stored_reply(wakeup: Wakeup, mount: str = "") -> str:
    """The answer to an operator's ``POST /wakeups``: when, for whom, how to cancel it (the
    HTTP call: the caller is not the woken agent, whose ``unwake`` tool it may not have);
    ``mount``: where the HTTP surface is mounted, which the call's path starts with."""
    session = urllib.parse.quote(wakeup.session, safe="")
    return (
        f"OK — wake-up {wakeup.id} {when_text(wakeup)} for session "
        f"{json.dumps(wakeup.session)}; cancel with "
        f"DELETE {mount}/wakeups/{wakeup.id}?session={session}"
    )


def removed_reply(wakeup_id: str, removed: bool) -> str:
    """The answer to a cancel (``DELETE /wakeups/{id}``, ``unwake``): operator text."""
    if removed:
        return f"OK — wake-up {wakeup_id} cancelled."
    return (
        f"no pending wake-up {wakeup_id} for this session "
        "(already fired, cancelled, or another session's)"
    )


def bad_delay_reply(value: object) -> str:
    """Why ``value`` is no delay (model-facing: the wake tool returns it)."""
    given = json.dumps(value, ensure_ascii=False, default=str)
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value > 0:  # +Infinity, or an int no float holds
            return f'"in" ({cut(given)}) is too far in the future.'
        return (  # a number, but of no seconds ahead: 0, negative, NaN
            f'"in" ({cut(given)}) is no delay ahead — a one-shot wakes at least '
            f"{MIN_DELAY.seconds}s from now: give a positive number of seconds, or a unit like "
            '"30m" / "2h" / "1d".'
        )
    return (
        f'couldn\'t parse "in" ({cut(given)}) — use a unit '
        'like "30m" / "2h" / "1d", or a number of seconds (a bare number as text like "120" is '
        "rejected)."
    )
