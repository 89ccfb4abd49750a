"""How a host tests its own code with ``trio_routines.testing`` -- and this example's tests.

Virtual time: ``MockClock`` (pytest-trio's ``autojump_clock`` fixture) drives Trio's clock and
``WallClock`` turns it into wall time, so days pass in milliseconds. ``MemoryStore`` stands in
for the state directory, ``ScriptedAgent`` for the model.

Run with pytest-trio in ``trio_mode`` (each ``async def`` test runs under Trio with no marker)
and a ``slow`` marker declared: in a host's ``pyproject.toml``, ``[tool.pytest.ini_options]``
with ``trio_mode = true`` and ``markers = ["slow"]``.
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import trio
import trio.testing
from embedding_host import ROUTINES, FakeAgent, build_app
from hypercorn.config import Config
from hypercorn.trio import serve as serve_asgi

from trio_routines import Routine, Scheduler
from trio_routines.testing import MemoryStore, ScriptedAgent, WallClock

BERLIN = ZoneInfo("Europe/Berlin")
HERE = Path(__file__).resolve().parent


async def test_my_routine_fires_at_nine_in_berlin_across_the_spring_change(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Saturday 2026-03-28, 08:00 in Berlin; the clocks go forward on Sunday at 02:00.
    wall = WallClock(datetime(2026, 3, 28, 8, 0, tzinfo=BERLIN))
    store, agent = MemoryStore(), ScriptedAgent()
    digest = Routine(name="digest", prompt="digest", cron="0 9 * * *", tz="Europe/Berlin")
    # Virtual time still runs every tick of the scheduler's polls (wake-ups, heartbeat; every
    # 30 s by default): polled hourly, days pass in a few thousand fewer steps.
    scheduler = Scheduler(agent=agent, store=store, routines=[digest], now=wall, poll_interval=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(60 * 3600)  # two and a half virtual days: Saturday to Monday night
        scheduler.stop()
    fires = await store.history("digest")
    assert [f.slot.astimezone(BERLIN).strftime("%a %H:%M %Z") for f in fires] == [
        "Sat 09:00 CET",
        "Sun 09:00 CEST",
        "Mon 09:00 CEST",
    ]
    # In UTC the slot moved an hour earlier; every one ran once and completed.
    assert [f.slot for f in fires] == [
        datetime(2026, 3, 28, 8, tzinfo=UTC),
        datetime(2026, 3, 29, 7, tzinfo=UTC),
        datetime(2026, 3, 30, 7, tzinfo=UTC),
    ]
    assert [f.outcome.value if f.outcome else None for f in fires] == ["completed"] * 3
    assert [t.session for t in agent.turns] == ["routine:digest"] * 3


async def test_the_fake_agent_knows_the_slot_it_fires_for(
    autojump_clock: trio.testing.MockClock,
) -> None:
    wall = WallClock(datetime(2026, 7, 7, 9, 5, tzinfo=BERLIN))
    store = MemoryStore()
    replies: list[str] = []
    agent = FakeAgent(delay=0)
    scheduler = Scheduler(agent=agent, store=store, routines=ROUTINES, now=wall)
    slot = datetime(2026, 7, 7, 7, tzinfo=UTC)
    result = await scheduler.fire("digest", slot)  # the external-clock path: claim, run, settle
    assert result.claimed
    assert agent.said == [
        "[routine:digest] for the digest slot 2026-07-07 07:00Z: Post the morning digest."
    ]
    turn = await scheduler.run_now("cleanup", on_text=replies.append)
    assert turn.outcome.value == "completed"
    assert "".join(replies).startswith("[routine:cleanup] (run): Tidy the scratch space.")


@asynccontextmanager
async def hosted(scheduler: Scheduler, agent: FakeAgent) -> AsyncIterator[int]:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        shutdown = trio.Event()
        app = build_app(scheduler, agent)
        binds = await nursery.start(
            partial(serve_asgi, app, config, shutdown_trigger=shutdown.wait)  # type: ignore[arg-type]
        )
        yield int(binds[0].rsplit(":", 1)[1])
        shutdown.set()
        scheduler.stop(grace=0)


def request(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        headers = {"Content-Type": "application/json"} if body else {}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


async def test_chat_streams_and_the_scheduler_answers_under_its_prefix() -> None:
    agent = FakeAgent(delay=0.001)
    scheduler = Scheduler(agent=agent, store=MemoryStore(), routines=ROUTINES)
    async with hosted(scheduler, agent) as port:
        status, body = await trio.to_thread.run_sync(
            request, port, "POST", "/chat?session=chat:1", b"hello there"
        )
        assert (status, body) == (200, b"[chat:1] (chat): hello there ")
        status, body = await trio.to_thread.run_sync(request, port, "GET", "/scheduler/routines")
        assert status == 200
        assert b'"digest"' in body
        status, body = await trio.to_thread.run_sync(
            request, port, "POST", "/scheduler/run", b'{"name": "cleanup"}'
        )
        assert status == 200
        assert b'"reply":"[routine:cleanup] (run): Tidy the scratch space. "' in body


@pytest.mark.slow
def test_the_server_stops_on_sigterm_within_its_grace(tmp_path: Path) -> None:
    command = [sys.executable, str(HERE / "embedding_host.py"), "--state", str(tmp_path / "state"),
               "--port", "0", "--grace", "2"]  # fmt: skip
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.startswith("listening on http://127.0.0.1:"), line
            port = int(line.rsplit(":", 1)[1])
            status, body = request(port, "GET", "/scheduler/healthz")
            assert status == 200
            status, body = request(port, "POST", "/scheduler/run", b'{"name": "cleanup"}')
            assert status == 200
            assert b'"outcome":"completed"' in body
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=30) == 0  # the grace (2 s) plus a generous bound
            assert proc.stderr is not None
            assert "SIGTERM received" in proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
