"""Writer processes that misbehave, for tests/test_writer.py.

``python tests/writers.py MODE FD ROOT KEEP LOCK_TIMEOUT``: the arguments the store gives its
writer process, after one of ours. ``exit`` ends before it is up; ``die`` is up, then dies on
its first batch (the requests it answers nothing to, its spares, are passed over); ``hang`` is
up and never answers; ``eio`` is the real writer, whose every ``os.write`` fails with EIO (a
fault injected into the child, as tests/test_faults.py does in this process); ``flush-eio`` is
the real writer whose every flush fails with EIO; ``flushes`` is the real writer that, after
each flush, appends a line to ``ROOT.flushes`` naming the routines whose claims the state
directory holds then, in order.
"""

from __future__ import annotations

import errno
import os
import pickle
import socket
import sys
import time
from pathlib import Path

from trio_routines.stores.directory.writer import child as writerchild
from trio_routines.stores.directory.writer.wire import LENGTH


def _request(sock: socket.socket) -> str:
    """The operation of the next request, read whole ("" once the socket closed)."""
    header = writerchild._read_exactly(sock, LENGTH.size)
    if header is None:
        return ""
    body = writerchild._read_exactly(sock, LENGTH.unpack(header)[0])
    return "" if body is None else str(pickle.loads(body)[0])


def main(mode: str, argv: list[str]) -> None:
    if mode == "exit":
        sys.exit(3)
    if mode == "eio":

        def failing(fd: int, data: bytes) -> int:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        os.write = failing  # type: ignore[assignment]
        writerchild.main(argv)
        return
    if mode in ("flush-eio", "flushes"):
        flush = writerchild.syncfs
        root = Path(argv[1])

        def flushed(fd: int) -> None:
            if mode == "flush-eio":
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            flush(fd)
            held = sorted(path.parent.name for path in root.glob("schedule/claims/*/*"))
            with root.with_name(f"{root.name}.flushes").open("a") as lines:
                lines.write(" ".join(held) + "\n")

        writerchild.syncfs = flushed  # type: ignore[assignment]
        writerchild.main(argv)
        return
    sock = socket.socket(fileno=int(argv[0]))
    sock.sendall(b"R")
    while _request(sock) == "spares":  # answered nothing: the first batch is awaited
        pass
    if mode == "die":
        os._exit(9)
    time.sleep(3600)  # hang


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
