from __future__ import annotations

import gc
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import bytecode_cache  # noqa: F401  (first: compiled code is cached, see its doc)
import pytest
import trio
from hypothesis import HealthCheck, settings
from mutation_bounds import pytest_runtest_protocol  # noqa: F401  (a hook: bounds under mutation)
from procs import Env

from trio_routines.cron import days as cron_days
from trio_routines.cron import schedule as cron_schedule
from trio_routines.store import Store
from trio_routines.stores.directory import DirectoryStore
from trio_routines.stores.directory.wakeupjournal import Journal
from trio_routines.testing import MemoryStore

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile(
    "ci",
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
# Mutation testing (scripts/mutation.py) runs a module's tests once per mutant: few examples.
settings.register_profile("mutation", max_examples=10, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.fixture(autouse=True)
def _cold_cron_caches() -> None:
    """Every test starts with empty cron caches, so it runs the parsing and searching it asks for.

    A parsed schedule is cached with what it has already found (the last answer, "never
    fires"): a test meeting one cached by an earlier test would skip the code it means to
    exercise. Mutation testing runs a mutant's tests in a process forked after the clean run
    (docs/mutation.md), where every cache holds answers from the unmutated code.
    """
    cron_schedule.PARSED.clear()
    cron_schedule._day_offsets.cache_clear()
    cron_schedule._zone.cache_clear()
    cron_days._rule.cache_clear()
    cron_days.bit_list.cache_clear()


MEMORY_TEMP = Path("/dev/shm")
MEMORY_TEMP_FREE = 512 * 2**20  # bytes: the runs pytest keeps (3) need a few dozen MB


def pytest_configure(config: pytest.Config) -> None:
    """``tmp_path`` and the state directories in it live in memory (``/dev/shm``) when that
    is a tmpfs with room to spare, unless ``PYTEST_DEBUG_TEMPROOT`` (pytest's own setting)
    says where. On a disk, a test's temporary directory (pytest makes it, links the newest
    to it and removes old runs') costs about 2 ms of CPU, and the state directory's files
    and their flushes more: seconds of each run of the fast subset. The code under test is
    the same: on a tmpfs the flushes (fsync, syncfs) return at once."""
    if os.environ.get("PYTEST_DEBUG_TEMPROOT") or config.option.basetemp:
        return
    try:
        mounts = Path("/proc/mounts").read_text().split("\n")
        room = os.statvfs(MEMORY_TEMP)
    except OSError:
        return
    memory = any(m.split()[1:3] == [str(MEMORY_TEMP), "tmpfs"] for m in mounts if m)
    roomy = room.f_bavail * room.f_frsize >= MEMORY_TEMP_FREE
    if memory and roomy and os.access(MEMORY_TEMP, os.W_OK | os.X_OK):
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(MEMORY_TEMP)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What the imports and the collection made lives as long as the run: moved out of the
    collector's sight (``gc.freeze``), a full collection walks only what the tests made."""
    gc.freeze()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers for each core this process may use. Much of a test's time is
    spent waiting -- for PostgreSQL, for a child process, for a real deadline to pass -- and
    the other workers keep the cores busy meanwhile."""
    return 2 * len(os.sched_getaffinity(0))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist worksteal``, each worker's first share starts with its part of the slow
    tests. The scheduler sends each worker a contiguous share of the collection, and an idle
    worker steals the back half of the longest queue: in collection order, the slow tests (a
    few of them over a minute, mostly waiting) sat in one or two shares and started late, and
    the suite ended with them running alone. Dealt round-robin to the shares' fronts (the
    ``longest`` first), they start at once, side by side, and the fast tests behind them fill
    the end. Every worker collects the same order (the scheduler requires it); other runs
    keep the file order."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or workerinput.get("dist") != "worksteal":
        return
    count = int(workerinput["workercount"])
    slow = [item for item in items if item.get_closest_marker("slow")]
    slow.sort(key=lambda item: item.get_closest_marker("longest") is None)  # those first
    fast = [item for item in items if not item.get_closest_marker("slow")]
    ordered: list[pytest.Item] = []
    left = len(items)
    for worker in range(count):
        size = left // (count - worker)  # the scheduler's first share for this worker
        mine = slow[worker::count]
        take = max(0, size - len(mine))
        ordered += mine + fast[:take]
        fast = fast[take:]
        left -= size
    items[:] = ordered + fast


def pytest_configure_node(node: Any) -> None:
    """pytest-xdist, in the controller: tell each worker the distribution mode (a worker's own
    ``--dist`` reads ``no``), for :func:`pytest_collection_modifyitems`."""
    node.workerinput["dist"] = node.config.getoption("dist")


STORE_KINDS = ["memory", "directory", "postgres"]


@pytest.fixture(params=STORE_KINDS)
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Store]]:
    """Builds stores of one kind; every store built in one test shares the same state."""
    kind = request.param
    shared: dict[str, MemoryStore] = {}
    with ExitStack() as cleanup:
        if kind == "postgres":
            # Imported here: the PostgreSQL extra is optional for the other kinds.
            from pg import pooled_schema, require_server

            from trio_routines.stores.postgres import PostgresStore

            url = require_server()
            schema = cleanup.enter_context(pooled_schema())  # empty, as a new database's

        def build(**kwargs: object) -> Store:
            if kind == "memory":
                # One in-memory state per test, whatever the options.
                existing = shared.get("store")
                if existing is None:
                    existing = shared["store"] = MemoryStore(**kwargs)  # type: ignore[arg-type]
                return existing
            if kind == "postgres":
                built = PostgresStore(url, schema=schema, **kwargs)  # type: ignore[arg-type]
                cleanup.callback(trio.run, built.aclose)  # closing twice is harmless
                return built
            return DirectoryStore(tmp_path / "state", **kwargs)  # type: ignore[arg-type]

        yield build


@pytest.fixture
async def store(store_factory: Callable[..., Store]) -> AsyncIterator[Store]:
    built = store_factory()
    yield built
    await built.aclose()


def _ended(project: Env) -> None:
    """Every process the test started and left running is killed."""
    for proc in project.procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    project = Env(tmp_path)
    yield project
    _ended(project)


@pytest.fixture(params=["directory", "postgres"])
def env_on_either_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    """An :class:`Env` whose processes share a state directory, or a fresh PostgreSQL schema:
    replicas' tests run on both (a module takes it as its ``env``)."""
    project = Env(tmp_path)
    if request.param == "postgres":
        from pg import schema_url  # the PostgreSQL extra is optional for the directory

        with schema_url() as url:
            project.state = url  # type: ignore[assignment]
            yield project
            _ended(project)  # before the schema is dropped
        return
    yield project
    _ended(project)


@pytest.fixture
def journal_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every read of the state directory's wake-up journal lines: (from offset, up to size)."""
    seen: list[tuple[int, int]] = []
    real = Journal.read

    def counting(self: Journal, fd: int, offset: int, size: int) -> bytes:
        seen.append((offset, size))
        return real(self, fd, offset, size)

    monkeypatch.setattr(Journal, "read", counting)
    return seen
