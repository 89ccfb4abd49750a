"""A worker process for the state directory race tests (run as a script).

    claim <state> <routine> <slots> <turns file>   claim slots 0..n-1 (minutes after T0) in order,
                                                   appending "<slot>\n" per taken claim
    wake  <state> <count> <taken file>             take due wake-ups until none is left,
                                                   appending "<id>\n" per take; add <count> first
    herd  <state> <routines> <minutes> <turns file>  read routines r000.. (the writer process
                                                   and its spares start), then claim every
                                                   routine's slot of each minute at once, as a
                                                   herd, appending "<routine> <slot> <replica>\n"
                                                   per taken claim
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


async def herd(state: str, routines: int, minutes: int, turns: str) -> None:
    names = [f"r{i:03}" for i in range(routines)]
    replica = f"worker:{os.getpid()}"
    async with DirectoryStore(state) as store:
        async with trio.open_nursery() as nursery:
            for name in names:
                nursery.start_soon(store.latest_fire, name)
        for minute in range(minutes):
            await trio.sleep(0.3)  # a lull: the writer process makes the spares taken
            slot = T0 + timedelta(minutes=minute)

            async def one(name: str, slot: datetime = slot) -> None:
                if (await store.claim(name, slot, slot, replica=replica)).taken:
                    append(turns, f"{name} {slot.isoformat()} {replica}")

            async with trio.open_nursery() as nursery:
                for name in names:
                    nursery.start_soon(one, name)


def main() -> None:
    sys.stdin.readline()
    kind, *args = sys.argv[1:]
    if kind == "claim":
        trio.run(claim, args[0], args[1], int(args[2]), args[3])
    elif kind == "herd":
        trio.run(herd, args[0], int(args[1]), int(args[2]), args[3])
    else:
        trio.run(wake, args[0], int(args[1]), args[2])


if __name__ == "__main__":
    main()
