"""``schedule/wakeups.journal``: the file the pending wake-ups of a state directory live in.

One JSON object a line. A journal *generation* starts with a header line ``{"op": "gen",
"id": <random hex>}``, then one ``add`` line per wake-up pending when it was written (the
snapshot), then the changes since, one line each, appended (``add``, ``set``, ``del``: see
wakeupindex.py). A change is one ``write`` on an ``O_APPEND`` descriptor, ``fdatasync``'d
before the call that made it returns.

Everything here is relative to the opened ``schedule`` directory and goes through safefile.py:
no link is followed, a FIFO or device is refused unopened. Writing is only ever done under the
writers' ``flock`` (wakeupfile.py); reading needs no lock:

* a reader takes only complete lines (ending in a newline, which is the last byte a change
  writes); a line cut short by a crash is left for the next writer, which cuts it off;
* a new generation (compaction, or a fresh journal) replaces the file by a rename, so a
  reader sees either the old file whole or the new one; it tells them apart by the header.
"""

from __future__ import annotations

import errno
import functools
import os
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path

from ...converter import dumps
from ...records import Wakeup
from ..safefile import (
    at,
    fsync,
    link_aside,
    open_file,
    replace_file,
    write_all,
)
from .wakeupindex import Op, add_op

JOURNAL = "wakeups.journal"
TEMP_PREFIX = "wakeups.journal.tmp-"
HEADER_BYTES = 64  # a header line is shorter; read this much to know a generation
NO_LIMIT = 1 << 62  # the journal has no size bound: it is read incrementally, never whole
CHUNK = 1 << 20
#: The longest line taken: a wake-up's prompt and session are bounded (wakeups.py), so a
#: longer one is damage (or planted), skipped without being held whole.
MAX_LINE = 4 << 20


def header() -> bytes:
    return line({"op": "gen", "id": secrets.token_hex(16)})


def line(op: Op) -> bytes:
    return dumps(op).encode() + b"\n"


def snapshot(entries: Iterable[tuple[Wakeup, int]]) -> bytes:
    """A new generation's content: a header, then each wake-up with its order number."""
    return header() + b"".join(line(add_op(w, n)) for w, n in entries)


def generation_of(first: bytes) -> bytes:
    """The header a file starts with (``b""`` when it does not start with one)."""
    end = first.find(b"\n")
    if end < 0 or not first.startswith(b'{"op":"gen"'):
        return b""
    return first[: end + 1]


class Journal:
    """The file operations on ``<schedule>/wakeups.journal``."""

    def __init__(self, schedule: Path) -> None:
        self.schedule = schedule
        self.path = schedule / JOURNAL

    def open(self, directory: int, *, append: bool = False) -> int:
        """Open the journal (``FileNotFoundError`` if there is none, ``Refused`` if what is
        there is no regular file)."""
        flags = os.O_RDWR | os.O_APPEND if append else os.O_RDONLY
        return open_file(directory, JOURNAL, self.path, flags, NO_LIMIT, alone=append)

    def read(self, fd: int, offset: int, size: int) -> bytes:
        """The bytes from ``offset`` up to ``size``."""
        chunks = []
        while offset < size:
            chunk = at(
                self.path, functools.partial(os.pread, fd, min(CHUNK, size - offset), offset)
            )
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)

    def scan(
        self,
        fd: int,
        offset: int,
        size: int,
        take: Callable[[bytes, int], None],
        too_long: Callable[[int], None],
    ) -> int:
        """Hand each complete line from ``offset`` up to ``size`` to ``take(line, at)``, a
        chunk at a time: never more than :data:`CHUNK` and one line of :data:`MAX_LINE` held.
        A line longer than that goes to ``too_long(at)`` instead, unread; a hole in the file
        (:meth:`hole`) is passed over unread. Returns the end of the last complete line (a
        torn tail after it is read again next time, until a writer cuts it)."""
        start, line, long = offset, bytearray(), False
        at_byte = offset
        while at_byte < size:
            zeros = self.hole(fd, at_byte, size)
            if zeros:  # read as zeros, never stored: no newline in it, nothing to read
                if not long:
                    if len(line) + zeros > MAX_LINE:
                        long = True
                        line.clear()
                    else:
                        line += bytes(zeros)
                at_byte += zeros
                continue
            chunk = self.read(fd, at_byte, min(size, at_byte + CHUNK))
            if not chunk:
                break
            index = 0
            while (newline := chunk.find(b"\n", index)) >= 0:
                if long or len(line) + newline - index > MAX_LINE:
                    too_long(start)
                else:
                    line += chunk[index:newline]
                    take(bytes(line), start)
                start, index, long = at_byte + newline + 1, newline + 1, False
                line.clear()
            if not long:
                line += chunk[index:]
                if len(line) > MAX_LINE:
                    long = True
                    line.clear()
            at_byte += len(chunk)
        return start

    def hole(self, fd: int, offset: int, size: int) -> int:
        """How many bytes from ``offset`` (up to ``size``) lie in a hole of the file: a planted
        sparse file of terabytes holds no data to read, and is passed over without reading
        it. 0 where the file system cannot tell (every byte is read then)."""
        try:
            data = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError as exc:
            # ENXIO: no data at or after ``offset`` (a hole to the end, or a file cut shorter
            # since, which has no complete line there either).
            return size - offset if exc.errno == errno.ENXIO else 0
        return min(data, size) - offset

    def generation(self, fd: int) -> bytes:
        return generation_of(at(self.path, lambda: os.pread(fd, HEADER_BYTES, 0)))

    def append(self, fd: int, data: bytes) -> None:
        """Append ``data`` (whole lines; the descriptor is ``O_APPEND``)."""
        write_all(fd, data, self.path)

    def sync(self, fd: int) -> None:
        """Make what was appended durable (the caller's answer waits for it)."""
        at(self.path, lambda: os.fdatasync(fd))

    def cut(self, fd: int, size: int) -> None:
        """Cut the file back to ``size`` bytes (a torn last line), durably."""
        at(self.path, lambda: os.ftruncate(fd, size))
        at(self.path, lambda: os.fdatasync(fd))

    def write_generation(self, directory: int, data: bytes) -> None:
        """Replace the journal with ``data`` (a header and its snapshot) in one rename (the
        caller makes the rename durable: :meth:`sync_directory`)."""
        replace_file(directory, JOURNAL, self.schedule, data, TEMP_PREFIX)

    def sync_directory(self, directory: int) -> None:
        fsync(directory, self.schedule)

    def keep_aside(self, directory: int) -> Path | None:
        """Keep the journal as found as ``wakeups.journal.corrupt-<instant>`` (a hard link of
        the entry itself, never of what a link points to; a directory there, which cannot be
        linked, moved aside whole); None when it is gone."""
        try:
            return link_aside(directory, JOURNAL, self.schedule)
        except FileNotFoundError:
            return None
