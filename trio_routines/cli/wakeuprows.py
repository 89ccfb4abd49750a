"""The pending wake-ups as ``status`` and ``list`` show them: one row a wake-up, with what its
session's wake-up turns spent in the last 24 hours (the usage ledger, one read a session)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ..converter import wakeup_to_json
from ..errors import StateFault
from ..history import sessions_spent
from ..ledger import Spent, describe_spent, spent_to_json
from ..records import Origin, OriginKind, Wakeup
from ..store import Store
from ..text import name_shown
from .output import say
from .table import Name, left, schedule, short_instant, table

PROMPT_SHOWN = 40
ORIGIN_SHOWN = 48


def wakeup_lines(
    wakeups: Sequence[Wakeup], now: datetime, spent: Mapping[str, Spent] | None = None
) -> list[str]:
    """The wake-up table; a SPENT 24H column (what the session's wake-up turns spent) only
    when some listed session spent something."""
    spent = spent or {}
    cells = []
    for wakeup in wakeups:
        prompt = wakeup.prompt if len(wakeup.prompt) <= PROMPT_SHOWN else wakeup.prompt[:39] + "…"
        cells.append(
            [
                Name(wakeup.id),
                Name(wakeup.session),
                short_instant(wakeup.fire_at),
                left(wakeup.fire_at, now),
                schedule(wakeup),
                origin_cell(wakeup.origin),
                prompt,
            ]
        )
    headers = ["WAKE-UP", "SESSION", "NEXT", "LEFT", "KIND", "ORIGIN", "PROMPT"]
    if any(spent.get(w.session, Spent()) != Spent() for w in wakeups):
        headers.insert(2, "SPENT 24H")
        for cell, wakeup in zip(cells, wakeups, strict=True):
            cell.insert(2, describe_spent(spent.get(wakeup.session, Spent())) or "-")
    return table(headers, cells)


def wakeup_json(wakeup: Wakeup, spent: Mapping[str, Spent]) -> dict[str, Any]:
    """A wake-up as ``--json`` shows it, with ``sessionSpent24h``, what its session's wake-up
    turns spent in the last 24 hours (nothing included), as ``GET /wakeups`` has it, when the
    ledger was read for its session (absent: a store without a ledger, or a read that failed,
    said on stderr)."""
    entry = wakeup_to_json(wakeup)
    if wakeup.session in spent:
        entry["sessionSpent24h"] = spent_to_json(spent[wakeup.session])
    return entry


async def session_spent(store: Store, wakeups: Sequence[Wakeup], now: datetime) -> dict[str, Spent]:
    """What the wake-up turns of each listed session spent in the last 24 hours (an
    unreadable ledger is said, and shows nothing)."""
    spent = {}
    for session, found in (await sessions_spent(store, (w.session for w in wakeups), now)).items():
        if isinstance(found, StateFault):
            shown_session = name_shown(session)
            say(f"what the wake-up turns of session {shown_session} spent is unreadable — {found}")
        else:
            spent[session] = found
    return spent


def origin_cell(origin: Origin | None) -> str:
    """Who asked, short: ``routine daily@2026-07-07T09:00Z``, ``routine daily (run)``,
    ``wake-up 4f9c1a2b depth 2`` (the parent's id cut to 8: ``--json`` has it whole),
    ``http``, ``cli``, ``api``, or ``unknown``; cut to 48 characters."""
    if origin is None:
        return "unknown"
    if origin.kind is OriginKind.ROUTINE:
        when = f"@{short_instant(origin.slot)}" if origin.slot is not None else " (run)"
        text = f"routine {origin.routine}{when}"
    elif origin.kind is OriginKind.WAKEUP:
        text = f"wake-up {(origin.parent or '')[:8]} depth {origin.depth}"
    else:
        text = origin.kind.value
    return text if len(text) <= ORIGIN_SHOWN else text[: ORIGIN_SHOWN - 1] + "…"
