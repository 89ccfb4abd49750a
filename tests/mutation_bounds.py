"""Bounds on one test's run under mutation testing (scripts/mutation.py, docs/mutation.md).

A mutant that makes a test hang is counted as killed once mutmut's wall timeout stops it, but
that timeout is a multiple of the clean time of *every* test selected for the mutant. These two
bounds stop the hanging test itself, much sooner; both are off unless the script sets them:

* ``TRIO_ROUTINES_TEST_CPU_SECONDS``: a test (setup, call and teardown) that burns more CPU
  seconds than this plus ``TRIO_ROUTINES_TEST_CPU_FACTOR`` times its clean time (what mutmut
  measured before running mutants, ``mutmut-stats.json``; wall time, so never below the CPU
  time) is stopped by the kernel (SIGXCPU): a loop spinning in MockClock's virtual time. CPU
  time does not grow with the machine's load, so the bound can sit close above the test's own.
  A test mutmut has not measured (its first, clean run) gets ``UNMEASURED_CPU_SECONDS``.
* ``TRIO_ROUTINES_TEST_IDLE_SECONDS``: a test during which the process has used (next to) no
  CPU for this many wall seconds is ended with exit status 36: a task waiting for what never
  comes. A test slowed by load still gets CPU every second, so it is not taken for idle.

mutmut counts SIGXCPU and exit status 36 as a timeout.

A third guard, ``TRIO_ROUTINES_TEST_OWN_GROUP``, puts each mutant's run (the process mutmut
forks for it) in a process group of its own before its first test. mutmut, its forks and the
script share one group otherwise, and a mutant can make the code signal its own group: a
``cmd:`` command started without a session of its own leaves its supervisor in ours, and the
supervisor, its lifeline cut, kills "its" group. Then only that
mutant's run dies (the script counts it as killed), not the whole mutation run with it.
"""

from __future__ import annotations

import json
import os
import resource
import threading
import time
from collections.abc import Generator
from pathlib import Path

import pytest

CPU_SECONDS = float(os.environ.get("TRIO_ROUTINES_TEST_CPU_SECONDS") or 0)
CPU_FACTOR = float(os.environ.get("TRIO_ROUTINES_TEST_CPU_FACTOR") or 0)
UNMEASURED_CPU_SECONDS = 60.0
IDLE_SECONDS = float(os.environ.get("TRIO_ROUTINES_TEST_IDLE_SECONDS") or 0)
OWN_GROUP = bool(os.environ.get("TRIO_ROUTINES_TEST_OWN_GROUP"))
TIMEOUT_STATUS = 36  # mutmut's "timeout"
BUSY = 0.05  # CPU seconds per wall second below which the process counts as idle


_clean: dict[str, float] = {}


def _cpu_bound(nodeid: str) -> float:
    if nodeid not in _clean:
        # Read again on a miss: mutmut runs its clean tests in the process it then forks each
        # mutant's run from, and writes the stats only after its first run.
        try:
            _clean.update(json.loads(Path("mutmut-stats.json").read_text())["duration_by_test"])
        except (OSError, ValueError, KeyError):
            pass
    clean = _clean.get(nodeid)
    if clean is None:
        return UNMEASURED_CPU_SECONDS
    return CPU_SECONDS + CPU_FACTOR * clean


def _watch_idle(done: threading.Event) -> None:
    cpu, progressed = time.process_time(), time.monotonic()
    while not done.wait(1.0):
        now_cpu, now = time.process_time(), time.monotonic()
        if now_cpu - cpu >= BUSY:
            progressed = now
        cpu = now_cpu
        if now - progressed >= IDLE_SECONDS:
            os._exit(TIMEOUT_STATUS)


def _own_group() -> None:
    """A group of its own for a mutant's run (mutmut names the mutant in the environment in
    the process it forks for it; its own runs, clean or forced to fail, name none)."""
    if "__mutmut_" in os.environ.get("MUTANT_UNDER_TEST", "") and os.getpgrp() != os.getpid():
        os.setpgid(0, 0)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    if OWN_GROUP:
        _own_group()
    if not (CPU_SECONDS or IDLE_SECONDS):
        return (yield)
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if CPU_SECONDS:
        limit = int(time.process_time() + _cpu_bound(item.nodeid)) + 1
        for bound in (soft, hard):  # never looser than a limit already set (mutmut's own)
            if bound != resource.RLIM_INFINITY:
                limit = min(limit, bound)
        resource.setrlimit(resource.RLIMIT_CPU, (limit, hard))
    done = threading.Event()
    if IDLE_SECONDS:
        threading.Thread(target=_watch_idle, args=(done,), daemon=True).start()
    try:
        return (yield)
    finally:
        done.set()
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
