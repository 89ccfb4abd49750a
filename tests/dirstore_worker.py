"""A worker process for the state directory race tests (run as a script).

    claim <state> <routine> <slots> <turns file>   claim slots 0..n-1 (minutes after T0) in order,
                                                   appending "<slot>\n" per taken claim
    wake  <state> <count> <taken file>             take due wake-ups until none is left,
                                                   appending "<id>\n" per take; add <count> first
Each waits for a line on stdin before starting, so all workers race from the same moment.
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime, timedelta

import trio

from trio_routines.stores.directory import DirectoryStore
from trio_routines.wakeups import WakeupRequest

T0 = datetime(2026, 7, 7, tzinfo=UTC)


def append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


async def claim(state: str, routine: str, count: int, turns: str) -> None:
    store = DirectoryStore(state)
    for minute in range(count):
        slot = T0 + timedelta(minutes=minute)
        result = await store.claim(routine, slot, slot)
        if result.taken:
            append(turns, slot.isoformat())


async def wake(state: str, count: int, taken: str) -> None:
    store = DirectoryStore(state)
    now = T0
    for i in range(count):
        await store.add_wakeup(
            WakeupRequest(
                session=f"s{os.getpid()}-{i % 5}", prompt="p", fire_at=now + timedelta(hours=1)
            ),
            now,
        )
    later = now + timedelta(hours=2)
    while (wakeup := await store.take_due_wakeup(later)) is not None:
        append(taken, wakeup.id)


def main() -> None:
    sys.stdin.readline()
    kind, *args = sys.argv[1:]
    if kind == "claim":
        trio.run(claim, args[0], args[1], int(args[2]), args[3])
    else:
        trio.run(wake, args[0], int(args[1]), args[2])


if __name__ == "__main__":
    main()
