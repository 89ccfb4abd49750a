"""The store contract's recent wake-up turns (the rate limit's shared state), and the limits on
self-scheduled turns as every store applies them, run over every store backend."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from trio_routines.errors import InvalidWakeup
from trio_routines.instants import FIRST_INSTANT
from trio_routines.records import Origin, OriginKind
from trio_routines.store import Store
from trio_routines.stores import DirectoryStore
from trio_routines.wakelimits import (
    MAX_TURNS_KEPT,
    RATE_WINDOW,
    WakeLimits,
    WakeTurns,
    kept_turns,
    room_at,
)
from trio_routines.wakeups import WakeupRequest

T0 = datetime(2026, 7, 7, 10, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
BY_TURN = Origin(kind=OriginKind.WAKEUP, parent="w0", depth=2)


async def test_turns_are_kept_per_session_and_read_after_since(
    store: Store, store_factory: Callable[..., Store]
) -> None:
    assert isinstance(store, WakeTurns)
    await store.note_wake_turn("chat:1", T0 + timedelta(microseconds=1500))
    await store.note_wake_turn("chat:1", T0 + 10 * MINUTE)
    await store.note_wake_turn("会话 2", T0 + 5 * MINUTE)
    assert await store.wake_turns("chat:1", T0 - MINUTE) == [
        T0 + timedelta(milliseconds=1),
        T0 + 10 * MINUTE,
    ]
    assert await store.wake_turns("chat:1", T0 + timedelta(milliseconds=1)) == [T0 + 10 * MINUTE]
    assert await store.wake_turns("会话 2", T0) == [T0 + 5 * MINUTE]
    assert await store.wake_turns("nobody", T0 - RATE_WINDOW) == []
    other = store_factory()  # another replica on the same state
    assert isinstance(other, WakeTurns)
    await other.note_wake_turn("chat:1", T0 + 20 * MINUTE)
    assert len(await store.wake_turns("chat:1", T0 - MINUTE)) == 3
    await other.aclose()


async def test_turns_out_of_the_window_are_forgotten(store: Store) -> None:
    assert isinstance(store, WakeTurns)
    await store.note_wake_turn("a", T0)
    await store.note_wake_turn("b", T0 + MINUTE)
    await store.note_wake_turn("a", T0 + RATE_WINDOW)  # T0 leaves: exactly an hour before
    assert await store.wake_turns("a", T0 - RATE_WINDOW) == [T0 + RATE_WINDOW]
    assert await store.wake_turns("b", T0 - RATE_WINDOW) == [T0 + MINUTE]
    await store.note_wake_turn("a", T0 + RATE_WINDOW + 2 * MINUTE)
    assert await store.wake_turns("b", T0 - RATE_WINDOW) == []  # every session is pruned


async def test_turns_recorded_behind_the_newest_are_kept_and_counted(store: Store) -> None:
    """A wall clock set back two hours: the turns it records are kept, with those ahead of it
    (which count again once it gets there), and the rate counts them at that clock."""
    assert isinstance(store, WakeTurns)
    for minute in range(3):
        await store.note_wake_turn("s", T0 + minute * MINUTE)
    await store.note_wake_turn("other", T0)
    back = T0 - 2 * RATE_WINDOW
    for minute in range(3):
        await store.note_wake_turn("s", back + minute * MINUTE)
    await store.note_wake_turn("behind", back)
    since = back - RATE_WINDOW
    assert await store.wake_turns("s", since) == [
        *(back + minute * MINUTE for minute in range(3)),
        *(T0 + minute * MINUTE for minute in range(3)),
    ]
    assert await store.wake_turns("other", since) == [T0]
    assert await store.wake_turns("behind", since) == [back]
    recent = tuple(await store.wake_turns("s", since))
    asked = WakeupRequest(
        session="s",
        prompt="p",
        fire_at=back + 10 * MINUTE,
        origin=BY_TURN,
        limits=WakeLimits(rate=3),
        recent=recent,
    )
    with pytest.raises(InvalidWakeup, match=r"rate limit .* 4 wake-up turns .*at most 3 "):
        await store.add_wakeup(asked, back + 3 * MINUTE)
    # An hour on at that clock, its own turns leave the window; those ahead stay.
    await store.note_wake_turn("s", back + RATE_WINDOW + 2 * MINUTE)
    assert await store.wake_turns("s", since) == [
        back + RATE_WINDOW + 2 * MINUTE,
        *(T0 + minute * MINUTE for minute in range(3)),
    ]


async def test_a_turn_due_in_the_calendars_first_hour_is_recorded_and_weighed(
    store: Store,
) -> None:
    """A wake-up stored by hand due in year 1 (a row set to '-infinity'): its turn is recorded
    and the rate weighs it, with no OverflowError (which lost the wake-up once taken)."""
    assert isinstance(store, WakeTurns)
    first = FIRST_INSTANT + 30 * MINUTE
    await store.note_wake_turn("s", first)
    await store.note_wake_turn("s", FIRST_INSTANT)
    assert await store.wake_turns("s", FIRST_INSTANT - timedelta(0)) == [first]
    assert room_at([FIRST_INSTANT, first], first, 1) == first + RATE_WINDOW
    assert room_at([first], FIRST_INSTANT + MINUTE, 1) is None
    assert kept_turns([first], FIRST_INSTANT) == [first]


async def test_text_no_store_can_hold_has_no_turns(store: Store) -> None:
    assert isinstance(store, WakeTurns)
    await store.note_wake_turn("ok", T0)
    assert await store.wake_turns("bad\x00session", T0 - MINUTE) == []


@pytest.mark.parametrize("kept", [MAX_TURNS_KEPT])
def test_a_session_keeps_at_most_its_newest_turns(kept: int) -> None:
    from trio_routines.wakelimits import kept_turns

    turns: list[datetime] = []
    for second in range(kept + 5):
        turns = kept_turns(turns, T0 + timedelta(seconds=second))
    assert len(turns) == kept
    assert turns[-1] == T0 + timedelta(seconds=kept + 4)


def _request(minutes: float, origin: Origin | None = BY_TURN, **kw: object) -> WakeupRequest:
    return WakeupRequest(
        session="s",
        prompt="check again",
        fire_at=T0 + timedelta(minutes=minutes),
        origin=origin,
        **kw,  # type: ignore[arg-type]
    )


async def test_every_store_refuses_a_turn_over_the_rate_with_its_recorded_turns(
    store: Store,
) -> None:
    assert isinstance(store, WakeTurns)
    limits = WakeLimits(rate=3)
    for minute in (1, 2):
        await store.note_wake_turn("s", T0 - timedelta(minutes=minute))
    recent = tuple(await store.wake_turns("s", T0 - RATE_WINDOW))
    await store.add_wakeup(_request(5, limits=limits, recent=recent), T0)
    with pytest.raises(
        InvalidWakeup,
        match=r"rate limit .* 4 wake-up turns .*at most 3 .* resets at 2026-07-07T10:58:00.000Z",
    ):
        await store.add_wakeup(_request(6, limits=limits, recent=recent), T0)
    # The operator's own wake-ups are never refused, and the pending ones count.
    await store.add_wakeup(_request(7, Origin(kind=OriginKind.HTTP), limits=limits), T0)
    assert len(await store.list_wakeups()) == 2


async def test_every_store_refuses_a_chain_too_deep(store: Store) -> None:
    deep = Origin(kind=OriginKind.WAKEUP, parent="w", depth=5)
    with pytest.raises(InvalidWakeup, match=r"chain-depth limit .* number 5 .*at most 4"):
        await store.add_wakeup(_request(5, deep, limits=WakeLimits(depth=4)), T0)
    assert await store.list_wakeups() == []
    added = await store.add_wakeup(_request(5, deep, limits=WakeLimits(depth=5)), T0)
    assert added.origin == deep


# --- the state directory's file, hostile ----------------------------------------------------------


@pytest.mark.parametrize("damage", ["garbage", "link", "fifo", "bad entry"])
async def test_a_damaged_turns_file_reads_as_no_turns_and_is_replaced(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = DirectoryStore(tmp_path)
    await store.note_wake_turn("s", T0)
    path = tmp_path / "schedule" / "wake-turns.json"
    outside = tmp_path / "outside.json"
    path.unlink()
    if damage == "garbage":
        path.write_text("[[[[")
    elif damage == "link":
        outside.write_text(json.dumps({"s": ["2026-07-07T10:00:00.000Z"]}))
        path.symlink_to(outside)
    elif damage == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(json.dumps({"s": ["yesterday", "2026-07-07T10:00:00.000Z"], "t": 3}))
    caplog.set_level(logging.WARNING, "trio_routines")
    kept = [T0] if damage == "bad entry" else []
    assert await store.wake_turns("s", T0 - MINUTE) == kept
    assert any("wake-turns.json" in r.getMessage() for r in caplog.records)
    await store.note_wake_turn("s", T0 + MINUTE)
    assert await store.wake_turns("s", T0 - MINUTE) == [*kept, T0 + MINUTE]
    assert path.is_file()
    assert not path.is_symlink()
    if damage == "link":
        assert json.loads(outside.read_text()) == {"s": ["2026-07-07T10:00:00.000Z"]}
    await store.aclose()
