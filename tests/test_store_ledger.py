"""The store contract for the usage ledgers (routines' and sessions'), over every backend, and
the state directory's ledger files against hostile content."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio

from trio_routines.agent import Usage
from trio_routines.errors import UnsafeName
from trio_routines.instants import FIRST_INSTANT, LAST_INSTANT
from trio_routines.ledger import AHEAD, LEDGER_SPAN, Entry, Spent, add_entry, spent_since
from trio_routines.store import Store, UsageRecords
from trio_routines.stores import DirectoryStore
from trio_routines.stores.directory.ledgerfile import file_name

T0 = datetime(2026, 7, 7, 10, 0, 30, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)


def ledger(store: Store) -> UsageRecords:
    assert isinstance(store, UsageRecords)
    return store


async def test_usage_adds_up_by_key_and_currency(store: Store) -> None:
    kept = ledger(store)
    await kept.record_usage("routine", "daily", T0, Usage(100, 10, 0.5, "USD"))
    await kept.record_usage("routine", "daily", T0 + MINUTE, Usage(50, 5, 0.25, "USD"))
    await kept.record_usage(
        "routine", "daily", T0, Usage(output_tokens=1, cost=2.0, currency="EUR")
    )
    await kept.record_usage("session", "daily", T0, Usage(7))  # another key: a session's
    await kept.record_usage("routine", "other", T0, Usage(9))
    spent = await kept.usage_since("routine", "daily", T0 - HOUR)
    assert spent == Spent(150, 16, (("EUR", 2.0), ("USD", 0.75)))
    assert spent.tokens == 166
    assert spent.cost("USD") == 0.75
    assert await kept.usage_since("session", "daily", T0 - HOUR) == Spent(7)
    assert await kept.usage_since("session", "nobody", T0 - HOUR) == Spent()


async def test_a_window_counts_whole_minutes_from_since_on(store: Store) -> None:
    kept = ledger(store)
    await kept.record_usage("session", "chat-1", T0, Usage(1))  # the minute 10:00
    await kept.record_usage("session", "chat-1", T0 + HOUR, Usage(10))  # the minute 11:00
    minute = T0.replace(second=0)
    assert (await kept.usage_since("session", "chat-1", minute)).tokens == 11
    assert (
        await kept.usage_since("session", "chat-1", minute + MINUTE - timedelta(milliseconds=1))
    ).tokens == 11
    assert (await kept.usage_since("session", "chat-1", minute + MINUTE)).tokens == 10
    assert (await kept.usage_since("session", "chat-1", minute + HOUR + MINUTE)).tokens == 0


async def test_an_entry_stamped_far_ahead_of_every_window_counts_as_none(store: Store) -> None:
    # A replica whose clock runs ahead spent what it recorded: it counts. One stamped beyond
    # the longest window's end by more than AHEAD (a row edited by hand, a clock that wrong)
    # would hold a budget spent until the clock caught up: it counts as none.
    kept = ledger(store)
    since = (T0 - HOUR).replace(second=0)  # a whole minute: the furthest counted is one too
    furthest = since + LEDGER_SPAN + AHEAD
    # The furthest first: a record drops what is older than the longest window before it.
    await kept.record_usage("routine", "daily", LAST_INSTANT, Usage(1000))
    await kept.record_usage("routine", "daily", furthest + MINUTE, Usage(100))
    await kept.record_usage("routine", "daily", furthest, Usage(10))
    await kept.record_usage("routine", "daily", T0 + timedelta(days=1), Usage(1))
    assert (await kept.usage_since("routine", "daily", since)).tokens == 11
    # A window from the calendar's end counts what is stamped there; one from its start, what
    # is stamped then.
    assert (await kept.usage_since("routine", "daily", LAST_INSTANT - HOUR)).tokens == 1000
    await kept.record_usage("session", "early", FIRST_INSTANT + MINUTE, Usage(5))
    assert (await kept.usage_since("session", "early", FIRST_INSTANT)).tokens == 5


async def test_what_no_budget_can_count_is_dropped_at_the_next_record(store: Store) -> None:
    kept = ledger(store)
    await kept.record_usage("routine", "daily", T0, Usage(1))
    await kept.record_usage("routine", "daily", T0 + LEDGER_SPAN - MINUTE, Usage(10))
    assert (await kept.usage_since("routine", "daily", T0 - HOUR)).tokens == 11
    await kept.record_usage("routine", "daily", T0 + LEDGER_SPAN + MINUTE, Usage(100))
    assert (await kept.usage_since("routine", "daily", T0 - HOUR)).tokens == 110


async def test_any_session_text_has_a_ledger_of_its_own(store: Store) -> None:
    kept = ledger(store)
    sessions = ["chat/1", "../../etc", "é ✓", "a" * 500, "chat-1", "Chat-1"]
    for count, session in enumerate(sessions, start=1):
        await kept.record_usage("session", session, T0, Usage(count))
    for count, session in enumerate(sessions, start=1):
        assert (await kept.usage_since("session", session, T0 - HOUR)).tokens == count


async def test_bad_keys_are_refused(store: Store) -> None:
    kept = ledger(store)
    with pytest.raises(UnsafeName):
        await kept.record_usage("routine", "../x", T0, Usage(1))
    with pytest.raises(ValueError, match="not 'team'"):
        await kept.usage_since("team", "x", T0)
    with pytest.raises(ValueError, match="non-empty"):
        await kept.record_usage("session", "", T0, Usage(1))


async def test_concurrent_records_never_lose_each_others(
    store_factory: Callable[..., Store],
) -> None:
    stores = [ledger(store_factory()) for _ in range(3)]

    async def spend(kept: UsageRecords) -> None:
        for _ in range(10):
            await kept.record_usage("session", "shared", T0, Usage(1, cost=0.5))

    async with trio.open_nursery() as nursery:
        for kept in stores:
            nursery.start_soon(spend, kept)
    spent = await stores[0].usage_since("session", "shared", T0 - HOUR)
    assert (spent.tokens, spent.costs) == (30, (("USD", 15.0),))
    for kept in stores:
        await kept.aclose()  # type: ignore[attr-defined]


def test_the_pure_ledger_keeps_one_entry_per_minute_and_currency() -> None:
    entries: list[Entry] = []
    for second in range(0, 120, 10):
        entries = add_entry(entries, T0.replace(second=0) + timedelta(seconds=second), Usage(1))
    assert [(e.minute.minute, e.input_tokens) for e in entries] == [(0, 6), (1, 6)]
    assert spent_since(entries, T0).tokens == 12


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b'{"kind": "session", "name": "someone-else", "entries": '
        b'[["2026-07-07T10:00:00.000Z", "", 5, 0, 0]]}',
        b'{"kind": "session", "name": "chat-1", "entries": "lots"}',
        b"[" * 100_000,
    ],
)
async def test_a_hostile_ledger_file_reads_as_empty_and_is_replaced(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    async with DirectoryStore(tmp_path / "state") as store:
        where = tmp_path / "state" / "schedule" / "usage"
        where.mkdir(parents=True)
        (where / file_name("session", "chat-1")).write_bytes(content)
        assert await store.usage_since("session", "chat-1", T0 - HOUR) == Spent()
        assert "ignoring the usage ledger" in caplog.text
        await store.record_usage("session", "chat-1", T0, Usage(3))
        assert (await store.usage_since("session", "chat-1", T0 - HOUR)).tokens == 3


async def test_bad_entries_are_left_out_and_the_rest_counts(tmp_path: Path) -> None:
    async with DirectoryStore(tmp_path / "state") as store:
        await store.record_usage("session", "chat-1", T0, Usage(3, cost=1.0))
        path = tmp_path / "state" / "schedule" / "usage" / file_name("session", "chat-1")
        good = path.read_text()
        planted = good.replace(
            '"entries":[',
            '"entries":[["2026-07-07T10:00:00.000Z","",-5,0,0],'
            '["2026-07-07T10:00:00.000Z","usd",1,0,9],["x"],7,',
        )
        path.write_text(planted)
        spent = await store.usage_since("session", "chat-1", T0 - HOUR)
        assert (spent.tokens, spent.costs) == (3, (("USD", 1.0),))


async def test_a_link_or_fifo_in_place_of_a_ledger_is_refused(tmp_path: Path) -> None:
    import os

    async with DirectoryStore(tmp_path / "state") as store:
        where = tmp_path / "state" / "schedule" / "usage"
        where.mkdir(parents=True)
        secret = tmp_path / "secret"
        secret.write_text('{"kind":"session","name":"a","entries":[]}')
        (where / file_name("session", "a")).symlink_to(secret)
        os.mkfifo(where / file_name("session", "b"))
        with trio.fail_after(10):
            assert await store.usage_since("session", "a", T0) == Spent()
            assert await store.usage_since("session", "b", T0) == Spent()
            await store.record_usage("session", "a", T0, Usage(1))
        assert (
            secret.read_text() == '{"kind":"session","name":"a","entries":[]}'
        )  # never written through


async def test_a_session_that_is_not_valid_unicode_adds_up_in_its_ledger(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    session = "chat:\udc80"  # a lone surrogate: what an undecodable byte reads as in Python
    async with DirectoryStore(tmp_path / "state") as store:
        await store.record_usage("session", session, T0, Usage(1))
        await store.record_usage("session", session, T0, Usage(2))
        assert (await store.usage_since("session", session, T0 - HOUR)).tokens == 3
    assert "not a ledger" not in caplog.text
