"""Two ``serve`` replicas as real processes sharing one budget, on one state directory and on
one PostgreSQL database: the ledger they share stops the turns of a session once its budget is
spent, with no overspend beyond one turn in flight per replica; and one routine budget across
the processes that fire it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import trio
from procs import Env, assert_no_overlap, lines, stop, turn_spans, wait_for

from trio_routines.store import UsageRecords
from trio_routines.stores import open_store
from trio_routines.usage import USAGE_LINE
from trio_routines.wakeups import WakeupRequest

PER_TURN = 100  # tokens each turn reports
BUDGET = 250  # tokens per day: the third turn passes it
WAKEUPS = 10


@pytest.fixture
def env(env_on_either_store: Env) -> Env:
    """On a state directory and on PostgreSQL (``conftest.py``)."""
    return env_on_either_store


def _spent(state: str) -> int:
    async def read() -> int:
        async with open_store(state) as store:
            assert isinstance(store, UsageRecords)
            since = datetime.now(UTC) - timedelta(days=1)
            return (await store.usage_since("session", "chat", since)).tokens

    return trio.run(read)


def _add_due_wakeups(state: str) -> None:
    """Wake-ups of one session, due already (asked for as if two minutes ago)."""

    async def add() -> None:
        asked = datetime.now(UTC) - timedelta(minutes=2)
        async with open_store(state) as store:
            for number in range(WAKEUPS):
                request = WakeupRequest(
                    session="chat", prompt=f"turn {number}", fire_at=asked + timedelta(minutes=1)
                )
                await store.add_wakeup(request, asked)

    trio.run(add)


@pytest.mark.slow
def test_two_replicas_share_a_sessions_budget_and_overspend_at_most_a_turn_each(
    env: Env,
) -> None:
    # Each turn notes its start and end, takes a moment, and reports 100 tokens.
    agent = (
        f'cmd:t=$$; echo "start $t $(date +%s.%N)" >> {env.marker}; sleep 0.3; '
        f'echo "end $t $(date +%s.%N)" >> {env.marker}; '
        f"echo '{USAGE_LINE} {{\"input_tokens\": {PER_TURN}}}'"
    )
    budget = ("--session-budget", f"{BUDGET} tokens/day", "--poll", "0.2")
    first = env.serve(agent, "--replica", "one", *budget, log="one.log")
    second = env.serve(agent, "--replica", "two", *budget, log="two.log")
    _add_due_wakeups(str(env.state))
    wait_for(
        lambda: env.cli("list", "--json").stdout.count('"session"') == 0, 60, "every wake-up taken"
    )
    wait_for(
        lambda: (
            lines(env.marker).count("") == 0
            and sum(line.startswith("end") for line in lines(env.marker))
            == sum(line.startswith("start") for line in lines(env.marker))
        ),
        30,
        "the turns in flight to end",
    )
    assert stop(first) == 0
    assert stop(second) == 0
    spans = turn_spans(env.marker)
    assert_no_overlap(spans)  # one session: one turn at a time across the replicas
    turns = len(spans)
    reached = -(-BUDGET // PER_TURN)  # the turns it takes to reach the budget: 3
    print(f"turns run: {turns} of {WAKEUPS} wake-ups, {turns * PER_TURN} of {BUDGET} tokens")
    assert reached <= turns <= reached + 1, turns  # at most one more: the other replica's
    assert _spent(str(env.state)) == turns * PER_TURN
    logs = env.log("one.log") + env.log("two.log")
    assert "session chat: over budget (" in logs
    assert logs.count("dropped, not run (session chat)") == WAKEUPS - turns


@pytest.mark.slow
def test_a_routines_budget_is_one_across_the_processes_that_fire_it(env: Env) -> None:
    env.routine("metered", cron="0 * * * *", budget=f"{BUDGET} tokens/day")
    agent = f"cmd:echo done; echo '{USAGE_LINE} {{\"output_tokens\": {PER_TURN}}}'"
    top = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    slots = [top - timedelta(hours=back) for back in range(6, 0, -1)]
    for number, slot in enumerate(slots):  # each slot fired by another process, in turn
        iso = slot.strftime("%Y-%m-%dT%H:%M:%S.000Z")
        fired = env.cli(
            "fire", "metered", "--slot", iso, "--agent", agent, "--replica", f"r{number % 2}"
        )
        assert fired.returncode == 0, fired.stderr
    history = env.history("metered")
    assert [(h["replica"], h["outcome"]) for h in history] == [
        ("r0", "completed"),
        ("r1", "completed"),
        ("r0", "completed"),
        ("r1", "skipped"),
        ("r0", "skipped"),
        ("r1", "skipped"),
    ]
    assert {h.get("error") for h in history[3:]} == {
        "over budget (300 of 250 tokens in the last 24 h)"
    }
    assert [h.get("usage") for h in history[:3]] == [{"outputTokens": PER_TURN}] * 3
