"""The structured fields of a turn's outcome line: each way a turn ends, whole."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from trio_routines.agent import SESSION_BUSY, Completed, Event, Failed
from trio_routines.turns import run_turn

FIELDS = ("outcome", "ms", "error")


class Agent:
    def __init__(self, *events: Event, raises: Exception | None = None, sleep: float = 0) -> None:
        self.events = events
        self.raises = raises
        self.sleep = sleep

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        await trio.sleep(self.sleep)
        for event in self.events:
            yield event
        if self.raises is not None:
            raise self.raises


async def outcome_fields(
    caplog: pytest.LogCaptureFixture, agent: Agent, **options: Any
) -> tuple[str, dict[str, object]]:
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="trio_routines"):
        await run_turn(agent, "daily", "s", "p", **options)
    (line,) = [r for r in caplog.records if hasattr(r, "outcome")]
    return line.getMessage(), {k: getattr(line, k) for k in FIELDS if hasattr(line, k)}


async def test_each_end_of_a_turn_logs_its_fields(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    assert await outcome_fields(caplog, Agent(Completed(), sleep=1.5)) == (
        "daily completed (1500ms)",
        {"outcome": "completed", "ms": 1500},
    )
    assert await outcome_fields(caplog, Agent(Failed("no\nmodel"))) == (
        "daily failed (0ms): no model",
        {"outcome": "failed", "ms": 0, "error": "no model"},
    )
    assert await outcome_fields(caplog, Agent(raises=RuntimeError("boom"))) == (
        "daily errored (0ms): boom",
        {"outcome": "failed", "ms": 0, "error": "boom"},
    )
    assert await outcome_fields(caplog, Agent(Failed("busy", SESSION_BUSY))) == (
        "daily: occurrence skipped (session busy) (0ms)",
        {"outcome": "skipped", "ms": 0},
    )
    assert await outcome_fields(caplog, Agent(sleep=10), timeout=2) == (
        "daily failed (2000ms): timed out after 2s",
        {"outcome": "failed", "ms": 2000, "error": "timed out after 2s"},
    )
    grace = trio.CancelScope(deadline=trio.current_time() + 3)  # the turn enters it
    assert await outcome_fields(caplog, Agent(sleep=10), grace_scope=grace) == (
        "daily interrupted: the stop ended it: its grace ran out, or a second stop came (3000ms)",
        {"outcome": "interrupted", "ms": 3000, "error": "interrupted by stop"},
    )


@pytest.mark.parametrize("held", [True, False])
async def test_a_turn_whose_session_is_anothers_logs_no_start(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture, held: bool
) -> None:
    # Our own gate found the session's turn running: nothing started, so no "firing" line
    # before the skip (a script reading the log saw a start). An agent that answers busy
    # itself was asked: its start is logged.
    with caplog.at_level(logging.INFO, logger="trio_routines"):
        await run_turn(Agent(Failed("busy", SESSION_BUSY)), "daily", "s", "p", held=held)
    assert [r.getMessage() for r in caplog.records] == [
        *(["daily firing (session=s)"] if held else []),
        "daily: occurrence skipped (session busy) (0ms)",
    ]
