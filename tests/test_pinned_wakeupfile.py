"""The state directory's wake-up store, pinned (issue 11): reads.

Whole warnings and faults, compared with ``==``: damage is reported once with the full path
and kept aside. A poll of an unchanged journal reads nothing; a reader reads only what was
appended since its last read, and only complete lines.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest
from oserrors import fail
from wakeupstate import ASIDE, ASIDE_JOURNAL, EIO, T0, entry, ids, request, state, warnings

from trio_routines.errors import StateFault
from trio_routines.stores import safefile
from trio_routines.stores.directory import DirectoryStore, wakeupfile
from trio_routines.stores.directory.wakeupjournal import CHUNK, Journal

# -- what a reader reads -------------------------------------------------------------------------


async def test_polls_of_an_unchanged_journal_read_nothing_and_readers_only_what_was_appended(
    tmp_path: Path, journal_reads: list[tuple[int, int]]
) -> None:
    store, other = DirectoryStore(tmp_path), DirectoryStore(tmp_path)
    first = await store.add_wakeup(request("first"), T0)  # creates the journal
    path = tmp_path / "schedule" / "wakeups.journal"
    size = path.stat().st_size
    journal_reads.clear()
    assert ids(await store.list_wakeups()) == [first.id]
    assert await store.take_due_wakeup(T0) is None
    assert journal_reads == []  # nothing appended since this store's own write: nothing read
    second = await other.add_wakeup(request("second"), T0)  # other reads it all, then appends
    assert journal_reads == [(0, size)]
    grown = path.stat().st_size
    assert ids(await store.list_wakeups()) == [first.id, second.id]
    assert journal_reads == [(0, size), (size, grown)]  # only the line appended
    assert await store.take_due_wakeup(T0) is None
    assert len(journal_reads) == 2


async def test_a_torn_last_line_is_left_by_readers_and_cut_by_the_next_writer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = DirectoryStore(tmp_path)
    first = await store.add_wakeup(request("first"), T0)
    path = tmp_path / "schedule" / "wakeups.journal"
    whole = path.read_bytes()
    torn = b'{"op":"add","n":9,"wakeup":{"id":"torn","session":"s","prompt":"p","fi'
    with path.open("ab") as handle:  # a writer killed in the middle of its line
        handle.write(torn)
    reader = DirectoryStore(tmp_path)
    assert ids(await reader.list_wakeups()) == [first.id]
    assert warnings(caplog) == []  # not damage: a line not written yet, for all a reader knows
    second = await reader.add_wakeup(request("second"), T0)
    assert warnings(caplog) == [
        f"cut a wake-up journal line torn by a crash ({len(torn)} bytes) off {path}"
    ]
    assert path.read_bytes().startswith(whole)
    assert torn not in path.read_bytes()
    assert ids(await store.list_wakeups()) == [first.id, second.id]


async def test_a_planted_terabyte_of_zeros_is_passed_over_unread_and_cut_by_the_next_writer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, journal_reads: list[tuple[int, int]]
) -> None:
    # A sparse file costs the planter no disk; read, it would keep every poll and every
    # change busy for hours, each given up at the store's deadline.
    store = DirectoryStore(tmp_path)
    first = await store.add_wakeup(request("first"), T0)
    path = tmp_path / "schedule" / "wakeups.journal"
    whole = path.read_bytes()
    os.truncate(path, len(whole) + (1 << 40))
    reader = DirectoryStore(tmp_path)
    assert ids(await reader.list_wakeups()) == [first.id]
    second = await reader.add_wakeup(request("second"), T0)
    assert warnings(caplog) == [
        f"cut a wake-up journal line torn by a crash ({1 << 40} bytes) off {path}"
    ]
    assert path.read_bytes().startswith(whole)
    assert ids(await store.list_wakeups()) == [first.id, second.id]
    assert sum(size - offset for offset, size in journal_reads) < 4 * CHUNK  # not a terabyte


async def test_a_damaged_line_is_warned_once_skipped_and_kept_aside_by_the_next_writer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = DirectoryStore(tmp_path)
    first = await store.add_wakeup(request("first"), T0)
    schedule = tmp_path / "schedule"
    path = schedule / "wakeups.journal"
    at = path.stat().st_size
    with path.open("ab") as handle:
        handle.write(b'{"op":"del","id":"nobody"}\n')
    reader = DirectoryStore(tmp_path)
    assert ids(await reader.list_wakeups()) == [first.id]
    assert ids(await reader.list_wakeups()) == [first.id]
    damaged = (
        f"damaged wake-up journal line at byte {at} of {path} — skipped (kept aside at the "
        "next compaction): del of a wake-up not pending: 'nobody': "
        '{"op":"del","id":"nobody"}'
    )
    assert warnings(caplog) == [damaged]
    before = path.read_bytes()
    second = await reader.add_wakeup(request("second"), T0)
    (kept,) = warnings(caplog)[1:]
    prefix = "kept the damaged wake-up journal as found as "
    assert re.fullmatch(re.escape(prefix + str(schedule) + "/") + ASIDE_JOURNAL, kept)
    (aside,) = schedule.glob("wakeups.journal.corrupt-*")
    assert aside.read_bytes().startswith(before)
    assert b"nobody" not in path.read_bytes()  # the new generation holds the pending only
    assert ids(await DirectoryStore(tmp_path).list_wakeups()) == [first.id, second.id]
    assert ids(await store.list_wakeups()) == [first.id, second.id]  # followed the new one
    assert len(warnings(caplog)) == 2  # a new generation: nothing more to report


async def test_a_damaged_journal_gone_before_it_is_kept_aside_is_said_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    first = await store.add_wakeup(request("first"), T0)
    path = tmp_path / "schedule" / "wakeups.journal"
    with path.open("ab") as handle:
        handle.write(b'{"op":"del","id":"nobody"}\n')
    monkeypatch.setattr(Journal, "keep_aside", lambda self, directory: None)  # removed meanwhile
    second = await store.add_wakeup(request("second"), T0)
    assert warnings(caplog)[1:] == ["the damaged wake-up journal was gone before it could be kept"]
    assert ids(await DirectoryStore(tmp_path).list_wakeups()) == [first.id, second.id]


async def test_a_journal_read_that_fails_is_a_fault_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await DirectoryStore(tmp_path).add_wakeup(request(), T0)
    path = tmp_path / "schedule" / "wakeups.journal"
    real = os.pread

    def failing(fd: int, size: int, offset: int) -> bytes:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "pread", failing)
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(tmp_path).list_wakeups()
    monkeypatch.setattr(os, "pread", real)
    assert str(raised.value) == (
        f"schedule state {path} is unreadable: {EIO}: {path} — fix the permissions or the disk"
    )


# -- loading: damage is reported once, whole, and kept aside -----------------------------------


def kept_aside(schedule: Path, message: str) -> bool:
    prefix = "kept the unusable wake-up store's original content as "
    return re.fullmatch(re.escape(prefix + str(schedule) + "/") + ASIDE, message) is not None


def taken_over(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> list[str]:
    """The warnings of a take-over, the last (the original kept aside) checked and dropped."""
    *rest, last = warnings(caplog)
    assert kept_aside(tmp_path / "schedule", last), last
    assert not (tmp_path / "schedule" / "wakeups.json").exists()
    return rest


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
        f"schedule state {path} is unreadable: {EIO}: {path} — fix the permissions or the disk"
    )


async def test_text_that_is_not_json_is_reported_with_the_parsers_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = state(tmp_path, b"[1,") / "wakeups.json"
    assert await DirectoryStore(tmp_path).list_wakeups() == []
    reason = "Expecting value: line 1 column 4 (char 3)"
    assert taken_over(tmp_path, caplog) == [f"corrupt state file {path} — ignoring: {reason}"]


async def test_json_that_is_not_an_array_is_quoted_by_its_first_80_bytes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = '{"k": "' + "é" * 60 + '"}'  # byte 80 cuts the 37th "é" in half
    state(tmp_path, text.encode())
    assert await DirectoryStore(tmp_path).list_wakeups() == []
    assert taken_over(tmp_path, caplog) == [
        'wakeups store is not an array — ignoring it: {"k": "' + "é" * 36 + "\ufffd"
    ]


async def test_malformed_entries_are_each_dropped_and_quoted_by_200_characters(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state(tmp_path, [{"id": "x" * 300}, entry("good"), {"bad": 1}, entry("also-good")])
    assert ids(await DirectoryStore(tmp_path).list_wakeups()) == ["good", "also-good"]
    assert taken_over(tmp_path, caplog) == [
        'dropping a malformed wake-up entry: {"id":"' + "x" * 193,
        'dropping a malformed wake-up entry: {"bad":1}',
    ]


async def test_a_line_that_replaced_a_torn_one_of_the_same_length_is_read(
    tmp_path: Path,
) -> None:
    store = DirectoryStore(tmp_path)
    first = await store.add_wakeup(request("first"), T0)
    path = tmp_path / "schedule" / "wakeups.journal"
    size = path.stat().st_size
    second = await store.add_wakeup(request("second"), T0)
    line = path.read_bytes()[size:]
    with path.open("r+b") as handle:  # a torn line of the same length in its place
        handle.truncate(size)
        handle.seek(size)
        handle.write(b"x" * len(line))
    reader = DirectoryStore(tmp_path)
    assert ids(await reader.list_wakeups()) == [first.id]
    with path.open("r+b") as handle:  # a writer cut it and appended exactly as much
        handle.truncate(size)
        handle.seek(size)
        handle.write(line)
    assert ids(await reader.list_wakeups()) == [first.id, second.id]
