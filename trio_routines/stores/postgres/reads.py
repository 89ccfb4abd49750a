"""Reads of the PostgreSQL store: claim rows as fires, and the per-routine reads a boot makes
for every routine at once (newest claims, resumes), many routines per query.

A boot asks for every routine's newest claim at once, and for the last resume and the gaps of
every routine that would catch up. The store's ``latest_fire``, ``resumed_at`` and ``gaps``
(:func:`.gaps.gaps_of`) go through
:class:`.newest.BatchedReads`, as the state directory's newest-claim reads do: concurrent calls
queue, and a reader reads its own routine and up to ``BATCH - 1`` queued ones in one query, so
10,000 routines cost a handful of round trips instead of 10,000. Routines travel as one JSON
parameter (see :mod:`.claims`); the gaps' read sends a text array (a thousand names at most).

The newest-claim query probes the primary key ``(routine, slot)`` backwards once per routine,
with a ``LATERAL ... ORDER BY slot DESC LIMIT 1``: one index descent per routine, whatever the
number of claims kept (a ``DISTINCT ON`` over ``routine = ANY(...)`` would read every kept
claim of every routine). Every row is read as a claim file is
(:func:`~trio_routines.claims.fire_from_record`: an odd outcome reads as unsettled, with a
warning); a row that still cannot be read is that routine's error alone. A batch whose call
fails gives each of its callers the error its own call would have raised, naming its routine.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import psycopg

from ...claims import fire_from_record
from ...errors import StateFault
from ...instants import format_iso, slot_name, truncate_ms
from ...output import OUTPUT_MAX
from ...records import Fire
from ...text import ERROR_LIMIT
from ..newest import Reading
from .call import Call, CallFault
from .conn import Connections
from .schema import Schema

BATCH = 1000  # routines per query
READERS = 4  # queries at once, each on its own connection (the pool holds 8 by default)

T = TypeVar("T")
Conn = psycopg.Connection[Any]

#: A reason and an output are read bounded on the server: a row edited by hand to hold a
#: gigabyte would otherwise come whole to every boot, history and status page. What the
#: record keeps of them (the first KiB of a reason, the last 64 KiB of an output) lies within.
ERROR_READ = 16 * ERROR_LIMIT  # characters, each of a byte at least
OUTPUT_READ = OUTPUT_MAX
_COLUMNS = f"slot, fired_at, outcome, ms, left(error, {ERROR_READ}) AS error, replica"
_ROUTINES = "jsonb_array_elements_text(%s::jsonb) AS r (routine)"
_NEWEST = f"""SELECT r.routine, c.slot, c.fired_at, c.outcome, c.ms, c.error, c.replica
    FROM {_ROUTINES}
    CROSS JOIN LATERAL (
        SELECT {_COLUMNS} FROM {{claims}} AS k WHERE k.routine = r.routine
        ORDER BY k.slot DESC LIMIT 1
    ) AS c"""
_RESUMED = f"SELECT r.routine, s.resumed_at FROM {_ROUTINES} JOIN {{resumed}} AS s USING (routine)"


def _fire(
    routine: str,
    row: tuple[Any, ...],
    where: str,
    output: str | None = None,
    usage: tuple[Any, ...] = (),
) -> Fire:
    slot, fired_at, outcome, ms, error, replica = row
    # The same lenient reading as a claim file: an odd outcome reads as unsettled.
    record: dict[str, object] = {"firedAt": format_iso(fired_at), "outcome": outcome}
    if ms is not None:
        record["ms"] = ms
    if error is not None:
        record["error"] = error
    if replica is not None:
        record["replica"] = replica
    if output is not None:
        record["output"] = output
    if any(value is not None for value in usage):
        tokens_in, tokens_out, cost, currency = usage
        record["usage"] = {
            "inputTokens": tokens_in,
            "outputTokens": tokens_out,
            "cost": cost,
            "currency": currency,
        }
    return fire_from_record(truncate_ms(slot), record, f"{routine}/{slot_name(slot)} in {where}")


def history(
    conn: Conn, _call: Call, schema: Schema, where: str, routine: str, keep: int
) -> list[Fire]:
    """The newest ``keep`` claims of ``routine`` (the store keeps no more: rows a hand or an
    older process added beyond them, until the next claim prunes them, are not all read),
    oldest first, with their output and usage (the newest-claim reads leave them out: a boot
    of 10,000 routines needs none of it)."""
    query = (
        f"SELECT {_COLUMNS}, right(output, {OUTPUT_READ}), tokens_in, tokens_out, cost, currency "
        "FROM {claims} "
        "WHERE routine = %s ORDER BY slot DESC LIMIT %s"
    )
    rows = conn.execute(schema.sql(query), (routine, keep)).fetchall()
    return [_fire(routine, row[:6], where, output=row[6], usage=row[7:]) for row in rows[::-1]]


_OPEN = f"""SELECT routine, {_COLUMNS} FROM {{claims}}
    WHERE outcome IS NULL AND replica IS NOT NULL
    AND routine IN (SELECT jsonb_array_elements_text(%s::jsonb))
    AND (routine, slot) > (%s, %s)
    ORDER BY routine, slot LIMIT %s"""


def open_claims(
    conn: Conn,
    _call: Call,
    schema: Schema,
    where: str,
    routines: list[str],
    after: tuple[str, datetime] | None,
    limit: int,
) -> list[tuple[str, Fire]]:
    """Up to ``limit`` open claims naming a replica, of ``routines``, after ``after`` in
    (routine, slot) order: the partial index of open claims finds them without reading the
    settled ones."""
    start = after if after is not None else ("", datetime.min.replace(tzinfo=UTC))
    found = []
    for routine, *row in conn.execute(schema.sql(_OPEN), (_json(routines), *start, limit)):
        try:
            found.append((routine, _fire(routine, tuple(row), where)))
        except Exception:  # a row history would read as damaged: nothing to settle here
            continue
    return found


def newest_fires(
    conn: Conn, _call: Call, schema: Schema, where: str, routines: list[str]
) -> list[Reading[Fire | None]]:
    """Each routine's newest claim (None: it has none) or its error, in the routines' order;
    one query, whatever their number (a routine may come more than once)."""
    found: dict[str, Reading[Fire | None]] = {}
    for routine, *row in conn.execute(schema.sql(_NEWEST), (_json(routines),)):
        try:
            found[routine] = _fire(routine, tuple(row), where)
        except Exception as exc:  # that routine's answer; the others' stand
            found[routine] = exc
    return [found.get(routine) for routine in routines]


def resumes(
    conn: Conn, _call: Call, schema: Schema, where: str, routines: list[str]
) -> list[Reading[datetime | None]]:
    """When each routine was last resumed (None: never), in the routines' order; one query."""
    rows = conn.execute(schema.sql(_RESUMED), (_json(routines),))
    found = {routine: truncate_ms(at) for routine, at in rows}
    return [found.get(routine) for routine in routines]


def _json(routines: list[str]) -> str:
    return json.dumps(list(dict.fromkeys(routines)), ensure_ascii=False)


async def read_batch(
    conns: Connections,
    schema: Schema,
    read: Callable[[Conn, Call, Schema, str, list[str]], list[Reading[T]]],
    unreadable: str,
    routines: list[str],
) -> list[Reading[T]]:
    """``read`` as one store call (bounded, see :mod:`.conn`). When the call fails, each
    routine gets the error its own call would have raised: ``unreadable`` names the thing
    read, with ``{routine}`` for the routine's name (quoted)."""
    what = unreadable.format(routine=f"{len(routines)} routine(s)")
    try:
        return await conns.run(what, read, schema, conns.where, routines)
    except CallFault as exc:
        return [
            CallFault(unreadable.format(routine=repr(routine)), exc.where, exc.why)
            for routine in routines
        ]
    except StateFault as exc:  # not the server's answer (a closed store): everyone's
        return [StateFault(str(exc)) for _ in routines]
