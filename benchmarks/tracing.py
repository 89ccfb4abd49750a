"""What tracing costs a burst: the memory-store burst without the ``otel`` extra, with it but
no provider set (tracing off), and with the SDK (tracing on), in fresh interpreters.

Usage: ``python benchmarks/tracing.py [--reps 5] [--sizes 1000 10000]``. The burst is
``cases.burst_routines`` (``n`` routines of ``* * * * *`` due at one real instant, the agent
completing at once); the three modes alternate within each repetition, so drift hits all
alike; medians (then min-max) are printed side by side.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from run import case  # one fresh interpreter per measurement

MODES = ("absent", "off", "on")


def one(n: int, mode: str) -> dict[str, Any]:
    slot = float(int(time.time()) + (6 if n >= 10_000 else 4))
    return case("burst_routines", n=n, slot=slot, tracing=mode)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    args = parser.parse_args()
    print("n       tracing  last fire late ms (min-max)   CPU/fire us (min-max)   collector us")
    for n in args.sizes:
        runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
        for _ in range(args.reps):
            for mode in MODES:
                runs[mode].append(one(n, mode))
        for mode in MODES:
            done = runs[mode]
            late = [r["max_ms"] for r in done]
            cpu = [r["cpu_per_fire_us"] for r in done]
            collector = statistics.median(r["gc_per_fire_us"] for r in done)
            print(
                f"{n:<7} {mode:<8} {statistics.median(late):8.0f} ({min(late):.0f}-{max(late):.0f})"
                f"{'':10} {statistics.median(cpu):6.0f} ({min(cpu):.0f}-{max(cpu):.0f})"
                f"{'':8} {collector:6.0f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
