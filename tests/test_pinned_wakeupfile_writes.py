"""The state directory's wake-up store, pinned (issue 11): the lock and the writes.

The writers' lock is the one in the state directory, bounded in size; a failing write names
the file that failed (a new generation's temp file included) and leaves no temp file behind;
a writer reads and appends to the directory it holds locked, and writes only a change.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import re
from pathlib import Path

import pytest
from oserrors import fail, named, prefixed
from wakeupstate import (
    ASIDE,
    EIO,
    HEX16,
    T0,
    entry,
    hold_lock,
    ids,
    lock_waits_give_up_at_once,
    pending,
    request,
    state,
    warnings,
)

from trio_routines.errors import StateFault
from trio_routines.stores import safefile
from trio_routines.stores.directory import DirectoryStore, wakeupfile

# -- the writers' lock -----------------------------------------------------------------------------


async def test_the_lock_is_the_one_in_the_state_directory_wherever_we_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "wakeups.lock").write_bytes(b"")  # a lock file of the working directory
    monkeypatch.chdir(elsewhere)
    schedule = state(tmp_path / "state")
    held = hold_lock(schedule)
    lock_waits_give_up_at_once(monkeypatch)
    try:
        store = DirectoryStore(tmp_path / "state", lock_timeout=10)
        with pytest.raises(StateFault) as raised:
            await store.add_wakeup(request(), T0)
    finally:
        os.close(held)
    assert str(raised.value) == (
        f"the wake-up store {schedule / 'wakeups.lock'} stayed locked for 10s — "
        "another process holds it"
    )
    assert os.listdir(schedule) == ["wakeups.lock"]


@pytest.mark.parametrize("raced", [False, True], ids=["found", "created-meanwhile"])
async def test_a_lock_file_of_any_size_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raced: bool
) -> None:
    schedule = state(tmp_path)
    lock = schedule / "wakeups.lock"
    content = {"size": 0}
    if raced:
        # Another writer creates the lock file between our look (nothing there) and our create.
        real = safefile.open_file

        def open_file(parent: int, name: str, where: Path, flags: int, limit: int) -> int:
            if not lock.exists():
                lock.write_bytes(b"x" * content["size"])
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
            return real(parent, name, where, flags, limit)

        monkeypatch.setattr(safefile, "open_file", open_file)
    store = DirectoryStore(tmp_path)
    # Never read: one grown large locks as well (refusing it stopped every wake-up's write).
    for size in (1, 1 << 20, (1 << 20) + 1):
        lock.unlink(missing_ok=True)
        if not raced:
            lock.write_bytes(b"x" * size)
        content["size"] = size
        await store.add_wakeup(request(), T0)
        assert lock.stat().st_size == size
    assert len(await store.list_wakeups()) == 3


async def test_a_lock_link_planted_meanwhile_is_refused_by_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    schedule = state(tmp_path)
    lock = schedule / "wakeups.lock"
    victim = tmp_path / "victim"
    victim.write_bytes(b"")
    real = safefile.open_file

    def open_file(parent: int, name: str, where: Path, flags: int, limit: int) -> int:
        if not lock.is_symlink():
            lock.symlink_to(victim)
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
        return real(parent, name, where, flags, limit)

    monkeypatch.setattr(safefile, "open_file", open_file)
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(tmp_path).add_wakeup(request(), T0)
    assert str(raised.value) == (
        f"cannot lock the wake-up store {lock}: {lock} is a symbolic link, not a regular file "
        "— refused; remove it"
    )


async def test_a_lock_file_that_cannot_be_created_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = state(tmp_path) / "wakeups.lock"
    fail(monkeypatch, safefile, "open", errno.EIO, named("wakeups.lock"))
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(tmp_path).add_wakeup(request(), T0)
    assert str(raised.value) == f"cannot lock the wake-up store {lock}: {EIO}: {lock}"


# -- writing: unbounded, named when it fails, no temp file left -----------------------------------


async def test_the_journal_has_no_size_bound_only_an_earlier_versions_file_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wakeupfile, "MAX_BYTES", 4000)  # what wakeups.json may hold
    big = [entry(f"{n:04}", "p" * 1000, f"s{n // 20}") for n in range(3)]
    schedule = state(tmp_path, big)
    store = DirectoryStore(tmp_path)
    added = [await store.add_wakeup(request("p" * 1000), T0) for _ in range(5)]
    assert (schedule / "wakeups.journal").stat().st_size > 8000
    assert ids(await DirectoryStore(tmp_path).list_wakeups()) == [
        "0000",
        "0001",
        "0002",
        *ids(added),
    ]


def write_refused(schedule: Path, detail: str) -> str:
    return f"could not write the wake-up store {schedule / 'wakeups.journal'}: {detail}"


@pytest.mark.parametrize("call", ["open", "write", "fsync"])
async def test_a_temp_file_that_fails_is_named_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    # The journal's first generation (here: taking over an earlier version's file) is a temp
    # file renamed into place.
    schedule = state(tmp_path, [entry("a")])
    (schedule / "wakeups.lock").write_bytes(b"")
    if call == "open":
        fail(monkeypatch, safefile, "open", errno.EIO, prefixed("wakeups.journal.tmp-"))
    else:  # the temp file's is the first write and the first fsync of a take-over
        fail(monkeypatch, safefile, call, errno.EIO)
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(tmp_path).add_wakeup(request(), T0)
    temp = re.escape(str(schedule)) + "/wakeups\\.journal\\.tmp-" + HEX16
    expected = re.escape(write_refused(schedule, EIO + ": ")) + temp
    assert re.fullmatch(expected, str(raised.value)), str(raised.value)
    assert sorted(os.listdir(schedule)) == ["wakeups.json", "wakeups.lock"]
    monkeypatch.undo()  # repaired: taken over now
    assert ids(await DirectoryStore(tmp_path).list_wakeups()) == ["a"]


@pytest.mark.parametrize("unlink_fails", [False, True])
async def test_a_rename_that_fails_is_named_and_its_temp_file_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unlink_fails: bool
) -> None:
    schedule = state(tmp_path, [entry("a")])
    proxy = fail(monkeypatch, safefile, "replace", errno.EIO)  # the rename is safefile's
    if unlink_fails:
        proxy.also("unlink", errno.EIO)
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(tmp_path).add_wakeup(request(), T0)
    path = schedule / "wakeups.journal"
    assert str(raised.value) == write_refused(schedule, f"{EIO}: {path}")
    temps = [n for n in os.listdir(schedule) if n.startswith("wakeups.journal.tmp-")]
    assert len(temps) == (1 if unlink_fails else 0)
    assert (schedule / "wakeups.json").exists()
    monkeypatch.undo()  # repaired: taken over now
    assert ids(await DirectoryStore(tmp_path).list_wakeups()) == ["a"]


async def test_a_directory_fsync_that_fails_after_the_rename_is_one_named_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    schedule = state(tmp_path)
    (schedule / "wakeups.lock").write_bytes(b"")
    calls = itertools.count()
    fail(monkeypatch, safefile, "fsync", errno.EIO, lambda *a: next(calls) == 1)  # not the temp's
    added = await DirectoryStore(tmp_path).add_wakeup(request(), T0)
    assert warnings(caplog) == [
        f"wrote the wake-up store {schedule / 'wakeups.journal'} but could not fsync its "
        f"directory: {EIO}: {schedule}"
    ]
    assert ids(await DirectoryStore(tmp_path).list_wakeups()) == [added.id]


async def test_an_append_that_fails_is_named_and_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    first = await store.add_wakeup(request(), T0)
    path = tmp_path / "schedule" / "wakeups.journal"
    before = path.read_bytes()
    real = os.write

    def half(fd: int, data: bytes) -> int:  # half a line lands, then the disk fails
        if not half.done:  # type: ignore[attr-defined]
            half.done = True  # type: ignore[attr-defined]
            return real(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    half.done = False  # type: ignore[attr-defined]
    monkeypatch.setattr(os, "write", half)  # the module safefile writes with
    with pytest.raises(StateFault) as raised:
        await store.add_wakeup(request(), T0)
    monkeypatch.setattr(os, "write", real)
    assert str(raised.value) == write_refused(tmp_path / "schedule", f"{EIO}: {path}")
    assert path.read_bytes() == before  # the half line is cut
    assert ids(await DirectoryStore(tmp_path).list_wakeups()) == [first.id]


async def test_damage_that_cannot_be_kept_aside_is_a_fault_naming_the_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    schedule = state(tmp_path, b"not json")
    fail(monkeypatch, wakeupfile, "rename", errno.EIO)
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(tmp_path).add_wakeup(request(), T0)
    path = schedule / "wakeups.json"
    expected = re.escape(
        f"could not move the taken-over wake-up store {path} aside: {EIO}: {schedule}/"
    )
    assert re.fullmatch(expected + ASIDE, str(raised.value)), str(raised.value)
    assert (schedule / "wakeups.json").read_bytes() == b"not json"


# -- a writer works on what it holds locked, and writes only a change -----------------------------


async def test_a_writer_reads_and_appends_to_the_directory_it_holds_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    schedule = state(tmp_path, [entry("locked")])
    real = safefile.lock_within  # what wakeupfile calls by that name

    def lock_then_swap(fd: int, seconds: float) -> bool:
        # Once we hold the lock, someone swaps the schedule directory for another one.
        locked = real(fd, seconds)
        (tmp_path / "old").mkdir()
        schedule.rename(tmp_path / "old" / "schedule")
        state(tmp_path, [entry("swapped")])
        return locked

    monkeypatch.setattr(wakeupfile, "lock_within", lock_then_swap)
    added = await DirectoryStore(tmp_path).add_wakeup(request(), T0)
    assert pending(tmp_path / "old") == ["locked", added.id]
    assert json.loads((schedule / "wakeups.json").read_text())[0]["id"] == "swapped"


async def test_a_take_or_remove_that_changes_nothing_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state(tmp_path, [entry("due", at=T0), entry("later")])
    store = DirectoryStore(tmp_path)
    assert ids(await store.list_wakeups()) == ["due", "later"]  # taken over
    path = tmp_path / "schedule" / "wakeups.journal"
    size = path.stat().st_size
    assert await store.remove_wakeup("unknown") is False
    assert await store.remove_wakeup("later", "another-session") is False
    assert path.stat().st_size == size
    real = safefile.lock_within  # what wakeupfile calls by that name

    def lock_then_lose_the_race(fd: int, seconds: float) -> bool:
        # Another process took the due wake-up between our lock-free look and our lock.
        locked = real(fd, seconds)
        with path.open("ab") as handle:
            handle.write(b'{"op":"del","id":"due"}\n')
        return locked

    monkeypatch.setattr(wakeupfile, "lock_within", lock_then_lose_the_race)
    assert await store.take_due_wakeup(T0) is None
    grown = path.stat().st_size
    assert grown == size + len(b'{"op":"del","id":"due"}\n')  # nothing more than its line
    assert ids(await store.list_wakeups()) == ["later"]
