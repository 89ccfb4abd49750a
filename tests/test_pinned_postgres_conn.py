"""Pins of the PostgreSQL store's connections and schema (``scripts/mutation.py pgconn``): the
reason of a fault and where it happened, the log filter that takes psycopg's records made in
our threads, the bounded calls (their deadline, the wait for a connection, the retries on dead
ones, the settings each connection gets), and the schema's names, version rows and refusals,
each message whole."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest
import trio
from pg import T0, admin, fresh_schema, pooled_schema, require_server, with_app_name
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool

from trio_routines.errors import InvalidOption, StateFault, Unconfirmed
from trio_routines.stores.postgres import PostgresStore
from trio_routines.stores.postgres import conn as pgconn
from trio_routines.stores.postgres.schema import (
    DDL_LOCK,
    MIGRATE_HINT,
    SCHEMA_VERSION,
    Schema,
    _primary,
)

NEWER = SCHEMA_VERSION + 1


@pytest.fixture
def url() -> str:
    return require_server()


@pytest.fixture
def schema(url: str) -> Iterator[str]:
    with fresh_schema() as name:
        yield name


def version_rows(schema: str) -> list[tuple[int, Any]]:
    with admin() as conn:
        return conn.execute(
            sql.SQL("SELECT version, compatible_from FROM {} ORDER BY version").format(
                sql.Identifier(schema, "trio_routines_schema")
            )
        ).fetchall()


def add_newer(
    schema: str, compatible_from: int, conn: psycopg.Connection[Any] | None = None
) -> None:
    """A newer release's row in the version table."""
    query = Schema(schema).sql("INSERT INTO {version} (version, compatible_from) VALUES (%s, %s)")
    if conn is not None:
        conn.execute(query, (NEWER, compatible_from))
        return
    with admin() as made:
        made.execute(query, (NEWER, compatible_from))


def refused(where: str) -> str:
    return (
        f"the PostgreSQL state {where} has schema version {NEWER}, newer than this "
        f"trio_routines understands ({SCHEMA_VERSION}) and not usable by it — upgrade it"
    )


# -- the reason of a fault ------------------------------------------------------------------


def test_a_url_libpq_cannot_parse_names_the_error_class_and_its_message() -> None:
    # libpq's message (no server diagnostics) ends with a line break: its first line is kept.
    with pytest.raises(StateFault) as caught:
        PostgresStore("postgresql://h/db?bogus=1")
    assert str(caught.value) == (
        'invalid PostgreSQL state URL: ProgrammingError: invalid URI query parameter: "bogus"'
    )
    # A password libpq quotes is masked.
    with pytest.raises(StateFault) as caught:
        PostgresStore("postgresql://u:Zq%zz@h/db")
    assert str(caught.value) == (
        'invalid PostgreSQL state URL: ProgrammingError: invalid percent-encoded token: "***"'
    )


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres@127.0.0.1:5432/test?application_name=%ff",
        "postgresql://u:s%ffcret@h/db",
        "postgresql://u%c3@h/db",
        "postgresql://h/d%ffb",
        "postgresql://h/db?options=-c%20x%3D%fe",
    ],
)
def test_a_percent_escape_of_no_utf8_is_one_line_naming_no_secret(url: str) -> None:
    # libpq decodes the escape into a byte no UTF-8 text holds; psycopg's decoding of it
    # raised UnicodeDecodeError through every command that opened the store.
    with pytest.raises(StateFault) as caught:
        PostgresStore(url)
    assert str(caught.value) == (
        "invalid PostgreSQL state URL: a percent-escape in it is not UTF-8 (%ff, say)"
    )


def test_an_at_sign_in_the_host_is_refused_with_the_remedy() -> None:
    with pytest.raises(StateFault) as caught:
        PostgresStore("postgresql://u:p@Zq@127.0.0.1/test")
    assert str(caught.value) == (
        "invalid PostgreSQL state URL: an '@' in its host — percent-encode an '@' in the user "
        "name or password as %40"
    )
    # No host at all (a Unix socket's default) is no '@'.
    assert PostgresStore("postgresql:///test").where == "postgresql://:5432/test"


@pytest.mark.parametrize("timeout", [0, -1.0])
def test_a_timeout_must_be_positive(timeout: float) -> None:
    with pytest.raises(InvalidOption) as refused:
        PostgresStore("postgresql://h/db", timeout=timeout)
    assert str(refused.value) == (
        f"timeout must be a finite number of seconds, more than 0: {timeout!r}"
    )


@pytest.mark.parametrize(
    ("url", "where"),
    [
        (
            "postgresql://u:secret@db.example:6543/app?sslmode=require",
            "postgresql://db.example:6543/app",
        ),
        ("postgresql:///test", "postgresql://:5432/test"),  # a Unix socket's default host
        ("postgresql://h", "postgresql://h:5432/"),
        ("host=h port=7 dbname=d user=u password=secret", "postgresql://h:7/d"),
    ],
)
def test_where_names_the_server_and_the_database_only(url: str, where: str) -> None:
    assert PostgresStore(url).where == where


def test_the_reason_of_a_server_bound_names_a_lock_held_elsewhere() -> None:
    reason = pgconn.reason
    held = (
        " — a lock another session holds (a long transaction, an advisory lock), a table grown "
        "far past what the store keeps, or a server too busy"
    )
    for error in (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable):
        said = reason(error("canceling statement due to statement timeout"))
        assert said == f"{error.__name__}: canceling statement due to statement timeout{held}"
    assert reason(psycopg.errors.DeadlockDetected("x")) == "DeadlockDetected: x"


def test_the_reason_of_a_schema_the_search_path_names_that_does_not_exist_says_to_create_it() -> (
    None
):
    said = pgconn.reason(psycopg.errors.InvalidSchemaName('schema "nope" does not exist'))
    assert said == (
        'InvalidSchemaName: schema "nope" does not exist — does the schema the URL\'s '
        "search_path names exist? Create it first"
    )


def test_an_undo_that_fails_says_what_could_not_be_given_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from trio_routines.stores.postgres.call import undo

    def failing(conn: Any) -> None:
        raise psycopg.OperationalError("the connection is closed")

    call = pgconn.Call()
    undo(call, None)  # type: ignore[arg-type]  # none to run: nothing said
    call.undo = failing
    with caplog.at_level(logging.ERROR, logger="trio_routines"):
        undo(call, None)  # type: ignore[arg-type]
        call.undo_of = "wake-up w1 of session 's'"
        undo(call, None)  # type: ignore[arg-type]
    assert [r.getMessage() for r in caplog.records] == [
        f"{what} taken for a caller that had left could not be given back: OperationalError: "
        "the connection is closed"
        for what in ("a change", "wake-up w1 of session 's'")
    ]


def test_the_reason_of_an_error_without_server_diagnostics() -> None:
    reason = pgconn.reason
    assert reason(psycopg.OperationalError("")) == "OperationalError: no details"
    assert reason(psycopg.OperationalError(" \n\t\n")) == "OperationalError: no details"
    # The first line with text, trimmed; at most 300 characters of it.
    spread = psycopg.OperationalError("\n  \n  connection failed  \n\tIs the server running?")
    assert reason(spread) == "OperationalError: connection failed"
    assert reason(psycopg.InterfaceError("x" * 400)) == f"InterfaceError: {'x' * 300}"


async def test_a_fault_the_server_raises_is_retold_with_where_and_its_whole_message(
    url: str,
) -> None:
    # A trigger of the DBA's refusing claims: its message, both of its lines, not its detail
    # (nor the context psycopg's text of the error adds) reaches the caller.
    with pooled_schema() as schema:
        frozen = sql.Identifier(schema, "frozen")
        store = PostgresStore(url, schema=schema, timeout=30)
        try:
            await store.latest_fire("warm-up")  # the tables exist
            with admin() as conn:
                conn.execute(
                    sql.SQL(
                        "CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RAISE "
                        "EXCEPTION E'claims are frozen\\nby the DBA' USING DETAIL = 'hidden'; END$$"
                    ).format(frozen)
                )
                conn.execute(
                    Schema(schema).sql("CREATE TRIGGER frozen BEFORE INSERT ON {claims} ")
                    + sql.SQL("FOR EACH ROW EXECUTE FUNCTION {}()").format(frozen)
                )
            with pytest.raises(StateFault) as caught:
                await store.claim("r", T0, T0)
        finally:
            await store.aclose()
            with admin() as conn:  # the schema is used again, as a new database's
                conn.execute(sql.SQL("DROP FUNCTION IF EXISTS {}() CASCADE").format(frozen))
    assert " ".join(str(caught.value).split()) == (
        f"could not claim slot 2026-07-07T10:00:00.000Z of 'r' in {store.where}: "
        "RaiseException: claims are frozen by the DBA"
    )


# -- the log filter -------------------------------------------------------------------------


def psycopg_record(thread: str | None, msg: str, *args: object) -> logging.LogRecord:
    record = logging.LogRecord("psycopg.pool", logging.WARNING, __file__, 1, msg, args, None)
    record.threadName = thread
    return record


def test_a_connect_error_in_our_pool_is_kept_and_logged_again_as_one_debug_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    records = pgconn._OurRecords()
    error = psycopg.OperationalError("connection failed: refused\n\tIs the server running?")
    record = psycopg_record(
        "trio_routines-x-worker-0", "error connecting in %r: %s", "trio_routines-x", error
    )
    before = time.monotonic()
    with caplog.at_level(logging.DEBUG, logger="trio_routines"):
        assert records.filter(record) is False  # taken off psycopg's logger
    after = time.monotonic()
    # (Only this pool's: a pool of another test may still have a thread at work.)
    assert [
        (r.name, r.levelno, r.getMessage())
        for r in caplog.records
        if "trio_routines-x" in r.getMessage()
    ] == [
        (
            "trio_routines",
            logging.DEBUG,
            "PostgreSQL: error connecting in 'trio_routines-x': connection failed: refused "
            "Is the server running?",
        )
    ]
    ((pool, (at, why)),) = records.connect_errors.items()
    assert (pool, why) == ("trio_routines-x", "connection failed: refused; Is the server running?")
    assert before <= at <= after


def test_another_record_of_our_threads_is_logged_again_and_not_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    records = pgconn._OurRecords()
    record = psycopg_record("trio_routines store", "closing %s\nnow", "conn")
    with caplog.at_level(logging.DEBUG, logger="trio_routines"):
        assert records.filter(record) is False
    closing = [r.getMessage() for r in caplog.records if "closing conn" in r.getMessage()]
    assert closing == ["PostgreSQL: closing conn now"]
    assert records.connect_errors == {}


async def test_the_pools_close_runs_in_a_thread_of_ours(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # What the close logs ("couldn't stop thread … within 2.0 seconds") is ours to log again:
    # passed through, it was a bare line among the JSON ones.
    conns = pgconn.Connections(
        "postgresql://h/db", NoTables(None), min_size=1, max_size=1, timeout=1
    )

    class Pool:
        def close(self, timeout: float) -> None:
            logging.getLogger("psycopg.pool").warning("couldn't stop %r", "its worker")

    conns._pool = Pool()  # type: ignore[assignment]
    # Our logger's own level too: a test before this one in the process may have set it.
    with caplog.at_level(logging.DEBUG), caplog.at_level(logging.DEBUG, logger="trio_routines"):
        await conns.aclose()
    assert [
        (r.name, r.levelno, r.getMessage()) for r in caplog.records if "stop" in r.getMessage()
    ] == [("trio_routines", logging.DEBUG, "PostgreSQL: couldn't stop 'its worker'")]


@pytest.mark.parametrize("thread", ["MainThread", "worker", None])
def test_a_record_of_the_host_s_own_threads_is_left_to_psycopg(
    caplog: pytest.LogCaptureFixture, thread: str | None
) -> None:
    records = pgconn._OurRecords()
    record = psycopg_record(thread, "error connecting in %r: %s", "trio_routines-x", "refused")
    with caplog.at_level(logging.DEBUG, logger="trio_routines"):
        assert records.filter(record) is True
    assert [r for r in caplog.records if "trio_routines-x" in r.getMessage()] == []
    assert records.connect_errors == {}


def test_the_host_s_own_psycopg_records_reach_its_handlers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The filter installed on psycopg's loggers leaves the main thread's records alone.
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("psycopg.pool").warning("the host's pool: %s", "its own")
        logging.getLogger("psycopg").warning("the host's connection")
    assert [(r.name, r.getMessage()) for r in caplog.records if "the host's" in r.getMessage()] == [
        ("psycopg.pool", "the host's pool: its own"),
        ("psycopg", "the host's connection"),
    ]


# -- bounded calls ---------------------------------------------------------------------------


class NoTables(Schema):
    """A schema these calls never use: their connections are what is pinned, not the tables'
    checks (pinned below)."""

    def migrate(self, conn: psycopg.Connection[Any], where: str) -> None:
        pass


@asynccontextmanager
async def connections(
    url: str, *, timeout: float, max_size: int = 2
) -> AsyncIterator[pgconn.Connections]:
    conns = pgconn.Connections(url, NoTables(None), min_size=1, max_size=max_size, timeout=timeout)
    try:
        # A short timeout is also the wait for a connection: the pool's first may take longer.
        for _ in range(200):
            try:
                await conns.run("warming up", lambda conn, call: None)
                break
            except StateFault as exc:
                if "no connection" not in str(exc):
                    raise
                await trio.sleep(0.01)
        yield conns
    finally:
        await conns.aclose()


def settings(conn: psycopg.Connection[Any], call: pgconn.Call) -> dict[str, str]:
    names = [
        "synchronous_commit",
        "lock_timeout",
        "statement_timeout",
        "idle_in_transaction_session_timeout",
        "default_transaction_isolation",
    ]
    return {name: str(conn.execute(f"SHOW {name}").fetchone()[0]) for name in names}  # type: ignore[index]


async def test_each_connection_sets_the_limits_and_durability_whatever_the_server_says(
    url: str,
) -> None:
    server_says = "%20".join(
        f"-c{name}%3D{value}"
        for name, value in [
            ("synchronous_commit", "off"),
            ("lock_timeout", "0"),
            ("statement_timeout", "0"),
            ("idle_in_transaction_session_timeout", "0"),
            ("default_transaction_isolation", "serializable"),
        ]
    )
    sep = "&" if "?" in url else "?"
    async with connections(f"{url}{sep}options={server_says}", timeout=2) as conns:
        assert await conns.run("reading the settings", settings) == {
            "synchronous_commit": "on",
            "lock_timeout": "2s",
            "statement_timeout": "2s",
            "idle_in_transaction_session_timeout": "2s",
            "default_transaction_isolation": "read committed",
        }


async def test_each_connection_gets_our_socket_limits_unless_the_url_sets_them(url: str) -> None:
    names = [
        "connect_timeout",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
    ]

    def parameters(conn: psycopg.Connection[Any], call: pgconn.Call) -> tuple[bool, dict[str, str]]:
        given = conn.info.get_parameters()
        return conn.autocommit, {name: given.get(name, "") for name in names}

    sep = "&" if "?" in url else "?"
    async with connections(f"{url}{sep}connect_timeout=9&keepalives_idle=7", timeout=2.4) as conns:
        assert await conns.run("reading the parameters", parameters) == (
            True,
            {
                "connect_timeout": "9",
                "keepalives": "1",
                "keepalives_idle": "7",
                "keepalives_interval": "2",
                "keepalives_count": "3",
                "tcp_user_timeout": "2400",
            },
        )
    # Under a second: one second to connect, and a second for data to be acknowledged.
    short = pgconn.Connections(url, NoTables(None), min_size=1, max_size=1, timeout=0.2)
    assert short.kwargs == {
        "autocommit": True,
        "connect_timeout": 1,
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
        "tcp_user_timeout": 1000,
    }


class Asked:
    """A connection that records the statements it is given (a real one, under a limit of a
    millisecond, could cancel the very statements that read the limit back)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, Any]] = []
        self.adapters = psycopg.adapt.AdaptersMap(psycopg.adapters)  # (instants' loader)

    def execute(self, query: str, params: Any = None) -> None:
        self.asked.append((query, params))


def test_a_timeout_under_a_millisecond_is_still_a_server_side_limit(url: str) -> None:
    # Zero would be none at all.
    conns = pgconn.Connections(url, NoTables(None), min_size=1, max_size=1, timeout=0.0004)
    conn = Asked()
    conns._configure(conn)  # type: ignore[arg-type]
    limits = {params[0]: params[1] for _, params in conn.asked if params}
    assert limits == {
        "lock_timeout": "1",
        "statement_timeout": "1",
        "idle_in_transaction_session_timeout": "1",
        "default_transaction_isolation": "read committed",
    }


async def test_the_pool_keeps_its_minimum_open_and_grows_only_when_a_call_waits(
    url: str,
) -> None:
    app = f"app_{uuid.uuid4().hex[:12]}"
    conns = pgconn.Connections(
        with_app_name(url, app), NoTables(None), min_size=1, max_size=4, timeout=5
    )
    try:
        await conns.run("one call", lambda conn, call: None)
        await trio.sleep(0.15)  # time enough to open any others it would
        with admin() as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)
            ).fetchone()
    finally:
        await conns.aclose()
    # The one kept open, and at most one more, opened while the first call waited for it.
    assert row is not None
    assert 1 <= row[0] <= 2
    # Closed: the server sees them go.
    with admin() as conn:
        for _ in range(500):
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)
            ).fetchone()
            if row is not None and row[0] == 0:
                break
            await trio.sleep(0.01)
        else:
            raise AssertionError("the pool's connections outlived its closing")
    with pytest.raises(StateFault) as caught:
        await conns.run("after closing", lambda conn, call: None)
    assert str(caught.value) == f"the PostgreSQL store {conns.where} is closed"


async def test_a_refused_connection_fails_the_call_with_that_attempt_s_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    refusing = "postgresql://postgres@127.0.0.1:1/test"
    conns = pgconn.Connections(refusing, NoTables(None), min_size=1, max_size=1, timeout=0.5)
    try:
        with caplog.at_level(logging.DEBUG, "trio_routines"):
            with pytest.raises(pgconn.CallFault) as caught:
                await conns.run("reaching", lambda conn, call: None)
            # psycopg's record of the attempt, made in the pool's thread: ours, one line.
            mine = f"error connecting in '{conns._pool_name}': "
            for _ in range(500):
                if any(mine in r.getMessage() for r in caplog.records):
                    break
                await trio.sleep(0.01)
    finally:
        await conns.aclose()
    why = caught.value.why
    assert str(caught.value) == f"reaching in postgresql://127.0.0.1:1/test: {why}"
    assert why.startswith("no connection (")
    assert why.endswith(") — is the server up and the URL right?")
    assert 'connection failed: connection to server at "127.0.0.1", port 1 failed: ' in why
    assert "\n" not in why
    logged = [r for r in caplog.records if mine in r.getMessage()]
    assert logged
    assert all(
        (r.name, r.levelno) == ("trio_routines", logging.DEBUG)
        and r.getMessage().startswith(f"PostgreSQL: {mine}")
        and "\n" not in r.getMessage()
        for r in logged
    )


async def test_an_error_of_a_call_is_a_call_fault_naming_what_and_where(url: str) -> None:
    def divide(conn: psycopg.Connection[Any], call: pgconn.Call) -> None:
        conn.execute("SELECT 1 / 0")

    async with connections(url, timeout=5) as conns:
        with pytest.raises(pgconn.CallFault) as caught:
            await conns.run("dividing", divide)
    assert str(caught.value) == f"dividing in {conns.where}: DivisionByZero: division by zero"
    assert (caught.value.where, caught.value.why) == (
        conns.where,
        "DivisionByZero: division by zero",
    )


async def test_a_call_past_our_bound_is_a_call_fault_and_its_thread_is_told(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Our bound is the server's limits plus SERVER_FIRST (made short here): the call's thread,
    # held by something the server's limits do not cover, is told its caller gave up.
    monkeypatch.setattr(pgconn, "SERVER_FIRST", 0.15)
    told = trio.Event()
    token = trio.lowlevel.current_trio_token()

    def held(conn: psycopg.Connection[Any], call: pgconn.Call) -> None:
        if call.abandoned.wait(30):
            trio.from_thread.run_sync(told.set, trio_token=token)

    async with connections(url, timeout=0.1) as conns:
        with pytest.raises(pgconn.CallFault) as caught:
            await conns.run("holding", held)
        with trio.fail_after(30):
            await told.wait()
    assert str(caught.value) == (
        f"holding in {conns.where}: no answer within 0.25 s — the server or the network is stalled"
    )
    assert (caught.value.where, caught.value.why) == (
        conns.where,
        "no answer within 0.25 s — the server or the network is stalled",
    )


async def test_a_change_past_our_bound_after_its_commit_went_out_is_not_confirmed(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Held before its commit: the caller is told it could not be made, which the thread
    # makes true (its commit check raises). Held once its commit went out: not confirmed.
    monkeypatch.setattr(pgconn, "SERVER_FIRST", 0.15)
    rolled_back: list[BaseException] = []
    told = trio.Event()
    token = trio.lowlevel.current_trio_token()

    def before(conn: psycopg.Connection[Any], call: pgconn.Call) -> None:
        call.abandoned.wait(30)
        try:
            call.before_commit()
        except StateFault as exc:
            rolled_back.append(exc)
            trio.from_thread.run_sync(told.set, trio_token=token)

    def sent(conn: psycopg.Connection[Any], call: pgconn.Call) -> None:
        call.before_commit()
        call.abandoned.wait(30)

    def carrying_on(conn: psycopg.Connection[Any], call: pgconn.Call) -> None:
        call.carries_on = True  # its thread commits whatever its caller does
        call.abandoned.wait(30)

    stalled = "no answer within 0.25 s — the server or the network is stalled"
    async with connections(url, timeout=0.1) as conns:
        with pytest.raises(pgconn.CallFault) as caught:
            await conns.run("could not change", before, unsure="changing is not confirmed")
        assert not isinstance(caught.value, Unconfirmed)
        assert str(caught.value) == f"could not change in {conns.where}: {stalled}"
        with pytest.raises(Unconfirmed) as unsure:
            await conns.run("could not change", sent, unsure="changing is not confirmed")
        assert str(unsure.value) == (
            f"changing is not confirmed in {conns.where}: the commit was sent, and {stalled}; "
            "it may be made: look before asking again"
        )
        with pytest.raises(Unconfirmed) as unsure:  # what to do, and a caller saying nothing
            await conns.run("could not change", sent, then="it is put back", lost="no")
        assert str(unsure.value) == (
            f"could not change: not confirmed in {conns.where}: the commit was sent, and "
            f"{stalled}; it is put back"
        )
        with pytest.raises(Unconfirmed):
            await conns.run("could not change", carrying_on)
        with trio.fail_after(30):
            await told.wait()
    assert [str(exc) for exc in rolled_back] == ["abandoned by its caller: rolled back"]


async def test_a_commit_whose_connection_is_lost_is_not_confirmed(url: str) -> None:
    # The server answered nothing: its connection ended (a SQLSTATE-less OperationalError),
    # so whether the commit it had been sent was made is not known.
    def lost(conn: psycopg.Connection[Any], call: pgconn.Call, committing: bool) -> None:
        if committing:
            call.before_commit()
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    def refused(conn: psycopg.Connection[Any], call: pgconn.Call) -> None:
        call.before_commit()
        conn.execute("SELECT 1 / 0")  # an error the server reports: nothing was made

    def carried_on_then_lost(conn: psycopg.Connection[Any], call: pgconn.Call) -> None:
        call.carries_on = True
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    def failing(conn: psycopg.Connection[Any], call: pgconn.Call, error: Exception) -> None:
        call.before_commit()
        raise error

    async with connections(url, timeout=5) as conns:
        with pytest.raises(Unconfirmed) as unsure:
            await conns.run("could not change", lost, True, unsure="changing is not confirmed")
        assert str(unsure.value) == (
            f"changing is not confirmed in {conns.where}: the commit was sent, and the "
            "connection was lost (OperationalError: server closed the connection "
            "unexpectedly); it may be made: look before asking again"
        )
        with pytest.raises(Unconfirmed) as unsure:
            await conns.run("could not change", lost, True, then="no", lost="it is lost")
        assert str(unsure.value).endswith("; it is lost")
        # A change that carries on whatever its caller does, cut off before its commit: the
        # connection's end rolled it back.
        with pytest.raises(pgconn.CallFault) as caught:
            await conns.run("could not change", carried_on_then_lost)
        assert not isinstance(caught.value, Unconfirmed)
        with pytest.raises(pgconn.CallFault) as caught:
            await conns.run("could not change", lost, False)
        assert caught.value.why == ("OperationalError: server closed the connection unexpectedly")
        with pytest.raises(pgconn.CallFault) as caught:
            await conns.run("could not change", refused)
        assert caught.value.why == "DivisionByZero: division by zero"
        # An error the server reported (a SQLSTATE), or one of the driver's own that is no
        # lost connection: the commit failed, or was never sent; nothing was made.
        for error in (
            psycopg.errors.QueryCanceled("canceling statement due to user request"),
            psycopg.InterfaceError("the cursor is closed"),
        ):
            with pytest.raises(pgconn.CallFault) as caught:
                await conns.run("could not change", failing, error)
            assert not isinstance(caught.value, Unconfirmed)
            assert caught.value.why == pgconn.reason(error)


async def test_an_answer_handed_over_as_the_bound_passed_is_the_caller_s_and_one_too_late_undone(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pgconn, "SERVER_FIRST", 0.15)
    undone: list[str] = []
    told = trio.Event()
    token = trio.lowlevel.current_trio_token()
    real_hand_over = pgconn.Call.hand_over

    def slow_to_report(call: pgconn.Call, answer: object) -> bool:
        handed = real_hand_over(call, answer)
        call.abandoned.wait(30)  # the thread's report reaches the event loop after the bound
        return handed

    def in_time(conn: psycopg.Connection[Any], call: pgconn.Call) -> str:
        call.undo = lambda _conn: undone.append("in time")
        return "answer"

    def too_late(conn: psycopg.Connection[Any], call: pgconn.Call) -> str:
        call.abandoned.wait(30)

        # The undo runs on the call's own connection, still in the thread's hands.
        def undo(conn: psycopg.Connection[Any]) -> None:
            undone.append(conn.execute("SELECT 'undone'").fetchone()[0])
            trio.from_thread.run_sync(told.set, trio_token=token)

        call.undo = undo
        return "answer"

    async with connections(url, timeout=0.1) as conns:
        with monkeypatch.context() as patched:
            patched.setattr(pgconn.Call, "hand_over", slow_to_report)
            assert await conns.run("answering", in_time) == "answer"
        with pytest.raises(pgconn.CallFault, match=r"no answer within 0\.25 s"):
            await conns.run("answering", too_late)
        with trio.fail_after(30):
            await told.wait()
    assert undone == ["undone"]


class _Errors(logging.Handler):
    """The ERROR records of a logger, from any thread, and an event set at each."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.said: list[str] = []
        self.came = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.said.append(record.getMessage())
        self.came.set()


async def test_an_answer_handed_over_as_its_caller_is_cancelled_is_undone_on_a_connection_apart(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The caller's own scope (a stop's grace) ends just after the thread handed its answer
    # over: nobody reads it, and the caller cannot wait for an undo. It runs in a thread
    # apart, on a connection of its own; one that fails is logged.
    undone = threading.Event()
    handed = threading.Event()
    real_hand_over = pgconn.Call.hand_over

    def slow_to_report(call: pgconn.Call, answer: object) -> bool:
        kept = real_hand_over(call, answer)
        handed.set()
        call.abandoned.wait(30)
        return kept

    def took(conn: psycopg.Connection[Any], call: pgconn.Call, fails: bool) -> str:
        def undo(apart: psycopg.Connection[Any]) -> None:
            apart.execute("SELECT 1 / %s", (0 if fails else 1,))
            undone.set()

        call.undo = undo
        call.undo_of = "the taking's own"
        return "taken"

    errors = _Errors()
    logging.getLogger("trio_routines").addHandler(errors)
    try:
        async with connections(url, timeout=5) as conns:
            monkeypatch.setattr(pgconn.Call, "hand_over", slow_to_report)  # once warmed up
            for fails, waited in ((False, undone), (True, errors.came)):
                handed.clear()
                with trio.CancelScope() as scope:
                    async with trio.open_nursery() as nursery:

                        async def cancel_once_handed() -> None:
                            assert await trio.to_thread.run_sync(handed.wait, 30)
                            scope.cancel()

                        nursery.start_soon(cancel_once_handed)
                        await conns.run("taking", took, fails)
                assert scope.cancelled_caught
                assert await trio.to_thread.run_sync(waited.wait, 30)
    finally:
        logging.getLogger("trio_routines").removeHandler(errors)
    assert errors.said == [
        "the taking's own taken for a caller that had left could not be given back: "
        "DivisionByZero: division by zero"
    ]


async def test_a_call_waiting_for_a_free_connection_is_not_out_of_time_for_it(url: str) -> None:
    # One connection, held by a first call for longer than the timeout: the second call waits
    # for it within its whole bound, not within the shorter wait for a connection to open.
    release = threading.Event()

    def first(conn: psycopg.Connection[Any], call: pgconn.Call) -> str:
        release.wait(30)
        return "first"

    def second(conn: psycopg.Connection[Any], call: pgconn.Call) -> str:
        return "second"

    answers: list[str] = []

    async def run(conns: pgconn.Connections, fn: Any) -> None:
        answers.append(await conns.run("waiting", fn))

    async with connections(url, timeout=0.1, max_size=1) as conns, trio.open_nursery() as nursery:
        nursery.start_soon(run, conns, first)
        await trio.sleep(0.05)
        nursery.start_soon(run, conns, second)
        await trio.sleep(0.2)  # longer than the timeout, within the bound (1.1 s)
        release.set()
    assert answers == ["first", "second"]


async def test_a_call_s_own_records_of_psycopg_are_ours_at_debug(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with connections(url, timeout=5) as conns:
        # A host that wants psycopg's records (it logs at WARNING and up unless told).
        with (
            caplog.at_level(logging.DEBUG, "psycopg"),
            caplog.at_level(logging.DEBUG, "trio_routines"),
        ):
            name = await conns.run("naming", lambda conn, call: threading.current_thread().name)
    assert name == "trio_routines store"
    mine = f"connection requested from '{conns._pool_name}'"
    requested = [
        (r.name, r.levelno, r.getMessage()) for r in caplog.records if mine in r.getMessage()
    ]
    assert requested == [("trio_routines", logging.DEBUG, f"PostgreSQL: {mine}")]


EMPTY_QUERY = b"Q\x00\x00\x00\x05\x00"  # conn.execute(""), in the simple query protocol


class Relay:
    """A TCP relay to the server that ends each connection at its first empty query: every
    connection opens and is configured, then fails the probe each call starts with."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.ended = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, probed: bool) -> None:
        try:
            while data := source.recv(65536):
                if probed and EMPTY_QUERY in data:
                    with self._lock:
                        self.ended += 1
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
            source.close()


async def test_a_call_tries_each_connection_and_one_more_then_gives_up(url: str) -> None:
    # Each connection the pool gives fails the empty query: a dead one is replaced (the pool
    # opens another), but after as many as the pool holds and one more the call gives up.
    info = conninfo_to_dict(url)
    if str(info.get("host", "")).startswith("/"):
        pytest.skip("the relay needs the server on TCP")
    relay = Relay(str(info.get("host") or "127.0.0.1"), int(info.get("port") or 5432))
    relayed = make_conninfo(
        url, host="127.0.0.1", port=str(relay.port), sslmode="disable", gssencmode="disable"
    )
    conns = pgconn.Connections(relayed, NoTables(None), min_size=1, max_size=2, timeout=2)
    try:
        with pytest.raises(pgconn.CallFault) as caught:
            await conns.run("probing", lambda conn, call: None)
    finally:
        await conns.aclose()
        relay.close()
    assert relay.ended == 3
    assert caught.value.why.startswith("OperationalError: ")
    assert "closed the connection unexpectedly" in caught.value.why


@contextlib.contextmanager
def slow_to_refuse(hold: float) -> Iterator[tuple[str, list[socket.socket]]]:
    """A server that holds each connection ``hold`` seconds, answering nothing, then closes
    it: an attempt to connect that takes that long to fail. Its URL, and what it accepted."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = listener.accept()
                accepted.append(client)
                closing = threading.Timer(hold, client.close)
                closing.daemon = True
                closing.start()

    threading.Thread(target=serve, daemon=True).start()
    port = listener.getsockname()[1]
    try:
        yield f"postgresql://u@127.0.0.1:{port}/db?sslmode=disable&gssencmode=disable", accepted
    finally:
        listener.close()


async def open_pool(conns: pgconn.Connections) -> None:
    with trio.move_on_after(0.05):  # the pool opens, its thread starts connecting
        await conns.run("opening", lambda conn, call: None)


async def test_closing_waits_for_the_pool_s_threads_within_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The pool's thread is in an attempt to connect when the store closes, which waits for it
    # (within CLOSE_BOUND + SERVER_FIRST).
    monkeypatch.setattr(pgconn, "CLOSE_BOUND", 1.0)
    monkeypatch.setattr(pgconn, "SERVER_FIRST", 0.95)
    with slow_to_refuse(0.2) as (slow, accepted):
        conns = pgconn.Connections(slow, NoTables(None), min_size=1, max_size=1, timeout=5)
        await open_pool(conns)
        await conns.aclose()
        pool = f"{conns._pool_name}-"
        assert [t.name for t in threading.enumerate() if t.name.startswith(pool)] == []
        assert accepted  # it was connecting


async def test_closing_gives_up_on_a_pool_thread_stuck_past_its_bound(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Stuck for longer than CLOSE_BOUND (made short here): the close says so and ends.
    monkeypatch.setattr(pgconn, "CLOSE_BOUND", 0.1)
    monkeypatch.setattr(pgconn, "SERVER_FIRST", 0.5)
    with slow_to_refuse(1.0) as (slow, accepted):
        conns = pgconn.Connections(slow, NoTables(None), min_size=1, max_size=1, timeout=5)
        await open_pool(conns)
        with caplog.at_level(logging.DEBUG, "trio_routines"):
            await conns.aclose()
        assert accepted
    stuck = [r.getMessage() for r in caplog.records if "couldn't stop thread" in r.getMessage()]
    assert stuck
    assert all(f"'{conns._pool_name}-worker-" in m and "within 0.1 seconds" in m for m in stuck)


async def test_closing_returns_within_its_bound_while_the_pool_s_close_is_held_up(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pool's close held up, as by its threads stuck on a stalled server: closing the
    # store leaves it behind after CLOSE_BOUND + SERVER_FIRST (made short here).
    monkeypatch.setattr(pgconn, "CLOSE_BOUND", 0.1)
    monkeypatch.setattr(pgconn, "SERVER_FIRST", 0.05)
    held = threading.Event()
    close = ConnectionPool.close

    def held_up(pool: ConnectionPool, timeout: float = 5.0) -> None:
        held.wait(30)
        close(pool, timeout)

    async with connections(url, timeout=5) as conns:
        monkeypatch.setattr(ConnectionPool, "close", held_up)
        release = threading.Timer(1.0, held.set)  # ends a close that holds its caller
        release.daemon = True
        release.start()
        await conns.aclose()
        left_behind = not held.is_set()
        held.set()  # the close goes on in its thread
    assert left_behind


# -- the schema -----------------------------------------------------------------------------


async def test_the_versions_a_migration_records_and_a_newer_one_that_refuses_this_code(
    url: str, schema: str
) -> None:
    store = PostgresStore(url, schema=schema, timeout=30)
    try:
        assert await store.history("r") == []
    finally:
        await store.aclose()
    rows = version_rows(schema)
    assert [version for version, _ in rows] == list(range(1, SCHEMA_VERSION + 1))
    # The versions from before rolling upgrades each allow only code of their own version.
    assert rows[:5] == [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5)]
    # The names other releases and operators find them by: each table and its indexes.
    with admin() as conn:
        indexes = conn.execute(
            "SELECT c.relname, i.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indrelid "
            "JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s",
            (schema,),
        ).fetchall()
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchall()
    assert sorted(name.removeprefix("trio_routines_") for (name,) in tables) == [
        "armed",
        "claims",
        "gaps",
        "holds",
        "paused",
        "replicas",
        "resumed",
        "schema",
        "usage",
        "wake_turns",
        "wakeups",
    ]
    assert sorted(
        (table.removeprefix("trio_routines_"), index.removeprefix("trio_routines_"))
        for table, index in indexes
    ) == [
        ("armed", "armed_pkey"),
        ("claims", "claims_open"),
        ("claims", "claims_pkey"),
        ("gaps", "gaps_pkey"),
        ("holds", "holds_pkey"),
        ("paused", "paused_pkey"),
        ("replicas", "replicas_pkey"),
        ("resumed", "resumed_at"),
        ("resumed", "resumed_pkey"),
        ("schema", "schema_pkey"),
        ("usage", "usage_pkey"),
        ("wake_turns", "wake_turns_at"),
        ("wake_turns", "wake_turns_session"),
        ("wakeups", "wakeups_due"),
        ("wakeups", "wakeups_id"),
        ("wakeups", "wakeups_pkey"),
        ("wakeups", "wakeups_session"),
    ]
    # A newer release migrated, and allows only itself: the first call says so, in one line.
    add_newer(schema, compatible_from=NEWER)
    again = PostgresStore(url, schema=schema, timeout=30)
    try:
        with pytest.raises(StateFault) as caught:
            await again.history("r")
    finally:
        await again.aclose()
    assert str(caught.value) == refused(again.where)


def _blocked_by(watch: psycopg.Connection[Any], pid: int, app: str) -> bool:
    """Whether a backend of ``app`` waits for a lock ``pid`` holds (the schema's lock is one
    for the whole server: other tests' stores may be waiting for it too)."""
    row = watch.execute(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE application_name = %s AND %s = ANY(pg_blocking_pids(pid))",
        (app, pid),
    ).fetchone()
    return bool(row and row[0])


async def test_a_newer_schema_migrated_while_waiting_for_the_lock_is_refused(
    url: str, schema: str
) -> None:
    # Two processes start at once: the other one, newer, migrates while we wait for the
    # schema's lock, having found no tables. Under the lock the version is read again.
    app = f"app_{schema}"
    store = PostgresStore(with_app_name(url, app), schema=schema, timeout=30)
    outcome: list[object] = []

    async def first_call() -> None:
        try:
            outcome.append(await store.history("r"))
        except StateFault as exc:
            outcome.append(exc)

    names = Schema(schema)
    try:
        async with trio.open_nursery() as nursery:
            with admin() as other, admin() as watch, other.transaction():
                other.execute("SELECT pg_advisory_xact_lock(hashtext(%s), 0)", (DDL_LOCK,))
                other.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
                other.execute(
                    names.sql("CREATE TABLE {version} (version integer, compatible_from integer)")
                )
                add_newer(schema, NEWER, conn=other)
                nursery.start_soon(first_call)
                pid = other.info.backend_pid
                for _ in range(2000):
                    if await trio.to_thread.run_sync(_blocked_by, watch, pid, app):
                        break
                    await trio.sleep(0.002)
                else:
                    raise AssertionError("the first call never waited for the schema's lock")
            # Committed: the first call goes on.
    finally:
        await store.aclose()
    assert store._tables.found == 0  # it found no tables: the check under the lock refused
    (fault,) = outcome
    assert isinstance(fault, StateFault)
    assert str(fault) == refused(store.where)
    assert version_rows(schema) == [(NEWER, NEWER)]


async def test_an_empty_version_table_is_no_tables_yet(url: str, schema: str) -> None:
    # Made by hand, or left by a DBA: no version recorded is none at all, so a command that
    # only creates an empty database's tables would create them, and one that only reads
    # says what is there.
    with admin() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(
            Schema(schema).sql(
                "CREATE TABLE {version} (version integer PRIMARY KEY, applied_at timestamptz)"
            )
        )
    store = PostgresStore(url, schema=schema, timeout=30, migrate="never")
    try:
        with pytest.raises(StateFault) as caught:
            await store.history("r")
    finally:
        await store.aclose()
    assert store._tables.found == 0
    assert str(caught.value) == (
        f"the PostgreSQL state {store.where} has no trio_routines tables yet; this trio_routines "
        f"uses version {SCHEMA_VERSION} — {MIGRATE_HINT}"
    )


@pytest.mark.parametrize(
    ("column", "value", "shown"),
    [
        ("text", "'twelve'", "'twelve'"),
        ("text", "'12'", "'12'"),
        ("integer", "-3", "-3"),
        ("numeric", "12.5", "Decimal('12.5')"),
        ("text", "repeat('x', 100)", "'" + "x" * 39 + "…"),
    ],
)
@pytest.mark.parametrize("migrate", ["never", "always"])
async def test_a_version_table_of_another_shape_is_refused_in_one_line(
    url: str, schema: str, column: str, value: str, shown: str, migrate: str
) -> None:
    # A table of that name made by hand holds no version of ours: every command said so with
    # a traceback (int() of its text), and a migration would have run from it.
    with admin() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(Schema(schema).sql(f"CREATE TABLE {{version}} (version {column})"))
        conn.execute(Schema(schema).sql(f"INSERT INTO {{version}} VALUES ({value})"))
    store = PostgresStore(url, schema=schema, timeout=30, migrate=migrate)  # type: ignore[arg-type]
    try:
        with pytest.raises(StateFault) as caught:
            await store.history("r")
    finally:
        await store.aclose()
    assert str(caught.value) == (
        f'the version table "{schema}"."trio_routines_schema" holds {shown}, which is no schema '
        "version of trio_routines: the table is not its own — restore it, or use another schema"
    )
    with admin() as conn:  # nothing was made beside it
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchone()
    assert tables == (1,)


async def test_a_schema_to_create_on_a_read_only_database_says_why_in_one_line(
    url: str, schema: str
) -> None:
    read_only = f"{url}{'&' if '?' in url else '?'}options=-cdefault_transaction_read_only%3Don"
    store = PostgresStore(read_only, schema=schema, timeout=30)
    try:
        with pytest.raises(StateFault) as caught:
            await store.history("r")
    finally:
        await store.aclose()
    assert str(caught.value) == (
        f"the PostgreSQL state {store.where} has no trio_routines tables yet and needs version "
        f"{SCHEMA_VERSION}, but the database is read-only (cannot execute CREATE SCHEMA in a "
        "read-only transaction) — connect once with a role that can write, which migrates it"
    )


@pytest.fixture
def weak_role(url: str) -> Iterator[str]:
    """A role that may connect but create nothing."""
    name = f"trt_role_{uuid.uuid4().hex[:12]}"
    with admin() as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        with admin() as conn:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


async def test_a_schema_a_role_may_not_create_says_why_in_one_line(
    url: str, schema: str, weak_role: str
) -> None:
    store = PostgresStore(make_conninfo(url, user=weak_role), schema=schema, timeout=30)
    try:
        with pytest.raises(StateFault) as caught:
            await store.history("r")
    finally:
        await store.aclose()
    dbname = conninfo_to_dict(url)["dbname"]
    assert str(caught.value) == (
        f"the PostgreSQL state {store.where} has no trio_routines tables yet and needs version "
        f"{SCHEMA_VERSION}, but this role may not create or alter them (permission denied for "
        f"database {dbname}) — connect once with a role that can write, which migrates it"
    )


def test_the_primary_message_of_an_error_without_server_diagnostics() -> None:
    # The server always sends a message; psycopg's own errors may have none, or lines.
    spread = psycopg.errors.InsufficientPrivilege("may not\n\t create  it\n")
    assert _primary(spread) == "may not create it"
    assert _primary(psycopg.errors.ReadOnlySqlTransaction()) == "ReadOnlySqlTransaction"
