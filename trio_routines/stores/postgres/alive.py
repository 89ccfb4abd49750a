"""Who is alive in a PostgreSQL store: the replicas whose id's advisory lock is held.

A replica holds the session-level advisory lock of its id for as long as its own connection
lives (``holds.py``). Anyone reads whose lock is held from ``pg_locks``, which needs no
privilege: a bigint key shows as its high half in ``classid``, its low half in ``objid``, with
``objsubid`` 1. The keys are per database, so a store's keys are made in its own namespace:
the OID of its replicas table (:func:`namespace`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import attrs
import psycopg

from ...replicas import ReplicaInfo, replica_key, session_key
from .call import Call
from .schema import Schema

Conn = psycopg.Connection[Any]

_HELD = """WITH held AS MATERIALIZED (
        SELECT l.classid::bigint AS hi, l.objid::bigint AS lo FROM pg_locks AS l
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
            AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))
    SELECT EXISTS (SELECT 1 FROM held AS h WHERE h.hi = t.hi AND h.lo = t.lo)
    FROM unnest(%s::bigint[], %s::bigint[]) WITH ORDINALITY AS t (hi, lo, n) ORDER BY t.n"""
LOCKS = """SELECT l.classid::bigint AS hi, l.objid::bigint AS lo FROM pg_locks AS l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
        AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"""
COLUMNS = "id, version, host, pid, started, last_seen, in_flight"
_CLAIMED_BY = """SELECT c.replica
    FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS t (e, n)
        LEFT JOIN {claims} AS c ON c.routine = t.e->>0 AND c.slot = (t.e->>1)::timestamptz
            AND c.outcome IS NULL
    ORDER BY t.n"""


# A session's hold is a row of the holds table whose holder's lock is held (holds.py).
_SESSIONS_HELD = f"""WITH held AS MATERIALIZED ({LOCKS})
    SELECT EXISTS (SELECT 1 FROM {{holds}} AS h JOIN held
            ON held.hi = h.holder >> 32 AND held.lo = h.holder & 4294967295
        WHERE h.key = t.k)
    FROM unnest(%s::bigint[]) WITH ORDINALITY AS t (k, n) ORDER BY t.n"""


def _json_array(rows: list[list[str]]) -> str:
    return json.dumps(rows, ensure_ascii=False, separators=(",", ":"))


def claims_alive(
    conn: Conn, call: Call, schema: Schema, claims: Sequence[tuple[str, datetime]]
) -> list[bool]:
    """Whether each claim is open and the replica it names holds its id's lock now."""
    if not claims:
        return []
    rows = conn.execute(
        schema.sql(_CLAIMED_BY),
        (_json_array([[routine, slot.isoformat()] for routine, slot in claims]),),
    ).fetchall()
    space = namespace(conn, schema)
    names = sorted({replica for (replica,) in rows if replica is not None})
    held = dict(
        zip(names, keys_held(conn, call, [replica_key(n, space) for n in names]), strict=True)
    )
    return [replica is not None and held[replica] for (replica,) in rows]


def sessions_held(conn: Conn, _call: Call, schema: Schema, sessions: Sequence[str]) -> list[bool]:
    """Whether each session's hold is held now: its row, and its holder's lock."""
    if not sessions:
        return []
    keys = [session_key(session) for session in sessions]
    rows = conn.execute(schema.sql(_SESSIONS_HELD), (keys,)).fetchall()
    return [bool(held) for (held,) in rows]


def keys_held(conn: Conn, _call: Call, keys: Sequence[int]) -> list[bool]:
    """Whether some connection to this database holds each advisory lock now."""
    if not keys:
        return []
    rows = conn.execute(_HELD, ([k >> 32 for k in keys], [k & 0xFFFFFFFF for k in keys]))
    return [bool(held) for (held,) in rows]


def namespace(conn: Conn, schema: Schema) -> str:
    """What sets this store's replica locks apart from another schema's in the same database
    (advisory locks are per database): the OID of its replicas table."""
    name = schema.sql("{replicas}").as_string(conn)
    row = conn.execute("SELECT to_regclass(%s)::oid", (name,)).fetchone()
    return str(row[0]) if row and row[0] is not None else ""


def replica_rows(conn: Conn, call: Call, schema: Schema) -> list[ReplicaInfo]:
    """Every replica that joined, each marked alive or not by its lock."""
    rows = conn.execute(schema.sql(f"SELECT {COLUMNS} FROM {{replicas}} ORDER BY started, id"))
    infos = [ReplicaInfo(*row) for row in rows]
    space = namespace(conn, schema)
    alive = keys_held(conn, call, [replica_key(info.id, space) for info in infos])
    return [attrs.evolve(info, alive=live) for info, live in zip(infos, alive, strict=True)]
