"""The boot's reconcile of claims left open: what one unreadable routine does to the others."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from scheduler_rig import HOURLY, Recording, at, messages, rig

from trio_routines import DirectoryStore, Outcome, Routine, Scheduler, StateFault
from trio_routines.testing import ScriptedAgent, WallClock

DAILY = Routine(name="daily", prompt="d", cron="0 9 * * *")
MANUAL = Routine(name="manual", prompt="m")


@pytest.fixture(autouse=True)
def _capture(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_routines")


async def test_a_resident_boot_reconciles_every_readable_routine_then_fails_naming_the_unreadable(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(Recording):
        async def latest_fire(self, routine: str) -> Any:
            if routine == "daily":
                raise StateFault("the fired-slot claims for 'daily' are unreadable")
            return await super().latest_fire(routine)

    store = Broken()
    await store.claim("hourly", at(9), at(9, 1))  # left open by a dead process
    await store.claim("manual", at(8), at(8, 2))  # after the unreadable routine in order
    scheduler, agent, _, _ = rig(HOURLY, DAILY, MANUAL, store=store, wakeups=False)
    with pytest.raises(StateFault) as raised:
        await scheduler.run()
    assert str(raised.value) == "the fired-slot claims for 'daily' are unreadable"
    assert agent.turns == []
    for name, slot in (("hourly", at(9)), ("manual", at(8))):
        fire = await store.latest_fire(name)
        assert fire is not None
        assert fire.slot == slot
        assert fire.outcome is Outcome.INTERRUPTED
    assert [m.split(":")[0] for m in messages(caplog, logging.WARNING)] == ["hourly", "manual"]


async def test_a_state_directory_boot_reconciles_the_routines_around_a_damaged_one(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    async with DirectoryStore(state) as store:
        for name in ("a", "c"):
            await store.claim(name, at(9), at(9, 1))  # left open: no process holds them
    claims = state / "schedule" / "claims"
    (claims / "b").write_text("a file where a claims directory should be")
    routines = [Routine(name=n, prompt="p", cron="0 * * * *") for n in ("a", "b", "c")]
    wall = WallClock(at(10, 30))
    async with DirectoryStore(state) as store:
        scheduler = Scheduler(
            agent=ScriptedAgent(wall=wall), store=store, routines=routines, now=wall
        )
        with pytest.raises(StateFault, match="'b'"):
            await scheduler.run()
    async with DirectoryStore(state) as store:
        for name in ("a", "c"):
            fire = await store.latest_fire(name)
            assert fire is not None
            assert fire.outcome is Outcome.INTERRUPTED, name
