"""The store contract's first-armed record and ``store`` gaps, run over every store backend."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import trio

from trio_routines.errors import UnsafeName
from trio_routines.records import Gap, GapReason
from trio_routines.store import ArmedRecords, GapRecords, Store

T0 = datetime(2026, 7, 7, 10, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def _gap(first: int, last: int, reason: str = "store") -> Gap:
    return Gap(T0 + first * MINUTE, T0 + last * MINUTE, last - first + 1, GapReason(reason))


# --- first armed -------------------------------------------------------------------------------


async def test_first_armed_is_kept_once_and_never_moved(
    store: Store, store_factory: Callable[..., Store]
) -> None:
    assert isinstance(store, ArmedRecords)
    at = T0 + timedelta(milliseconds=1500, microseconds=7)
    assert await store.first_armed(["daily", "每日 report"], at) == {
        "daily": T0 + timedelta(milliseconds=1500),
        "每日 report": T0 + timedelta(milliseconds=1500),
    }
    # A later arming (a boot, a reload, another replica) keeps the first instant; a routine
    # named for the first time gets its own.
    assert await store.first_armed(["daily", "new"], T0 + MINUTE) == {
        "daily": T0 + timedelta(milliseconds=1500),
        "new": T0 + MINUTE,
    }
    other = store_factory()  # another scheduler on the same store
    try:
        assert isinstance(other, ArmedRecords)
        assert await other.first_armed(["new", "daily"], T0 + 9 * MINUTE) == {
            "new": T0 + MINUTE,
            "daily": T0 + timedelta(milliseconds=1500),
        }
        assert await other.first_armed([], T0) == {}
    finally:
        await other.aclose()


async def test_concurrent_first_armings_keep_one_instant(store: Store) -> None:
    assert isinstance(store, ArmedRecords)
    seen: list[datetime] = []

    async def arm(minute: int) -> None:
        seen.append((await store.first_armed(["r"], T0 + minute * MINUTE))["r"])

    async with trio.open_nursery() as nursery:
        for minute in range(5):
            nursery.start_soon(arm, minute)
    assert len(set(seen)) == 1
    assert (await store.first_armed(["r"], T0 + HOUR_LATER))["r"] == seen[0]


HOUR_LATER = timedelta(hours=1)


async def test_first_armed_refuses_an_unsafe_name(store: Store) -> None:
    assert isinstance(store, ArmedRecords)
    with pytest.raises(UnsafeName):
        await store.first_armed(["ok", "../x"], T0)


# --- store gaps: recorded late, never over a claim ---------------------------------------------


async def test_a_store_gap_is_not_recorded_over_a_claim(store: Store) -> None:
    assert isinstance(store, GapRecords)
    await store.claim("r", T0 + 2 * MINUTE, T0 + 2 * MINUTE)  # its answer was lost: it exists
    assert not await store.record_gap("r", _gap(2, 2))
    assert not await store.record_gap("r", _gap(1, 3))  # a claim inside the range
    assert await store.record_gap("r", _gap(3, 4))
    assert await store.record_gap("r", _gap(1, 1))  # older than the newest: in slot order
    assert await store.gaps("r") == [_gap(1, 1), _gap(3, 4)]
    assert not await store.record_gap("r", _gap(1, 1))  # recorded already (another replica)
    # Other reasons are not checked against claims: a claim is never inside them anyway.
    assert await store.record_gap("r", _gap(2, 9, "overlap"))


async def test_a_late_store_gap_takes_its_place_unless_a_gap_covers_it(store: Store) -> None:
    assert isinstance(store, GapRecords)
    assert await store.record_gap("r", _gap(5, 7, "overlap"))
    assert await store.record_gap("r", _gap(2, 3))
    assert not await store.record_gap("r", _gap(6, 6))  # inside the overlap: accounted for
    assert not await store.record_gap("r", _gap(1, 1, "down"))  # other reasons: as before
    assert await store.gaps("r") == [_gap(2, 3), _gap(5, 7, "overlap")]
