"""A replica whose PostgreSQL connection the server ends (``pg_terminate_backend``, an
administrator's kill, a restart): the server lets go of its lock at once, so every other
replica sees its turns dead from then on. The replica must end them as soon as the server
says so, not at its next heartbeat a poll interval later: else two turns of one session run
at once, one on each side."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import pytest
import trio
from pg import admin, fresh_schema, require_server

from trio_routines import Routine, Scheduler
from trio_routines.records import Outcome
from trio_routines.scheduler.state import LOST_HOLD
from trio_routines.stores.postgres import PostgresStore
from trio_routines.stores.postgres.holds import PostgresPresence
from trio_routines.testing import Hang, ScriptedAgent, WallClock

SLOT = datetime(2026, 7, 7, 10, tzinfo=UTC)


@pytest.fixture
def schema() -> Iterator[str]:
    require_server()
    with fresh_schema() as name:
        yield name


@pytest.fixture
async def store(schema: str) -> AsyncIterator[PostgresStore]:
    made = PostgresStore(require_server(), schema=schema, timeout=5)
    yield made
    await made.aclose()


async def test_a_turn_ends_as_soon_as_the_server_ends_the_replicas_connection(
    store: PostgresStore,
) -> None:
    agent = ScriptedAgent(default=Hang())
    routine = Routine(name="slow", prompt="p", cron="0 * * * *")
    scheduler = Scheduler(
        agent=agent,
        store=store,
        routines=[routine],
        now=WallClock(SLOT),
        external_clock=True,
        poll_interval=3600,  # the next heartbeat: an hour away
        wakeups=False,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await scheduler.start_fire("slow", SLOT)
        presence = scheduler._parts.membership.presence
        assert isinstance(presence, PostgresPresence)
        assert presence._conn is not None
        pid = presence._conn.info.backend_pid
        with admin() as db:
            db.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with trio.fail_after(30):  # a bound on the test, not a measured time
            while True:
                [fire] = await store.history("slow")
                if fire.outcome is not None:
                    break
                await trio.sleep(0.05)
        assert (fire.outcome, fire.error) == (Outcome.INTERRUPTED, LOST_HOLD)
        scheduler.stop(0)
