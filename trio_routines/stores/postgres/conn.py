"""Connections for the PostgreSQL store: a pool, and store calls bounded on our side.

Theory of operation. Every store call is one short piece of blocking psycopg (sync API) work
run in a worker thread, bounded by the store's capacity limiter, on a connection from a
``psycopg_pool.ConnectionPool`` opened on first use (the first call on it also migrates the
schema). Nothing the server or the network does may hold a call for longer than our own
bound, because calls run inside shielded fires and a stop's grace must hold:

* **Our deadline, first line.** Each call runs under a Trio deadline of ``timeout`` plus one
  second, in a thread started with ``abandon_on_cancel``: when it passes, the caller gets a
  :class:`~trio_routines.errors.StateFault` at once and the thread is left to finish on its
  own. A socket that stalls silently (a frozen proxy, a half-open connection) answers
  nothing, so no server-side setting can notice it; only this deadline does.
* **Server and kernel, second line.** ``statement_timeout``, ``lock_timeout`` and
  ``idle_in_transaction_session_timeout`` are ``timeout`` (the extra second lets the server's
  own, more precise error arrive first when the network is alive); ``connect_timeout``, TCP
  keepalives and ``tcp_user_timeout`` make the kernel drop a connection whose peer vanished,
  which is what eventually frees an abandoned thread and its connection.
* **A caller that gave up.** The thread sees the call's ``abandoned`` event. Work that has
  not committed checks it before committing and rolls back instead (:meth:`Call.before_commit`:
  see the claims and wake-ups modules). A commit already sent cannot be called back: the
  caller is then told the change is not confirmed (:class:`~trio_routines.errors.Unconfirmed`:
  it may be made, look before asking again), never that it could not be made; and where the
  change took something for the caller (a claim, a wake-up), the thread gives it back once
  the late answer comes (the claims and wake-ups modules).

A connection that died while idle (a killed backend, a restarted server) fails the empty
query each call starts with, before anything of ours was sent, so the call moves on to the
next connection and the pool replaces the dead one. A call waiting for a connection gives up
as soon as an attempt to connect that began after it failed (the server refuses, the name
does not resolve), with that attempt's reason, rather than waiting out its bound.

Logs. psycopg and its pool log multi-line records of their own (a refused connection is
several lines, every retry). Records from our threads are taken off those loggers and logged
again on ours at DEBUG, as one line; the newest connection failure of each pool is kept for
the StateFault that reports it.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar, TypeVarTuple

import psycopg
import trio
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.datetime import TimestamptzLoader
from psycopg_pool import ConnectionPool, PoolTimeout

from ...errors import StateFault
from ...instants import FIRST_INSTANT, LAST_INSTANT
from ...text import one_line
from ..credentials import shown_message
from .call import (
    LOOK_FIRST,
    Call,
    CallFault,
    NoConnection,
    UnconfirmedCall,
    connection_lost,
    nothing,
    reason,
    undo,
    undone_not,
)
from .schema import Schema

log = logging.getLogger("trio_routines")
Ts = TypeVarTuple("Ts")
T = TypeVar("T")

# How much longer than the server-side limits our own deadline is: the server's error,
# which says what went wrong, wins whenever the network still carries it.
SERVER_FIRST = 1.0
# How long closing may wait for the pool's threads.
CLOSE_BOUND = 2.0
# Every thread that works for a store has a name starting so: our calls' threads and the
# pools' workers (``<pool name>-worker-N``, ``<pool name>-scheduler``).
THREAD_NAME = "trio_routines store"
#: Seconds between two checks of the schema version on a pool's calls (the first call checks
#: at once): a database a newer replica migrated beyond what we may use stops our calls,
#: each with the one-line reason, within this long.
SCHEMA_RECHECK = 30.0
_POOL_NAMES = (f"trio_routines-{n}" for n in itertools.count(1))
# How often a call waiting for a connection looks whether an attempt to connect failed.
_WAIT_SLICE = 0.1


class _OurRecords(logging.Filter):
    """Takes psycopg's records made in our threads; keeps each pool's newest connect error."""

    def __init__(self) -> None:
        super().__init__()
        self.connect_errors: dict[str, tuple[float, str]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not (record.threadName or "").startswith("trio_routines"):
            return True  # not ours: the host application's own use of psycopg
        text = one_line(record.getMessage())
        if record.msg == "error connecting in %r: %s" and isinstance(record.args, tuple):
            pool, error = record.args
            # libpq's lines ("… failed: Connection refused", "Is the server running …?")
            # joined as clauses, not run together.
            said = "; ".join(line.strip() for line in str(error).splitlines() if line.strip())
            self.connect_errors[str(pool)] = (time.monotonic(), one_line(said))
        log.debug("PostgreSQL: %s", text)
        return False


_records = _OurRecords()
for _name in ("psycopg", "psycopg.pool"):
    logging.getLogger(_name).addFilter(_records)


_SEARCH_PATH = re.compile(r"-c\s*search_path\s*=\s*(\S+)")


def _search_path(options: str) -> str | None:
    """The ``search_path`` a URL's ``options`` set (``-csearch_path=mine``), if any."""
    found = _SEARCH_PATH.search(options)
    return found.group(1) if found else None


class Connections:
    """The pool of one store and the bounded way every call goes through it."""

    def __init__(
        self,
        url: str,
        schema: Schema,
        *,
        min_size: int,
        max_size: int,
        timeout: float,
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        try:
            info = conninfo_to_dict(url)
        except psycopg.Error as exc:  # libpq quotes the token it stumbled on: maybe a password
            raise StateFault(
                f"invalid PostgreSQL state URL: {shown_message(reason(exc), url)}"
            ) from None
        except UnicodeDecodeError:  # libpq decoded a percent-escape into bytes of no UTF-8
            raise StateFault(
                "invalid PostgreSQL state URL: a percent-escape in it is not UTF-8 (%ff, say)"
            ) from None
        if "@" in str(info.get("host", "")):  # libpq ends the user-info at the first "@"
            raise StateFault(
                "invalid PostgreSQL state URL: an '@' in its host — percent-encode an '@' in "
                "the user name or password as %40"
            )
        self.url = url
        self.schema = schema
        self.timeout = timeout
        #: The server and database, without credentials; ``where``: and the schema, if chosen
        #: (two stores in one database differ by it), as every message names the store.
        self.server = "postgresql://{}:{}/{}".format(
            info.get("host", ""), info.get("port", "5432"), info.get("dbname", "")
        )
        chosen = schema.schema or _search_path(str(info.get("options") or ""))
        self.where = f"{self.server} (schema {chosen[:64]})" if chosen else self.server
        # Anything the URL sets wins over our defaults.
        defaults: dict[str, Any] = {
            "connect_timeout": max(1, round(timeout)),
            # Notice a peer that vanished without closing: probes after 5 s of silence...
            "keepalives": 1,
            "keepalives_idle": 5,
            "keepalives_interval": 2,
            "keepalives_count": 3,
            # ...and data unacknowledged for as long as a call may take.
            "tcp_user_timeout": max(1000, round(timeout * 1000)),
        }
        self._kwargs: dict[str, Any] = {"autocommit": True}
        self._kwargs.update({key: value for key, value in defaults.items() if key not in info})
        self._sizes = (min_size, max_size)
        self._limiter = trio.CapacityLimiter(max_size)
        self._pool: ConnectionPool | None = None
        self._pool_name = next(_POOL_NAMES)
        self._closed = False
        self._open_lock = threading.Lock()
        self._schema_lock = threading.Lock()
        self._schema_checked = -math.inf  # time.monotonic() of the last check (see _call)

    @property
    def kwargs(self) -> dict[str, Any]:
        """The connection arguments the pool uses beyond the URL (a copy)."""
        return dict(self._kwargs)

    async def run(
        self,
        what: str,
        fn: Callable[[psycopg.Connection[Any], Call, *Ts], T],
        *args: *Ts,
        unsure: str | None = None,
        then: str = LOOK_FIRST,
        lost: str = LOOK_FIRST,
    ) -> T:
        """``fn(conn, call, *args)`` in a thread, within our bound; faults as StateFault.
        ``unsure``: what a caller cut off once the commit was sent is told (``adding a
        wake-up is not confirmed``); ``then``: what to do about it when the thread goes on
        (its answer may still come), ``lost``: when the connection was lost under it."""
        call = Call()
        try:
            with trio.move_on_after(self.timeout + SERVER_FIRST):
                return await trio.to_thread.run_sync(
                    self._call,
                    call,
                    fn,
                    *args,
                    limiter=self._limiter,
                    abandon_on_cancel=True,
                    thread_name=THREAD_NAME,
                )
        except (psycopg.Error, NoConnection) as exc:
            if call.committing and connection_lost(exc):  # the commit's answer, lost
                why = f"the commit was sent, and the connection was lost ({reason(exc)}); {lost}"
                raise UnconfirmedCall(unsure or f"{what}: not confirmed", self.where, why) from None
            raise CallFault(what, self.where, reason(exc)) from None
        except BaseException:  # the caller's cancellation: the thread is on its own
            if call.give_up() is not None and call.undo is not None:
                # Handed over as the caller left: nobody reads it. Undone on a connection of
                # its own, since the caller cannot wait (a stop's grace ran out, say).
                trio.lowlevel.start_thread_soon(
                    functools.partial(self._undo_apart, call), nothing, name=THREAD_NAME
                )
            raise
        answer = call.give_up()  # our deadline: the thread is on its own
        if answer is not None:
            return answer[0]  # type: ignore[no-any-return]  # what fn returned
        bound = self.timeout + SERVER_FIRST
        stalled = f"no answer within {bound:g} s — the server or the network is stalled"
        if call.committing or call.carries_on:  # read after giving up: Call.before_commit
            why = f"the commit was sent, and {stalled}; {then}"
            raise UnconfirmedCall(unsure or f"{what}: not confirmed", self.where, why)
        raise CallFault(what, self.where, stalled)

    def _call(
        self, call: Call, fn: Callable[[psycopg.Connection[Any], Call, *Ts], T], *args: *Ts
    ) -> T:
        pool = self._pool_ready()
        deadline = time.monotonic() + self.timeout
        for attempt in itertools.count():
            call.unless_given_up()
            with self._connection(pool, deadline) as conn:
                try:
                    conn.execute("")
                except psycopg.OperationalError:
                    if attempt < self._sizes[1] and time.monotonic() < deadline:
                        continue
                    raise
                # Checked again now and then: a newer replica may migrate the database under
                # a running one, which must stop using it if it is no longer allowed to.
                if time.monotonic() - self._schema_checked >= SCHEMA_RECHECK:
                    with self._schema_lock:
                        if time.monotonic() - self._schema_checked >= SCHEMA_RECHECK:
                            self.schema.migrate(conn, self.where)
                            self._schema_checked = time.monotonic()
                answer = fn(conn, call, *args)
                if not call.hand_over(answer):
                    undo(call, conn)  # on this connection, still ours
                return answer
        raise AssertionError("unreachable")

    @contextmanager
    def _connection(self, pool: ConnectionPool, deadline: float) -> Iterator[Any]:
        began = time.monotonic()
        while True:
            try:
                conn = pool.getconn(timeout=max(0.0, min(_WAIT_SLICE, deadline - time.monotonic())))
                break
            except PoolTimeout:
                failed = _records.connect_errors.get(self._pool_name)
                if failed is not None and failed[0] >= began:
                    raise NoConnection(failed[1]) from None
                if time.monotonic() >= deadline:
                    why = f"none within {self.timeout:g} s"
                    if failed is not None:
                        why += f"; the last attempt failed: {failed[1]}"
                    raise NoConnection(why) from None
        try:
            yield conn
        finally:
            pool.putconn(conn)

    def _undo_apart(self, call: Call) -> None:
        """Undo ``call``'s change on a connection of its own, within our bound, as any call
        gets one (a dead idle connection passed over)."""
        try:
            self._call(Call(), lambda conn, _: undo(call, conn))
        except (StateFault, psycopg.Error, NoConnection) as exc:  # no connection, say
            undone_not(call, exc)

    def _pool_ready(self) -> ConnectionPool:
        with self._open_lock:
            if self._closed:
                raise StateFault(f"the PostgreSQL store {self.where} is closed")
            if self._pool is None:
                # Not waiting for the first connection: a server that is down now makes each
                # call time out (a StateFault) while the pool keeps trying in the background.
                self._pool = ConnectionPool(
                    self.url,
                    kwargs=self._kwargs,
                    min_size=self._sizes[0],
                    max_size=self._sizes[1],
                    open=False,
                    configure=self._configure,
                    timeout=self.timeout,
                    name=self._pool_name,
                )
                self._pool.open(wait=False)
            return self._pool

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        bounded_instants(conn)
        # A claim must be durable before it is reported taken: refuse a server-wide "off".
        conn.execute(
            "SELECT set_config('synchronous_commit', 'on', false) "
            "WHERE current_setting('synchronous_commit') = 'off'"
        )
        # The stale check reads the newest claim after the routine's lock is granted: that
        # needs READ COMMITTED, whatever the server says.
        limit = str(max(1, round(self.timeout * 1000)))
        for setting, value in (
            ("lock_timeout", limit),
            ("statement_timeout", limit),
            ("idle_in_transaction_session_timeout", limit),
            ("default_transaction_isolation", "read committed"),
        ):
            conn.execute("SELECT set_config(%s, %s, false)", (setting, value))

    async def aclose(self) -> None:
        """Close the pool, waiting at most a short bound: a stalled thread is left behind."""
        with trio.move_on_after(CLOSE_BOUND + SERVER_FIRST):
            await trio.to_thread.run_sync(
                self._close, abandon_on_cancel=True, thread_name=THREAD_NAME
            )  # ours: what the pool logs meanwhile is logged again as ours (_OurRecords)

    def _close(self) -> None:
        with self._open_lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close(timeout=CLOSE_BOUND)


class _BoundedLoader(TimestamptzLoader):
    """A ``timestamptz`` past what a datetime holds reads as the calendar's first or last
    instant (instants.py; see :func:`bounded_instants`)."""

    def load(self, data: Any) -> datetime:
        try:
            return super().load(data)
        except psycopg.DataError:  # "too small (before year 1)", or "too large"
            before = bytes(data).startswith(b"-") or bytes(data).endswith(b" BC")
            return FIRST_INSTANT if before else LAST_INSTANT


def bounded_instants(conn: psycopg.Connection[Any]) -> None:
    """Read a ``timestamptz`` that no datetime holds (``infinity``, ``-infinity``, a year
    BC or past 9999: a row written by hand) as the calendar's first or last instant, as the
    state directory reads an instant at its edge, instead of failing every query that
    returns it (a poll of every wake-up, a routine's whole history, a boot)."""
    conn.adapters.register_loader("timestamptz", _BoundedLoader)
