"""The cost curve of wake-up calls with many pending: ``python benchmarks/wakeups.py``.

For each store (the state directory, PostgreSQL) and each number pending (1,000, 10,000,
100,000), one fresh interpreter seeds the store with that many wake-ups due tomorrow (spread
over sessions of ten), then times each call through the store's public async API, one after
another, ``--reps`` times:

* ``poll``: ``take_due_wakeup`` with nothing due (what the wake loop does every 30 s);
* ``add``: ``add_wakeup`` for a new session (one-shot, an hour ahead; the store's room,
  ``MAX_PENDING``, is raised for the run, so that adds past 100,000 pending are measured);
* ``take``: ``take_due_wakeup`` of a due one (the added ones, made due by asking later);
* ``defer``: ``defer_wakeup`` of a taken one (a busy session's retry);
* ``remove``: ``remove_wakeup`` of a deferred one, by id and session;
* ``floor`` (the state directory): a bare 200-byte append and ``fdatasync`` on the same file
  system, right after: what a durable change cannot go below on this disk at that moment.

It prints the median and the 99th percentile of each, in milliseconds, and for the state
directory the memory the store's index takes at the largest size: the growth of the
interpreter's traced allocations (``tracemalloc``) over the first read of the journal, and
of its resident set. Seeding is not timed: the directory's journal is written as one
generation, PostgreSQL's table filled with ``COPY``.

``--sizes`` and ``--reps`` change the sizes and repetitions; ``--stores`` picks the stores.
PostgreSQL must be reachable at ``postgresql://postgres@127.0.0.1:5432/test``; each run
works in a fresh schema, dropped after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

PYTHON = sys.executable
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
NOW = datetime(2030, 1, 1, tzinfo=UTC)


def _pending(n: int) -> list[Any]:
    from trio_routines.records import Wakeup

    tomorrow = NOW + timedelta(days=1)
    return [
        Wakeup(
            id=str(uuid.uuid4()),
            session=f"s{i // 10:06d}",
            prompt="check the build and report back",
            fire_at=tomorrow + timedelta(seconds=i),
        )
        for i in range(n)
    ]


def _rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _seed_directory(root: Path, n: int) -> None:
    from trio_routines.stores.directory.wakeupjournal import JOURNAL, snapshot

    schedule = root / "schedule"
    schedule.mkdir(parents=True)
    data = snapshot((w, i) for i, w in enumerate(_pending(n), 1))
    (schedule / JOURNAL).write_bytes(data)
    os.sync()  # the seed's dirty pages are not the first timed call's to flush


def _seed_postgres(store: Any, n: int) -> None:
    import psycopg

    tables = store._wakeups._tables
    with psycopg.connect(PG_URL) as conn:
        copy = tables.sql("COPY {wakeups} (id, session, prompt, fire_at) FROM STDIN")
        with conn.cursor() as cursor, cursor.copy(copy) as out:
            for w in _pending(n):
                out.write_row((w.id, w.session, w.prompt, w.fire_at))
        conn.execute(tables.sql("ANALYZE {wakeups}"))


def _floor(root: Path, reps: int) -> dict[str, float]:
    """What one change cannot go below on this disk: a 200-byte append and its fdatasync."""
    fd = os.open(root / "floor", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    samples = []
    try:
        for _ in range(reps):
            started = time.perf_counter()
            os.write(fd, b"x" * 199 + b"\n")
            os.fdatasync(fd)
            samples.append((time.perf_counter() - started) * 1e3)
    finally:
        os.close(fd)
        os.unlink(root / "floor")
    samples.sort()
    return {"median_ms": samples[len(samples) // 2], "p99_ms": samples[int(len(samples) * 0.99)]}


def measure(store_kind: str, n: int, reps: int) -> dict[str, Any]:
    """One store, ``n`` pending: the timings (and, for the directory, its memory)."""
    import tracemalloc

    import trio

    from trio_routines import wakelimits
    from trio_routines.wakeups import WakeupRequest

    result: dict[str, Any] = {"store": store_kind, "pending": n}
    cleanup: list[Any] = []
    if store_kind == "directory":
        from trio_routines.stores.directory import DirectoryStore

        root = Path(tempfile.mkdtemp(prefix="wakeups-bench-", dir=os.environ.get("BENCH_DIR")))
        _seed_directory(root, n)
        store: Any = DirectoryStore(root, writer_process=False)
        cleanup.append(lambda: subprocess.run(["rm", "-rf", str(root)], check=False))
    else:
        from trio_routines.stores.postgres import PostgresStore

        schema = f"bench_wake_{uuid.uuid4().hex[:10]}"
        store = PostgresStore(PG_URL, schema=schema, timeout=30.0)
        cleanup.append(
            lambda: subprocess.run(
                ["psql", PG_URL, "-qc", f"DROP SCHEMA IF EXISTS {schema} CASCADE"],
                check=False,
                capture_output=True,
            )
        )

    async def timed(call: Any, items: list[Any]) -> tuple[list[float], list[Any]]:
        samples, results = [], []
        for item in items:
            started = time.perf_counter()
            results.append(await call(item))
            samples.append((time.perf_counter() - started) * 1e3)
        return samples, results

    async def main() -> None:
        if store_kind == "directory":
            rss, _ = _rss(), tracemalloc.start()
            started = time.perf_counter()
            assert await store.take_due_wakeup(NOW) is None  # the first read of the journal
            result["load_s"] = time.perf_counter() - started
            result["index_mib"] = tracemalloc.get_traced_memory()[0] / 2**20
            result["rss_mib"] = (_rss() - rss) / 2**20
            tracemalloc.stop()
        else:
            await store.list_wakeups()  # creates the tables
            _seed_postgres(store, n)
        later, due = NOW + timedelta(hours=1), NOW + timedelta(hours=2)
        polls, _ = await timed(lambda _: store.take_due_wakeup(NOW), list(range(reps)))
        requests = [
            WakeupRequest(session=f"bench{i}", prompt="p", fire_at=later) for i in range(reps)
        ]
        wakelimits.MAX_PENDING = max(wakelimits.MAX_PENDING, n + reps)
        adds, _ = await timed(lambda r: store.add_wakeup(r, NOW), requests)
        takes, taken = await timed(lambda _: store.take_due_wakeup(due), list(range(reps)))
        assert all(w is not None for w in taken)
        defers, _ = await timed(lambda w: store.defer_wakeup(w, due), taken)
        removes, removed = await timed(lambda w: store.remove_wakeup(w.id, w.session), taken)
        assert all(removed)
        assert len(await store.list_wakeups()) == n
        if store_kind == "directory":
            result["floor"] = _floor(root, reps)  # right after, on the same file system
        for name, samples in [
            ("poll", polls),
            ("add", adds),
            ("take", takes),
            ("defer", defers),
            ("remove", removes),
        ]:
            ordered = sorted(samples)
            result[name] = {
                "median_ms": ordered[len(ordered) // 2],
                "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
            }
        if store_kind == "postgres":
            await store.aclose()

    try:
        trio.run(main)
    finally:
        for step in cleanup:
            step()
    return result


def run_case(store: str, n: int, reps: int) -> dict[str, Any]:
    proc = subprocess.run(
        [PYTHON, __file__, "--case", json.dumps({"store": store, "n": n, "reps": reps})],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{store} at {n} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def table(results: list[dict[str, Any]]) -> str:
    calls = ["add", "take", "defer", "remove", "poll", "floor"]
    head = "| store | pending | " + " | ".join(f"{c} median / p99" for c in calls) + " |"
    rows = [head, "|" + "---|" * (2 + len(calls))]
    for r in results:
        cells = [f"{r[c]['median_ms']:.2f} / {r[c]['p99_ms']:.2f}" if c in r else "" for c in calls]
        rows.append(f"| {r['store']} | {r['pending']:,} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--stores", nargs="+", default=["directory", "postgres"])
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        params = json.loads(args.case)
        print(json.dumps(measure(params["store"], params["n"], params["reps"])))
        return
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load {os.getloadavg()}"
    )
    results = []
    for store in args.stores:
        for n in args.sizes:
            results.append(run_case(store, n, args.reps))
            print(json.dumps(results[-1]), flush=True)
    print(table(results))
    for r in results:
        if "index_mib" in r:
            print(
                f"directory, {r['pending']:,} pending: first read {r['load_s']:.1f} s, "
                f"index {r['index_mib']:.0f} MiB traced, RSS +{r['rss_mib']:.0f} MiB"
            )


if __name__ == "__main__":
    main()
