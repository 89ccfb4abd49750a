"""The PostgreSQL store's tables: their names, and versioned migrations.

The first call on a new pool reads the schema version, with no lock and no DDL, so a current
schema works on a read-only database. Only an older (or absent) one is migrated, under a
transaction-scoped advisory lock, so two processes starting at once cannot trip over each
other's ``CREATE TABLE``; a database that cannot be written then says so in one line. Each
version's statements run once and are recorded in the version table.

Who migrates (:data:`Migrate`): ``serve``, the ``migrate`` command and an embedder's store
(``"always"``); a command that changes state only creates the tables of an empty database
(``"create"``: an upgrade is a step of its own, never a side effect of a laptop's ``pause``);
a command that only reads never writes a schema (``"never"``), and says to run ``migrate``.

A rolling upgrade: every version row records the oldest version whose code may go on using
the database (``compatible_from``: a migration that only adds tables and columns leaves older
code working). Code older than the database runs on when the newest row allows it, and is
refused with one line otherwise -- so a new replica's migration does not stop the old ones
from restarting while the upgrade rolls.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import psycopg
from psycopg import sql

from ...errors import StateFault
from .. import check_migrate
from .searchpath import check_first_named

SCHEMA_VERSION = 14
# Advisory lock namespaces (the first key of the two-key form); the second key is a hash of
# the routine or session. A hash collision only serializes two unrelated callers.
DDL_LOCK = "trio_routines:schema"
CLAIM_LOCK = "trio_routines:claims"
SESSION_LOCK = "trio_routines:wakeups"
#: The advisory lock every add of a wake-up takes after its session's, for the store's room
#: (see :data:`~trio_routines.wakelimits.MAX_PENDING`): its second key is the schema's name.
ADDS_LOCK = "trio_routines:wakeup adds"
GAP_LOCK = "trio_routines:gaps"

#: Who may change the schema: see the module doc.
Migrate = Literal["always", "create", "never"]
MIGRATE_HINT = "run `python -m trio_routines migrate` (or start `serve`, which migrates)"

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
    # Paused routines: a row per paused routine, read before every claim.
    3: [
        """CREATE TABLE IF NOT EXISTS {paused} (
            routine text PRIMARY KEY,
            paused_at timestamptz NOT NULL DEFAULT now())"""
    ],
    # When each routine was last resumed: a boot catches up nothing from before it.
    4: [
        """CREATE TABLE IF NOT EXISTS {resumed} (
            routine text PRIMARY KEY,
            resumed_at timestamptz NOT NULL)"""
    ],
    # Replicas: who claimed each slot; the members of the store; the open claims, found
    # without reading every routine's history (see replicas.py).
    5: [
        "ALTER TABLE {claims} ADD COLUMN IF NOT EXISTS replica text",
        """CREATE TABLE IF NOT EXISTS {replicas} (
            id text PRIMARY KEY,
            version text NOT NULL,
            host text NOT NULL,
            pid integer NOT NULL,
            started timestamptz NOT NULL,
            last_seen timestamptz NOT NULL,
            in_flight integer NOT NULL DEFAULT 0)""",
        "CREATE INDEX IF NOT EXISTS {claims_open} ON {claims} (routine) WHERE outcome IS NULL",
        # The holds of claims and sessions (holds.py): no WAL, emptied by a server crash.
        """CREATE UNLOGGED TABLE IF NOT EXISTS {holds} (
            key bigint PRIMARY KEY,
            holder bigint NOT NULL)""",
    ],
    # Gaps: the slots each routine passed over, a row per range (see gaps.py).
    6: [
        """CREATE TABLE IF NOT EXISTS {gaps} (
            routine text NOT NULL,
            first_slot timestamptz NOT NULL,
            last_slot timestamptz NOT NULL,
            count bigint NOT NULL,
            reason text NOT NULL,
            estimated boolean NOT NULL DEFAULT false,
            PRIMARY KEY (routine, last_slot))""",
    ],
    # When each routine was first armed: a boot accounts for the slots of one that never
    # fired (see gaps.py). An older trio_routines refuses a version-7 database.
    7: [
        """CREATE TABLE IF NOT EXISTS {armed} (
            routine text PRIMARY KEY,
            armed_at timestamptz NOT NULL)""",
    ],
    # The end of a turn's reply, for a routine that keeps output (see output.py).
    8: ["ALTER TABLE {claims} ADD COLUMN IF NOT EXISTS output text"],
    # Who asked for each wake-up (records.Origin); NULL: unknown (added by older code).
    9: [
        "ALTER TABLE {wakeups} ADD COLUMN IF NOT EXISTS origin text",
        "ALTER TABLE {wakeups} ADD COLUMN IF NOT EXISTS origin_depth integer",
        "ALTER TABLE {wakeups} ADD COLUMN IF NOT EXISTS origin_routine text",
        "ALTER TABLE {wakeups} ADD COLUMN IF NOT EXISTS origin_slot timestamptz",
        "ALTER TABLE {wakeups} ADD COLUMN IF NOT EXISTS origin_parent text",
    ],
    # What each routine turn spent (usage.py): tokens in and out, a cost and its currency.
    10: [
        "ALTER TABLE {claims} ADD COLUMN IF NOT EXISTS tokens_in bigint",
        "ALTER TABLE {claims} ADD COLUMN IF NOT EXISTS tokens_out bigint",
        "ALTER TABLE {claims} ADD COLUMN IF NOT EXISTS cost double precision",
        "ALTER TABLE {claims} ADD COLUMN IF NOT EXISTS currency text",
        # The usage ledger of routines and sessions, by minute (ledger.py), for budgets.
        """CREATE TABLE IF NOT EXISTS {usage} (
            kind text NOT NULL,
            name text NOT NULL,
            minute timestamptz NOT NULL,
            currency text NOT NULL,
            tokens_in bigint NOT NULL DEFAULT 0,
            tokens_out bigint NOT NULL DEFAULT 0,
            cost double precision NOT NULL DEFAULT 0,
            PRIMARY KEY (kind, name, minute, currency))""",
    ],
    # Each session's recent wake-up turns, for the rate limit (wakelimits.py): an hour's;
    # and when each recurring wake-up ends (NULL: never, for one added by older code).
    11: [
        "ALTER TABLE {wakeups} ADD COLUMN IF NOT EXISTS until_at timestamptz",
        """CREATE TABLE IF NOT EXISTS {wake_turns} (
            session text NOT NULL,
            at timestamptz NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS {wake_turns_session} ON {wake_turns} (session, at)",
    ],
    # The poll's and the take's "anything due?" by an index: without it, each scanned every
    # pending wake-up (a sequential pass over 100,000 rows when nothing is due); and the
    # prune of wake-up turns older than the rate's window, at every turn, by one too.
    12: [
        "CREATE INDEX IF NOT EXISTS {wakeups_due} ON {wakeups} (fire_at)",
        "CREATE INDEX IF NOT EXISTS {wake_turns_at} ON {wake_turns} (at)",
    ],
    # When the pause each latest resume ended began (NULL: unknown, as older code resumes): a
    # boot records the slots before it as missed, not as paused.
    13: ["ALTER TABLE {resumed} ADD COLUMN IF NOT EXISTS paused_at timestamptz"],
    # Every paused read brings the resumes of its last minutes: by an index, not a pass over
    # the resume of every routine ever resumed.
    14: ["CREATE INDEX IF NOT EXISTS {resumed_at} ON {resumed} (resumed_at)"],
}


def steps(first: int, last: int) -> Iterator[str]:
    """The statements of versions ``first`` to ``last``, in order (each idempotent)."""
    for version in range(first, last + 1):
        yield from _MIGRATIONS[version]


#: For each version, the oldest version whose code may go on using a database at it (recorded
#: with the version, read by older code). Absent: only code of this version or newer.
_COMPATIBLE_FROM: dict[int, int] = {
    6: 5,  # gaps: older code records none, and reads and writes everything else as before
    7: 5,  # first-armed records: older code writes none (its never-fired routines go unseen)
    8: 5,  # output: older code neither reads nor writes it (its settles leave it as it was)
    9: 5,  # wake-up origins: older code adds wake-ups without one (read back as unknown)
    10: 5,  # usage: older code neither reads nor writes it (its turns count as spending none)
    # wake-up turns: older code records none (its turns do not count against the rate);
    # until: older code adds none (never expires), and its advances keep it (an UPDATE of
    # fire_at), though it fires occurrences past it -- a take of ours then removes the entry.
    11: 5,
    12: 5,  # an index: older code's queries are unchanged (and may use it)
    # a resume's pause: older code's resumes leave it as it was, an earlier pause's instant,
    # which is before the pause their resume ended: fewer slots read as missed, never more.
    13: 5,
    14: 5,  # an index: older code's queries are unchanged (and may use it)
}


class Schema:
    """Table names in one PostgreSQL schema (or the ``search_path``'s), and their migration."""

    def __init__(self, schema: str | None, migrate: Migrate = "always") -> None:
        check_migrate(migrate)
        self.schema = schema
        self.migrates: Migrate = migrate
        #: The version found by the first call (before it migrated), once it was made.
        self.found: int | None = None

        def name(table: str) -> sql.Identifier:
            return sql.Identifier(schema, table) if schema else sql.Identifier(table)

        self._names: dict[str, sql.Composable] = {
            "version": name("trio_routines_schema"),
            "claims": name("trio_routines_claims"),
            "wakeups": name("trio_routines_wakeups"),
            "paused": name("trio_routines_paused"),
            "resumed": name("trio_routines_resumed"),
            "replicas": name("trio_routines_replicas"),
            "holds": name("trio_routines_holds"),
            "gaps": name("trio_routines_gaps"),
            "armed": name("trio_routines_armed"),
            "usage": name("trio_routines_usage"),
            "wake_turns": name("trio_routines_wake_turns"),
            "claims_open": sql.Identifier("trio_routines_claims_open"),
            "wakeups_session": sql.Identifier("trio_routines_wakeups_session"),
            "wakeups_id": sql.Identifier("trio_routines_wakeups_id"),
            "wakeups_due": sql.Identifier("trio_routines_wakeups_due"),
            "wake_turns_at": sql.Identifier("trio_routines_wake_turns_at"),
            "wake_turns_session": sql.Identifier("trio_routines_wake_turns_session"),
            "resumed_at": sql.Identifier("trio_routines_resumed_at"),
        }

    def sql(self, text: str) -> sql.Composed:
        """``text`` with ``{claims}``, ``{wakeups}``, ... replaced by the quoted names."""
        return sql.SQL(text).format(**self._names)

    def migrate(self, conn: psycopg.Connection[Any], where: str) -> None:
        """Bring the tables to :data:`SCHEMA_VERSION` when :attr:`migrates` allows it, writing
        only when they are not there; else check that this code may use them.

        The version is read first, without a lock or any DDL, so a current schema costs one
        read and works on a read-only database (a replica, ``default_transaction_read_only``).
        Only an older (or absent) schema takes the lock and migrates; a database that cannot
        be written then says that, rather than failing the caller's first call obscurely.
        """
        current = self.version(conn)
        if self.found is None:
            self.found = current
        if current == SCHEMA_VERSION or self._usable_newer(conn, current, where):
            return
        has = f"schema version {current}" if current else "no trio_routines tables yet"
        if not current and not self.schema and not self._search_path_exists(conn):
            # A store given its schema creates it; one that takes the search_path's cannot, and
            # a migration would fail on it too: say what to do first.
            row = conn.execute("SHOW search_path").fetchone()
            path = str(row[0]) if row else ""
            raise StateFault(
                f"the PostgreSQL state {where} has no schema to keep its tables in: no schema "
                f"its search_path names ({path[:80]}) exists, or this role may use — create it "
                "first (CREATE SCHEMA, or GRANT USAGE), then run `python -m trio_routines migrate`"
            )
        if not current and not self.schema:
            check_first_named(conn, where)
        if self.migrates == "never" or (self.migrates == "create" and current):
            raise StateFault(
                f"the PostgreSQL state {where} has {has}; this trio_routines uses version "
                f"{SCHEMA_VERSION} — {MIGRATE_HINT}"
            )
        try:
            self._migrate(conn, where)
        except (psycopg.errors.ReadOnlySqlTransaction, psycopg.errors.InsufficientPrivilege) as exc:
            why = (
                "the database is read-only"
                if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction)
                else "this role may not create or alter them"
            )
            raise StateFault(
                f"the PostgreSQL state {where} has {has} and needs version {SCHEMA_VERSION}, "
                f"but {why} ({_primary(exc)}) — connect once with a role that can write, "
                "which migrates it"
            ) from None

    def _usable_newer(self, conn: psycopg.Connection[Any], current: int, where: str) -> bool:
        """Whether a database newer than this code still allows it (else a StateFault)."""
        if current <= SCHEMA_VERSION:
            return False
        row = conn.execute(
            self.sql(
                "SELECT to_jsonb(v)->'compatible_from' FROM {version} AS v "
                "ORDER BY v.version DESC LIMIT 1"
            )
        ).fetchone()
        oldest = row[0] if row else None
        if isinstance(oldest, int) and oldest <= SCHEMA_VERSION:
            return True
        _refuse_newer(current, where)
        return False  # not reached

    def _search_path_exists(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether a schema of the ``search_path`` exists: ``current_schema()``, the first that
        does, is null when none does."""
        row = conn.execute("SELECT current_schema() IS NOT NULL").fetchone()
        return bool(row and row[0])

    def version(self, conn: psycopg.Connection[Any]) -> int:
        """The schema version recorded (0 when there is no version table): reads only."""
        table = self._names["version"].as_string(conn)
        row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
        if not row or not row[0]:
            return 0
        row = conn.execute(self.sql("SELECT max(version) FROM {version}")).fetchone()
        return self._recorded(conn, row[0] if row else None)

    def _recorded(self, conn: psycopg.Connection[Any], value: object) -> int:
        """The version read from the version table (none: 0); a StateFault when the table
        holds no version of ours (a table of that name made by hand, of another shape)."""
        if value is None:
            return 0
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        table = self._names["version"].as_string(conn)
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "…"
        raise StateFault(
            f"the version table {table} holds {shown}, which is no schema version of "
            "trio_routines: the table is not its own — restore it, or use another schema"
        )

    def _migrate(self, conn: psycopg.Connection[Any], where: str) -> None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s), 0)", (DDL_LOCK,))
            if self.schema:
                conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
                )
            conn.execute(
                self.sql(
                    "CREATE TABLE IF NOT EXISTS {version} (version integer PRIMARY KEY, "
                    "applied_at timestamptz NOT NULL DEFAULT now())"
                )
            )
            conn.execute(
                self.sql("ALTER TABLE {version} ADD COLUMN IF NOT EXISTS compatible_from integer")
            )
            row = conn.execute(self.sql("SELECT max(version) FROM {version}")).fetchone()
            # Again: another process may have migrated.
            current = self._recorded(conn, row[0] if row else None)
            if self._usable_newer(conn, current, where):
                return
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in steps(version, version):
                    conn.execute(self.sql(statement))
                conn.execute(
                    self.sql("INSERT INTO {version} (version, compatible_from) VALUES (%s, %s)"),
                    (version, _COMPATIBLE_FROM.get(version, version)),
                )


def _refuse_newer(current: int, where: str) -> None:
    if current > SCHEMA_VERSION:
        raise StateFault(
            f"the PostgreSQL state {where} has schema version {current}, newer "
            f"than this trio_routines understands ({SCHEMA_VERSION}) and not usable by it — "
            "upgrade it"
        )


def _primary(exc: psycopg.Error) -> str:
    return " ".join((exc.diag.message_primary or str(exc) or type(exc).__name__).split())
