"""Store behaviours that no other test pinned (issue 11): checked to fail when broken by hand."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio

from trio_routines import Outcome, Routine, Scheduler
from trio_routines.records import ClaimStatus
from trio_routines.store import Store
from trio_routines.stores import RESUME_LANDED_LATE, landed
from trio_routines.stores.directory import DirectoryStore
from trio_routines.testing import ScriptedAgent

T0 = datetime(2026, 7, 7, 10, 30, tzinfo=UTC)
HOUR = timedelta(hours=1)
DAILY = Routine(name="daily", prompt="p", cron="0 9 * * *")


# -- settling a claim that is gone logs nothing and writes nothing ---------------------------


async def test_settling_a_pruned_claim_logs_nothing_and_writes_nothing(
    store_factory: Callable[..., Store], caplog: pytest.LogCaptureFixture
) -> None:
    store = store_factory(keep=2)
    first = T0 - 5 * HOUR
    assert (await store.claim("r", first, first)).status is ClaimStatus.TAKEN
    for hours in (4, 3):  # two newer claims prune the first while its turn "runs"
        slot = T0 - hours * HOUR
        await store.claim("r", slot, slot)
    before = [(f.slot, f.outcome) for f in await store.history("r")]
    assert before == [(T0 - 4 * HOUR, None), (T0 - 3 * HOUR, None)]
    caplog.clear()
    caplog.set_level(logging.DEBUG)
    await store.settle("r", first, Outcome.COMPLETED, 5)
    assert caplog.records == []
    assert [(f.slot, f.outcome) for f in await store.history("r")] == before
    await store.aclose()


async def test_settling_a_deleted_claim_file_recreates_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = DirectoryStore(tmp_path)
    await store.claim("r", T0, T0)
    claims = tmp_path / "schedule" / "claims" / "r"
    (claim,) = claims.iterdir()
    claim.unlink()
    caplog.set_level(logging.DEBUG)
    await store.settle("r", T0, Outcome.FAILED, 5)
    assert caplog.records == []
    assert list(claims.iterdir()) == []
    assert await store.history("r") == []


# -- a legacy fires.json (the original's state up to 0.21) is neither read nor written -------


def _legacy(root: Path, last_fired: datetime) -> tuple[Path, bytes, int]:
    path = root / "schedule" / "fires.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"daily": last_fired.isoformat().replace("+00:00", "Z")}).encode()
    path.write_bytes(text)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    return path, text, path.stat().st_mtime_ns


async def test_a_legacy_fires_json_does_not_make_a_slot_a_duplicate(tmp_path: Path) -> None:
    # The original (<= 0.21) skipped a slot when fires.json said lastFired >= slot.
    path, text, mtime = _legacy(tmp_path, T0 + 24 * HOUR)
    store = DirectoryStore(tmp_path)
    assert await store.latest_fire("daily") is None
    scheduler = Scheduler(
        agent=ScriptedAgent(), store=store, routines=[DAILY], now=lambda: T0, wakeups=False
    )
    result = await scheduler.fire("daily", datetime(2026, 7, 7, 9, tzinfo=UTC))
    assert (result.claimed, result.outcome) == (True, Outcome.COMPLETED)
    assert path.read_bytes() == text
    assert path.stat().st_mtime_ns == mtime
    # Beside it, only what a fire writes: its claim, the replica's holds and record, and when
    # the routine was first armed (its first fire: its missed slots count from then; written
    # under the gaps' lock).
    names = sorted(p.name for p in path.parent.iterdir())
    assert names == [
        "armed.json",
        "claims",
        "fires.json",
        "gaps.lock",
        "holds",
        "holds2",
        "replicas",
    ]


async def test_a_legacy_fires_json_does_not_plan_a_catch_up(tmp_path: Path) -> None:
    # Were fires.json read as the newest fire, a boot would catch up a missed slot at once.
    path, text, mtime = _legacy(tmp_path, T0 - 30 * 24 * HOUR)
    store = DirectoryStore(tmp_path)
    agent = ScriptedAgent()
    scheduler = Scheduler(agent=agent, store=store, routines=[DAILY], now=lambda: T0)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        assert scheduler.statistics().next_due == {"daily": datetime(2026, 7, 8, 9, tzinfo=UTC)}
        scheduler.stop(0)
    assert agent.turns == []
    assert await store.history("daily") == []
    assert path.read_bytes() == text
    assert path.stat().st_mtime_ns == mtime


@pytest.mark.parametrize("migrate", ["yes", "ALWAYS", "", None, True])
@pytest.mark.parametrize("state", ["directory", "postgresql://127.0.0.1:5432/test"])
def test_a_migrate_that_is_none_of_the_three_is_refused_before_anything_opens(
    tmp_path: Path, state: str, migrate: object
) -> None:
    from trio_routines.stores import open_store
    from trio_routines.stores.postgres import PostgresStore

    target = str(tmp_path / "state") if state == "directory" else state
    with pytest.raises(ValueError, match=r"^migrate must be ") as caught:
        open_store(target, migrate=migrate)  # type: ignore[arg-type]
    assert str(caught.value) == f"migrate must be always, create or never, not {migrate!r}"
    assert not (tmp_path / "state").exists()
    with pytest.raises(ValueError, match=r"^migrate must be ") as direct:
        PostgresStore("postgresql://127.0.0.1:5432/test", migrate=migrate)  # type: ignore[arg-type]
    assert str(direct.value) == str(caught.value)


def test_a_resume_keeps_its_instant_unless_it_took_a_fifth_of_a_second_or_more_to_land() -> None:
    at = datetime(2026, 7, 7, 10, tzinfo=UTC)
    assert RESUME_LANDED_LATE == 0.2
    assert landed(at, 0.0) == at
    assert landed(at, 0.199) == at
    assert landed(at, 0.2) == at + timedelta(seconds=0.2)  # from then, when it landed
    assert landed(at, 3.5) == at + timedelta(seconds=3.5)
