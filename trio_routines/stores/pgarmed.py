"""When each routine was first armed, in PostgreSQL: ``trio_routines_armed`` (schema version 7).

One row per routine, inserted the first time a scheduler arms it and never updated. A boot
names every routine it arms in one call: one query reads them all, and only the routines
missing are inserted (``ON CONFLICT DO NOTHING``: two schedulers arming the same new routine
at once keep the first row written), in the same transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from .pgschema import Schema

Conn = psycopg.Connection[Any]


def first_armed(
    conn: Conn, schema: Schema, routines: Sequence[str], at: datetime
) -> dict[str, datetime]:
    """When each of ``routines`` was first armed; ``at`` for those not armed before."""
    read = schema.sql("SELECT routine, armed_at FROM {armed} WHERE routine = ANY(%s)")
    with conn.transaction():
        known: dict[str, datetime] = dict(conn.execute(read, (list(routines),)).fetchall())
        new = [name for name in dict.fromkeys(routines) if name not in known]
        if new:
            conn.execute(
                schema.sql(
                    "INSERT INTO {armed} (routine, armed_at) SELECT unnest(%s::text[]), %s "
                    "ON CONFLICT DO NOTHING"
                ),
                (new, at),
            )
            known.update(conn.execute(read, (new,)).fetchall())
    return {name: known[name] for name in routines}
