"""Taking over the ``wakeups.json`` an earlier version (or the original scheduler) wrote.

On first use the array is read under the writers' lock, its wake-ups appended to the journal
in their order, and the file moved aside (``wakeups.json.imported-<instant>``), so an earlier
version sharing the directory no longer sees -- and never fires -- them. What an earlier
version writes there later is taken over by the next call the same way.
"""

from __future__ import annotations

import fcntl
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from wakeupstate import IMPORTED, entry, ids, pending, state

from trio_routines.converter import wakeup_from_json
from trio_routines.errors import StateFault
from trio_routines.stores.directory import DirectoryStore
from trio_routines.stores.directory.wakeuplog import WakeupLog
from trio_routines.wakeups import WakeupRequest

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
LATER = T0 + timedelta(hours=1)

FULL = [
    {
        "id": "cron-1",
        "session": "chat",
        "prompt": "daily digest",
        "fireAt": "2026-07-07T11:00:00.000Z",
        "cron": "0 11 * * *",
        "tz": "Europe/Berlin",
        "origin": {"kind": "wakeup", "depth": 2, "parent": "older"},
    },
    {
        "id": "retry-1",
        "session": "chat",
        "prompt": "busy before",
        "fireAt": "2026-07-07T10:30:00.000Z",
        "attempts": 3,
        "origin": {"kind": "routine", "depth": 1, "routine": "digest"},
    },
    {"id": "plain", "session": "other", "prompt": "p", "fireAt": "2026-07-07T10:00:00.000Z"},
]


async def test_an_earlier_versions_file_is_taken_over_whole_and_moved_aside(
    tmp_path: Path,
) -> None:
    schedule = state(tmp_path, FULL)
    original = (schedule / "wakeups.json").read_bytes()
    store = DirectoryStore(tmp_path)
    listed = await store.list_wakeups()
    assert listed == [wakeup_from_json(e) for e in FULL]  # every field, in stored order
    assert not (schedule / "wakeups.json").exists()
    (aside,) = schedule.glob(IMPORTED)
    assert aside.read_bytes() == original
    assert pending(tmp_path) == ["cron-1", "retry-1", "plain"]
    # "first due in stored order": plain (due earliest) comes after retry-1 in the file
    taken = await store.take_due_wakeup(T0 + timedelta(minutes=45))
    assert taken is not None
    assert taken.id == "retry-1"
    assert ids(await DirectoryStore(tmp_path).list_wakeups()) == ["cron-1", "plain"]


async def test_another_users_read_lists_the_file_and_journal_and_takes_nothing_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An operator's `list` as root on the service's state: taking over would leave the
    # journal and its lock owned by root, which the service could then not write.
    schedule = state(tmp_path, FULL)
    owner = DirectoryStore(tmp_path)
    await owner.list_wakeups()  # taken over by its owner: now in the journal
    # An earlier version writes again: a new one, and one of those taken over (listed once).
    (schedule / "wakeups.json").write_text(json.dumps([entry("later", at=LATER), FULL[2]]))
    before = sorted(p.name for p in schedule.iterdir())
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(schedule).st_uid + 1)
    reader = DirectoryStore(tmp_path)
    assert ids(await reader.list_wakeups()) == [*(e["id"] for e in FULL), "later"]
    assert sorted(p.name for p in schedule.iterdir()) == before  # nothing made, moved or taken
    assert pending(tmp_path) == [e["id"] for e in FULL]
    monkeypatch.undo()
    assert ids(await owner.list_wakeups()) == [*(e["id"] for e in FULL), "later"]
    assert pending(tmp_path) == [*(e["id"] for e in FULL), "later"]  # its owner takes it over
    assert not (schedule / "wakeups.json").exists()


async def test_another_users_read_of_a_file_never_taken_over_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    schedule = state(tmp_path, FULL)
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(schedule).st_uid + 1)
    assert ids(await DirectoryStore(tmp_path).list_wakeups()) == [e["id"] for e in FULL]
    assert sorted(p.name for p in schedule.iterdir()) == ["wakeups.json"]


async def test_what_an_earlier_version_writes_later_is_taken_over_by_the_next_call(
    tmp_path: Path,
) -> None:
    schedule = state(tmp_path, [entry("first")])
    store = DirectoryStore(tmp_path)
    added = await store.add_wakeup(WakeupRequest(session="s", prompt="p", fire_at=LATER), T0)
    assert ids(await store.list_wakeups()) == ["first", added.id]
    # An earlier version still running sees no wakeups.json, so it writes only its own.
    (schedule / "wakeups.json").write_text(json.dumps([entry("from-old")]))
    assert await store.take_due_wakeup(T0) is None  # a poll takes it over (nothing due)
    assert ids(await store.list_wakeups()) == ["first", added.id, "from-old"]
    assert ids(await DirectoryStore(tmp_path).list_wakeups()) == ["first", added.id, "from-old"]
    assert len(list(schedule.glob(IMPORTED))) == 2
    assert not (schedule / "wakeups.json").exists()


async def test_wakeups_taken_over_already_are_not_taken_over_twice(tmp_path: Path) -> None:
    # A crash between appending the taken-over wake-ups and moving the file aside leaves both:
    # the next call takes over only what the journal does not hold.
    schedule = state(tmp_path, [entry("a"), entry("b")])
    store = DirectoryStore(tmp_path)
    assert ids(await store.list_wakeups()) == ["a", "b"]
    (schedule / "wakeups.json").write_text(json.dumps([entry("a"), entry("b"), entry("c")]))
    assert ids(await store.list_wakeups()) == ["a", "b", "c"]
    assert pending(tmp_path) == ["a", "b", "c"]


async def test_a_duplicate_id_in_the_file_is_taken_over_once(tmp_path: Path) -> None:
    state(tmp_path, [entry("a", prompt="first"), entry("a", prompt="second"), entry("b")])
    listed = await DirectoryStore(tmp_path).list_wakeups()
    assert [(w.id, w.prompt) for w in listed] == [("a", "first"), ("b", "p")]


async def test_the_take_over_waits_for_an_earlier_version_holding_the_lock(
    tmp_path: Path,
) -> None:
    schedule = state(tmp_path, [entry("a")])
    fd = os.open(schedule / "wakeups.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # an earlier version in the middle of its rewrite
        with pytest.raises(StateFault, match=r"stayed locked for 0\.2s"):
            await DirectoryStore(tmp_path, lock_timeout=0.2).list_wakeups()
        assert (schedule / "wakeups.json").exists()  # nothing taken behind its back
    finally:
        os.close(fd)
    assert ids(await DirectoryStore(tmp_path).list_wakeups()) == ["a"]


def test_a_reader_without_the_lock_never_takes_over(tmp_path: Path) -> None:
    state(tmp_path, [entry("a")])
    log = WakeupLog(tmp_path, 10.0)
    assert log.refresh() is False  # it says so; taking over is a writer's, under the lock
    assert (tmp_path / "schedule" / "wakeups.json").exists()
    log.take_over()
    assert log.refresh() is True
    assert ids(list(log.index)) == ["a"]


async def test_a_journal_removed_by_hand_is_not_brought_back_by_a_writer(
    tmp_path: Path,
) -> None:
    store = DirectoryStore(tmp_path)
    await store.add_wakeup(WakeupRequest(session="s", prompt="p", fire_at=LATER), T0)
    (tmp_path / "schedule" / "wakeups.journal").unlink()  # an operator clearing them
    added = await store.add_wakeup(WakeupRequest(session="s", prompt="q", fire_at=LATER), T0)
    assert await DirectoryStore(tmp_path).list_wakeups() == [added]
