"""The state directory's wake-up store, pinned: an earlier version's ``wakeups.json``
and the writers' lock.

A writer that times out on the lock says whether this process holds it (another store object on
the same directory) or another process does, whatever this process holds elsewhere. A usable
``wakeups.json`` is taken over silently and moved aside as ``imported``; a directory fsync that
fails after the move is one warning naming the file and the directory. A look at, or an open of,
``wakeups.json`` that fails is a fault naming it; nothing there is nothing, and no damage.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest
from oserrors import fail, fail_directory_fsyncs, named
from wakeupstate import (
    EIO,
    IMPORTED_ASIDE,
    T0,
    entry,
    hold_lock,
    ids,
    lock_waits_give_up_at_once,
    request,
    state,
    unreadable,
    warnings,
)

from trio_routines.errors import StateFault
from trio_routines.stores import safefile
from trio_routines.stores.directory import DirectoryStore, wakeupfile
from trio_routines.stores.directory.wakeupfile import WakeupFile

# -- the writers' lock ---------------------------------------------------------------------------


async def lock_refusal(root: Path) -> str:
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(root, lock_timeout=10).add_wakeup(request(), T0)
    return str(raised.value)


async def test_a_lock_timeout_names_this_process_only_for_a_lock_it_holds_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = state(tmp_path / "ours"), state(tmp_path / "theirs")
    held = hold_lock(theirs)  # as another process holds it: its own open file
    try:
        with WakeupFile(tmp_path / "ours", 10).locked():
            lock_waits_give_up_at_once(monkeypatch)
            assert await lock_refusal(tmp_path / "ours") == (
                f"the wake-up store {ours / 'wakeups.lock'} stayed locked for 10s — "
                "another store object of this process on the same directory holds it"
            )
            # This process holds a lock, but not that one.
            assert await lock_refusal(tmp_path / "theirs") == (
                f"the wake-up store {theirs / 'wakeups.lock'} stayed locked for 10s — "
                "another process holds it"
            )
    finally:
        os.close(held)


# -- taking over and moving aside ----------------------------------------------------------------


async def test_a_take_over_whose_directory_fsync_fails_is_one_warning_and_moved_as_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = DirectoryStore(tmp_path)
    added = await store.add_wakeup(request(), T0)  # the journal: only the move fsyncs a directory
    schedule = state(tmp_path, [entry("old")])
    original = (schedule / "wakeups.json").read_bytes()
    fail_directory_fsyncs(monkeypatch)
    assert ids(await store.list_wakeups()) == [added.id, "old"]
    path = schedule / "wakeups.json"
    assert warnings(caplog) == [
        f"moved {path} aside but could not fsync its directory: EIO: I/O error: {schedule}"
    ]
    (aside,) = (name for name in os.listdir(schedule) if name.startswith("wakeups.json"))
    assert re.fullmatch(IMPORTED_ASIDE, aside), aside
    assert (schedule / aside).read_bytes() == original


# -- looking and reading -------------------------------------------------------------------------


@pytest.mark.parametrize("call", ["look", "open"])
async def test_a_look_or_an_open_that_fails_is_a_fault_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    path = state(tmp_path, [entry("a")]) / "wakeups.json"
    if call == "look":
        fail(monkeypatch, wakeupfile, "lstat", errno.EIO)
    else:
        fail(monkeypatch, safefile, "open", errno.EIO, named("wakeups.json"))
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(tmp_path).add_wakeup(request(), T0)
    assert str(raised.value) == unreadable(path, f"{EIO}: {path}")
    assert path.exists()


def test_nothing_to_load_is_no_entries_and_no_damage(tmp_path: Path) -> None:
    schedule = state(tmp_path)
    directory = os.open(schedule, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert WakeupFile(tmp_path, 1.0).load(directory) == ([], False)
    finally:
        os.close(directory)
