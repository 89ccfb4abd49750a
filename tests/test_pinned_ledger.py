"""The usage ledger's pure rules pinned whole (ledger.py): what an entry keeps, where a window
and the span begin, and what a stored or sent figure must be (see docs/mutation.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from trio_routines.agent import Usage
from trio_routines.ledger import (
    LEDGER_SPAN,
    Entry,
    Spent,
    add_entry,
    added,
    check_key,
    entry_from_json,
    fires_spent,
    minute_of,
    spent_from_json,
)
from trio_routines.records import Fire

MINUTE0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
SECOND = timedelta(seconds=1)


def test_a_minute_has_no_seconds_or_fraction() -> None:
    assert minute_of(MINUTE0 + timedelta(seconds=59, microseconds=999_999)) == MINUTE0


def test_an_entry_keeps_exactly_what_was_reported() -> None:
    assert add_entry([], MINUTE0, Usage(5)) == [Entry(MINUTE0, "", 5, 0, 0.0)]
    free = add_entry([], MINUTE0, Usage(3, cost=0.0, currency="EUR"))
    assert free == [Entry(MINUTE0, "EUR", 3, 0, 0.0)]


def test_an_entry_exactly_the_span_old_is_kept() -> None:
    oldest = Entry(MINUTE0 - LEDGER_SPAN, "", 1)
    assert add_entry([oldest], MINUTE0, Usage(2)) == [oldest, Entry(MINUTE0, "", 2)]


def test_a_stored_entry_is_read_back_as_it_was() -> None:
    assert entry_from_json(["2026-07-07T10:00:00Z", "", 1, 2, 0.0]) == Entry(MINUTE0, "", 1, 2)
    assert entry_from_json(["not an instant", "", 1, 2, 0.0]) is None
    assert entry_from_json(["2026-07-07T10:00:00Z", 5, 1, 2, 0.0]) is None


def test_a_session_key_must_be_text_and_is_refused_whole() -> None:
    with pytest.raises(ValueError, match=r"^a session must be non-empty text$"):
        check_key("session", "")


def test_claims_count_from_since_itself_and_their_minute_never_drops_them() -> None:
    since = MINUTE0 + 30 * SECOND
    fires = [
        Fire(slot=since, fired_at=since, usage=Usage(1, cost=0.0, currency="EUR")),
        Fire(slot=since, fired_at=since + 10 * SECOND, usage=Usage(10)),
        Fire(slot=since, fired_at=since - SECOND, usage=Usage(100)),
    ]
    assert fires_spent(fires, since) == Spent(11, 0, (("EUR", 0.0),))
    at_minute = [Fire(slot=MINUTE0, fired_at=MINUTE0, usage=Usage(7))]
    assert fires_spent(at_minute, MINUTE0) == Spent(7)


def test_nothing_spent_reads_back_and_a_currency_must_be_as_written() -> None:
    nothing = {"inputTokens": 0, "outputTokens": 0, "costs": {}}
    assert spent_from_json(nothing) == Spent()
    assert spent_from_json({**nothing, "costs": {"eur": 1.0}}) is None


def test_two_spendings_add_up_tokens_to_tokens_and_costs_in_each_currency() -> None:
    one = Spent(10, 20, (("EUR", 1.5), ("USD", 2.0)))
    other = Spent(1, 2, (("GBP", 0.25), ("USD", 0.5)))
    assert added(one, other) == Spent(11, 22, (("EUR", 1.5), ("GBP", 0.25), ("USD", 2.5)))
    assert added(Spent(), other) == other
