"""``list`` and ``status`` as a running ``serve`` answers them (``--url``).

The same rows as the state gives, built from the HTTP surface: ``GET /routines`` (schedules,
next instants, paused, running), each routine's ``GET /routines/{name}/history`` (the recent
outcomes and the failing streak), ``GET /wakeups`` (never prompts: the server does not show
them; a page at a time, see :mod:`trio_routines.http.paging`), and for ``status``
``GET /replicas`` and ``GET /healthz``. Nothing needs the routines directory or the state:
the server's are the ones that count.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import attrs

from ..converter import history_from_json, wakeup_from_json
from ..errors import TrioRoutinesError
from ..history import SPENT_SHOWN, failing_streak
from ..instants import parse_iso
from ..ledger import Spent, fires_spent, spent_from_json
from ..records import Fire, Wakeup
from ..replicas import ReplicaInfo
from ..routines import Routine, parse_catchup
from ..wakelimits import MAX_PENDING
from .client import Server, path_part, query

RECENT = 10  # outcomes in the strip, as status.py shows them
HIDDEN = "(not shown over HTTP)"  # a prompt the server keeps to itself


@attrs.frozen
class ServedView:
    rows: list[Any]  # status.RoutineRow (imported late: status.py imports this module)
    wakeups: list[Wakeup]
    wakeups_json: list[dict[str, Any]]
    running: tuple[str, ...]
    now: datetime
    session_spent: dict[str, Spent] = attrs.field(factory=dict)  # each listed session's 24 h


def _session_spent(pending: list[dict[str, Any]]) -> dict[str, Spent]:
    """What each listed session's wake-up turns spent, as the server's ledger says
    (``sessionSpent24h``; absent: a server without a ledger; null: unreadable there)."""
    found = {}
    for shown in pending:
        raw = shown.get("sessionSpent24h")
        if raw is None:
            continue
        spent = spent_from_json(raw)
        if spent is None:
            raise ValueError(f"not what a session spent: {str(raw)[:40]!r}")
        found[str(shown["session"])] = spent
    return found


def _instant(value: Any) -> datetime | None:
    if value is None:
        return None
    parsed = parse_iso(value)  # (None for a value that is not text)
    if parsed is None:
        raise ValueError(f"not an instant: {str(value)[:40]!r}")
    return parsed


def _routine(entry: dict[str, Any]) -> Routine:
    catchup = entry.get("catchup")
    return Routine(
        name=entry["name"],
        prompt=HIDDEN,
        cron=entry.get("cron"),
        tz=entry.get("tz"),
        catchup=parse_catchup(catchup) if isinstance(catchup, str) else None,
    )


def _spent(entry: dict[str, Any], fires: list[Fire], now: datetime) -> Spent:
    """What the routine's turns spent in the last 24 h, as the server's ledger says
    (``spent24h``; null: unreadable there); from its claims for a server without a ledger."""
    if "spent24h" not in entry:
        return fires_spent(fires, now - SPENT_SHOWN)
    raw = entry["spent24h"]
    if raw is None:
        return Spent()
    spent = spent_from_json(raw)
    if spent is None:
        raise ValueError(f"not what a routine spent: {str(raw)[:40]!r}")
    return spent


async def served_view(server: Server) -> ServedView:
    """The rows and wake-ups of the server's state; a CliError when it does not answer."""
    from .status import RoutineRow

    listing = await server.get("/routines")
    pending = await _pending(server)
    now = datetime.now(UTC)
    rows = []
    running = []
    try:
        for entry in listing:
            routine = _routine(entry)
            answer = await server.get(f"/routines/{path_part(routine.name)}/history")
            fires, _, turning = history_from_json(answer)
            paused = entry.get("paused") is True
            failing, success = failing_streak(fires)
            upcoming = None if paused else _instant(entry.get("next"))
            spent = _spent(entry, fires, now)
            recent = fires[-RECENT:]
            row = RoutineRow(
                routine,
                upcoming,
                recent,
                None,
                paused,
                failing,
                success,
                spent,
                frozenset(turning) & {fire.slot for fire in recent},
            )
            rows.append(row)
            if entry.get("running") is True:
                running.append(routine.name)
        wakeups = [wakeup_from_json({**shown, "prompt": HIDDEN}) for shown in pending]
        session_spent = _session_spent(pending)
    except (AttributeError, KeyError, TypeError, ValueError, TrioRoutinesError) as exc:
        raise server.not_ours(shape_problem(exc)) from None
    return ServedView(rows, wakeups, list(pending), tuple(running), now, session_spent)


async def _pending(server: Server) -> list[Any]:
    """Every pending wake-up the server lists, in the order of their instants (then ids), a
    page of the server's default size at a time (a few MB at most, well within what is read
    of an answer), each page after the last entry of the one before.

    A server that does not page answers the whole list whatever it is asked: a page longer
    than asked for, or not in order, is that list, and so is a page that repeats the entry
    the next one was to follow. Twice the wake-ups a store holds is no server of ours."""
    from ..http.paging import PAGE

    pending: list[Any] = []
    after: tuple[str, str] | None = None
    while len(pending) <= 2 * MAX_PENDING:
        asked = {"limit": str(PAGE)} | ({} if after is None else {"after": ",".join(after)})
        page = await server.get("/wakeups" + query(**asked))
        if not isinstance(page, list):
            raise server.not_ours("the wake-ups are not a list")
        try:
            keys = [(entry["fireAt"], entry["id"]) for entry in page]
        except (KeyError, TypeError):
            raise server.not_ours("a wake-up without its instant and id") from None
        if not all(isinstance(part, str) for key in keys for part in key):
            raise server.not_ours("a wake-up without its instant and id")
        if len(page) > PAGE or keys != sorted(set(keys)):
            # The whole list, as the server keeps it: in the order the pages would have.
            return sorted(page, key=lambda entry: (entry["fireAt"], entry["id"]))
        if after is not None and keys and keys[0] <= after:
            return pending  # the whole list again
        pending += page
        if len(page) < PAGE:
            return pending
        after = keys[-1]
    raise server.not_ours(f"more than {2 * MAX_PENDING:,} wake-ups listed")


async def served_in_flight(server: Server) -> tuple[int, bool]:
    """The asked server's turns in flight, and whether it is stopping (an older server does
    not say: not stopping)."""
    health = await server.get("/healthz")
    count = health.get("inFlight") if isinstance(health, dict) else None
    if not isinstance(count, int) or isinstance(count, bool):
        raise server.not_ours()
    stopping = health.get("stopping", False)
    if not isinstance(stopping, bool):
        raise server.not_ours()
    return count, stopping


async def served_replicas(server: Server) -> list[ReplicaInfo]:
    members = await server.get("/replicas")
    try:
        return [
            ReplicaInfo(
                id=str(m["id"]),
                version=str(m["version"]),
                host=str(m["host"]),
                pid=int(m["pid"]),
                started=_required(m["started"]),
                last_seen=_required(m["lastSeen"]),
                in_flight=int(m["inFlight"]),
                alive=m.get("alive", True) is True,
            )
            for m in members
        ]
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise server.not_ours(shape_problem(exc)) from None


def shape_problem(exc: Exception) -> str:
    """What an answer of another shape lacked, in words (not Python's)."""
    if isinstance(exc, KeyError):
        return f"no {str(exc.args[0])[:64]!r} where one was expected"
    if isinstance(exc, (AttributeError, TypeError)):
        return "a value of another kind where an object or a list was expected"
    return str(exc)


def _required(value: Any) -> datetime:
    parsed = _instant(value)
    if parsed is None:
        raise ValueError("an instant is missing")
    return parsed
