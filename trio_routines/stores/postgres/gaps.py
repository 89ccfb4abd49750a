"""Gaps, and when each routine was first armed, in PostgreSQL (see :mod:`trio_routines.gaps`).

``trio_routines_gaps`` (schema version 6) holds a row per gap, changed under an advisory
transaction lock per routine by :func:`trio_routines.gaps.add_gap`'s rule; a ``store`` gap is
written only when no claim of the routine lies from its first slot to its last, checked in the
same transaction. ``trio_routines_armed`` (schema version 7) holds one row per routine,
inserted the first time a scheduler arms it and never updated: a boot names every routine it
arms without a claim in one call -- one query reads them, and only the routines missing are
inserted (``ON CONFLICT DO NOTHING``: two schedulers arming a new routine at once keep the
first row written), in the same transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from ...gaps import add_gap, extends_newest
from ...records import Gap, GapReason
from .schema import GAP_LOCK, Schema

log = logging.getLogger("trio_routines")
Conn = psycopg.Connection[Any]


def record_gap(
    conn: Conn, schema: Schema, routine: str, gap: Gap, extends: datetime | None
) -> bool:
    """Add ``gap`` to ``routine``'s gaps; False when it was accounted for already."""
    with conn.transaction():
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))", (GAP_LOCK, routine)
        )
        if gap.reason is GapReason.STORE and _claimed_within(conn, schema, routine, gap):
            return False  # a claim whose answer was lost: a claim, not a gap
        gaps = read_gaps(conn, schema, routine)
        changed = add_gap(gaps, gap, extends)
        if changed is None:
            return False
        newest = changed[-1]
        if extends_newest(gaps, gap, extends):
            conn.execute(  # the newest gap extended
                schema.sql(
                    "UPDATE {gaps} SET last_slot = %s, count = %s, estimated = %s "
                    "WHERE routine = %s AND last_slot = %s"
                ),
                (newest.last, newest.count, newest.estimated, routine, gaps[-1].last),
            )
            return True
        conn.execute(
            schema.sql(
                "INSERT INTO {gaps} (routine, first_slot, last_slot, count, reason, estimated) "
                "VALUES (%s, %s, %s, %s, %s, %s)"
            ),
            (routine, gap.first, gap.last, gap.count, gap.reason.value, gap.estimated),
        )
        conn.execute(  # beyond the retention
            schema.sql("DELETE FROM {gaps} WHERE routine = %s AND last_slot < %s"),
            (routine, changed[0].last),
        )
        return True


def _claimed_within(conn: Conn, schema: Schema, routine: str, gap: Gap) -> bool:
    query = "SELECT EXISTS (SELECT 1 FROM {claims} WHERE routine = %s AND slot BETWEEN %s AND %s)"
    row = conn.execute(schema.sql(query), (routine, gap.first, gap.last)).fetchone()
    return bool(row and row[0])


def read_gaps(conn: Conn, schema: Schema, routine: str) -> list[Gap]:
    """The retained gaps of ``routine``, oldest first: :func:`gaps_of` for one routine."""
    return gaps_of(conn, None, schema, "", [routine])[0]


def gaps_of(
    conn: Conn, _call: object, schema: Schema, _where: str, routines: list[str]
) -> list[list[Gap]]:
    """Each routine's retained gaps, oldest first, in the routines' order (a routine may come
    more than once): one query, whatever their number. A row that is no gap is left out with
    a warning (a reason this version does not know, written by a newer one). A boot asks for
    the gaps of every routine that catches up at once
    (:class:`~trio_routines.stores.newest.BatchedReads` gathers them); a query per routine,
    10,000 at once, outlived the store's deadline."""
    rows = conn.execute(
        schema.sql(
            "SELECT routine, first_slot, last_slot, count, reason, estimated FROM {gaps} "
            "WHERE routine = ANY(%s) ORDER BY routine, last_slot"
        ),
        (list(dict.fromkeys(routines)),),
    )
    found: dict[str, list[Gap]] = {}
    for routine, first, last, count, reason, estimated in rows:
        try:
            gap = Gap(first, last, count, reason, estimated)
        except Exception as exc:  # that routine's row alone, never another's reading
            log.warning("ignoring a gap of %r that cannot be read: %s", routine, exc)
            continue
        found.setdefault(routine, []).append(gap)
    return [list(found.get(routine, ())) for routine in routines]


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
