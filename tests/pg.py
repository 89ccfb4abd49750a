"""PostgreSQL helpers for the tests, and a worker script the race tests run as processes.

The server comes from ``TRIO_ROUTINES_TEST_PG``. When it cannot be reached the tests are
skipped with the reason -- except under ``CI``, where that is a failure: in CI these tests must
never be skipped silently.

As a script (``python tests/pg.py <command> <url> <schema> ...``) it opens a
:class:`PostgresStore`, prints ``ready``, waits for a line on stdin (the starting gun, so
every process races from the same instant) and then runs one command.
"""

from __future__ import annotations

import atexit
import functools
import os
import random
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
T0 = datetime(2026, 7, 7, 10, 0, tzinfo=UTC)


def server_url() -> str:
    return os.environ.get("TRIO_ROUTINES_TEST_PG") or DEFAULT_URL


@functools.cache
def _unreachable() -> str | None:
    try:
        with psycopg.connect(server_url(), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return " ".join(str(exc).split())
    return None


def require_server() -> str:
    """The server URL; skips the test (fails it under CI) when the server is unreachable."""
    import pytest

    problem = _unreachable()
    if problem is not None:
        reason = f"PostgreSQL at {server_url()} is unreachable (set TRIO_ROUTINES_TEST_PG): "
        if os.environ.get("CI"):
            pytest.fail(reason + problem, pytrace=False)
        pytest.skip(reason + problem)
    return server_url()


def admin() -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(server_url(), autocommit=True, connect_timeout=10)


#: Set by ``scripts/mutation.py`` to the module under test: every schema is made afresh and
#: dropped after its test, and its name starts with ``trm_<module>_``, so that the script can
#: drop what a mutant's process killed in the middle of a test left behind.
MUTATION_RUN = os.environ.get("TRIO_ROUTINES_TEST_MUTATION", "")
_PREFIX = f"trm_{MUTATION_RUN}_" if MUTATION_RUN else "trt_"


@contextmanager
def fresh_schema() -> Iterator[str]:
    """A uniquely named, not yet existing schema, dropped (with its tables) afterwards."""
    name = f"{_PREFIX}{uuid.uuid4().hex[:16]}"
    try:
        yield name
    finally:
        with admin() as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@contextmanager
def schema_url(via: str | None = None) -> Iterator[str]:
    """A fresh schema, created (dropped afterwards), and a URL whose connections work in it:
    the server's, or ``via`` (a relay's in front of it). What a ``serve`` process is given."""
    url = require_server()
    base = via or url
    with fresh_schema() as schema:
        with admin() as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        sep = "&" if "?" in base else "?"
        yield f"{base}{sep}options=-csearch_path%3D{schema}"


#: Schemas this process used and emptied, each at the current version: see ``pooled_schema``.
_pool: list[str] = []
_owner = os.getpid()  # the process the pool and the emptying connection belong to
_made: list[str] = []
_KEEP = "trio_routines_schema"  # the version table: kept, so a reused schema needs no migration
_emptier: list[psycopg.Connection[tuple[object, ...]]] = []  # the connection that empties them


def _emptying() -> psycopg.Connection[tuple[object, ...]]:
    """This process's connection for emptying pooled schemas, opened once: a connection per
    test given back was a server process started and ended per test."""
    if _emptier and not _emptier[0].closed:
        return _emptier[0]
    _emptier[:] = [admin()]
    _emptier[0].execute("SET lock_timeout = '5s'")
    return _emptier[0]


@contextmanager
def pooled_schema() -> Iterator[str]:
    """A schema of this process's, as a new database looks to the store contract: no rows.

    Creating and migrating a schema per test, then dropping it, was most of a PostgreSQL
    contract test's time. A schema given back is emptied (every row of every table but the
    version table deleted, in one transaction) and handed to the next test of this process;
    one whose emptying fails is dropped instead. ``DELETE``, not ``TRUNCATE``: a test leaves a
    few rows, and a ``TRUNCATE`` gives each table new files (25-100 ms a schema, against
    2-13 ms). Tests of migrations and of what an empty database does use ``fresh_schema``.
    The schemas are dropped when the process exits.

    Not in a mutation run: each mutant's process is forked, two at a time, and ends without
    running exit hooks, so a pool would be shared with a sibling (schemas and the emptying
    connection alike) or left behind. There, and in any process forked from one that pooled,
    each test gets a schema of its own, dropped after it.
    """
    if MUTATION_RUN or os.getpid() != _owner:
        with fresh_schema() as name:
            yield name
        return
    if not _made:
        atexit.register(_drop_pool)
    name = _pool.pop() if _pool else f"{_PREFIX}{uuid.uuid4().hex[:16]}"
    if name not in _made:
        _made.append(name)
    try:
        yield name
    finally:
        try:
            conn = _emptying()
            tables = [
                sql.Identifier(name, table)
                for (table,) in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename <> %s",
                    (name, _KEEP),
                )
            ]
            # A connection left holding a row: dropped instead, not waited for (lock_timeout).
            with conn.transaction():
                for table in tables:
                    conn.execute(sql.SQL("DELETE FROM {}").format(table))
        except psycopg.Error:
            for emptier in _emptier:
                emptier.close()  # a new one next time, whatever state this one is in
            _emptier.clear()
            _made.remove(name)
            _drop(name)
        else:
            _pool.append(name)


def _drop(name: str) -> None:
    with admin() as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def _drop_pool() -> None:
    for emptier in _emptier:
        emptier.close()
    for name in _made:
        try:
            _drop(name)
        except psycopg.Error:
            pass


def kill_backends(application_name: str) -> int:
    """Terminate every backend connected under ``application_name``; how many were."""
    with admin() as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            (application_name,),
        ).fetchall()
    return sum(1 for (killed,) in rows if killed)


def with_app_name(url: str, application_name: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}application_name={application_name}"


class Proxy:
    """tests/tcpproxy.py in front of the server: ``url`` goes through it.

    ``freeze()`` stops the proxy (SIGSTOP) until ``thaw()``, ``hold()`` holds the server's
    answers until ``release()`` (``hold_at_commit()``: from the next commit on); a watchdog
    undoes either after ``watchdog`` seconds whatever happens, so a test whose code under test
    hangs on the stall fails (``thawed_late`` is then true) instead of hanging the suite.
    """

    def __init__(self, url: str, watchdog: float = 90.0) -> None:
        parts = urlsplit(url)
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("tcpproxy.py")), str(parts.port or 5432)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())
        netloc = parts.netloc.rpartition("@")[0]
        netloc = f"{netloc}@127.0.0.1:{self.port}" if netloc else f"127.0.0.1:{self.port}"
        self.url = urlunsplit(parts._replace(netloc=netloc))
        self.watchdog = watchdog
        self.thawed_late = False
        self._timer: threading.Timer | None = None

    def freeze(self) -> None:
        """Stop the proxy whole: a silent stall in both directions."""
        self.proc.send_signal(signal.SIGSTOP)
        self._arm(signal.SIGCONT)

    def thaw(self) -> None:
        self._disarm()
        self.proc.send_signal(signal.SIGCONT)

    def hold(self) -> None:
        """Hold the server's answers (requests still reach it); returns once in effect."""
        self._ask(signal.SIGUSR1, "held")
        self._arm(signal.SIGUSR2)

    def hold_at_commit(self) -> None:
        """Hold the server's answers from the next request carrying a commit on (the commit
        reaches the server); returns once armed: :meth:`wait_held` waits for the commit."""
        self._ask(signal.SIGHUP, "armed")

    def wait_held(self) -> None:
        """Block until an armed hold took effect (a commit passed); the watchdog starts."""
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline() == "held\n"
        self._arm(signal.SIGUSR2)

    def release(self) -> None:
        self._disarm()
        self._ask(signal.SIGUSR2, "released")

    def _ask(self, signum: int, answer: str) -> None:
        assert self.proc.stdout is not None
        self.proc.send_signal(signum)
        assert self.proc.stdout.readline() == f"{answer}\n"

    def _arm(self, undo: int) -> None:
        def late() -> None:
            self.thawed_late = True
            self.proc.send_signal(undo)

        self._timer = threading.Timer(self.watchdog, late)
        self._timer.daemon = True
        self._timer.start()

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        self._disarm()
        self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


# -- the worker script --------------------------------------------------------------------


async def _work(command: str, url: str, schema: str, args: list[str]) -> None:
    import trio

    from trio_routines.errors import InvalidWakeup
    from trio_routines.stores.postgres import PostgresStore
    from trio_routines.wakeups import WakeupRequest

    store = PostgresStore(url, schema=schema)
    try:
        if command != "open":
            await store.latest_fire("warm-up")  # opens the pool and the schema before the gun
        print("ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.readline)
        if command == "open":
            await store.latest_fire("warm-up")
        elif command == "claim":
            routine, count, effects = args[0], int(args[1]), args[2]
            minutes = list(range(count))
            if args[3:4] == ["shuffled"]:
                random.Random(int(args[4])).shuffle(minutes)
            fd = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                for minute in minutes:
                    slot = T0 + timedelta(minutes=minute)
                    if (await store.claim(routine, slot, slot)).taken:
                        # the "turn": a side effect that must happen once per slot
                        os.write(fd, f"{minute} {os.getpid()}\n".encode())
            finally:
                os.close(fd)
        elif command == "take":
            now = datetime.fromisoformat(args[0])
            while (wakeup := await store.take_due_wakeup(now)) is not None:
                print(f"took {wakeup.id}", flush=True)
        elif command == "add":
            session, count = args[0], int(args[1])
            for _ in range(count):
                request = WakeupRequest(session=session, prompt="p", fire_at=T0 + timedelta(days=1))
                try:
                    await store.add_wakeup(request, T0)
                    print("added", flush=True)
                except InvalidWakeup:
                    print("refused", flush=True)
        else:
            raise SystemExit(f"unknown command {command!r}")
    finally:
        await store.aclose()


if __name__ == "__main__":
    import trio

    trio.run(_work, sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
