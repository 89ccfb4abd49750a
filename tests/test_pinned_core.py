"""Small modules pinned exactly: names, the session gate, one turn (scripts/mutation.py).

These are the fast tests mutation testing runs against ``names``, ``sessions`` and ``turns``:
every message is compared whole, every outcome with its details and duration in virtual time.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import trio
import trio.testing

from trio_routines import Outcome
from trio_routines.agent import SESSION_BUSY, Completed, Event, Failed, TextDelta
from trio_routines.claims import arm_from, claim_names, names_to_prune, parse_claim
from trio_routines.errors import UnsafeName
from trio_routines.instants import is_slot_name, parse_instant, require_utc, slot_name
from trio_routines.names import check_name, name_problem, routine_session, session_routine
from trio_routines.records import Fire
from trio_routines.sessions import SessionGate
from trio_routines.testing import Complete, Fail, Hang, Raise, ScriptedAgent
from trio_routines.turns import ACLOSE_LIMIT, run_turn

# -- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["daily", "每日简报", "my report", "a.b", "...", "-", "x" * 200])
def test_a_single_path_segment_is_a_name(name: str) -> None:
    assert name_problem(name) is None
    assert check_name(name) == name


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", '"" cannot be a routine name (no path separators, "." or "..")'),
        (".", '"." cannot be a routine name (no path separators, "." or "..")'),
        ("..", '".." cannot be a routine name (no path separators, "." or "..")'),
        ("a/b", '"a/b" cannot be a routine name (no path separators, "." or "..")'),
        ("a\\b", '"a\\\\b" cannot be a routine name (no path separators, "." or "..")'),
        ("a\x00b", '"a\\u0000b" cannot be a routine name (no path separators, "." or "..")'),
        (5, "a routine name must be a string, not int"),
        (None, "a routine name must be a string, not NoneType"),
        ("a\udcff", '"a\\udcff" cannot be a routine name (it is not valid Unicode text)'),
    ],
)
def test_a_bad_name_says_why(name: Any, problem: str) -> None:
    assert name_problem(name) == problem
    with pytest.raises(UnsafeName) as raised:
        check_name(name)
    assert str(raised.value) == problem


# -- the session gate ------------------------------------------------------------------------


class Recording:
    """An agent whose streams remember being closed."""

    def __init__(self, *events: Event) -> None:
        self.events = events
        self.closed = 0
        self.calls: list[tuple[str, str]] = []

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        self.calls.append((session, text))
        try:
            for event in self.events:
                await trio.lowlevel.checkpoint()
                yield event
        finally:
            self.closed += 1


async def events_of(stream: AsyncIterator[Event]) -> list[Event]:
    return [event async for event in stream]


async def test_the_gate_holds_a_session_for_one_turn() -> None:
    real = Recording(Completed())
    gate = SessionGate(real)
    assert gate.agent is real
    assert not gate.busy("a")
    with gate.hold("a") as agent:
        assert agent is real
        assert gate.busy("a")
        assert not gate.busy("b")
        with gate.hold("a") as second:
            assert second is not real
            assert await events_of(second.invoke("a", "t")) == [
                Failed("session a already has a turn in flight", SESSION_BUSY)
            ]
            assert gate.busy("a")  # the busy answer does not release the real holder
        assert gate.busy("a")
        with gate.hold("b") as other:
            assert other is real
    assert not gate.busy("a")
    assert not gate.busy("b")
    assert real.calls == []


async def test_a_hold_says_whether_the_busy_answer_is_its_own() -> None:
    gate = SessionGate(Recording(Completed()))
    first = gate.hold("a")
    assert not first.refused
    with first:
        assert not first.refused
        second = gate.hold("a")
        assert not second.refused
        with second:
            assert second.refused  # the session was held here: the busy answer is ours
        assert second.refused
    assert not first.refused


async def test_the_gate_releases_a_session_when_the_turn_raises() -> None:
    gate = SessionGate(Recording())
    with pytest.raises(KeyError), gate.hold("a"):
        raise KeyError("boom")
    assert not gate.busy("a")


async def test_the_gated_agent_passes_events_through_and_closes_the_stream() -> None:
    real = Recording(TextDelta("hi"), Completed())
    gate = SessionGate(real)
    assert await events_of(gate.invoke("a", "text")) == [TextDelta("hi"), Completed()]
    assert real.calls == [("a", "text")]
    assert real.closed == 1
    assert not gate.busy("a")


async def test_the_gated_agent_closes_a_stream_cut_short() -> None:
    real = Recording(TextDelta("1"), TextDelta("2"), Completed())
    gate = SessionGate(real)
    stream = gate.invoke("a", "text")
    assert await stream.__anext__() == TextDelta("1")
    assert gate.busy("a")
    await stream.aclose()  # type: ignore[attr-defined]
    assert real.closed == 1
    assert not gate.busy("a")


async def test_the_gated_agent_is_busy_while_its_session_is_held() -> None:
    real = Recording(Completed())
    gate = SessionGate(real)
    with gate.hold("a"):
        assert await events_of(gate.invoke("a", "t")) == [
            Failed("session a already has a turn in flight", SESSION_BUSY)
        ]
    assert real.calls == []


async def test_the_gated_agent_works_with_a_stream_without_aclose() -> None:
    class Plain:
        def __init__(self) -> None:
            self.items = [Completed()]

        def __aiter__(self) -> Plain:
            return self

        async def __anext__(self) -> Event:
            if not self.items:
                raise StopAsyncIteration
            return self.items.pop()

    class Agent:
        def invoke(self, session: str, text: str) -> Plain:
            return Plain()

    gate = SessionGate(Agent())  # type: ignore[arg-type]
    assert await events_of(gate.invoke("a", "t")) == [Completed()]
    assert not gate.busy("a")


# -- one turn --------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _capture(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_routines")


def records(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records]


async def test_a_completed_turn(autojump_clock: Any, caplog: pytest.LogCaptureFixture) -> None:
    texts: list[str] = []
    agent = ScriptedAgent(Complete(duration=0.0015, reply="hello"))
    result = await run_turn(agent, "r", "s", "prompt", on_text=texts.append)
    assert (result.outcome, result.ms, result.failed, result.busy) == (
        Outcome.COMPLETED,
        2,  # 1.5 ms, rounded
        None,
        False,
    )
    assert texts == ["hello"]
    assert [(t.session, t.text) for t in agent.turns] == [("s", "prompt")]
    assert records(caplog) == [
        (logging.INFO, "r firing (session=s)"),
        (logging.INFO, "r completed (2ms)"),
    ]


async def test_text_without_a_callback_is_dropped(autojump_clock: Any) -> None:
    result = await run_turn(ScriptedAgent(Complete(reply="x")), "r", "s", "p")
    assert result.outcome is Outcome.COMPLETED


async def test_a_failed_turn_folds_its_details_onto_one_line(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    result = await run_turn(ScriptedAgent(Fail("a\n  b\tc ", duration=2)), "r", "s", "p")
    assert (result.outcome, result.ms, result.failed, result.busy) == (
        Outcome.FAILED,
        2000,
        "a\n  b\tc ",
        False,
    )
    assert records(caplog)[-1] == (logging.ERROR, "r failed (2000ms): a b c")


async def test_a_failure_without_details_logs_no_colon(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    result = await run_turn(ScriptedAgent(Fail(" \n ")), "r", "s", "p")
    assert result.outcome is Outcome.FAILED
    assert records(caplog)[-1] == (logging.ERROR, "r failed (0ms)")


async def test_a_busy_turn_is_skipped_with_its_details(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    result = await run_turn(ScriptedAgent(Fail("held", SESSION_BUSY)), "r", "s", "p")
    assert (result.outcome, result.failed, result.busy) == (Outcome.SKIPPED, "held", True)
    assert records(caplog)[-1] == (logging.INFO, "r: occurrence skipped (session busy) (0ms)")


@pytest.mark.parametrize(
    ("error", "details"),
    [(RuntimeError("the stream broke"), "the stream broke"), (KeyError(), "KeyError")],
)
async def test_a_raising_stream_fails_the_turn(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture, error: Exception, details: str
) -> None:
    result = await run_turn(ScriptedAgent(Raise(error, duration=1)), "r", "s", "p")
    assert (result.outcome, result.ms, result.failed) == (Outcome.FAILED, 1000, details)
    assert records(caplog)[-1] == (logging.ERROR, f"r errored (1000ms): {details}")


async def test_an_agent_raising_from_invoke_fails_the_turn(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    class Refuses:
        def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
            raise ValueError("no")

    result = await run_turn(Refuses(), "r", "s", "p")
    assert (result.outcome, result.failed) == (Outcome.FAILED, "no")
    assert records(caplog)[-1] == (logging.ERROR, "r errored (0ms): no")


async def test_a_timeout_fails_the_turn_at_its_deadline(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    start = trio.current_time()
    result = await run_turn(ScriptedAgent(Hang()), "r", "s", "p", timeout=90)
    assert trio.current_time() - start == pytest.approx(90)
    assert (result.outcome, result.ms, result.failed) == (
        Outcome.FAILED,
        90000,
        "timed out after 90s",
    )
    assert records(caplog)[-1] == (logging.ERROR, "r failed (90000ms): timed out after 90s")


async def test_a_turn_within_its_timeout_completes(autojump_clock: Any) -> None:
    result = await run_turn(ScriptedAgent(Complete(duration=89)), "r", "s", "p", timeout=90)
    assert (result.outcome, result.ms) == (Outcome.COMPLETED, 89000)


async def test_a_cancelled_grace_scope_interrupts_the_turn(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    grace = trio.CancelScope()
    grace.deadline = trio.current_time() + 3
    result = await run_turn(ScriptedAgent(Hang()), "r", "s", "p", timeout=90, grace_scope=grace)
    assert (result.outcome, result.ms, result.failed) == (
        Outcome.INTERRUPTED,
        3000,
        "interrupted by stop",
    )
    assert records(caplog)[-1] == (
        logging.WARNING,
        "r interrupted: the stop ended it: its grace ran out, or a second stop came (3000ms)",
    )


class SlowClose:
    """A stream that yields one event, then hangs; closing it takes ``close`` seconds."""

    def __init__(self, close: float) -> None:
        self.close = close
        self.sent = False
        self.closed_at: float | None = None

    def invoke(self, session: str, text: str) -> SlowClose:
        return self

    def __aiter__(self) -> SlowClose:
        return self

    async def __anext__(self) -> Event:
        if not self.sent:
            self.sent = True
            return TextDelta("x")
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        await trio.sleep(self.close)
        self.closed_at = trio.current_time()


async def test_a_cut_short_stream_is_closed_within_its_bound(autojump_clock: Any) -> None:
    agent = SlowClose(close=4)
    start = trio.current_time()
    result = await run_turn(agent, "r", "s", "p", timeout=1)  # type: ignore[arg-type]
    assert result.outcome is Outcome.FAILED
    assert agent.closed_at is not None
    assert agent.closed_at - start == pytest.approx(5)


async def test_a_stream_that_will_not_close_is_abandoned_at_the_bound(
    autojump_clock: Any,
) -> None:
    agent = SlowClose(close=3 * ACLOSE_LIMIT)
    start = trio.current_time()
    result = await run_turn(agent, "r", "s", "p", timeout=1)  # type: ignore[arg-type]
    assert trio.current_time() - start == pytest.approx(1 + ACLOSE_LIMIT)
    assert ACLOSE_LIMIT == 10.0
    assert (result.outcome, result.failed) == (Outcome.FAILED, "timed out after 1s")


async def test_an_error_while_closing_fails_the_turn(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    class Stream:
        async def __anext__(self) -> Event:
            raise OSError("pipe gone")

        def __aiter__(self) -> Stream:
            return self

        async def aclose(self) -> None:
            raise RuntimeError("close failed")

    class Agent:
        def invoke(self, session: str, text: str) -> Stream:
            return Stream()

    result = await run_turn(Agent(), "r", "s", "p")  # type: ignore[arg-type]
    assert (result.outcome, result.failed) == (Outcome.FAILED, "pipe gone")  # the first error


async def test_an_exhausted_stream_is_not_closed_again(autojump_clock: Any) -> None:
    class Stream:
        closes = 0

        def __init__(self) -> None:
            self.items: list[Event] = [Completed()]

        def __aiter__(self) -> Stream:
            return self

        async def __anext__(self) -> Event:
            if not self.items:
                raise StopAsyncIteration
            return self.items.pop()

        async def aclose(self) -> None:
            Stream.closes += 1
            raise RuntimeError("closed after the end")

    class Agent:
        def invoke(self, session: str, text: str) -> Stream:
            return Stream()

    result = await run_turn(Agent(), "r", "s", "p")  # type: ignore[arg-type]
    assert result.outcome is Outcome.COMPLETED
    assert Stream.closes == 0


async def test_held_names_each_session_with_the_time_its_turn_started(
    autojump_clock: Any,
) -> None:
    gate = SessionGate(Recording())
    assert gate.held() == {}
    await trio.sleep(7)
    with gate.hold("a"):
        await trio.sleep(3)
        with gate.hold("b"):
            assert gate.held() == {"a": 7.0, "b": 10.0}
    assert gate.held() == {}


# -- instants --------------------------------------------------------------------------------


class NoOffset(tzinfo):
    """A zone that does not know its offset: as naive as no zone at all."""

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None


def test_require_utc_refuses_a_naive_instant_or_one_without_an_offset() -> None:
    with pytest.raises(ValueError, match=r"^instant must be an aware datetime, got naive 2026-"):
        require_utc(datetime(2026, 7, 7, 9))
    with pytest.raises(ValueError, match=r"^slot must be an aware datetime"):
        require_utc(datetime(2026, 7, 7, 9, tzinfo=NoOffset()), "slot")
    berlin = datetime(2026, 7, 7, 11, tzinfo=timezone(timedelta(hours=2)))
    converted = require_utc(berlin)
    assert converted == datetime(2026, 7, 7, 9, tzinfo=UTC)
    assert converted.tzinfo is UTC


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-07-07T09:00+23:00", datetime(2026, 7, 6, 10, tzinfo=UTC)),
        ("2026-07-07T09:00+24:00", None),
        ("2026-07-07T09:00+05:59", datetime(2026, 7, 7, 3, 1, tzinfo=UTC)),
        ("2026-07-07T09:00+05:60", None),
        ("2026-07-07T09:00-0130", datetime(2026, 7, 7, 10, 30, tzinfo=UTC)),
        ("2026-07-07T09:00+02", datetime(2026, 7, 7, 7, tzinfo=UTC)),
    ],
)
def test_typed_offsets_at_their_limits(text: str, expected: datetime | None) -> None:
    assert parse_instant(text) == expected


def test_a_slot_name_is_the_utc_instant_whatever_the_zone_it_is_given_in() -> None:
    assert slot_name(datetime(2026, 7, 7, 11, tzinfo=timezone(timedelta(hours=2)))) == (
        "2026-07-07T09-00-00-000Z"
    )
    assert slot_name(datetime(2026, 7, 7, 9, tzinfo=ZoneInfo("UTC"))) == "2026-07-07T09-00-00-000Z"
    with pytest.raises(ValueError, match=r"^instant must be an aware datetime, got naive 2026-"):
        slot_name(datetime(2026, 7, 7, 9))


def test_is_slot_name() -> None:
    assert is_slot_name("2026-07-07T09-00-00-000Z")
    assert not is_slot_name("2026-07-07T09-00-00-000Z.tmp")
    assert not is_slot_name("2026-02-30T09-00-00-000Z")


# -- claims: what a reader logs is exact -----------------------------------------------------

SLOT_NAME = "2026-07-07T09-00-00-000Z"
SLOT = datetime(2026, 7, 7, 9, tzinfo=UTC)


def test_foreign_directory_entries_are_logged_once_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert claim_names([SLOT_NAME, ".DS_Store"]) == [SLOT_NAME]
    assert records(caplog) == [(logging.DEBUG, "ignoring .DS_Store: not a fired-slot claim")]


def test_a_torn_claim_reads_as_unsettled_and_says_so_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert parse_claim(SLOT_NAME, '{"firedAt": "2026-', "W") == Fire(slot=SLOT, fired_at=SLOT)
    assert parse_claim(SLOT_NAME, "", "W") == Fire(slot=SLOT, fired_at=SLOT)  # says nothing
    assert records(caplog) == [
        (logging.DEBUG, "claim W is not a claim record (torn write, or an earlier format)")
    ]


def test_a_name_that_is_no_claim_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^'x' is not a claim name$"):
        parse_claim("x", "{}", "W")


def test_odd_claim_fields_are_warned_about_exactly(caplog: pytest.LogCaptureFixture) -> None:
    fire = parse_claim(SLOT_NAME, json.dumps({"firedAt": 5, "outcome": "späť"}), "W")
    assert fire == Fire(slot=SLOT, fired_at=SLOT, unknown_outcome='"späť"')
    assert fire.error is None
    assert records(caplog) == [
        (logging.WARNING, "claim W carries an unreadable stamp — using the slot instant"),
        (
            logging.WARNING,
            "claim W carries an outcome this version does not know — shown as none, never "
            'written over: "späť"',
        ),
    ]


@pytest.mark.parametrize(("raw", "ms"), [(0, 0), (0.4, 0), (1.6, 2), (-1, None), (True, None)])
def test_a_settled_claims_duration(raw: object, ms: int | None) -> None:
    record = {"firedAt": "2026-07-07T09:00:01.000Z", "outcome": "completed", "ms": raw}
    fire = parse_claim(SLOT_NAME, json.dumps(record), "W")
    assert (fire.outcome, fire.ms, fire.error) == (Outcome.COMPLETED, ms, None)


def test_an_unsettled_claim_carries_no_error() -> None:
    record = {"firedAt": "2026-07-07T09:00:01.000Z", "error": "stray"}
    assert parse_claim(SLOT_NAME, json.dumps(record), "W").error is None


def test_keeping_no_claim_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^keep must be at least 1$"):
        names_to_prune([SLOT_NAME], 0)


async def test_a_zero_timeout_times_out_at_once(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    result = await run_turn(ScriptedAgent(Hang()), "r", "s", "p", timeout=0)
    assert (result.outcome, result.ms, result.failed) == (
        Outcome.FAILED,
        0,
        "timed out after 0s",
    )


def test_arm_from_counts_from_now_unless_the_newest_claim_is_stamped_later() -> None:
    now = SLOT + timedelta(hours=1)
    assert arm_from(None, now) == now
    assert arm_from(Fire(slot=SLOT, fired_at=SLOT), now) == now
    ahead = now + timedelta(days=2)
    assert arm_from(Fire(slot=ahead, fired_at=ahead), now) == ahead


@pytest.mark.parametrize(
    ("session", "routine"),
    [("routine:daily", "daily"), ("routine:", ""), ("chat:daily", None), ("daily", None)],
)
def test_a_routines_session_names_its_routine_and_no_other_session_does(
    session: str, routine: str | None
) -> None:
    assert session_routine(session) == routine
    if routine:
        assert routine_session(routine) == session
