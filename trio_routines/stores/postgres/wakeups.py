"""Wake-ups in PostgreSQL: rows ordered by an insertion sequence (see :mod:`.store`).

"Stored order" is the ``seq`` column: a recurring entry advanced in place keeps its place, a
deferred one-shot goes to the end. A take locks the first due row with ``FOR UPDATE SKIP
LOCKED``, so concurrent takers each get a different row and never wait on each other. An add
(and a defer) takes an advisory lock per session before counting that session's rows, which
keeps the 20-per-session cap exact. Who asked for a wake-up is in its ``origin*`` columns
(schema version 9), all NULL for one added by older code: read as unknown. A row this process
cannot read (a cron or zone its zone data does not know, text edited by hand) is kept: takes
pass it over and listings skip it, with one warning, until it is edited (a repair in place is
read again).

The ``until_at`` column (schema version 11) ends a recurring wake-up; NULL for a one-shot
or one added by older code. Each session's recent wake-up turns, the rate limit's record,
are rows of ``wake_turns`` (schema version 11 too): a turn inserts its row and deletes
every row older than the window, so the table holds about an hour of turns.

An add, a removal or a take whose caller gave up while it waited (a table locked, a stalled
server: the caller's deadline passed first) is rolled back rather than committed behind its
back, as the state directory undoes such a change: the caller's "could not" then means not
made, a retry is safe, and a wake-up taken for nobody is not lost (the next poll takes it).
A caller that gives up once the commit was sent (a server whose commits stall, an answer
lost on the way) is told the change is not confirmed: it may be made. A take so cut off is
undone by its thread once the answer comes: the wake-up is put back as it was, in its place,
since nobody runs it (should the answer never come, a committed take is lost with it). A
deferral is committed even so: it puts back a wake-up that was taken, which is better made
late than lost. A put-back restores what was stored, not a new request: it is made even when
the session's adds filled its places while the wake-up was out, so the session may hold one
more than the cap until one fires (left out, the wake-up would be lost).
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from functools import partial
from typing import Any

import psycopg
import trio

from ...records import Wakeup
from ...wakelimits import check_room, turns_kept_after
from ...wakeups import (
    WakeupRequest,
    check_request,
    plan_add,
    plan_defer,
    storable,
    take_first_due,
)
from .call import Call, reason
from .conn import Connections
from .schema import ADDS_LOCK, SESSION_LOCK, Schema
from .wakeuprows import (
    PLACES,
    READ_COLUMNS,
    ROOM_BYTES,
    WAKEUP_COLUMNS,
    row_of,
    wakeup_of_row,
)

log = logging.getLogger("trio_routines")

Conn = psycopg.Connection[Any]


#: A take's line for a row it cannot read, which it then passes over, and a listing's: each a
#: WARNING the first time this process meets the row as it is, DEBUG after.
PASSED_OVER = "passing over a wake-up entry this replica cannot read, %r (kept in the store): %s"
SKIPPED = "skipping a malformed wake-up entry %r: %s"
#: A row's version: its ``seq`` and the transaction that last wrote it (``xmin``), as text.
_VERSION = "seq::text || ':' || xmin::text"
#: The most due rows a take reads at a time, looking for one it can read and lock: one at
#: first, then four times as many each time (a backlog of rows it can read costs a row each).
_CANDIDATES = 256


class PostgresWakeups:
    """The wake-up calls of :class:`~.store.PostgresStore`, on its connections and tables."""

    def __init__(self, conns: Connections, tables: Schema) -> None:
        self._conns = conns
        self._tables = tables
        #: The rows found unreadable here, each as it was (``seq:xmin``: one edited since is
        #: read again): kept in the table (another replica may read them: one whose zone data
        #: knows a zone ours does not), passed over by this process's takes, and warned of
        #: once. Changed under the lock: the calls run in worker threads.
        self._unreadable: frozenset[str] = frozenset()
        self._noting = threading.Lock()

    async def add(self, request: WakeupRequest, now: datetime) -> Wakeup:
        check_request(request)  # before the session's lock, which hashes it on the server
        return await self._conns.run(
            "could not add a wake-up",
            self._add,
            request,
            now,
            unsure=f"adding a wake-up for session {request.session[:64]!r} is not confirmed",
        )

    def _add(self, conn: Conn, call: Call, request: WakeupRequest, now: datetime) -> Wakeup:
        with conn.transaction():
            wakeup = plan_add(self._sessions_wakeups(conn, request.session), request, now)
            # Counted once every other check passed (as plan_add checks the room last), under
            # the lock of this store's adds, taken after the session's, as every add takes it.
            check_room(self._stored(conn), wakeup)
            self._insert(conn, call, wakeup)
            call.before_commit()
        return wakeup

    def _stored(self, conn: Conn) -> tuple[int, int]:
        """How many wake-ups the store holds pending and their text's bytes (sessions, prompts,
        crons and time zones, as :func:`~trio_routines.wakelimits.text_bytes` counts them; in
        the database's encoding: UTF-8's, as ``initdb`` makes it), under the lock of this
        store's adds until the transaction ends: adds of two sessions cannot both pass the
        room."""
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))",
            (ADDS_LOCK, self._tables.schema or ""),
        )
        row = conn.execute(
            self._tables.sql(f"SELECT count(*), coalesce(sum({ROOM_BYTES}), 0) FROM {{wakeups}}")
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def _sessions_wakeups(self, conn: Conn, session: str) -> list[Wakeup]:
        """The session's pending wake-ups, under its lock until the transaction ends."""
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))", (SESSION_LOCK, session)
        )
        rows = conn.execute(
            self._tables.sql(f"SELECT {READ_COLUMNS} FROM {{wakeups}} WHERE session = %s"),
            (session,),
        ).fetchall()
        mine = []
        for row in rows:
            try:
                mine.append(wakeup_of_row(row))
            except (ValueError, TypeError):
                continue  # kept, passed over by takes; it does not count against the cap
        return mine

    def _insert(self, conn: Conn, _call: Call, wakeup: Wakeup) -> None:
        conn.execute(
            self._tables.sql(f"INSERT INTO {{wakeups}} ({WAKEUP_COLUMNS}) VALUES ({PLACES})"),
            row_of(wakeup),
        )

    async def take_due(self, now: datetime) -> Wakeup | None:
        return await self._conns.run(
            "could not take a due wake-up",
            self._take,
            now,
            unsure="taking a due wake-up is not confirmed",
            then="one taken is put back once the answer comes",
            lost="one taken is lost with it (it did not run)",
        )

    def _take(self, conn: Conn, call: Call, now: datetime) -> Wakeup | None:
        # The due rows are read a batch at a time in ``seq`` order, without a lock, and the
        # first readable one is then locked alone: rows this replica cannot read (a table full
        # of them, stored by hand) cost a query a batch, never a lock or a query each, and a
        # caller that gave up stops the walk at the next batch.
        candidates = self._tables.sql(
            f"SELECT seq, {_VERSION}, {READ_COLUMNS} FROM {{wakeups}} WHERE fire_at <= %s "
            "AND (%s::bigint IS NULL OR seq > %s) ORDER BY seq LIMIT %s"
        )
        after: int | None = None
        size = 1  # the first due row, as a rule, is one this replica reads and takes
        while True:
            call.unless_given_up()  # nobody would read what a further batch finds
            # Planned for this ``now`` every time: a prepared statement's generic plan
            # cannot know how few rows are due, and walks the whole table in seq order.
            rows = conn.execute(candidates, (now, after, after, size), prepare=False).fetchall()
            if not rows:
                return None
            after, size = rows[-1][0], min(size * 4, _CANDIDATES)
            for seq, version, *columns in rows:
                if version in self._unreadable:
                    continue  # passed over already: nothing to lock
                try:
                    wakeup_of_row(columns)
                except (ValueError, TypeError) as exc:
                    # Passed over from now on, never deleted: nothing stored is lost, and a
                    # replica whose zone data is newer than ours may well read it.
                    self._note_unreadable(version, PASSED_OVER, columns[0], exc)
                    continue
                taken = self._take_row(conn, call, seq, now)
                if taken is not None:
                    return taken

    def _take_row(self, conn: Conn, call: Call, seq: int, now: datetime) -> Wakeup | None:
        """Lock row ``seq`` if it is still due and no other take holds it, and take it: None
        when another replica has it (or took it since), or it expired (removed), or it was
        written since and cannot be read."""
        lock = self._tables.sql(
            f"SELECT {_VERSION}, {READ_COLUMNS} FROM {{wakeups}} WHERE seq = %s "
            "AND fire_at <= %s FOR UPDATE SKIP LOCKED"
        )
        with conn.transaction():
            row = conn.execute(lock, (seq, now), prepare=False).fetchone()
            if row is None:
                return None
            try:
                wakeup = wakeup_of_row(row[1:])
            except (ValueError, TypeError) as exc:
                self._note_unreadable(row[0], PASSED_OVER, row[1], exc)
                return None
            rest, taken = take_first_due([wakeup], now)
            if rest:
                conn.execute(
                    self._tables.sql(
                        "UPDATE {wakeups} SET fire_at = %s, attempts = NULL WHERE seq = %s"
                    ),
                    (rest[0].fire_at, seq),
                )
            else:
                conn.execute(self._tables.sql("DELETE FROM {wakeups} WHERE seq = %s"), (seq,))
            if taken is None:
                return None  # expired (take_first_due logged it): removed, look further
            call.before_commit()  # else it would be taken for nobody: never run
        call.undo = partial(self._put_back, seq, wakeup, rest[0] if rest else None)
        call.undo_of = f"wake-up {wakeup.id} of session {wakeup.session!r}"
        return taken

    def _put_back(self, seq: int, wakeup: Wakeup, advanced: Wakeup | None, conn: Conn) -> None:
        """Undo a take whose caller gave up while its commit was on its way (a stalled server
        or network): nobody runs it, so it is put back as it was, in its place (``seq``), to
        fire at the next poll. A recurring one moved on to its next occurrence (``advanced``)
        is moved back, unless it was changed or removed since. Said either way."""
        taken = f"wake-up {wakeup.id} of session {wakeup.session!r} was taken after the call "
        taken += "had given up (a stalled connection, or a stop); it did not run"
        try:
            if advanced is not None:
                query = (
                    "UPDATE {wakeups} SET fire_at = %s, attempts = %s "
                    "WHERE seq = %s AND fire_at = %s AND attempts IS NULL"
                )
                args: tuple[Any, ...] = (wakeup.fire_at, wakeup.attempts, seq, advanced.fire_at)
            else:
                query = (
                    f"INSERT INTO {{wakeups}} (seq, {WAKEUP_COLUMNS}) VALUES (%s, {PLACES}) "
                    "ON CONFLICT DO NOTHING"
                )
                args = (seq, *row_of(wakeup))
            put = conn.execute(self._tables.sql(query), args).rowcount > 0
        except psycopg.Error as exc:
            log.error("%s, and could not be put back (%s): it is lost", taken, reason(exc))
            return
        if put:
            log.warning("%s and is put back", taken)
        else:
            log.warning("%s; changed or removed since, it is left as it is now", taken)

    async def defer(self, wakeup: Wakeup, fire_at: datetime) -> bool:
        what = f"could not re-queue wake-up {wakeup.id}"
        unsure = f"re-queueing wake-up {wakeup.id} is not confirmed"
        return await self._conns.run(what, self._defer, wakeup, fire_at, unsure=unsure)

    def _defer(self, conn: Conn, call: Call, wakeup: Wakeup, fire_at: datetime) -> bool:
        call.carries_on = True  # committed whether or not its caller still waits
        with conn.transaction():  # under the session's lock, as an add: the cap holds
            deferred = plan_defer(self._sessions_wakeups(conn, wakeup.session), wakeup, fire_at)
            if deferred is None:
                return False
            self._insert(conn, call, deferred)
            call.committing = True  # a connection lost from here may have committed it
        return True

    async def remove(self, wakeup_id: str, session: str | None = None) -> bool:
        if not (storable(wakeup_id) and storable(session)):
            await trio.lowlevel.checkpoint()
            return False  # no stored wake-up can have it; the server would refuse the text
        what = f"could not remove wake-up {wakeup_id}"
        unsure = f"removing wake-up {wakeup_id} is not confirmed"
        return await self._conns.run(what, self._remove, wakeup_id, session, unsure=unsure)

    def _remove(self, conn: Conn, call: Call, wakeup_id: str, session: str | None) -> bool:
        query = "DELETE FROM {wakeups} WHERE id = %s"
        params: tuple[str, ...] = (wakeup_id,)
        if session is not None:
            query += " AND session = %s"
            params += (session,)
        with conn.transaction():
            removed = conn.execute(self._tables.sql(query), params).rowcount > 0
            call.before_commit()
        return removed

    async def pending(self) -> list[Wakeup]:
        return await self._conns.run("the pending wake-ups are unreadable", self._list)

    async def count(self) -> int:
        """How many rows are pending, none of them read (a malformed one counts too)."""
        return await self._conns.run("the pending wake-ups could not be counted", self._count)

    def _count(self, conn: Conn, _call: Call) -> int:
        ((count,),) = conn.execute(self._tables.sql("SELECT count(*) FROM {wakeups}")).fetchall()
        return int(count)

    def _list(self, conn: Conn, _call: Call) -> list[Wakeup]:
        query = self._tables.sql(f"SELECT {_VERSION}, {READ_COLUMNS} FROM {{wakeups}} ORDER BY seq")
        entries = []
        for row in conn.execute(query):
            try:
                entries.append(wakeup_of_row(row[1:]))
            except (ValueError, TypeError) as exc:
                self._note_unreadable(row[0], SKIPPED, row[1], exc)
        return entries

    def _note_unreadable(self, version: str, line: str, wakeup_id: object, exc: Exception) -> None:
        """Remember a row found unreadable, as it is; warn of it the first time only (a listing
        is every refresh of the status page), later at DEBUG."""
        with self._noting:
            first = version not in self._unreadable
            self._unreadable |= {version}
        (log.warning if first else log.debug)(line, wakeup_id, exc)

    async def note_turn(self, session: str, at: datetime) -> None:
        if not storable(session):
            await trio.lowlevel.checkpoint()
            return  # no stored wake-up can have it
        await self._conns.run("could not record a wake-up turn", self._note_turn, session, at)

    def _note_turn(self, conn: Conn, _call: Call, session: str, at: datetime) -> None:
        with conn.transaction():
            conn.execute(
                self._tables.sql("INSERT INTO {wake_turns} (session, at) VALUES (%s, %s)"),
                (session, at),
            )
            conn.execute(
                self._tables.sql("DELETE FROM {wake_turns} WHERE at <= %s"),
                (turns_kept_after(at),),
            )

    async def turns(self, session: str, since: datetime) -> list[datetime]:
        if not storable(session):
            await trio.lowlevel.checkpoint()
            return []
        what = "the recent wake-up turns are unreadable"
        return await self._conns.run(what, self._turns, session, since)

    def _turns(self, conn: Conn, _call: Call, session: str, since: datetime) -> list[datetime]:
        query = self._tables.sql(
            "SELECT at FROM {wake_turns} WHERE session = %s AND at > %s ORDER BY at"
        )
        return [row[0] for row in conn.execute(query, (session, since))]
