"""A replica's join of a PostgreSQL store, on its own liveness connection (holds.py): the
keepalive settings, its advisory lock, its row, and the housekeeping a join does for the
replicas gone before it. Each step is a statement on the one connection, in its thread."""

from __future__ import annotations

import contextlib
import socket
from typing import Any, NamedTuple

import psycopg

from ...presence import IdInUse
from ...replicas import ReplicaInfo, replica_key
from .alive import COLUMNS, LOCKS, keys_held, namespace
from .call import Call
from .conn import bounded_instants
from .ending import close_both, socket_on
from .schema import Schema

Conn = psycopg.Connection[Any]

# The server's side of noticing a vanished replica: idle 10 s, then 3 probes 5 s apart; data
# unacknowledged for 25 s ends the connection too. A statement the server is still running (a
# lock wait) reads nothing from the socket: it looks for the end of ours every second
# (PostgreSQL 14 and later; an older server passes it over).
KEEPALIVE = {
    "tcp_keepalives_idle": "10",
    "tcp_keepalives_interval": "5",
    "tcp_keepalives_count": "3",
    "tcp_user_timeout": "25000",
    "client_connection_check_interval": "1000",
}
FORGET_AFTER = "1 day"  # a dead replica's row is deleted by the next join after this

_FORGET = f"""WITH held AS MATERIALIZED ({LOCKS})
    DELETE FROM {{holds}} AS h WHERE NOT EXISTS (
        SELECT 1 FROM held WHERE held.hi = h.holder >> 32 AND held.lo = h.holder & 4294967295)"""


class Line(NamedTuple):
    """A replica's own connection, our socket on it, and the store's namespace it joined."""

    conn: Conn
    sock: socket.socket
    namespace: str


def open_line(url: str, kwargs: dict[str, Any], schema: Schema, info: ReplicaInfo) -> Line:
    """Connect (``kwargs``: the pool's settings and our own), and join on that connection
    (:func:`join_on`). In a thread: a blocking call."""
    conn: Conn = psycopg.connect(url, **kwargs)
    line = None
    try:
        bounded_instants(conn)
        line = socket_on(conn)
        return Line(conn, line, join_on(conn, schema, info))
    except BaseException:
        close_both((conn, line))
        raise


def close_line(made: Line) -> None:
    """A line made after its caller gave up: closed, which lets the replica's lock go."""
    close_both((made.conn, made.sock))


def join_on(conn: Conn, schema: Schema, info: ReplicaInfo) -> str:
    """Join as ``info`` on ``conn``: its keepalives set, our id's lock taken (or
    :class:`IdInUse`), our row written, and the rows and holds of replicas gone forgotten.
    Returns the store's namespace (our key in it is our lock and our rows' holder)."""
    for setting, value in KEEPALIVE.items():
        with contextlib.suppress(psycopg.errors.UndefinedObject):
            conn.execute("SELECT set_config(%s, %s, false)", (setting, value))
    space = namespace(conn, schema)
    holder = replica_key(info.id, space)
    (mine,) = conn.execute("SELECT pg_try_advisory_lock(%s)", (holder,)).fetchone() or (False,)
    if not mine:
        raise IdInUse(
            f"replica id {info.id!r} is in use by a live replica — give each replica its own "
            "id (--replica, or the scheduler's replica=)"
        )
    conn.execute(
        schema.sql(
            f"INSERT INTO {{replicas}} ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, 0) "
            "ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, "
            "host = EXCLUDED.host, pid = EXCLUDED.pid, started = EXCLUDED.started, "
            "last_seen = EXCLUDED.last_seen, in_flight = 0"
        ),
        (info.id, info.version, info.host, info.pid, info.started, info.last_seen),
    )
    _forget_dead(conn, schema, space)
    conn.execute(schema.sql(_FORGET))  # the holds of replicas gone
    # And those of an earlier process under our id (killed, then started again): its lock is
    # ours now, so they would read as held for as long as we live, and each of their
    # sessions as busy. None is a live one's: that would hold our lock.
    conn.execute(schema.sql("DELETE FROM {holds} WHERE holder = %s"), (holder,))
    return space


def _forget_dead(conn: Conn, schema: Schema, space: str) -> None:
    """Delete the rows of replicas gone for over a day (their lock free)."""
    rows = conn.execute(
        schema.sql(
            f"SELECT id FROM {{replicas}} WHERE last_seen < now() - interval '{FORGET_AFTER}'"
        )
    ).fetchall()
    ids = [replica_id for (replica_id,) in rows]
    held = keys_held(conn, Call(), [replica_key(replica_id, space) for replica_id in ids])
    dead = [replica_id for replica_id, live in zip(ids, held, strict=True) if not live]
    if dead:
        conn.execute(schema.sql("DELETE FROM {replicas} WHERE id = ANY(%s)"), (dead,))
