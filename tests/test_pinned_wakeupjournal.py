"""``schedule/wakeups.journal``'s file operations (wakeupjournal.py), pinned: a generation's
header, what is read between two offsets, how the file is opened, and the full path every
failing call names."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_routines.stores.directory import wakeupjournal
from trio_routines.stores.directory.wakeupjournal import (
    CHUNK,
    HEADER_BYTES,
    Journal,
    generation_of,
    header,
)
from trio_routines.stores.safefile import Refused, Shared


@pytest.fixture
def schedule(tmp_path: Path) -> Iterator[tuple[Journal, int]]:
    (tmp_path / "schedule").mkdir()
    directory = os.open(tmp_path / "schedule", os.O_RDONLY | os.O_DIRECTORY)
    yield Journal(tmp_path / "schedule"), directory
    os.close(directory)


def eio(*_: object, **__: object) -> None:
    raise OSError(errno.EIO, "Input/output error")


def test_a_header_names_a_generation_of_its_own_and_fits_the_bytes_read_for_it() -> None:
    first, second = header(), header()
    assert first != second
    record = json.loads(first)
    assert list(record) == ["op", "id"]
    assert record["op"] == "gen"
    assert re.fullmatch(r"[0-9a-f]{32}", record["id"])
    assert first.endswith(b"\n")
    assert len(first) <= HEADER_BYTES
    assert generation_of(first + b'{"op":"del","id":"a"}\n') == first


@pytest.mark.parametrize(
    "first",
    [b'{"op":"gen","id":"ab"', b'{"op":"add","n":1}\n', b"\n", b"", b'{"OP":"GEN"}\n'],
)
def test_what_does_not_start_with_a_whole_header_has_no_generation(first: bytes) -> None:
    assert generation_of(first) == b""


def test_the_generation_is_read_from_the_files_start(schedule: tuple[Journal, int]) -> None:
    journal, directory = schedule
    first = header()
    journal.path.write_bytes(first + b'{"op":"del","id":"a"}\n')
    fd = journal.open(directory)
    try:
        assert journal.generation(fd) == first
    finally:
        os.close(fd)


def test_a_read_takes_the_bytes_between_its_offsets(schedule: tuple[Journal, int]) -> None:
    journal, directory = schedule
    content = bytes(range(256)) * (CHUNK // 256 * 2 + 3)  # more than two chunks
    journal.path.write_bytes(content)
    fd = journal.open(directory)
    try:
        assert journal.read(fd, 0, len(content)) == content
        assert journal.read(fd, 10, 50) == content[10:50]
        assert journal.read(fd, CHUNK - 5, CHUNK + 5) == content[CHUNK - 5 : CHUNK + 5]
        assert journal.read(fd, 7, len(content) + 100) == content[7:]  # the file is shorter
        assert journal.read(fd, 50, 50) == b""
    finally:
        os.close(fd)


def test_the_journal_is_opened_for_reading_or_appending(schedule: tuple[Journal, int]) -> None:
    journal, directory = schedule
    journal.path.write_bytes(header())
    for kwargs, flags in (({}, os.O_RDONLY), ({"append": True}, os.O_RDWR | os.O_APPEND)):
        fd = journal.open(directory, **kwargs)
        try:
            got = fcntl.fcntl(fd, fcntl.F_GETFL)
            assert got & (os.O_ACCMODE | os.O_APPEND) == flags
        finally:
            os.close(fd)


def test_what_is_no_regular_file_is_refused_by_its_path(schedule: tuple[Journal, int]) -> None:
    journal, directory = schedule
    os.mkfifo(journal.path)
    with pytest.raises(Refused, match=f"^{re.escape(str(journal.path))} is a FIFO"):
        journal.open(directory)


def test_a_journal_with_other_names_is_read_but_never_opened_for_appending(
    schedule: tuple[Journal, int], tmp_path: Path
) -> None:
    journal, directory = schedule
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(header())
    os.link(elsewhere, journal.path)
    os.close(journal.open(directory))
    with pytest.raises(Shared):
        journal.open(directory, append=True)


@pytest.mark.parametrize(
    ("failing", "call"),
    [
        ("pread", lambda journal, fd: journal.read(fd, 0, 10)),
        ("fdatasync", lambda journal, fd: journal.sync(fd)),
        ("ftruncate", lambda journal, fd: journal.cut(fd, 0)),
        ("fdatasync", lambda journal, fd: journal.cut(fd, 0)),
    ],
)
def test_a_failing_call_names_the_journal(
    schedule: tuple[Journal, int],
    monkeypatch: pytest.MonkeyPatch,
    failing: str,
    call: Callable[[Journal, int], object],
) -> None:
    journal, directory = schedule
    journal.path.write_bytes(header())
    fd = journal.open(directory, append=True)
    try:
        monkeypatch.setattr(wakeupjournal.os, failing, eio)
        with pytest.raises(OSError, match="Input/output error") as raised:
            call(journal, fd)
        assert raised.value.filename == str(journal.path)
    finally:
        os.close(fd)


def test_a_journal_kept_aside_is_the_entry_itself_never_what_it_links_to(
    schedule: tuple[Journal, int], tmp_path: Path
) -> None:
    journal, directory = schedule
    (tmp_path / "elsewhere").write_bytes(b"not mine")
    journal.path.symlink_to(tmp_path / "elsewhere")
    kept = journal.keep_aside(directory)
    assert kept is not None
    assert kept.parent == journal.schedule
    assert re.fullmatch(r"wakeups\.journal\.corrupt-.+-[0-9a-f]{4}", kept.name)
    assert kept.is_symlink()
    journal.path.unlink()
    assert journal.keep_aside(directory) is None


def test_a_failing_keep_aside_names_the_copy(
    schedule: tuple[Journal, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    journal, directory = schedule
    journal.path.write_bytes(header())
    monkeypatch.setattr(wakeupjournal.os, "link", eio)
    with pytest.raises(OSError, match="Input/output error") as raised:
        journal.keep_aside(directory)
    aside = Path(str(raised.value.filename))
    assert aside.parent == journal.schedule
    assert aside.name.startswith("wakeups.journal.corrupt-")


@given(
    data=st.lists(st.sampled_from([b"\n", b"a", b"bb", b"c" * 9, b"d" * 23]), max_size=40).map(
        b"".join
    ),
    chunk=st.integers(1, 16),
)
@settings(max_examples=300, deadline=None)
def test_a_scan_takes_every_complete_line_and_passes_over_those_too_long(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, chunk: int
) -> None:
    # A line is held whole only up to MAX_LINE bytes, whatever the chunks: a journal of
    # gigabytes without a newline (a planted sparse file) is read, never held.
    schedule = tmp_path_factory.mktemp("scan") / "schedule"
    schedule.mkdir()
    (schedule / wakeupjournal.JOURNAL).write_bytes(b"skip\n" + data)
    journal = Journal(schedule)
    taken: list[tuple[bytes, int]] = []
    long: list[int] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wakeupjournal, "CHUNK", chunk)
        patch.setattr(wakeupjournal, "MAX_LINE", 10)
        fd = os.open(schedule / wakeupjournal.JOURNAL, os.O_RDONLY)
        try:
            end = journal.scan(
                fd, 5, 5 + len(data), lambda line, at: taken.append((line, at)), long.append
            )
        finally:
            os.close(fd)
    expected_taken: list[tuple[bytes, int]] = []
    expected_long: list[int] = []
    start = 5
    for line in data.split(b"\n")[:-1]:
        if len(line) <= 10:
            expected_taken.append((line, start))
        else:
            expected_long.append(start)
        start += len(line) + 1
    assert (taken, long, end) == (expected_taken, expected_long, start)


class CountedReads:
    """``os.pread`` for the journal, counting the bytes it returned."""

    def __init__(self) -> None:
        self.bytes = 0
        self._pread = os.pread

    def __call__(self, fd: int, length: int, offset: int) -> bytes:
        data = self._pread(fd, length, offset)
        self.bytes += len(data)
        return data


def scan_all(path: Path, offset: int = 0) -> tuple[list[tuple[bytes, int]], list[int], int, int]:
    """Every line of ``path`` a scan takes from ``offset``, the long ones, where it ended, and
    the bytes it read."""
    taken: list[tuple[bytes, int]] = []
    long: list[int] = []
    reads = CountedReads()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wakeupjournal.os, "pread", reads)
        fd = os.open(path, os.O_RDONLY)
        try:
            end = Journal(path.parent).scan(
                fd, offset, os.fstat(fd).st_size, lambda *line: taken.append(line), long.append
            )
        finally:
            os.close(fd)
    return taken, long, end, reads.bytes


TERABYTE = 1 << 40


def sparse(directory: Path, pieces: dict[int, bytes], size: int | None = None) -> Path:
    """A journal holding each of ``pieces`` at its offset and holes between them (no disk
    spent on them), ``size`` bytes long when given."""
    path = directory / wakeupjournal.JOURNAL
    with path.open("wb") as planted:
        for offset, data in pieces.items():
            planted.seek(offset)
            planted.write(data)
        if size is not None:
            planted.truncate(size)
    return path


def test_a_hole_of_a_terabyte_in_a_line_is_passed_over_unread(tmp_path: Path) -> None:
    # A planted sparse file: a "line" of a terabyte of zeros, then a line of a writer's.
    path = sparse(tmp_path, {0: b"a\n", TERABYTE: b"\nb\n"})
    taken, long, end, read = scan_all(path)
    assert (taken, long, end) == ([(b"a", 0), (b"b", TERABYTE + 1)], [2], TERABYTE + 3)
    assert read < 3 * CHUNK  # the pages with data, not the terabyte


def test_a_torn_tail_of_a_terabyte_of_zeros_is_left_unread(tmp_path: Path) -> None:
    path = sparse(tmp_path, {0: b"a\n"}, size=TERABYTE)
    taken, long, end, read = scan_all(path)
    assert (taken, long, end) == ([(b"a", 0)], [], 2)
    assert read <= CHUNK


def test_a_hole_is_zeros_of_the_line_it_is_in(tmp_path: Path) -> None:
    # Zeros are bytes like any other: a line holding a hole is taken with them (as damage,
    # later: no change is written with a NUL), and one that grows too long with them is long.
    too_long = CHUNK + 5 + wakeupjournal.MAX_LINE + 10  # the second line's end: zeros
    path = sparse(tmp_path, {0: b"x", CHUNK + 3: b"y\n", too_long: b"z\nw\n"})
    data = path.read_bytes()
    first = data.index(b"\n")
    taken, long, end, read = scan_all(path)
    assert taken == [(data[:first], 0), (b"w", len(data) - 2)]
    assert long == [first + 1]
    assert end == len(data)
    assert read < len(data)  # the holes were not read


def test_a_file_system_that_cannot_tell_its_holes_has_every_byte_read(tmp_path: Path) -> None:
    path = sparse(tmp_path, {0: b"x", 3 * CHUNK: b"y\n"})

    def unsupported(*_: object) -> int:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wakeupjournal.os, "lseek", unsupported)
        taken, long, end, read = scan_all(path)
    assert (taken, long, end, read) == (
        [(path.read_bytes()[:-1], 0)],
        [],
        3 * CHUNK + 2,
        3 * CHUNK + 2,
    )


def test_a_hole_from_where_a_scan_begins_counts_from_there(tmp_path: Path) -> None:
    path = sparse(tmp_path, {0: b"a\n", 5 * CHUNK: b"\nb\n"})
    taken, long, end, read = scan_all(path, offset=2)
    assert (taken, long, end) == ([(b"b", 5 * CHUNK + 1)], [2], 5 * CHUNK + 3)
    assert read < 2 * CHUNK


def test_a_hole_is_measured_from_the_offset_to_the_next_data_or_the_size(tmp_path: Path) -> None:
    path = sparse(tmp_path, {0: b"a\n", 3 * CHUNK: b"b\n"}, size=TERABYTE)
    fd = os.open(path, os.O_RDONLY)
    try:
        journal = Journal(tmp_path)
        assert journal.hole(fd, 1, TERABYTE) == 0  # data here
        assert journal.hole(fd, CHUNK, TERABYTE) == 2 * CHUNK  # up to the next data
        assert journal.hole(fd, CHUNK, 2 * CHUNK) == CHUNK  # up to the size asked
        assert journal.hole(fd, 4 * CHUNK, TERABYTE) == TERABYTE - 4 * CHUNK  # none after it
    finally:
        os.close(fd)


def test_a_line_of_exactly_the_longest_length_with_a_hole_in_it_is_taken(
    tmp_path: Path,
) -> None:
    page = 4096  # holes are whole pages
    path = sparse(tmp_path, {0: b"x", 2 * page: b"\n"})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wakeupjournal, "CHUNK", page)
        patch.setattr(wakeupjournal, "MAX_LINE", 2 * page)
        taken, long, end, read = scan_all(path)
    assert (taken, long, end) == ([(b"x" + bytes(2 * page - 1), 0)], [], 2 * page + 1)
    assert read == page + 1  # the hole between was not read


def test_a_scan_past_the_end_of_a_file_cut_shorter_ends_at_its_last_line(tmp_path: Path) -> None:
    path = sparse(tmp_path, {0: b"a\nbc"})

    def unsupported(*_: object) -> int:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))

    taken: list[tuple[bytes, int]] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wakeupjournal.os, "lseek", unsupported)  # every byte read, none found
        fd = os.open(path, os.O_RDONLY)
        try:
            end = Journal(tmp_path).scan(fd, 0, 100, lambda *line: taken.append(line), print)
        finally:
            os.close(fd)
    assert (taken, end) == ([(b"a", 0)], 2)
