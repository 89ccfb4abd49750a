"""PostgreSQL bursts: N routines due at one instant, 1, 2 or 4 scheduler processes
sharing one database, against APScheduler 4 with its SQLAlchemy data store on the same server.

As a script (``python benchmarks/pgbench.py CASE JSON-PARAMS``) it runs one process's part of
a case and prints its result as the last line of JSON; :func:`bench_postgres` drives the
cases from ``run.py`` and checks, in every run, that each slot ran exactly once across the
processes: the turns each process started are appended to one shared file (``O_APPEND``, one
line per turn), which must hold every routine once, and the claims table must hold N rows.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
PYTHON = sys.executable


# -- one process's part ---------------------------------------------------------------------


class _Effects:
    """Appends ``<name> <pid>`` per started turn to a file shared by every process."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.starts: list[float] = []

    def note(self, name: str) -> None:
        self.starts.append(time.time())
        os.write(self.fd, f"{name} {os.getpid()}\n".encode())


def burst_pg(n: int, slot: float, schema: str, effects: str, timeout: float) -> dict[str, Any]:
    """One trio_routines scheduler with all ``n`` routines, due at the real instant ``slot``."""
    import trio
    from cases import routine_names, slot_clock, trio_deadline

    from trio_routines import Completed, Routine, Scheduler
    from trio_routines.stores.postgres import PostgresStore

    out = _Effects(effects)

    class Agent:
        async def invoke(self, session: str, text: str) -> AsyncIterator[Any]:
            out.note(session.removeprefix("routine:"))
            yield Completed()

    store = PostgresStore(PG_URL, schema=schema, timeout=30.0)
    routines = [Routine(name=name, prompt="p", cron="* * * * *") for name in routine_names(n)]

    async def main() -> dict[str, Any]:
        scheduler = Scheduler(
            agent=Agent(), store=store, routines=routines, now=slot_clock(slot), wakeups=False
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(scheduler.run)
            armed = time.time()
            with trio.move_on_at(trio_deadline(slot + timeout)):
                # Every slot decided here (taken and settled, or a duplicate): poll as a host.
                while sum(scheduler.statistics().outcomes.values()) < n:  # noqa: ASYNC110
                    await trio.sleep(0.002)
            outcomes = dict(scheduler.statistics().outcomes)
            scheduler.stop(0)
        batches = store._batches.claims.batches
        await store.aclose()
        return {
            "starts": out.starts,
            "armed_before_slot_s": slot - armed,
            "outcomes": outcomes,
            "claim_batches": batches,
        }

    return trio.run(main)


def aps_setup(n: int, schema: str, slot: float) -> dict[str, Any]:
    """Create APScheduler's tables in ``schema`` and add ``n`` cron schedules due at ``slot``
    and at no other instant (every field fixed: a run that outlasts a minute must not count
    the next minute's fires as second runs)."""
    import anyio
    from apscheduler import AsyncScheduler
    from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore
    from apscheduler.triggers.cron import CronTrigger
    from cases import routine_names

    async def main() -> None:
        store = SQLAlchemyDataStore(_aps_url(), schema=schema)
        async with AsyncScheduler(store) as scheduler:
            at = datetime.fromtimestamp(slot, UTC)
            fields = dict(year=at.year, month=at.month, day=at.day, hour=at.hour)
            for name in routine_names(n):
                trigger = CronTrigger(**fields, minute=at.minute, second=at.second, timezone="UTC")
                await scheduler.add_schedule(aps_job, trigger, id=name, args=[name])

    started = time.perf_counter()
    anyio.run(main, backend="asyncio")
    return {"setup_s": time.perf_counter() - started}


_APS_EFFECTS: list[_Effects] = []


def aps_job(name: str) -> None:
    _APS_EFFECTS[0].note(name)


def burst_aps_pg(n: int, slot: float, schema: str, effects: str, timeout: float) -> dict[str, Any]:
    """One APScheduler 4 scheduler on the shared SQLAlchemy store; ends when the shared
    effects file holds ``n`` turns (every process's), or at ``timeout``."""
    import anyio
    from apscheduler import AsyncScheduler
    from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore

    _APS_EFFECTS.append(_Effects(effects))

    def done() -> bool:
        with open(effects, "rb") as file:
            return file.read().count(b"\n") >= n

    async def main() -> dict[str, Any]:
        store = SQLAlchemyDataStore(_aps_url(), schema=schema)
        async with AsyncScheduler(store, max_concurrent_jobs=n) as scheduler:
            await scheduler.start_in_background()
            armed = time.time()
            await anyio.sleep(max(0.0, slot - time.time()))
            with anyio.move_on_after(timeout):
                while not done():  # noqa: ASYNC110 -- other processes' turns count too
                    await anyio.sleep(0.01)
            await scheduler.stop()
        return {"starts": _APS_EFFECTS[0].starts, "armed_before_slot_s": slot - armed}

    result: dict[str, Any] = anyio.run(main, backend="asyncio")  # SQLAlchemy's async: asyncio
    return result


def _aps_url() -> str:
    return PG_URL.replace("postgresql://", "postgresql+asyncpg://")


def batch_floor(n: int, schema: str) -> dict[str, Any]:
    """The floor of one batched claim: one transaction inserting ``n`` claims-shaped rows from
    arrays (``INSERT ... SELECT FROM unnest``) with ``ON CONFLICT DO NOTHING RETURNING``, over
    a warm connection, committed with ``synchronous_commit`` on."""
    import psycopg
    from cases import SLOT_WALL, routine_names

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        conn.execute(
            f"CREATE TABLE {schema}.floor (routine text, slot timestamptz, "
            "fired_at timestamptz, outcome text, ms bigint, PRIMARY KEY (routine, slot))"
        )
        conn.execute("SET synchronous_commit = on")
        names = routine_names(n)
        started = time.perf_counter()
        with conn.transaction():
            conn.execute(
                f"INSERT INTO {schema}.floor (routine, slot, fired_at) "
                "SELECT r, %s, %s FROM unnest(%s::text[]) AS r "
                "ON CONFLICT DO NOTHING RETURNING routine",
                (SLOT_WALL, SLOT_WALL, names),
            ).fetchall()
        elapsed = time.perf_counter() - started
    return {"total_ms": elapsed * 1e3}


CASES: dict[str, Callable[..., dict[str, Any]]] = {
    "burst_pg": burst_pg,
    "aps_setup": aps_setup,
    "burst_aps_pg": burst_aps_pg,
    "batch_floor": batch_floor,
}


# -- the driver -----------------------------------------------------------------------------


def _psql(command: str) -> str:
    return subprocess.run(
        ["psql", PG_URL, "-Atqc", command], capture_output=True, text=True, check=True
    ).stdout.strip()


def _together(case: str, params: list[dict[str, Any]]) -> list[dict[str, Any]]:
    procs = [
        subprocess.Popen(
            [PYTHON, str(Path(__file__)), case, json.dumps(p)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=HERE,
        )
        for p in params
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"{case} failed:\n{err[-2000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def _exactly_once(effects: Path, n: int) -> str | None:
    """Why the shared effects file does not show each of the ``n`` routines once, or None."""
    lines = effects.read_text().splitlines()
    names = [line.split()[0] for line in lines]
    if len(names) != len(set(names)):
        return f"{len(names) - len(set(names))} slot(s) ran twice"
    if len(names) != n:
        return f"{n - len(names)} slot(s) never ran"
    return None


def _margin(n: int, schedulers: int) -> float:
    """Seconds from start to the slot: every process must have booted (a PostgreSQL boot
    reads each routine's newest claim), and under a minute (the clock's minute)."""
    return min(55.0, 4.0 + 1.2 * (1 + schedulers / 2) * n / 1000)


def run_trio(n: int, schedulers: int, tmp: Path) -> dict[str, Any]:
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    effects = tmp / f"{schema}.effects"
    try:
        subprocess.run(
            [
                PYTHON,
                "-c",
                "import trio; from trio_routines.stores.postgres import PostgresStore as S; "
                f"s = S({PG_URL!r}, schema={schema!r}); "
                "trio.run(s.latest_fire, 'r00000'); trio.run(s.aclose)",
            ],
            check=True,
            capture_output=True,
        )  # the migration is not part of the measure
        slot = float(int(time.time() + _margin(n, schedulers)) + 1)
        params = dict(n=n, slot=slot, schema=schema, effects=str(effects), timeout=60.0)
        results = _together("burst_pg", [params] * schedulers)
        starts = [s for r in results for s in r["starts"]]
        rows = int(_psql(f"SELECT count(*) FROM {schema}.trio_routines_claims"))
        problem = _exactly_once(effects, n) or (None if rows == n else f"{rows} claims")
        late = [r["armed_before_slot_s"] for r in results if r["armed_before_slot_s"] <= 0]
        return {
            "last_ms": (max(starts) - slot) * 1e3 if starts else float("nan"),
            "problem": problem or (f"booted {-min(late):.1f} s after the slot" if late else None),
            "batches": [r["claim_batches"] for r in results],
        }
    finally:
        _psql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        effects.unlink(missing_ok=True)


def run_aps(n: int, schedulers: int, tmp: Path) -> dict[str, Any]:
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    effects = tmp / f"{schema}.effects"
    effects.touch()
    try:
        _psql(f"CREATE SCHEMA {schema}")
        # Setup (adding n schedules) happens first; the slot is a whole second after it.
        slot = float(int(time.time() + 60))
        _together("aps_setup", [dict(n=n, schema=schema, slot=slot)])
        if slot < time.time() + 3 + schedulers:
            return {"last_ms": float("nan"), "problem": "setup took over a minute"}
        params = dict(n=n, slot=slot, schema=schema, effects=str(effects), timeout=120.0)
        results = _together("burst_aps_pg", [params] * schedulers)
        starts = [s for r in results for s in r["starts"]]
        return {
            "last_ms": (max(starts) - slot) * 1e3 if starts else float("nan"),
            "problem": _exactly_once(effects, n),
        }
    finally:
        _psql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        effects.unlink(missing_ok=True)


def _show(values: list[float]) -> str:
    if not values:
        return "—"
    return f"{statistics.median(values):.0f} ({min(values):.0f}–{max(values):.0f})"


def bench_postgres(report: Any, sizes: list[int], reps: int, aps_reps: int, tmp: Path) -> None:
    """Section 7 of the report: the PostgreSQL rows."""
    tmp.mkdir(parents=True, exist_ok=True)

    class Rows(list[list[str]]):
        def append(self, row: list[str]) -> None:
            print(" | ".join(row), file=sys.stderr, flush=True)  # progress, in case of a crash
            super().append(row)

    rows = Rows()
    medians: dict[tuple[str, int, int], float] = {}
    for n in sizes:
        floors = [batch_floor_run(n)["total_ms"] for _ in range(reps)]
        rows.append([f"{n:,}", "floor: one transaction inserting N rows", _show(floors), ""])
        runtime = [memory_floor_run(n, 1) for _ in range(reps if n <= 1000 else 1)]
        rows.append([f"{n:,}", "floor: 1 process, MemoryStore (no database)", _show(runtime), ""])
        runtime4 = [memory_floor_run(n, 4) for _ in range(reps if n <= 1000 else 1)]
        rows.append(
            [f"{n:,}", "floor: 4 processes at once, MemoryStore (no database)", _show(runtime4), ""]
        )
        for schedulers in (1, 2, 4):
            runs = [run_trio(n, schedulers, tmp) for _ in range(reps if n <= 1000 else 1)]
            problems = [r["problem"] for r in runs if r["problem"]]
            values = [r["last_ms"] for r in runs]
            medians["trio", n, schedulers] = statistics.median(values)
            batches = "/".join(str(max(r["batches"])) for r in runs)
            rows.append(
                [
                    f"{n:,}",
                    f"trio_routines, {schedulers} scheduler(s) (claim transactions per process: "
                    f"{batches})",
                    _show(values),
                    "; ".join(problems) or "each slot once ✓",
                ]
            )
        if n <= 1000:
            for schedulers in (1, 4):
                runs = [run_aps(n, schedulers, tmp) for _ in range(aps_reps)]
                values = [r["last_ms"] for r in runs]
                medians["aps", n, schedulers] = statistics.median(values)
                problems = [r["problem"] for r in runs if r["problem"]]
                rows.append(
                    [
                        f"{n:,}",
                        f"APScheduler 4, SQLAlchemy store (asyncpg), {schedulers} scheduler(s)",
                        _show(values),
                        "; ".join(problems) or "each slot once ✓",
                    ]
                )
    report.table(
        "7. PostgreSQL: N routines due at once, schedulers sharing one database "
        "(slot → last turn started, ms)",
        ["N", "what", "ms", "check"],
        rows,
    )
    one = medians.get(("trio", 1000, 1))
    four = medians.get(("trio", 1000, 4))
    if one is not None:
        report.target(
            "1,000 due at once, PostgreSQL, 1 scheduler", "≤ 250 ms", f"{one:.0f} ms", one <= 250
        )
    if one is not None and four is not None:
        report.target(
            "1,000 due at once, PostgreSQL, 4 schedulers",
            "≤ 1.25× one scheduler and ≤ 300 ms",
            f"{four:.0f} ms = {four / one:.2f}× one",
            four <= 1.25 * one and four <= 300,
        )
    for schedulers in (1, 4):
        big = medians.get(("trio", 10000, schedulers))
        if big is not None:
            report.target(
                f"10,000 due at once, PostgreSQL, {schedulers} scheduler(s)",
                "≤ 2 s, each slot exactly once",
                f"{big:.0f} ms",
                big <= 2000,
            )


def memory_floor_run(n: int, processes: int) -> float:
    """The runtime alone: ``processes`` schedulers with the in-memory store, due at once
    (what several schedulers cost on these two cores before any database is involved)."""
    slot = float(int(time.time() + 2 + processes * (1 + n / 2000)) + 1)
    procs = [
        subprocess.Popen(
            [PYTHON, str(HERE / "cases.py"), "burst_routines", json.dumps(dict(n=n, slot=slot))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=HERE,
        )
        for _ in range(processes)
    ]
    lasts = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"burst_routines failed:\n{err[-2000:]}")
        result = json.loads(out.strip().splitlines()[-1])
        lasts.append(result.get("max_ms", float("nan")))  # none: booted after the slot
    return max(lasts)


def batch_floor_run(n: int) -> dict[str, Any]:
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    try:
        return _together("batch_floor", [dict(n=n, schema=schema)])[0]
    finally:
        _psql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    case, params = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(CASES[case](**params)))
