"""The state directory's wake-up calls of one process take turns (stores/directory/wakeups.py): one
call on the index and the journal at a time, and a wait that runs out says who held it."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_routines import DirectoryStore, StateFault
from trio_routines.converter import dumps, wakeup_to_json
from trio_routines.records import Wakeup
from trio_routines.stores.directory import wakeupfile
from trio_routines.stores.directory.wakeupfile import WakeupFile
from trio_routines.stores.directory.wakeupjournal import Journal
from trio_routines.wakeups import WakeupRequest

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)


def request(session: str = "s") -> WakeupRequest:
    return WakeupRequest(session=session, prompt="p", fire_at=T0 + timedelta(hours=1))


async def test_concurrent_adds_of_one_process_take_turns_and_all_land(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inside = 0
    most = 0
    guard = threading.Lock()
    locked = WakeupFile.locked
    save = Journal.append

    @contextlib.contextmanager
    def counted(self: WakeupFile) -> Iterator[int]:
        nonlocal inside, most
        with guard:  # a thread here is one holding, or waiting for, the flock
            inside += 1
            most = max(most, inside)
        try:
            with locked(self) as directory:
                yield directory
        finally:
            with guard:
                inside -= 1

    def slow_save(self: Journal, *args: Any) -> None:
        threading.Event().wait(0.05)  # a slow disk: the others arrive meanwhile
        save(self, *args)

    monkeypatch.setattr(WakeupFile, "locked", counted)
    monkeypatch.setattr(Journal, "append", slow_save)
    store = DirectoryStore(tmp_path, lock_timeout=60)
    async with trio.open_nursery() as nursery:
        for i in range(8):
            nursery.start_soon(store.add_wakeup, request(f"s{i}"), T0)
    assert most == 1
    assert sorted(w.session for w in await store.list_wakeups()) == [f"s{i}" for i in range(8)]


async def test_a_turn_waited_for_too_long_says_this_process_was_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    entered = trio.Event()
    token = trio.lowlevel.current_trio_token()
    save = Journal.append

    def stuck_save(self: Journal, *args: Any) -> None:
        trio.from_thread.run_sync(entered.set, trio_token=token)
        release.wait(30)
        save(self, *args)

    monkeypatch.setattr(Journal, "append", stuck_save)
    store = DirectoryStore(tmp_path, lock_timeout=0.2)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.add_wakeup, request("first"), T0)
        await entered.wait()
        try:
            with pytest.raises(StateFault) as raised:
                await store.add_wakeup(request("second"), T0)
        finally:
            release.set()
    assert str(raised.value) == (
        f"the wake-up store {tmp_path / 'schedule' / 'wakeups.journal'} was busy in this process "
        "for 0.2s (its wake-up calls go one at a time; 0 more waiting) — try again"
    )
    assert [w.session for w in await store.list_wakeups()] == ["first"]


async def test_a_lock_held_by_another_store_of_this_process_is_named_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    entered = trio.Event()
    token = trio.lowlevel.current_trio_token()
    save = Journal.append

    def stuck_save(self: Journal, *args: Any) -> None:
        if not release.is_set():
            trio.from_thread.run_sync(entered.set, trio_token=token)
            release.wait(30)
        save(self, *args)

    monkeypatch.setattr(Journal, "append", stuck_save)
    holder = DirectoryStore(tmp_path)
    other = DirectoryStore(tmp_path, lock_timeout=0.2)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(holder.add_wakeup, request("first"), T0)
        await entered.wait()
        try:
            with pytest.raises(StateFault) as raised:
                await other.add_wakeup(request("second"), T0)
        finally:
            release.set()
    assert str(raised.value) == (
        f"the wake-up store {tmp_path / 'schedule' / 'wakeups.lock'} stayed locked for 0.2s — "
        "another store object of this process on the same directory holds it"
    )
    assert not wakeupfile._held  # let go with the lock


MEMORY_CHILD = """
import resource, sys
from datetime import UTC, datetime, timedelta
import trio
from trio_routines import DirectoryStore
from trio_routines.wakeups import WakeupRequest

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

async def main():
    store = DirectoryStore(sys.argv[1], lock_timeout=120)
    later = T0 + timedelta(hours=1)
    async with trio.open_nursery() as nursery:
        for i in range(16):
            request = WakeupRequest(session=f"new{i}", prompt="p", fire_at=later)
            nursery.start_soon(store.add_wakeup, request, T0)

trio.run(main)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


@pytest.mark.slow
def test_concurrent_adds_to_a_file_near_its_bound_keep_memory_bounded_by_its_size(
    tmp_path: Path,
) -> None:
    # 16 adds at once to a store taken over from a 15 MiB wakeups.json: it is read once, into
    # one index, so the process's peak stays a small multiple of the file's size (side by
    # side, parses of a whole file took ~20 times it).
    schedule = tmp_path / "schedule"
    schedule.mkdir()
    later = T0 + timedelta(days=1)
    entries = [
        wakeup_to_json(Wakeup(id=f"{i:08d}", session=f"s{i}", prompt="x" * 1500, fire_at=later))
        for i in range(10_000)
    ]
    data = dumps(entries).encode()
    (schedule / "wakeups.json").write_bytes(data)
    child = subprocess.run(
        [sys.executable, "-c", MEMORY_CHILD, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    grown = int(child.stdout.strip())
    assert grown < 12 * len(data), (grown, len(data))
