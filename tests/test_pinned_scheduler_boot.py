"""The boot pinned whole (issue 11): the reconcile of open claims, the last success it seeds,
the catch-up and its log lines, and which fault a broken store's boot raises.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trio
from scheduler_rig import HOURLY, T0, Recording, at, completed, messages, rig

from trio_routines import Outcome, Routine, StateFault
from trio_routines.instants import format_iso
from trio_routines.scheduler.boot import BOOT_INTERRUPTED
from trio_routines.scheduler.openclaims import found_by
from trio_routines.testing import WallClock

DAILY = Routine(name="daily", prompt="d", cron="0 9 * * *")
MANUAL = Routine(name="manual", prompt="m")


@pytest.fixture(autouse=True)
def _capture(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_routines")


async def test_open_claims_are_settled_interrupted_only_if_still_open_and_said_so(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = Recording()
    await store.claim("hourly", at(9), at(9, 1))  # left open by a dead process
    await store.claim("daily", at(9), at(9))
    await store.settle("daily", at(9), Outcome.COMPLETED, 2500)
    await store.claim("manual", at(8), at(8, 2))  # an external fire left open
    store.calls.clear()
    scheduler, agent, _, _ = rig(HOURLY, DAILY, MANUAL, store=store, wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        scheduler.stop()
    assert sorted(c for c in store.calls if c[0] == "settle") == [
        (
            "settle",
            name,
            slot,
            Outcome.INTERRUPTED,
            None,
            {"if_unsettled": True, "error": found_by(BOOT_INTERRUPTED, scheduler.replica)},
        )
        for name, slot in (("hourly", at(9)), ("manual", at(8)))
    ]
    assert messages(caplog, logging.WARNING) == [
        f"{name}: the fire of slot {format_iso(slot)} claimed at {stamp} never finished — its "
        f"process stopped mid-turn; recorded as interrupted (see `python -m trio_routines "
        f"history {name}`)"
        for name, slot, stamp in (
            ("hourly", at(9), "2026-07-07T09:01:00.000Z"),
            ("manual", at(8), "2026-07-07T08:02:00.000Z"),
        )
    ]
    # The last success is the completed claim's end: stamped 09:00, it took 2.5 s. A cron
    # routine with no success known has the series too: its oldest instant known (gaps.py).
    assert scheduler.metrics.last_success == {
        "daily": at(9) + timedelta(seconds=2.5),
        "hourly": at(9),
    }
    assert agent.turns == []


async def test_a_catch_up_is_logged_and_armed_at_once(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = Recording()
    await store.claim("hourly", at(8), at(8))
    await store.settle("hourly", at(8), Outcome.COMPLETED, None)
    scheduler, agent, _, _wall = rig(HOURLY, DAILY, store=store, wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        assert scheduler.statistics().next_due == {"hourly": at(9), "daily": at(9, day=8)}
        # Seeded: no ms stored; daily, never claimed, from the boot's instant.
        assert scheduler.metrics.last_success == {"hourly": at(8), "daily": T0}
        await trio.sleep(1)
        scheduler.stop()
    assert [t.wall for t in agent.turns] == [T0]  # 09:00's catch-up, at once
    assert messages(caplog, logging.INFO)[0] == "hourly: catching up a missed run"


async def test_a_cron_that_never_fires_again_is_not_armed_at_boot(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    last = Routine(name="last", prompt="p", cron="0 23 1 12 *")
    scheduler, agent, _, _ = rig(last, HOURLY, wakeups=False)
    scheduler.now = agent.wall = WallClock(datetime(9999, 12, 2, tzinfo=UTC))
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        assert scheduler.statistics().armed == ("hourly",)
        scheduler.stop()
    assert messages(caplog, logging.WARNING) == [
        'last: cron "0 23 1 12 *" will never fire again — not armed'
    ]


async def test_a_boot_raises_the_first_broken_routines_fault_in_order(
    autojump_clock: Any,
) -> None:
    class Broken(Recording):
        async def latest_fire(self, routine: str) -> Any:
            await trio.sleep(1 if routine == "a" else 0)  # "b" fails first in time
            raise StateFault(f"{routine} is unreadable")

    routines = [Routine(name=n, prompt="p", cron="0 9 * * *") for n in ("a", "b")]
    scheduler, agent, _, _ = rig(*routines, store=Broken(), wakeups=False)
    with pytest.raises(StateFault) as caught:
        await scheduler.run()
    assert str(caught.value) == "a is unreadable"
    assert agent.turns == []


async def test_a_resume_re_plans_in_the_routines_zone_with_its_hash(autojump_clock: Any) -> None:
    report = Routine(name="report", prompt="p", cron="H 9 * * *", tz="Europe/Berlin")  # 07:31Z
    store = Recording()
    await completed(store, "report", at(7, 31))
    await store.set_paused("report", True, at(8))
    await store.set_paused("report", False, at(8, day=8))  # day 8's 07:31 passed while paused
    scheduler, agent, _, _ = rig(report, store=store, wakeups=False)
    scheduler.now = agent.wall = WallClock(at(12, day=8))
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        assert scheduler.statistics().next_due == {"report": at(7, 31, day=9)}
        await trio.sleep(60)
        scheduler.stop()
    assert agent.turns == []


async def test_a_resume_stamped_ahead_is_warned_of_and_holds_nothing_back(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Stamped a day ahead (a clock that ran ahead at the resume): the boot planned from it,
    # and an hourly routine did not fire for a day, with only an INFO line of a pause.
    store = Recording()
    await completed(store, "hourly", at(9))
    await store.set_paused("hourly", True, at(9, 30))
    await store.set_paused("hourly", False, at(10, day=8))
    scheduler, agent, _, _ = rig(store=store, wakeups=False)  # booted at 10:30 on the 7th
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        assert scheduler.statistics().next_due == {"hourly": at(11)}
        await trio.sleep(3600)
        scheduler.stop()
    assert [t.wall for t in agent.turns] == [at(11)]
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "hourly: its resume is stamped 2026-07-08T10:00:00.000Z, after now "
        "(2026-07-07T10:30:00.000Z) — a clock that ran ahead? Taken as made now"
    ]


async def test_a_slot_at_the_very_instant_of_the_resume_is_not_caught_up(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = Recording()
    await completed(store, "hourly", at(9))
    await store.set_paused("hourly", True, at(9, 30))
    await store.set_paused("hourly", False, at(10))
    scheduler, agent, _, _ = rig(store=store, wakeups=False)
    scheduler.now = agent.wall = WallClock(at(10))  # booted at 10:00 sharp
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        assert scheduler.statistics().next_due == {"hourly": at(11)}
        await trio.sleep(60)
        scheduler.stop()
    assert agent.turns == []
    assert not [r for r in caplog.records if "stamped" in r.getMessage()]  # now is not ahead


@pytest.mark.parametrize(
    ("booted", "caught_up"),
    [
        (at(10), False),
        (at(10) + timedelta(seconds=59), False),
        (at(10, 1), True),
        (at(10, 30), True),
    ],
)
async def test_a_boot_at_or_just_after_a_slot_fires_it_and_says_catching_up_only_when_late(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture, booted: datetime, caught_up: bool
) -> None:
    # Less than a minute late is on time (gaps.ON_TIME): "catching up a missed run" came
    # right after a "nothing was caught up (catchup: none, …)" of a routine that wants none.
    store = Recording()
    await completed(store, "hourly", at(9))
    store.fail("paused", StateFault("unreadable"), times=1)  # the boot's re-read of pauses
    scheduler, agent, _, _ = rig(store=store, wakeups=False)
    scheduler.now = agent.wall = WallClock(booted)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(1)
        scheduler.stop()
    assert len(agent.turns) == 1
    assert [f.slot for f in await store.history("hourly")] == [at(9), at(10)]
    said = "hourly: catching up a missed run" in messages(caplog, logging.INFO)
    assert said is caught_up
    assert messages(caplog, logging.DEBUG) == [
        "the paused routines could not be re-read: unreadable"
    ]


async def test_a_reconcile_the_store_never_answers_is_logged_and_the_boot_goes_on(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = Recording()
    await store.claim("hourly", at(10), at(10, 1))  # left open by a dead process
    store.hang("settle")
    scheduler, _, _, _ = rig(store=store, wakeups=False)  # store calls bounded to 5 s
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        booted = trio.current_time() - start
        next_due = dict(scheduler.statistics().next_due)
        scheduler.stop()
    assert booted == 5.0
    assert messages(caplog, logging.WARNING)[-2:] == [
        "hourly: could not record the interrupted outcome of slot 2026-07-07T10:00:00.000Z: "
        "the store did not answer in time",
        "hourly: the fire of slot 2026-07-07T10:00:00.000Z claimed at 2026-07-07T10:01:00.000Z "
        "never finished — its process stopped mid-turn; not recorded as interrupted (the "
        "store's line says why; left open)",
    ]
    assert next_due == {"hourly": at(11)}
    assert [(f.slot, f.outcome) for f in await store.history("hourly")] == [(at(10), None)]
