"""Pins of the PostgreSQL store's own calls (``scripts/mutation.py pgstore``): its options and
their defaults; two settles of one slot decided one after the other; the error of every call
naming what it was doing, and the warning of a settle that could not be written; a claim whose
caller gave up after its batch was decided, settled interrupted by the store (and left for the
next boot when that settle fails too)."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trio
import trio.testing
from pg import T0, admin, pooled_schema, require_server, with_app_name
from procs import wait_for
from psycopg import sql

from trio_routines.agent import Usage
from trio_routines.claims import KEEP_CLAIMS
from trio_routines.errors import InvalidOption
from trio_routines.instants import format_iso
from trio_routines.records import ClaimStatus, Gap, GapReason, Outcome
from trio_routines.replicas import ReplicaInfo
from trio_routines.stores.postgres import PostgresStore, claims
from trio_routines.stores.postgres import batches as pg_batches


@pytest.fixture
def url() -> str:
    return require_server()


@pytest.fixture
def schema(url: str) -> Iterator[str]:
    with pooled_schema() as name:
        yield name


@pytest.fixture
async def store(url: str, schema: str) -> AsyncIterator[PostgresStore]:
    store = PostgresStore(url, schema=schema, timeout=30)
    await store.ready()  # the tables exist
    yield store
    await store.aclose()


def refused_url() -> tuple[str, str]:
    """A URL whose port nobody listens on (every call fails at once), and its ``where``."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"postgresql://postgres@127.0.0.1:{port}/test", f"postgresql://127.0.0.1:{port}/test"


# -- options and their defaults -------------------------------------------------------------


def test_the_options_a_store_was_built_with_and_their_defaults() -> None:
    url = "postgresql://someone@db.example:6543/things"
    store = PostgresStore(url)  # connects on its first call only
    assert (store.url, store.schema, store.keep, store.timeout) == (url, None, KEEP_CLAIMS, 5.0)
    assert repr(store) == "PostgresStore('postgresql://db.example:6543/things')"
    store = PostgresStore(url, keep=1, schema="mine", timeout=0.5)
    assert (store.url, store.schema, store.keep, store.timeout) == (url, "mine", 1, 0.5)
    assert repr(store) == "PostgresStore('postgresql://db.example:6543/things', schema='mine')"
    with pytest.raises(ValueError, match=r"^keep must be at least 1$"):
        PostgresStore(url, keep=0)


FINITE = " must be a finite number of seconds, more than 0: "


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"timeout": float("nan")}, "timeout" + FINITE + "nan"),
        ({"timeout": 0}, "timeout" + FINITE + "0"),
        ({"max_size": 0}, "max_size must be at least 1"),
        ({"min_size": -1}, "min_size must be at least 0"),
        ({"min_size": 5, "max_size": 2}, "max_size (2) must be at least min_size (5)"),
        ({"min_size": "1"}, "min_size must be a whole number, at least 0: '1'"),
    ],
)
def test_an_option_no_pool_could_use_is_refused_as_the_store_is_made(
    options: dict[str, Any], said: str
) -> None:
    with pytest.raises(InvalidOption) as refused:
        PostgresStore("postgresql://db.example:6543/things", **options)
    assert str(refused.value) == said


async def test_a_store_holds_one_connection_and_uses_at_most_eight(url: str, schema: str) -> None:
    store = PostgresStore(url, schema=schema)
    try:
        await store.ready()  # the pool is made by the first call
        pool = store._conns._pool
        assert pool is not None
        assert (pool.min_size, pool.max_size) == (1, 8)
        assert store._conns._limiter.total_tokens == 8  # calls in threads at once
    finally:
        await store.aclose()


# -- batches ----------------------------------------------------------------------------------


def waiting_on_a_lock(app: str) -> bool:
    with admin() as db:
        row = db.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "AND wait_event_type = 'Lock'",
            (app,),
        ).fetchone()
    return bool(row and row[0])


async def test_two_settles_of_one_slot_are_written_one_after_the_other(
    url: str, schema: str
) -> None:
    app = f"pin_{schema}"
    store = PostgresStore(with_app_name(url, app), schema=schema, timeout=30)
    try:
        for routine in "qr":
            await store.claim(routine, T0, T0)
        before = store._batches.settles.batches
        with admin() as blocker:
            # A first batch parks on the table, so that the next ones queue behind it.
            blocker.execute("BEGIN")
            blocker.execute(sql.SQL("LOCK TABLE {} IN SHARE MODE").format(claims_table(schema)))
            async with trio.open_nursery() as nursery:
                try:
                    nursery.start_soon(store.settle, "q", T0, Outcome.COMPLETED, 1)
                    await trio.to_thread.run_sync(wait_for, lambda: waiting_on_a_lock(app))
                    nursery.start_soon(store.settle, "r", T0, Outcome.COMPLETED, 2)
                    await trio.lowlevel.checkpoint()  # arrival in this order
                    nursery.start_soon(store.settle, "r", T0, Outcome.FAILED, 3)
                    await trio.testing.wait_all_tasks_blocked()
                finally:
                    blocker.execute("COMMIT")
        # One batch each: the slot's second settle waited for the first.
        assert store._batches.settles.batches - before == 3
        fire = await store.latest_fire("r")
        assert fire is not None
        assert (fire.outcome, fire.ms) == (Outcome.FAILED, 3)
    finally:
        await store.aclose()


# -- what a failed call says ----------------------------------------------------------------

Calling = Callable[[PostgresStore], Awaitable[object]]

CALLS: dict[str, tuple[Calling, str]] = {
    "ready": (lambda s: s.ready(), "the database does not answer"),
    "join": (
        lambda s: s.join(ReplicaInfo("host-a:1", "0.1.0", "host", 42, T0, T0)),
        "could not open the state",
    ),
    "schema_versions": (lambda s: s.schema_versions(), "could not read the schema version"),
    "history": (lambda s: s.history("r"), "the fired-slot claims of 'r' are unreadable"),
    "latest_fire": (lambda s: s.latest_fire("r"), "the newest claim of 'r' is unreadable"),
    "resumed_at": (lambda s: s.resumed_at("r"), "the resume of 'r' is unreadable"),
    "gaps": (lambda s: s.gaps("r"), "the gaps of 'r' are unreadable"),
    "pause": (lambda s: s.set_paused("r", True), "could not pause 'r'"),
    "resume": (lambda s: s.set_paused("r", False, T0), "could not resume 'r'"),
    "paused": (lambda s: s.paused(), "the paused routines are unreadable"),
    "record_gap": (
        lambda s: s.record_gap("r", Gap(T0, T0, 1, GapReason.STORE)),
        "could not record a gap of 'r'",
    ),
    "record_usage": (
        lambda s: s.record_usage("routine", "r", T0, Usage(input_tokens=1)),
        "could not record the usage of routine 'r'",
    ),
    "usage_since": (
        lambda s: s.usage_since("session", "s", T0),
        "the usage of session 's' is unreadable",
    ),
    "first_armed": (
        lambda s: s.first_armed(["r"], T0),
        "when the routines were first armed cannot be read or kept",
    ),
    "open_claims": (lambda s: s.open_claims(["r"], 5), "the open claims are unreadable"),
    "replicas": (lambda s: s.replicas(), "could not read the replicas"),
    "claims_alive": (lambda s: s.claims_alive([("r", T0)]), "could not read the holds"),
    "sessions_held": (lambda s: s.sessions_held(["s"]), "could not read the holds"),
    "paused_since": (lambda s: s.paused_since("r"), "the pause of 'r' is unreadable"),
    "resumed_pause_since": (
        lambda s: s.resumed_pause_since("r"),
        "the resume of 'r' is unreadable",
    ),
}


async def test_every_call_that_fails_says_what_it_was_doing_and_where() -> None:
    # One store per call, all at once: each fails on its own pool's first refused attempt.
    said: dict[str, str] = {}
    wheres: dict[str, str] = {}

    async def call(name: str, calling: Calling) -> None:
        url, wheres[name] = refused_url()
        store = PostgresStore(url, timeout=1)
        try:
            await calling(store)
        except Exception as exc:
            said[name] = str(exc)
        finally:
            await store.aclose()

    async with trio.open_nursery() as nursery:
        for name, (calling, _) in CALLS.items():
            nursery.start_soon(call, name, calling)
    # The reason is the pool's (the refused attempt, or no connection within the bound).
    assert {name: text.partition(": no connection (")[0] for name, text in said.items()} == {
        name: f"{what} in {wheres[name]}" for name, (_, what) in CALLS.items()
    }


async def test_a_pause_resume_or_repair_says_what_it_was_doing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = PostgresStore("postgresql://127.0.0.1:1/none", timeout=1)
    asked: list[dict[str, Any]] = []

    async def run(what: str, fn: Any, *args: Any, **kwargs: Any) -> None:
        asked.append({"what": what, **kwargs})

    monkeypatch.setattr(store._conns, "run", run)
    await store.set_paused("daily", True)
    await store.set_paused("daily", False)
    await store.repair_schema()
    assert asked == [
        {"what": "could not pause 'daily'", "unsure": "pausing 'daily' is not confirmed"},
        {"what": "could not resume 'daily'", "unsure": "resuming 'daily' is not confirmed"},
        {"what": "could not repair the schema"},
    ]
    await store.aclose()


async def test_a_settle_that_fails_is_a_warning_naming_the_outcome_and_the_slot(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url, where = refused_url()
    store = PostgresStore(url, timeout=1)
    try:
        with caplog.at_level(logging.WARNING, logger="trio_routines"):
            written = await store.settle("r", T0, Outcome.COMPLETED, 5)
    finally:
        await store.aclose()
    assert written is False
    ours = [r.getMessage() for r in caplog.records if r.name == "trio_routines"]
    assert [text.partition(": no connection (")[0] for text in ours] == [
        f"r: could not record the completed outcome of slot {format_iso(T0)} in {where}"
    ]


# -- a caller that gave up after its batch was decided ----------------------------------------


def claims_table(schema: str, name: str = "trio_routines_claims") -> sql.Identifier:
    return sql.Identifier(schema, name)


def outcomes(schema: str) -> list[tuple[object, ...]]:
    with admin() as db:
        query = sql.SQL("SELECT routine, outcome FROM {} ORDER BY 1").format(claims_table(schema))
        return db.execute(query).fetchall()


def late_warning(routine: str) -> str:
    return (
        f"{routine}: slot {format_iso(T0)} was claimed after the call had given up (a stalled "
        "connection, or a stop); it will not run and is recorded as interrupted"
    )


async def claim_and_give_up_once_decided(
    store: PostgresStore,
    monkeypatch: pytest.MonkeyPatch,
    meanwhile: Callable[[], None] = lambda: None,
) -> tuple[str, str, object]:
    """Two claims in one batch; the one that did not lead gives up after the batch's thread
    decided it (``meanwhile`` runs then, in the thread). The routines that led and that gave
    up, and what the leader's claim returned (or raised)."""
    real = claims.claim_batch  # the store's own, replaced by one that waits after it
    decided = trio.Event()
    go_on = threading.Event()
    follower: list[str] = []

    def claim_batch(conn: Any, call: Any, tables: Any, keep: int, items: Any, waiters: Any) -> Any:
        answer = real(conn, call, tables, keep, items, waiters)
        try:
            follower.append(items[1][0])
        finally:
            trio.from_thread.run_sync(decided.set)
        go_on.wait(10)
        meanwhile()
        return answer

    monkeypatch.setattr(pg_batches, "claim_batch", claim_batch)
    scopes = {"a": trio.CancelScope(), "b": trio.CancelScope()}
    got: dict[str, object] = {}

    async def claim(routine: str) -> None:
        with scopes[routine]:
            try:
                got[routine] = await store.claim(routine, T0, T0, replica="host-a:1")
            except Exception as exc:
                got[routine] = exc

    async with trio.open_nursery() as nursery:
        for routine in scopes:
            nursery.start_soon(claim, routine)
        await decided.wait()
        (gone,) = follower
        scopes[gone].cancel()  # marks its entry given up at once
        go_on.set()
    (led,) = set(scopes) - {gone}
    assert gone not in got  # its caller was cancelled
    return led, gone, got[led]


async def test_a_claim_whose_caller_gave_up_after_the_decision_is_settled_interrupted(
    store: PostgresStore,
    schema: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        led, gone, result = await claim_and_give_up_once_decided(store, monkeypatch)
    assert getattr(result, "status", result) == ClaimStatus.TAKEN
    assert sorted(outcomes(schema)) == sorted([(led, None), (gone, "interrupted")])
    assert [r.getMessage() for r in caplog.records] == [late_warning(gone)]


async def test_a_late_claim_that_cannot_be_settled_is_left_open_for_the_next_boot(
    store: PostgresStore, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = claims_table(schema)
    moved = claims_table(schema, "claims_moved")

    def move_the_claims() -> None:  # the late settle finds no table
        with admin() as db:
            db.execute(sql.SQL("ALTER TABLE {} RENAME TO claims_moved").format(table))

    try:
        led, gone, result = await claim_and_give_up_once_decided(
            store, monkeypatch, move_the_claims
        )
    finally:  # the schema goes back to the pool as it was
        with admin() as db:
            db.execute(
                sql.SQL("ALTER TABLE IF EXISTS {} RENAME TO trio_routines_claims").format(moved)
            )
    # The leader's claim is answered all the same; the late one waits for the reconcile.
    assert getattr(result, "status", result) == ClaimStatus.TAKEN
    assert sorted(outcomes(schema)) == sorted([(led, None), (gone, None)])


async def test_ledger_rows_edited_by_hand_are_left_out_of_what_was_spent(
    store: PostgresStore, schema: str
) -> None:
    # NaN and infinite costs came out of the sums into JSON answers (invalid JSON), and every
    # `status --url` then failed; a negative count lowered a budget's spending.
    await store.record_usage("routine", "r", T0, Usage(input_tokens=5, cost=1.5, currency="EUR"))
    minute = T0.replace(second=0, microsecond=0)
    rows = [
        (minute - timedelta(minutes=1), "EUR", 1, 1, "NaN"),
        (minute - timedelta(minutes=2), "USD", 1, 1, "Infinity"),
        (minute - timedelta(minutes=3), "USD", -100, 0, "1"),
        (minute - timedelta(minutes=4), "GBP", 0, 0, "-Infinity"),
        (minute - timedelta(minutes=5), "EUR", 10**16, 0, "1"),
        (minute - timedelta(minutes=6), "eu$", 1, 1, "1"),
    ]
    with admin() as db:
        for at, currency, tokens_in, tokens_out, cost in rows:
            db.execute(
                sql.SQL(
                    "INSERT INTO {} (kind, name, minute, currency, tokens_in, tokens_out, cost) "
                    "VALUES ('routine', 'r', %s, %s, %s, %s, %s::float8)"
                ).format(sql.Identifier(schema, "trio_routines_usage")),
                (at, currency, tokens_in, tokens_out, cost),
            )
    spent = await store.usage_since("routine", "r", T0 - timedelta(hours=1))
    assert (spent.input_tokens, spent.output_tokens, spent.costs) == (5, 0, (("EUR", 1.5),))


def _usage_minutes(schema: str) -> list[datetime]:
    with admin() as db:
        rows = db.execute(
            sql.SQL("SELECT minute FROM {} ORDER BY minute").format(
                sql.Identifier(schema, "trio_routines_usage")
            )
        ).fetchall()
    return [minute for (minute,) in rows]


async def test_a_replica_whose_clock_runs_ahead_deletes_no_other_replicas_spending(
    store: PostgresStore, schema: str
) -> None:
    # Each record deleted the rows older than the longest window before its own minute: one
    # replica a day ahead deleted a day of everyone's spending from a week's budget, one a
    # year ahead all of it. The server's clock bounds what a record may delete.
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    week, day = timedelta(days=7), timedelta(days=1)
    await store.record_usage("session", "s", now - week + day, Usage(5))
    await store.record_usage("session", "s", now - timedelta(minutes=5), Usage(7))
    await store.record_usage("session", "s", now + timedelta(days=365), Usage(100))
    await store.record_usage("session", "s", now + 3 * day, Usage(1))
    assert (await store.usage_since("session", "s", now - week)).tokens == 5 + 7 + 1
    assert len(_usage_minutes(schema)) == 4
    # What is older than the longest window on both clocks is still deleted, by every record.
    await store.record_usage("session", "s", now - week - day, Usage(1000))  # behind: kept
    assert len(_usage_minutes(schema)) == 5
    await store.record_usage("session", "s", now, Usage(1))
    assert _usage_minutes(schema) == [
        now - week + day,
        now - timedelta(minutes=5),
        now,
        now + 3 * day,
        now + timedelta(days=365),
    ]


async def test_a_record_added_to_a_row_edited_by_hand_counts_only_itself(
    store: PostgresStore, schema: str
) -> None:
    # NaN sorts above every number: least(NaN + 1.5, bound) made the minute's row the bound,
    # which then counted as spent, and spent a budget at once.
    minute = T0.replace(second=0, microsecond=0)
    with admin() as db:
        for currency, tokens_in, cost in (("EUR", -7, "NaN"), ("USD", 10**16, "Infinity")):
            db.execute(
                sql.SQL(
                    "INSERT INTO {} (kind, name, minute, currency, tokens_in, tokens_out, cost) "
                    "VALUES ('routine', 'r', %s, %s, %s, 0, %s::float8)"
                ).format(sql.Identifier(schema, "trio_routines_usage")),
                (minute, currency, tokens_in, cost),
            )
    await store.record_usage("routine", "r", T0, Usage(input_tokens=5, cost=1.5, currency="EUR"))
    await store.record_usage("routine", "r", T0, Usage(input_tokens=2, cost=0.5, currency="USD"))
    spent = await store.usage_since("routine", "r", T0 - timedelta(hours=1))
    assert (spent.input_tokens, spent.costs) == (7, (("EUR", 1.5), ("USD", 0.5)))


async def test_a_resume_that_waited_on_a_lock_keeps_when_it_landed(
    store: PostgresStore, schema: str
) -> None:
    # Stamped, then written: a replica that read the stamp late took a slot between the two
    # for after the resume, while the replicas that read in time still saw the pause.
    await store.set_paused("daily", True, T0)
    await store.set_paused("quick", True, T0)
    locker = admin()
    locker.autocommit = False
    locker.execute(
        sql.SQL("SELECT 1 FROM {}.trio_routines_paused WHERE routine = 'daily' FOR UPDATE").format(
            sql.Identifier(schema)
        )
    )
    release = threading.Timer(1.0, locker.commit)  # the row's lock let go a second later
    release.start()
    try:
        await store.set_paused("daily", False, T0 + timedelta(hours=1))
    finally:
        release.join()
        locker.close()
    kept = await store.resumed_at("daily")
    assert kept is not None
    assert T0 + timedelta(hours=1, seconds=0.5) <= kept <= T0 + timedelta(hours=1, seconds=30)
    assert (await store.paused_with_resumes(T0))[1]["daily"] == (kept, T0)
    await store.set_paused("quick", False, T0 + timedelta(hours=1))  # no wait: as given
    assert await store.resumed_at("quick") == T0 + timedelta(hours=1)


async def test_a_resume_that_waited_for_a_connection_keeps_when_it_landed(
    url: str, schema: str
) -> None:
    # Its wait for a connection counts too: one resume's thread held on a locked row for
    # 0.6 s, the store's one connection is its, and the next resume waits for it before its
    # own quick statement.
    store = PostgresStore(url, schema=schema, timeout=30, max_size=1)
    try:
        await store.set_paused("daily", True, T0)
        await store.set_paused("quick", True, T0)
        locker = admin()
        locker.autocommit = False
        locker.execute(
            sql.SQL(
                "SELECT 1 FROM {}.trio_routines_paused WHERE routine = 'daily' FOR UPDATE"
            ).format(sql.Identifier(schema))
        )
        release = threading.Timer(0.6, locker.commit)
        release.start()
        asked = T0 + timedelta(hours=1)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.set_paused, "daily", False, asked)
                await trio.sleep(0.1)  # the one connection is its: this waits 0.5 s or more
                await store.set_paused("quick", False, asked)
        finally:
            release.join()
            locker.close()
        kept = await store.resumed_at("quick")
        assert kept is not None
        assert asked + timedelta(seconds=0.4) <= kept <= asked + timedelta(seconds=30)
    finally:
        await store.aclose()


async def test_a_resume_an_older_version_kept_reads_with_its_pause_unknown(
    store: PostgresStore, schema: str
) -> None:
    # Before schema version 13 a resume kept no pause's start: the column is NULL.
    with admin() as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.trio_routines_resumed (routine, resumed_at) VALUES ('old', %s)"
            ).format(sql.Identifier(schema)),
            (T0,),
        )
    assert await store.paused_with_resumes(T0) == (frozenset(), {"old": (T0, None)})
