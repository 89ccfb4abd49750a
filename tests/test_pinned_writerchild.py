"""The writer process's own side, run in this process: a batch in, its answers out.

tests/test_writer.py drives the real child in a process of its own; the same code is run
here in a thread (``serve``) or on this thread (``main``), over a socket pair whose other end
the test holds, so that each answer, descriptor and log record of a reply can be looked at
(and so that mutation testing, which follows only this process, sees the code run).
"""

from __future__ import annotations

import array
import fcntl
import logging
import os
import pickle
import signal
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.test_pinned_writerwire import open_fds
from trio_routines.errors import StateFault
from trio_routines.instants import slot_name
from trio_routines.records import ClaimResult, ClaimStatus, Outcome
from trio_routines.stores.batch import Answer
from trio_routines.stores.directory.claimbatch import Contended
from trio_routines.stores.directory.writer import child as writerchild
from trio_routines.stores.directory.writer.wire import LENGTH, MAX_FDS, READY, descriptors

SLOT = datetime(2026, 7, 7, 9, tzinfo=UTC)


@pytest.fixture(autouse=True)
def our_logger() -> Iterator[logging.Logger]:
    """``serve`` takes over the ``trio_routines`` logger, as the child does: it finds it as a
    new process has it (no handler of its own, propagating), and it is given back after."""
    ours = logging.getLogger("trio_routines")
    handlers, level, propagate = list(ours.handlers), ours.level, ours.propagate
    ours.handlers[:] = []
    ours.setLevel(logging.NOTSET)
    ours.propagate = True
    yield ours
    ours.handlers[:] = handlers
    ours.setLevel(level)
    ours.propagate = propagate


def request(op: str, items: list[Any]) -> bytes:
    data = pickle.dumps((op, items))
    return LENGTH.pack(len(data)) + data


def read_reply(sock: socket.socket) -> tuple[tuple[Any, ...], list[int]]:
    """One reply: its unpickled columns, and the descriptors that came with it (ours now)."""
    data = bytearray()
    fds: list[int] = []
    wanted = LENGTH.size
    while len(data) < wanted:
        chunk, ancillary, _, _ = sock.recvmsg(
            wanted - len(data), socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
        )
        assert chunk, "the child closed its end before its reply was whole"
        fds += descriptors(ancillary)
        data += chunk
        if len(data) == LENGTH.size:
            wanted += LENGTH.unpack_from(data)[0]
    return pickle.loads(bytes(data[LENGTH.size :])), fds


class Served:
    """``serve`` in a thread, on one end of a socket pair; the test holds the other."""

    def __init__(
        self, root: Path, keep: int = 3, lock_timeout: float = 0.2, kind: type = socket.socket
    ) -> None:
        self.parent, plain = socket.socketpair()
        child = kind(fileno=plain.detach())
        self.parent.settimeout(30)
        self.returned = threading.Event()

        def run() -> None:
            with child:
                writerchild.serve(child, root, keep, lock_timeout)
            self.returned.set()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert self.parent.recv(1) == READY

    def ask(self, op: str, items: list[Any]) -> tuple[tuple[Any, ...], list[int]]:
        self.parent.sendall(request(op, items))
        return read_reply(self.parent)

    def close(self) -> bool:
        """Close our end: whether ``serve`` returned."""
        self.parent.close()
        self.thread.join(30)
        return self.returned.is_set()


def test_a_claims_batch_is_answered_by_column_with_its_descriptors(tmp_path: Path) -> None:
    (tmp_path / "schedule" / "claims").mkdir(parents=True)
    (tmp_path / "schedule" / "claims" / "squatted").write_text("a file, not a directory")
    served = Served(tmp_path)
    (values, laters, errors, devices, records), fds = served.ask(
        "claims", [("r0", SLOT, SLOT), ("squatted", SLOT, SLOT), ("r0", SLOT, SLOT)]
    )
    assert values[0].status is ClaimStatus.TAKEN
    assert values[0].newest == slot_name(SLOT)
    assert laters[0] == ()  # nothing to prune once flushed, but a flush awaited
    assert values[1] is None
    assert laters[1] is None
    assert list(errors) == [1]
    assert isinstance(errors[1], StateFault)
    assert "unusable" in str(errors[1])
    assert values[2].status is ClaimStatus.DUPLICATE
    assert laters[2] is None
    # one file system written: its device and ticket, and a descriptor on it
    assert len(devices) == len(fds) == 1
    assert devices[0][0] == os.fstat(fds[0]).st_dev == tmp_path.stat().st_dev
    assert isinstance(devices[0][1], int)
    assert records == []
    for fd in fds:
        os.close(fd)
    assert (tmp_path / "schedule" / "claims" / "r0" / slot_name(SLOT)).exists()
    assert served.close()


class Partial(socket.socket):
    """A socket whose ``sendmsg`` takes only the first bytes of a message (as a signal
    arriving mid-send can make it): the rest is the caller's to send."""

    def sendmsg(self, buffers: Any, *args: Any) -> int:
        return super().sendmsg([b"".join(buffers)[:5]], *args)


def test_a_reply_sent_in_part_is_sent_whole(tmp_path: Path) -> None:
    served = Served(tmp_path, kind=Partial)
    (values, _, _, devices, _), fds = served.ask("claims", [("r0", SLOT, SLOT)])
    assert values[0].status is ClaimStatus.TAKEN
    assert len(devices) == len(fds) == 1  # the descriptors came with the first part
    for fd in fds:
        os.close(fd)
    assert served.close()


def test_a_batch_that_awaits_no_flush_comes_without_descriptors(tmp_path: Path) -> None:
    served = Served(tmp_path)
    _, fds = served.ask("claims", [("r0", SLOT, SLOT)])
    for fd in fds:
        os.close(fd)
    (values, laters, errors, devices, records), fds = served.ask("claims", [("r0", SLOT, SLOT)])
    assert [value.status for value in values] == [ClaimStatus.DUPLICATE]
    assert (laters, errors, devices, records, fds) == ([None], {}, [], [], [])
    assert served.close()


def test_settles_are_answered_and_their_log_records_sent_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    served = Served(tmp_path)
    _, fds = served.ask("claims", [(name, SLOT, SLOT) for name in ("r0", "r1", "r2")])
    for fd in fds:
        os.close(fd)
    squatted = tmp_path / "schedule" / "claims" / "r1" / slot_name(SLOT)
    squatted.unlink()
    squatted.mkdir()  # a directory squats on the claim: not a file to settle
    locked = os.open(tmp_path / "schedule" / "claims" / "r2" / slot_name(SLOT), os.O_RDWR)
    fcntl.flock(locked, fcntl.LOCK_EX)  # another process's settle, say
    settles = [(name, SLOT, Outcome.COMPLETED, 5, False, None) for name in ("r0", "r1", "r2")]
    try:
        with caplog.at_level(logging.DEBUG):
            (values, laters, errors, devices, records), fds = served.ask("settles", settles)
    finally:
        os.close(locked)
    assert values == [True, False, None]
    assert laters == [(), None, None]
    assert list(errors) == [2]
    assert isinstance(errors[2], Contended)  # not waited for: the store waits in a thread
    assert len(devices) == len(fds) == 1
    for fd in fds:
        os.close(fd)
    assert len(records) == 1
    level, message = records[0]
    assert level == logging.WARNING
    assert "could not open the claim for slot" in message
    assert message.startswith("r1:")
    assert caplog.records == []  # the child's records are sent, not logged where it runs
    (values, _, _, _, records), fds = served.ask("settles", settles[1:2])
    assert values == [False]
    assert fds == []
    assert len(records) == 1  # this batch's own record, not the one before it again
    assert served.close()


def test_requests_sent_back_to_back_are_read_one_at_a_time(tmp_path: Path) -> None:
    served = Served(tmp_path)
    two = request("claims", [("r0", SLOT, SLOT)]) + request("claims", [("r1", SLOT, SLOT)])
    for index in range(0, len(two), 7):  # in small pieces, as a busy socket delivers them
        served.parent.sendall(two[index : index + 7])
    for name in ("r0", "r1"):
        (values, *_), fds = read_reply(served.parent)
        assert values[0].status is ClaimStatus.TAKEN
        for fd in fds:
            os.close(fd)
        assert (tmp_path / "schedule" / "claims" / name / slot_name(SLOT)).exists()
    assert served.close()


@pytest.mark.parametrize("sent", [b"", LENGTH.pack(100)[:5], LENGTH.pack(100) + b"x" * 10])
def test_serve_returns_when_its_socket_closes_mid_message(tmp_path: Path, sent: bytes) -> None:
    served = Served(tmp_path)
    served.parent.sendall(sent)
    assert served.close()
    assert not (tmp_path / "schedule" / "claims").exists()  # nothing was written


def run_main(
    tmp_path: Path, sent: bytes, *, peer_closes: bool = False, monkeypatch: Any = None
) -> tuple[socket.socket, Any]:
    """``main`` on this thread, as the child runs it: the request is already waiting. With
    ``peer_closes``, our end is closed before main starts, or (given ``monkeypatch``) once
    the batch is written and before its reply is sent."""
    parent, child = socket.socketpair()
    parent.sendall(sent)
    parent.shutdown(socket.SHUT_WR)  # then the end of input: main returns after the batch
    if peer_closes and monkeypatch is None:
        parent.close()
    elif peer_closes:
        columns = writerchild._columns

        def closing_first(answers: Any) -> Any:
            parent.close()
            return columns(answers)

        monkeypatch.setattr(writerchild, "_columns", closing_first)
    before = signal.getsignal(signal.SIGINT)
    try:
        writerchild.main([str(child.detach()), str(tmp_path), "3", "0.2"])
        return parent, signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, before)


def test_main_serves_its_socket_ignoring_ctrl_c_and_closes_it(tmp_path: Path) -> None:
    fds_before = open_fds()
    parent, handler = run_main(tmp_path, request("claims", [("r0", SLOT, SLOT)]))
    assert handler is signal.SIG_IGN  # Ctrl-C reaches the group; the parent decides
    parent.settimeout(30)
    assert parent.recv(1) == READY
    (values, *_), fds = read_reply(parent)
    assert values[0].status is ClaimStatus.TAKEN
    for fd in fds:
        os.close(fd)
    assert parent.recv(1) == b""  # main closed its end
    parent.close()
    assert not open_fds() - fds_before  # no descriptor left open


def test_main_whose_parent_went_away_returns_quietly_and_leaks_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fds_before = open_fds()
    batch = request("claims", [("r0", SLOT, SLOT)])
    run_main(tmp_path, batch, peer_closes=True, monkeypatch=monkeypatch)  # gone before its reply
    assert (tmp_path / "schedule" / "claims" / "r0" / slot_name(SLOT)).exists()
    assert not open_fds() - fds_before  # the reply's descriptors closed though it was not sent
    run_main(tmp_path, batch, peer_closes=True)  # gone before READY
    assert not open_fds() - fds_before  # no descriptor left open


def test_equal_claim_results_go_back_as_one_object() -> None:
    taken = [ClaimResult(ClaimStatus.TAKEN, "2026-07-07T09-00-00-000Z") for _ in range(3)]
    other = ClaimResult(ClaimStatus.DUPLICATE, "2026-07-07T09-00-00-000Z")
    answers = [Answer(value=(result, None)) for result in [*taken, other]]
    values, laters, errors = writerchild._columns(answers)
    assert values == [*taken, other]
    assert values[0] is values[1] is values[2]
    assert values[3] is not values[0]
    assert (laters, errors) == ([None] * 4, {})
    # the reply pickles the one object once
    assert len(pickle.dumps(values)) < len(pickle.dumps([*taken, other]))
