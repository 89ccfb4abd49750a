"""Two `serve` replicas on one PostgreSQL database: each slot and each wake-up fires once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pg import schema_url
from procs import Env, lines, stop, wait_for, years_ago

from trio_routines.records import Outcome
from trio_routines.stores.postgres import PostgresStore
from trio_routines.wakeups import WakeupRequest


@pytest.mark.slow
async def test_two_replicas_fire_a_routine_and_a_wakeup_once_each(tmp_path: Path) -> None:
    with schema_url() as state:
        store = PostgresStore(state)
        try:
            seeded = years_ago(2)
            assert (await store.claim("yearly", seeded, seeded)).taken
            await store.settle("yearly", seeded, Outcome.COMPLETED, 5)
            now = datetime.now(UTC)
            wakeup = await store.add_wakeup(
                WakeupRequest(
                    session="chat-1", prompt="look again", fire_at=now - timedelta(hours=1)
                ),
                now - timedelta(hours=2),
            )
        finally:
            await store.aclose()

        env = Env(tmp_path)
        env.state = state  # type: ignore[assignment]  # --state takes a URL as well as a path
        env.routine("yearly", cron="0 0 1 1 *")
        agent = f'cmd:echo "$TRIO_ROUTINES_SESSION $TRIO_ROUTINES_SLOT" >> {env.marker}'
        replicas = [
            env.start("serve", "--agent", agent, "--poll", "1", log=f"r{i}.log") for i in range(2)
        ]
        try:
            wait_for(lambda: len(lines(env.marker)) >= 2, 30, "the catch-up and the wake-up")
            wait_for(
                lambda: all("wake-ups:" in env.log(f"r{i}.log") for i in range(2)), 30, "both up"
            )
            for proc in replicas:
                assert stop(proc) == 0
        finally:
            for proc in replicas:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        fired = sorted(lines(env.marker))
        assert fired == sorted(
            [f"routine:yearly {years_ago(1).strftime('%Y-%m-%dT%H:%M:%S.000Z')}", "chat-1 "]
        )

        store = PostgresStore(state)
        try:
            history = await store.history("yearly")
            assert [f.slot for f in history] == [seeded, years_ago(1)]
            assert history[-1].outcome is Outcome.COMPLETED
            assert wakeup.id not in [w.id for w in await store.list_wakeups()]
        finally:
            await store.aclose()
