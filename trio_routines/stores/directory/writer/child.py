"""The writer process's own side (see process.py): a batch in, its answers out.

Started as ``python -m trio_routines.stores.directory.writer.child FD ROOT KEEP LOCK_TIMEOUT`` by
:class:`~.process.WriterProcess`, on the Unix socket ``FD`` it inherited. It writes each batch
with :class:`~.claimfiles.ClaimFiles`, as a worker thread of the store would, and sends back
the answers, the log records the writes made, and the directory descriptors to flush through
(``SCM_RIGHTS``). It ignores SIGINT (the parent decides when it stops) and returns when the
socket closes.
"""

from __future__ import annotations

import array
import logging
import os
import pickle
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ....records import ClaimResult
from ...batch import Answer
from ..claimbatch import Batched, Written
from ..claimfiles import ClaimFiles
from .wire import LENGTH, READY


class _Records(logging.Handler):
    """The log records of one batch, to be sent with its reply."""

    def __init__(self) -> None:
        super().__init__()
        self.taken: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.taken.append((record.levelno, record.getMessage()))


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def serve(sock: socket.socket, root: Path, keep: int, lock_timeout: float) -> None:
    """The child's loop: a batch in, its answers out, until the socket closes."""
    files = ClaimFiles(root, keep, lock_timeout, syncfs=True)
    records = _Records()
    ours = logging.getLogger("trio_routines")
    ours.addHandler(records)
    ours.setLevel(logging.DEBUG)
    ours.propagate = False
    operations: dict[str, Callable[[Any], Batched[Any]]] = {
        "claims": files.create_each,
        "settles": files.write_each,
    }
    sock.sendall(READY)
    while True:
        header = _read_exactly(sock, LENGTH.size)
        if header is None:
            return
        body = _read_exactly(sock, LENGTH.unpack(header)[0])
        if body is None:
            return
        op, items = pickle.loads(body)
        answers, held = operations[op](items)
        taken, records.taken = records.taken, []
        devices = [(device, ticket) for device, (ticket, _) in held.items()]
        reply = pickle.dumps((*_columns(answers), devices, taken), pickle.HIGHEST_PROTOCOL)
        fds = [fd for _, fd in held.values()]
        try:
            message = LENGTH.pack(len(reply)) + reply
            sent = sock.sendmsg([message], [_rights(fds)] if fds else [])
            if sent < len(message):  # (a send of nothing still fails on a closed socket)
                sock.sendall(message[sent:])
        finally:
            for fd in fds:
                os.close(fd)


def _columns(
    answers: list[Answer[Written[Any]]],
) -> tuple[list[Any], list[tuple[str, ...] | None], dict[int, Exception]]:
    """A batch's answers as the parent reads them: the values, what to prune once flushed
    (None: nothing awaits a flush), and the errors by index. Columns, not an object per
    item: the parent's event loop unpickles them during a herd."""
    values: list[Any] = []
    laters: list[tuple[str, ...] | None] = []
    errors: dict[int, Exception] = {}
    # Equal results sent as one object (a herd's claims are all "taken" of one slot): the
    # reply pickles it once, and the parent builds it once.
    shared: dict[ClaimResult, ClaimResult] = {}
    for index, answer in enumerate(answers):
        if answer.error is not None:
            errors[index] = answer.error
            values.append(None)
            laters.append(None)
        else:
            value, later = answer.unwrap()
            if isinstance(value, ClaimResult):
                value = shared.setdefault(value, value)
            values.append(value)
            laters.append(None if later is None else tuple(later))
    return values, laters, errors


def _rights(fds: list[int]) -> tuple[int, int, bytes]:
    return (socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())


def main(argv: Sequence[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    fd, root, keep, lock_timeout = argv
    with socket.socket(fileno=int(fd)) as sock:
        try:
            serve(sock, Path(root), int(keep), float(lock_timeout))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the parent went away: nothing left to answer


if __name__ == "__main__":
    main(sys.argv[1:])
