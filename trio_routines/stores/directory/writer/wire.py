"""The writer process's wire (see process.py): one message is an 8-byte big-endian length and
that many bytes; a reply carries its batch's directory descriptors with ``SCM_RIGHTS``.

The parent's end of the socket is non-blocking: :func:`receive` reads one message, never
into the next one (replies without descriptors share the stream).
"""

from __future__ import annotations

import array
import os
import socket
import struct

import trio

#: The most descriptors one reply carries: one per file system a batch wrote on.
MAX_FDS = 64
LENGTH = struct.Struct("!Q")
READY = b"R"  # what the child sends once it is up


async def receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One message: its payload, and the descriptors that came with it."""
    data = bytearray()
    fds: list[int] = []
    wanted: int | None = None
    try:
        while wanted is None or len(data) < wanted:
            await trio.lowlevel.wait_readable(sock)
            try:
                # never past this message: the next reply may wait behind it
                left = LENGTH.size - len(data) if wanted is None else wanted - len(data)
                chunk, ancillary, flags, _ = sock.recvmsg(
                    min(left, 1 << 16), socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
                )
            except BlockingIOError:
                continue
            fds += descriptors(ancillary)
            if flags & socket.MSG_CTRUNC:
                raise OSError("descriptors were cut off")
            if not chunk:
                raise EOFError("the writer process closed its socket")
            data += chunk
            if wanted is None and len(data) >= LENGTH.size:
                wanted = LENGTH.size + LENGTH.unpack_from(data)[0]
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return bytes(data[LENGTH.size :]), fds


def descriptors(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return list(fds)
