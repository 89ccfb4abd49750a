"""The writer process's own side (see process.py): a batch in, its answers out.

Started as ``python -m trio_routines.stores.directory.writer.child FD ROOT KEEP LOCK_TIMEOUT`` by
:class:`~.process.WriterProcess`, on the Unix socket ``FD`` it inherited. It writes each batch
with :class:`~.claimfiles.ClaimFiles`, as a worker thread of the store would, makes the
batch durable with one ``syncfs`` per file system it wrote on, and only then sends back the
answers and the log records the writes made: an answer is final, and nothing is left for the
parent to flush. A flush that fails takes back the batch's claims (each one a state fault:
a retry, never a burned slot) and makes its settles unrecorded, as the store's own group
commit does for a thread's writes. It ignores SIGINT (the parent decides when it stops) and
returns when the socket closes.
"""

from __future__ import annotations

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
from ...groupcommit import Descriptors, syncfs
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
        answers = made_durable(files, op, items, answers, held)
        taken, records.taken = records.taken, []
        reply = pickle.dumps((*_columns(answers), taken), pickle.HIGHEST_PROTOCOL)
        sock.sendall(LENGTH.pack(len(reply)) + reply)


def made_durable(
    files: ClaimFiles,
    op: str,
    items: Sequence[Any],
    answers: list[Answer[Written[Any]]],
    held: Descriptors,
) -> list[Answer[Any]]:
    """Each item's final answer once the batch's writes were flushed (``held``: one
    descriptor per file system, each opened before the batch's first write, so that its
    ``syncfs`` reports an error in any of them; closed here). What was to be pruned once
    flushed is pruned now. If the flush fails, each claim written is taken back and answered
    with its fault, and each settle written is answered unrecorded (False)."""
    failure: OSError | None = None
    try:
        for _, fd in held.values():
            syncfs(fd)
    except OSError as exc:
        failure = exc
    finally:
        for _, fd in held.values():
            os.close(fd)
    final: list[Answer[Any]] = []
    for item, answer in zip(items, answers, strict=True):
        if answer.error is not None:
            final.append(Answer(error=answer.error))
            continue
        value, later = answer.unwrap()
        if later is None:  # nothing written: nothing awaited the flush
            final.append(Answer(value=value))
        elif failure is None:
            files.prune_later(item[0], later)
            final.append(Answer(value=value))
        elif op == "claims":
            files.unclaim_after(item[0], item[1])
            final.append(Answer(error=files.not_durable(item[0], item[1], failure)))
        else:
            files.settle_warning(item[0], item[1], item[2], failure)
            final.append(Answer(value=False))
    return final


def _columns(answers: list[Answer[Any]]) -> tuple[list[Any], dict[int, Exception]]:
    """A batch's answers as the parent reads them: the values, and the errors by index.
    Columns, not an object per item: the parent's event loop unpickles them during a herd."""
    values: list[Any] = []
    errors: dict[int, Exception] = {}
    # Equal results sent as one object (a herd's claims are all "taken" of one slot): the
    # reply pickles it once, and the parent builds it once.
    shared: dict[ClaimResult, ClaimResult] = {}
    for index, answer in enumerate(answers):
        if answer.error is not None:
            errors[index] = answer.error
            values.append(None)
        else:
            value = answer.unwrap()
            if isinstance(value, ClaimResult):
                value = shared.setdefault(value, value)
            values.append(value)
    return values, errors


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
