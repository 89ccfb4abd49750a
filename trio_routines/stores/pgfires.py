"""Claim rows read back as fires: one routine's history, or many routines' newest claims at once.

A boot asks for every routine's newest claim at once. The store's ``latest_fire`` goes through
:class:`.newest.NewestReads`, as the state directory's does: concurrent calls queue, and a
reader reads its own routine and up to ``BATCH - 1`` queued ones with :func:`newest_fires`, one
query, so 10,000 routines cost a handful of round trips instead of 10,000.

The query walks the routines (one JSON parameter, see :mod:`.pgclaims`) and for each probes
the primary key ``(routine, slot)`` backwards once, with a ``LATERAL ... ORDER BY slot DESC
LIMIT 1``: the cost is one index descent per routine, whatever the number of claims kept (a
``DISTINCT ON`` over ``routine = ANY(...)`` would read every kept claim of every routine).

Every row is read as a claim file is (:func:`~trio_routines.claims.fire_from_record`: an odd
outcome reads as unsettled, with a warning); a row that still cannot be read is that
routine's error alone.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

from ..claims import fire_from_record
from ..errors import StateFault
from ..instants import format_iso, slot_name, truncate_ms
from ..records import Fire
from .newest import Reading
from .pgconn import Call, CallFault, Connections
from .pgschema import Schema

BATCH = 1000  # routines per query
READERS = 4  # queries at once, each on its own connection (the pool holds 8 by default)

_COLUMNS = "slot, fired_at, outcome, ms, error"

_NEWEST = f"""SELECT r.routine, c.slot, c.fired_at, c.outcome, c.ms, c.error
    FROM jsonb_array_elements_text(%s::jsonb) AS r (routine)
    CROSS JOIN LATERAL (
        SELECT {_COLUMNS} FROM {{claims}} AS k WHERE k.routine = r.routine
        ORDER BY k.slot DESC LIMIT 1
    ) AS c"""


def _fire(routine: str, row: tuple[Any, ...], where: str) -> Fire:
    slot, fired_at, outcome, ms, error = row
    # The same lenient reading as a claim file: an odd outcome reads as unsettled.
    record: dict[str, object] = {"firedAt": format_iso(fired_at), "outcome": outcome}
    if ms is not None:
        record["ms"] = ms
    if error is not None:
        record["error"] = error
    return fire_from_record(truncate_ms(slot), record, f"{routine}/{slot_name(slot)} in {where}")


def history(
    conn: psycopg.Connection[Any], _call: Call, schema: Schema, where: str, routine: str
) -> list[Fire]:
    """Every kept claim of ``routine``, oldest first."""
    query = f"SELECT {_COLUMNS} FROM {{claims}} WHERE routine = %s ORDER BY slot"
    return [_fire(routine, row, where) for row in conn.execute(schema.sql(query), (routine,))]


def newest_fires(
    conn: psycopg.Connection[Any], _call: Call, schema: Schema, where: str, routines: list[str]
) -> list[Reading]:
    """Each routine's newest claim (None: it has none) or its error, in the routines' order;
    one query, whatever their number (a routine may come more than once)."""
    distinct = list(dict.fromkeys(routines))
    found: dict[str, Reading] = {}
    rows = conn.execute(schema.sql(_NEWEST), (json.dumps(distinct, ensure_ascii=False),))
    for routine, *row in rows:
        try:
            found[routine] = _fire(routine, tuple(row), where)
        except Exception as exc:  # that routine's answer; the others' stand
            found[routine] = exc
    return [found.get(routine) for routine in routines]


async def read_newest(conns: Connections, schema: Schema, routines: list[str]) -> list[Reading]:
    """:func:`newest_fires` as a store call (bounded, see :mod:`.pgconn`); when the call fails,
    each routine's error names it, as its own call's would."""
    what = f"the newest claims of {len(routines)} routine(s) are unreadable"
    try:
        return await conns.run(what, newest_fires, schema, conns.where, routines)
    except CallFault as exc:
        return [
            CallFault(f"the newest claim of {routine!r} is unreadable", exc.where, exc.why)
            for routine in routines
        ]
    except StateFault as exc:  # not the server's answer (a closed store): everyone's
        return [StateFault(str(exc)) for _ in routines]
