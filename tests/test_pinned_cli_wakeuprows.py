"""The pending wake-ups as ``status`` and ``list`` show them (``trio_routines.cli.wakeuprows``),
pinned at their edges: the prompt and the origin cut, the SPENT 24H column only when some
listed session spent something, an unreadable ledger said and shown as nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from trio_routines.agent import Usage
from trio_routines.cli.wakeuprows import origin_cell, session_spent, wakeup_json, wakeup_lines
from trio_routines.errors import StateFault
from trio_routines.ledger import Spent
from trio_routines.records import Origin, OriginKind, Wakeup
from trio_routines.testing import MemoryStore

NOW = datetime(2026, 7, 7, 9, tzinfo=UTC)
HEADERS = "WAKE-UP  SESSION  NEXT               LEFT   KIND      ORIGIN   PROMPT"


def wakeup(id: str, session: str, prompt: str = "p", origin: Origin | None = None) -> Wakeup:
    return Wakeup(
        id=id, session=session, prompt=prompt, fire_at=NOW + timedelta(minutes=5), origin=origin
    )


def test_a_row_a_wakeup_its_prompt_cut_at_40_characters() -> None:
    forty = "x" * 40
    rows = [
        wakeup("w1", "chat", forty, Origin(kind=OriginKind.CLI)),
        wakeup("w2", "chat", "y" * 41),
    ]
    assert wakeup_lines(rows, NOW) == [
        HEADERS,
        f"w1       chat     2026-07-07T09:05Z  5m00s  one-shot  cli      {forty}",
        f"w2       chat     2026-07-07T09:05Z  5m00s  one-shot  unknown  {'y' * 39}…",
    ]
    assert wakeup_lines([], NOW) == ["WAKE-UP  SESSION  NEXT  LEFT  KIND  ORIGIN  PROMPT"]


def test_the_spent_column_is_there_only_when_a_listed_session_spent_something() -> None:
    rows = [wakeup("w1", "chat"), wakeup("w2", "quiet")]
    nothing = {"chat": Spent(), "other": Spent(5)}
    assert (
        wakeup_lines(rows, NOW, nothing) == wakeup_lines(rows, NOW) == wakeup_lines(rows, NOW, {})
    )
    assert wakeup_lines(rows, NOW)[0] == HEADERS
    lines = wakeup_lines(rows, NOW, {"chat": Spent(1500, 300, (("EUR", 0.75),))})
    assert lines == [
        "WAKE-UP  SESSION  SPENT 24H                   NEXT               LEFT   KIND      "
        "ORIGIN   PROMPT",
        "w1       chat     1.5k in, 300 out, 0.75 EUR  2026-07-07T09:05Z  5m00s  one-shot  "
        "unknown  p",
        "w2       quiet    -                           2026-07-07T09:05Z  5m00s  one-shot  "
        "unknown  p",
    ]


def test_the_json_has_the_sessions_spending_whenever_its_ledger_was_read() -> None:
    entry = wakeup("w1", "chat")
    assert "sessionSpent24h" not in wakeup_json(entry, {})  # no ledger, or unread
    assert "sessionSpent24h" not in wakeup_json(entry, {"other": Spent(1)})
    assert wakeup_json(entry, {"chat": Spent()})["sessionSpent24h"] == {
        "inputTokens": 0,
        "outputTokens": 0,
        "costs": {},
    }
    spent = {"chat": Spent(1500, 300, (("EUR", 0.75),))}
    assert wakeup_json(entry, spent)["sessionSpent24h"] == {
        "inputTokens": 1500,
        "outputTokens": 300,
        "costs": {"EUR": 0.75},
    }
    assert wakeup_json(entry, spent)["id"] == "w1"


async def test_an_unreadable_ledger_is_said_and_shows_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = MemoryStore()
    await store.record_usage("session", "a", NOW - timedelta(hours=1), Usage(5))
    await store.record_usage("session", "b", NOW - timedelta(hours=1), Usage(6))
    store.fail("usage_since", StateFault("the ledger is\nunreadable"), times=1)
    found = await session_spent(store, [wakeup("w1", "a"), wakeup("w2", "b")], NOW)
    assert found == {"b": Spent(6)}
    assert capsys.readouterr().err == (
        "what the wake-up turns of session a spent is unreadable — the ledger is unreadable\n"
    )
    assert await session_spent(store, [wakeup("w1", "a")], NOW) == {"a": Spent(5)}
    assert capsys.readouterr().err == ""


def test_the_origin_cell_says_who_asked_cut_to_48_characters() -> None:
    assert origin_cell(None) == "unknown"
    for kind in ("http", "cli", "api"):
        assert origin_cell(Origin(kind=OriginKind(kind))) == kind
    fired = Origin(kind=OriginKind.ROUTINE, depth=1, routine="daily", slot=NOW)
    assert origin_cell(fired) == "routine daily@2026-07-07T09:00Z"
    run = Origin(kind=OriginKind.ROUTINE, depth=1, routine="daily")
    assert origin_cell(run) == "routine daily (run)"
    child = Origin(kind=OriginKind.WAKEUP, depth=2, parent="0123456789abcdef")
    assert origin_cell(child) == "wake-up 01234567 depth 2"
    # "routine " + 34 + " (run)": 48 characters.
    exactly = Origin(kind=OriginKind.ROUTINE, depth=1, routine="r" * 34)
    assert origin_cell(exactly) == f"routine {'r' * 34} (run)"
    longer = Origin(kind=OriginKind.ROUTINE, depth=1, routine="r" * 35)
    assert origin_cell(longer) == f"routine {'r' * 35} (ru…"
    assert len(origin_cell(longer)) == 48
