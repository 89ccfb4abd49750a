"""Pins of the PostgreSQL store's wake-ups (``scripts/mutation.py pgwakeups``): a malformed row,
skipped by a listing, counted by a count, dropped for good by a take and never counted against
its session's cap; the time zone a recurring wake-up reads back with; the take's query planned
for each ``now``; the error of every call naming what it was doing; a turn of a session no
store can hold."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import timedelta
from typing import Any, cast

import psycopg
import pytest
import trio
from pg import T0, admin, fresh_schema, require_server
from psycopg import sql

from trio_routines import StateFault
from trio_routines.errors import InvalidWakeup
from trio_routines.instants import FIRST_INSTANT, LAST_INSTANT
from trio_routines.records import Wakeup
from trio_routines.stores.postgres import PostgresStore
from trio_routines.stores.postgres.conn import Call, Connections
from trio_routines.stores.postgres.pauses import set_paused
from trio_routines.stores.postgres.schema import Schema
from trio_routines.stores.postgres.wakeups import PostgresWakeups
from trio_routines.wakeups import MAX_PENDING_PER_SESSION, WakeupRequest, check_stored

HOUR = timedelta(hours=1)
BAD_CRON = "61 * * * *"  # no minute 61: the row reads as malformed
REQUEST = WakeupRequest(session="s", prompt="p", fire_at=T0 + HOUR)


@pytest.fixture
def url() -> str:
    return require_server()


@pytest.fixture
def schema(url: str) -> Iterator[str]:
    # Fresh, not pooled: a table that never had a row deleted reads its rows in insertion
    # order, which the test of the cap relies on.
    with fresh_schema() as name:
        yield name


@pytest.fixture
async def store(url: str, schema: str) -> AsyncIterator[PostgresStore]:
    store = PostgresStore(url, schema=schema, timeout=30)
    await store.ready()  # the tables exist
    yield store
    await store.aclose()


@pytest.fixture
def conn(url: str, schema: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection to the schema's tables, made by a store first."""

    async def migrate() -> None:
        made = PostgresStore(url, schema=schema, timeout=30)
        try:
            await made.ready()
        finally:
            await made.aclose()

    trio.run(migrate)
    with psycopg.connect(url, autocommit=True) as connection:
        yield connection


def table(schema: str, name: str) -> sql.Identifier:
    return sql.Identifier(schema, f"trio_routines_{name}")


def seed(schema: str, *rows: tuple[str, str, str | None]) -> None:
    """Wake-up rows (id, session, cron), due at T0, in this order."""
    with admin() as db:
        for id_, session, cron in rows:
            db.execute(
                sql.SQL(
                    "INSERT INTO {} (id, session, prompt, fire_at, cron) "
                    "VALUES (%s, %s, 'p', %s, %s)"
                ).format(table(schema, "wakeups")),
                (id_, session, T0, cron),
            )


def malformed_reason(wakeup_id: str, session: str) -> str:
    """Why the store cannot read a row of ``BAD_CRON``: what reading it raises."""
    with pytest.raises(ValueError, match=r"^invalid cron/tz: ") as refused:
        check_stored(Wakeup(id=wakeup_id, session=session, prompt="p", fire_at=T0, cron=BAD_CRON))
    return str(refused.value)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_listing_skips_a_malformed_entry_and_names_it_once_as_it_is(
    store: PostgresStore, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Kept, it was warned of at every listing: every refresh of the status page. Once as it
    # is; edited (still malformed), once more.
    seed(schema, ("w-bad", "s-bad", BAD_CRON), ("w-good", "s-good", None))
    with caplog.at_level(logging.DEBUG, logger="trio_routines"):
        first = await store.list_wakeups()
        second = await store.list_wakeups()  # a listing leaves it in place
        with admin() as db:
            db.execute(
                sql.SQL("UPDATE {} SET prompt = 'q' WHERE id = 'w-bad'").format(
                    table(schema, "wakeups")
                )
            )
        await store.list_wakeups()
    assert [w.id for w in first] == [w.id for w in second] == ["w-good"]
    line = f"skipping a malformed wake-up entry 'w-bad': {malformed_reason('w-bad', 's-bad')}"
    assert warnings(caplog) == [line, line]
    assert [r.levelno for r in caplog.records if r.getMessage() == line] == [
        logging.WARNING,
        logging.DEBUG,
        logging.WARNING,
    ]


def edit(schema: str, wakeup_id: str, column: str, length: int) -> None:
    """Set ``column`` of a row to ``length`` characters, as by hand (over any bound of ours)."""
    with admin() as db:
        db.execute(
            sql.SQL("UPDATE {} SET {} = repeat('x', %s) WHERE id = %s").format(
                table(schema, "wakeups"), sql.Identifier(column)
            ),
            (length, wakeup_id),
        )


#: What an indexed column holds at most when it repeats one character (the index's row bound
#: is about 8 KB, compressed); the prompt is not indexed.
INDEXED = 100_000


@pytest.mark.parametrize(
    ("column", "most", "length"), [("prompt", 65_536, 4_000_000), ("session", 512, INDEXED)]
)
async def test_a_row_edited_to_megabytes_comes_cut_and_is_passed_over_as_malformed(
    store: PostgresStore,
    schema: str,
    caplog: pytest.LogCaptureFixture,
    column: str,
    most: int,
    length: int,
) -> None:
    # A 4 MB prompt came whole to every take and listing of every replica. The server now
    # sends one character past the bound (the message says so: not 4,000,000), and the row
    # reads as malformed: skipped by a listing, passed over by a take, kept.
    seed(schema, ("w-big", "s", None), ("w-good", "s-good", None))
    edit(schema, "w-big", column, length)
    reason = f"the {column} is too long: at most {most:,} characters, not {most + 1:,}."
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert [w.id for w in await store.list_wakeups()] == ["w-good"]
        taken = await store.take_due_wakeup(T0)
    assert taken is not None
    assert taken.id == "w-good"
    # Warned of once, by the listing that met it first; the take passes it over, and says so
    # only at DEBUG.
    assert warnings(caplog) == [f"skipping a malformed wake-up entry 'w-big': {reason}"]
    assert await store.count_wakeups() == 1


async def test_a_row_at_the_bound_is_read_whole(store: PostgresStore, schema: str) -> None:
    seed(schema, ("w-full", "s", None))
    edit(schema, "w-full", "prompt", 65_536)
    (listed,) = await store.list_wakeups()
    assert listed.prompt == "x" * 65_536
    taken = await store.take_due_wakeup(T0)
    assert taken is not None
    assert taken.prompt == "x" * 65_536


async def test_an_id_edited_to_a_hundred_thousand_characters_is_named_cut_in_the_warning(
    store: PostgresStore, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    seed(schema, ("w-big", "s", None))
    edit(schema, "w-big", "id", INDEXED)
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert await store.take_due_wakeup(T0) is None
    (line,) = warnings(caplog)
    assert line == passed_over("x" * 129, "the id is too long: at most 128 characters, not 129.")


@pytest.mark.parametrize("column", ["origin_routine", "origin_parent"])
async def test_an_origin_edited_to_megabytes_reads_as_unknown_and_keeps_its_wake_up(
    store: PostgresStore, schema: str, column: str
) -> None:
    added = await store.add_wakeup(REQUEST, T0)
    kind = "routine" if column == "origin_routine" else "wakeup"
    with admin() as db:
        db.execute(
            sql.SQL("UPDATE {} SET origin = %s, origin_depth = 1 WHERE id = %s").format(
                table(schema, "wakeups")
            ),
            (kind, added.id),
        )
    edit(schema, added.id, column, 65_536)  # at the bound: read
    (kept,) = await store.list_wakeups()
    assert kept.origin is not None
    assert getattr(kept.origin, column.removeprefix("origin_")) == "x" * 65_536
    edit(schema, added.id, column, 4_000_000)  # over it: who asked is unknown, the rest kept
    (kept,) = await store.list_wakeups()
    assert kept.origin is None
    assert (kept.id, kept.prompt) == (added.id, added.prompt)


async def test_a_count_reads_no_row_and_counts_a_malformed_one_too(
    store: PostgresStore, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert await store.count_wakeups() == 0
    seed(schema, ("w-bad", "s-bad", BAD_CRON), ("w-good", "s-good", None))
    await store.add_wakeup(REQUEST, T0)
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert await store.count_wakeups() == 3
    assert warnings(caplog) == []  # nothing read, nothing to warn of
    assert len(await store.list_wakeups()) == 2


def passed_over(wakeup_id: str, reason: str) -> str:
    return (
        f"passing over a wake-up entry this replica cannot read, {wakeup_id!r} (kept in the "
        f"store): {reason}"
    )


async def test_a_take_passes_a_malformed_entry_over_keeps_it_and_takes_the_one_behind_it(
    store: PostgresStore, schema: str, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # It was deleted for good: a replica whose zone data lacks a zone another one knows
    # deleted that one's wake-ups, prompts and all.
    seed(schema, ("w-bad", "s-bad", BAD_CRON), ("w-good", "s-good", None))
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        taken = await store.take_due_wakeup(T0)
        assert await store.take_due_wakeup(T0) is None  # passed over again, said once
    assert taken is not None
    assert (taken.id, taken.session) == ("w-good", "s-good")
    assert warnings(caplog) == [passed_over("w-bad", malformed_reason("w-bad", "s-bad"))]
    assert await store.count_wakeups() == 1  # kept
    other = PostgresStore(url, schema=schema, timeout=30)  # another process: it looks again
    try:
        assert await other.take_due_wakeup(T0) is None
    finally:
        await other.aclose()
    assert await store.count_wakeups() == 1
    # Repaired in place by the operator (the same row, a new version): taken at last.
    with admin() as db:
        db.execute(
            sql.SQL("UPDATE {} SET cron = NULL WHERE id = 'w-bad'").format(table(schema, "wakeups"))
        )
    repaired = await store.take_due_wakeup(T0)
    assert repaired is not None
    assert repaired.id == "w-bad"


async def test_a_malformed_entry_neither_counts_against_the_cap_nor_hides_those_after_it(
    store: PostgresStore, schema: str
) -> None:
    # The malformed row is read first: the session's valid rows behind it are counted all.
    valid = [(f"w-{n}", "s", None) for n in range(MAX_PENDING_PER_SESSION - 1)]
    seed(schema, ("w-bad", "s", BAD_CRON), *valid)
    await store.add_wakeup(REQUEST, T0)  # the last place: the malformed row takes none
    with pytest.raises(InvalidWakeup) as refused:
        await store.add_wakeup(REQUEST, T0)
    assert str(refused.value).startswith(
        f"too many pending wake-ups for this session ({MAX_PENDING_PER_SESSION}) — "
    )
    busy = Wakeup(id="w-busy", session="s", prompt="p", fire_at=T0)
    assert await store.defer_wakeup(busy, T0 + HOUR) is False  # a defer counts the same way
    assert len(await store.list_wakeups()) == MAX_PENDING_PER_SESSION


async def test_a_recurring_wakeup_reads_back_with_its_time_zone(store: PostgresStore) -> None:
    request = WakeupRequest(session="s", prompt="p", cron="0 9 * * *", tz="Asia/Kolkata")
    added = await store.add_wakeup(request, T0)
    assert added.tz == "Asia/Kolkata"
    assert await store.list_wakeups() == [added]
    taken = await store.take_due_wakeup(added.fire_at)
    assert taken == added
    (advanced,) = await store.list_wakeups()  # the next 09:00 in Kolkata, a day later
    assert (advanced.tz, advanced.fire_at) == ("Asia/Kolkata", added.fire_at + timedelta(days=1))


def prepared(conn: psycopg.Connection[Any], text: str) -> list[str]:
    """The statements prepared on ``conn``'s server session that contain ``text``."""
    rows = conn.execute("SELECT statement FROM pg_prepared_statements", prepare=False)
    return [statement for (statement,) in rows if text in statement]


def test_the_take_is_planned_for_each_now_never_prepared(
    conn: psycopg.Connection[Any], schema: str
) -> None:
    runs = (conn.prepare_threshold or 0) + 2  # past what psycopg prepares a query after
    # What the check sees: a query run as often, psycopg left to decide, is prepared.
    for _ in range(runs):
        conn.execute("SELECT %s::int AS seen_prepared", (1,))
    assert prepared(conn, "seen_prepared") != []
    wakeups = PostgresWakeups(cast(Connections, None), Schema(schema))
    for _ in range(runs):
        assert wakeups._take(conn, Call(), T0) is None
    assert prepared(conn, "SKIP LOCKED") == []


async def test_every_failed_call_says_what_it_was_doing(store: PostgresStore, schema: str) -> None:
    with admin() as db:
        for name in ("wakeups", "wake_turns"):
            db.execute(sql.SQL("DROP TABLE {}").format(table(schema, name)))

    wakeup = Wakeup(id="w-1", session="s", prompt="p", fire_at=T0)
    calls: list[tuple[str, str, Callable[[], Awaitable[object]]]] = [
        ("could not add a wake-up", "wakeups", lambda: store.add_wakeup(REQUEST, T0)),
        ("could not take a due wake-up", "wakeups", lambda: store.take_due_wakeup(T0)),
        (
            "could not re-queue wake-up w-1",
            "wakeups",
            lambda: store.defer_wakeup(wakeup, T0 + HOUR),
        ),
        ("could not remove wake-up w-1", "wakeups", lambda: store.remove_wakeup("w-1")),
        ("the pending wake-ups are unreadable", "wakeups", store.list_wakeups),
        ("the pending wake-ups could not be counted", "wakeups", store.count_wakeups),
        ("could not record a wake-up turn", "wake_turns", lambda: store.note_wake_turn("s", T0)),
        (
            "the recent wake-up turns are unreadable",
            "wake_turns",
            lambda: store.wake_turns("s", T0 - HOUR),
        ),
    ]
    for what, name, call in calls:
        with pytest.raises(StateFault) as failed:
            await call()
        assert str(failed.value) == (
            f'{what} in {store.where}: UndefinedTable: relation "{schema}.trio_routines_{name}" '
            "does not exist"
        )


async def test_a_turn_of_a_session_no_store_can_hold_is_not_recorded(
    store: PostgresStore, schema: str
) -> None:
    await store.note_wake_turn("bad\x00session", T0)  # not sent: the server would refuse it
    await store.note_wake_turn("s", T0)
    with admin() as db:
        rows = db.execute(
            sql.SQL("SELECT session FROM {}").format(table(schema, "wake_turns"))
        ).fetchall()
    assert rows == [("s",)]


def ids(schema: str) -> list[str]:
    with admin() as db:
        rows = db.execute(
            sql.SQL("SELECT id FROM {} ORDER BY seq").format(table(schema, "wakeups"))
        ).fetchall()
    return [row[0] for row in rows]


def test_a_take_walks_a_table_of_unreadable_rows_a_batch_a_query_and_stops_when_given_up(
    conn: psycopg.Connection[Any], schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    with admin() as db:  # 600 rows in one statement, then the good one behind them
        db.execute(
            sql.SQL(
                "INSERT INTO {} (id, session, prompt, fire_at, cron) "
                "SELECT 'bad' || g, 's' || g, 'p', %s, %s FROM generate_series(0, 599) AS g"
            ).format(table(schema, "wakeups")),
            (T0, BAD_CRON),
        )
    seed(schema, ("good", "s", None))
    wakeups = PostgresWakeups(cast(Connections, None), Schema(schema))
    queries: list[str] = []
    real_execute = conn.execute

    def counting(query: Any, *args: Any, **kwargs: Any) -> Any:
        queries.append(str(query))
        return real_execute(query, *args, **kwargs)

    conn.execute = counting  # type: ignore[method-assign]
    # A caller that gives up once the first batch is read: the walk stops at the next one.
    leaving = Call()
    real_note = wakeups._note_unreadable

    def note_and_leave(*args: Any) -> None:
        leaving.abandoned.set()
        real_note(*args)

    wakeups._note_unreadable = note_and_leave  # type: ignore[method-assign]
    with pytest.raises(StateFault, match=r"^abandoned by its caller$"):
        wakeups._take(conn, leaving, T0)
    assert len(queries) == 1  # the first batch: one row
    assert len(wakeups._unreadable) == 1  # passed over
    wakeups._note_unreadable = real_note  # type: ignore[method-assign]
    queries.clear()
    taken = wakeups._take(conn, Call(), T0)
    assert taken is not None
    assert taken.id == "good"
    # Batches of 1, 4, 16, 64, 256, 256 and 256 rows, the lock and the delete: not a query a
    # row, nor 256 rows read for a take of the first.
    assert len(queries) == 9
    assert ids(schema) == [f"bad{i}" for i in range(600)]  # kept, never deleted
    assert wakeups._take(conn, Call(), T0) is None


def test_rows_passed_over_before_are_skipped_without_hiding_the_row_behind_them(
    conn: psycopg.Connection[Any], schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    seed(schema, ("w-bad1", "s1", BAD_CRON), ("w-bad2", "s2", BAD_CRON))
    wakeups = PostgresWakeups(cast(Connections, None), Schema(schema))
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert wakeups._take(conn, Call(), T0) is None
    assert warnings(caplog) == [  # each row as it is, once
        passed_over("w-bad1", malformed_reason("w-bad1", "s1")),
        passed_over("w-bad2", malformed_reason("w-bad2", "s2")),
    ]
    seed(schema, ("w-good", "s", None))  # behind both, in the second batch with the second
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        taken = wakeups._take(conn, Call(), T0)
    assert taken is not None
    assert taken.id == "w-good"
    assert len(warnings(caplog)) == 2  # both remembered: neither warned of again


def test_a_row_whose_seq_is_the_least_a_bigint_holds_is_taken(
    conn: psycopg.Connection[Any], schema: str
) -> None:
    with admin() as db:  # written by hand
        db.execute(
            sql.SQL(
                "INSERT INTO {} (seq, id, session, prompt, fire_at) "
                "VALUES (-9223372036854775808, 'w-least', 's', 'p', %s)"
            ).format(table(schema, "wakeups")),
            (T0,),
        )
    wakeups = PostgresWakeups(cast(Connections, None), Schema(schema))
    taken = wakeups._take(conn, Call(), T0)
    assert taken is not None
    assert taken.id == "w-least"


def test_a_row_written_unreadable_between_its_read_and_its_lock_is_passed_over(
    conn: psycopg.Connection[Any], schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Read as a good candidate, edited before its lock: the lock's own read decides.
    seed(schema, ("w-bad", "s-bad", BAD_CRON))
    wakeups = PostgresWakeups(cast(Connections, None), Schema(schema))
    ((seq, version),) = conn.execute(
        sql.SQL("SELECT seq, seq::text || ':' || xmin::text FROM {}").format(
            table(schema, "wakeups")
        )
    ).fetchall()
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert wakeups._take_row(conn, Call(), seq, T0) is None
    assert warnings(caplog) == [passed_over("w-bad", malformed_reason("w-bad", "s-bad"))]
    assert wakeups._unreadable == {version}
    assert ids(schema) == ["w-bad"]


def test_a_change_whose_caller_gave_up_is_rolled_back_whole(
    conn: psycopg.Connection[Any], schema: str
) -> None:
    # Each call's thread, once its caller left (a deadline, a stop), changes nothing: a take
    # would take a wake-up for nobody, an add or a removal be made behind a "not confirmed".
    seed(schema, ("w1", "s", None), ("w2", "s", None))
    wakeups = PostgresWakeups(cast(Connections, None), Schema(schema))
    given_up = Call()
    given_up.abandoned.set()
    calls: list[tuple[Callable[[], object], str]] = [
        (lambda: wakeups._add(conn, given_up, REQUEST, T0), ": rolled back"),
        (lambda: wakeups._remove(conn, given_up, "w1", "s"), ": rolled back"),
        (lambda: wakeups._take(conn, given_up, T0), ""),  # before it reads a row
        # A pause, as a resume, said not confirmed: not made either.
        (lambda: set_paused(conn, given_up, Schema(schema), "r", True, T0, 0.0), ": rolled back"),
    ]
    for call, then in calls:
        with pytest.raises(StateFault) as raised:
            call()
        assert str(raised.value) == f"abandoned by its caller{then}"
        assert ids(schema) == ["w1", "w2"]
        with admin() as db:
            assert (
                db.execute(sql.SQL("SELECT 1 FROM {}").format(table(schema, "paused"))).fetchall()
                == []
            )
    # Given up once a row is locked, before its take commits: rolled back whole.
    taking = Call()
    real = wakeups._take_row

    def give_up_then_take(*args: Any) -> Wakeup | None:
        taking.abandoned.set()
        return real(*args)

    wakeups._take_row = give_up_then_take  # type: ignore[method-assign]
    with pytest.raises(StateFault, match=r"^abandoned by its caller: rolled back$"):
        wakeups._take(conn, taking, T0)
    assert ids(schema) == ["w1", "w2"]
    taken = wakeups._take(conn, Call(), T0)  # a caller that waits: taken, in order
    assert taken is not None
    assert taken.id == "w1"
    assert ids(schema) == ["w2"]


def rows_of(schema: str) -> list[tuple[Any, ...]]:
    """Every wake-up row as stored: seq, id, fire_at, attempts."""
    with admin() as db:
        return db.execute(
            sql.SQL("SELECT seq, id, fire_at, attempts FROM {} ORDER BY seq").format(
                table(schema, "wakeups")
            )
        ).fetchall()


def test_a_take_whose_caller_gave_up_during_its_commit_is_put_back_as_it_was(
    conn: psycopg.Connection[Any], schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The commit was on its way when the caller gave up: the answer cannot be handed over,
    # and the call's undo puts the wake-up back, in its place (a stalled server or network).
    seed(schema, ("w-once", "s1", None), ("w-every", "s2", "*/5 * * * *"), ("w-last", "s3", None))
    with admin() as db:
        db.execute(sql.SQL("UPDATE {} SET attempts = 3").format(table(schema, "wakeups")))
    wakeups = PostgresWakeups(cast(Connections, None), Schema(schema))

    def take_for_nobody(expected: str) -> Call:
        call = Call()
        taken = wakeups._take(conn, call, T0)
        assert taken is not None
        assert taken.id == expected
        # What a failed undo says it could not give back (one run apart may fail to connect).
        assert call.undo_of == f"wake-up {expected} of session {taken.session!r}"
        assert call.give_up() is None  # the caller left before the answer was handed over
        assert not call.hand_over(taken)
        return call

    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        for expected in ("w-once", "w-every"):
            before = rows_of(schema)
            call = take_for_nobody(expected)
            assert rows_of(schema) != before  # taken: deleted, or moved to its next occurrence
            assert call.undo is not None
            call.undo(conn)
            assert rows_of(schema) == before  # as it was: its seq, its time, its attempts
            kept = Call()  # a caller that still waits is handed the answer: nothing undone
            taken = wakeups._take(conn, kept, T0)
            assert taken is not None
            assert taken.id == expected
            assert kept.hand_over(taken)
            assert kept.give_up() == (taken,)
    assert [r.getMessage() for r in caplog.records] == [
        f"wake-up {id_} of session {session!r} was taken after the call had given up (a "
        "stalled connection, or a stop); it did not run and is put back"
        for id_, session in (("w-once", "s1"), ("w-every", "s2"))
    ]
    # A recurring one changed since its take is left as it is now; a one-shot is put back
    # once, however often its undo runs.
    seed(schema, ("w-again", "s4", "*/5 * * * *"))
    moved = take_for_nobody("w-last")
    again = take_for_nobody("w-again")
    with admin() as db:
        db.execute(
            sql.SQL(
                "UPDATE {} SET fire_at = fire_at + interval '1 day' WHERE id = 'w-again'"
            ).format(table(schema, "wakeups"))
        )
    changed = rows_of(schema)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert again.undo is not None
        again.undo(conn)
        assert rows_of(schema) == changed
        assert moved.undo is not None
        moved.undo(conn)
        moved.undo(conn)
    taken_for_nobody = (
        "was taken after the call had given up (a stalled connection, or a stop); it did not run"
    )
    assert [r.getMessage() for r in caplog.records] == [
        f"wake-up w-again of session 's4' {taken_for_nobody}; changed or removed since, it is "
        "left as it is now",
        f"wake-up w-last of session 's3' {taken_for_nobody} and is put back",
        f"wake-up w-last of session 's3' {taken_for_nobody}; changed or removed since, it is "
        "left as it is now",
    ]
    assert [row[1] for row in rows_of(schema)] == ["w-every", "w-last", "w-again"]


def test_a_put_back_that_fails_says_the_wake_up_is_lost(
    conn: psycopg.Connection[Any], url: str, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    seed(schema, ("w-once", "s1", None))
    wakeups = PostgresWakeups(cast(Connections, None), Schema(schema))
    call = Call()
    taken = wakeups._take(conn, call, T0)
    assert taken is not None
    call.give_up()
    assert call.undo is not None
    broken = psycopg.connect(url, autocommit=True)
    broken.close()  # the server or the network gone again
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        call.undo(broken)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.ERROR,
            "wake-up w-once of session 's1' was taken after the call had given up (a stalled "
            "connection, or a stop); it did not run, and could not be put back "
            "(OperationalError: the connection is closed): it is lost",
        )
    ]
    assert ids(schema) == []


class _Asked:
    """Connections that answer nothing: each call's keywords are kept (what its caller would
    be told were its commit's answer lost), and it raises."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, Any]]] = []

    async def run(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self.asked.append((what, kwargs))
        raise StateFault("asked")


async def test_each_change_says_what_is_not_confirmed_were_its_commit_unanswered() -> None:
    asked = _Asked()
    wakeups = PostgresWakeups(cast(Connections, asked), Schema("s"))
    wakeup = check_stored(Wakeup(id="w1", session="s", prompt="p", fire_at=T0))
    for change in (
        wakeups.add(WakeupRequest(session="chat:" + "x" * 80, prompt="p", fire_at=T0), T0),
        wakeups.take_due(T0),
        wakeups.defer(wakeup, T0),
        wakeups.remove("w1", "s"),
    ):
        with pytest.raises(StateFault, match=r"^asked$"):
            await change
    look = "it may be made: look before asking again"
    session = repr("chat:" + "x" * 59)  # the first 64 characters
    assert [(what, {"then": look, **kwargs}) for what, kwargs in asked.asked] == [
        (
            "could not add a wake-up",
            {"unsure": f"adding a wake-up for session {session} is not confirmed", "then": look},
        ),
        (
            "could not take a due wake-up",
            {
                "unsure": "taking a due wake-up is not confirmed",
                "then": "one taken is put back once the answer comes",
                "lost": "one taken is lost with it (it did not run)",
            },
        ),
        (
            "could not re-queue wake-up w1",
            {"unsure": "re-queueing wake-up w1 is not confirmed", "then": look},
        ),
        (
            "could not remove wake-up w1",
            {"unsure": "removing wake-up w1 is not confirmed", "then": look},
        ),
    ]


def test_a_deferral_is_committing_from_its_start(
    conn: psycopg.Connection[Any], schema: str
) -> None:
    # Committed whether or not its caller still waits: a caller that leaves at any point
    # cannot say it was not made.
    wakeups = PostgresWakeups(cast(Connections, None), Schema(schema))
    call = Call()
    wakeup = check_stored(Wakeup(id="w1", session="s", prompt="p", fire_at=T0))
    call.abandoned.set()
    assert wakeups._defer(conn, call, wakeup, T0 + HOUR)
    assert call.carries_on is True
    assert call.committing is True  # noted before its commit only
    assert ids(schema) == ["w1"]
    refused = Call()  # at the cap: nothing to commit, nothing noted as committing
    full = [
        check_stored(Wakeup(id=f"f{i}", session="s", prompt="p", fire_at=T0))
        for i in range(MAX_PENDING_PER_SESSION)
    ]
    for one in full[1:]:
        wakeups._insert(conn, refused, one)
    assert not wakeups._defer(conn, refused, wakeup, T0 + HOUR)
    assert (refused.carries_on, refused.committing) == (True, False)


async def test_an_instant_no_datetime_holds_reads_as_the_calendar_s_edge(
    store: PostgresStore, schema: str
) -> None:
    # A row written by hand with fire_at '-infinity' made every poll, listing and take fail
    # (psycopg's DataError), so no wake-up fired again; 'infinity' in a claim made its
    # routine's history unreadable and its boot fail.
    seed(schema, ("w-good", "s-good", None))
    with admin() as db:
        for id_, when in (
            ("w-first", "-infinity"),
            ("w-last", "infinity"),
            ("w-bc", "0100-01-01 BC"),
        ):
            db.execute(
                sql.SQL(
                    "INSERT INTO {} (id, session, prompt, fire_at) VALUES (%s, 's', 'p', %s)"
                ).format(table(schema, "wakeups")),
                (id_, when),
            )
        db.execute(
            sql.SQL("INSERT INTO {} (routine, slot, fired_at) VALUES ('r', %s, 'infinity')").format(
                table(schema, "claims")
            ),
            (T0,),
        )
    listed = {w.id: w.fire_at for w in await store.list_wakeups()}
    assert listed == {
        "w-good": T0,
        "w-first": FIRST_INSTANT,
        "w-bc": FIRST_INSTANT,
        "w-last": LAST_INSTANT,
    }
    taken = []
    while (wakeup := await store.take_due_wakeup(T0)) is not None:
        taken.append(wakeup.id)
    assert sorted(taken) == ["w-bc", "w-first", "w-good"]  # due; the last instant is not
    [claim] = await store.history("r")
    assert (claim.slot, claim.fired_at) == (T0, LAST_INSTANT)
    assert (await store.latest_fire("r")) == claim
