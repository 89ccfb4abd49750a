"""The state directory against the memory store, for this tree and an earlier one, alternating.

Usage: ``python benchmarks/versus.py --before DIR [--sizes 1000 10000] [--reps 8]``, where
``DIR`` is a checkout of the earlier code (``git worktree add --detach DIR COMMIT``). In every
repetition each tree runs the burst of ``cases.burst_routines`` (``n`` routines due at one
real instant) with the memory store and then with a fresh state directory, each in a fresh
interpreter that imports that tree's code; which tree goes first alternates. The ratio of the
last turn's start (state directory over memory store) is taken within a repetition, and the
medians are printed: on a shared host absolute times drift by 2x from one run to the next,
the ratios much less. The state directories are removed after the last measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def case(tree: Path, name: str, **params: Any) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run(
        [sys.executable, str(tree / "benchmarks" / "cases.py"), name, json.dumps(params)],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="a checkout of earlier code")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--reps", type=int, default=8)
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": HERE.parent}
    work = Path(tempfile.mkdtemp(prefix="versus-"))
    try:
        for n in args.sizes:
            lead = 12 if n >= 10_000 else 5
            rows: dict[str, list[tuple[float, float, float, float, float]]] = {
                "before": [],
                "after": [],
            }
            for rep in range(args.reps):
                for which in ("before", "after") if rep % 2 == 0 else ("after", "before"):
                    tree = trees[which]
                    memory = case(tree, "burst_routines", n=n, slot=float(int(time.time()) + lead))
                    state = tempfile.mkdtemp(dir=work)
                    directory = case(
                        tree,
                        "burst_routines",
                        n=n,
                        slot=float(int(time.time()) + lead),
                        store="directory",
                        state=state,
                    )
                    ratio = directory["max_ms"] / memory["max_ms"]
                    rows[which].append(
                        (
                            ratio,
                            memory["max_ms"],
                            directory["max_ms"],
                            memory["cpu_per_fire_us"],
                            directory["cpu_per_fire_us"],
                        )
                    )
                    print(
                        f"n={n} rep {rep} {which:6} memory {memory['max_ms']:.0f} ms, "
                        f"directory {directory['max_ms']:.0f} ms ({ratio:.2f}x); CPU per fire "
                        f"{memory['cpu_per_fire_us']:.0f} / {directory['cpu_per_fire_us']:.0f} us",
                        flush=True,
                    )
            for which, done in rows.items():
                medians = [statistics.median(row[i] for row in done) for i in range(5)]
                print(
                    f"n={n} {which}: directory / memory {medians[0]:.2f}x (last turn started "
                    f"{medians[2]:.0f} ms against {medians[1]:.0f}); CPU per fire "
                    f"{medians[4]:.0f} us against {medians[3]:.0f}",
                    flush=True,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
