"""Real processes on one state directory's wake-up journal, killed with SIGKILL at random.

Three ``churn`` workers (tests/wakejournal_worker.py) add and take wake-ups as fast as they
can, compacting the journal every few changes; the harness kills one at a random moment and
starts another, over and over, so kills land in the middle of appends, cuts of torn lines and
new generations. Then a ``drain`` process takes every wake-up left. Each worker logs an add
once it returned and a take once it returned. Afterwards:

* no wake-up was taken twice;
* every wake-up whose add returned was taken, except at most one per kill (a take that landed
  in the journal just before its process died, before it could log it);
* the store is usable: the drain ran to the end and left it empty.

``TRIO_ROUTINES_JOURNAL_KILLS=<n>`` runs longer; ``TRIO_ROUTINES_JOURNAL_SEED=<n>`` replays a
run's kill schedule (the seed is in every assertion message).
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("wakejournal_worker.py")
KILLS = int(os.environ.get("TRIO_ROUTINES_JOURNAL_KILLS", "30"))
SEED = int(os.environ.get("TRIO_ROUTINES_JOURNAL_SEED", str(random.randrange(2**32))))


def start(kind: str, state: Path, log: Path, seed: int = 0) -> subprocess.Popen[bytes]:
    """A worker; a ``churn`` one is returned once it is up (its start-up is not what the
    kills are for)."""
    args = [sys.executable, str(WORKER), kind, str(state), str(log)]
    if kind == "drain":
        return subprocess.Popen(args, stderr=subprocess.PIPE)
    worker = subprocess.Popen([*args, str(seed)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert worker.stdout is not None
    ready = select.select([worker.stdout], [], [], 120)[0]  # a bound on a loaded machine
    assert ready, "a worker did not start within 120 s"
    assert worker.stdout.readline() == b"ready\n"
    return worker


def stop(worker: subprocess.Popen[bytes]) -> None:
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=30)
    if worker.stdout is not None:
        worker.stdout.close()


def test_killed_writers_lose_nothing_and_take_nothing_twice(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    state, log = tmp_path / "state", tmp_path / "log"
    workers = [start("churn", state, log, rng.randrange(2**32)) for _ in range(3)]
    try:
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.01, 0.25))
            stop(workers.pop(rng.randrange(len(workers))))
            workers.append(start("churn", state, log, rng.randrange(2**32)))
        for worker in workers:
            assert worker.poll() is None, SEED  # none died on its own
    finally:
        for worker in workers:
            stop(worker)
    kills = KILLS + len(workers)
    drain = start("drain", state, log)
    _, err = drain.communicate(timeout=300)  # a bound on a loaded machine
    assert drain.returncode == 0, (SEED, err.decode())
    lines = [line.split() for line in log.read_text().splitlines()]
    added = {i for kind, i in lines if kind == "A"}
    taken = Counter(i for kind, i in lines if kind == "T")
    assert len(added) > 50, SEED  # the workers did get going
    twice = [i for i, n in taken.items() if n > 1]
    assert twice == [], (SEED, twice)
    lost = added - taken.keys()
    assert len(lost) <= kills, (SEED, len(lost), kills)
