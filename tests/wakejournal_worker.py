"""A worker process for the wake-up journal's crash test (run as a script; killed at random).

    churn <state> <log file> <seed>   forever: add a due wake-up or take one, appending
                                      "A <id>" once an add returned and "T <id>" once a take
                                      did; every few changes the journal is compacted
    drain <state> <log file>          take every wake-up left ("T <id>" each), then exit

Compaction is made frequent (a tiny slack) so that kills land in it too.
"""

from __future__ import annotations

import os
import random
import sys
from datetime import UTC, datetime, timedelta

import trio

from trio_routines.stores.directory import DirectoryStore, wakeuplog
from trio_routines.wakeups import WakeupRequest

T0 = datetime(2026, 7, 7, tzinfo=UTC)
LATER = T0 + timedelta(hours=2)  # every wake-up added is due by then


def record(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


async def churn(state: str, log: str, seed: int) -> None:
    rng = random.Random(seed)
    store = DirectoryStore(state, writer_process=False, lock_timeout=60)
    await store.list_wakeups()
    print("ready", flush=True)  # started up and caught up: the kills may begin
    for i in range(10**9):
        if rng.random() < 0.55:
            request = WakeupRequest(
                session=f"s{os.getpid()}-{i}", prompt="p", fire_at=T0 + timedelta(hours=1)
            )
            wakeup = await store.add_wakeup(request, T0)
            record(log, f"A {wakeup.id}")
        else:
            taken = await store.take_due_wakeup(LATER)
            if taken is not None:
                record(log, f"T {taken.id}")


async def drain(state: str, log: str) -> None:
    store = DirectoryStore(state, writer_process=False, lock_timeout=60)
    while (taken := await store.take_due_wakeup(LATER)) is not None:
        record(log, f"T {taken.id}")
    assert await store.list_wakeups() == []


def main() -> None:
    wakeuplog.SLACK = 4
    kind, *args = sys.argv[1:]
    if kind == "churn":
        trio.run(churn, args[0], args[1], int(args[2]))
    else:
        trio.run(drain, args[0], args[1])


if __name__ == "__main__":
    main()
