"""Holds in PostgreSQL: one advisory lock per replica, and a table of what each holds.

Theory of operation. A joined replica opens one connection of its own (outside the pool) and
keeps it for its life. On it, it takes the session-level advisory lock of its id
(``pg_try_advisory_lock(bigint)``, never waiting); the server releases it when the
connection ends, which is what makes a replica's holds die with it: a killed process closes
its socket at once; a machine that vanished is noticed by the server's TCP keepalives, which
this connection sets for itself (``tcp_keepalives_*``, ``tcp_user_timeout``:
:data:`KEEPALIVE_BOUND` seconds in all), and one in the middle of a statement by checking
its socket every second (``client_connection_check_interval``). Anyone reads whose lock is
held (``alive.py``).

A claim is held by the replica it names (its ``replica`` column): an open claim is alive while
that replica's lock is held (:func:`claims_alive`), so a fire writes no hold for its claim.
The holds of sessions are rows of an unlogged table, ``(key, holder)``, the holder
being the replica's own key: a hold is held while its row exists **and** its holder's lock
is held. Taking inserts the rows, taking over a row whose holder is dead; letting go deletes
ours. (Not an advisory lock each: the server's lock table holds ``max_locks_per_transaction``
times ``max_connections`` locks, 6,400 by default, which 10,000 fires due at once would
exhaust.) Unlogged: nothing is written to the WAL, and a server crash empties the table,
as it ends every holder's connection anyway.

A fire's session hold is taken in its claim's own transaction (``claims.py``), so it costs
no round trip of its own. The other takes (a run's, a wake-up turn's session) travel together
on the replica's connection: the calls that arrive while one batch is on it form the next
(one round trip each); letting go is not waited for, and rides on the next batch. Every use of the
connection has our deadline; a connection that does not answer in time is dropped, and the
presence is **lost**: the server will let our lock go (at once, or within the keepalive
bound), so the turns we hold are no longer protected and the scheduler ends them. A heartbeat
on the same connection notices a stall even between fires.

A connection given up on may still be in use by the thread we stopped waiting for, blocked
inside libpq; closing it from another thread would free what that thread is using. So a lost
connection is first *shut down* through a socket of our own on the same connection (a
duplicate of libpq's descriptor, taken when it connected: it names this connection whatever
libpq has done with its own descriptor since): the server sees the end and lets our lock go,
and the blocked call returns with an error. The connection is then closed in a thread, under
the lock psycopg takes for each statement on it (``ending.py``). A call whose caller gave up
before our deadline keeps the rest of it, as if still waited for. The presence is lost if
the call is still on the connection at its deadline (it has not returned: its thread tells,
not psycopg's lock, which a call of several statements lets go of between them) or when the
Trio run ends first (nothing is left to wait for the deadline then, and a host's process may
live on after its run), and lost if the call fails on the connection meanwhile, as it would
have been with its caller still there. Until the call returns or its deadline passes, the
connection is still its own: a later call waits (psycopg's lock, taken per statement, would
let the two interleave), its own bound starting after the wait, and then fails if the
presence was lost. A call given up on before its thread started never reached the
connection: nothing is watched, except that a leave so given up on ends the connection (the
replica is on its way out), waiting behind a call given up on earlier included.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import psycopg
import trio

from ...errors import StateFault
from ...presence import IdInUse, Presence
from ...replicas import ReplicaInfo, replica_key
from ..abandon import run_abandoning
from ..batch import Answer, Batcher, Entry
from .alive import LOCKS
from .call import reason
from .conn import THREAD_NAME, Connections
from .ending import CallEnd, close_later, marking_end, shut_down, stirred_on
from .joining import close_line, open_line
from .schema import Schema

log = logging.getLogger("trio_routines")
T = TypeVar("T")
Conn = psycopg.Connection[Any]

#: Seconds a let-go waits for others to travel with it (a session looks busy that much longer).
LET_GO_AFTER = 0.05
KEEPALIVE_BOUND = 25.0  # seconds: the longest a dead replica's locks outlive it

# Our rows for the wanted keys; a row of a dead holder is taken over. The rows are locked in
# the keys' order, as the claims' holds are (claims.py): two replicas taking the same keys
# never deadlock. What comes back is the keys refused (usually none: a herd's keys are not
# sent back one by one).
_TAKE = f"""WITH held AS MATERIALIZED ({LOCKS}),
    wanted AS (SELECT unnest(%(keys)s::bigint[]) AS k),
    taken AS (
        INSERT INTO {{holds}} AS h (key, holder) SELECT k, %(me)s FROM wanted ORDER BY k
        ON CONFLICT (key) DO UPDATE SET holder = EXCLUDED.holder
            WHERE NOT EXISTS (SELECT 1 FROM held
                WHERE held.hi = h.holder >> 32 AND held.lo = h.holder & 4294967295)
        RETURNING h.key)
    SELECT k FROM wanted WHERE k NOT IN (SELECT key FROM taken)"""
_RELEASE = "DELETE FROM {holds} WHERE key = ANY(%(keys)s::bigint[]) AND holder = %(me)s"


def _outlived_why(bound: float) -> str:
    return f"a call given up on by its caller did not return within {bound:g} s"


def _array(keys: Sequence[int]) -> str:
    """A bigint array as one text parameter: psycopg adapts a list item by item in Python,
    which for a herd of 10,000 costs more than the server's work."""
    return "{" + ",".join(map(str, keys)) + "}"


# One caller's request: take these keys (a request of none only lets go of what waits).
_Ops = tuple[bool, tuple[int, ...]]


class PostgresPresence(Presence):
    """A replica's holds on its own connection (see the module doc)."""

    def __init__(self, info: ReplicaInfo, conns: Connections, schema: Schema) -> None:
        super().__init__(info)
        self._conns = conns
        self.held_in = conns.where
        self._schema = schema
        self._conn: Conn | None = None
        self._socket: socket.socket | None = None  # ours, on the connection (see the module doc)
        self._using = trio.Lock()  # one use of the connection at a time
        # A call given up on by its caller, maybe still on the connection: (the connection,
        # its end, its deadline, its bound); the next use waits for it (_left_behind_ended).
        self._left_behind: tuple[Conn, CallEnd, float, float] | None = None
        self._batches: Batcher[_Ops, list[bool]] = Batcher(self._flush, key=id)
        self._letting_go: list[int] = []  # let go of here, not yet in the table
        self._releasing: list[int] = []  # let go of in the round trip under way
        self._sending = False  # a task of ours will send them
        self._namespace = ""  # this store's, once connected (see namespace())
        self._holder: tuple[str, int] | None = None  # (namespace, our key in it), computed once

    async def stirred(self) -> None:
        """Return once the presence is lost, or once our connection became readable with no
        call of ours on it: the server may have ended it (a terminated backend says so, then
        closes; a proxy that restarts closes), and with it our lock: another replica may
        already see our turns dead. The watch then checks the connection at once, rather
        than at its next beat a poll interval later. Waits on a descriptor of its own,
        closed once the wait is over: nothing else closes it under the wait."""
        sock = self._socket
        if sock is None or self.lost.is_set():
            await self.lost.wait()
            return
        await stirred_on(sock, self._using.locked, self.lost)

    @property
    def holder(self) -> int:
        """Our id's key in this store's namespace: the lock we hold, the holder of our rows."""
        key = self._holder
        if key is None or key[0] != self._namespace:
            key = self._holder = (self._namespace, replica_key(self.replica, self._namespace))
        return key[1]

    # -- the connection -------------------------------------------------------------------

    async def _on_connection(self, what: str, fn: Callable[[Conn], T], *, leave: bool = False) -> T:
        """``fn(conn)`` in a thread within our deadline; a fault loses the presence. A
        ``leave``, given up on by its caller before it could start, ends the connection."""
        bound = self._conns.timeout + 1.0
        end = CallEnd()  # told by the call's threads
        try:
            async with self._using:
                await self._left_behind_ended()
                conn = self._conn
                if conn is None or self.lost.is_set():
                    raise self.lost_fault()
                deadline = trio.current_time() + bound
                try:
                    with trio.move_on_at(deadline):
                        return await trio.to_thread.run_sync(
                            marking_end,
                            fn,
                            conn,
                            end,
                            abandon_on_cancel=True,
                            thread_name=THREAD_NAME,
                            limiter=end.limiter(),
                        )
                except trio.Cancelled:
                    # Our caller gave up first (the watch's bound on a beat, a stop's margin
                    # on a leave). A call already on the connection, in its thread, keeps the
                    # rest of its bound, as if still waited for: one that has not returned by
                    # then loses the presence, so that the connection, and our lock on it, do
                    # not stay behind a call that never returns.
                    if end.launched and not self.lost.is_set():
                        self._left_behind = (conn, end, deadline, bound)
                        trio.lowlevel.spawn_system_task(self._outlived, conn, end, deadline, bound)
                    raise
                why = f"no answer within {bound:g} s"
        except psycopg.Error as exc:
            why = reason(exc)
        except trio.Cancelled:
            # A call given up on before its thread started touched nothing; but a leave so
            # given up on ends the connection, the replica being on its way out.
            if leave and not end.launched and not self.lost.is_set() and self._conn is not None:
                self._lose("its leave was given up on before it could start")
            raise
        self._lose(why)
        raise StateFault(f"{what} on {self._conns.where}: {why}")

    async def _left_behind_ended(self) -> None:
        """Before a use of the connection: wait until a call given up on by its caller has
        left it, or until that call's deadline, and judge it (:meth:`_judge`) as its watch
        does. Two calls on one connection would interleave their statements: psycopg locks it
        per statement, not per call."""
        left = self._left_behind
        if left is None or self.lost.is_set():
            return  # (lost: the call fails at once)
        conn, end, deadline, bound = left
        with trio.move_on_at(deadline):
            await end.seen.wait()
        self._left_behind = None
        self._judge(conn, end, _outlived_why(bound))

    async def _outlived(self, conn: Conn, end: CallEnd, deadline: float, bound: float) -> None:
        """Watch a call its caller gave up on until it ends or its ``deadline`` passes, or
        the run ends first (a system task is cancelled only then, and nothing would be left
        to end the connection, and our lock on it, behind a call that never returns); then
        judge what it left (:meth:`_judge`)."""
        try:
            with trio.move_on_at(deadline):
                await end.seen.wait()
        except trio.Cancelled:
            self._judge(conn, end, "the run ended with a call given up on by its caller on it")
            raise
        self._judge(conn, end, _outlived_why(bound))

    def _judge(self, conn: Conn, end: CallEnd, still_on: str) -> None:
        """After a call its caller gave up on: lose the presence if the call is still on
        ``conn`` (``still_on`` says why) or failed on it, as with its caller there; forget
        ``conn`` if the call closed it (a leave that ended after its caller left)."""
        if self._conn is not conn:
            return
        if not end.done.is_set():
            self._lose(still_on)
        elif end.why is not None:
            self._lose(end.why)
        elif conn.closed:
            self._let_connection_go()

    def _lose(self, why: str) -> None:
        if self.lost.is_set():
            return
        log.error(
            "replica %s lost its connection to %s (%s) — the turns it holds are ended; "
            "the server lets its holds go within %g s",
            self.replica,
            self._conns.where,
            why,
            KEEPALIVE_BOUND,
        )
        self.lost.set()
        conn, self._conn = self._conn, None
        line, self._socket = self._socket, None
        if line is not None:
            shut_down(line)
        if conn is not None:
            close_later(conn)  # once no statement is inside libpq on it

    async def connect(self) -> None:
        """Open our connection and take the replica's own lock (StateFault: id in use)."""
        kwargs = dict(self._conns.kwargs)
        kwargs["application_name"] = f"trio_routines {self.replica}"[:63]
        bound = self._conns.timeout + 1.0
        with trio.move_on_after(bound):
            try:
                # Left to its thread when we give up; a connection (and its lock) made after
                # that is closed there, not left to the garbage collector.
                made = await run_abandoning(
                    open_line,
                    self._conns.url,
                    kwargs,
                    self._schema,
                    self.info,
                    limiter=None,
                    late=close_line,
                )
                self._conn, self._socket, self._namespace = made
            except IdInUse as exc:  # kept as such: a rejoin waits for our own earlier lock
                raise IdInUse(f"could not join {self._conns.where}: {exc}") from None
            except (psycopg.Error, OSError) as exc:  # OSError: no descriptor left for ours
                raise StateFault(
                    f"could not join {self._conns.where} as replica {self.replica}: {reason(exc)}"
                ) from None
            return
        raise StateFault(
            f"could not join {self._conns.where} as replica {self.replica}: "
            f"no answer within {bound:g} s"
        )

    # -- holds ----------------------------------------------------------------------------

    async def _take(self, keys: list[int]) -> list[bool]:
        taken: list[bool] = await self._batches.submit((True, tuple(keys)))
        return taken

    def _let_go(self, keys: list[int]) -> None:
        # Not waited for: the next batch lets them go before it takes anything, and a task of
        # ours sends one soon if no take does. Until then they look held a moment longer.
        self._letting_go.extend(keys)
        if not self._sending:
            self._sending = True
            trio.lowlevel.spawn_system_task(self._send)

    def letting_go(self, keys: Sequence[int]) -> bool:
        # Not yet sent, or on its way: a claim on another connection must wait for both.
        going = self._letting_go + self._releasing
        return bool(going) and not set(going).isdisjoint(keys)

    async def let_go_now(self) -> None:
        # A batch that only lets go: it starts once the one under way has ended.
        going = self._letting_go or self._releasing
        if going and self._conn is not None and not self.lost.is_set():
            await self._batches.submit((True, ()))

    async def _send(self) -> None:
        try:
            await self._sent()
        finally:
            self._sending = False

    async def _sent(self) -> None:
        # A moment first: the turns of a herd end together, and one statement lets them all go.
        await trio.sleep(LET_GO_AFTER)
        try:
            while self._letting_go and self._conn is not None and not self.lost.is_set():
                await self._batches.submit((True, ()))  # a batch that only lets go
        except Exception as exc:  # the server lets them go with the connection
            log.debug("replica %s could not let go of holds: %s", self.replica, exc)
        await trio.lowlevel.checkpoint()

    async def _flush(self, entries: Sequence[Entry[_Ops, list[bool]]]) -> list[Answer[list[bool]]]:
        """One round trip for every request queued together (see :mod:`..batch`)."""
        # What was let go first: a key let go and taken again meanwhile was let go first (a
        # take is answered before anyone can let go of what it took).
        released, self._letting_go = self._letting_go, []
        wanted = [key for entry in entries for key in entry.item[1]]
        me = self.holder

        def run(conn: Conn) -> set[int]:
            with conn.pipeline():
                if released:
                    conn.execute(self._schema.sql(_RELEASE), {"keys": _array(released), "me": me})
                if wanted:
                    rows = conn.execute(self._schema.sql(_TAKE), {"keys": _array(wanted), "me": me})
            return {key for (key,) in rows.fetchall()} if wanted else set()

        self._releasing = released
        try:
            refused = await self._on_connection("could not take holds", run)
        finally:
            self._releasing = []
        return [Answer(value=[key not in refused for key in entry.item[1]]) for entry in entries]

    async def _beat(self, in_flight: int, now: datetime) -> None:
        def beat(conn: Conn) -> None:
            conn.execute(
                self._schema.sql(
                    "UPDATE {replicas} SET last_seen = %s, in_flight = %s WHERE id = %s"
                ),
                (now, in_flight, self.replica),
            )

        await self._on_connection("could not refresh the replica's record", beat)

    async def _leave(self) -> None:
        def leave(conn: Conn) -> None:
            me = self.holder
            conn.execute(self._schema.sql("DELETE FROM {holds} WHERE holder = %s"), (me,))
            conn.execute(self._schema.sql("DELETE FROM {replicas} WHERE id = %s"), (self.replica,))
            # Let go of our lock before closing: the server ends a closed connection's backend
            # (and so frees its locks) a moment later, in which others would see us alive.
            conn.execute("SELECT pg_advisory_unlock(%s)", (me,))
            conn.close()  # a clean end for the server; given up on, the loss ends it

        with contextlib.suppress(StateFault):
            await self._on_connection("could not leave", leave, leave=True)
        self._let_connection_go()

    def _let_connection_go(self) -> None:
        """Forget a connection that has ended (closed by a leave, or lost) and close our
        socket on it (only ever touched in Trio's thread)."""
        self._conn = None
        line, self._socket = self._socket, None
        if line is not None:
            line.close()
