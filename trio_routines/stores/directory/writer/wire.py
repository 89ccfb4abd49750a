"""The writer process's wire (see process.py): one message is an 8-byte big-endian length and
that many bytes.

The parent's end of the socket is non-blocking: :func:`receive` reads one message, never
into the next one (the replies share the stream).
"""

from __future__ import annotations

import socket
import struct
import sys

import trio

LENGTH = struct.Struct("!Q")
READY = b"R"  # what the child sends once it is up


async def receive(sock: socket.socket) -> bytes:
    """One message's payload."""
    data = bytearray()
    wanted: int | None = None
    while wanted is None or len(data) < wanted:
        await trio.lowlevel.wait_readable(sock)
        try:
            # never past this message: the next reply may wait behind it
            left = LENGTH.size - len(data) if wanted is None else wanted - len(data)
            chunk = sock.recv(min(left, 1 << 16))
        except BlockingIOError:
            continue
        if not chunk:
            raise EOFError("the writer process closed its socket")
        data += chunk
        if wanted is None and len(data) >= LENGTH.size:
            wanted = LENGTH.size + LENGTH.unpack_from(data)[0]
    return bytes(data[LENGTH.size :])


#: Where the child reads the parent's file system encoding, which it must share: a routine's
#: name is a file name, and the two must make the same one of it.
ENCODING_VARIABLE = "TRIO_ROUTINES_WRITER_ENCODING"


def file_names() -> str:
    """How this process makes file names of text: its encoding and its error handler."""
    return f"{sys.getfilesystemencoding()}/{sys.getfilesystemencodeerrors()}"
