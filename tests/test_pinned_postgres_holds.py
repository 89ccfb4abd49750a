"""Pins of the replicas' presence and holds on PostgreSQL (``scripts/mutation.py pgholds``):
the lock of a replica's id and the connection that holds it, what a failed or stalled call on
that connection does (the presence lost, the reason said and logged, the connection closed
in a daemon thread that neither the end of the run nor the process's exit waits for; a call
cut short and still on it when the run ends lost then), a join that gives up or is refused,
a clean leave, the let-gos sent without a take, and the dead replicas a join forgets.

Written for the mutation run of ``stores/postgres/holds.py`` and ``ending.py``
(docs/mutation.md). The timing
tests run on a MockClock moved by hand: a deadline passes only when the test says so, while
the server works in real time; ``until`` waits for what the server or a thread does.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import types
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg
import pytest
import trio
from pg import T0, admin, fresh_schema, kill_backends, require_server
from procs import wait_for
from psycopg import sql
from trio.testing import MockClock, wait_all_tasks_blocked

from trio_routines.errors import StateFault
from trio_routines.instants import format_iso
from trio_routines.replicas import ReplicaInfo, replica_key
from trio_routines.stores.postgres import PostgresStore, ending, holds, joining
from trio_routines.stores.postgres.conn import THREAD_NAME
from trio_routines.stores.postgres.holds import LET_GO_AFTER, PostgresPresence

T = TypeVar("T")
BOUND = 31  # seconds: the stores' timeout (30) and our deadline's extra second
LOST = "— the turns it holds are ended; the server lets its holds go within 25 s"


@pytest.fixture
def url() -> str:
    return require_server()


async def _migrate(schema: str) -> None:
    store = PostgresStore(require_server(), schema=schema)
    try:
        await store.latest_fire("warm-up")
    finally:
        await store.aclose()


@pytest.fixture(scope="module")
def tables() -> Iterator[str]:
    """The file's own schema, made once for its tests: some of them rename a table, which must
    reach no other file's tests (a pooled schema is handed from test to test)."""
    require_server()
    with fresh_schema() as name:
        trio.run(_migrate, name)
        yield name


@pytest.fixture
def schema(tables: str) -> Iterator[str]:
    """The file's schema, every row deleted after the test (a test that changes a table puts
    it back). Each test joins under ids of its own: a connection closed by one may hold its
    lock a moment longer."""
    yield tables
    with admin() as conn:
        conn.execute("SET lock_timeout = '5s'")
        names = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s "
            "AND tablename <> 'trio_routines_schema'",
            (tables,),
        ).fetchall()
        with conn.transaction():
            for (name,) in names:
                conn.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(tables, name)))


@pytest.fixture
async def store(url: str, schema: str) -> AsyncIterator[PostgresStore]:
    store = PostgresStore(url, schema=schema, timeout=BOUND - 1)
    await store.latest_fire("warm-up")  # the tables exist, the schema is checked
    yield store
    await store.aclose()


def info(replica: str, *, seen: datetime = T0) -> ReplicaInfo:
    return ReplicaInfo(replica, "0.1.0", "host", 42, seen, seen)


def table(schema: str, name: str) -> sql.Identifier:
    return sql.Identifier(schema, f"trio_routines_{name}")


def ddl(query: str, schema: str, name: str) -> None:
    with admin() as conn:
        conn.execute(sql.SQL(query).format(table(schema, name)))


def where(store: PostgresStore) -> str:
    return store._conns.where


def connection(member: PostgresPresence) -> psycopg.Connection[Any]:
    conn = member._conn
    assert conn is not None
    return conn


async def until(probe: Callable[[], T], what: str) -> T:
    """Poll ``probe`` in a thread, in real time, until it is truthy (at most 10 s)."""
    return await trio.to_thread.run_sync(lambda: wait_for(probe, 10, what))


def waiting_for_a_lock(pid: int) -> bool:
    with admin() as conn:
        row = conn.execute(
            "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
    return bool(row and row[0])


def waiting_on(pid: int, name: str) -> bool:
    """Whether ``pid``'s statement on the table ``name`` waits for a row lock."""
    with admin() as conn:
        row = conn.execute(
            "SELECT wait_event_type = 'Lock' AND query LIKE %s FROM pg_stat_activity "
            "WHERE pid = %s",
            (f"%trio_routines_{name}%", pid),
        ).fetchone()
    return bool(row and row[0])


def row_locked(schema: str, replica: str) -> psycopg.Connection[Any]:
    """A transaction holding ``replica``'s row: a leave's delete, a beat's update wait."""
    blocker = psycopg.connect(require_server())
    blocker.execute(
        sql.SQL("SELECT 1 FROM {} WHERE id = %s FOR UPDATE").format(table(schema, "replicas")),
        (replica,),
    )
    return blocker


def replica_lock(schema: str, replica: str) -> int:
    """The key of ``replica``'s lock in ``schema``'s store: its namespace is the OID of the
    store's replicas table (advisory locks are per database, a store per schema)."""
    with admin() as conn:
        row = conn.execute(
            "SELECT to_regclass(%s)::oid", (table(schema, "replicas").as_string(conn),)
        ).fetchone()
    assert row is not None
    return replica_key(replica, str(row[0]))


def lock_holders(key: int) -> list[str]:
    """The application names of the connections that hold the advisory lock ``key``."""
    with admin() as conn:
        rows = conn.execute(
            "SELECT a.application_name FROM pg_locks AS l JOIN pg_stat_activity AS a USING (pid) "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
            "AND l.classid::bigint = %s AND l.objid::bigint = %s "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            (key >> 32, key & 0xFFFFFFFF),
        ).fetchall()
    return [name for (name,) in rows]


async def connection_ended(member: PostgresPresence, replica: str) -> None:
    """The server ends the connection of ``replica`` (a process that died, a proxy that
    dropped it); back once its lock is gone."""
    kill_backends(f"trio_routines {replica}")
    with trio.fail_after(10):
        while lock_holders(member.holder):  # noqa: ASYNC110 -- the server frees it, no event
            await trio.sleep(0.05)


def held_keys(schema: str) -> list[int]:
    with admin() as conn:
        query = sql.SQL("SELECT key FROM {} ORDER BY key").format(table(schema, "holds"))
        return [key for (key,) in conn.execute(query)]


def lost_record(store: PostgresStore, replica: str, why: str) -> tuple[int, str]:
    return logging.ERROR, f"replica {replica} lost its connection to {where(store)} ({why}) {LOST}"


# -- the replica's lock -----------------------------------------------------------------------


async def test_one_id_joins_two_schemas_each_lock_held_by_a_connection_named_for_it(
    url: str, store: PostgresStore, schema: str
) -> None:
    with fresh_schema() as second:
        other = PostgresStore(url, schema=second, timeout=30)
        members = [await store.join(info("web-1")), await other.join(info("web-1"))]
        for name, each in ((schema, store), (second, other)):
            assert lock_holders(replica_lock(name, "web-1")) == ["trio_routines web-1"]
            assert [(m.id, m.alive) for m in await each.replicas()] == [("web-1", True)]
        for member in members:
            await member.leave()
        await other.aclose()


# -- a call on the replica's connection that fails or stalls -----------------------------------


async def test_a_failed_call_loses_the_presence_says_why_and_closes_its_connection(
    store: PostgresStore, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    member = await store.join(info("failing"))
    conn = connection(member)
    threads: list[tuple[str, str]] = []  # (what, the thread's name)
    execute, close = conn.execute, conn.close

    def spied_execute(*args: Any, **kwargs: Any) -> Any:
        threads.append(("execute", threading.current_thread().name))
        return execute(*args, **kwargs)

    def spied_close() -> None:
        threads.append(("close", threading.current_thread().name))
        close()

    conn.execute = spied_execute  # type: ignore[method-assign]
    conn.close = spied_close  # type: ignore[method-assign]
    ddl("ALTER TABLE {} RENAME TO trio_routines_replicas_away", schema, "replicas")
    try:
        with (
            caplog.at_level(logging.ERROR, logger="trio_routines"),
            pytest.raises(StateFault) as caught,
        ):
            await member.beat(1, T0)
    finally:
        ddl("ALTER TABLE {} RENAME TO trio_routines_replicas", schema, "replicas_away")
    why = f'UndefinedTable: relation "{schema}.trio_routines_replicas" does not exist'
    assert str(caught.value) == f"could not refresh the replica's record on {where(store)}: {why}"
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        lost_record(store, "failing", why)
    ]
    assert member.lost.is_set()
    await until(lambda: conn.closed, "the lost connection closed")
    # Every use of the connection, its close too, in a thread named as the store's (the
    # threads whose psycopg log records are taken off psycopg's loggers: see conn.py).
    assert threads == [("execute", THREAD_NAME), ("close", THREAD_NAME)]
    with pytest.raises(StateFault) as refused:
        await member.take([1])
    assert str(refused.value) == f"replica failing lost its hold on {where(store)}"
    await member.leave()  # quietly: there is nothing left to leave
    # The lock went with the connection: the id joins again.
    await until(lambda: not lock_holders(member.holder), "the lost connection's lock let go")
    again = await store.join(info("failing"))
    await again.leave()


async def test_a_call_that_outlives_its_bound_loses_the_presence_at_its_deadline(
    mock_clock: MockClock, store: PostgresStore, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    member = await store.join(info("stalled"))
    conn = connection(member)
    close = conn.close

    def failing_close() -> None:
        close()
        raise psycopg.OperationalError("closing failed")  # ignored: the presence is lost anyway

    conn.close = failing_close  # type: ignore[method-assign]
    said: list[str] = []

    async def beat() -> None:
        try:
            await member.beat(1, T0)
        except StateFault as exc:
            said.append(str(exc))

    blocker = row_locked(schema, "stalled")
    try:
        with caplog.at_level(logging.ERROR, logger="trio_routines"):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(beat)
                pid = conn.info.backend_pid
                await until(lambda: waiting_for_a_lock(pid), "the beat waiting for the row")
                mock_clock.jump(BOUND)
                await wait_all_tasks_blocked()
                at_deadline = list(said)  # not waiting for the thread, still blocked
                blocker.rollback()
    finally:
        blocker.close()
    why = f"no answer within {BOUND} s"
    assert at_deadline == [f"could not refresh the replica's record on {where(store)}: {why}"]
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        lost_record(store, "stalled", why)
    ]
    await until(lambda: conn.closed, "the lost connection closed")


async def test_a_call_stalled_for_good_is_broken_off_and_only_then_is_its_connection_closed(
    mock_clock: MockClock, store: PostgresStore, schema: str
) -> None:
    # The call never returns by itself (the row stays locked); closing the connection under
    # it, from another thread, would free what the blocked thread uses inside libpq.
    member = await store.join(info("wedged"))
    conn = connection(member)
    events: list[str] = []
    wait, close = conn.wait, conn.close

    def spied_wait(*args: Any, **kwargs: Any) -> Any:
        # psycopg's wait for a call's answer, under the lock it takes for the call: broken
        # off, the thread lingers in it a moment, as a thread still inside libpq would.
        events.append("call")
        try:
            return wait(*args, **kwargs)
        except psycopg.OperationalError:
            time.sleep(0.2)
            raise
        finally:
            events.append("call returned")

    def spied_close() -> None:
        events.append("close")
        close()

    conn.wait = spied_wait  # type: ignore[method-assign]
    conn.close = spied_close  # type: ignore[method-assign]
    said: list[str] = []

    async def beat() -> None:
        try:
            await member.beat(1, T0)
        except StateFault as exc:
            said.append(str(exc))

    blocker = row_locked(schema, "wedged")
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(beat)
            pid = conn.info.backend_pid
            await until(lambda: waiting_for_a_lock(pid), "the beat waiting for the row")
            mock_clock.jump(BOUND)
            # With the row still locked: the server saw the connection end and let the
            # replica's lock go, the blocked call returned, and the connection was closed.
            await until(lambda: conn.closed, "the lost connection closed")
            await until(lambda: not lock_holders(member.holder), "the lost connection's lock")
    finally:
        blocker.close()
    assert said == [
        f"could not refresh the replica's record on {where(store)}: no answer within {BOUND} s"
    ]
    assert events == ["call", "call returned", "close"]


async def cut_short(member: PostgresPresence, call: str) -> None:
    """``call`` under a bound of its caller's shorter than ours (as a stop's margin on a
    leave, the watch's bound on a beat)."""
    with trio.move_on_after(2):
        if call == "leave":
            await member.leave()
        else:
            await member.beat(1, T0)


async def given_up_waiting(
    mock_clock: MockClock,
    member: PostgresPresence,
    call: str,
    waiting: Callable[[int], bool] = waiting_for_a_lock,
) -> int:
    """``call`` under :func:`cut_short`, its caller giving up once the call's backend waits in
    the server (``waiting(pid)``: for a row lock, by default); the call goes on in its
    thread. Returns the backend's pid."""
    pid = connection(member).info.backend_pid
    async with trio.open_nursery() as nursery:
        nursery.start_soon(cut_short, member, call)
        await until(lambda: waiting(pid), f"the {call} waiting in the server")
        mock_clock.jump(2)  # its caller gives up
    return pid


@pytest.mark.parametrize("call", ["leave", "beat"])
async def test_a_call_cut_short_that_never_returns_loses_the_presence_at_its_own_deadline(
    mock_clock: MockClock,
    store: PostgresStore,
    schema: str,
    caplog: pytest.LogCaptureFixture,
    call: str,
) -> None:
    # The connection, and the replica's lock on it, must not stay behind such a call.
    member = await store.join(info("cut"))
    conn = connection(member)
    assert await member.take([31]) == [True]
    blocker = row_locked(schema, "cut")
    try:
        with caplog.at_level(logging.INFO, logger="trio_routines"):
            await given_up_waiting(mock_clock, member, call)
            await wait_all_tasks_blocked()
            kept = (member.lost.is_set(), conn.closed, caplog.records[:])
            mock_clock.jump(BOUND - 2)  # the call's own deadline
            await wait_all_tasks_blocked()
            assert member.lost.is_set()
            # With the row still locked: the connection ended, and with it the lock.
            await until(lambda: conn.closed, "the connection left behind closed")
            await until(lambda: not lock_holders(member.holder), "the replica's lock let go")
    finally:
        blocker.close()
    assert kept == (False, False, [])  # until then, the call is given the rest of its bound
    why = f"a call given up on by its caller did not return within {BOUND} s"
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [lost_record(store, "cut", why)]
    again = await store.join(info("cut"))  # the id is free again
    await again.leave()


async def test_a_call_cut_short_between_two_statements_is_still_on_the_connection(
    mock_clock: MockClock,
    store: PostgresStore,
    schema: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A leave is several statements, and psycopg's lock on the connection is free between
    # them: a call is on the connection until it returns, whatever that lock says.
    member = await store.join(info("steps"))
    conn = connection(member)
    assert await member.take([31]) == [True]
    execute = conn.execute

    def execute_then_pause(*args: Any, **kwargs: Any) -> Any:
        cursor = execute(*args, **kwargs)
        time.sleep(0.2)  # a while between two statements, the lock free (as it is, briefly)
        return cursor

    monkeypatch.setattr(conn, "execute", execute_then_pause)
    holds_row = psycopg.connect(require_server())
    holds_row.execute(
        sql.SQL("SELECT 1 FROM {} WHERE holder = %s FOR UPDATE").format(table(schema, "holds")),
        (member.holder,),
    )
    replica_row = row_locked(schema, "steps")
    try:
        with caplog.at_level(logging.INFO, logger="trio_routines"):
            pid = await given_up_waiting(
                mock_clock, member, "leave", lambda pid: waiting_on(pid, "holds")
            )
            holds_row.rollback()  # the first statement ends; the second waits in its turn
            await until(lambda: waiting_on(pid, "replicas"), "the leave's second statement")
            await wait_all_tasks_blocked()
            kept = member.lost.is_set()
            mock_clock.jump(BOUND - 2)  # the call's own deadline
            await wait_all_tasks_blocked()
            assert member.lost.is_set()
            await until(lambda: not lock_holders(member.holder), "the replica's lock let go")
    finally:
        replica_row.close()
        holds_row.close()
    assert not kept
    why = f"a call given up on by its caller did not return within {BOUND} s"
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        lost_record(store, "steps", why)
    ]


async def test_a_call_cut_short_that_then_fails_on_the_connection_loses_the_presence(
    mock_clock: MockClock,
    store: PostgresStore,
    schema: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # As it would have with its caller still waiting: the connection is not kept behind it.
    member = await store.join(info("failing"))
    conn = connection(member)
    blocker = row_locked(schema, "failing")
    try:
        with caplog.at_level(logging.INFO, logger="trio_routines"):
            pid = await given_up_waiting(mock_clock, member, "beat")
            with admin() as db:  # the call now fails, its caller gone
                db.execute("SELECT pg_terminate_backend(%s)", (pid,))
            await until(lambda: member.lost.is_set(), "the presence lost")
            await until(lambda: conn.closed, "the connection closed")
    finally:
        blocker.close()
    why = "AdminShutdown: terminating connection due to administrator command"
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        lost_record(store, "failing", why)
    ]


async def test_a_call_given_up_on_before_its_thread_started_leaves_the_presence_as_it_was(
    mock_clock: MockClock, store: PostgresStore, caplog: pytest.LogCaptureFixture
) -> None:
    # Its caller gave up while it waited for a thread (Trio's limiter, shared with the host):
    # it never reached the connection, so there is nothing to watch, and nothing to lose.
    member = await store.join(info("queued"))
    limiter = trio.to_thread.current_default_thread_limiter()
    tokens, release = limiter.total_tokens, threading.Event()
    try:
        limiter.total_tokens = 1
        with caplog.at_level(logging.INFO, logger="trio_routines"):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, release.wait)  # the one thread
                await wait_all_tasks_blocked()
                nursery.start_soon(cut_short, member, "beat")
                await wait_all_tasks_blocked()
                mock_clock.jump(2)  # its caller gives up, the beat still waiting for a thread
                await wait_all_tasks_blocked()
                mock_clock.jump(BOUND)  # past what would have been its deadline
                await wait_all_tasks_blocked()
                lost = member.lost.is_set()
                release.set()
    finally:
        release.set()
        limiter.total_tokens = tokens
    assert not lost
    assert caplog.records == []
    await member.beat(2, T0)  # the connection is still ours, and answers
    await member.leave()


async def test_a_leave_given_up_on_before_it_could_start_ends_the_connection(
    mock_clock: MockClock, store: PostgresStore, caplog: pytest.LogCaptureFixture
) -> None:
    # Another call held the connection past the stop's margin: the replica is leaving, so its
    # connection, and the lock on it, end here rather than stay open behind it.
    member = await store.join(info("stuck-leave"))
    conn = connection(member)
    await member._using.acquire()  # a call of another task on the connection meanwhile
    try:
        with caplog.at_level(logging.INFO, logger="trio_routines"):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(cut_short, member, "leave")
                await wait_all_tasks_blocked()
                mock_clock.jump(2)  # a stop's margin
    finally:
        member._using.release()
    assert member.lost.is_set()
    await until(lambda: not lock_holders(member.holder), "the replica's lock let go")
    await until(lambda: conn.closed, "the connection closed")
    why = "its leave was given up on before it could start"
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        lost_record(store, "stuck-leave", why)
    ]


async def test_a_call_cut_short_that_returns_in_time_leaves_the_presence_as_it_was(
    mock_clock: MockClock, store: PostgresStore, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A stop's margin cutting a heartbeat that was about to answer: nothing is lost.
    member = await store.join(info("brief"))
    conn = connection(member)
    blocker = row_locked(schema, "brief")
    try:
        with caplog.at_level(logging.INFO, logger="trio_routines"):
            await given_up_waiting(mock_clock, member, "beat")
            blocker.rollback()  # the call now returns, its caller gone
            await until(lambda: not conn.lock.locked(), "the call returned")
            await wait_all_tasks_blocked()
            mock_clock.jump(BOUND)  # past what was its deadline
            await wait_all_tasks_blocked()
    finally:
        blocker.close()
    assert not member.lost.is_set()
    assert caplog.records == []
    await member.beat(2, T0)  # the connection is still ours, and answers
    assert lock_holders(member.holder) == ["trio_routines brief"]
    await member.leave()


def calls_watched(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Watch the calls on replicas' connections: the names of those started while another
    was still on its connection. (psycopg's lock on a connection is taken per statement:
    two calls at once would interleave their statements, and a leave's close would free
    what the other one's thread is using.)"""
    marking_end = holds.marking_end
    on: list[Any] = []
    beside: list[str] = []

    def watched(fn: Callable[[Any], T], conn: Any, end: Any) -> T:
        def on_it(conn: Any) -> T:  # on the connection: from the call's start to its return,
            if any(other is conn for other in on):  # before its end is told
                beside.append(fn.__name__)
            on.append(conn)
            try:
                return fn(conn)
            finally:
                on.remove(conn)

        return marking_end(on_it, conn, end)

    monkeypatch.setattr(holds, "marking_end", watched)
    return beside


async def test_a_later_call_waits_until_a_call_cut_short_has_left_the_connection(
    mock_clock: MockClock,
    store: PostgresStore,
    schema: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    member = await store.join(info("later"))
    beside = calls_watched(monkeypatch)
    blocker = row_locked(schema, "later")
    taken: list[list[bool]] = []

    async def take() -> None:
        taken.append(await member.take([41]))

    try:
        with caplog.at_level(logging.INFO, logger="trio_routines"):
            await given_up_waiting(mock_clock, member, "beat")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(take)
                await wait_all_tasks_blocked()
                # A thread started for the take would be on the connection by now.
                await trio.to_thread.run_sync(time.sleep, 0.3)
                waited = (taken[:], beside[:])
                blocker.rollback()  # the beat returns, and then the take goes on
    finally:
        blocker.close()
    assert waited == ([], [])
    assert taken == [[True]]
    assert beside == []
    assert not member.lost.is_set()
    assert caplog.records == []
    await member.leave()


def beats_stuck(
    monkeypatch: pytest.MonkeyPatch, member: PostgresPresence
) -> tuple[threading.Event, threading.Event]:
    """Make ``member``'s beats never return until released (they ignore the shutdown of the
    connection: they never touch it), and take out the watch of a call cut short, so that
    nothing but a later call judges it. Returns (a beat is stuck, release them)."""
    stuck, release = threading.Event(), threading.Event()
    marking_end = holds.marking_end

    def beat_stuck(fn: Callable[[Any], T], conn: Any, end: Any) -> T:
        if fn.__name__ != "beat":
            return marking_end(fn, conn, end)

        def never_returning(_: Any) -> T:
            stuck.set()
            release.wait(10)
            return None  # type: ignore[return-value]  # a beat returns nothing

        return marking_end(never_returning, conn, end)

    async def unwatched(*_: Any) -> None:
        pass

    monkeypatch.setattr(holds, "marking_end", beat_stuck)
    monkeypatch.setattr(member, "_outlived", unwatched)
    return stuck, release


async def refused(member: PostgresPresence, said: list[str], call: str = "take") -> None:
    """A take (or ``call="beat"``) that must fail, the presence lost: its message in
    ``said``."""
    made = member.beat(2, T0) if call == "beat" else member.take([41])
    with pytest.raises(StateFault, match="lost its hold") as refusal:
        await made
    said.append(str(refusal.value))


async def test_a_later_call_behind_a_call_cut_short_judges_it_at_that_calls_deadline(
    mock_clock: MockClock,
    store: PostgresStore,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # It waits for the call before it until that call's own deadline, not longer, and judges
    # it then itself (nothing else ends the wait here: see beats_stuck).
    member = await store.join(info("behind"))
    conn = connection(member)
    stuck, release = beats_stuck(monkeypatch, member)
    said: list[str] = []

    try:
        with caplog.at_level(logging.INFO, logger="trio_routines"):
            await given_up_waiting(mock_clock, member, "beat", lambda _: stuck.is_set())
            async with trio.open_nursery() as nursery:
                nursery.start_soon(refused, member, said)
                await wait_all_tasks_blocked()
                mock_clock.jump(BOUND - 3)  # a second before the cut call's deadline
                await wait_all_tasks_blocked()
                kept = (said[:], member.lost.is_set())
                mock_clock.jump(1)  # its deadline
                await wait_all_tasks_blocked()
                then = (said[:], member.lost.is_set())
                release.set()
            await until(lambda: conn.closed, "the connection left behind closed")
    finally:
        release.set()
    assert kept == ([], False)
    assert then == ([f"replica behind lost its hold on {where(store)}"], True)
    why = f"a call given up on by its caller did not return within {BOUND} s"
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        lost_record(store, "behind", why)
    ]


async def test_a_call_on_a_presence_lost_behind_a_call_cut_short_fails_at_once(
    mock_clock: MockClock,
    store: PostgresStore,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A stop: its margin cuts the leave short while it waits behind a beat cut short. The
    # connection ends then (as for any leave given up on before it could start), and a call
    # on the connection after that fails at once, not at the deadline of the beat cut short.
    member = await store.join(info("leaving"))
    conn = connection(member)
    stuck, release = beats_stuck(monkeypatch, member)
    said: list[str] = []
    try:
        with caplog.at_level(logging.INFO, logger="trio_routines"):
            await given_up_waiting(mock_clock, member, "beat", lambda _: stuck.is_set())
            async with trio.open_nursery() as nursery:
                nursery.start_soon(cut_short, member, "leave")
                await wait_all_tasks_blocked()
                mock_clock.jump(2)  # the stop's margin
            lost = member.lost.is_set()
            async with trio.open_nursery() as nursery:
                # (A take is refused by the leave itself; a beat goes to the connection.)
                nursery.start_soon(refused, member, said, "beat")
                await wait_all_tasks_blocked()
                at_once = said[:]
                release.set()  # (else the beat would wait for the one cut short)
            await until(lambda: conn.closed, "the connection closed")
    finally:
        release.set()
    assert lost
    assert at_once == [f"replica leaving lost its hold on {where(store)}"]
    why = "its leave was given up on before it could start"
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        lost_record(store, "leaving", why)
    ]


Cut = tuple[PostgresStore, PostgresPresence, psycopg.Connection[Any], psycopg.Connection[Any]]


def run_cut_at_its_end(
    monkeypatch: pytest.MonkeyPatch, url: str, schema: str, replica: str, call: str, then: str
) -> Cut:
    """A run whose last act is to give up on ``call`` waiting for its replica's row; then
    (``then``) the call ``stalls`` on, or ``returns`` (the row's lock let go) or ``fails``
    (its backend ended) before the run ends, in its thread, unseen by the watch, which
    waits for it no more. Returns the store, the presence, its connection and the one
    holding the row (still locked unless the call returned: the caller closes it)."""
    made: dict[str, Any] = {}
    ended = threading.Event()  # the call's thread is done, its end told

    def told_then_ended(fn: Any, conn: Any, end: ending.CallEnd) -> Any:
        try:
            return ending.marking_end(fn, conn, end)
        finally:
            ended.set()

    monkeypatch.setattr(holds, "marking_end", told_then_ended)
    if then != "stalls":
        # The call's end is told, but the watch is not woken by it.
        monkeypatch.setattr(ending.CallEnd, "tell", lambda end: end.done.set())

    async def main() -> None:
        store = made["store"] = PostgresStore(url, schema=schema, timeout=BOUND - 1)
        member = made["member"] = await store.join(info(replica))
        conn = made["conn"] = connection(member)
        blocker = made["blocker"] = row_locked(schema, replica)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cut_short, member, call)
            pid = conn.info.backend_pid
            await until(lambda: waiting_for_a_lock(pid), "the call waiting for the row")
            nursery.cancel_scope.cancel()  # its caller gives up
        if then == "returns":
            blocker.rollback()
        elif then == "fails":
            with admin() as db:
                db.execute("SELECT pg_terminate_backend(%s)", (pid,))
        if then != "stalls":
            await until(ended.is_set, "the call's end")
        await store.aclose()

    trio.run(main)
    return made["store"], made["member"], made["conn"], made["blocker"]


@pytest.mark.parametrize("call", ["leave", "beat"])
def test_a_call_cut_short_still_on_the_connection_when_the_run_ends_loses_it_then(
    monkeypatch: pytest.MonkeyPatch,
    url: str,
    schema: str,
    caplog: pytest.LogCaptureFixture,
    call: str,
) -> None:
    # A host's program may live on after its run: the connection, and the replica's lock,
    # must not stay behind a call that never returns, with nothing left to wait for its
    # deadline.
    with caplog.at_level(logging.INFO, logger="trio_routines"):
        store, member, conn, blocker = run_cut_at_its_end(
            monkeypatch, url, schema, "ending", call, "stalls"
        )
    try:
        wait_for(lambda: not lock_holders(member.holder), 10, "the replica's lock let go")
        wait_for(lambda: conn.closed, 10, "the connection closed")
    finally:
        blocker.close()
    assert member.lost.is_set()
    why = "the run ended with a call given up on by its caller on it"
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        lost_record(store, "ending", why)
    ]


def test_a_call_cut_short_that_returned_before_the_run_ended_leaves_the_connection_be(
    url: str, schema: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The watch has not yet seen the call return when the run ends: the connection is free,
    # so nothing is lost (it is the host's to leave or to close).
    with caplog.at_level(logging.INFO, logger="trio_routines"):
        _, member, conn, blocker = run_cut_at_its_end(
            monkeypatch, url, schema, "calm", "beat", "returns"
        )
    blocker.close()
    try:
        assert not member.lost.is_set()
        assert caplog.records == []
        assert lock_holders(member.holder) == ["trio_routines calm"]
        assert not conn.closed
    finally:
        conn.close()
        if member._socket is not None:  # our socket on it, left to the host as well
            member._socket.close()


def test_a_call_cut_short_that_failed_before_the_run_ended_loses_the_presence_then(
    url: str, schema: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The watch has not yet seen the call fail when the run ends: lost for that, as it would
    # have been with its caller there.
    with caplog.at_level(logging.INFO, logger="trio_routines"):
        store, member, conn, blocker = run_cut_at_its_end(
            monkeypatch, url, schema, "failed", "beat", "fails"
        )
    blocker.close()
    assert member.lost.is_set()
    why = "AdminShutdown: terminating connection due to administrator command"
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        lost_record(store, "failed", why)
    ]
    wait_for(lambda: conn.closed, 10, "the connection closed")


async def test_a_leave_cut_short_that_returns_in_time_lets_its_connection_go(
    mock_clock: MockClock, store: PostgresStore, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The leave closed the connection itself: nothing is lost, and our socket on it is closed
    # rather than left to the garbage collector.
    member = await store.join(info("late-leave"))
    conn = connection(member)
    line = member._socket
    assert line is not None
    blocker = row_locked(schema, "late-leave")
    try:
        with caplog.at_level(logging.INFO, logger="trio_routines"):
            await given_up_waiting(mock_clock, member, "leave")
            assert member._conn is conn  # still watched
            blocker.rollback()  # the leave now ends, its caller gone
            await until(lambda: member._socket is None, "our socket let go")
    finally:
        blocker.close()
    assert (member._conn, line.fileno(), conn.closed) == (None, -1, True)
    assert not member.lost.is_set()
    assert caplog.records == []
    assert not lock_holders(member.holder)


def test_a_lost_connection_whose_close_hangs_does_not_hold_up_the_end_of_the_run(
    url: str, schema: str
) -> None:
    # Closing may block on a stalled socket: the thread is left to it.
    closing, go_on, closed = threading.Event(), threading.Event(), threading.Event()

    async def lose_the_connection() -> None:
        store = PostgresStore(url, schema=schema, timeout=30)
        member = await store.join(info("hanging"))
        conn = connection(member)
        close = conn.close

        def hanging_close() -> None:
            closing.set()
            go_on.wait(5)
            close()
            closed.set()

        conn.close = hanging_close  # type: ignore[method-assign]
        with admin() as db:
            db.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        with pytest.raises(StateFault):
            await member.beat(1, T0)
        await trio.to_thread.run_sync(closing.wait, 10)
        await store.aclose()

    try:
        trio.run(lose_the_connection)
        ended_while_closing = not closed.is_set()
    finally:
        go_on.set()
    assert closing.is_set()
    assert ended_while_closing
    assert closed.wait(10)  # the thread went on to close it


def test_a_close_waiting_for_a_call_that_never_returns_does_not_keep_the_process_alive() -> None:
    # A host's process exits whatever a call left on a lost connection does.
    script = (
        "import threading, types\n"
        "from trio_routines.stores.postgres import ending\n"
        "busy = threading.Lock()\n"
        "busy.acquire()  # a call on the connection, for good\n"
        "ending.close_later(types.SimpleNamespace(lock=busy, close=lambda: None))\n"
        "print('left to close')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "left to close\n", "")


def test_a_close_left_waiting_runs_in_a_daemon_thread_of_the_stores_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What the test above sees from outside, here where mutation testing sees it too: the
    # interpreter joins every thread but daemon ones at its exit. The name marks the threads
    # whose psycopg log records are taken off psycopg's loggers (conn.py).
    made: list[threading.Thread] = []

    class Recorded(threading.Thread):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(ending, "threading", types.SimpleNamespace(Thread=Recorded))
    busy = threading.Lock()
    busy.acquire()
    closed = threading.Event()
    ending.close_later(types.SimpleNamespace(lock=busy, close=closed.set))
    (thread,) = made
    try:
        assert (thread.daemon, thread.name, closed.is_set()) == (True, THREAD_NAME, False)
    finally:
        busy.release()
    assert closed.wait(10)  # closed once the call has left it
    thread.join(10)


def test_a_close_with_no_thread_to_run_in_is_left_to_the_garbage_collector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Out of threads, the loss still ends (its connection already shut down), with no error.
    class NoThread(threading.Thread):
        def start(self) -> None:
            raise RuntimeError("can't start new thread")

    closed = threading.Event()
    monkeypatch.setattr(ending, "threading", types.SimpleNamespace(Thread=NoThread))
    ending.close_later(types.SimpleNamespace(lock=threading.Lock(), close=closed.set))
    assert not closed.is_set()  # never closed here, where a call may still be on it


def test_a_call_that_ends_after_the_run_tells_its_end_without_an_error() -> None:
    # The watch's run is gone: nothing to wake, and nothing raised in the call's thread.
    async def made() -> ending.CallEnd:
        return ending.CallEnd()

    end = trio.run(made)
    end.tell()
    assert end.done.is_set()
    assert not end.seen.is_set()


# -- joining -------------------------------------------------------------------------------------


async def test_a_join_that_outlives_its_bound_gives_up_and_closes_the_connection_made_late(
    mock_clock: MockClock, store: PostgresStore, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    made_late: list[tuple[psycopg.Connection[Any], socket.socket | None]] = []
    close_both = joining.close_both

    def closed_late(made: tuple[psycopg.Connection[Any], socket.socket | None]) -> None:
        made_late.append(made)
        close_both(made)

    monkeypatch.setattr(joining, "close_both", closed_late)
    said: list[str] = []

    async def join() -> None:
        try:
            await store.join(info("late"))
        except StateFault as exc:
            said.append(str(exc))

    def join_waiting() -> bool:
        with admin() as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_locks WHERE relation = %s::regclass AND NOT granted",
                (table(schema, "replicas").as_string(conn),),
            ).fetchone()
        return bool(row and row[0])

    blocker = psycopg.connect(require_server())  # the join's insert waits for the table
    try:
        blocker.execute(
            sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(table(schema, "replicas"))
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(join)
            await until(join_waiting, "the join waiting for the replicas table")
            mock_clock.jump(BOUND)
            await wait_all_tasks_blocked()
            at_deadline = list(said)
            blocker.rollback()
    finally:
        blocker.close()
    assert at_deadline == [
        f"could not join {where(store)} as replica late: no answer within {BOUND} s"
    ]
    # The thread went on and made the connection (and took the lock): closed there.
    ((late, line),) = await until(lambda: made_late, "the connection made after the join gave up")
    assert late.closed
    assert line is not None
    assert line.fileno() == -1  # our own descriptor on it closed too
    await until(lambda: not lock_holders(replica_lock(schema, "late")), "its lock let go")
    again = await store.join(info("late"))
    await again.leave()


async def test_a_join_with_no_descriptor_left_for_its_socket_says_why_and_closes_the_connection(
    store: PostgresStore, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[psycopg.Connection[Any]] = []
    connect = psycopg.connect

    def connect_spied(*args: Any, **kwargs: Any) -> psycopg.Connection[Any]:
        made.append(connect(*args, **kwargs))
        return made[-1]

    def no_descriptor(fd: int) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(holds.psycopg, "connect", connect_spied)
    monkeypatch.setattr(ending.os, "dup", no_descriptor)
    with pytest.raises(StateFault) as caught:
        await store.join(info("crowded"))
    assert str(caught.value) == (
        f"could not join {where(store)} as replica crowded: OSError: [Errno 24] Too many open files"
    )
    (conn,) = made
    assert conn.closed
    monkeypatch.undo()
    again = await store.join(info("crowded"))
    await again.leave()


async def test_a_socket_that_cannot_be_made_on_the_descriptor_closes_the_duplicate(
    store: PostgresStore, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    duplicated: list[int] = []
    closed: list[int] = []
    dup, close = os.dup, os.close

    def spied_dup(fd: int) -> int:
        duplicated.append(dup(fd))
        return duplicated[-1]

    def spied_close(fd: int) -> None:
        closed.append(fd)
        close(fd)

    def refusing(*, fileno: int) -> socket.socket:
        raise OSError(errno.ENOTSOCK, "Socket operation on non-socket")

    monkeypatch.setattr(ending.os, "dup", spied_dup)
    monkeypatch.setattr(ending.os, "close", spied_close)
    monkeypatch.setattr(
        ending, "socket", types.SimpleNamespace(socket=refusing, SHUT_RDWR=socket.SHUT_RDWR)
    )
    with pytest.raises(StateFault) as caught:
        await store.join(info("odd"))
    monkeypatch.undo()
    assert str(caught.value) == (
        f"could not join {where(store)} as replica odd: "
        "OSError: [Errno 88] Socket operation on non-socket"
    )
    (fd,) = duplicated
    assert fd in closed
    await until(lambda: not lock_holders(replica_lock(schema, "odd")), "no lock of its left")


async def test_a_keepalive_setting_the_server_does_not_know_is_passed_over(
    store: PostgresStore, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As an older server lacks one (tcp_user_timeout came in PostgreSQL 12).
    monkeypatch.setitem(joining.KEEPALIVE, "tcp_no_such_setting", "1")
    member = await store.join(info("older"))
    assert lock_holders(replica_lock(schema, "older")) == ["trio_routines older"]
    await member.leave()


async def test_a_join_the_database_refuses_says_why(store: PostgresStore, schema: str) -> None:
    ddl("ALTER TABLE {} ADD CONSTRAINT refuse CHECK (id <> 'refused')", schema, "replicas")
    try:
        with pytest.raises(StateFault) as caught:
            await store.join(info("refused"))
    finally:
        ddl("ALTER TABLE {} DROP CONSTRAINT refuse", schema, "replicas")
    assert str(caught.value) == (
        f"could not join {where(store)} as replica refused: CheckViolation: new row for "
        'relation "trio_routines_replicas" violates check constraint "refuse"'
    )
    assert await store.replicas() == []


async def test_a_join_forgets_the_replicas_dead_for_over_a_day_and_keeps_the_rest(
    store: PostgresStore, schema: str
) -> None:
    now = datetime.now(UTC)
    # Seen two days ago and alive still (it holds its id's lock): kept.
    old = await store.join(info("old", seen=now - timedelta(days=2)))
    with admin() as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (id, version, host, pid, started, last_seen, in_flight) VALUES "
                "('gone', '0', 'h', 1, now() - interval '3 days', now() - interval '2 days', 0),"
                "('recent', '0', 'h', 2, now() - interval '3 days', now() - interval '1 hour', 0)"
            ).format(table(schema, "replicas"))
        )
    new = await store.join(info("new"))
    members = sorted((m.id, m.alive) for m in await store.replicas())
    assert members == [("new", True), ("old", True), ("recent", False)]
    await new.leave()
    await old.leave()


async def test_a_join_under_the_id_of_a_process_that_died_drops_the_holds_it_left(
    url: str, schema: str
) -> None:
    # A replica killed mid-turn and started again under its id (a fixed --replica, or the
    # default host:1 of a container): its rows' holder is our lock now, so without this they
    # read as held for as long as we live, and every slot of their sessions as busy.
    first = PostgresStore(url, schema=schema, timeout=BOUND - 1)
    dead = await first.join(info("again"))
    assert await dead.take([41, 42]) == [True, True]
    await connection_ended(dead, "again")  # the process dies: its lock goes, its rows stay
    assert held_keys(schema) == [41, 42]
    second = PostgresStore(url, schema=schema, timeout=BOUND - 1)
    try:
        alive = await second.join(info("again"))
        assert held_keys(schema) == []  # dropped at the join, before anything is taken
        assert await alive.take([41, 42]) == [True, True]
        await alive.leave()
    finally:
        await second.aclose()
        with contextlib.suppress(StateFault):
            await dead.leave()
        await first.aclose()


# -- leaving and letting go ------------------------------------------------------------------------


async def test_a_clean_leave_lets_go_of_the_lock_itself_and_refuses_calls_after(
    store: PostgresStore, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    member = await store.join(info("leaving"))
    await store.claim("r", T0, T0, replica="leaving")
    assert await member.take([7]) == [True]
    assert await store.claims_alive([("r", T0)]) == [True]
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        await member.leave()
    assert caplog.records == []
    assert not member.lost.is_set()
    # Let go of before the connection closed: dead at once to everyone, its rows gone.
    assert lock_holders(member.holder) == []
    assert await store.claims_alive([("r", T0)]) == [False]
    assert held_keys(schema) == []
    assert await store.replicas() == []
    with pytest.raises(StateFault) as caught:
        await member.beat(0, T0)
    assert str(caught.value) == f"replica leaving lost its hold on {where(store)}"


async def test_a_let_go_that_fails_is_logged_at_debug_with_why(
    store: PostgresStore, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    member = await store.join(info("dropping"))
    assert await member.take([5]) == [True]
    ddl("ALTER TABLE {} RENAME TO trio_routines_holds_away", schema, "holds")
    try:
        with caplog.at_level(logging.DEBUG, logger="trio_routines"):
            await member.release([5])  # never raises: the server lets go with the connection
    finally:
        ddl("ALTER TABLE {} RENAME TO trio_routines_holds", schema, "holds_away")
    why = (
        f"could not take holds on {where(store)}: UndefinedTable: "
        f'relation "{schema}.trio_routines_holds" does not exist'
    )
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert f"replica dropping could not let go of holds: {why}" in debug
    assert member.lost.is_set()


async def settled(member: PostgresPresence) -> None:
    """Wait for the batch on the member's connection, then for its sender to go on."""
    await wait_all_tasks_blocked()
    await member._batches.lull()
    await wait_all_tasks_blocked()


async def sent(clock: MockClock, member: PostgresPresence) -> None:
    """Let the let-gos' moment pass, then wait for their batch and their sender to end."""
    await wait_all_tasks_blocked()  # the sender waits for its moment
    clock.jump(LET_GO_AFTER)
    await settled(member)


async def test_let_gos_reach_the_table_without_a_take_those_made_together_in_one_batch(
    mock_clock: MockClock, store: PostgresStore, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    member = await store.join(info("sender"))
    assert await member.take([1, 2]) == [True, True]
    assert held_keys(schema) == [1, 2]
    before = member._batches.batches
    with caplog.at_level(logging.DEBUG, logger="trio_routines"):
        member.let_go([1])
        member.let_go([2])
        await sent(mock_clock, member)
        assert held_keys(schema) == []
        assert member._batches.batches - before == 1  # one sender, one statement
        # Again, after the first sender ended: a let-go still needs no take to be sent.
        assert await member.take([1]) == [True]
        member.let_go([1])
        await sent(mock_clock, member)
        assert held_keys(schema) == []
        # One made while a let-go is on its way goes right after it, by the same sender
        # (without a moment waited for, on the MockClock that no longer moves).
        assert await member.take([1, 2]) == [True, True]
        blocker = psycopg.connect(require_server())  # key 1's row: the let-go waits for it
        try:
            blocker.execute(
                sql.SQL("SELECT 1 FROM {} WHERE key = 1 FOR UPDATE").format(table(schema, "holds"))
            )
            member.let_go([1])
            await wait_all_tasks_blocked()  # the sender waits for its moment
            mock_clock.jump(LET_GO_AFTER)
            pid = connection(member).info.backend_pid
            await until(lambda: waiting_for_a_lock(pid), "the let-go on the connection")
            member.let_go([2])
            blocker.rollback()
        finally:
            blocker.close()
        await until(lambda: held_keys(schema) == [], "both let go")
    assert not [r for r in caplog.records if "could not let go" in r.getMessage()]
    await member.leave()


async def test_no_claim_is_made_with_holds_once_the_server_ended_our_connection(
    url: str, schema: str
) -> None:
    # Before this replica heard that the server ended its connection (up to a second), its
    # claims took holds that were dead on arrival: another replica took the session at once,
    # and two turns of it ran side by side.
    from trio_routines.records import ClaimStatus
    from trio_routines.replicas import session_key

    store = PostgresStore(url, schema=schema, timeout=BOUND - 1)
    other = PostgresStore(url, schema=schema, timeout=BOUND - 1)
    try:
        ours = await store.join(info("ended"))
        theirs = await other.join(info("other"))
        session = (session_key("routine:r"),)
        taken = await store.claim("r", T0, T0, replica="ended", holds=(ours.holder, session))
        assert (taken.status, taken.holds) == (ClaimStatus.TAKEN, (True,))
        await connection_ended(ours, "ended")
        later = T0 + timedelta(minutes=1)
        with pytest.raises(StateFault) as refused:
            await store.claim("r", later, later, replica="ended", holds=(ours.holder, session))
        assert str(refused.value) == (
            f"could not claim slot {format_iso(later)} of 'r': this "
            f"replica's hold on {store.where} is gone (its connection ended)"
        )
        assert [f.slot for f in await other.history("r")] == [T0]  # nothing was written
        # A claim without holds (no presence of its own) is decided as ever, and the other
        # replica, whose lock is held, claims with its holds.
        plain = await store.claim("q", T0, T0)
        assert plain.status is ClaimStatus.TAKEN
        again = await other.claim(
            "r", later, later, replica="other", holds=(theirs.holder, session)
        )
        assert (again.status, again.holds) == (ClaimStatus.TAKEN, (True,))
        await theirs.leave()
    finally:
        with contextlib.suppress(StateFault):
            await ours.leave()
        await store.aclose()
        await other.aclose()
