"""The writer process's own side (see process.py): a batch in, its answers out.

Started as ``python -I -X utf8=N -c BOOTSTRAP FD ROOT KEEP LOCK_TIMEOUT`` (startline.py) by
:class:`~.process.WriterProcess` (``BOOTSTRAP`` sets the parent's module path, then calls
:func:`main`), on the Unix socket ``FD`` it inherited; it starts only if it makes file names
of text as the parent does. It
writes each batch with :class:`~.claimfiles.ClaimFiles`, as a worker thread of the store
would; a thread of its own (:class:`_Flushes`) makes the batch durable with one ``syncfs`` per
file system it wrote on while the next batch is written, and only then sends back the answers
and the log records the batch made: an answer is final, and nothing is left for the parent to
flush. A flush that fails takes back the batch's claims (each one a state fault: a retry,
never a burned slot) and makes its settles unrecorded, as the store's own group commit does
for a thread's writes. It ignores SIGINT (the parent decides when it stops) and returns when
the socket closes (once the batches it read are answered).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import math
import os
import pickle
import queue
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ....records import ClaimResult
from ...answers import Answer
from ...durable import Descriptors, close_held, syncfs
from ...safefile import open_dirs
from ..claimbatch import Batched, Written
from ..claimfiles import ClaimFiles
from ..settlefiles import SettleFiles, settle_warning
from .wire import ENCODING_VARIABLE, LENGTH, READY, file_names

#: Batches written and waiting for their flush, at most, before the next one is read.
AHEAD = 2
#: How often a write waiting for room checks that the flushes' thread still runs.
HAND_POLL = 0.5
#: Spare claim files (spares.py) are made once no request came for this long after the last
#: was handled: not between the batches of a herd, as a rule, which come milliseconds apart.
LULL = 0.05
#: Spares made between two looks for a request: a request waits for about this many at most.
SPARES_AT_ONCE = 16


class _Records(logging.Handler):
    """The log records of one batch, to be sent with its reply: each thread's apart (the
    writes of one batch run beside the flush of the batch before)."""

    def __init__(self) -> None:
        super().__init__()
        self._local = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        taken = getattr(self._local, "taken", None)
        if taken is None:
            taken = self._local.taken = []
        taken.append((record.levelno, record.getMessage()))

    def take(self) -> list[tuple[int, str]]:
        """The records this thread made since its last take."""
        taken: list[tuple[int, str]] = getattr(self._local, "taken", None) or []
        self._local.taken = []
        return taken


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def serve(sock: socket.socket, root: Path, keep: int, lock_timeout: float) -> None:
    """The child's loop: a batch in, its answers out, until the socket closes. This thread
    writes each batch; the :class:`_Flushes` thread flushes it and sends its answers, while
    this one writes the next."""
    files = ClaimFiles(root, keep, lock_timeout, syncfs=True)
    records = _Records()
    ours = logging.getLogger("trio_routines")
    ours.addHandler(records)
    ours.setLevel(logging.DEBUG)
    ours.propagate = False
    operations: dict[str, Callable[[Any], Batched[Any]]] = {
        "claims": files.create_each,
        "settles": SettleFiles(files).write_each,
    }
    sock.sendall(READY)
    flushes = _Flushes(sock, files, records)
    idle = _Idle(sock, files)
    try:
        while True:
            idle.until_request()
            header = _read_exactly(sock, LENGTH.size)
            if header is None:
                return
            body = _read_exactly(sock, LENGTH.unpack(header)[0])
            if body is None:
                return
            op, items = pickle.loads(body)
            if op == "spares":  # the routines a boot read: no answer is awaited
                idle.want(items)
                continue
            claimed = {item[0] for item in items} if op == "claims" else set()
            if not flushes.after_flushes_of(claimed):
                return  # the parent went away: nothing left to answer
            answers, held = operations[op](items)
            if claimed:
                idle.want(taken_for(items, answers))
            written = _Written(op, items, answers, held, records.take(), claimed)
            if not flushes.hand(written):
                close_held(held)
                return  # the parent went away: nothing left to answer
    finally:
        flushes.close()


def taken_for(items: Sequence[Any], answers: list[Answer[Written[Any]]]) -> list[str]:
    """The routines of a batch of claims whose slot was taken: each has used its spare."""
    return [
        item[0]
        for item, answer in zip(items, answers, strict=True)
        if answer.error is None and answer.unwrap()[0].taken
    ]


class _Idle:
    """The spare claim files to make while no request comes (spares.py): those of the
    routines a boot read (the parent sends their names) and of each routine claimed for."""

    def __init__(self, sock: socket.socket, files: ClaimFiles) -> None:
        self._files = files
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)
        self._wanted: dict[str, None] = {}  # in the order asked, each once
        self._made = 0  # spares made since the last flush of them
        self._heard = time.monotonic()

    def want(self, routines: Iterable[str]) -> None:
        self._wanted.update(dict.fromkeys(routines))

    def heard(self) -> None:
        """A request came: no spare is made until :data:`LULL` passed without one."""
        self._heard = time.monotonic()

    def until_request(self) -> None:
        """Return once a request (or the socket's end) can be read, making spares meanwhile,
        :data:`SPARES_AT_ONCE` between two looks, once :data:`LULL` passed without one since
        the last was handled (this is called once it was)."""
        self.heard()
        while self._wanted:
            wait = self._heard + LULL - time.monotonic()
            if self._poll.poll(max(0, math.ceil(wait * 1000))):
                return
            if wait <= 0:
                batch = list(itertools.islice(self._wanted, SPARES_AT_ONCE))
                for routine in batch:
                    del self._wanted[routine]
                self._made += self._files.spares.make(self._files, batch)
                if self._made and not self._wanted:
                    self._made = 0
                    self._flush()

    def _flush(self) -> None:
        """Make the spares made durable, in a thread of its own (the writes go on): a herd's
        flush that found them still to write, their blocks still to allocate, took longer."""
        try:
            fd = open_dirs(self._files.root, ("schedule", "claims"))
        except OSError:
            return
        try:
            threading.Thread(target=_flush_quietly, args=(fd,), name="spares", daemon=True).start()
        except RuntimeError:  # no thread to be had: they are flushed with the next batch
            os.close(fd)


def _flush_quietly(fd: int) -> None:
    """``syncfs`` on ``fd``, then close it; a failure is nobody's: a spare is not a claim."""
    try:
        syncfs(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class _Written(NamedTuple):
    """A batch written, awaiting its flush: what :func:`made_durable` takes, and the log
    records its writes made."""

    op: str
    items: Sequence[Any]
    answers: list[Answer[Written[Any]]]
    held: Descriptors
    taken: list[tuple[int, str]]
    claimed: set[str]  # the routines it claims for


class _Flushes:
    """The thread that flushes each batch written and sends its answers, in order.

    A ``syncfs`` mostly waits for the disk: run beside the writes of the next batch, that
    wait is no longer the writer's (a herd's writes and flushes, alone in a process: 58–64
    µs a claim against 74–80 one after the other; the git history of benchmarks/README.md).
    A batch's answers still go out only once its own flush returned, each flush through
    descriptors opened before its batch's first write (groupcommit.py), and in the order the
    batches came. At most :data:`AHEAD` batches wait for it; the writes wait beyond that.

    A batch that claims for a routine whose claim waits for its flush is written once that
    flush returned: its listing must not decide a slot (stale, or what to prune) by a claim
    that a failed flush may yet take back. A herd claims for each routine once: its batches
    do not wait for each other."""

    def __init__(self, sock: socket.socket, files: ClaimFiles, records: _Records) -> None:
        self._sock = sock
        self._files = files
        self._records = records
        self._waiting: queue.Queue[_Written | None] = queue.Queue(AHEAD)
        self._ended = threading.Event()
        #: The routines claimed for in batches handed and not yet flushed, how many each.
        self._unflushed: collections.Counter[str] = collections.Counter()
        self._flushed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="flushes", daemon=True)
        self._thread.start()

    def after_flushes_of(self, routines: set[str]) -> bool:
        """Wait until no claim for ``routines`` waits for its flush; False if the thread ended
        (the parent went away) first."""
        with self._flushed:
            while not self._ended.is_set():
                if self._unflushed.keys().isdisjoint(routines):
                    return True
                self._flushed.wait(HAND_POLL)
        return False

    def hand(self, written: _Written | None) -> bool:
        """Queue ``written`` (None: no more), waiting for room; False if the thread ended (the
        parent went away) and never will take it."""
        if written is not None and written.claimed:
            with self._flushed:
                self._unflushed.update(written.claimed)
        while not self._ended.is_set():
            try:
                self._waiting.put(written, timeout=HAND_POLL)
            except queue.Full:
                continue
            return True
        return False

    def close(self) -> None:
        """Flush and answer what was handed, then end the thread (on a stalled disk this
        waits for it, as the flush itself would)."""
        self.hand(None)
        self._thread.join()
        self._close_waiting()  # handed just as the thread ended

    def _run(self) -> None:
        try:
            while (written := self._waiting.get()) is not None:
                final = made_durable(
                    self._files, written.op, written.items, written.answers, written.held
                )
                if written.claimed:
                    with self._flushed:
                        self._unflushed.subtract(written.claimed)
                        self._unflushed += collections.Counter()  # (drops the zeros)
                        self._flushed.notify_all()
                taken = written.taken + self._records.take()
                reply = pickle.dumps((*_columns(final), taken), pickle.HIGHEST_PROTOCOL)
                self._sock.sendall(LENGTH.pack(len(reply)) + reply)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the parent went away: nothing left to answer
        finally:
            # Ended (the parent gone, or a fault of ours, which the thread's hook prints):
            # the reading thread hears it at once, and the parent sees the child end.
            self._ended.set()
            with self._flushed:
                self._flushed.notify_all()  # a write waiting for a flush hears it at once
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._close_waiting()

    def _close_waiting(self) -> None:
        """Close the descriptors of the batches nobody will flush now."""
        while True:
            try:
                written = self._waiting.get_nowait()
            except queue.Empty:
                return
            if written is not None:
                close_held(written.held)


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
            settle_warning(item[0], item[1], item[2], failure)
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
    parents = os.environ.pop(ENCODING_VARIABLE, None)
    if parents is not None and parents != file_names():
        # A routine's name would make another file name here: the parent's threads write.
        sys.stderr.write(
            f"trio_routines writer: file names are {file_names()} here, {parents} in the "
            "parent: not started\n"
        )
        sys.exit(2)
    with socket.socket(fileno=int(fd)) as sock:
        try:
            serve(sock, Path(root), int(keep), float(lock_timeout))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the parent went away: nothing left to answer


if __name__ == "__main__":
    main(sys.argv[1:])
