"""``H`` end to end: the scheduler fires the resolved instant, the command line shows it.

The pure resolution is tested in ``test_cron_hashed.py``; here the plumbing: a routine's name
seeds its ``H`` in the cron loop, the fire path's grid check, ``next``, ``list`` and ``wake``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
import trio

from tests.procs import Env
from tests.test_http import Server
from tests.test_scheduler import Rig, at, sleep_until_wall
from trio_routines import Outcome, Routine
from trio_routines.cron import next_run, resolve_hashed, wakeup_seed
from trio_routines.http import serve_http
from trio_routines.instants import parse_iso
from trio_routines.scheduler import Scheduler
from trio_routines.testing import MemoryStore, ScriptedAgent


def _minute(cron: str, seed: str) -> int:
    return int(resolve_hashed(cron, seed).split()[0])


async def test_the_scheduler_fires_each_routine_at_its_own_hashed_minute(
    autojump_clock: Any,
) -> None:
    names = ["digest", "report", "backup"]
    routines = [Routine(name=name, prompt="p", cron="H 11 * * *") for name in names]
    minutes = {name: _minute("H 11 * * *", name) for name in names}
    assert len(set(minutes.values())) == 3  # spread: three different minutes
    rig = Rig(*routines)
    async with rig.running():
        await sleep_until_wall(rig.wall, at(12))
    for name in names:
        slot = at(11, minutes[name])
        assert await rig.fires(name) == [(slot, slot, Outcome.COMPLETED)]


def test_next_shows_the_resolved_schedule_of_a_name(env: Env) -> None:
    after = "2026-07-01T00:00Z"
    resolved = resolve_hashed("H 9 * * *", "digest")
    result = env.run_cli(
        "next", "--cron", "H 9 * * *", "--name", "digest", "-n", "2", "--after", after
    )
    assert result.returncode == 0, result.stderr
    minute = int(resolved.split()[0])
    assert result.stdout.splitlines() == [
        f"2026-07-01T09:{minute:02d}:00.000Z",
        f"2026-07-02T09:{minute:02d}:00.000Z",
    ]
    assert f'H resolved for "digest": "{resolved}"' in result.stderr
    # a routine of that name resolves the same way
    env.routine("digest", cron="H 9 * * *")
    by_name = env.run_cli("next", "digest", "-n", "2", "--after", after)
    assert by_name.stdout == result.stdout


def test_h_needs_a_name_on_the_command_line(env: Env) -> None:
    result = env.run_cli("next", "--cron", "H 9 * * *")
    assert (result.returncode, result.stdout) == (2, "")
    assert "needs a name to hash" in result.stderr
    env.routine("daily", cron="0 9 * * *")
    result = env.run_cli("next", "daily", "--name", "x")
    assert result.returncode == 2
    assert "--name goes with --cron" in result.stderr


@pytest.mark.slow
def test_list_and_fire_use_the_resolved_schedule(env: Env) -> None:
    env.routine("digest", cron="H 9 * * *")
    resolved = resolve_hashed("H 9 * * *", "digest")
    listing = env.cli("list")
    assert listing.returncode == 0, listing.stderr
    assert f"cron H 9 * * * (= {resolved})" in listing.stdout
    entry = json.loads(env.cli("list", "--json").stdout)["routines"][0]
    assert (entry["cron"], entry["resolved_cron"]) == ("H 9 * * *", resolved)
    minute = int(resolved.split()[0])
    on_grid = f"2026-07-07T09:{minute:02d}:00Z"
    off_grid = f"2026-07-07T09:{(minute + 1) % 60:02d}:00Z"
    refused = env.cli("fire", "digest", "--slot", off_grid, "--agent", "echo")
    assert refused.returncode == 1
    assert "cron grid" in refused.stderr
    fired = env.cli("fire", "digest", "--slot", on_grid, "--agent", "echo")
    assert fired.returncode == 0, fired.stderr


def test_a_recurring_wakeup_resolves_from_its_session_and_id(env: Env) -> None:
    before = datetime.now(UTC)
    added = env.run_cli(
        "wake", "--session", "chat", "--cron", "H H * * *", "--prompt", "p", "--json"
    )
    assert added.returncode == 0, added.stderr
    wakeup = json.loads(added.stdout)
    resolved = resolve_hashed("H H * * *", wakeup_seed("chat", wakeup["id"]))
    expected = next_run(resolved, None, before)
    assert expected is not None
    fire_at = datetime.fromisoformat(wakeup["fireAt"])
    assert fire_at in (expected, next_run(resolved, None, expected))  # a minute may turn
    assert fire_at - before < timedelta(days=1, minutes=1)
    listing = env.run_cli("list")
    assert f"cron H H * * * (= {resolved})" in listing.stdout


async def test_http_lists_the_resolved_cron_and_resolves_wakeups() -> None:
    digest = Routine(name="digest", prompt="p", cron="H 9 * * 1-5", tz="Europe/Berlin")
    plain = Routine(name="plain", prompt="p", cron="0 9 * * *")
    agent, store = ScriptedAgent(), MemoryStore()
    scheduler = Scheduler(agent=agent, store=store, routines=[digest, plain], external_clock=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        port = await nursery.start(partial(serve_http, scheduler, "127.0.0.1", 0))
        server = Server(port, scheduler, agent, store)
        listing = {item["name"]: item for item in (await server.call("GET", "/routines")).json}
        assert listing["digest"]["resolved_cron"] == resolve_hashed("H 9 * * 1-5", "digest")
        assert "resolved_cron" not in listing["plain"]
        before = datetime.now(UTC)
        added = await server.call(
            "POST", "/wakeups", {"session": "chat", "prompt": "p", "cron": "H H * * *"}
        )
        assert added.status == 201, added.raw
        wakeup = added.json["wakeup"]
        resolved = resolve_hashed("H H * * *", wakeup_seed("chat", wakeup["id"]))
        expected = next_run(resolved, None, before)
        assert expected is not None
        assert parse_iso(wakeup["fireAt"]) in (expected, next_run(resolved, None, expected))
        too_often = await server.call(
            "POST", "/wakeups", {"session": "chat", "prompt": "p", "cron": "H/5 * * * *"}
        )
        assert too_often.status == 400
        assert "too frequent" in too_often.json["error"]
        digits = await server.call(
            "POST", "/wakeups", {"session": "chat", "prompt": "p", "cron": "9" * 5000 + " * * * *"}
        )
        assert digits.status == 400  # was a 500 with a traceback
        assert digits.json["error"] == "the cron is too long: at most 1,024 characters, not 5,008."
        digits = await server.call(
            "POST", "/wakeups", {"session": "chat", "prompt": "p", "cron": "9" * 1000 + " * * * *"}
        )
        assert digits.status == 400
        assert 'minute field: "99999999' in digits.json["error"]
        assert len(await store.list_wakeups()) == 1
        scheduler.stop(grace=0)
