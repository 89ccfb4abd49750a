"""The PostgreSQL store: claims and wake-ups as rows, shared by replicas on many machines.

Theory of operation. Every call is one short piece of blocking psycopg (sync API) work run in
a worker thread bounded by the store's own capacity limiter; connections come from a
``psycopg_pool.ConnectionPool`` opened on first use, which also creates (and versions) the
schema under a transaction-scoped advisory lock, so two processes starting at once cannot
trip over each other's ``CREATE TABLE``.

A claim is one transaction that first takes an advisory lock keyed by the routine, so every
claim of one routine -- from any process on any machine -- is decided one at a time. Inside
it the same pure rules as the state directory apply: a slot older than the newest claim is
stale, an existing one (``INSERT ... ON CONFLICT DO NOTHING`` inserting nothing) a duplicate,
otherwise it is taken and the oldest claims beyond the retention are pruned. The claim is
durable once the commit returns (each connection raises ``synchronous_commit`` from ``off``
to ``on``).

Wake-ups are rows ordered by an insertion sequence, which is what "stored order" means here:
a recurring entry advanced in place keeps its place, a deferred one-shot goes to the end.
``take_due_wakeup`` locks the first due row with ``FOR UPDATE SKIP LOCKED``, so concurrent
takers each get a different row and never wait on each other. Adding takes an advisory lock
per session before counting that session's rows, which keeps the 20-per-session cap exact.

Faults. Every psycopg error becomes a one-line :class:`~trio_routines.errors.StateFault`. A
connection lost in the middle of a claim leaves its result unknown: the caller gets a
StateFault and so never fires, yet the commit may have reached the server -- then the slot
is burned (claimed, never run). That keeps "at most once" at the price of a missed slot. The
store pings each connection before using it and moves on from dead ones, so the call after
a lost connection (a killed backend, a server restart) works without restarting anything.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from typing import Any, TypeVar, TypeVarTuple

import psycopg
import trio
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from ..claims import KEEP_CLAIMS, fire_from_record
from ..errors import StateFault
from ..instants import format_iso, slot_name, truncate_ms
from ..names import check_name
from ..records import ClaimResult, ClaimStatus, Fire, Outcome, Wakeup
from ..store import Lifetime
from ..text import error_text
from ..wakeups import WakeupRequest, check_stored, plan_add, plan_defer, take_first_due

log = logging.getLogger("trio_routines")
Ts = TypeVarTuple("Ts")
T = TypeVar("T")

SCHEMA_VERSION = 2
# Advisory lock namespaces (the first key of the two-key form); the second key is a hash of
# the routine or session. A hash collision only serializes two unrelated callers.
DDL_LOCK = "trio_routines:schema"
CLAIM_LOCK = "trio_routines:claims"
SESSION_LOCK = "trio_routines:wakeups"

_MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE IF NOT EXISTS {claims} (
            routine text NOT NULL,
            slot timestamptz NOT NULL,
            fired_at timestamptz NOT NULL,
            outcome text,
            ms bigint,
            PRIMARY KEY (routine, slot))""",
        """CREATE TABLE IF NOT EXISTS {wakeups} (
            seq bigserial PRIMARY KEY,
            id text NOT NULL,
            session text NOT NULL,
            prompt text NOT NULL,
            fire_at timestamptz NOT NULL,
            cron text,
            tz text,
            attempts integer)""",
        "CREATE INDEX IF NOT EXISTS {wakeups_session} ON {wakeups} (session, seq)",
        "CREATE INDEX IF NOT EXISTS {wakeups_id} ON {wakeups} (id)",
    ],
    # The failure reason of a settled claim (one visible line, at most 1 KiB).
    2: ["ALTER TABLE {claims} ADD COLUMN IF NOT EXISTS error text"],
}
_WAKEUP_COLUMNS = "id, session, prompt, fire_at, cron, tz, attempts"


def _reason(exc: BaseException) -> str:
    """One line: the error class and its message, whitespace collapsed."""
    if isinstance(exc, PoolTimeout):
        return f"no connection ({exc}) — is the server up and the URL right?"
    primary = exc.diag.message_primary if isinstance(exc, psycopg.Error) else None
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = primary or (lines[0] if lines else "no details")
    return f"{type(exc).__name__}: {text[:300]}"


def _wakeup(row: tuple[Any, ...]) -> Wakeup:
    id_, session, prompt, fire_at, cron, tz, attempts = row
    return check_stored(
        Wakeup(
            id=id_,
            session=session,
            prompt=prompt,
            fire_at=fire_at,
            cron=cron,
            tz=tz,
            attempts=attempts,
        )
    )


def _params(wakeup: Wakeup) -> tuple[Any, ...]:
    return (
        wakeup.id,
        wakeup.session,
        wakeup.prompt,
        wakeup.fire_at,
        wakeup.cron,
        wakeup.tz,
        wakeup.attempts,
    )


class PostgresStore(Lifetime):
    """Claims and wake-ups in a PostgreSQL database (see the module doc).

    ``schema`` names a PostgreSQL schema to keep the tables in (created if missing); without
    it the connection's ``search_path`` decides, so ``?options=-csearch_path%3Dmine`` works.
    ``timeout`` bounds how long a call waits for a connection.
    """

    def __init__(
        self,
        url: str,
        *,
        keep: int = KEEP_CLAIMS,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = 10.0,
    ) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        try:
            info = conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise StateFault(f"invalid PostgreSQL state URL: {_reason(exc)}") from None
        self.url = url
        self.keep = keep
        self.schema = schema
        self.timeout = timeout
        self._where = "postgresql://{}:{}/{}".format(
            info.get("host", ""), info.get("port", "5432"), info.get("dbname", "")
        )
        self._kwargs: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in info:
            self._kwargs["connect_timeout"] = max(1, round(timeout))
        if "keepalives" not in info:  # notice a peer that vanished without closing
            self._kwargs.update(keepalives=1, keepalives_idle=30, keepalives_interval=10)
            self._kwargs.update(keepalives_count=3)
        self._sizes = (min_size, max_size)
        self._limiter = trio.CapacityLimiter(max_size)
        self._pool: ConnectionPool | None = None
        self._closed = False
        self._open_lock = threading.Lock()
        self._schema_lock = threading.Lock()
        self._schema_ready = False

        def name(table: str) -> sql.Identifier:
            return sql.Identifier(schema, table) if schema else sql.Identifier(table)

        self._names: dict[str, sql.Composable] = {
            "version": name("trio_routines_schema"),
            "claims": name("trio_routines_claims"),
            "wakeups": name("trio_routines_wakeups"),
            "wakeups_session": sql.Identifier("trio_routines_wakeups_session"),
            "wakeups_id": sql.Identifier("trio_routines_wakeups_id"),
        }

    def __repr__(self) -> str:
        schema = f", schema={self.schema!r}" if self.schema else ""
        return f"PostgresStore({self._where!r}{schema})"

    def _sql(self, text: str) -> sql.Composed:
        return sql.SQL(text).format(**self._names)

    async def _run(self, fn: Callable[[psycopg.Connection[Any], *Ts], T], *args: *Ts) -> T:
        return await trio.to_thread.run_sync(self._call, fn, *args, limiter=self._limiter)

    def _call(self, fn: Callable[[psycopg.Connection[Any], *Ts], T], *args: *Ts) -> T:
        pool = self._pool_ready()
        deadline = time.monotonic() + self.timeout
        for attempt in itertools.count():
            with pool.connection(timeout=max(0.0, deadline - time.monotonic())) as conn:
                # A connection that died while idle (killed backend, restarted server) fails
                # this empty query before anything of ours was sent, so trying the next one is
                # safe; the pool drops the dead one when it comes back.
                try:
                    conn.execute("")
                except psycopg.OperationalError:
                    if attempt < self._sizes[1] and time.monotonic() < deadline:
                        continue
                    raise
                if not self._schema_ready:
                    with self._schema_lock:
                        if not self._schema_ready:
                            self._migrate(conn)
                            self._schema_ready = True
                return fn(conn, *args)
        raise AssertionError("unreachable")

    # -- connections and schema -----------------------------------------------------------

    def _pool_ready(self) -> ConnectionPool:
        with self._open_lock:
            if self._closed:
                raise StateFault(f"the PostgreSQL store {self._where} is closed")
            if self._pool is None:
                # Not waiting for the first connection: a server that is down now makes each
                # call time out (a StateFault) while the pool keeps trying in the background.
                self._pool = ConnectionPool(
                    self.url,
                    kwargs=self._kwargs,
                    min_size=self._sizes[0],
                    max_size=self._sizes[1],
                    open=False,
                    configure=partial(_configure, timeout=self.timeout),
                    timeout=self.timeout,
                    name="trio_routines",
                )
                self._pool.open(wait=False)
            return self._pool

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s), 0)", (DDL_LOCK,))
            if self.schema:
                conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
                )
            conn.execute(
                self._sql(
                    "CREATE TABLE IF NOT EXISTS {version} (version integer PRIMARY KEY, "
                    "applied_at timestamptz NOT NULL DEFAULT now())"
                )
            )
            row = conn.execute(self._sql("SELECT max(version) FROM {version}")).fetchone()
            current = (row[0] if row else None) or 0
            if current > SCHEMA_VERSION:
                raise StateFault(
                    f"the PostgreSQL state {self._where} has schema version {current}, newer "
                    f"than this trio_routines understands ({SCHEMA_VERSION}) — upgrade it"
                )
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[version]:
                    conn.execute(self._sql(statement))
                conn.execute(self._sql("INSERT INTO {version} (version) VALUES (%s)"), (version,))

    @contextmanager
    def _faults(self, what: str) -> Iterator[None]:
        try:
            yield
        except psycopg.Error as exc:
            raise StateFault(f"{what} in {self._where}: {_reason(exc)}") from None

    # -- claims ---------------------------------------------------------------------------

    async def claim(self, routine: str, slot: datetime, fired_at: datetime) -> ClaimResult:
        check_name(routine)
        wanted = truncate_ms(slot)
        with self._faults(f"could not claim slot {slot_name(wanted)} of {routine!r}"):
            return await self._run(self._claim, routine, wanted, truncate_ms(fired_at))

    def _claim(
        self, conn: psycopg.Connection[Any], routine: str, slot: datetime, fired_at: datetime
    ) -> ClaimResult:
        with conn.transaction():
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))", (CLAIM_LOCK, routine)
            )
            row = conn.execute(
                self._sql("SELECT max(slot) FROM {claims} WHERE routine = %s"), (routine,)
            ).fetchone()
            newest = row[0] if row else None
            if newest is not None and slot < newest:
                return ClaimResult(ClaimStatus.STALE, slot_name(newest))
            inserted = conn.execute(
                self._sql(
                    "INSERT INTO {claims} (routine, slot, fired_at) VALUES (%s, %s, %s) "
                    "ON CONFLICT DO NOTHING RETURNING 1"
                ),
                (routine, slot, fired_at),
            ).fetchone()
            if inserted is None:
                return ClaimResult(ClaimStatus.DUPLICATE, slot_name(slot))
            # Everything older than the keep-th newest goes; the new claim is the newest.
            conn.execute(
                self._sql(
                    "DELETE FROM {claims} WHERE routine = %s AND slot < ("
                    "SELECT slot FROM {claims} WHERE routine = %s "
                    "ORDER BY slot DESC OFFSET %s LIMIT 1)"
                ),
                (routine, routine, self.keep - 1),
            )
        return ClaimResult(ClaimStatus.TAKEN, slot_name(slot))

    async def settle(
        self,
        routine: str,
        slot: datetime,
        outcome: Outcome,
        ms: int | None = None,
        *,
        if_unsettled: bool = False,
        error: str | None = None,
    ) -> None:
        check_name(routine)
        name = slot_name(slot)
        rounded = None if ms is None else round(ms)
        reason = (error_text(error) or None) if error is not None else None
        try:
            await self._run(
                self._settle, routine, truncate_ms(slot), outcome, rounded, if_unsettled, reason
            )
        except (psycopg.Error, StateFault) as exc:
            log.warning(
                "%s: could not record the %s outcome of slot %s: %s",
                routine,
                outcome.value,
                name,
                _reason(exc) if isinstance(exc, psycopg.Error) else exc,
            )

    def _settle(
        self,
        conn: psycopg.Connection[Any],
        routine: str,
        slot: datetime,
        outcome: Outcome,
        ms: int | None,
        if_unsettled: bool,
        error: str | None,
    ) -> None:
        update = (
            "UPDATE {claims} SET outcome = %s, ms = %s, error = %s WHERE routine = %s AND slot = %s"
        )
        if if_unsettled:  # atomic: a real outcome that landed first is never overwritten
            update += " AND outcome IS NULL"
        conn.execute(self._sql(update), (outcome.value, ms, error, routine, slot))

    async def latest_fire(self, routine: str) -> Fire | None:
        check_name(routine)
        with self._faults(f"the newest claim of {routine!r} is unreadable"):
            fires = await self._run(self._fires, routine, True)
        return fires[0] if fires else None

    async def history(self, routine: str) -> list[Fire]:
        check_name(routine)
        with self._faults(f"the fired-slot claims of {routine!r} are unreadable"):
            return await self._run(self._fires, routine, False)

    def _fires(self, conn: psycopg.Connection[Any], routine: str, newest: bool) -> list[Fire]:
        query = "SELECT slot, fired_at, outcome, ms, error FROM {claims} WHERE routine = %s "
        query += "ORDER BY slot DESC LIMIT 1" if newest else "ORDER BY slot"
        fires = []
        for slot, fired_at, outcome, ms, error in conn.execute(self._sql(query), (routine,)):
            # The same lenient reading as a claim file: an odd outcome reads as unsettled.
            record: dict[str, object] = {"firedAt": format_iso(fired_at), "outcome": outcome}
            if ms is not None:
                record["ms"] = ms
            if error is not None:
                record["error"] = error
            where = f"{routine}/{slot_name(slot)} in {self._where}"
            fires.append(fire_from_record(truncate_ms(slot), record, where))
        return fires

    # -- wake-ups -------------------------------------------------------------------------

    async def add_wakeup(self, request: WakeupRequest, now: datetime) -> Wakeup:
        with self._faults("could not add a wake-up"):
            return await self._run(self._add, request, now)

    def _add(self, conn: psycopg.Connection[Any], request: WakeupRequest, now: datetime) -> Wakeup:
        with conn.transaction():
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))",
                (SESSION_LOCK, request.session),
            )
            rows = conn.execute(
                self._sql(f"SELECT {_WAKEUP_COLUMNS} FROM {{wakeups}} WHERE session = %s "),
                (request.session,),
            ).fetchall()
            mine = []
            for row in rows:
                try:
                    mine.append(_wakeup(row))
                except (ValueError, TypeError):
                    continue  # dropped by the next take; it does not count against the cap
            wakeup = plan_add(mine, request, now)
            self._insert(conn, wakeup)
        return wakeup

    def _insert(self, conn: psycopg.Connection[Any], wakeup: Wakeup) -> None:
        conn.execute(
            self._sql(
                f"INSERT INTO {{wakeups}} ({_WAKEUP_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)"
            ),
            _params(wakeup),
        )

    async def take_due_wakeup(self, now: datetime) -> Wakeup | None:
        with self._faults("could not take a due wake-up"):
            return await self._run(self._take, now)

    def _take(self, conn: psycopg.Connection[Any], now: datetime) -> Wakeup | None:
        select = self._sql(
            f"SELECT seq, {_WAKEUP_COLUMNS} FROM {{wakeups}} WHERE fire_at <= %s "
            "ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED"
        )
        delete = self._sql("DELETE FROM {wakeups} WHERE seq = %s")
        while True:
            with conn.transaction():
                row = conn.execute(select, (now,)).fetchone()
                if row is None:
                    return None
                seq = row[0]
                try:
                    wakeup = _wakeup(row[1:])
                except (ValueError, TypeError) as exc:
                    # It would fail every take and hide nothing behind it; drop it for good.
                    log.warning("dropping a malformed wake-up entry %r: %s", row[1], exc)
                    conn.execute(delete, (seq,))
                    continue
                rest, taken = take_first_due([wakeup], now)
                if rest:
                    conn.execute(
                        self._sql(
                            "UPDATE {wakeups} SET fire_at = %s, attempts = NULL WHERE seq = %s"
                        ),
                        (rest[0].fire_at, seq),
                    )
                else:
                    conn.execute(delete, (seq,))
                return taken

    async def defer_wakeup(self, wakeup: Wakeup, fire_at: datetime) -> bool:
        deferred = plan_defer(wakeup, fire_at)
        if deferred is None:
            await trio.lowlevel.checkpoint()
            return False
        with self._faults(f"could not re-queue wake-up {wakeup.id}"):
            await self._run(self._insert, deferred)
        return True

    async def remove_wakeup(self, wakeup_id: str, session: str | None = None) -> bool:
        with self._faults(f"could not remove wake-up {wakeup_id}"):
            return await self._run(self._remove, wakeup_id, session)

    def _remove(self, conn: psycopg.Connection[Any], wakeup_id: str, session: str | None) -> bool:
        query = "DELETE FROM {wakeups} WHERE id = %s"
        params: tuple[str, ...] = (wakeup_id,)
        if session is not None:
            query += " AND session = %s"
            params += (session,)
        return conn.execute(self._sql(query), params).rowcount > 0

    async def list_wakeups(self) -> list[Wakeup]:
        with self._faults("the pending wake-ups are unreadable"):
            return await self._run(self._list)

    def _list(self, conn: psycopg.Connection[Any]) -> list[Wakeup]:
        rows = conn.execute(self._sql(f"SELECT {_WAKEUP_COLUMNS} FROM {{wakeups}} ORDER BY seq"))
        entries = []
        for row in rows:
            try:
                entries.append(_wakeup(row))
            except (ValueError, TypeError) as exc:
                log.warning("skipping a malformed wake-up entry %r: %s", row[0], exc)
        return entries

    async def aclose(self) -> None:
        await trio.to_thread.run_sync(self._close)

    def _close(self) -> None:
        with self._open_lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


def _configure(conn: psycopg.Connection[Any], *, timeout: float) -> None:
    # A claim must be durable before it is reported taken: refuse a server-wide "off".
    conn.execute(
        "SELECT set_config('synchronous_commit', 'on', false) "
        "WHERE current_setting('synchronous_commit') = 'off'"
    )
    # Every call of ours runs inside a shielded fire: bound what the server may make it wait
    # for (a lock held by a stalled replica, a statement on a half-dead connection), so that a
    # stop's grace is never held up by the database. The stale check reads the newest claim
    # after the routine's lock is granted: that needs READ COMMITTED, whatever the server says.
    limit = str(max(1, round(timeout * 1000)))
    for setting, value in (
        ("lock_timeout", limit),
        ("statement_timeout", limit),
        ("idle_in_transaction_session_timeout", limit),
        ("default_transaction_isolation", "read committed"),
    ):
        conn.execute("SELECT set_config(%s, %s, false)", (setting, value))
