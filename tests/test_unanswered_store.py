"""A store that does not answer a command's or a request's call: our deadline ends the wait.

``pause``, ``resume``, ``status``, ``history``, ``wake`` and ``unwake`` (processes of their own),
and ``GET /routines/{name}/history`` and the wake-up routes (a real server on loopback), against
a real PostgreSQL whose table the call needs is locked by the test. The deadline is the one of
the runtime's store calls (``STORE_TIMEOUT``, a scheduler's ``store_timeout``), set to a second
here. The store's own bound (5 s, the server's lock timeout, for a command; a minute for the
server) is longer: only our deadline can end the wait with the line it says. A command cut off
ends in one line and changes nothing; the request gets a 503 of one line, and a change it
asked for is not made once the lock is gone either (the thread left with it rolls it back).
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import psycopg
import pytest
import trio
from pg import schema_url, server_url, with_app_name
from procs import Env, one_line, wait_for
from psycopg import sql

from trio_routines import Routine, Scheduler, serve
from trio_routines.stores.postgres import PostgresStore
from trio_routines.testing import ScriptedAgent
from trio_routines.wakeups import WakeupRequest

pytestmark = pytest.mark.slow  # processes, and a real second of waiting each

# ``python -m trio_routines`` with the command line's store deadline at the first argument.
WITH_DEADLINE = (
    "import sys; from trio_routines.cli import main, output; "
    "output.STORE_TIMEOUT = float(sys.argv.pop(1)); sys.exit(main(sys.argv[1:]))"
)


@pytest.fixture
def app_url() -> Iterator[tuple[str, str, str]]:
    """A fresh schema with the store's tables: (its URL naming our application, the
    application's name, the schema)."""
    with schema_url() as url:
        app = f"unanswered_{uuid.uuid4().hex[:12]}"

        async def tables() -> None:
            store = PostgresStore(url)
            await store.paused()  # the first call makes the tables
            await store.aclose()

        trio.run(tables)
        yield with_app_name(url, app), app, url.rpartition("%3D")[2]


def _locked(schema: str, locked: str) -> psycopg.Connection[tuple[object, ...]]:
    """A connection whose open transaction holds a table locked: ``locked`` names it, and,
    after a space, the mode (``SHARE``: read, not written), by default against every use."""
    table, _, mode = locked.partition(" ")
    conn = psycopg.connect(server_url(), connect_timeout=10)
    name = sql.Identifier(schema, f"trio_routines_{table}")
    how = sql.SQL(mode or "ACCESS EXCLUSIVE")
    conn.execute(sql.SQL("LOCK TABLE {} IN {} MODE").format(name, how))
    return conn


def _gone(app: str) -> bool:
    with psycopg.connect(server_url(), autocommit=True, connect_timeout=10) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)
        ).fetchone()
    return row is not None and row[0] == 0


def _rows(schema: str, table: str) -> list[tuple[object, ...]]:
    with psycopg.connect(server_url(), autocommit=True, connect_timeout=10) as conn:
        name = sql.Identifier(schema, f"trio_routines_{table}")
        return conn.execute(sql.SQL("SELECT routine FROM {}").format(name)).fetchall()


def _command(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", WITH_DEADLINE, "1", *env.argv(*args)[3:]]
    return subprocess.run(
        argv, capture_output=True, text=True, cwd=env.root, env=env.environ(), timeout=60
    )


@pytest.mark.parametrize(
    ("args", "locked", "paused", "asked"),
    [
        # Its read of the paused routines answers (it says a routine paused already so); its
        # change waits.
        (("pause", "daily"), "paused SHARE", [], 'pausing "daily") — the pause is not confirmed'),
        (("pause", "daily"), "paused", [], "reading the paused routines) — try again once it"),
        # Its read of the paused routines answers; its change waits (its DELETE made, its
        # INSERT of the resume's instant waiting): never committed.
        (("resume", "daily"), "resumed", [("daily",)], 'resuming "daily") — the resume is not'),
        (("status",), "claims", [], 'reading the claims of "daily") — try again once it answers'),
        (("history", "daily"), "claims", [], 'reading the history of "daily") — try again once'),
    ],
)
def test_a_command_whose_store_does_not_answer_ends_in_one_line_changing_nothing(
    tmp_path: Path,
    app_url: tuple[str, str, str],
    args: tuple[str, ...],
    locked: str,
    paused: list[tuple[object, ...]],
    asked: str,
) -> None:
    url, app, schema = app_url
    env = Env(tmp_path)
    env.state = url  # type: ignore[assignment]
    env.routine("daily", cron="0 9 * * *")
    if paused:
        assert env.cli("pause", "daily").returncode == 0
    assert _rows(schema, "paused") == paused
    blocker = _locked(schema, locked)
    try:
        result = _command(env, *args)
    finally:
        blocker.rollback()
        blocker.close()
    assert (result.returncode, result.stdout) == (1, "")
    line = one_line(result.stderr)
    assert line.startswith("error: the state store postgresql://")
    assert f" did not answer within 1s ({asked}" in line
    # Nothing changed: the command's connection ended with its process, its change never
    # committed, even now that the lock is gone.
    wait_for(lambda: _gone(app), 30, "the command's connections to end")
    assert _rows(schema, "paused") == paused
    assert _rows(schema, "resumed") == []


def _wakeup_ids(schema: str) -> list[object]:
    with psycopg.connect(server_url(), autocommit=True, connect_timeout=10) as conn:
        name = sql.Identifier(schema, "trio_routines_wakeups")
        rows = conn.execute(sql.SQL("SELECT id FROM {} ORDER BY seq").format(name)).fetchall()
    return [row[0] for row in rows]


WAKE = ("wake", "--session", "chat:1", "--in", "2h", "--prompt")
NOT_CONFIRMED = "is not confirmed: try again once it answers"


@pytest.mark.parametrize(
    ("args", "asked"),
    [
        (
            (*WAKE, "again"),
            'adding a wake-up for session "chat:1") — the wake-up is not confirmed: once the'
            " store answers, look for it before adding it again",
        ),
        (
            ("unwake", "{id}", "--session", "chat:1"),
            f'cancelling wake-up "{{id}}" of session "chat:1") — the cancellation {NOT_CONFIRMED}',
        ),
    ],
)
def test_a_wakeup_change_whose_store_does_not_answer_ends_in_one_line_changing_nothing(
    tmp_path: Path, app_url: tuple[str, str, str], args: tuple[str, ...], asked: str
) -> None:
    url, app, schema = app_url
    env = Env(tmp_path)
    env.state = url  # type: ignore[assignment]
    added = env.cli(*WAKE, "first", "--json")
    assert added.returncode == 0, added.stderr
    wid = json.loads(added.stdout)["id"]
    blocker = _locked(schema, "wakeups")
    try:
        result = _command(env, *(arg.format(id=wid) for arg in args))
    finally:
        blocker.rollback()
        blocker.close()
    assert (result.returncode, result.stdout) == (1, "")
    line = one_line(result.stderr)
    assert line.startswith("error: the state store postgresql://")
    assert line.endswith(f" did not answer within 1s ({asked.format(id=wid)}\n")
    # Nothing changed: the command's connection ended with its process, its change never
    # committed, even now that the lock is gone.
    wait_for(lambda: _gone(app), 30, "the command's connections to end")
    assert _wakeup_ids(schema) == [wid]


def _request(
    port: int, path: str, method: str = "GET", body: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        if body is None:
            conn.request(method, path)
        else:
            sent = json.dumps(body).encode()
            conn.request(method, path, sent, {"Content-Type": "application/json"})
        response = conn.getresponse()
        headers = {k.lower(): v for k, v in response.getheaders()}
        return response.status, headers, response.read()
    finally:
        conn.close()


async def test_a_history_read_the_store_does_not_answer_is_a_503_of_one_line(
    app_url: tuple[str, str, str],
) -> None:
    url, _, schema = app_url
    # The store's own bound is a minute: only the scheduler's deadline can end the read.
    store = PostgresStore(url, timeout=60)
    daily = Routine(name="daily", prompt="p", cron="0 9 * * *")
    scheduler = Scheduler(
        agent=ScriptedAgent(), store=store, routines=[daily], external_clock=True, store_timeout=1
    )
    try:
        async with trio.open_nursery() as nursery:
            start = partial(serve, scheduler, http=("127.0.0.1", 0), signals=())
            port = await nursery.start(start)
            assert isinstance(port, int)
            ok, _, body = await trio.to_thread.run_sync(_request, port, "/routines/daily/history")
            assert (ok, json.loads(body)) == (200, [])
            blocker = await trio.to_thread.run_sync(_locked, schema, "claims")
            try:
                status, headers, body = await trio.to_thread.run_sync(
                    _request, port, "/routines/daily/history"
                )
            finally:
                blocker.rollback()
                blocker.close()
            scheduler.stop(0)
    finally:
        await store.aclose()
    assert_503(status, headers, body, 'the history of "daily" is unreadable right now')


def assert_503(status: int, headers: dict[str, str], body: bytes, error: str) -> None:
    """A 503 to try again in 5 s, its body the one-line JSON ``error``."""
    assert (status, headers["content-type"], headers["retry-after"]) == (
        503,
        "application/json",
        "5",
    )
    assert b"\n" not in body
    assert json.loads(body) == {"error": error}


def _locks_on_wakeups(app: str, schema: str) -> list[bool]:
    """Whether each lock our application's connections hold or wait for on the wake-ups
    table is granted: a call waits while one is not; none once its transaction ended."""
    with psycopg.connect(server_url(), autocommit=True, connect_timeout=10) as conn:
        rows = conn.execute(
            "SELECT l.granted FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE a.application_name = %s AND n.nspname = %s "
            "AND c.relname = 'trio_routines_wakeups'",
            (app, schema),
        ).fetchall()
    return [bool(row[0]) for row in rows]


@asynccontextmanager
async def cut_off_while_locked(
    schema: str, locks: Callable[[], list[bool]], what: str
) -> AsyncIterator[None]:
    """The wake-ups table locked through the block, where a call is cut off by its deadline;
    then until that call, left to its thread, waits for the lock, and once the lock is gone
    until it has ended its transaction (``what`` names it in a bound's message)."""
    blocker = await trio.to_thread.run_sync(_locked, schema, "wakeups")
    try:
        yield
        # The call cut off still waits for the lock, in the thread it was left to.
        await trio.to_thread.run_sync(
            wait_for, lambda: False in locks(), 30, f"{what} left to wait for the lock"
        )
    finally:
        blocker.rollback()
        blocker.close()
    await trio.to_thread.run_sync(
        wait_for, lambda: not locks(), 30, f"{what} left to end its transaction"
    )


NOT_ANSWERED = "the wake-up state did not answer within 1s; the {} is not confirmed — try again"


@pytest.mark.parametrize(
    ("method", "path", "body", "error"),
    [
        (
            "POST",
            "/wakeups",
            {"session": "chat:1", "prompt": "again", "in": "3h"},
            NOT_ANSWERED.format("wake-up").replace(
                "try again", "list the session's wake-ups before adding it again"
            ),
        ),
        ("GET", "/wakeups?session=chat:1", None, "the wake-up state is unreadable right now"),
        ("DELETE", "/wakeups/{id}?session=chat:1", None, NOT_ANSWERED.format("cancellation")),
    ],
)
async def test_a_wakeup_call_the_store_does_not_answer_is_a_503_of_one_line_changing_nothing(
    app_url: tuple[str, str, str],
    method: str,
    path: str,
    body: dict[str, str] | None,
    error: str,
) -> None:
    url, app, schema = app_url
    # The store's own bound is a minute: only the scheduler's deadline can end the call.
    store = PostgresStore(url, timeout=60)
    scheduler = Scheduler(
        agent=ScriptedAgent(), store=store, external_clock=True, wakeups=False, store_timeout=1
    )
    first = {"session": "chat:1", "prompt": "first", "in": "2h"}
    locks = partial(_locks_on_wakeups, app, schema)
    try:
        async with trio.open_nursery() as nursery:
            start = partial(serve, scheduler, http=("127.0.0.1", 0), signals=())
            port = await nursery.start(start)
            assert isinstance(port, int)
            added, _, made = await trio.to_thread.run_sync(
                _request, port, "/wakeups", "POST", first
            )
            assert added == 201, made
            wid = json.loads(made)["wakeup"]["id"]
            async with cut_off_while_locked(schema, locks, "the call"):
                status, headers, answer = await trio.to_thread.run_sync(
                    _request, port, path.format(id=wid), method, body
                )
            _, _, listed = await trio.to_thread.run_sync(_request, port, "/wakeups")
            scheduler.stop(0)
    finally:
        await store.aclose()
    assert_503(status, headers, answer, error)
    # Nothing changed, now that the lock is gone and the call left to its thread has ended.
    assert _wakeup_ids(schema) == [wid]
    assert [entry["id"] for entry in json.loads(listed)] == [wid]


async def test_a_due_wakeup_taken_for_a_caller_that_gave_up_stays_pending(
    app_url: tuple[str, str, str],
) -> None:
    # The wake loop's take cut off by its deadline: the thread it was left to takes the
    # wake-up once the lock is gone, for nobody. Rolled back, it stays for the next poll.
    url, app, schema = app_url
    store = PostgresStore(url, timeout=60)
    locks = partial(_locks_on_wakeups, app, schema)
    try:
        now = datetime.now(UTC)
        request = WakeupRequest(
            session="chat:1", prompt="again", fire_at=now + timedelta(minutes=2)
        )
        added = await store.add_wakeup(request, now)
        due = now + timedelta(minutes=3)
        async with cut_off_while_locked(schema, locks, "the take"):
            with trio.move_on_after(1) as cut:
                await store.take_due_wakeup(due)
            assert cut.cancelled_caught
        assert _wakeup_ids(schema) == [added.id]
        taken = await store.take_due_wakeup(due)  # the next poll's take finds it
        assert taken is not None
        assert taken.id == added.id
    finally:
        await store.aclose()
