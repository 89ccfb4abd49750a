"""How a replica's own connection ends (see holds.py's module doc).

A connection given up on may still be in use by a thread blocked inside libpq, and psycopg's
``close()`` takes no lock: closing it from another thread would free what that thread uses.
So a lost connection is first shut down through a socket of our own on it (:func:`socket_on`,
taken when it connected), which ends it for the server and wakes the blocked call, and only
then closed, in a thread of its own, under the lock psycopg takes for every call on it
(:func:`close_after_use`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from typing import Any

import psycopg

from .conn import THREAD_NAME

Conn = psycopg.Connection[Any]


def socket_on(conn: Conn) -> socket.socket:
    """A socket of our own on ``conn``'s connection: a duplicate of libpq's descriptor."""
    fd = os.dup(conn.pgconn.socket)
    try:
        return socket.socket(fileno=fd)
    except BaseException:
        os.close(fd)
        raise


def close_both(made: tuple[Conn, socket.socket | None]) -> None:
    """A connection made after its caller gave up, and our socket on it."""
    conn, line = made
    with contextlib.suppress(Exception):
        conn.close()
    if line is not None:
        line.close()


def shut_down(line: socket.socket) -> None:
    """The end of the connection for the server and for a call blocked on it; the descriptor
    is ours, so no other connection can have been given its number."""
    with contextlib.suppress(OSError):
        line.shutdown(socket.SHUT_RDWR)
    line.close()


def close_later(conn: Conn) -> None:
    """:func:`close_after_use` in a daemon thread: it may wait for a call that never returns,
    and it must run even when the Trio run that lost the connection is ending."""
    threading.Thread(target=close_after_use, args=(conn,), name=THREAD_NAME, daemon=True).start()


def close_after_use(conn: Conn) -> None:
    """Close once no call is inside libpq on it (psycopg's own close does not wait)."""
    with contextlib.suppress(Exception), conn.lock:
        conn.close()


def once_free(conn: Conn, bound: float) -> None:
    """Return once no call is on ``conn`` (at most ``bound`` seconds: the thread is not left
    waiting for ever when its caller gave up)."""
    if conn.lock.acquire(timeout=bound):
        conn.lock.release()


def in_use(conn: Conn) -> bool:
    """Whether a call is on ``conn`` now."""
    if conn.lock.acquire(blocking=False):
        conn.lock.release()
        return False
    return True
