"""The cost of replicas' holds on the claim path: bursts with and without them, one run.

Usage: ``python benchmarks/holds.py [--reps 3] [--sizes 1000 10000]``. For each store (the state
directory, PostgreSQL) and size, the burst of ``cases.burst_routines`` runs alternately with the
store's holds (every fire holds its claim through its replica's lock, and takes and lets go
of its session's hold) and without them (the store's replicas part hidden:
holds within the process only, as before replicas had holds), each in a fresh interpreter; the
medians are printed side by side.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from typing import Any

from run import case  # one fresh interpreter per measurement


def drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/test", autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


#: State directories measured, removed only after the last measurement: ext4 without a journal
#: makes creates right after many removals ~10x slower (see README.md, "Nothing is removed
#: while measuring").
USED: list[str] = []


def one(store: str, n: int, holds: bool, rep: int) -> dict[str, Any]:
    slot = float(int(time.time()) + (12 if n >= 10_000 else 5))
    params: dict[str, Any] = {"n": n, "slot": slot, "store": store, "holds": holds}
    temp = None
    if store == "directory":
        temp = tempfile.mkdtemp(prefix="holds-bench-")
        params["state"] = temp
    else:
        params["schema"] = f"holds_bench_{n}_{int(holds)}_{rep}"
    try:
        return case("burst_routines", **params)
    finally:
        if temp is not None:
            USED.append(temp)
        else:
            drop_schema(params["schema"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--stores", nargs="+", default=["directory", "postgres"])
    args = parser.parse_args()
    print("store       n       holds   burst max ms (min-max)       CPU/fire us   p99 ms")
    for store in args.stores:
        for n in args.sizes:
            runs: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
            for rep in range(args.reps):
                for holds in (False, True):  # alternated: drift hits both alike
                    runs[holds].append(one(store, n, holds, rep))
            for holds in (False, True):
                done = runs[holds]
                burst = [r["max_ms"] for r in done]
                cpu = statistics.median(r["cpu_per_fire_us"] for r in done)
                p99 = statistics.median(r["p99_ms"] for r in done)
                print(
                    f"{store:<11} {n:<7} {'on' if holds else 'off':<7} "
                    f"{statistics.median(burst):8.0f} ({min(burst):.0f}-{max(burst):.0f})"
                    f"{'':10} {cpu:8.0f}   {p99:8.0f}",
                    flush=True,
                )
    for temp in USED:
        shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    main()
