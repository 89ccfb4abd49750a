"""Upgrades of the PostgreSQL schema: only ``serve`` and ``migrate`` upgrade it, a command
that only reads never writes it, and older code runs on where a newer schema allows it
(on the real server; ``serve`` as a real process, the other commands, whose output and status
are what is checked, in this one)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pg import admin, fresh_schema, require_server
from procs import Env, one_line, stop
from psycopg import sql

from trio_routines.errors import StateFault
from trio_routines.stores.postgres import PostgresStore
from trio_routines.stores.postgres import conn as pgconn
from trio_routines.stores.postgres.schema import _MIGRATIONS, SCHEMA_VERSION, Schema
from trio_routines.wakeups import WakeupRequest

SLOT = "2026-07-07T09:00:00Z"
T0 = datetime(2026, 7, 7, 9, tzinfo=UTC)


@pytest.fixture
def schema() -> Iterator[str]:
    require_server()
    with fresh_schema() as name:
        yield name


def project(tmp_path: Path, schema: str) -> Env:
    env = Env(tmp_path)
    env.routine("daily", cron="0 9 * * *")
    url = require_server()
    env.state = f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"  # type: ignore[assignment]
    with admin() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    return env


def tables(schema: str) -> set[str]:
    with admin() as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchall()
    return {name for (name,) in rows}


def versions(schema: str) -> list[tuple[int, int | None]]:
    with admin() as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT version, to_jsonb(v)->'compatible_from' FROM {} AS v ORDER BY 1"
            ).format(sql.Identifier(schema, "trio_routines_schema"))
        ).fetchall()
    return [(int(v), None if c is None else int(c)) for v, c in rows]


def build_old(schema: str, version: int) -> None:
    """The tables as a release at ``version`` left them (no compatible_from column)."""
    names = Schema(schema)
    with admin() as conn:
        conn.execute(
            names.sql(
                "CREATE TABLE {version} (version integer PRIMARY KEY, applied_at timestamptz)"
            )
        )
        for v in range(1, version + 1):
            for statement in _MIGRATIONS[v]:
                conn.execute(names.sql(statement))
            conn.execute(names.sql("INSERT INTO {version} (version) VALUES (%s)"), (v,))


def newer(schema: str, compatible_from: int | None) -> int:
    """What a newer release's migration would do: a table and a column more, and its row."""
    names = Schema(schema)
    future = SCHEMA_VERSION + 1
    with admin() as conn:
        conn.execute(names.sql("ALTER TABLE {claims} ADD COLUMN future text"))
        conn.execute(
            sql.SQL("CREATE TABLE {} (x int)").format(sql.Identifier(schema, "trio_routines_x"))
        )
        conn.execute(
            names.sql("INSERT INTO {version} (version, compatible_from) VALUES (%s, %s)"),
            (future, compatible_from),
        )
    return future


def test_commands_that_only_read_never_create_the_tables(tmp_path: Path, schema: str) -> None:
    env = project(tmp_path, schema)
    for argv in (("history", "daily"), ("list",), ("status",)):
        result = env.run_cli(*argv)
        assert result.returncode == 1, (argv, result.stdout, result.stderr)
        line = one_line(result.stderr)
        assert "no trio_routines tables yet" in line
        assert "migrate" in line
    assert tables(schema) == set()
    # A command that changes state creates an empty database's tables.
    fired = env.run_cli("fire", "daily", "--slot", SLOT, "--agent", "echo")
    assert fired.returncode == 0, fired.stderr
    assert "trio_routines_claims" in tables(schema)
    assert versions(schema)[-1][0] == SCHEMA_VERSION


def test_an_older_schema_is_upgraded_only_by_migrate_or_serve(tmp_path: Path, schema: str) -> None:
    env = project(tmp_path, schema)
    build_old(schema, 5)
    before = tables(schema)
    for argv in (
        ("history", "daily"),
        ("pause", "daily"),
        ("fire", "daily", "--slot", SLOT, "--agent", "echo"),
    ):
        result = env.run_cli(*argv)
        assert result.returncode == 1, (argv, result.stdout, result.stderr)
        assert "has schema version 5; this trio_routines uses version" in one_line(result.stderr)
    assert (tables(schema), [v for v, _ in versions(schema)]) == (before, [1, 2, 3, 4, 5])
    migrated = env.run_cli("migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert f"migrated from schema version 5 to {SCHEMA_VERSION}" in migrated.stdout
    rows = versions(schema)
    assert [v for v, _ in rows] == list(range(1, SCHEMA_VERSION + 1))
    assert all(c is not None and c <= v for v, c in rows[5:])  # each new row says who may read
    again = env.run_cli("migrate")
    assert again.returncode == 0, again.stderr
    assert f"schema version {SCHEMA_VERSION}, nothing to migrate" in again.stdout
    fired = env.run_cli("fire", "daily", "--slot", SLOT, "--agent", "echo")
    assert fired.returncode == 0, fired.stderr


@pytest.mark.slow
def test_serve_migrates_an_older_schema(tmp_path: Path, schema: str) -> None:
    env = project(tmp_path, schema)
    build_old(schema, 4)
    serve = env.serve("echo")
    assert stop(serve) == 0, env.log()
    assert versions(schema)[-1][0] == SCHEMA_VERSION


@pytest.mark.slow
def test_older_code_runs_on_a_newer_schema_that_allows_it(tmp_path: Path, schema: str) -> None:
    # A rolling upgrade: a newer replica migrated; this (older) code restarts and goes on.
    env = project(tmp_path, schema)
    assert env.run_cli("migrate").returncode == 0
    newer(schema, compatible_from=SCHEMA_VERSION)
    serve = env.serve("echo")
    fired = env.run_cli("fire", "daily", "--slot", SLOT, "--agent", "echo")
    assert fired.returncode == 0, fired.stderr
    assert [entry["outcome"] for entry in env.history("daily")] == ["completed"]
    assert stop(serve, signal.SIGTERM) == 0, env.log()
    assert versions(schema)[-1] == (SCHEMA_VERSION + 1, SCHEMA_VERSION)  # nothing rolled back


def test_older_code_is_refused_by_a_newer_schema_that_does_not_allow_it(
    tmp_path: Path, schema: str
) -> None:
    env = project(tmp_path, schema)
    assert env.run_cli("migrate").returncode == 0
    future = newer(schema, compatible_from=SCHEMA_VERSION + 1)
    before = versions(schema)
    for argv in (("serve", "--agent", "echo"), ("history", "daily"), ("migrate",)):
        result = env.run_cli(*argv)
        assert result.returncode == 1, (argv, result.stdout, result.stderr)
        line = one_line(result.stderr)
        assert f"has schema version {future}, newer than this trio_routines understands" in line
        assert "upgrade it" in line
    assert versions(schema) == before


@pytest.mark.parametrize("allowed", [True, False])
async def test_a_running_replica_stops_using_a_database_migrated_beyond_it(
    schema: str, allowed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An old replica still running while a newer one migrates: it must not go on (firing a
    # routine the newer one paused, say) unless the migration allows it.
    store = PostgresStore(require_server(), schema=schema)
    try:
        assert (await store.claim("r", T0, T0)).taken
        monkeypatch.setattr(pgconn, "SCHEMA_RECHECK", 0.0)  # the next call checks again
        future = newer(schema, compatible_from=SCHEMA_VERSION if allowed else SCHEMA_VERSION + 1)
        later = T0 + timedelta(minutes=1)
        if allowed:
            assert (await store.claim("r", later, later)).taken
            return
        with pytest.raises(StateFault, match=f"has schema version {future}, newer than this"):
            await store.claim("r", later, later)
        with pytest.raises(StateFault, match="upgrade it"):
            await store.history("r")
    finally:
        await store.aclose()
    with admin() as conn:
        rows = conn.execute(
            sql.SQL("SELECT slot FROM {}").format(sql.Identifier(schema, "trio_routines_claims"))
        ).fetchall()
    assert [slot for (slot,) in rows] == [T0]  # nothing claimed once it was refused


async def test_a_store_of_its_own_schema_repairs_it_naming_each_object_in_it(schema: str) -> None:
    store = PostgresStore(require_server(), schema=schema)
    try:
        assert await store.repair_schema() == []  # migrated by its first call: whole
        with admin() as conn:
            conn.execute(
                sql.SQL("DROP INDEX {}").format(sql.Identifier(schema, "trio_routines_claims_open"))
            )
            conn.execute(
                sql.SQL("ALTER TABLE {} DROP COLUMN until_at").format(
                    sql.Identifier(schema, "trio_routines_wakeups")
                )
            )
        assert await store.repair_schema() == [
            (f'index "{schema}"."trio_routines_claims_open"', True),
            (f'column "{schema}"."trio_routines_wakeups".until_at', True),
        ]
        assert await store.repair_schema() == []
        request = WakeupRequest(session="s", prompt="p", cron="0 9 * * *", until=T0)
        await store.add_wakeup(request, T0 - timedelta(days=2))  # writes until_at again
    finally:
        await store.aclose()
