"""Pins of the PostgreSQL store's claims, reads, gaps and ledger (``scripts/mutation.py
pgclaims``): a claim whose caller gave up while its batch was in flight, the result of each
kind of decision with its holds, the warnings and errors that name what they are about, and
a zero cost in the ledger."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from typing import Any

import attrs
import psycopg
import pytest
import trio
from pg import T0, admin, fresh_schema, require_server
from psycopg import sql

from trio_routines import StateFault
from trio_routines.agent import Usage
from trio_routines.instants import format_iso, slot_name
from trio_routines.output import stored_output
from trio_routines.records import ClaimStatus, Gap, GapReason, Outcome
from trio_routines.stores.postgres import PostgresStore
from trio_routines.stores.postgres import reads as pg_reads
from trio_routines.stores.postgres.claims import claim_batch
from trio_routines.stores.postgres.conn import Call
from trio_routines.stores.postgres.gaps import gaps_of
from trio_routines.stores.postgres.ledger import record_usage, usage_since
from trio_routines.stores.postgres.schema import Schema
from trio_routines.text import error_text

MINUTE = timedelta(minutes=1)
WHERE = "postgresql://127.0.0.1:5432/test"


@pytest.fixture
def url() -> str:
    return require_server()


@pytest.fixture
def schema(url: str) -> Iterator[str]:
    with fresh_schema() as name:
        yield name


@pytest.fixture
async def store(url: str, schema: str) -> AsyncIterator[PostgresStore]:
    store = PostgresStore(url, schema=schema, timeout=30)
    await store.latest_fire("warm-up")  # the tables exist
    yield store
    await store.aclose()


@pytest.fixture
def conn(url: str, schema: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection to the schema's tables, made by a store first."""

    async def migrate() -> None:
        made = PostgresStore(url, schema=schema, timeout=30)
        try:
            await made.latest_fire("warm-up")
        finally:
            await made.aclose()

    trio.run(migrate)
    # The holder's replica lock, held as its presence holds it: a claim with holds is made
    # only while it is (a connection the server ended takes none).
    with (
        psycopg.connect(url, autocommit=True) as presence,
        psycopg.connect(url, autocommit=True) as connection,
    ):
        presence.execute(
            "SELECT pg_advisory_lock_shared(%s::bigint)", (HOLDER,)
        )  # tests side by side
        yield connection


def table(schema: str, name: str) -> sql.Identifier:
    return sql.Identifier(schema, f"trio_routines_{name}")


def rows(schema: str, name: str, columns: str) -> list[tuple[Any, ...]]:
    with admin() as conn:
        query = sql.SQL(f"SELECT {columns} FROM {{}} ORDER BY 1, 2").format(table(schema, name))
        return conn.execute(query).fetchall()


@attrs.define
class Waiter:
    gave_up: bool


HOLDER = 7001


def item(routine: str, slot: datetime, session_key: int) -> Any:
    return (routine, slot, slot, "host-a:1", (HOLDER, (session_key,)))


def test_a_caller_that_gave_up_has_its_claim_settled_interrupted_and_its_holds_let_go(
    conn: psycopg.Connection[Any], schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The batch's call goes on: only one of its callers left while it was in flight.
    items = [item("gone", T0, 11), item("kept", T0, 12)]
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        results, late = claim_batch(
            conn, Call(), Schema(schema), 3, items, [Waiter(True), Waiter(False)]
        )
    assert [(r.status, r.newest, r.holds) for r in results] == [
        (ClaimStatus.TAKEN, slot_name(T0), (True,)),
        (ClaimStatus.TAKEN, slot_name(T0), (True,)),
    ]
    assert late == [True, False]
    assert [r.getMessage() for r in caplog.records] == [
        f"gone: slot {format_iso(T0)} was claimed after the call had given up (a stalled "
        "connection, or a stop); it will not run and is recorded as interrupted"
    ]
    assert rows(schema, "claims", "routine, outcome") == [("gone", "interrupted"), ("kept", None)]
    # The hold taken for the caller that left is let go; the other caller's stays its own.
    assert rows(schema, "holds", "key, holder") == [(12, HOLDER)]


def test_a_batch_whose_answer_could_not_be_handed_over_is_undone_for_its_callers(
    conn: psycopg.Connection[Any], schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Decided and committed for callers that still waited; the call's caller then left before
    # the answer was handed over (a deadline, a stop): nobody runs them, nobody lets go.
    call = Call()
    items = [item("gone", T0, 41), item("kept", T0, 42), item("also", T0, 43)]
    results, late = claim_batch(
        conn, call, Schema(schema), 3, items, [Waiter(True), Waiter(False), Waiter(False)]
    )
    assert late == [True, False, False]
    assert rows(schema, "claims", "routine, outcome") == [
        ("also", None),
        ("gone", "interrupted"),
        ("kept", None),
    ]
    assert rows(schema, "holds", "key, holder") == [(42, HOLDER), (43, HOLDER)]
    assert call.give_up() is None
    assert not call.hand_over((results, late))
    assert call.undo is not None
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        call.undo(conn)
    assert rows(schema, "claims", "routine, outcome") == [
        ("also", "interrupted"),
        ("gone", "interrupted"),
        ("kept", "interrupted"),
    ]
    assert rows(schema, "holds", "key, holder") == []
    assert [r.getMessage() for r in caplog.records] == [  # the first caller's, said once
        f"{name}: slot {format_iso(T0)} was claimed after the call had given up (a stalled "
        "connection, or a stop); it will not run and is recorded as interrupted"
        for name in ("kept", "also")
    ]


def test_a_call_abandoned_as_a_whole_makes_every_claim_it_took_late(
    conn: psycopg.Connection[Any], schema: str
) -> None:
    call = Call()
    call.abandoned.set()
    items = [item("a", T0, 21), item("b", T0, 22)]
    _, late = claim_batch(conn, call, Schema(schema), 3, items, [Waiter(False), Waiter(False)])
    assert late == [True, True]
    assert rows(schema, "claims", "routine, outcome") == [
        ("a", "interrupted"),
        ("b", "interrupted"),
    ]
    assert rows(schema, "holds", "key, holder") == []


def test_each_decision_names_its_slot_and_reports_the_holds_it_took(
    conn: psycopg.Connection[Any], schema: str
) -> None:
    tables = Schema(schema)
    later = T0 + MINUTE
    (taken,), _ = claim_batch(conn, Call(), tables, 3, [item("r", later, 31)], [Waiter(False)])
    assert (taken.status, taken.newest, taken.holds) == (
        ClaimStatus.TAKEN,
        slot_name(later),
        (True,),
    )
    # A key held by a live holder, even this one, is not taken again (its turn runs).
    (again,), _ = claim_batch(conn, Call(), tables, 3, [item("r", later, 31)], [Waiter(False)])
    assert (again.status, again.newest, again.holds) == (
        ClaimStatus.DUPLICATE,
        slot_name(later),
        (False,),
    )
    # An older slot is stale, named by the newest claim; the hold it took is still reported,
    # for its caller to let go.
    (stale,), _ = claim_batch(conn, Call(), tables, 3, [item("r", T0, 32)], [Waiter(False)])
    assert (stale.status, stale.newest, stale.holds) == (
        ClaimStatus.STALE,
        slot_name(later),
        (True,),
    )


def test_a_zero_cost_is_counted_as_zero(conn: psycopg.Connection[Any], schema: str) -> None:
    tables = Schema(schema)
    record_usage(conn, tables, "routine", "r", T0, Usage(cost=0.0, currency="EUR"))
    record_usage(conn, tables, "routine", "r", T0, Usage(input_tokens=5))
    spent = usage_since(conn, tables, "routine", "r", T0 - MINUTE)
    assert (spent.input_tokens, spent.costs) == (5, (("EUR", 0.0),))


def test_a_gap_that_cannot_be_read_is_left_out_with_its_reason(
    conn: psycopg.Connection[Any], schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    with admin() as db:
        db.execute(
            sql.SQL(
                "INSERT INTO {} (routine, first_slot, last_slot, count, reason, estimated) "
                "VALUES ('r', %s, %s, 2, 'from-a-newer-version', false), "
                "('r', %s, %s, 1, 'store', false)"
            ).format(table(schema, "gaps")),
            (T0, T0 + MINUTE, T0 + 5 * MINUTE, T0 + 5 * MINUTE),
        )
    with pytest.raises(ValueError, match="GapReason") as refused:
        Gap(T0, T0 + MINUTE, 2, "from-a-newer-version", False)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        (gaps,) = gaps_of(conn, None, Schema(schema), "", ["r"])
    assert gaps == [Gap(T0 + 5 * MINUTE, T0 + 5 * MINUTE, 1, GapReason.STORE, False)]
    assert [r.getMessage() for r in caplog.records] == [
        f"ignoring a gap of 'r' that cannot be read: {refused.value}"
    ]


def seed_claim(schema: str, routine: str, slot: datetime, outcome: str | None) -> None:
    with admin() as db:
        db.execute(
            sql.SQL(
                "INSERT INTO {} (routine, slot, fired_at, outcome, replica) "
                "VALUES (%s, %s, %s, %s, 'host-b:2')"
            ).format(table(schema, "claims")),
            (routine, slot, slot, outcome),
        )


def odd_outcome_warning(routine: str, slot: datetime, schema: str) -> str:
    return (
        f"claim {routine}/{slot_name(slot)} in {WHERE} (schema {schema}) carries an outcome "
        'this version does not know — shown as none, never written over: "exploded"'
    )


async def test_every_read_names_the_row_it_warns_about(
    store: PostgresStore, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert store.where == f"{WHERE} (schema {schema})"  # two stores in one database differ
    seed_claim(schema, "r", T0, "exploded")
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        newest = await store.latest_fire("r")
        (kept,) = await store.history("r")
    assert newest is not None
    assert (newest.outcome, newest.unknown_outcome) == (None, '"exploded"')
    assert (kept.outcome, kept.unknown_outcome) == (None, '"exploded"')
    assert [r.getMessage() for r in caplog.records] == [odd_outcome_warning("r", T0, schema)] * 2


async def test_a_boots_interrupted_leaves_a_claim_whose_outcome_this_version_does_not_know(
    store: PostgresStore, schema: str
) -> None:
    # Settled by someone (a newer version's word, an edit, an empty one): never written over,
    # and read as settled, so that no boot tries again. Only a claim without outcome is open.
    later, open_one = T0 + timedelta(hours=1), T0 + timedelta(hours=2)
    seed_claim(schema, "r", T0, "exploded")
    seed_claim(schema, "r", later, "")
    seed_claim(schema, "r", open_one, None)
    seed_claim(schema, "s", T0, "completed")
    for routine, slot in (("r", T0), ("r", later), ("r", open_one), ("s", T0)):
        await store.settle(routine, slot, Outcome.INTERRUPTED, if_unsettled=True)
    history = await store.history("r")
    assert [(f.outcome, f.unknown_outcome) for f in history] == [
        (None, '"exploded"'),
        (None, '""'),
        (Outcome.INTERRUPTED, None),
    ]
    assert [f.outcome for f in await store.history("s")] == [Outcome.COMPLETED]  # kept


async def test_a_reason_and_an_output_edited_huge_are_read_bounded_as_the_record_keeps_them(
    store: PostgresStore, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hand-edited to megabytes: the server sends what the record keeps of them and a little
    # more, for every read (a boot's newest claims, the open claims' walk, a history).
    error = "why " * 1_000_000
    output = "é" + "said " * 1_000_000
    seed_claim(schema, "r", T0, "failed")
    with admin() as db:
        db.execute(
            sql.SQL("UPDATE {} SET error = %s, output = %s").format(
                sql.Identifier(schema, "trio_routines_claims")
            ),
            (error, output),
        )
    sent: list[tuple[int, int]] = []
    read = pg_reads._fire

    def measured(routine: str, row: Any, where: str, output: Any = None, usage: Any = ()) -> Any:
        sent.append((len(row[4]), -1 if output is None else len(output)))
        return read(routine, row, where, output=output, usage=usage)

    monkeypatch.setattr(pg_reads, "_fire", measured)
    newest = await store.latest_fire("r")
    (kept,) = await store.history("r")
    assert newest is not None
    assert newest.error == kept.error == error_text(error)
    assert kept.output == stored_output(output)
    assert sent == [(pg_reads.ERROR_READ, -1), (pg_reads.ERROR_READ, pg_reads.OUTPUT_READ)]


async def test_the_open_claims_start_from_below_every_name(
    store: PostgresStore, schema: str
) -> None:
    # Names that sort before any letter: the first page starts below every name.
    seed_claim(schema, "0-first", T0, None)
    seed_claim(schema, "A-second", T0, None)
    seed_claim(schema, "A-second", T0 - MINUTE, "completed")
    found = await store.open_claims(["0-first", "A-second"], 10)
    assert [(routine, fire.slot, fire.replica) for routine, fire in found] == [
        ("0-first", T0, "host-b:2"),
        ("A-second", T0, "host-b:2"),
    ]


async def test_a_row_that_cannot_be_read_is_its_routines_error_alone(
    store: PostgresStore, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed_claim(schema, "bad", T0, "completed")
    seed_claim(schema, "good", T0, "completed")
    real = pg_reads.fire_from_record

    def fire_from_record(slot: datetime, record: dict[str, object], where: str) -> Any:
        if where.startswith("bad/"):
            raise ValueError("unreadable here")
        return real(slot, record, where)

    monkeypatch.setattr(pg_reads, "fire_from_record", fire_from_record)
    with pytest.raises(ValueError, match=r"^unreadable here$"):
        await store.latest_fire("bad")
    good = await store.latest_fire("good")
    assert good is not None
    assert good.slot == T0


async def test_a_read_that_fails_names_each_routine_and_the_server(
    store: PostgresStore, schema: str
) -> None:
    with admin() as db:
        db.execute(sql.SQL("DROP TABLE {}").format(table(schema, "claims")))
    with pytest.raises(StateFault) as failed:
        await store.latest_fire("r")
    assert str(failed.value).startswith(
        f"the newest claim of 'r' is unreadable in {WHERE} (schema {schema}): "
    )


async def test_an_open_claim_that_cannot_be_read_is_stepped_over(
    store: PostgresStore, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for routine in ("a", "bad", "c"):
        seed_claim(schema, routine, T0, None)
    real = pg_reads.fire_from_record

    def fire_from_record(slot: datetime, record: dict[str, object], where: str) -> Any:
        if where.startswith("bad/"):
            raise ValueError("unreadable here")
        return real(slot, record, where)

    monkeypatch.setattr(pg_reads, "fire_from_record", fire_from_record)
    found = await store.open_claims(["a", "bad", "c"], 10)
    assert [routine for routine, _ in found] == ["a", "c"]
