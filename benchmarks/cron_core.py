"""Speed of the pure cron core: ``next_run``, a never-firing search, the wake-up gap guardrail.

Usage: ``python benchmarks/cron_core.py`` (a few seconds). Durations live here, never in the
unit tests: the machine running the tests may be loaded. The SPEC budget for ``next_run`` of a
common expression is well under 100 µs a call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from trio_routines.cron import next_run, parse_cron
from trio_routines.wakeups import WakeupRequest, plan_add

START = datetime(2026, 7, 7, 10, 2, tzinfo=UTC)


def per_call(function: Callable[[int], object], calls: int) -> float:
    """Median over five rounds of the seconds one call takes."""
    rounds = []
    for _ in range(5):
        began = time.perf_counter()
        for i in range(calls):
            function(i)
        rounds.append((time.perf_counter() - began) / calls)
    return sorted(rounds)[2]


def main() -> None:
    print("next_run, common expressions (500 calls, 7 minutes apart)")
    for cron, tz in [
        ("*/5 * * * *", None),
        ("0 9 * * 1-5", "America/New_York"),
        ("30 2 * * *", "Europe/Berlin"),
        ("0 0 1 * *", "Australia/Lord_Howe"),
    ]:
        seconds = per_call(
            lambda i, cron=cron, tz=tz: next_run(cron, tz, START + timedelta(minutes=7 * i)), 500
        )
        print(f"  {cron:<16} {tz or 'UTC':<20} {seconds * 1e6:8.1f} µs")

    print("never fires: first search over a 400-year cycle, then remembered")
    for cron in ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 L-30 2 *"]:
        schedule = parse_cron(cron, "Europe/Berlin")
        began = time.perf_counter()
        schedule.next_after(START)
        first = time.perf_counter() - began
        again = per_call(lambda _i, s=schedule: s.next_after(START), 100)
        print(f"  {cron:<18} first {first * 1e3:6.1f} ms, then {again * 1e6:6.1f} µs")

    print("wake guardrail: plan_add of a recurring wake-up (smallest gap over the calendar)")
    for cron, tz in [
        ("0 9 * * *", None),
        ("0 9 * * *", "Europe/Berlin"),
        ("*/10 * * * *", "Europe/Berlin"),
        ("0,30 9,17 * * MON,WED,FRI", "America/New_York"),
        ("0 0 L 2 */7", None),  # sparse days: the whole 400-year cycle is walked
    ]:
        request = WakeupRequest(session="s", prompt="p", cron=cron, tz=tz)
        seconds = per_call(lambda _i, r=request: plan_add([], r, START), 20)
        print(f"  {cron:<26} {tz or 'UTC':<18} {seconds * 1e3:6.2f} ms")


if __name__ == "__main__":
    main()
