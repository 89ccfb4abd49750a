"""How a replica's own connection ends (see holds.py's module doc).

A connection given up on may still be in use by a thread blocked inside libpq, and psycopg's
``close()`` takes no lock: closing it from another thread would free what that thread uses.
So a lost connection is first shut down through a socket of our own on it (:func:`socket_on`,
taken when it connected), which ends it for the server and wakes the blocked call, and only
then closed, in a thread of its own, under the lock psycopg takes for each statement on it
(:func:`close_after_use`): a statement after that finds the connection closed and raises.

Whether a call is still on the connection is told by the call's own thread as it ends
(:class:`CallEnd`), not by that lock: a call of several statements (a leave) lets go of it
between them.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

import psycopg
import trio

from .call import reason
from .conn import THREAD_NAME

Conn = psycopg.Connection[Any]
T = TypeVar("T")


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
    and it must run even when the Trio run that lost the connection is ending. Where no
    thread can be started, the connection is left to the garbage collector, which closes it
    once the last call on it has let go of it (the connection is shut down already)."""
    closing = threading.Thread(target=close_after_use, args=(conn,), name=THREAD_NAME, daemon=True)
    with contextlib.suppress(RuntimeError):  # "can't start new thread"
        closing.start()


def close_after_use(conn: Conn) -> None:
    """Close once no statement is inside libpq on it (psycopg's own close does not wait)."""
    with contextlib.suppress(Exception), conn.lock:
        conn.close()


class CallEnd:
    """How a call on the connection went, as the threads involved tell it: whether its thread
    was started (:attr:`launched`), whether the call has ended (``done``, and :attr:`seen`
    in Trio's thread), and, if it failed on the connection, why (one line)."""

    def __init__(self) -> None:
        self.launched = False
        self.done = threading.Event()
        self.seen = trio.Event()
        self.why: str | None = None
        self._token = trio.lowlevel.current_trio_token()

    def tell(self) -> None:
        """In the call's thread, as it ends."""
        self.done.set()
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self.seen.set)

    def limiter(self) -> trio.CapacityLimiter:
        """The limiter that the call's thread is started under (Trio takes any object with
        a limiter's two methods; its annotation names the class it ships)."""
        return cast(
            trio.CapacityLimiter, Launching(trio.to_thread.current_default_thread_limiter(), self)
        )


class Launching:
    """A thread limiter that notes in ``end`` that the call's thread is started: Trio starts
    it as soon as its limiter is acquired, with nothing in between that a cancel can stop. A
    call cancelled before that never reaches the connection."""

    def __init__(self, inner: trio.CapacityLimiter, end: CallEnd) -> None:
        self._inner = inner
        self._end = end

    async def acquire_on_behalf_of(self, borrower: object) -> None:
        await self._inner.acquire_on_behalf_of(borrower)
        self._end.launched = True

    def release_on_behalf_of(self, borrower: object) -> None:
        self._inner.release_on_behalf_of(borrower)


def marking_end(fn: Callable[[Conn], T], conn: Conn, end: CallEnd) -> T:
    """``fn(conn)``, ``end`` told once it has returned or raised: the end of a whole call,
    which ``conn.lock`` does not tell, psycopg taking it for each statement in turn."""
    try:
        return fn(conn)
    except psycopg.Error as exc:
        end.why = reason(exc)
        raise
    finally:
        end.tell()


#: Seconds a stir that is a call's own reply is let be (the call reads it).
STIR_PAUSE = 0.05


async def stirred_on(sock: socket.socket, busy: Callable[[], bool], lost: trio.Event) -> None:
    """Return once ``sock``'s connection became readable while ``busy()`` is false (no call
    of ours on it, whose reply it would be: the server ended it, or said why first), or once
    ``lost`` is set. Waits on a descriptor of its own, closed once the wait is over: nothing
    else closes it under the wait."""
    watch = socket.socket(fileno=os.dup(sock.fileno()))
    try:
        async with trio.open_nursery() as nursery:

            async def ended() -> None:
                await lost.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(ended)
            while True:
                await trio.lowlevel.wait_readable(watch)
                if busy():  # a reply to a call of ours: it reads it
                    await trio.sleep(STIR_PAUSE)
                    continue
                try:  # still there once no call is on it (a reply read meanwhile is not)
                    watch.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
                except BlockingIOError:
                    continue
                except OSError:
                    pass  # the connection broke: the watch's check will say so
                break
            nursery.cancel_scope.cancel()
    finally:
        watch.close()
