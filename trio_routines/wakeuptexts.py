"""What a wake-up says: the envelope its turn receives, and the answers to its callers.

The texts the agent reads (the envelope, the ``wake`` tool's answer, why a delay is none) and
the operator's answer to a cancel, apart from the rules that decide them
(:mod:`trio_routines.wakeups`). The agent's texts name its own tools (``unwake``); the
command line and the HTTP errors, read by people, never do.
"""

from __future__ import annotations

import json

from .instants import format_iso
from .records import Wakeup
from .text import cut
from .wakeups import MIN_DELAY


def envelope(wakeup: Wakeup) -> str:
    """The text the woken turn receives: the prompt, marked as the agent's own scheduling."""
    if wakeup.cron is None:
        return (
            f"[wake-up {wakeup.id} fired — YOUR self-scheduled turn, not a user message] "
            f"{wakeup.prompt}"
        )
    zone = f" {wakeup.tz}" if wakeup.tz else ""
    return (
        f"[wake-up {wakeup.id} fired — YOUR recurring self-scheduled turn "
        f'(cron "{wakeup.cron}"{zone}), not a user message; '
        f'unwake({{ id: "{wakeup.id}" }}) stops it] {wakeup.prompt}'
    )


def added_reply(wakeup: Wakeup) -> str:
    """The ``wake`` tool's answer once a wake-up is stored."""
    if wakeup.cron is None:
        return (
            f"OK — I'll wake up at {format_iso(wakeup.fire_at)} (id {wakeup.id}) to: "
            f'{wakeup.prompt}. Use unwake({{ id: "{wakeup.id}" }}) if it becomes unnecessary.'
        )
    zone = f" {wakeup.tz}" if wakeup.tz else ""
    end = f", until {format_iso(wakeup.until)}" if wakeup.until is not None else ""
    return (
        f'OK — recurring wake {wakeup.id} (cron "{wakeup.cron}"{zone}), first at '
        f"{format_iso(wakeup.fire_at)}{end}: {wakeup.prompt}. "
        f'Use unwake({{ id: "{wakeup.id}" }}) to stop it.'
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
