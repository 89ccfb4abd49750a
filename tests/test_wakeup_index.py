"""The state directory's in-memory index of pending wake-ups (wakeupindex.py): what it answers
as due, once per entry and in stored order, through takes, re-queues and clocks gone back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from trio_routines.records import Wakeup
from trio_routines.stores.directory import DirectoryStore
from trio_routines.stores.directory.wakeupindex import WakeupIndex, del_op, set_op
from trio_routines.wakelimits import EXPIRY_GRACE
from trio_routines.wakeups import WakeupRequest

T0 = datetime(2026, 7, 7, 9, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def one_shot(wakeup_id: str, at: datetime) -> Wakeup:
    return Wakeup(id=wakeup_id, session="s", prompt="p", fire_at=at)


def test_an_entry_set_again_in_place_is_due_once() -> None:
    index = WakeupIndex()
    index.insert(one_shot("a", T0), 1)
    index.insert(Wakeup(id="r", session="s", prompt="p", fire_at=T0, cron="*/5 * * * *"), 2)
    assert [w.id for w in index.due(T0)] == ["a", "r"]
    index.apply(del_op("a"))
    advanced = Wakeup(id="r", session="s", prompt="p", fire_at=T0 + 5 * MINUTE, cron="*/5 * * * *")
    index.apply(set_op(advanced))  # taken, and re-queued in place: same order number
    # Not polled until it came due again: it is one entry, so it is due once.
    assert index.due(T0 + 30 * MINUTE) == [advanced]
    assert index.first_due(T0 + 30 * MINUTE) == advanced


def test_after_the_clock_went_back_the_index_judges_again_and_keeps_answering() -> None:
    index = WakeupIndex()
    for n, minutes in enumerate((10, 20, 30), 1):
        index.insert(one_shot(f"w{n}", T0 + minutes * MINUTE), n)
    assert [w.id for w in index.due(T0 + 25 * MINUTE)] == ["w1", "w2"]
    # The clock steps back: only what is due at the earlier instant is due.
    assert [w.id for w in index.due(T0 + 15 * MINUTE)] == ["w1"]
    assert index.due(T0) == []
    # And forward again, past every entry.
    assert [w.id for w in index.due(T0 + 40 * MINUTE)] == ["w1", "w2", "w3"]
    index.apply(del_op("w2"))
    assert [w.id for w in index.due(T0 + 40 * MINUTE)] == ["w1", "w3"]


async def test_a_recurring_entry_expired_after_a_take_leaves_once(tmp_path: Path) -> None:
    # Taken at its first occurrence, then not polled until well past its until: the take that
    # finds it expired removes it with one journal change, and the store goes on.
    store = DirectoryStore(tmp_path)
    request = WakeupRequest(session="s", prompt="p", cron="*/10 * * * *", until=T0 + 20 * MINUTE)
    added = await store.add_wakeup(request, T0)
    assert added.fire_at == T0 + 10 * MINUTE
    taken = await store.take_due_wakeup(T0 + 10 * MINUTE)
    assert taken is not None
    assert taken.id == added.id
    late = T0 + 20 * MINUTE + EXPIRY_GRACE + MINUTE
    assert await store.take_due_wakeup(late) is None
    assert await store.list_wakeups() == []
    other = DirectoryStore(tmp_path)  # another process reads the journal back whole
    assert await other.list_wakeups() == []
    follow = await store.add_wakeup(WakeupRequest(session="s", prompt="p", fire_at=late), T0)
    assert [w.id for w in await other.list_wakeups()] == [follow.id]
    await other.aclose()
    await store.aclose()
