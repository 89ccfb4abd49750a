"""Two replicas, real processes, share one rate limit through their store (the state directory
and PostgreSQL): an agent fanning out wake-ups from every turn gets no more turns than the
rate allows, plus at most one turn in flight per replica."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio

from trio_routines.records import Origin, OriginKind
from trio_routines.store import Store
from trio_routines.wakeups import WakeupRequest

WORKER = Path(__file__).with_name("wakelimit_worker.py")
RATE = 6  # the worker's
SECONDS = 12  # real seconds: twelve virtual minutes, well inside the hour


@pytest.fixture(params=["directory", "postgres"])
def state(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    if request.param == "directory":
        yield str(tmp_path / "state"), "-"
        return
    from pg import fresh_schema, require_server

    url = require_server()
    with fresh_schema() as schema:
        yield url, schema


def _store(where: str, schema: str) -> Store:
    if schema == "-":
        from trio_routines.stores import DirectoryStore

        return DirectoryStore(where)
    from trio_routines.stores.postgres import PostgresStore

    return PostgresStore(where, schema=schema)


@pytest.mark.slow
def test_two_replicas_share_the_rate_limit(state: tuple[str, str], tmp_path: Path) -> None:
    where, schema = state
    base = datetime.now(UTC).replace(microsecond=0)
    wall0 = time.time()

    async def seed() -> None:
        # The first link, as a turn would have added it: due a virtual minute on.
        async with _store(where, schema) as store:
            await store.add_wakeup(
                WakeupRequest(
                    session="agent",
                    prompt="fan out",
                    fire_at=base + timedelta(minutes=1),
                    origin=Origin(kind=OriginKind.WAKEUP, parent="seed", depth=1),
                ),
                base,
            )

    trio.run(seed)
    log = tmp_path / "log"
    argv = [where, schema, base.isoformat(), repr(wall0), str(SECONDS), str(log)]
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), name, *argv], stderr=subprocess.PIPE)
        for name in ("replica-a", "replica-b")
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=SECONDS + 60)
        assert proc.returncode == 0, err.decode()[-2000:]
    entries = log.read_text().splitlines()
    turns = [line.split()[0] for line in entries if line.endswith(" turn")]
    refused = [line for line in entries if " refused: " in line]
    # Without the limit the fan-out doubles every virtual minute (4,000 turns in twelve).
    assert RATE <= len(turns) <= RATE + 2, entries
    assert refused, entries
    assert all("rate limit" in line and f"at most {RATE}" in line for line in refused)
    assert set(turns) <= {"replica-a", "replica-b"}
