"""Running one turn (trio_routines.turns): how its events decide the outcome."""

from __future__ import annotations

import gc
import logging
import warnings
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
import trio

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


class _Unsayable:
    def __str__(self) -> str:
        raise RuntimeError("no words")

    def __bool__(self) -> bool:
        raise RuntimeError("no truth")


@pytest.mark.parametrize(
    ("details", "code", "outcome", "said"),
    [
        (123, None, Outcome.FAILED, "123"),
        (b"x", None, Outcome.FAILED, "b'x'"),
        (10**5000, None, Outcome.FAILED, "<int>"),  # past Python's digits limit
        (_Unsayable(), None, Outcome.FAILED, "<_Unsayable>"),
        (0, None, Outcome.COMPLETED, None),  # false details: no failure, as an empty text
        ([], None, Outcome.COMPLETED, None),
        (TimeoutError(), None, Outcome.FAILED, "<TimeoutError>"),  # true, its text empty
        ("boom", 7, Outcome.FAILED, "boom"),  # a code that is no text is none
        (b"x", SESSION_BUSY, Outcome.SKIPPED, "b'x'"),  # a busy code kept with them
        ("", SESSION_BUSY, Outcome.SKIPPED, ""),
    ],
    ids=[
        "int",
        "bytes",
        "huge-int",
        "unsayable",
        "zero",
        "empty-list",
        "exception",
        "code-int",
        "bytes-busy",
        "busy",
    ],
)
async def test_a_failure_whose_details_are_no_text_is_recorded_as_text(
    details: object, code: object, outcome: Outcome, said: str | None
) -> None:
    # A py: agent's own values: the turn's record and its log line take them as text.
    event = Failed(details, code)  # type: ignore[arg-type]
    result = await run_turn(Says(event), "d", "routine:d", "go")
    assert (result.outcome, result.failed) == (outcome, said)


async def test_a_fire_whose_agent_fails_with_a_number_settles_failed_with_it() -> None:
    store = MemoryStore()
    routine = Routine(name="daily", prompt="go", cron="0 9 * * *", output="1KiB")
    clock = WallClock(datetime(2026, 7, 7, 9, 0, 5, tzinfo=UTC))
    agent = Says(TextDelta(42), Failed(123))  # type: ignore[arg-type]
    scheduler = Scheduler(agent=agent, store=store, routines=[routine], now=clock)
    result = await scheduler.fire("daily", SLOT)
    assert result.outcome is Outcome.FAILED
    fire = await store.latest_fire("daily")
    assert fire is not None
    assert (fire.outcome, fire.error, fire.output) == (Outcome.FAILED, "123", "42")


async def test_an_exception_whose_text_cannot_be_made_is_named_by_its_type() -> None:
    class Mute(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no words")

    class Raises:
        async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
            raise Mute
            yield Completed()

    result = await run_turn(Raises(), "d", "routine:d", "go")
    assert (result.outcome, result.failed) == (Outcome.FAILED, "<Mute>")


@pytest.mark.parametrize("returned", [[Completed()], None, "text", "coroutine"])
async def test_an_invoke_that_returns_no_async_iterator_fails_the_turn_saying_so(
    returned: object,
) -> None:
    class Plain:  # a plain function: nothing refuses it before its first turn
        def invoke(self, session: str, text: str) -> object:
            return returned

    class Returns:  # an async def that returns: its coroutine is closed, never left unawaited
        async def invoke(self, session: str, text: str) -> object:
            return [Completed()]

    agent = Returns() if returned == "coroutine" else Plain()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine ... was never awaited" would be one
        result = await run_turn(agent, "d", "routine:d", "go")  # type: ignore[arg-type]
        gc.collect()
    assert result.outcome is Outcome.FAILED
    kind = "coroutine" if returned == "coroutine" else type(returned).__name__
    assert result.failed == (
        f"the agent's invoke returned {kind}, not an async "
        "iterator of events (make it an async generator: async def with yield)"
    )


class Exits:
    """An agent whose library code calls ``sys.exit`` (argparse on bad arguments does): in
    ``invoke`` itself, in its stream, or in a task of its own nursery."""

    def __init__(self, where: str, code: object) -> None:
        self.where, self.code = where, code

    def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        if self.where == "invoke":
            raise SystemExit(self.code)
        return self._events()

    async def _events(self) -> AsyncIterator[Event]:
        yield TextDelta("half")
        if self.where == "stream":
            raise SystemExit(self.code)
        if self.where == "nursery":  # a group: [a group of a ValueError, one of the exit]

            async def exits() -> None:  # (each its own nursery's, say)
                raise BaseExceptionGroup("inner exit", [SystemExit(self.code)])

            async def fails() -> None:
                raise ExceptionGroup("inner", [ValueError("beside it")])

            async with trio.open_nursery() as nursery:
                nursery.start_soon(fails)
                nursery.start_soon(exits)
        yield Completed()


@pytest.mark.parametrize(
    ("where", "code", "said"),
    [
        ("invoke", 2, "the agent raised SystemExit(2)"),
        ("stream", "usage: bad", "the agent raised SystemExit(usage: bad)"),
        ("stream", None, "the agent raised SystemExit()"),
        ("nursery", 4, "the agent raised SystemExit(4)"),
    ],
)
async def test_an_agent_that_raises_system_exit_fails_its_turn_only(
    where: str, code: object, said: str
) -> None:
    result = await run_turn(Exits(where, code), "d", "routine:d", "go")
    assert (result.outcome, result.failed) == (Outcome.FAILED, said)


async def test_an_agent_whose_close_raises_system_exit_fails_the_turn() -> None:
    class ClosesExiting:
        def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
            return self

        def __aiter__(self) -> AsyncIterator[Event]:
            return self

        async def __anext__(self) -> Event:
            raise RuntimeError("stream broke")

        async def aclose(self) -> None:
            raise SystemExit(3)

    result = await run_turn(ClosesExiting(), "d", "routine:d", "go")  # type: ignore[arg-type]
    assert (result.outcome, result.failed) == (Outcome.FAILED, "stream broke")


async def test_a_cancel_grouped_with_an_agents_system_exit_is_not_kept_by_the_turn() -> None:
    class CancelledBeside:
        async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
            async def exits() -> None:
                raise SystemExit(5)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(exits)
                await trio.sleep_forever()  # cancelled: the group holds a Cancelled too
            yield Completed()

    with trio.CancelScope() as scope:
        scope.cancel()  # the caller's: its Cancelled must reach it
        with pytest.raises(BaseExceptionGroup) as raised:
            await run_turn(CancelledBeside(), "d", "routine:d", "go")
    assert raised.value.split(trio.Cancelled)[0] is not None


async def test_a_fire_whose_agent_raises_system_exit_settles_failed_and_the_next_runs() -> None:
    store = MemoryStore()
    routine = Routine(name="daily", prompt="go", cron="0 9 * * *")
    clock = WallClock(datetime(2026, 7, 7, 9, 0, 5, tzinfo=UTC))
    agent = Exits("stream", 2)
    scheduler = Scheduler(agent=agent, store=store, routines=[routine], now=clock)
    result = await scheduler.fire("daily", SLOT)
    assert result.outcome is Outcome.FAILED
    fire = await store.latest_fire("daily")
    assert fire is not None
    assert (fire.outcome, fire.error) == (Outcome.FAILED, "the agent raised SystemExit(2)")
    agent.where = "nowhere"
    again = await scheduler.run_now("daily")
    assert again.outcome is Outcome.COMPLETED
