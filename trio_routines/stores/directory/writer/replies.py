"""The parent's reading of the writer process's replies (the wire: wire.py).

The parent's end of the socket is non-blocking: :func:`receive` reads one message, never
into the next one (the replies share the stream).
"""

from __future__ import annotations

import socket

import trio

from .wire import LENGTH


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
