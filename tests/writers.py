"""Writer processes that misbehave, for tests/test_writer.py.

``python tests/writers.py MODE FD ROOT KEEP LOCK_TIMEOUT``: the arguments the store gives its
writer process, after one of ours. ``exit`` ends before it is up; ``die`` is up, then dies on
its first batch; ``hang`` is up and never answers; ``eio`` is the real writer, whose every
``os.write`` fails with EIO (a fault injected into the child, as tests/test_faults.py does in
this process).
"""

from __future__ import annotations

import errno
import os
import socket
import sys
import time

from trio_routines.stores.directory.writer import child as writerchild


def main(mode: str, argv: list[str]) -> None:
    if mode == "exit":
        sys.exit(3)
    if mode == "eio":

        def failing(fd: int, data: bytes) -> int:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        os.write = failing  # type: ignore[assignment]
        writerchild.main(argv)
        return
    sock = socket.socket(fileno=int(argv[0]))
    sock.sendall(b"R")
    sock.recv(1)  # a batch begins
    if mode == "die":
        os._exit(9)
    time.sleep(3600)  # hang


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
