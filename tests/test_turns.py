"""Running one turn (trio_routines.turns): how its events decide the outcome."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from trio_routines.agent import SESSION_BUSY, Completed, Event, Failed, TextDelta
from trio_routines.records import Outcome
from trio_routines.routines import Routine
from trio_routines.scheduler import Scheduler
from trio_routines.testing import MemoryStore, WallClock
from trio_routines.turns import run_turn

SLOT = datetime(2026, 7, 7, 9, tzinfo=UTC)


class Says:
    """An agent whose every turn yields ``events``."""

    def __init__(self, *events: Event) -> None:
        self.events = events

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        for event in self.events:
            yield event


@pytest.mark.parametrize(
    "events",
    [
        (Failed(""),),
        (TextDelta("half"), Failed("")),
        (Failed("boom"), Failed("")),  # the last failed event wins, as ever
    ],
    ids=["empty", "after-text", "last-wins"],
)
async def test_a_failed_event_with_no_details_completes_the_turn(
    events: tuple[Event, ...], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_routines")
    result = await run_turn(Says(*events), "daily", "routine:daily", "go")
    assert result.outcome is Outcome.COMPLETED
    assert result.failed is None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "daily completed" in caplog.text


async def test_a_failure_with_words_or_a_busy_code_is_kept() -> None:
    failed = await run_turn(Says(Failed(""), Failed("boom")), "d", "routine:d", "go")
    assert (failed.outcome, failed.failed) == (Outcome.FAILED, "boom")
    # Blanks are words to the original (a true string): still a failure, logged without a
    # colon (tests/test_pinned_core.py::test_a_failure_without_details_logs_no_colon).
    blank = await run_turn(Says(Failed(" \n ")), "d", "routine:d", "go")
    assert blank.outcome is Outcome.FAILED
    busy = await run_turn(Says(Failed("", SESSION_BUSY)), "d", "routine:d", "go")
    assert (busy.outcome, busy.busy) == (Outcome.SKIPPED, True)
    done = await run_turn(Says(TextDelta("x"), Completed()), "d", "routine:d", "go")
    assert done.outcome is Outcome.COMPLETED


async def test_a_fire_whose_agent_fails_without_words_settles_completed() -> None:
    store = MemoryStore()
    routine = Routine(name="daily", prompt="go", cron="0 9 * * *")
    clock = WallClock(datetime(2026, 7, 7, 9, 0, 5, tzinfo=UTC))
    scheduler = Scheduler(agent=Says(Failed("")), store=store, routines=[routine], now=clock)
    result = await scheduler.fire("daily", SLOT)
    assert result.outcome is Outcome.COMPLETED
    fire = await store.latest_fire("daily")
    assert fire is not None
    assert (fire.outcome, fire.error) == (Outcome.COMPLETED, None)
