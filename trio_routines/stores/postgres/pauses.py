"""Pauses and resumes in PostgreSQL: a row of ``trio_routines_paused`` per paused routine,
holding when its pause began (``paused_at``: the pausing caller's instant, or the server's
when none was given, as an earlier version wrote it), and a row of ``trio_routines_resumed``
per routine ever resumed, holding its latest resume's instant and when the pause it ended
began (``paused_at``, schema version 13; NULL from older code)."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import psycopg

from ...instants import truncate_ms
from .. import landed
from .call import Call
from .schema import Schema

Conn = psycopg.Connection[Any]


def set_paused(
    conn: Conn,
    call: Call,
    tables: Schema,
    routine: str,
    paused: bool,
    at: datetime | None,
    asked: float,
) -> None:
    """Pause ``routine`` (paused already: its first pause's instant stays), or resume it,
    keeping ``at`` as its latest resume (a routine not paused: nothing changes), moved on by
    as long as it took since it was asked (``asked``, on :func:`time.monotonic`: the wait for
    a connection and a thread, for the pause's row held by another transaction), when that
    was long (:func:`..landed`). Rolled back when its caller gave up before the commit: "not
    confirmed" then means not made."""
    with conn.transaction():
        if paused:
            query = (
                "INSERT INTO {paused} (routine, paused_at) VALUES (%s, COALESCE(%s, now())) "
                "ON CONFLICT DO NOTHING"
            )
            args: tuple[object, ...] = (routine, None if at is None else truncate_ms(at))
        else:
            query = "DELETE FROM {paused} WHERE routine = %s RETURNING paused_at"
            args = (routine,)
        done = conn.execute(tables.sql(query), args)
        if not paused and at is not None and done.rowcount:
            row = done.fetchone()
            since = None if row is None or row[0] is None else truncate_ms(row[0])
            conn.execute(
                tables.sql(
                    "INSERT INTO {resumed} (routine, resumed_at, paused_at) VALUES (%s, %s, %s) "
                    "ON CONFLICT (routine) DO UPDATE SET resumed_at = excluded.resumed_at, "
                    "paused_at = excluded.paused_at"
                ),
                (routine, truncate_ms(landed(at, time.monotonic() - asked)), since),
            )
        call.before_commit()


def paused_since(conn: Conn, _call: Call, tables: Schema, routine: str) -> datetime | None:
    """When ``routine``'s pause began; None when it is not paused."""
    row = conn.execute(
        tables.sql("SELECT paused_at FROM {paused} WHERE routine = %s"), (routine,)
    ).fetchone()
    return None if row is None else truncate_ms(row[0])


def resumed_pause_since(conn: Conn, _call: Call, tables: Schema, routine: str) -> datetime | None:
    """When the pause ``routine``'s latest resume ended began; None when not known."""
    row = conn.execute(
        tables.sql("SELECT paused_at FROM {resumed} WHERE routine = %s"), (routine,)
    ).fetchone()
    return None if row is None or row[0] is None else truncate_ms(row[0])


def paused(conn: Conn, _call: Call, tables: Schema) -> frozenset[str]:
    """The paused routines."""
    rows = conn.execute(tables.sql("SELECT routine FROM {paused}"))
    return frozenset(routine for (routine,) in rows)


def paused_with_resumes(
    conn: Conn, _call: Call, tables: Schema, since: datetime
) -> tuple[frozenset[str], dict[str, tuple[datetime, datetime | None]]]:
    """The paused routines, and those resumed at ``since`` or later, each with its latest
    resume's instant and when the pause it ended began (None: not known): one statement, so
    one snapshot (a resume is one transaction, which removes the pause and keeps its instant:
    a read sees both or neither)."""
    rows = conn.execute(
        tables.sql(
            "SELECT routine, true, NULL::timestamptz, NULL::timestamptz FROM {paused} "
            "UNION ALL SELECT routine, false, resumed_at, paused_at FROM {resumed} "
            "WHERE resumed_at >= %s"
        ),
        (truncate_ms(since),),
    )
    names: list[str] = []
    resumed: dict[str, tuple[datetime, datetime | None]] = {}
    for routine, paused_now, at, began in rows:
        if paused_now:
            names.append(routine)
        else:
            resumed[routine] = (truncate_ms(at), None if began is None else truncate_ms(began))
    return frozenset(names), resumed
