"""Usage in the agent protocol: the rule events add up by, the checks, and each agent kind's way
of reporting it (``py:``/embedded events, a ``cmd:`` last line, an HTTP agent's JSON member and
``usage`` event against a real loopback server)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
import trio
from agent_server import AgentServer, Respond, events, reply
from hypothesis import given
from hypothesis import strategies as st

from trio_routines.agent import Agent, Completed, Event, Failed, TextDelta, Usage
from trio_routines.agent_http import HttpAgent
from trio_routines.agents import agent_from_spec
from trio_routines.converter import claim_text, history_from_json, history_to_json
from trio_routines.ledger import entry_from_json, spent_from_json
from trio_routines.records import Fire, Outcome
from trio_routines.turns import run_turn
from trio_routines.usage import (
    MAX_COST,
    MAX_TOKENS,
    USAGE_LINE,
    Tally,
    UsageLine,
    checked,
    describe,
    from_wire,
    usage_from_json,
    usage_to_json,
)

T0 = datetime(2026, 7, 7, 9, 0, tzinfo=UTC)


async def collect(agent: Agent, text: str = "go") -> list[Event]:
    with trio.fail_after(30):
        async with aclosing(agent.invoke("chat-1", text)) as stream:  # type: ignore[type-var]
            return [event async for event in stream]


class _Unshowable:
    def __repr__(self) -> str:
        raise RuntimeError("no words")


def text_of(found: list[Event]) -> str:
    return "".join(e.text for e in found if isinstance(e, TextDelta))


def usages(found: list[Event]) -> list[Usage]:
    return [e for e in found if isinstance(e, Usage)]


# --- the rule -------------------------------------------------------------------------------


def test_events_add_up_tokens_to_tokens_and_costs_within_the_first_currency() -> None:
    tally = Tally()
    assert tally.total() is None
    assert tally.add(Usage(input_tokens=100, output_tokens=20)) == []
    assert tally.add(Usage(input_tokens=50, cost=0.25, currency="eur")) == []
    assert tally.add(Usage(output_tokens=5, cost=0.5, currency="EUR")) == []
    (problem,) = tally.add(Usage(output_tokens=1, cost=9.0, currency="USD"))
    assert "a cost in USD after one in EUR is dropped" in problem
    assert tally.total() == Usage(150, 26, 0.75, "EUR")


def test_a_turns_total_holds_at_most_what_one_event_may_and_stays_a_valid_usage() -> None:
    # Two events of 6e14 tokens, each valid, summed past the bound: the total read back as a
    # bad value, the turn counted as having spent nothing, and every budget let it through.
    tally = Tally()
    half = Usage(input_tokens=6 * 10**14, output_tokens=6 * 10**14, cost=6e11)
    assert tally.add(half) == []
    assert tally.add(half) == []
    total = tally.total()
    assert total == Usage(MAX_TOKENS, MAX_TOKENS, MAX_COST, "USD")
    assert checked(total) == (total, [])


def test_a_cost_without_a_currency_is_in_usd_and_tokens_alone_name_none() -> None:
    tally = Tally()
    tally.add(Usage(cost=1.5))
    assert tally.total() == Usage(None, None, 1.5, "USD")
    tally = Tally()
    tally.add(Usage(input_tokens=3, currency="EUR"))  # a currency without a cost means nothing
    assert tally.total() == Usage(3, None, None, None)


def test_a_stored_cost_past_any_float_reads_as_no_usage() -> None:
    # A claim's usage, or a ledger entry, written by hand: read as damage, never raised.
    assert usage_from_json({"inputTokens": 3, "cost": 10**400, "currency": "USD"}) is None
    assert entry_from_json(["2026-07-07T09:00:00.000Z", "USD", 1, 2, 10**400]) is None
    assert spent_from_json({"inputTokens": 1, "outputTokens": 2, "costs": {"USD": 10**400}}) is None


async def test_a_turn_logs_its_first_bad_values_and_counts_the_rest_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "trio_routines")
    bad = [Usage(input_tokens=-1)] * 2000
    turn = await run_turn(Spending(*bad, Usage(output_tokens=4), Completed()), "daily", "s", "p")
    assert (turn.outcome, turn.usage) == (Outcome.COMPLETED, Usage(None, 4))
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        *["daily: usage reported by the agent: input_tokens -1 is not a valid value"] * 5,
        "daily: usage reported by the agent: 1995 more bad values dropped, not logged",
    ]


@pytest.mark.parametrize(
    ("event", "kept", "named"),
    [
        (Usage(input_tokens=-1, output_tokens=4), Usage(None, 4), "input_tokens -1"),
        (Usage(input_tokens=True, output_tokens=4), Usage(None, 4), "input_tokens True"),
        (Usage(input_tokens=2.5, output_tokens=4), Usage(None, 4), "input_tokens 2.5"),
        (Usage(input_tokens=10**16, output_tokens=4), Usage(None, 4), "input_tokens"),
        (Usage(input_tokens="12", output_tokens=4), Usage(None, 4), "input_tokens '12'"),  # type: ignore[arg-type]
        (Usage(input_tokens=7, cost=float("nan")), Usage(7), "cost nan"),
        (Usage(input_tokens=7, cost=-0.01), Usage(7), "cost -0.01"),
        (Usage(input_tokens=7, cost=1.0, currency="US$"), Usage(7), "currency 'US$'"),
        (Usage(input_tokens=7, cost=1.0, currency="ABCDEFGHIJK"), Usage(7), "currency"),
        # An integer past any float, and past Python's digits for repr: a bad value too.
        (Usage(input_tokens=7, cost=10**400), Usage(7), "cost <an integer of more than 40"),
        (Usage(input_tokens=10**5000, output_tokens=4), Usage(None, 4), "input_tokens <an integer"),
        (Usage(input_tokens=7, cost=_Unshowable()), Usage(7), "cost <_Unshowable>"),  # type: ignore[arg-type]
    ],
    ids=lambda value: type(value).__name__ if not isinstance(value, str) else value[:20],
)
def test_a_bad_field_is_dropped_with_its_name_and_the_rest_counts(
    event: Usage, kept: Usage, named: str
) -> None:
    tally = Tally()
    problems = tally.add(event)
    assert problems
    assert named in problems[0]
    assert tally.total() == kept


def test_a_whole_float_count_is_a_count() -> None:
    tally = Tally()
    assert tally.add(Usage(input_tokens=12.0)) == []  # type: ignore[arg-type]
    assert tally.total() == Usage(12)


def test_the_wire_shape_and_the_stored_shape() -> None:
    assert from_wire({"input_tokens": 1, "cost": 0.5}) == (Usage(1, None, 0.5, None), None)
    assert from_wire([1, 2])[1] == "usage must be a JSON object, got list"
    assert "names none of" in (from_wire({"tokens": 3})[1] or "")
    spent = Usage(1200, 300, 0.04, "USD")
    assert usage_to_json(spent) == {
        "inputTokens": 1200,
        "outputTokens": 300,
        "cost": 0.04,
        "currency": "USD",
    }
    assert usage_from_json(usage_to_json(spent)) == spent
    assert usage_from_json({"inputTokens": -4}) is None  # malformed: read as none
    assert usage_from_json({}) is None
    assert usage_from_json("12") is None
    assert describe(spent) == "1.2k in, 300 out, 0.04 USD"
    assert describe(Usage(output_tokens=2_500_000)) == "2.5M out"
    assert describe(None) == ""


def test_a_claim_keeps_its_usage_in_its_file_and_in_the_history_json() -> None:
    spent = Usage(10, 20, 0.001, "USD")
    text = claim_text(T0, Outcome.COMPLETED, 5, None, "host:1", None, spent)
    assert text == (
        '{"firedAt":"2026-07-07T09:00:00.000Z","outcome":"completed","ms":5,"replica":"host:1",'
        '"usage":{"inputTokens":10,"outputTokens":20,"cost":0.001,"currency":"USD"}}'
    )
    assert "usage" not in claim_text(T0, None, None, None, None, None, spent)  # unsettled: none
    fire = Fire(slot=T0, fired_at=T0, outcome=Outcome.COMPLETED, ms=5, usage=spent)
    shown = history_to_json([fire])
    assert shown[0]["usage"] == usage_to_json(spent)
    assert history_from_json(shown)[0] == [fire]


def test_a_record_refuses_a_bad_usage_and_keeps_an_empty_one_as_none() -> None:
    with pytest.raises(ValueError, match="input_tokens -3"):
        Fire(slot=T0, fired_at=T0, usage=Usage(input_tokens=-3))
    assert Fire(slot=T0, fired_at=T0, usage=Usage()).usage is None


# --- a turn ---------------------------------------------------------------------------------


class Spending:
    """A ``py:``/embedded agent: yields what it is given."""

    def __init__(self, *script: Event) -> None:
        self.script = script

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        for event in self.script:
            await trio.lowlevel.checkpoint()
            yield event


async def test_a_turn_adds_up_its_usage_and_keeps_it_whatever_the_outcome() -> None:
    agent = Spending(Usage(10, 1), TextDelta("x"), Usage(5, 2, 0.01), Failed("quota"))
    turn = await run_turn(agent, "t", "s", "p")
    assert (turn.outcome, turn.failed, turn.usage) == (
        Outcome.FAILED,
        "quota",
        Usage(15, 3, 0.01, "USD"),
    )
    turn = await run_turn(Spending(TextDelta("x"), Completed()), "t", "s", "p")
    assert (turn.outcome, turn.usage) == (Outcome.COMPLETED, None)


async def test_bad_usage_is_a_one_line_warning_and_never_changes_the_outcome(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "trio_routines")
    agent = Spending(Usage(input_tokens="lots\nof"), Usage(output_tokens=4), Completed())  # type: ignore[arg-type]
    turn = await run_turn(agent, "daily", "s", "p")
    assert (turn.outcome, turn.usage) == (Outcome.COMPLETED, Usage(None, 4))
    (record,) = [r for r in caplog.records if "usage" in r.getMessage()]
    assert record.getMessage() == (
        "daily: usage reported by the agent: input_tokens 'lots\\nof' is not a valid value"
    )


async def test_a_turn_cut_by_its_timeout_keeps_what_it_reported(autojump_clock: Any) -> None:
    class Slow:
        async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
            yield Usage(input_tokens=40)
            await trio.sleep(60)
            yield Completed()

    turn = await run_turn(Slow(), "t", "s", "p", timeout=5)
    assert (turn.outcome, turn.usage) == (Outcome.FAILED, Usage(input_tokens=40))


# --- cmd: -----------------------------------------------------------------------------------


def split(*pieces: str) -> tuple[str, Usage | None, str | None]:
    line = UsageLine()
    shown = "".join(line.feed(piece) for piece in pieces)
    rest, usage, problem = line.close()
    return shown + rest, usage, problem


def test_a_usage_line_is_taken_out_of_the_output_only_when_it_is_the_last() -> None:
    wire = '{"input_tokens": 9}'
    assert split("hi\n", f"{USAGE_LINE} {wire}\n") == ("hi\n", Usage(9), None)
    assert split("hi\ntrio-rou", "tines-usage:", ' {"output_tokens":2}') == (
        "hi\n",
        Usage(None, 2),
        None,
    )
    middle = f"{USAGE_LINE} {wire}\nmore\n"
    assert split(middle) == (middle, None, None)
    assert split("trio-rout", "ine\n") == ("trio-routine\n", None, None)
    assert split("a\n", "trio-") == ("a\ntrio-", None, None)
    shown, usage, problem = split(f"ok\n{USAGE_LINE} not json\n")
    assert (shown, usage, problem) == ("ok\n", None, "the usage line is not JSON: 'not json'")
    overlong = USAGE_LINE + " " + "x" * 5000
    too_long = "the usage line is longer than 4096 characters"
    assert split(overlong) == (overlong, None, too_long)  # too long to be one: output, said
    assert split(overlong + "\n") == (overlong + "\n", None, too_long)
    assert split(overlong + "\nlast\n") == (overlong + "\nlast\n", None, None)


async def test_cmd_reports_usage_on_its_last_line_which_is_not_reply() -> None:
    command = (
        "cmd:printf 'the answer\\n'; "
        f'printf \'%s\\n\' \'{USAGE_LINE} {{"input_tokens": 120, "output_tokens": 30, '
        '"cost": 0.002, "currency": "eur"}\''
    )
    found = await collect(agent_from_spec(command))
    assert text_of(found) == "the answer\n"
    assert usages(found) == [Usage(120, 30, 0.002, "eur")]
    assert found[-1] == Completed()
    turn = await run_turn(agent_from_spec(command), "t", "s", "p")
    assert turn.usage == Usage(120, 30, 0.002, "EUR")


async def test_cmd_with_a_malformed_usage_line_warns_and_still_completes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "trio_routines")
    found = await collect(agent_from_spec(f"cmd:echo out; echo '{USAGE_LINE} {{oops'"))
    assert (text_of(found), usages(found), found[-1]) == ("out\n", [], Completed())
    assert any(
        r.getMessage().startswith("the cmd: agent's usage line is left out: the usage line is not")
        for r in caplog.records
    )


# --- http -----------------------------------------------------------------------------------


@asynccontextmanager
async def serving(respond: Respond) -> AsyncIterator[AgentServer]:
    async with trio.open_nursery() as nursery:
        server = await nursery.start(AgentServer(respond).run)
        yield server
        nursery.cancel_scope.cancel()


async def test_an_http_json_reply_carries_usage_in_its_usage_member() -> None:
    body = '{"reply": "done", "usage": {"input_tokens": 700, "output_tokens": 80, "cost": 0.01}}'
    async with serving(reply(200, body)) as server:
        found = await collect(HttpAgent(server.url()))
    assert text_of(found) == body  # the reply is still the body
    assert usages(found) == [Usage(700, 80, 0.01)]
    assert found[-1] == Completed()


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ('{"usage": {"input_tokens": 5}}', "text/plain"),  # not JSON by its type: no usage
        ('{"reply": "done"}', "application/json"),
        ("[1, 2]", "application/json"),
        ("not json", "application/json"),
    ],
)
async def test_a_reply_without_a_usage_member_reports_none(body: str, content_type: str) -> None:
    async with serving(reply(200, body, content_type)) as server:
        found = await collect(HttpAgent(server.url()))
    assert (usages(found), found[-1]) == ([], Completed())


async def test_an_event_stream_reports_usage_events_that_add_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "trio_routines")
    respond = events(
        "data: Hel\n\n",
        'event: usage\ndata: {"input_tokens": 100}\n\n',
        "data: lo\n\n",
        "event: usage\ndata: {broken\n\n",
        'event: usage\ndata: {"output_tokens": 12, "cost": 0.5, "currency": "GBP"}\n\n',
    )
    async with serving(respond) as server:
        agent = HttpAgent(server.url())
        found = await collect(agent)
        turn = await run_turn(HttpAgent(server.url()), "t", "chat-1", "go")
    assert text_of(found) == "Hello"
    assert usages(found) == [Usage(100), Usage(None, 12, 0.5, "GBP")]
    assert found[-1] == Completed()
    assert (turn.outcome, turn.usage) == (Outcome.COMPLETED, Usage(100, 12, 0.5, "GBP"))
    assert any(
        "sent usage that is left out: its usage is not JSON" in r.getMessage()
        for r in caplog.records
    )


async def test_usage_on_a_failed_stream_still_counts() -> None:
    respond = events(
        'event: usage\ndata: {"input_tokens": 3}\n\n', "event: failed\ndata: quota\n\n"
    )
    async with serving(respond) as server:
        turn = await run_turn(HttpAgent(server.url()), "t", "chat-1", "go")
    assert (turn.outcome, turn.failed, turn.usage) == (Outcome.FAILED, "quota", Usage(3))


@given(
    st.lists(
        st.sampled_from(["reply", "\n", USAGE_LINE, " ", '{"input_tokens": 7}', "trio-", "x\n"]),
        max_size=8,
    ),
    st.data(),
)
def test_the_answer_is_the_same_however_the_output_is_cut(
    parts: list[str], data: st.DataObject
) -> None:
    """A pipe's reads fall anywhere: a piece starts a line only where the output before it
    ended one, so a usage marker after text on the same line is never a usage line."""
    output = "".join(parts)
    cuts = sorted(data.draw(st.sets(st.integers(0, len(output)))))
    pieces = [output[a:b] for a, b in zip([0, *cuts], [*cuts, len(output)], strict=True)]
    assert split(*pieces) == split(output)


async def test_a_cmd_agent_echoing_its_prompt_then_its_usage_line_is_told_why_it_counts_none(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The prompt comes with no line break at its end: `cat` then the usage line glued it on.
    command = f"cmd:cat; printf '%s\\n' '{USAGE_LINE} {{\"input_tokens\": 5}}'"
    with caplog.at_level(logging.WARNING, "trio_routines"):
        found = await collect(agent_from_spec(command), "slow job")
    assert text_of(found) == f'slow job{USAGE_LINE} {{"input_tokens": 5}}\n'
    assert usages(found) == []
    assert [r.getMessage() for r in caplog.records] == [
        "the cmd: agent's usage line is left out: the last line holds 'trio-routines-usage:' "
        "after other text: the usage line must begin a line of its own (end the reply with a "
        "line break), and was left in the reply"
    ]


def test_a_marker_after_text_on_its_line_is_reply_even_in_a_piece_of_its_own() -> None:
    # Reply, and so not counted; on the last line, said (a reply that ended without a line
    # break, then the usage line: its spending was lost without a word).
    wire = '{"input_tokens": 7}'
    said = (
        "the last line holds 'trio-routines-usage:' after other text: the usage line must "
        "begin a line of its own (end the reply with a line break), and was left in the reply"
    )
    glued = f"reply{USAGE_LINE} {wire}\n"
    assert split("reply", f"{USAGE_LINE} {wire}\n") == (glued, None, said)
    assert split("x" * 9000, glued) == ("x" * 9000 + glued, None, said)
    assert split("a\n", glued, "b\n") == (f"a\n{glued}b\n", None, None)  # not the last
    assert split("reply\n", f"{USAGE_LINE} {wire}\n") == ("reply\n", Usage(7), None)
    assert split("", f"{USAGE_LINE} {wire}") == ("", Usage(7), None)  # the first line is one


async def test_five_bad_values_are_logged_each_and_no_count_follows(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "trio_routines")
    bad = [Usage(input_tokens=-1)] * 5
    await run_turn(Spending(*bad, Completed()), "daily", "s", "p")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["daily: usage reported by the agent: input_tokens -1 is not a valid value"] * 5
