"""Budgets: parsing, and under virtual time each rule at its window's edges (a routine's slot
over budget is settled skipped with the reason; a wake-up over its session's is dropped)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trio
from scheduler_rig import rig

from trio_routines import Outcome, Routine, Scheduler
from trio_routines.agent import Completed, Usage
from trio_routines.budgets import Budget, parse_budgets
from trio_routines.errors import InvalidOption, InvalidRoutine, StateFault
from trio_routines.history import day_spent
from trio_routines.http.page import gather
from trio_routines.http.render import routine_html
from trio_routines.routines import parse_routine_text
from trio_routines.testing import Complete, MemoryStore, WallClock

T0 = datetime(2026, 7, 7, 10, 30, tzinfo=UTC)  # the rig's wall clock starts here


def at(hour: int, minute: int = 0, *, day: int = 7) -> datetime:
    return datetime(2026, 7, day, hour, minute, tzinfo=UTC)


# --- parsing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "budgets"),
    [
        ("200k tokens/day", (Budget(200_000, "tokens", "day"),)),
        ("5 USD/week", (Budget(5, "USD", "week"),)),
        ("1.5M Tokens / hour", (Budget(1_500_000, "tokens", "hour"),)),
        (
            "200k tokens/day, 2.50 eur/day,1 token/hour",
            (
                Budget(200_000, "tokens", "day"),
                Budget(2.5, "EUR", "day"),
                Budget(1, "tokens", "hour"),
            ),
        ),
        # A currency of any length and case an agent reports (read in capitals, as a reported
        # one is), three-letter codes near "tokens" among them.
        ("100 CREDITS/day", (Budget(100, "CREDITS", "day"),)),
        ("100 credits/day", (Budget(100, "CREDITS", "day"),)),
        ("1 X/day", (Budget(1, "X", "day"),)),
        ("1 ton/day", (Budget(1, "TON", "day"),)),
        ("1 ENS/day", (Budget(1, "ENS", "day"),)),
        ("1 TOKENLIKE/day", (Budget(1, "TOKENLIKE", "day"),)),
    ],
)
def test_budgets_parse(text: str, budgets: tuple[Budget, ...]) -> None:
    assert parse_budgets(text) == budgets


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("200k", "a budget is written like 200k tokens/day or 5 USD/week, not '200k'"),
        ("5 USD/month", "a budget's window is hour, day or week, not 'month'"),
        ("5k USD/day", "k, M and G scale tokens, not money: '5k USD/day'"),
        ("0 tokens/day", "a budget's amount must be above 0, not '0 tokens/day'"),
        ("-5 USD/day", "a budget is written like"),
        ("5 US$/day", "a budget is written like"),
        ("1 tokens/day, 2 tokens/day", "two budgets of tokens per day: keep one"),
        ("200k tokens/day,", "a budget is written like 200k tokens/day or 5 USD/week, not ''"),
        ("9" * 30 + " tokens/day", "at most"),
        # "tokens" mistyped (any case, two letters off at most) or cut short is no currency.
        ("1000 tokns/day", "a budget's unit is tokens or a currency code, not 'tokns'"),
        ("1000 TOKNS/day", "not 'TOKNS'"),
        ("1000 toekns/day", "not 'toekns'"),
        ("1000 tokenz/day", "not 'tokenz'"),
        ("1000 okens/day", "not 'okens'"),
        ("1000 tokensss/day", "not 'tokensss'"),
        ("1k tokns/day", "not 'tokns'"),
        ("1000 tok/day", "not 'tok'"),
        ("1000 TKNS/day", "not 'TKNS'"),
        ("1000 tks/day", "not 'tks'"),
    ],
)
def test_a_bad_budget_is_one_clear_line(text: str, error: str) -> None:
    with pytest.raises(InvalidOption) as caught:
        parse_budgets(text)
    assert error in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_routine_file_takes_a_budget_list_and_names_the_key_of_a_bad_one() -> None:
    routine = parse_routine_text(
        "daily", "---\ncron: 0 * * * *\nbudget: 200k tokens/day, 5 USD/week\n---\np"
    )
    assert routine.budgets == (Budget(200_000, "tokens", "day"), Budget(5, "USD", "week"))
    assert parse_routine_text("daily", "---\n---\np").budgets == ()
    with pytest.raises(InvalidRoutine, match=r'^"budget": a budget\'s window is hour, day or week'):
        parse_routine_text("daily", "---\nbudget: 5 USD/fortnight\n---\np")
    assert Routine(name="d", prompt="p", budgets="1 USD/day").budgets == (Budget(1, "USD", "day"),)  # type: ignore[arg-type]


def test_the_over_budget_reason_says_what_was_spent_of_what_in_which_window() -> None:
    from trio_routines.ledger import Spent

    tokens = Budget(250, "tokens", "day")
    assert tokens.over_text(Spent(200, 100)) == "over budget (300 of 250 tokens in the last 24 h)"
    money = Budget(1, "USD", "hour")
    assert (
        money.over_text(Spent(costs=(("USD", 1.2),)))
        == "over budget (1.2 of 1 USD in the last 1 h)"
    )
    assert not money.allows(Spent(costs=(("USD", 1.0),)))  # reaching the amount is over
    assert money.allows(Spent(costs=(("EUR", 9.0), ("USD", 0.99))))
    assert str(Budget(200_000, "tokens", "day")) == "200k tokens/day"


# --- a routine's budget under virtual time --------------------------------------------------


async def test_a_routine_over_its_daily_token_budget_skips_slots_until_the_window_frees(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "trio_routines")
    hourly = Routine(name="hourly", prompt="p", cron="0 * * * *", budgets="250 tokens/day")  # type: ignore[arg-type]
    # Hourly polls (no wake-up is pending): the day passes in fewer ticks of the idle loops.
    scheduler, agent, store, _wall = rig(hourly, store=MemoryStore(), poll_interval=3600)
    agent.default = Complete(duration=1, usage=Usage(input_tokens=80, output_tokens=20))
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep((at(15, 30, day=8) - T0).total_seconds())
        stats = scheduler.statistics()
        scheduler.stop()
    fires = {fire.slot: fire for fire in await store.history("hourly")}
    ran = [slot for slot, fire in fires.items() if fire.outcome is Outcome.COMPLETED]
    # 11:00, 12:00, 13:00 spend 300 of 250; then nothing until 12:00 the next day: at 11:00
    # the turn of 11:00 the day before is still in the window (a minute counts whole). Then
    # each hour one turn leaves the window and one runs, until 15:00 finds 300 again.
    assert ran == [at(11), at(12), at(13), at(12, day=8), at(13, day=8), at(14, day=8)]
    skipped = fires[at(14)]
    assert (skipped.outcome, skipped.error, skipped.ms, skipped.usage) == (
        Outcome.SKIPPED,
        "over budget (300 of 250 tokens in the last 24 h)",
        0,
        None,
    )
    assert fires[at(11, day=8)].error == "over budget (300 of 250 tokens in the last 24 h)"
    assert fires[at(15, day=8)].outcome is Outcome.SKIPPED
    assert len(agent.turns) == 6  # no turn for a skipped slot
    warnings = [r.getMessage() for r in caplog.records if "over budget" in r.getMessage()]
    assert (
        warnings
        == [
            "routine hourly: over budget (300 of 250 tokens in the last 24 h) — its turns do not "
            "start until the window frees up (logged once per window by this process)"
        ]
        * 2
    )  # at 14:00, and again at 13:00 the next day, after the budget had room at 12:00
    assert stats.over_budget == {"hourly": "over budget (300 of 250 tokens in the last 24 h)"}
    skips = sum(1 for fire in fires.values() if fire.outcome is Outcome.SKIPPED)
    assert skips == 23
    assert (
        f'trio_routines_over_budget_total{{routine="hourly"}} {skips}' in scheduler.render_metrics()
    )
    assert f'trio_routines_fires_total{{routine="hourly",outcome="skipped"}} {skips}' in (
        scheduler.render_metrics()
    )


class TwoHalves:
    """An agent whose every turn reports two events, each valid alone, past the bound together."""

    def __init__(self) -> None:
        self.turns = 0

    async def invoke(self, session: str, text: str) -> Any:
        self.turns += 1
        yield Usage(input_tokens=6 * 10**14)
        yield Usage(input_tokens=6 * 10**14)
        yield Completed()


async def test_a_turn_that_reports_past_the_bound_in_two_events_spends_the_budget(
    autojump_clock: Any,
) -> None:
    # Its total read back as a bad value: the ledger counted nothing, and every slot ran (the
    # memory store's settle raised, restarting the loop at each slot; a state directory's and
    # PostgreSQL's ledger counted nothing either). What each store keeps of a total at the
    # bound: test_store_usage.
    hourly = Routine(name="hourly", prompt="p", cron="0 * * * *", budgets="1M tokens/day")  # type: ignore[arg-type]
    store = MemoryStore()
    agent = TwoHalves()
    scheduler = Scheduler(
        agent=agent, store=store, routines=[hourly], now=WallClock(T0), poll_interval=3600
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep((at(13, 30) - T0).total_seconds())
        scheduler.stop()
    outcomes = [(fire.slot, fire.outcome) for fire in await store.history("hourly")]
    assert outcomes == [
        (at(11), Outcome.COMPLETED),
        (at(12), Outcome.SKIPPED),
        (at(13), Outcome.SKIPPED),
    ]
    assert agent.turns == 1


async def test_a_money_budget_counts_its_currency_alone_per_rolling_hour(
    autojump_clock: Any,
) -> None:
    often = Routine(name="often", prompt="p", cron="*/10 * * * *", budgets="1 USD/hour")  # type: ignore[arg-type]
    scheduler, agent, store, _wall = rig(often, store=MemoryStore())
    agent.default = Complete(duration=1, usage=Usage(cost=0.4, currency="USD"))
    agent.script(Complete(duration=1, usage=Usage(cost=50, currency="EUR")))  # another currency
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep((at(11, 55) - T0).total_seconds())
        scheduler.stop()
    outcomes = [(f.slot, f.outcome) for f in await store.history("often")]
    assert outcomes == [
        (at(10, 40), Outcome.COMPLETED),  # the EUR turn: not this budget's
        (at(10, 50), Outcome.COMPLETED),  # 0.4
        (at(11), Outcome.COMPLETED),  # 0.8
        (at(11, 10), Outcome.COMPLETED),  # 1.2
        (at(11, 20), Outcome.SKIPPED),
        (at(11, 30), Outcome.SKIPPED),
        (at(11, 40), Outcome.SKIPPED),
        (at(11, 50), Outcome.SKIPPED),  # 10:50 falls out only after 11:51
    ]


async def test_a_ledger_that_cannot_be_read_keeps_the_turn_from_starting(
    autojump_clock: Any,
) -> None:
    hourly = Routine(name="hourly", prompt="p", cron="0 * * * *", budgets="1M tokens/day")  # type: ignore[arg-type]
    store = MemoryStore()
    store.fail("usage_since", StateFault("disk on fire"), times=1)
    scheduler, agent, store, _wall = rig(hourly, store=store)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep((at(12, 30) - T0).total_seconds())
        scheduler.stop()
    first, second = await store.history("hourly")
    assert (first.outcome, first.error) == (
        Outcome.SKIPPED,
        "budget unknown: disk on fire — not run",
    )
    assert second.outcome is Outcome.COMPLETED
    assert len(agent.turns) == 1


async def test_the_page_shows_a_budget_and_its_state(autojump_clock: Any) -> None:
    hourly = Routine(name="hourly", prompt="p", cron="0 * * * *", budgets="150 tokens/day")  # type: ignore[arg-type]
    scheduler, agent, _store, _wall = rig(hourly, store=MemoryStore())
    agent.default = Complete(duration=1, usage=Usage(input_tokens=100))
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep((at(11, 30) - T0).total_seconds())
        view = await gather(scheduler)
        html = routine_html(view.routines[0], view.now)
        assert "budget 150 tokens/day" in html
        await trio.sleep(3600 * 2)
        view = await gather(scheduler)
        html = routine_html(view.routines[0], view.now)
        scheduler.stop()
    assert (
        '<span class="over-budget">over budget (200 of 150 tokens in the last 24 h)</span>' in html
    )


# --- a session's budget for its wake-ups ----------------------------------------------------


async def test_a_wakeup_over_its_sessions_budget_is_dropped_and_other_sessions_run(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "trio_routines")
    scheduler, agent, store, _wall = rig(store=MemoryStore(), session_budget="150 tokens/hour")
    agent.default = Complete(duration=1, usage=Usage(input_tokens=100))
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        for minutes in (1, 2, 3):
            await scheduler.add_wakeup("chat-1", f"turn {minutes}", delay=f"{minutes}m")
        await scheduler.add_wakeup("chat-2", "other", delay="3m")
        await scheduler.add_wakeup("chat-1", "after the hour", delay="63m")
        await trio.sleep(3600 + 10 * 60)
        stats = scheduler.statistics()
        scheduler.stop()
    ran = [(turn.session, turn.text.rsplit("\n", 1)[-1]) for turn in agent.turns]
    wakes = [pair for pair in ran if pair[0] != "routine:hourly"]
    assert [text for _, text in wakes if "turn" in text or "other" in text or "after" in text] != []
    sessions = [session for session, _ in wakes]
    assert sessions.count("chat-1") == 3  # turns 1 and 2 (200 of 150), then after the hour
    assert sessions.count("chat-2") == 1
    assert await store.list_wakeups() == []  # the dropped one is gone, not deferred
    assert any("dropped, not run (session chat-1)" in r.getMessage() for r in caplog.records)
    assert stats.sessions_over_budget == {}  # room again after the hour
    assert 'trio_routines_over_budget_total{routine=""} 1' in scheduler.render_metrics()


async def test_each_wakeup_over_budget_says_what_becomes_of_it(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "trio_routines")
    scheduler, agent, _, _ = rig(store=MemoryStore(), session_budget="50 tokens/hour")
    agent.default = Complete(duration=1, usage=Usage(input_tokens=100))
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        recurring = await scheduler.add_wakeup("chat-1", "every 10", cron="*/10 * * * *")
        await trio.sleep(25 * 60)  # 10:40 runs (100 of 50), 10:50 does not
        once = await scheduler.add_wakeup("chat-1", "once", delay="2m")
        await trio.sleep(3 * 60)
        scheduler.stop()
    over = "over budget (100 of 50 tokens in the last 1 h)"
    assert [r.getMessage() for r in caplog.records if "over budget (" in r.getMessage()] == [
        f"session chat-1: {over} — its turns do not start until the window frees up "
        "(logged once per window by this process)",
        f"wake {recurring.id[:8]}: {over} — this occurrence is not run; the next fires per cron",
        f"wake {once.id[:8]}: {over} — dropped, not run (session chat-1)",
    ]


async def test_a_routine_s_budget_counts_and_holds_its_session_s_wake_ups(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # A turn of the routine schedules wake-ups in its own session: their turns spend what
    # its budget counts, and they stop with it (no step around it through a wake-up).
    caplog.set_level(logging.INFO, "trio_routines")
    brief = Routine(name="brief", prompt="p", cron="0 11 * * *", budgets="150 tokens/day")
    scheduler, agent, store, _wall = rig(brief, store=MemoryStore())
    agent.default = Complete(duration=1, usage=Usage(input_tokens=100))
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        mine = await scheduler.add_wakeup("routine:brief", "again", cron="*/10 * * * *")
        await scheduler.add_wakeup("chat-1", "other", cron="*/10 * * * *")
        await trio.sleep(45 * 60)  # 10:40, 10:50, 11:00 (the slot, and both wake-ups), 11:10
        scheduler.stop()
    ran = [(turn.session, turn.text.rsplit("] ", 1)[-1]) for turn in agent.turns]
    assert ran.count(("routine:brief", "again")) == 2  # 10:40 and 10:50: 200 of 150
    assert ("routine:brief", "p") not in ran  # the slot, over its budget
    assert ran.count(("chat-1", "other")) == 4  # another session's run on
    [slot] = await store.history("brief")
    over = "over budget (200 of 150 tokens in the last 24 h)"
    assert (slot.outcome, slot.error) == (Outcome.SKIPPED, over)
    said = [r.getMessage() for r in caplog.records]
    assert (
        f"wake {mine.id[:8]}: {over} — this occurrence is not run; the next fires per cron" in said
    )
    shown = await day_spent(store, "routine", "brief", at(11, 15))
    assert shown.input_tokens == 200  # what status shows is what the budget counts


def test_a_bad_session_budget_is_refused_by_the_scheduler() -> None:
    with pytest.raises(InvalidOption, match="a budget is written like"):
        rig(session_budget="lots")
    assert rig(session_budget=None)[0] is not None
    _ = timedelta


def test_serve_refuses_a_bad_session_budget_as_a_usage_error(env: Any) -> None:
    result = env.run_cli("serve", "--agent", "echo", "--session-budget", "5 USD/fortnight")
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "argument --session-budget: a budget's window is hour, day or week, not 'fortnight' "
            "(see --help)"
        )
    )
    assert not (env.root / "state").exists()  # nothing opened


async def test_the_page_shows_a_session_over_its_budget_by_its_pending_wakeups(
    autojump_clock: Any,
) -> None:
    from trio_routines.http.render import main_html

    scheduler, agent, _store, _wall = rig(store=MemoryStore(), session_budget="100 tokens/hour")
    agent.default = Complete(duration=1, usage=Usage(input_tokens=100))
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        for minutes in (1, 2, 30):
            await scheduler.add_wakeup("chat-1", f"turn {minutes}", delay=f"{minutes}m")
        await trio.sleep(10 * 60)
        view = await gather(scheduler)
        scheduler.stop()
    (group,) = view.wakeups
    assert (group.session, group.count) == ("chat-1", 1)
    assert group.over_budget == "over budget (100 of 100 tokens in the last 1 h)"
    assert (
        '· <span class="over-budget">over budget (100 of 100 tokens in the last 1 h)</span></li>'
        in main_html(view)
    )
