"""The writer process's wire, pinned: one message at a time, and every way a message can come
broken (split headers, a spurious wake-up, an early end).
"""

from __future__ import annotations

import os
import socket

import pytest
import trio
import trio.testing

from trio_routines.stores.directory.writer import child as writerchild
from trio_routines.stores.directory.writer.replies import receive
from trio_routines.stores.directory.writer.wire import LENGTH


def message(body: bytes) -> bytes:
    return LENGTH.pack(len(body)) + body


def open_fds() -> set[int]:
    """The descriptors open in this process (a listing of /proc/self/fd would hold its own)."""
    found = set()
    for fd in range(4096):
        try:
            os.fstat(fd)
        except OSError:
            continue
        found.add(fd)
    return found


def pair() -> tuple[socket.socket, socket.socket]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)  # as the parent's end is
    return ours, theirs


async def test_a_split_header_is_read_whole_and_never_into_the_next_message() -> None:
    ours, theirs = pair()
    got: list[bytes] = []

    async def read_two() -> None:
        for _ in range(2):
            got.append(await receive(ours))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_two)
        first = message(b"hi")
        theirs.sendall(first[:3])  # a header in pieces: the reader holds three bytes of it
        await trio.testing.wait_all_tasks_blocked()
        theirs.sendall(first[3:] + message(b"the next one"))
    assert got == [b"hi", b"the next one"]
    ours.close()
    theirs.close()


class Spurious(socket.socket):
    """A socket whose first read finds nothing after all, as a wake-up another reader beat
    to the data does."""

    woken = 0

    def recv(self, *args: int) -> bytes:
        self.woken += 1
        if self.woken == 1:
            raise BlockingIOError
        return super().recv(*args)


async def test_a_wake_up_that_finds_nothing_waits_again() -> None:
    plain, theirs = pair()
    ours = Spurious(fileno=plain.detach())
    theirs.sendall(message(b"after all"))
    assert await receive(ours) == b"after all"
    assert ours.woken == 3  # the spurious one, then the header and the body
    ours.close()
    theirs.close()


@pytest.mark.parametrize("sent", [b"", LENGTH.pack(9)[:4], message(b"cut short")[:-3]])
async def test_an_end_before_the_message_is_whole_is_one_error(sent: bytes) -> None:
    ours, theirs = pair()
    theirs.sendall(sent)
    theirs.close()
    with pytest.raises(EOFError, match=r"^the writer process closed its socket$"):
        await receive(ours)
    ours.close()


class Stream:
    """A blocking stream's reads, scripted: each ``recv(n)`` takes at most n bytes of what
    arrived next, leaving the rest for the next read."""

    def __init__(self, *arrivals: bytes) -> None:
        self.arrivals = list(arrivals)

    def recv(self, size: int) -> bytes:
        if not self.arrivals:
            return b""
        head = self.arrivals.pop(0)
        if len(head) > size:
            self.arrivals.insert(0, head[size:])
        return head[:size]


def test_the_child_reads_exactly_what_it_asks_for() -> None:
    stream = Stream(b"abc", b"defgh" + b"next")
    assert writerchild._read_exactly(stream, 8) == b"abcdefgh"  # type: ignore[arg-type]
    assert stream.arrivals == [b"next"]
    assert writerchild._read_exactly(Stream(b"abc"), 8) is None  # type: ignore[arg-type]
    assert writerchild._read_exactly(Stream(), 8) is None  # type: ignore[arg-type]
