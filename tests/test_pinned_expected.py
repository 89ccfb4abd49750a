"""The timelines' expected slots (:mod:`trio_routines.http.expected`) at their edges, and what
the API's listings log of a ledger they could not read (:mod:`trio_routines.http.spending`)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from trio_routines.agent import Usage
from trio_routines.cron import next_run
from trio_routines.cron.recent import newest_slots
from trio_routines.errors import StateFault
from trio_routines.http import expected as expected_module
from trio_routines.http.expected import COUNT, ExpectedSlots
from trio_routines.http.spending import listed_sessions_spent, routines_spent
from trio_routines.routines import Routine
from trio_routines.scheduler import Scheduler
from trio_routines.testing import MemoryStore, ScriptedAgent

NOON = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
TEN = Routine(name="ten", prompt="p", cron="*/10 * * * *")


def at(minutes: int) -> datetime:
    return NOON + minutes * MINUTE


def test_a_zoned_cron_s_slots_are_those_of_its_zone() -> None:
    berlin = Routine(name="b", prompt="p", cron="0 9 * * *", tz="Europe/Berlin")
    found = ExpectedSlots().slots(berlin, NOON - timedelta(days=2), NOON)
    assert found == (datetime(2026, 11, 29, 8, tzinfo=UTC), datetime(2026, 11, 30, 8, tzinfo=UTC))


def test_slots_at_the_span_s_start_and_at_now_are_in_it_then_and_later() -> None:
    expected = ExpectedSlots()
    assert expected.slots(TEN, at(0), at(30)) == (at(0), at(10), at(20), at(30))
    # Remembered and brought up to a now that is a slot itself.
    assert expected.slots(TEN, at(0), at(40)) == (at(0), at(10), at(20), at(30), at(40))
    assert expected.slots(TEN, at(10), at(40)) == (at(10), at(20), at(30), at(40))


def test_an_earlier_start_or_a_clock_gone_back_is_searched_again() -> None:
    expected = ExpectedSlots()
    expected.slots(TEN, at(0), at(30))
    assert expected.slots(TEN, at(-30), at(35)) == (
        at(-30),
        at(-20),
        at(-10),
        *map(at, (0, 10, 20, 30)),
    )
    assert expected.slots(TEN, at(0), at(15)) == (at(0), at(10))


def test_up_to_one_more_than_count_new_slots_are_walked_then_searched(monkeypatch: Any) -> None:
    searches: list[datetime] = []

    def counted(*args: Any) -> list[datetime]:
        searches.append(args[2])
        return newest_slots(*args)

    monkeypatch.setattr(expected_module, "newest_slots", counted)
    minutely = Routine(name="m", prompt="p", cron="* * * * *")
    expected = ExpectedSlots()
    start = NOON - timedelta(days=1)
    for now in (at(0), at(COUNT + 1), at(2 * COUNT + 3)):
        fresh = newest_slots(lambda t: next_run("* * * * *", None, t, "m"), start, now, COUNT)
        assert expected.slots(minutely, start, now) == tuple(fresh)
    # The first render searched; COUNT + 1 slots later they were walked; COUNT + 2: searched.
    assert searches == [at(0), at(2 * COUNT + 3)]


# -- what a listing logs of an unreadable ledger -----------------------------------------------


async def test_a_routine_s_unreadable_figures_are_null_and_logged(caplog: Any) -> None:
    store = MemoryStore()
    await store.record_usage("routine", "b", NOON - MINUTE, Usage(7))
    scheduler = Scheduler(agent=ScriptedAgent(), store=store, routines=[])
    store.fail("usage_since", StateFault("the ledger <is> unreadable"), times=1)
    with caplog.at_level(logging.ERROR, logger="trio_routines"):
        found = await routines_spent(scheduler, ["a" * 300, "b"], NOON)
    assert found == {"a" * 300: None, "b": {"inputTokens": 7, "outputTokens": 0, "costs": {}}}
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        f"GET /routines: what the turns of {'a' * 64} spent: the ledger <is> unreadable"
    ]


async def test_a_session_s_unreadable_figures_are_null_and_logged(caplog: Any) -> None:
    store = MemoryStore()
    scheduler = Scheduler(agent=ScriptedAgent(), store=store, routines=[])
    store.fail("usage_since", StateFault("the ledger <is> unreadable"), times=1)
    with caplog.at_level(logging.ERROR, logger="trio_routines"):
        found = await listed_sessions_spent(scheduler, ["s" * 300, "t"], NOON)
    assert found == {"s" * 300: None, "t": {"inputTokens": 0, "outputTokens": 0, "costs": {}}}
    said = [r.getMessage() for r in caplog.records]
    quoted = repr("s" * 64)
    assert said == [
        f"GET /wakeups: what the turns of session {quoted} spent: the ledger <is> unreadable"
    ]
