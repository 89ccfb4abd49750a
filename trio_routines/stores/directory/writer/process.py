"""The state directory's writer process: claim and settle files written beside the event loop.

Theory of operation. A herd of claims costs the event loop's work (starting turns) plus the
writes (creating files). In one process the two cannot overlap: a worker thread making files
and a busy event loop contend for the interpreter lock at every system call (10,000 creates
beside a busy Python thread took 220 s instead of 1 s), so the store writes a herd first and
starts its turns after (docs/design.md). A child process has its own interpreter lock: fed
one batch per message over a Unix socket, it writes while the event loop starts the turns of
the batch before.

Each request is one batch (claims or settles) for :class:`~.claimfiles.ClaimFiles`, which the
child runs as a worker thread would, then makes durable itself (one ``syncfs`` a batch, see
child.py); the reply carries each item's final answer and the log records the writes made
(logged again here, on ``trio_routines``). The flush is the child's, not this process's
group commit: a claim is answered durable, ready to start its turn, without a second
wake-up here; the child flushes each batch in a thread of its own while it writes the next
(child.py).

Nothing the child does is waited for without a bound: a reply that does not come within
:data:`REPLY_TIMEOUT` (a stalled disk, a stopped child) and a child that dies fail that batch
with a :class:`~trio_routines.errors.StateFault` per item -- a claim never fires then; if its
file was made, its slot is burned and recorded interrupted (by the next boot, or by the
reconcile of open claims, scheduler/openclaims.py), as after a crash -- and the child is
killed; the next batch starts a new one. A caller cancelled while its batch is in flight
(its deadline passed, or a stop's grace ran out) gives up at once, and so does this end:
the child is taken for stalled, killed, and every batch in flight fails as above -- but for
a batch whose request the child never got whole, which nothing wrote: a thread writes it, as
one sealed while no child was up. Waiting
for its reply instead would hold a stop for up to :data:`REPLY_TIMEOUT`, and a claim
answered after its caller left must not start a turn anyway. The child ignores SIGINT
(Ctrl-C reaches the whole process group: the parent decides) and exits when its socket
closes, so it never outlives the store's process for longer than the batches it has read
(its writes of one, and the flushes of the few written before it).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import json
import logging
import os
import pickle
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from ....errors import StateFault
from .call import Call as Call
from .call import Unsent as Unsent
from .replies import receive as _receive  # one name, so that tests can hold replies
from .startline import PATH_VARIABLE, child_path, command
from .wire import ENCODING_VARIABLE, LENGTH, READY, file_names

log = logging.getLogger("trio_routines")
_ABORT_FAILED = trio.lowlevel.Abort.FAILED


#: How long a batch may take in the child before it is given up (a stalled disk).
REPLY_TIMEOUT = 60.0
#: A send's errors that say the child's end is closed.
_GONE = frozenset({errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.EBADF})
#: The most items one request the child answers nothing to carries (see ``hint``).
HINTED = 1024
GIVEN_UP = "was given up (a caller could not wait for its answer: a deadline, or a stop)"


@attrs.define(eq=False)
class _Batch:
    op: str  # "claims" or "settles"
    calls: list[Call]
    sent: bool = False
    end: int = 0  # how many bytes were queued once its request was
    leader: trio.lowlevel.Task | None = None  # parked until its batch is the oldest in flight
    sent_at: float = 0.0  # Trio time it was queued for the child


class WriterProcess:
    """The parent's end: starts the child, and sends it batches as they fill (several may be
    in flight; the child answers them in order)."""

    def __init__(
        self,
        root: Path,
        keep: int,
        lock_timeout: float,
        *,
        max_batch: int,
        argv: Sequence[str] | None = None,
    ) -> None:
        """``max_batch``: the most items a batch holds (the store's WRITE_BATCH)."""
        self._config = [str(root), str(keep), repr(lock_timeout)]
        self.max_batch = max_batch
        self._open: dict[str, _Batch] = {}  # per kind of write, the batch still filling
        self._flight: collections.deque[_Batch] = collections.deque()  # sent, in order
        self._out = bytearray()  # requests not yet taken by the socket
        self._queued = self._sent = 0  # bytes queued and sent since the child started
        self._broken: OSError | None = None  # why the socket took no more (the child gone)
        self._argv = list(argv) if argv is not None else command()
        self._child: subprocess.Popen[bytes] | None = None
        self._ended: list[subprocess.Popen[bytes]] = []  # killed, not yet reaped
        self._sock: socket.socket | None = None
        self._ready = False
        self._giving_up = False  # a give_up_soon() is on its way
        self.started = 0  # how many children were started (tests look)
        self.batches = 0  # how many batches were sent

    @property
    def alive(self) -> bool:
        return self._sock is not None

    def start(self) -> None:
        """Start a child (blocking for the fork and exec only; it signals when it is up)."""
        self._ended = [child for child in self._ended if child.poll() is None]
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ)
        env[PATH_VARIABLE] = json.dumps(child_path())
        env[ENCODING_VARIABLE] = file_names()
        try:
            self._child = subprocess.Popen(
                [*self._argv, str(theirs.fileno()), *self._config],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock = ours
        self._out.clear()  # what the child before did not take: none of it is this one's
        self._queued = self._sent = 0
        self._broken = None
        self._ready = False
        self.started += 1

    def ready(self) -> bool:
        """Whether the child is up and waiting for a batch (never blocks)."""
        if self._ready or self._sock is None:
            return self._ready
        try:
            signal_byte = self._sock.recv(1)
        except BlockingIOError:
            return False
        except OSError:
            signal_byte = b""
        if signal_byte != READY:
            self.stop("ended before it was up")
            return False
        self._ready = True
        return True

    # -- the pipeline ----------------------------------------------------------------------

    async def submit(
        self, op: str, item: Any, unsent: Callable[[Any], Awaitable[Call]] | None = None
    ) -> Call:
        """One item written by the child, batched with the items that arrive with it: its
        answered :class:`Call`. Raises its error; if the child was gone before its batch could
        be sent (nothing was written), ``unsent(item)``'s answer, or :class:`Unsent`."""
        call = Call(item, self)
        batch = self._open.get(op)
        if batch is None:  # the first: it leads this batch
            batch = self._open[op] = _Batch(op, [call])
            with trio.CancelScope(shield=True):  # one checkpoint: the batch is sent whatever
                await trio.lowlevel.checkpoint()  # the rest of the herd joins
                if not batch.sent:
                    self._seal(batch)
            await self._lead(batch)
        else:
            batch.calls.append(call)
            if len(batch.calls) >= self.max_batch:
                self._seal(batch)  # sent at once: the child starts while the herd queues
            if not call.done:
                call.task = trio.lowlevel.current_task()
                await trio.lowlevel.wait_task_rescheduled(call)
        if call.error is not None:
            if unsent is not None and isinstance(call.error, Unsent):
                return await unsent(item)
            raise call.error
        return call

    def _seal(self, batch: _Batch) -> None:
        """Close ``batch`` to newcomers and queue it for the child (sent now if the socket
        takes it)."""
        if self._open.get(batch.op) is batch:
            del self._open[batch.op]
        batch.sent = True
        batch.calls = [call for call in batch.calls if not call.gave_up]
        for call in batch.calls:
            call.in_flight = True
        if not self.ready():
            unsent = Unsent()
            for call in batch.calls:
                call.fail(unsent)
            return
        self._queue(batch.op, [call.item for call in batch.calls])
        batch.end = self._queued
        batch.sent_at = trio.current_time()
        self._flight.append(batch)
        self.batches += 1
        self._push()

    def hint(self, op: str, items: Sequence[Any]) -> None:
        """Send the child requests it answers nothing to (``"spares"``: the routines whose
        spare claim files it makes while idle, spares.py), behind those queued before, at
        most :data:`HINTED` items each: the child reads a request whole before it makes any
        spare, and what the socket did not take waits for the next push (:meth:`push`). Lost
        with the child if it ends first; dropped if none is started."""
        if self._sock is None:
            return
        for first in range(0, len(items), HINTED):
            self._queue(op, list(items[first : first + HINTED]))
        self._push()

    def _queue(self, op: str, items: list[Any]) -> None:
        """One request, behind those queued before: its length, then its pickle."""
        data = pickle.dumps((op, items), pickle.HIGHEST_PROTOCOL)
        self._out += LENGTH.pack(len(data)) + data
        self._queued += LENGTH.size + len(data)

    def push(self) -> None:
        """Send what is queued for the child, as far as its socket takes it (never waits)."""
        if self._out:
            self._push()

    def _push(self) -> None:
        """Send what the socket takes now, from the front: requests go in order. A socket the
        child closed (it died) is remembered for the reader, :meth:`_lead`."""
        while self._out and self._sock is not None:
            try:
                sent = self._sock.send(self._out)
            except BlockingIOError:  # full: the reader sends the rest
                return
            except OSError as exc:
                if exc.errno in _GONE:  # else a passing shortage (ENOBUFS): sent again later
                    self._broken = exc
                return
            del self._out[:sent]
            self._sent += sent

    async def _lead(self, batch: _Batch) -> None:
        """Wait until ``batch`` is the oldest in flight, then read its reply and answer it
        (the child answers in order; one reader at a time)."""
        first = batch.calls[0]  # the leader's own

        def abort(raise_cancel: Any) -> trio.lowlevel.Abort:
            batch.leader = None
            return first(raise_cancel)  # cancelled: it gives up, as any caller

        while not first.done and self._flight[0] is not batch:
            batch.leader = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(abort)
        if first.done:
            return  # unsent, or failed with the batches before it
        sock = self._sock
        if sock is None:  # closed (the store's aclose) before this batch's turn came
            self._fail("was stopped", batch)
            return
        try:
            with trio.fail_after(REPLY_TIMEOUT):
                while self._sent < batch.end:  # our request, and those before it, fully sent
                    await trio.lowlevel.wait_writable(sock)
                    self._push()
                    if self._broken is not None:  # else writable at once, again and again
                        raise self._broken
                payload = await _receive(sock)
            values, errors = self._decode(payload, len(batch.calls))
        except trio.Cancelled:
            first.gave_up = True
            self._fail(GIVEN_UP, batch)
            raise
        except (Exception, trio.TooSlowError) as exc:
            why = "did not answer in time" if isinstance(exc, trio.TooSlowError) else "ended"
            self._fail(f"{why} ({exc})" if why == "ended" else why, batch)
            return
        self._flight.popleft()
        if self._flight and self._flight[0].leader is not None:  # the next reply's reader
            trio.lowlevel.reschedule(self._flight[0].leader)
            self._flight[0].leader = None
        for index, call in enumerate(batch.calls):
            call.value = values[index]
            call.error = errors.get(index) if errors else None
            call.done = True
            call.wake()

    def _decode(self, payload: bytes, count: int) -> tuple[list[Any], dict[int, Exception]]:
        """A reply (see child.py): each item's value, the errors by index, and its log
        records (logged here)."""
        values, errors, records = pickle.loads(payload)
        if len(values) != count:
            raise ValueError(f"{len(values)} answers, not {count}")
        for level, message in records:
            log.log(level, "%s", message)
        return values, errors

    def waiting_since(self) -> float | None:
        """When the oldest batch still unanswered was sent (Trio time), if one is."""
        return self._flight[0].sent_at if self._flight else None

    def give_up_soon(self) -> None:
        """A caller in flight left: give the child up as soon as the abort is over."""
        if not self._giving_up:
            self._giving_up = True
            trio.lowlevel.current_trio_token().run_sync_soon(self._give_up)

    def _give_up(self) -> None:
        self._giving_up = False
        if self._flight:
            self._fail(GIVEN_UP, self._flight[0])

    def _fail(self, why: str, batch: _Batch) -> None:
        """The child failed ``batch``: stop it, and fail every batch in flight."""
        self.stop(why)
        fault = StateFault(
            f"the state directory's writer process {why} while writing {len(batch.calls)} "
            f"{batch.op}: not recorded (a claim it made stays taken, unrun, and is recorded "
            "interrupted at the next boot)"
        )
        for failed in self._flight:
            # A request the child did not get whole was written by nobody: a thread writes it.
            error = Unsent() if failed.end > self._sent else fault
            for call in failed.calls:
                call.fail(error)
            if failed.leader is not None:
                trio.lowlevel.reschedule(failed.leader)
                failed.leader = None
        self._flight.clear()
        self._out.clear()  # (the byte counts start again with the next child)

    def stop(self, why: str = "") -> None:
        """Close the socket: an idle child exits at once. With ``why``, the child failed: kill
        it. Never waits (see :meth:`reap`)."""
        sock, self._sock, self._ready = self._sock, None, False
        if sock is not None:
            with contextlib.suppress(RuntimeError):  # outside Trio: nobody waits on it
                trio.lowlevel.notify_closing(sock)  # a reader waiting on it hears at once
            sock.close()
        child, self._child = self._child, None
        if child is not None:
            if why:
                log.warning("the state directory's writer process %s; a new one starts", why)
                child.kill()
            self._ended.append(child)

    def reap(self, timeout: float) -> None:
        """Wait for the children stopped (blocking: in a thread): ``timeout`` seconds for all of
        them to exit, then those still there (a child busy with a stalled disk) are killed and
        waited for as long again. One that outlives even that (stuck in the kernel) is kept
        for the next reap: at most twice ``timeout`` in all."""
        ended, self._ended = self._ended, []
        killed = _still_there(ended, timeout)
        for child in killed:
            child.kill()
        self._ended += _still_there(killed, timeout)


def _still_there(
    children: list[subprocess.Popen[bytes]], timeout: float
) -> list[subprocess.Popen[bytes]]:
    """Wait for ``children`` until one deadline ``timeout`` seconds away: those that did not
    exit by then."""
    deadline = time.monotonic() + timeout
    left = []
    for child in children:
        try:
            child.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            left.append(child)
    return left
