"""The PostgreSQL store beyond the shared contract: races between real processes, killed
connections, schema creation and versioning. Every test uses its own schema."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
import trio
from pg import T0, admin, fresh_schema, kill_backends, require_server, with_app_name
from procs import Env, one_line
from psycopg import sql

from trio_routines.agent import Usage
from trio_routines.errors import StateFault
from trio_routines.presence import IdInUse
from trio_routines.records import ClaimStatus, Gap, GapReason, Origin, Outcome
from trio_routines.replicas import ReplicaInfo
from trio_routines.stores import open_store
from trio_routines.stores.postgres import CLAIM_LOCK, SCHEMA_VERSION, PostgresStore, searchpath
from trio_routines.stores.postgres.schema import Migrate
from trio_routines.wakeups import WakeupRequest

WORKER = Path(__file__).with_name("pg.py")
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)


@pytest.fixture
def url() -> str:
    return require_server()


@pytest.fixture
def schema(url: str) -> Iterator[str]:
    with fresh_schema() as name:
        yield name


def race(command: str, url: str, schema: str, argvs: list[list[str]]) -> list[str]:
    """Run one worker per argv, release them at once, and return each one's stdout."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), command, url, schema, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for argv in argvs
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "ready\n"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = [proc.communicate(timeout=60)[0] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [proc.returncode for proc in procs] == [0] * len(procs)
    return outputs


def claimed_slots(schema: str, routine: str) -> list[int]:
    with admin() as conn:
        rows = conn.execute(
            sql.SQL("SELECT slot FROM {} WHERE routine = %s ORDER BY slot").format(
                sql.Identifier(schema, "trio_routines_claims")
            ),
            (routine,),
        ).fetchall()
    return [(slot - T0) // MINUTE for (slot,) in rows]


@pytest.mark.slow
def test_schema_creation_races_safely_and_is_versioned(url: str, schema: str) -> None:
    race("open", url, schema, [[] for _ in range(6)])
    with admin() as conn:
        versions = conn.execute(
            sql.SQL("SELECT version FROM {} ORDER BY version").format(
                sql.Identifier(schema, "trio_routines_schema")
            )
        ).fetchall()
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
            "ORDER BY table_name",
            (schema,),
        ).fetchall()
    assert versions == [(version,) for version in range(1, SCHEMA_VERSION + 1)]
    assert [t for (t,) in tables] == [
        "trio_routines_armed",
        "trio_routines_claims",
        "trio_routines_gaps",
        "trio_routines_holds",
        "trio_routines_paused",
        "trio_routines_replicas",
        "trio_routines_resumed",
        "trio_routines_schema",
        "trio_routines_usage",
        "trio_routines_wake_turns",
        "trio_routines_wakeups",
    ]


async def test_a_newer_schema_is_refused(url: str, schema: str) -> None:
    store = PostgresStore(url, schema=schema)
    await store.latest_fire("r")
    await store.aclose()
    with admin() as conn:
        conn.execute(
            sql.SQL("INSERT INTO {} (version) VALUES (%s)").format(
                sql.Identifier(schema, "trio_routines_schema")
            ),
            (SCHEMA_VERSION + 1,),
        )
    newer = PostgresStore(url, schema=schema)
    with pytest.raises(StateFault, match=rf"schema version {SCHEMA_VERSION + 1}, newer .* upgrade"):
        await newer.claim("r", T0, T0)
    await newer.aclose()


async def test_a_version_1_schema_gains_the_error_column_and_keeps_its_claims(
    url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trio_routines.stores.postgres import schema as pgschema

    monkeypatch.setattr(pgschema, "SCHEMA_VERSION", 1)
    old = PostgresStore(url, schema=schema)
    await old.ready()  # the first call migrates: to version 1 here
    await old.aclose()
    claims = sql.Identifier(schema, "trio_routines_claims")
    with admin() as conn:  # what a version-1 claim and settle wrote: no error, no replica
        columns = conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'trio_routines_claims'",
            (schema,),
        ).fetchall()
        assert ("error",) not in columns
        assert ("replica",) not in columns
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (routine, slot, fired_at, outcome, ms) "
                "VALUES ('r', %s, %s, 'failed', 7)"
            ).format(claims),
            (T0, T0),
        )
        conn.execute(  # and a version-1 wake-up: no origin
            sql.SQL(
                "INSERT INTO {} (id, session, prompt, fire_at) VALUES ('w-old', 's', 'p', %s)"
            ).format(sql.Identifier(schema, "trio_routines_wakeups")),
            (T0 + HOUR,),
        )
    monkeypatch.undo()

    store = PostgresStore(url, schema=schema)
    (fire,) = await store.history("r")
    assert (fire.outcome, fire.ms, fire.error, fire.replica) == (Outcome.FAILED, 7, None, None)
    await store.claim("r", T0 + MINUTE, T0 + MINUTE, replica="host-b:42")  # version 5
    assert [f.replica for f in await store.history("r")] == [None, "host-b:42"]
    await store.settle("r", T0 + MINUTE, Outcome.FAILED, 9, error="exit status 2: key expired")
    assert [f.error for f in await store.history("r")] == [None, "exit status 2: key expired"]
    await store.set_paused("r", True)  # version 3: the paused routines
    assert await store.paused() == {"r"}
    gap = Gap(T0 + 2 * MINUTE, T0 + 3 * MINUTE, 2, GapReason.DOWN)
    assert await store.record_gap("r", gap)  # version 6: the gaps
    assert await store.gaps("r") == [gap]
    armed = await store.first_armed(["r"], T0)  # version 7: when each was first armed
    assert armed == {"r": T0}
    await store.settle("r", T0 + MINUTE, Outcome.COMPLETED, 9, output="said\nthis")  # version 8
    assert [f.output for f in await store.history("r")] == [None, "said\nthis"]
    (old_wakeup,) = await store.list_wakeups()  # added by version-1 code: who asked is unknown
    assert (old_wakeup.id, old_wakeup.origin) == ("w-old", None)
    asked = WakeupRequest(session="s", prompt="p", fire_at=T0 + HOUR, origin=Origin(kind="cli"))
    added = await store.add_wakeup(asked, T0)  # version 9: who asked for each wake-up
    assert [w.origin for w in await store.list_wakeups()] == [None, added.origin]
    spent = Usage(input_tokens=120, output_tokens=30, cost=0.25, currency="EUR")
    await store.settle("r", T0 + MINUTE, Outcome.COMPLETED, 9, usage=spent)  # version 10
    assert [f.usage for f in await store.history("r")] == [None, spent]
    await store.note_wake_turn("s", T0)  # version 11: the recent wake-up turns
    assert await store.wake_turns("s", T0 - HOUR) == [T0]
    await store.set_paused("q", True, T0)  # version 13: a resume keeps when its pause began
    await store.set_paused("q", False, T0 + HOUR)
    assert await store.resumed_pause_since("q") == T0
    # version 14: the paused read finds the recent resumes by an index
    assert (await store.paused_with_resumes(T0))[1] == {"q": (T0 + HOUR, T0)}
    await store.aclose()
    with admin() as conn:
        versions = conn.execute(
            sql.SQL("SELECT version FROM {} ORDER BY version").format(
                sql.Identifier(schema, "trio_routines_schema")
            )
        ).fetchall()
        indexed = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s "
            "AND indexname = 'trio_routines_resumed_at'",
            (schema,),
        ).fetchall()
    assert versions == [(version,) for version in range(1, 15)]
    assert SCHEMA_VERSION == 14
    (definition,) = (row[0] for row in indexed)
    assert definition.endswith("(resumed_at)")


async def test_version_12_code_may_go_on_using_a_version_13_database(
    url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Migration 13 only adds a nullable column to the resumes, which older code neither reads
    # nor names: its resumes (an upsert of the resume's instant) leave it as it was, and one
    # it made first reads as unknown.
    from trio_routines.stores.postgres import schema as pgschema

    store = PostgresStore(url, schema=schema)
    await store.set_paused("r", True, T0)
    await store.set_paused("r", False, T0 + HOUR)
    await store.aclose()
    with admin() as conn:
        row = conn.execute(
            sql.SQL("SELECT compatible_from FROM {} WHERE version = 13").format(
                sql.Identifier(schema, "trio_routines_schema")
            )
        ).fetchone()
        assert row == (5,)
        # What version-12 code writes when it resumes a routine: the instant alone.
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (routine, resumed_at) VALUES ('old', %s) ON CONFLICT (routine) "
                "DO UPDATE SET resumed_at = excluded.resumed_at"
            ).format(sql.Identifier(schema, "trio_routines_resumed")),
            (T0,),
        )
    monkeypatch.setattr(pgschema, "SCHEMA_VERSION", 12)
    older = PostgresStore(url, schema=schema, migrate="never")
    assert await older.resumed_at("r") == T0 + HOUR  # not refused
    await older.aclose()
    monkeypatch.undo()
    store = PostgresStore(url, schema=schema)
    assert await store.resumed_pause_since("old") is None
    assert await store.resumed_pause_since("r") == T0
    await store.aclose()


async def test_version_13_code_may_go_on_using_a_version_14_database(
    url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Migration 14 only adds an index on the resumes' instants: older code's statements are
    # the same, and its resumes are found by the index as ours are.
    from trio_routines.stores.postgres import schema as pgschema

    store = PostgresStore(url, schema=schema)
    await store.set_paused("r", True, T0)
    await store.aclose()
    with admin() as conn:
        row = conn.execute(
            sql.SQL("SELECT compatible_from FROM {} WHERE version = 14").format(
                sql.Identifier(schema, "trio_routines_schema")
            )
        ).fetchone()
    assert row == (5,)
    monkeypatch.setattr(pgschema, "SCHEMA_VERSION", 13)
    older = PostgresStore(url, schema=schema, migrate="never")
    await older.set_paused("r", False, T0 + HOUR)  # not refused
    await older.aclose()
    monkeypatch.undo()
    store = PostgresStore(url, schema=schema)
    assert await store.paused_with_resumes(T0) == (frozenset(), {"r": (T0 + HOUR, T0)})
    await store.aclose()


async def test_version_9_code_may_go_on_using_a_version_10_database(
    url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Migration 10 only adds nullable usage columns: version 5 code may use it, and its settles
    # (which name no usage column) leave a turn's usage as it was.
    from trio_routines.stores.postgres import schema as pgschema

    spent = Usage(input_tokens=5, output_tokens=7)
    store = PostgresStore(url, schema=schema)
    await store.claim("r", T0, T0)
    await store.settle("r", T0, Outcome.COMPLETED, 3, usage=spent)
    await store.aclose()
    with admin() as conn:
        row = conn.execute(
            sql.SQL("SELECT compatible_from FROM {} WHERE version = 10").format(
                sql.Identifier(schema, "trio_routines_schema")
            )
        ).fetchone()
    assert row == (5,)
    monkeypatch.setattr(pgschema, "SCHEMA_VERSION", 9)
    older = PostgresStore(url, schema=schema, migrate="never")
    taken = await older.claim("r", T0 + MINUTE, T0 + MINUTE)  # not refused
    assert taken.status is ClaimStatus.TAKEN
    await older.aclose()
    monkeypatch.undo()
    store = PostgresStore(url, schema=schema)
    assert [f.usage for f in await store.history("r")] == [spent, None]
    await store.aclose()


async def test_version_10_code_may_go_on_using_a_version_11_database(
    url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Migration 11 only adds the table of recent wake-up turns, which older code never reads,
    # and a nullable until, which older code never writes.
    from trio_routines.stores.postgres import schema as pgschema

    store = PostgresStore(url, schema=schema)
    await store.note_wake_turn("s", T0)
    await store.aclose()
    with admin() as conn:
        row = conn.execute(
            sql.SQL("SELECT compatible_from FROM {} WHERE version = 11").format(
                sql.Identifier(schema, "trio_routines_schema")
            )
        ).fetchone()
    assert row == (5,)
    monkeypatch.setattr(pgschema, "SCHEMA_VERSION", 10)
    older = PostgresStore(url, schema=schema, migrate="never")
    asked = WakeupRequest(session="s", prompt="p", fire_at=T0 + HOUR)
    await older.add_wakeup(asked, T0)  # not refused
    assert len(await older.list_wakeups()) == 1
    await older.aclose()


async def test_version_8_code_may_go_on_using_a_version_9_database(
    url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Migration 9 only adds nullable origin columns: version 5 code may use it, and what it
    # adds (no origin columns named) reads back as unknown, while what it reads is unchanged.
    from trio_routines.stores.postgres import schema as pgschema

    store = PostgresStore(url, schema=schema)
    await store.ready()
    await store.aclose()
    wakeups = sql.Identifier(schema, "trio_routines_wakeups")
    with admin() as conn:
        row = conn.execute(
            sql.SQL("SELECT compatible_from FROM {} WHERE version = 9").format(
                sql.Identifier(schema, "trio_routines_schema")
            )
        ).fetchone()
        assert row == (5,)
        conn.execute(  # the insert of version-8 code
            sql.SQL(
                "INSERT INTO {} (id, session, prompt, fire_at, cron, tz, attempts) "
                "VALUES ('w8', 's', 'p', %s, NULL, NULL, NULL)"
            ).format(wakeups),
            (T0 + HOUR,),
        )
    monkeypatch.setattr(pgschema, "SCHEMA_VERSION", 8)
    older = PostgresStore(url, schema=schema, migrate="never")
    (listed,) = await older.list_wakeups()  # not refused
    assert (listed.id, listed.origin) == ("w8", None)
    await older.aclose()


@pytest.mark.parametrize(
    "columns",
    [
        ("bogus", 0, None, None, None),
        ("routine", 1, None, None, None),  # a routine's origin without its routine
        ("wakeup", -3, None, None, "p"),
        ("http", 4, None, None, None),
        ("wakeup", 2, None, None, "a\x1b[31mb"),  # kept: shown escaped, never raw
    ],
)
async def test_a_malformed_origin_reads_as_unknown_and_keeps_the_wakeup(
    url: str, schema: str, columns: tuple[object, ...]
) -> None:
    store = PostgresStore(url, schema=schema)
    await store.ready()
    with admin() as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (id, session, prompt, fire_at, origin, origin_depth, "
                "origin_routine, origin_slot, origin_parent) "
                "VALUES ('w', 's', 'p', %s, %s, %s, %s, %s, %s)"
            ).format(sql.Identifier(schema, "trio_routines_wakeups")),
            (T0 + HOUR, *columns),
        )
    (listed,) = await store.list_wakeups()
    kept = columns[0] == "wakeup" and columns[1] == 2
    assert (listed.origin is not None) == kept
    taken = await store.take_due_wakeup(T0 + HOUR)
    assert taken == listed
    await store.aclose()


async def test_version_7_code_may_go_on_using_a_version_8_database(
    url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Migration 8 only adds the output column: it records that version 5 code may use it.
    from trio_routines.stores.postgres import schema as pgschema

    store = PostgresStore(url, schema=schema)
    await store.claim("r", T0, T0)
    await store.settle("r", T0, Outcome.COMPLETED, 3, output="kept")
    await store.aclose()
    with admin() as conn:
        row = conn.execute(
            sql.SQL("SELECT compatible_from FROM {} WHERE version = 8").format(
                sql.Identifier(schema, "trio_routines_schema")
            )
        ).fetchone()
    assert row == (5,)
    monkeypatch.setattr(pgschema, "SCHEMA_VERSION", 7)
    older = PostgresStore(url, schema=schema, migrate="never")
    taken = await older.claim("r", T0 + MINUTE, T0 + MINUTE)  # not refused
    assert taken.status is ClaimStatus.TAKEN
    await older.aclose()


@pytest.mark.slow
@pytest.mark.parametrize("order", ["same", "shuffled"])
def test_eight_processes_racing_200_slots(
    url: str, schema: str, tmp_path: Path, order: str
) -> None:
    effects = tmp_path / "turns"
    argvs = [["daily", "200", str(effects), order, str(seed)] for seed in range(8)]
    race("claim", url, schema, argvs)
    turns = [int(line.split()[0]) for line in effects.read_text().splitlines()]
    assert len(turns) == len(set(turns)), "a slot ran twice"
    assert sorted(turns) == claimed_slots(schema, "daily")  # one turn per claim, no more
    if order == "same":
        assert sorted(turns) == list(range(200))  # in order, nothing is ever stale
    else:
        assert 199 in turns  # the last slot can never be stale


@pytest.mark.slow
def test_two_processes_taking_100_due_wakeups(url: str, schema: str) -> None:
    async def fill() -> tuple[set[str], set[str]]:
        store = PostgresStore(url, schema=schema)
        once, recurring = set(), set()
        for n in range(90):
            request = WakeupRequest(session=f"s{n % 10}", prompt=f"p{n}", fire_at=T0 + 2 * MINUTE)
            once.add((await store.add_wakeup(request, T0)).id)
        for n in range(10):
            request = WakeupRequest(session=f"r{n}", prompt="digest", cron="0 9 * * *")
            recurring.add((await store.add_wakeup(request, T0)).id)
        await store.aclose()
        return once, recurring

    once, recurring = trio.run(fill)
    now = (T0 + timedelta(days=2)).isoformat()
    outputs = race("take", url, schema, [[now], [now]])
    taken = [line.split()[1] for out in outputs for line in out.splitlines()]
    assert len(taken) == len(set(taken)) == 100, "a wake-up was taken twice, or lost"
    assert set(taken) == once | recurring

    async def left() -> set[str]:
        store = PostgresStore(url, schema=schema)
        pending = await store.list_wakeups()
        await store.aclose()
        assert all(w.fire_at > T0 + timedelta(days=2) for w in pending)
        return {w.id for w in pending}

    assert trio.run(left) == recurring  # advanced in place, not taken again


@pytest.mark.slow
def test_session_cap_holds_across_processes(url: str, schema: str) -> None:
    outputs = race("add", url, schema, [["s1", "15"], ["s1", "15"]])
    lines = [line for out in outputs for line in out.splitlines()]
    assert (lines.count("added"), lines.count("refused")) == (20, 10)
    with admin() as conn:
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(
                sql.Identifier(schema, "trio_routines_wakeups")
            )
        ).fetchone()
    assert row == (20,)


# -- connection loss --------------------------------------------------------------------------


async def test_a_killed_idle_connection_is_replaced(url: str, schema: str) -> None:
    app = f"app_{schema}"
    store = PostgresStore(with_app_name(url, app), schema=schema)
    assert (await store.claim("r", T0, T0)).taken
    assert await trio.to_thread.run_sync(kill_backends, app) >= 1
    assert (await store.claim("r", T0 + MINUTE, T0)).taken
    await trio.to_thread.run_sync(kill_backends, app)
    assert [f.slot for f in await store.history("r")] == [T0, T0 + MINUTE]
    await store.aclose()


async def test_a_claim_killed_mid_transaction_faults_and_leaves_no_claim(
    url: str, schema: str
) -> None:
    routine = f"held-{schema}"  # held by a blocker: no other test claims it
    app = f"app_{schema}"
    store = PostgresStore(with_app_name(url, app), schema=schema)
    await store.latest_fire(routine)  # schema in place, pool open
    with admin() as blocker:
        # Hold the routine's claim lock, so the store's claim waits inside its transaction.
        blocker.execute(
            "SELECT pg_advisory_lock(hashtext(%s), hashtext(%s))", (CLAIM_LOCK, routine)
        )
        outcome: list[BaseException | ClaimStatus] = []

        async def claim() -> None:
            try:
                outcome.append((await store.claim(routine, T0, T0)).status)
            except StateFault as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(claim)
            for _ in range(1000):
                if await trio.to_thread.run_sync(_waiting_on_lock, app):
                    break
                await trio.sleep(0.01)
            else:
                raise AssertionError("the claim never reached the routine's lock")
            assert await trio.to_thread.run_sync(kill_backends, app) >= 1
    (fault,) = outcome
    assert isinstance(fault, StateFault)
    assert f"could not claim slot 2026-07-07T10:00:00.000Z of '{routine}'" in str(fault)
    assert "\n" not in str(fault)
    assert await store.history(routine) == []  # nothing committed: the slot is not burned
    assert (await store.claim(routine, T0, T0)).taken
    await store.aclose()


@pytest.mark.slow
async def test_a_lock_held_by_a_stalled_replica_is_a_bounded_wait(url: str, schema: str) -> None:
    routine = f"held-{schema}"  # held by a blocker: no other test claims it
    # Claims run inside shielded fires: the server must not make them wait without end.
    store = PostgresStore(url, schema=schema, timeout=1.0)
    await store.latest_fire(routine)
    with admin() as blocker:
        blocker.execute(
            "SELECT pg_advisory_lock(hashtext(%s), hashtext(%s))", (CLAIM_LOCK, routine)
        )
        with trio.fail_after(30):  # generous: the point is that it ends, and how
            with pytest.raises(StateFault, match="could not claim slot"):
                await store.claim(routine, T0, T0)
    assert await store.history(routine) == []
    assert (await store.claim(routine, T0, T0)).taken  # the lock released: the slot is still there
    await store.aclose()


def _waiting_on_lock(app: str) -> bool:
    with admin() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "AND wait_event_type = 'Lock'",
            (app,),
        ).fetchone()
    return row is not None and row[0] > 0


@pytest.mark.slow
async def test_connections_killed_during_activity(url: str, schema: str) -> None:
    app = f"app_{schema}"
    store = PostgresStore(
        with_app_name(url, app), schema=schema, max_size=4, timeout=5, keep=100_000
    )  # nothing pruned: every reported claim must still be there
    reported: list[int] = []
    faults = 0
    killing = True

    async def killer() -> None:
        # A storm of kills a few claims apart, whatever the connections are doing: idle,
        # connecting, mid-query, committing -- until some landed mid-call (a kill of an idle
        # connection is absorbed by the store's liveness probe, so how many rounds that
        # takes varies), within a bound.
        nonlocal killing
        kills = 0
        for _ in range(400):
            await trio.sleep(0.03)
            kills += await trio.to_thread.run_sync(kill_backends, app)
            if faults >= 3:
                break
        killing = False
        assert kills > 0

    async def claimer(lane: int) -> None:
        nonlocal faults
        minute = lane
        while minute < 300 or (killing and minute < 30_000):  # traffic while the killer works
            slot = T0 + minute * MINUTE
            minute += 3
            try:
                result = await store.claim("r", slot, slot)
            except StateFault:
                faults += 1
                continue  # as the scheduler does: never fire on a fault
            if result.taken:
                reported.append(minute - 3)
                await store.settle("r", slot, Outcome.COMPLETED, 1)  # never raises

    async with trio.open_nursery() as nursery:
        nursery.start_soon(killer)
        async with trio.open_nursery() as claimers:
            for lane in range(3):
                claimers.start_soon(claimer, lane)

    assert faults > 0, "the killer never hit a call: this test proved nothing"
    assert len(reported) == len(set(reported)), "a slot was reported taken twice"
    stored = set(claimed_slots(schema, "r"))
    assert set(reported) <= stored  # a taken claim was durable
    # The store recovered without a restart.
    assert (await store.claim("r", T0 + 40_000 * MINUTE, T0)).taken
    assert (await store.latest_fire("r")) is not None
    await store.aclose()


# -- faults and wiring ------------------------------------------------------------------------


@pytest.mark.slow
async def test_an_unreachable_server_is_a_one_line_state_fault(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = PostgresStore("postgresql://postgres@127.0.0.1:1/test", timeout=1)
    with pytest.raises(StateFault, match=r"could not claim .* is the server up") as caught:
        await store.claim("r", T0, T0)
    assert "\n" not in str(caught.value)
    with pytest.raises(StateFault):
        await store.take_due_wakeup(T0)
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert not await store.settle("r", T0, Outcome.COMPLETED, 5)  # logged, never raised
    assert "r: could not record the completed outcome of slot 2026-07-07T10:00:00.000Z" in (
        caplog.text
    )
    await store.aclose()
    await store.aclose()


async def test_a_closed_store_refuses_calls(url: str, schema: str) -> None:
    store = PostgresStore(url, schema=schema)
    await store.aclose()
    with pytest.raises(StateFault, match="closed"):
        await store.latest_fire("r")


async def test_search_path_in_the_url_selects_the_schema(url: str, schema: str) -> None:
    with admin() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    store = open_store(f"{url}?options=-csearch_path%3D{schema}")
    assert isinstance(store, PostgresStore)
    assert (await store.claim("r", T0, T0)).taken
    # Named in every message with its schema: two stores in one database differ by it.
    assert store.where.endswith(f"/test (schema {schema})")
    # A second replica of one id is refused as such (a rejoin waits on that), in one line.
    first = await store.join(ReplicaInfo("twin", "0", "h", 1, T0, T0))
    with pytest.raises(IdInUse) as refused:
        await store.join(ReplicaInfo("twin", "0", "h", 2, T0, T0))
    assert str(refused.value) == (
        f"could not join {store.where}: replica id 'twin' is in use by a live replica — give "
        "each replica its own id (--replica, or the scheduler's replica=)"
    )
    await first.leave()
    await store.aclose()
    assert claimed_slots(schema, "r") == [0]


@pytest.mark.parametrize("migrate", ["always", "never"])
async def test_a_search_path_to_a_schema_that_does_not_exist_says_so(
    url: str, schema: str, migrate: Migrate
) -> None:
    # The database answered: what is missing is the schema, which the store never creates
    # from a search_path. A command that only reads says so too, rather than send the
    # operator to `migrate`, which would fail on it.
    store = PostgresStore(f"{url}?options=-csearch_path%3D{schema}", migrate=migrate)
    with pytest.raises(StateFault) as refused:
        await store.latest_fire("r")
    await store.aclose()
    assert str(refused.value) == (
        f"the PostgreSQL state {store.where} has no schema to keep its tables in: no schema "
        f"its search_path names ({schema}) exists, or this role may use — create it first "
        "(CREATE SCHEMA, or GRANT USAGE), then run `python -m trio_routines migrate`"
    )
    with admin() as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,)
        ).fetchone() == (0,)


@pytest.mark.parametrize("quoted", [False, True])
async def test_a_search_path_whose_first_schema_does_not_exist_makes_no_tables_in_the_next(
    url: str, schema: str, quoted: bool
) -> None:
    # `mine,public` without a schema mine: its tables went into public, beside another
    # store's, and every message still named "mine,public".
    later = f"{schema}_later"
    first = f'"{schema}"' if quoted else schema
    with admin() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(later)))
    try:
        store = PostgresStore(f"{url}?options=-csearch_path%3D{first}%2C{later}")
        with pytest.raises(StateFault) as refused:
            await store.latest_fire("r")
        await store.aclose()
        assert str(refused.value) == (
            f"the PostgreSQL state {store.where} would keep its tables in {later!r}: the "
            f"first schema its search_path names ({schema!r}) does not exist, or this role "
            "may not use it — create it first (CREATE SCHEMA, or GRANT USAGE), then run "
            "`python -m trio_routines migrate`"
        )
        with admin() as conn:
            assert conn.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s",
                (later,),
            ).fetchone() == (0,)
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        store = PostgresStore(f"{url}?options=-csearch_path%3D{first}%2C{later}")
        assert (await store.claim("r", T0, T0)).taken  # once it exists: there
        await store.aclose()
        assert claimed_slots(schema, "r") == [0]
    finally:
        with admin() as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(later)))


@pytest.mark.parametrize(
    ("path", "names"),
    [
        ('"$user", public', [("$user", True), ("public", False)]),
        (" Mine , public", [("Mine", False), ("public", False)]),  # the server lowers it
        ('"My,Schema",public', [("My,Schema", True), ("public", False)]),
        ('"a""b" ,c', [('a"b', True), ("c", False)]),
        ("", []),
    ],
)
def test_a_search_path_is_read_as_the_server_reads_it(
    path: str, names: list[tuple[str, bool]]
) -> None:
    assert list(searchpath._path_entries(path)) == names


@pytest.mark.parametrize(
    ("name", "quoted", "read"),
    [
        ("Mine", False, "mine"),
        ("Äpfel", False, "Äpfel"),  # the server lowers ASCII letters only
        ("Mine", True, "Mine"),
        ("s" * 70, False, "s" * 63),  # cut to 63 bytes
        ("é" * 40, True, "é" * 31),  # on a character's boundary
    ],
)
def test_a_search_path_name_is_read_as_the_server_reads_it(
    name: str, quoted: bool, read: str
) -> None:
    assert searchpath._identifier(name, quoted) == read


@pytest.mark.parametrize("written", ["Mixed", "Äpfel"])
async def test_a_search_path_naming_a_schema_as_the_server_reads_it_makes_its_tables_there(
    url: str, schema: str, written: str
) -> None:
    # Unquoted, the server lowers only ASCII letters: "Mixed" is mixed, "Äpfel" Äpfel.
    name = f"{schema}_{written}"
    created = name.lower() if written == "Mixed" else f"{schema}_Äpfel"
    with admin() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(created)))
    try:
        options = quote(f"-csearch_path={name},public", safe="")
        store = PostgresStore(f"{url}?options={options}")
        assert (await store.claim("r", T0, T0)).taken
        await store.aclose()
        with admin() as conn:
            found = conn.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s",
                (created,),
            ).fetchone()
        assert found is not None
        assert found[0] > 0
    finally:
        with admin() as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(created)))


async def test_a_search_path_to_a_schema_the_role_may_not_use_says_so(
    url: str, schema: str
) -> None:
    # The schema exists, but this role has no USAGE on it: for the server, no schema is
    # selected either; the same line says both what to do.
    role = f"{schema}_role"
    with admin() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        base = url.replace("://postgres@", f"://{role}@", 1)
        assert base != url
        store = PostgresStore(f"{base}?options=-csearch_path%3D{schema}", migrate="never")
        with pytest.raises(StateFault) as refused:
            await store.latest_fire("r")
        await store.aclose()
        assert "exists, or this role may use — create it first (CREATE SCHEMA, or GRANT USAGE)" in (
            str(refused.value)
        )
    finally:
        with admin() as conn:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


async def test_an_outcome_unknown_here_is_shown_and_never_settled_over(
    url: str, schema: str
) -> None:
    # A newer version's outcome word (or an edit) read as unsettled, and the next boot wrote
    # `interrupted` over it, its duration, reason and output emptied.
    store = PostgresStore(url, schema=schema)
    await store.claim("r", T0, T0)
    table = sql.Identifier(schema, "trio_routines_claims")
    with admin() as conn:
        conn.execute(
            sql.SQL(
                "UPDATE {} SET outcome = 'exploded', ms = 7, error = 'keep', output = 'precious'"
            ).format(table)
        )
    fire = await store.latest_fire("r")  # (which reads no output)
    assert fire is not None
    assert (fire.outcome, fire.unknown_outcome, fire.ms, fire.error) == (
        None,
        '"exploded"',
        7,
        "keep",
    )
    assert not fire.is_open
    (fire,) = await store.history("r")
    assert (fire.unknown_outcome, fire.output) == ('"exploded"', "precious")
    assert await store.settle("r", T0, Outcome.INTERRUPTED, if_unsettled=True)
    with admin() as conn:
        row = conn.execute(
            sql.SQL("SELECT outcome, ms, error, output FROM {}").format(table)
        ).fetchone()
    assert row == ("exploded", 7, "keep", "precious")
    assert await store.settle("r", T0, Outcome.COMPLETED, 5)  # a turn's own settle writes
    assert [f.outcome for f in await store.history("r")] == [Outcome.COMPLETED]
    await store.aclose()


@pytest.mark.slow
def test_a_refused_connection_is_one_line_in_our_format(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.state = "postgresql://postgres@127.0.0.1:1/test"  # type: ignore[assignment]
    env.routine("daily", cron="0 9 * * *")
    fire = ("fire", "daily", "--slot", "2026-07-07T09:00:00Z", "--agent", "echo")
    result = env.cli(*fire)
    assert result.returncode == 1
    line = one_line(result.stderr)  # not the pool's own records, several lines each
    assert "could not open the state in postgresql://127.0.0.1:1/test" in line
    assert "Connection refused" in line
    # libpq's lines joined as clauses: "… Connection refused; Is the server running …"
    assert re.search(r"Connection refused; Is the server running", line), line
    # At debug level the pool's records show, each one line in our format.
    result = env.cli(*fire, "--log-level", "debug")
    assert result.returncode == 1
    assert "DEBUG PostgreSQL: error connecting" in result.stderr
    for line in result.stderr.splitlines():
        assert re.match(r"\S+Z (DEBUG|INFO |WARN |ERROR) |error: ", line), line


def test_undecodable_command_line_text_is_one_line_not_a_traceback(
    tmp_path: Path, url: str, schema: str
) -> None:
    with admin() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    env = Env(tmp_path)
    env.state = f"{url}?options=-csearch_path%3D{schema}"  # type: ignore[assignment]
    undecodable = "a\udcffb"  # the byte 0xff of an argument, as Python reads it
    wake = env.run_cli("wake", "--session", undecodable, "--in", "5m", "--prompt", "p")
    assert wake.returncode != 0
    assert "the session must be text without NUL" in one_line(wake.stderr)
    unwake = env.run_cli("unwake", undecodable, "--session", "s")
    assert "Traceback" not in unwake.stderr
    assert "no pending wake-up" in unwake.stdout + unwake.stderr


# -- a read-only database ------------------------------------------------------------------


def read_only(url: str, schema: str) -> str:
    """``url`` whose every transaction is read-only, with ``schema`` on its search path."""
    options = f"-c%20default_transaction_read_only%3Don%20-csearch_path%3D{schema}"
    return f"{url}{'&' if '?' in url else '?'}options={options}"


async def test_a_current_schema_is_read_without_writing_on_a_read_only_database(
    url: str, schema: str
) -> None:
    writable = PostgresStore(url, schema=schema)
    await writable.claim("r", T0, T0)
    await writable.settle("r", T0, Outcome.COMPLETED, 5)
    await writable.aclose()
    store = PostgresStore(read_only(url, schema))  # tables found on the search path
    try:
        assert [f.slot for f in await store.history("r")] == [T0]
        fire = await store.latest_fire("r")
        assert fire is not None
        assert fire.outcome is Outcome.COMPLETED
        assert await store.paused() == frozenset()
        assert await store.list_wakeups() == []
        assert await store.resumed_at("r") is None
        with pytest.raises(StateFault, match="read-only transaction"):  # a write still fails
            await store.claim("r", T0 + MINUTE, T0 + MINUTE)
    finally:
        await store.aclose()


async def test_a_schema_to_create_on_a_read_only_database_says_so(url: str, schema: str) -> None:
    store = PostgresStore(read_only(url, schema), schema=schema)
    try:
        with pytest.raises(StateFault) as caught:
            await store.paused()
    finally:
        await store.aclose()
    message = str(caught.value)
    assert "has no trio_routines tables yet and needs version" in message
    assert "the database is read-only" in message
    assert "unreadable" not in message  # not the paused routines' fault


async def test_an_old_schema_on_a_read_only_database_names_both_versions(
    url: str, schema: str
) -> None:
    writable = PostgresStore(url, schema=schema)
    await writable.paused()  # migrated to the current version
    await writable.aclose()
    with admin() as conn:
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE version = %s").format(
                sql.Identifier(schema, "trio_routines_schema")
            ),
            (SCHEMA_VERSION,),
        )
    store = PostgresStore(read_only(url, schema), schema=schema)
    try:
        with pytest.raises(StateFault, match=f"has schema version {SCHEMA_VERSION - 1} and needs"):
            await store.history("r")
    finally:
        await store.aclose()


def test_read_only_commands_work_against_a_read_only_database(
    tmp_path: Path, url: str, schema: str
) -> None:
    env = Env(tmp_path)
    env.routine("daily", cron="0 9 * * *")
    env.state = f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"  # type: ignore[assignment]
    with admin() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    fired = env.run_cli("fire", "daily", "--slot", "2026-07-07T09:00:00Z", "--agent", "echo")
    assert fired.returncode == 0, fired.stderr
    env.state = read_only(url, schema)  # type: ignore[assignment]
    history = env.run_cli("history", "daily", "--json")
    assert history.returncode == 0, history.stderr
    assert [entry["outcome"] for entry in json.loads(history.stdout)] == ["completed"]
    listed = env.run_cli("list", "--json")
    assert listed.returncode == 0, listed.stderr


class Completing:
    """An agent that completes every turn at once; the ``waits_at``-th (counted from 1), once
    begun (``began``), waits for ``go_on`` first."""

    def __init__(self, waits_at: int = 0) -> None:
        self.sessions: list[str] = []
        self.waits_at = waits_at
        self.began, self.go_on = trio.Event(), trio.Event()

    async def invoke(self, session: str, text: str):  # type: ignore[no-untyped-def]
        from trio_routines import Completed

        self.sessions.append(session)
        if len(self.sessions) == self.waits_at:
            self.began.set()
            await self.go_on.wait()
        yield Completed()


def fired_from_outside(agent: Any, store: PostgresStore, routine: Any, later: timedelta) -> Any:
    """A scheduler of ``routine`` on ``store`` whose slots are fired by an external clock, its
    wall clock ``later`` past T0, no wake-ups."""
    from trio_routines import Scheduler

    return Scheduler(
        agent=agent,
        store=store,
        routines=[routine],
        now=lambda: T0 + later,
        external_clock=True,
        wakeups=False,
    )


async def two_members(url: str, schema: str) -> tuple[PostgresStore, PostgresStore, Any, Any]:
    """Two stores on one schema, replica ``a`` joined through the first, ``b`` the second."""
    from trio_routines.replicas import ReplicaInfo

    first, second = PostgresStore(url, schema=schema), PostgresStore(url, schema=schema)
    a = await first.join(ReplicaInfo("a", "0", "h", 1, T0, T0))
    b = await second.join(ReplicaInfo("b", "0", "h", 2, T0, T0))
    return first, second, a, b


async def test_a_claim_takes_its_sessions_hold_in_its_own_transaction(
    url: str, schema: str
) -> None:
    from trio_routines.replicas import session_key

    first, second, a, b = await two_members(url, schema)
    session = (session_key("routine:r"),)
    taken = await first.claim("r", T0, T0, replica="a", holds=(a.holder, session))
    assert (taken.status, taken.holds) == (ClaimStatus.TAKEN, (True,))
    # The claim is held by the replica it names, no hold of its own.
    assert await second.claims_alive([("r", T0)]) == [True]
    # Another replica at the same slot: a duplicate, and the session is a's.
    twice = await second.claim("r", T0, T0, replica="b", holds=(b.holder, session))
    assert (twice.status, twice.holds) == (ClaimStatus.DUPLICATE, (False,))
    assert [f.replica for f in await second.history("r")] == ["a"]
    # The next slot while a still runs the session: claimed, the session busy.
    later = T0 + MINUTE
    busy = await second.claim("r", later, later, replica="b", holds=(b.holder, session))
    assert (busy.status, busy.holds) == (ClaimStatus.TAKEN, (False,))
    # Without holds (a store of an older caller), a claim is decided as ever.
    plain = await first.claim("q", T0, T0)
    assert (plain.status, plain.holds) == (ClaimStatus.TAKEN, None)
    assert await second.claims_alive([("q", T0)]) == [False]  # it names no replica
    await a.leave()
    assert await second.claims_alive([("r", T0), ("r", later)]) == [False, True]  # a is gone
    await b.leave()
    await first.aclose()
    await second.aclose()


async def test_fires_of_a_stale_slot_at_once_say_stale_and_leave_its_session_free(
    url: str, schema: str
) -> None:
    # The waiters take the first fire's answer, not the session's hold the store took with
    # it: a hold they never asked for would keep the session busy here.
    from trio_routines import Routine

    store = PostgresStore(url, schema=schema)
    await store.claim("r", T0 + MINUTE, T0 + MINUTE)  # a newer slot's, settled
    await store.settle("r", T0 + MINUTE, Outcome.COMPLETED, 1)
    routine = Routine(name="r", prompt="p", cron="* * * * *")
    agent = Completing()
    scheduler = fired_from_outside(agent, store, routine, 2 * MINUTE)
    results: list[Any] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        async with trio.open_nursery() as fires:
            for _ in range(20):
                fires.start_soon(lambda: _append(results, scheduler.fire("r", T0)))
        assert {(r.claimed, r.reason) for r in results} == {(False, "stale")}
        assert len(results) == 20
        now = await scheduler.fire("r", T0 + 2 * MINUTE)  # the session is free
        assert (now.claimed, now.outcome) == (True, Outcome.COMPLETED)
        scheduler.stop(0)
    await store.aclose()


async def _append(into: list[Any], call: Any) -> None:
    into.append(await call)


async def test_a_claim_an_earlier_process_made_under_our_id_is_recorded_interrupted(
    url: str, schema: str
) -> None:
    from trio_routines import Routine, Scheduler
    from trio_routines.scheduler.boot import BOOT_INTERRUPTED
    from trio_routines.scheduler.openclaims import found_by

    store = PostgresStore(url, schema=schema)
    # web-1 claimed, then died; a new process takes the same id (a fixed --replica).
    await store.claim("r", T0, T0, replica="web-1")
    scheduler = Scheduler(
        agent=Completing(),
        store=store,
        routines=[Routine(name="r", prompt="p", cron="0 0 1 1 *")],  # nothing due
        now=lambda: T0 + timedelta(days=1),
        wakeups=False,
        replica="web-1",
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        # Our id's lock is ours now, so the store sees a claim naming web-1 alive: only we
        # know whether it is one of our turns.
        await store.claim("other", T0, T0, replica="web-1")
        assert await store.claims_alive([("other", T0)]) == [True]
        scheduler.stop(0)
    (fire,) = await store.history("r")
    assert (fire.outcome, fire.error) == (
        Outcome.INTERRUPTED,
        found_by(BOOT_INTERRUPTED, "web-1"),
    )
    await store.aclose()


async def test_back_to_back_fires_of_one_routine_each_run_their_turn(url: str, schema: str) -> None:
    # The let-go of a turn's session hold travels a moment later (with others): the next
    # fire's claim, on another connection, found our own row and took the session for busy.
    from trio_routines import Routine

    store = PostgresStore(url, schema=schema)
    quick = Routine(name="quick", prompt="p", cron="* * * * *")
    scheduler = fired_from_outside(Completing(), store, quick, timedelta(hours=1))
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        results = [
            await scheduler.fire("quick", T0 + timedelta(minutes=minute)) for minute in range(5)
        ]
        scheduler.stop(0)
    assert [result.outcome for result in results] == [Outcome.COMPLETED] * 5
    await store.aclose()


async def test_a_let_go_on_its_way_is_waited_for_before_its_key_is_taken_again(
    url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Once the let-go's statement was on its way, it was no longer "letting go": the next
    # claim, on another connection, found the row still there and took the session for busy.
    from trio_routines.replicas import session_key

    first, second, a, b = await two_members(url, schema)
    key = session_key("routine:quick")
    assert await a.take([key]) == [True]
    on_its_way, arrive = trio.Event(), trio.Event()
    sent = a._on_connection

    async def held_up(what: str, fn: Any, **kwargs: Any) -> Any:
        on_its_way.set()
        await arrive.wait()
        return await sent(what, fn, **kwargs)

    monkeypatch.setattr(a, "_on_connection", held_up)
    a.let_go([key])
    waited = trio.Event()

    async def let_go_now() -> None:
        await a.let_go_now()
        waited.set()

    try:
        await on_its_way.wait()
        assert a.letting_go([key])  # on its way: not yet in the table
        async with trio.open_nursery() as nursery:
            nursery.start_soon(let_go_now)
            await trio.sleep(0.2)
            assert not waited.is_set()  # the round trip under way has not come back
            arrive.set()
    finally:
        arrive.set()  # a failure above leaves nothing waiting
    assert not a.letting_go([key])
    assert await b.take([key]) == [True]  # gone from the table
    await a.leave()
    await b.leave()
    await first.aclose()
    await second.aclose()


async def test_the_next_turn_of_a_session_keeps_its_hold_after_the_last_ones_let_go(
    url: str, schema: str
) -> None:
    # The let-go of the first turn's hold travels a moment later, on the replica's own
    # connection; the second fire's claim takes the hold on another. Sent after it, the
    # let-go would delete the second turn's hold: another replica could then take the
    # session while that turn runs.
    from trio_routines import Routine
    from trio_routines.replicas import ReplicaInfo, session_key

    agent = Completing(waits_at=2)
    store, other = PostgresStore(url, schema=schema), PostgresStore(url, schema=schema)
    routine = Routine(name="quick", prompt="p", cron="* * * * *")
    scheduler = fired_from_outside(agent, store, routine, timedelta(hours=1))
    results: list[Any] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        results.append(await scheduler.fire("quick", T0))
        done = trio.Event()

        async def second() -> None:
            results.append(await scheduler.fire("quick", T0 + timedelta(minutes=1)))
            done.set()

        nursery.start_soon(second)
        await agent.began.wait()
        await trio.sleep(0.5)  # ten times the let-go's delay
        b = await other.join(ReplicaInfo("b", "0", "h", 2, T0, T0))
        theirs = await b.take([session_key(routine.session)])
        agent.go_on.set()
        await done.wait()
        scheduler.stop(0)
    assert theirs == [False]  # the session was ours while our turn of it ran
    assert [result.outcome for result in results] == [Outcome.COMPLETED] * 2
    await b.leave()
    await other.aclose()
    await store.aclose()


async def test_two_replicas_taking_two_holds_in_opposite_orders_never_deadlock(
    url: str, schema: str
) -> None:
    # The rows are locked in the keys' order whatever order the callers gave: a replica
    # waiting for the first row holds none of the others. A deadlock was taken for a lost
    # connection: every turn of the replica ended.
    from trio_routines.replicas import session_key

    first, second, a, b = await two_members(url, schema)
    low, high = sorted(session_key(f"s{i}") for i in range(2))
    holds = sql.Identifier(schema, "trio_routines_holds")
    with admin() as db:  # rows of a holder long gone: each take locks the row it takes over
        for key in (low, high):
            db.execute(sql.SQL("INSERT INTO {} (key, holder) VALUES (%s, 1)").format(holds), (key,))
    answers: dict[str, list[bool]] = {}

    async def take(presence: Any, keys: list[int]) -> None:
        answers[presence.replica] = await presence.take(keys)

    async def waiting(app: str) -> None:
        for _ in range(1000):
            if await trio.to_thread.run_sync(_waiting_on_lock, app):
                return
            await trio.sleep(0.01)
        raise AssertionError(f"{app} never waited for the locked row")

    with psycopg.connect(url) as blocker:  # a transaction holding the lower key's row
        blocker.execute(sql.SQL("SELECT 1 FROM {} WHERE key = %s FOR UPDATE").format(holds), (low,))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(take, a, [low, high])
            await waiting("trio_routines a")
            nursery.start_soon(take, b, [high, low])  # the other order
            await waiting("trio_routines b")
            blocker.commit()  # a goes first, wanting the higher key next
    assert not a.lost.is_set()
    assert not b.lost.is_set()
    assert sorted(answers.values()) == [[False, False], [True, True]]
    await a.leave()
    await b.leave()
    await first.aclose()
    await second.aclose()


async def test_a_fire_answered_through_one_replica_leaves_its_session_free_for_the_next(
    url: str, schema: str
) -> None:
    # The let-go of the session's hold travelled a moment after the fire answered: a fire of
    # the next slot through another replica, right after, was skipped as busy, though no turn
    # of the session ran (10 of 10 times).
    from trio_routines import Routine

    routine = Routine(name="quick", prompt="p", cron="* * * * *")
    stores = [PostgresStore(url, schema=schema) for _ in range(2)]
    one, two = (fired_from_outside(Completing(), s, routine, timedelta(hours=1)) for s in stores)
    results: list[Any] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(one.run)
        await nursery.start(two.run)
        for minute in range(6):  # alternating replicas, no pause between
            by = (one, two)[minute % 2]
            results.append(await by.fire("quick", T0 + timedelta(minutes=minute)))
        runs = [await (one, two)[n % 2].run_now("quick") for n in range(4)]  # the same
        one.stop(0)
        two.stop(0)
    assert [(result.outcome, result.reason) for result in results] == [
        (Outcome.COMPLETED, None)
    ] * 6
    assert [(run.outcome, run.busy) for run in runs] == [(Outcome.COMPLETED, False)] * 4
    for store in stores:
        await store.aclose()
