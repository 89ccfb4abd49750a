"""PostgreSQL boot: start → armed for a scheduler with N routines, each with 20
settled claims, in three states: nothing due (the newest claims read), every routine catching
up (plus the last resume of each), every newest claim left open (plus the reconcile's settle).

As a script (``python benchmarks/pgboot.py N MODE``) it seeds a fresh schema, boots once in a
process of its own and prints the result as JSON; :func:`bench_pg_boot` drives it from
``run.py --only pgboot``.
"""

from __future__ import annotations

import json
import logging
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
SLOT = datetime(2026, 7, 7, 10, 0, tzinfo=UTC)  # every routine's newest claim
CLAIMS = 20
MODES = {
    # mode: (cron, the wall clock at boot, the newest claims' outcome)
    "idle": ("0 0 1 1 *", SLOT + timedelta(seconds=30), "'completed'"),
    "catch-up": ("*/5 * * * *", SLOT + timedelta(minutes=7), "'completed'"),
    "open": ("0 0 1 1 *", SLOT + timedelta(seconds=30), "NULL"),
}


def boot_once(n: int, mode: str) -> dict[str, Any]:
    import psycopg
    import trio

    from trio_routines import Completed, Routine, Scheduler
    from trio_routines.stores.postgres import PostgresStore

    logging.getLogger("trio_routines").addHandler(logging.NullHandler())  # logged, not shown
    cron, now, outcome = MODES[mode]
    schema = f"boot_{uuid.uuid4().hex[:10]}"
    store = PostgresStore(PG_URL, schema=schema)
    trio.run(store.ready)  # the migration is not part of the measure
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {schema}.trio_routines_claims (routine, slot, fired_at, outcome, ms) "
            f"SELECT 'r' || lpad(i::text, 5, '0'), s, s, CASE WHEN s = %s THEN {outcome} "
            "ELSE 'completed' END, 12 FROM generate_series(0, %s - 1) AS i, "
            "generate_series(%s - interval '1 minute' * (%s - 1), %s, interval '1 minute') AS s",
            (SLOT, n, SLOT, CLAIMS, SLOT),
        )
        conn.execute(f"ANALYZE {schema}.trio_routines_claims")

    class Agent:
        async def invoke(self, session: str, text: str) -> Any:
            yield Completed()

    async def main() -> dict[str, Any]:
        scheduler = Scheduler(
            agent=Agent(),
            store=store,
            routines=[Routine(name=f"r{i:05d}", prompt="p", cron=cron) for i in range(n)],
            now=lambda: now,
            wakeups=False,
        )
        counted = (store._newest, store._resumes, store._gap_reads)
        reads = *(each.reads for each in counted), store._batches.settles.batches
        async with trio.open_nursery() as nursery:
            started = time.perf_counter()
            await nursery.start(scheduler.run)
            booted = time.perf_counter() - started
            after = *(each.reads for each in counted), store._batches.settles.batches
            scheduler.stop(0)
        await store.aclose()
        newest, resumes, gaps, settles = (b - a for a, b in zip(reads, after, strict=True))
        return {
            "boot_ms": booted * 1e3,
            "newest": newest,
            "resumes": resumes,
            "gaps": gaps,
            "settles": settles,
        }

    try:
        return trio.run(main)
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def bench_pg_boot(report: Any, sizes: list[int], reps: int) -> None:
    """The PostgreSQL boot rows: one process per boot, ``reps`` boots per row."""
    rows = []
    for n in sizes:
        for mode in MODES:
            runs = []
            for _ in range(reps):
                out = subprocess.run(
                    [sys.executable, str(Path(__file__)), str(n), mode],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            times = [r["boot_ms"] for r in runs]
            calls = runs[-1]
            rows.append(
                [
                    f"{n:,}",
                    mode,
                    f"{statistics.median(times):.0f} ({min(times):.0f}–{max(times):.0f})",
                    " / ".join(str(calls[k]) for k in ("newest", "resumes", "gaps", "settles")),
                ]
            )
            print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    report.table(
        f"7b. PostgreSQL boot: start → armed, N routines × {CLAIMS} claims (ms)",
        [
            "N",
            "state",
            "ms",
            "newest-claim / resume / gap queries / settle statements",
        ],
        rows,
    )


if __name__ == "__main__":
    print(json.dumps(boot_once(int(sys.argv[1]), sys.argv[2])))
