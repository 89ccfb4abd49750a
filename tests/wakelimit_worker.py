"""A ``serve``-like replica for the shared rate-limit test (run as a script).

    <replica> <state> <schema|-> <base ISO> <wall0> <seconds> <log file>

Runs a scheduler named ``<replica>`` on the state directory or PostgreSQL URL ``<state>`` (in
``<schema>``), with a wall clock 60 times faster than real time (one real second is a virtual
minute) counted from ``<base ISO>`` at the real ``time.time()`` ``<wall0>``, so that every
replica reads the same clock. Its agent's every turn appends ``<replica> turn``, then asks,
twice, to be woken a virtual minute later (a fan-out that would double each minute), and
appends ``<replica> added`` or ``<replica> refused: <text>``. It stops after ``<seconds>``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import trio

from trio_routines import Completed, Event, InvalidWakeup, Scheduler, TextDelta
from trio_routines.wakelimits import WakeLimits

SPEED = 60.0
RATE = 6


def append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line.replace("\n", " ") + "\n").encode())
    finally:
        os.close(fd)


class FanOut:
    def __init__(self, replica: str, log: str) -> None:
        self.replica = replica
        self.log = log
        self.scheduler: Scheduler | None = None

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        assert self.scheduler is not None
        append(self.log, f"{self.replica} turn")
        for _ in range(2):
            try:
                await self.scheduler.add_wakeup(session, "again", delay=60)
                append(self.log, f"{self.replica} added")
            except InvalidWakeup as exc:
                append(self.log, f"{self.replica} refused: {exc}")
        await trio.sleep(0.05)
        yield TextDelta("ok")
        yield Completed()


async def main(argv: list[str]) -> None:
    replica, state, schema, base_text, wall0_text, seconds, log = argv
    base = datetime.fromisoformat(base_text)
    wall0 = float(wall0_text)

    def now() -> datetime:
        return base + timedelta(seconds=(time.time() - wall0) * SPEED)

    if schema != "-":
        from trio_routines.stores.postgres import PostgresStore

        store = PostgresStore(state, schema=schema)
    else:
        from trio_routines.stores import DirectoryStore

        store = DirectoryStore(state)  # type: ignore[assignment]
    agent = FanOut(replica, log)
    scheduler = Scheduler(
        agent=agent,
        store=store,
        now=now,
        poll_interval=0.1,
        replica=replica,
        wake_limits=WakeLimits(rate=RATE, depth=None),
    )
    agent.scheduler = scheduler
    async with store, trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(float(seconds))
        scheduler.stop(grace=5)


if __name__ == "__main__":
    trio.run(main, sys.argv[1:])
