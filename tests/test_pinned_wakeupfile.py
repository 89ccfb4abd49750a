"""``wakeups.json`` of the state directory store, pinned (issue 11): reads.

Whole warnings and faults, compared with ``==``: damage is reported once with the full path
and kept aside. The parse kept for lock-free polls is used for a file changed long before,
never by a writer.
"""

from __future__ import annotations

import errno
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from oserrors import fail
from wakeupstate import ASIDE, EIO, T0, entry, ids, request, state, warnings

from trio_routines.errors import StateFault
from trio_routines.stores import safefile
from trio_routines.stores.directory import DirectoryStore, wakeupfile

# -- the parse kept for polls --------------------------------------------------------------------


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every read of the wake-up file's content, by path."""
    seen: list[Path] = []
    real = wakeupfile.read_fd

    def counting(fd: int, where: Path, limit: int) -> bytes:
        seen.append(where)
        return real(fd, where, limit)

    monkeypatch.setattr(wakeupfile, "read_fd", counting)
    return seen


def reader_clock(monkeypatch: pytest.MonkeyPatch, now: Callable[[], int]) -> None:
    """The wall clock a load reads (in ns) to tell a settled file from a racily fresh one."""
    monkeypatch.setattr(wakeupfile, "time", SimpleNamespace(time_ns=now))


async def test_polls_of_a_file_changed_long_ago_read_it_once_and_writers_always(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reads: list[Path]
) -> None:
    state(tmp_path, [entry("a")])
    reader_clock(monkeypatch, lambda: time.time_ns() + 10**10)  # every change is 10 s old
    store = DirectoryStore(tmp_path)
    assert ids(await store.list_wakeups()) == ["a"]
    assert ids(await store.list_wakeups()) == ["a"]
    assert await store.take_due_wakeup(T0) is None
    assert len(reads) == 1
    added = await store.add_wakeup(request(), T0)  # a writer reads under its lock
    assert len(reads) == 2
    assert ids(await store.list_wakeups()) == ["a", added.id]  # a new file: read again
    assert ids(await store.list_wakeups()) == ["a", added.id]
    assert len(reads) == 3


async def test_a_file_changed_exactly_the_racy_window_before_its_read_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reads: list[Path]
) -> None:
    schedule = state(tmp_path, [entry("a")])
    info = os.stat(schedule / "wakeups.json")
    changed = max(info.st_mtime_ns, info.st_ctime_ns)
    reader_clock(monkeypatch, lambda: changed + wakeupfile.RACY_NS)
    store = DirectoryStore(tmp_path)
    assert ids(await store.list_wakeups()) == ["a"]
    assert ids(await store.list_wakeups()) == ["a"]
    assert len(reads) == 2


# -- loading: damage is reported once, whole, and kept aside -----------------------------------


def kept_aside(schedule: Path, message: str) -> bool:
    prefix = "kept the unusable wake-up store's original content as "
    return re.fullmatch(re.escape(prefix + str(schedule) + "/") + ASIDE, message) is not None


async def test_a_planted_fifo_found_by_a_writer_is_named_and_kept_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    schedule = state(tmp_path)
    os.mkfifo(schedule / "wakeups.json")
    added = await DirectoryStore(tmp_path).add_wakeup(request(), T0)
    path = schedule / "wakeups.json"
    first, second = warnings(caplog)
    assert first == (
        f"unusable wake-up store: {path} is a FIFO, not a regular file — refused; remove it"
        " — ignoring it"
    )
    assert kept_aside(schedule, second)
    assert ids(await DirectoryStore(tmp_path).list_wakeups()) == [added.id]


async def test_a_file_that_grows_past_the_bound_while_read_is_damage_kept_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    schedule = state(tmp_path, [entry("a", prompt="p" * 500)])
    path = schedule / "wakeups.json"
    limit = path.stat().st_size + 10
    monkeypatch.setattr(wakeupfile, "MAX_BYTES", limit)
    real = wakeupfile.read_fd
    grown: list[Path] = []

    def growing(fd: int, where: Path, limit: int) -> bytes:
        if not grown:  # someone appends between our open and our read
            grown.append(where)
            with path.open("ab") as handle:
                handle.write(b" " * 100)
        return real(fd, where, limit)

    monkeypatch.setattr(wakeupfile, "read_fd", growing)
    added = await DirectoryStore(tmp_path).add_wakeup(request(), T0)
    first, second = warnings(caplog)
    assert first == (
        f"unusable wake-up store: {path} grew past {limit} bytes while read — refused — ignoring it"
    )
    assert kept_aside(schedule, second)
    assert ids(await DirectoryStore(tmp_path).list_wakeups()) == [added.id]


async def test_a_read_that_fails_is_a_fault_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = state(tmp_path, [entry("a")]) / "wakeups.json"
    fail(monkeypatch, safefile, "read", errno.EIO)
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(tmp_path).list_wakeups()
    assert str(raised.value) == (
        f"schedule state {path} is unreadable — fix permissions/disk and restart: {EIO}: {path}"
    )


async def test_text_that_is_not_json_is_reported_with_the_parsers_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = state(tmp_path, b"[1,") / "wakeups.json"
    assert await DirectoryStore(tmp_path).list_wakeups() == []
    reason = "Expecting value: line 1 column 4 (char 3)"
    assert warnings(caplog) == [f"corrupt state file {path} — ignoring: {reason}"]


async def test_json_that_is_not_an_array_is_quoted_by_its_first_80_bytes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = '{"k": "' + "é" * 60 + '"}'  # byte 80 cuts the 37th "é" in half
    state(tmp_path, text.encode())
    assert await DirectoryStore(tmp_path).list_wakeups() == []
    assert warnings(caplog) == [
        'wakeups store is not an array — ignoring it: {"k": "' + "é" * 36 + "\ufffd"
    ]


async def test_malformed_entries_are_each_dropped_and_quoted_by_200_characters(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state(tmp_path, [{"id": "x" * 300}, entry("good"), {"bad": 1}, entry("also-good")])
    assert ids(await DirectoryStore(tmp_path).list_wakeups()) == ["good", "also-good"]
    assert warnings(caplog) == [
        'dropping a malformed wake-up entry: {"id":"' + "x" * 193,
        'dropping a malformed wake-up entry: {"bad":1}',
    ]
