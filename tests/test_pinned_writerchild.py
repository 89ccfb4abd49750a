"""The writer process's own side, run in this process: a batch in, its answers out.

tests/test_writer.py drives the real child in a process of its own; the same code is run
here in a thread (``serve``) or on this thread (``main``), over a socket pair whose other end
the test holds, so that each answer, flush and log record of a reply can be looked at (and
so that mutation testing, which follows only this process, sees the code run).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import pickle
import signal
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from procs import wait_for

from tests.test_pinned_writerwire import open_fds
from trio_routines.errors import StateFault
from trio_routines.instants import format_iso, slot_name
from trio_routines.records import ClaimResult, ClaimStatus, Outcome
from trio_routines.stores.batch import Answer
from trio_routines.stores.directory.claimbatch import Contended
from trio_routines.stores.directory.writer import child as writerchild
from trio_routines.stores.directory.writer.wire import LENGTH, READY

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


@pytest.fixture(autouse=True)
def no_idle_spares(monkeypatch: pytest.MonkeyPatch) -> None:
    """No spare claim file is made while the child is idle (a test of spares sets its own
    lull): the listings these tests look at hold claims only, however slow the machine."""
    monkeypatch.setattr(writerchild, "LULL", 3600.0)


def request(op: str, items: list[Any]) -> bytes:
    data = pickle.dumps((op, items))
    return LENGTH.pack(len(data)) + data


def read_reply(sock: socket.socket) -> tuple[Any, ...]:
    """One reply: its unpickled columns."""
    data = bytearray()
    wanted = LENGTH.size
    while len(data) < wanted:
        chunk = sock.recv(wanted - len(data))
        assert chunk, "the child closed its end before its reply was whole"
        data += chunk
        if len(data) == LENGTH.size:
            wanted += LENGTH.unpack_from(data)[0]
    result: tuple[Any, ...] = pickle.loads(bytes(data[LENGTH.size :]))
    return result


class Flushes:
    """``syncfs`` in the child, recorded: the device of each descriptor flushed, and what
    the state directory's claims held at that moment (routine/slot); it fails with EIO
    while ``failing``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.devices: list[int] = []
        self.seen: list[list[str]] = []
        self.failing = False

    def __call__(self, fd: int) -> None:
        self.devices.append(os.fstat(fd).st_dev)
        claims = self.root / "schedule" / "claims"
        self.seen.append(sorted(f"{p.parent.name}/{p.name}" for p in claims.glob("*/*")))
        if self.failing:
            raise OSError(errno.EIO, os.strerror(errno.EIO))


@pytest.fixture
def flushes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Flushes:
    recorded = Flushes(tmp_path)
    monkeypatch.setattr(writerchild, "syncfs", recorded)
    return recorded


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

    def ask(self, op: str, items: list[Any]) -> tuple[Any, ...]:
        self.parent.sendall(request(op, items))
        return read_reply(self.parent)

    def close(self) -> bool:
        """Close our end: whether ``serve`` returned."""
        self.parent.close()
        self.thread.join(30)
        return self.returned.is_set()


def test_a_claims_batch_is_flushed_then_answered_by_column(
    tmp_path: Path, flushes: Flushes
) -> None:
    (tmp_path / "schedule" / "claims").mkdir(parents=True)
    (tmp_path / "schedule" / "claims" / "squatted").write_text("a file, not a directory")
    served = Served(tmp_path)
    before = open_fds()
    values, errors, records = served.ask(
        "claims", [("r0", SLOT, SLOT), ("squatted", SLOT, SLOT), ("r0", SLOT, SLOT)]
    )
    assert values[0].status is ClaimStatus.TAKEN
    assert values[0].newest == slot_name(SLOT)
    assert values[1] is None
    assert list(errors) == [1]
    assert isinstance(errors[1], StateFault)
    assert "unusable" in str(errors[1])
    assert values[2].status is ClaimStatus.DUPLICATE
    assert records == []
    # one file system written: one flush on it, after the write, before the answer
    assert flushes.devices == [tmp_path.stat().st_dev]
    assert flushes.seen == [[f"r0/{slot_name(SLOT)}"]]
    assert open_fds() == before  # its descriptor closed once flushed
    assert served.close()


def test_a_batch_that_wrote_nothing_is_not_flushed(tmp_path: Path, flushes: Flushes) -> None:
    served = Served(tmp_path)
    served.ask("claims", [("r0", SLOT, SLOT)])
    values, errors, records = served.ask("claims", [("r0", SLOT, SLOT)])
    assert [value.status for value in values] == [ClaimStatus.DUPLICATE]
    assert (errors, records) == ({}, [])
    assert len(flushes.devices) == 1  # the first batch's only
    assert served.close()


def test_the_newest_claim_is_pruned_only_once_the_new_one_is_flushed(
    tmp_path: Path, flushes: Flushes
) -> None:
    served = Served(tmp_path, keep=1)
    later = SLOT + timedelta(minutes=1)
    served.ask("claims", [("r0", SLOT, SLOT)])
    values, errors, _ = served.ask("claims", [("r0", later, later)])
    assert values[0].status is ClaimStatus.TAKEN
    assert errors == {}
    # the flush saw both: the one before held the stale gate until the new one was durable
    assert flushes.seen[-1] == [f"r0/{slot_name(SLOT)}", f"r0/{slot_name(later)}"]
    assert [path.name for path in (tmp_path / "schedule" / "claims" / "r0").iterdir()] == [
        slot_name(later)
    ]
    assert served.close()


def test_a_failed_flush_takes_back_its_claims_and_leaves_its_settles_unrecorded(
    tmp_path: Path, flushes: Flushes
) -> None:
    served = Served(tmp_path)
    served.ask("claims", [("r0", SLOT, SLOT), ("r1", SLOT, SLOT)])
    flushes.failing = True
    before = open_fds()
    later = SLOT + timedelta(minutes=1)
    fired = later + timedelta(seconds=3)  # fired late: the slot, not this, names the file
    values, errors, records = served.ask(
        "claims", [("r0", later, fired), ("r1", SLOT, SLOT), ("r2", later, fired)]
    )
    assert values == [None, ClaimResult(ClaimStatus.DUPLICATE, slot_name(SLOT)), None]
    assert list(errors) == [0, 2]
    for index, name in ((0, "r0"), (2, "r2")):
        assert isinstance(errors[index], StateFault)
        assert str(errors[index]) == (
            f"could not make the claim {tmp_path}/schedule/claims/{name}/{slot_name(later)}"
            " durable: EIO: Input/output error"
        )
        assert not (tmp_path / "schedule" / "claims" / name / slot_name(later)).exists()
    assert (tmp_path / "schedule" / "claims" / "r0" / slot_name(SLOT)).exists()  # untouched
    assert records == []
    settles = [(name, SLOT, Outcome.COMPLETED, 5, False, None) for name in ("r0", "r1")]
    values, errors, records = served.ask("settles", settles)
    assert (values, errors) == ([False, False], {})
    assert [level for level, _ in records] == [logging.WARNING] * 2
    assert records[1][1] == (
        f"r1: could not record the completed outcome of slot {format_iso(SLOT)}:"
        " EIO: Input/output error"
    )
    assert open_fds() == before  # the failed flushes' descriptors closed too
    assert served.close()


def test_settles_are_flushed_answered_and_their_log_records_sent_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, flushes: Flushes
) -> None:
    served = Served(tmp_path)
    served.ask("claims", [(name, SLOT, SLOT) for name in ("r0", "r1", "r2")])
    squatted = tmp_path / "schedule" / "claims" / "r1" / slot_name(SLOT)
    squatted.unlink()
    squatted.mkdir()  # a directory squats on the claim: not a file to settle
    locked = os.open(tmp_path / "schedule" / "claims" / "r2" / slot_name(SLOT), os.O_RDWR)
    fcntl.flock(locked, fcntl.LOCK_EX)  # another process's settle, say
    settles = [(name, SLOT, Outcome.COMPLETED, 5, False, None) for name in ("r0", "r1", "r2")]
    try:
        with caplog.at_level(logging.DEBUG):
            values, errors, records = served.ask("settles", settles)
    finally:
        os.close(locked)
    assert values == [True, False, None]
    assert list(errors) == [2]
    assert isinstance(errors[2], Contended)  # not waited for: the store waits in a thread
    assert len(flushes.devices) == 2  # the claims', then the one settle written
    assert len(records) == 1
    level, message = records[0]
    assert level == logging.WARNING
    assert "could not open the claim for slot" in message
    assert message.startswith("r1:")
    assert caplog.records == []  # the child's records are sent, not logged where it runs
    values, _, records = served.ask("settles", settles[1:2])
    assert values == [False]
    assert len(flushes.devices) == 2  # nothing written: nothing flushed
    assert len(records) == 1  # this batch's own record, not the one before it again
    assert served.close()


def test_requests_sent_back_to_back_are_read_one_at_a_time(tmp_path: Path) -> None:
    served = Served(tmp_path)
    two = request("claims", [("r0", SLOT, SLOT)]) + request("claims", [("r1", SLOT, SLOT)])
    for index in range(0, len(two), 7):  # in small pieces, as a busy socket delivers them
        served.parent.sendall(two[index : index + 7])
    for name in ("r0", "r1"):
        values, *_ = read_reply(served.parent)
        assert values[0].status is ClaimStatus.TAKEN
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
    values, *_ = read_reply(parent)
    assert values[0].status is ClaimStatus.TAKEN
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
    assert not open_fds() - fds_before  # the flushed descriptor closed though no reply was sent
    run_main(tmp_path, batch, peer_closes=True)  # gone before READY
    assert not open_fds() - fds_before  # no descriptor left open


def test_equal_claim_results_go_back_as_one_object() -> None:
    taken = [ClaimResult(ClaimStatus.TAKEN, "2026-07-07T09-00-00-000Z") for _ in range(3)]
    other = ClaimResult(ClaimStatus.DUPLICATE, "2026-07-07T09-00-00-000Z")
    fault = StateFault("no")
    answers: list[Answer[Any]] = [Answer(value=result) for result in [*taken, other]]
    values, errors = writerchild._columns([*answers, Answer(error=fault)])
    assert values == [*taken, other, None]
    assert values[0] is values[1] is values[2]
    assert values[3] is not values[0]
    assert errors == {4: fault}
    # the reply pickles the one object once
    assert len(pickle.dumps(values)) < len(pickle.dumps([*taken, other]))


class HeldFlush:
    """``syncfs`` in the child that holds its first call until :attr:`release` is set."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, fd: int) -> None:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            assert self.release.wait(30), "the test never let the flush go"


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> HeldFlush:
    """The child's ``syncfs``, its first call held (see :class:`HeldFlush`)."""
    flush = HeldFlush()
    monkeypatch.setattr(writerchild, "syncfs", flush)
    return flush


def test_the_next_batch_is_written_while_the_one_before_is_flushed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: HeldFlush
) -> None:
    served = Served(tmp_path)
    served.parent.sendall(request("claims", [("r0", SLOT, SLOT)]))
    assert held.entered.wait(30)
    served.parent.sendall(request("claims", [("r1", SLOT, SLOT)]))
    second = tmp_path / "schedule" / "claims" / "r1" / slot_name(SLOT)
    # written beside the first batch's flush, which still waits
    wait_for(second.exists, 30, "the second batch written")
    served.parent.setblocking(False)
    with pytest.raises(BlockingIOError):  # and no answer goes out before its flush returns
        served.parent.recv(1)
    served.parent.settimeout(30)
    held.release.set()
    first_values, *_ = read_reply(served.parent)
    second_values, *_ = read_reply(served.parent)
    assert [first_values[0].status, second_values[0].status] == [ClaimStatus.TAKEN] * 2
    assert held.calls == 2  # each batch its own flush, in the order they came
    assert served.close()


class Warned(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_each_reply_carries_the_log_records_of_its_own_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, our_logger: logging.Logger
) -> None:
    served = Served(tmp_path)
    warned = Warned()
    our_logger.addHandler(warned)  # beside the child's own: says when the writes warned
    served.ask("claims", [(name, SLOT, SLOT) for name in ("r0", "r1", "r2")])
    for name in ("r1", "r2"):  # a directory squats on each claim: a settle's warning each
        squatted = tmp_path / "schedule" / "claims" / name / slot_name(SLOT)
        squatted.unlink()
        squatted.mkdir()
    held = HeldFlush()  # from here on: the claims above were flushed as ever
    monkeypatch.setattr(writerchild, "syncfs", held)
    settle = [("r0", SLOT, Outcome.COMPLETED, 5, False, None)]
    served.parent.sendall(request("settles", settle))  # written, then its flush held
    assert held.entered.wait(30)
    for name in ("r1", "r2"):  # each written (and warned) while the first flush waits
        served.parent.sendall(request("settles", [(name, SLOT, Outcome.COMPLETED, 5, False, None)]))
    wait_for(lambda: len(warned.records) == 2, 30, "both settles warned")
    held.release.set()
    replies = [read_reply(served.parent) for _ in range(3)]
    assert [values for values, _, _ in replies] == [[True], [False], [False]]
    assert replies[0][2] == []
    assert [message.split(":")[0] for _, message in replies[1][2]] == ["r1"]
    assert [message.split(":")[0] for _, message in replies[2][2]] == ["r2"]
    assert served.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_fault_in_the_flush_thread_ends_the_child_and_leaks_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("a bug of ours in the flush thread, once the batch was flushed")

    monkeypatch.setattr(writerchild, "_columns", broken)
    served = Served(tmp_path)
    before = open_fds()
    served.parent.sendall(request("claims", [("r0", SLOT, SLOT)]))
    assert served.parent.recv(1) == b""  # no answer: the child's end is shut at once
    assert served.returned.wait(30)  # and its reading thread returned, the parent's end open
    assert not open_fds() - before  # the batch's descriptor closed, the thread gone
    assert served.close()


def test_the_writes_wait_once_two_written_batches_wait_for_the_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: HeldFlush
) -> None:
    monkeypatch.setattr(writerchild, "HAND_POLL", 0.01)  # many a wait for room meanwhile
    served = Served(tmp_path)
    claims = tmp_path / "schedule" / "claims"
    for name in ("r0", "r1", "r2", "r3", "r4"):
        served.parent.sendall(request("claims", [(name, SLOT, SLOT)]))
    assert held.entered.wait(30)  # r0's flush, held
    # r1, r2 wait for it; r3 for room
    wait_for((claims / "r3" / slot_name(SLOT)).exists, 30, "r3 written")
    threading.Event().wait(0.2)  # (room is looked for every 10 ms meanwhile)
    assert not (claims / "r4").exists()  # not read while three written batches wait
    held.release.set()
    for _ in range(5):
        values, *_ = read_reply(served.parent)
        assert values[0].status is ClaimStatus.TAKEN
    assert (claims / "r4" / slot_name(SLOT)).exists()
    assert served.close()


def test_a_first_batchs_flush_sends_the_records_its_thread_made(
    tmp_path: Path, flushes: Flushes
) -> None:
    claim = tmp_path / "schedule" / "claims" / "r0" / slot_name(SLOT)
    claim.parent.mkdir(parents=True)
    claim.write_text('{"firedAt":"2026-07-07T09:00:00.000Z"}')
    flushes.failing = True  # the flush thread's warning is the first record it makes
    served = Served(tmp_path)
    values, errors, records = served.ask(
        "settles", [("r0", SLOT, Outcome.COMPLETED, 5, False, None)]
    )
    assert (values, errors) == ([False], {})
    assert records == [
        (
            logging.WARNING,
            f"r0: could not record the completed outcome of slot {format_iso(SLOT)}:"
            " EIO: Input/output error",
        )
    ]
    assert served.close()


def test_batches_written_for_a_parent_that_went_away_leave_no_descriptor_open(
    tmp_path: Path, held: HeldFlush
) -> None:
    served = Served(tmp_path)
    before = open_fds()
    claims = tmp_path / "schedule" / "claims"
    for name in ("r0", "r1", "r2"):
        served.parent.sendall(request("claims", [(name, SLOT, SLOT)]))
    assert held.entered.wait(30)
    # written: two wait for the flush
    wait_for((claims / "r2" / slot_name(SLOT)).exists, 30, "r2 written")
    served.parent.close()  # the parent goes away; the flush returns, its answer goes nowhere
    held.release.set()
    assert served.returned.wait(30)
    assert not open_fds() - before  # the two batches nobody flushes now closed too


class FailedHeldFlush(HeldFlush):
    """:class:`HeldFlush` whose first flush, once let go, fails with EIO."""

    def __call__(self, fd: int) -> None:
        super().__call__(fd)
        if self.calls == 1:
            raise OSError(errno.EIO, os.strerror(errno.EIO))


def test_a_claim_is_decided_only_once_its_routines_claim_before_it_is_flushed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A later slot's claim is written, and its flush will fail (it is taken back); an
    # earlier slot's claim for the same routine comes in the next batch (a fire asked for,
    # a second scheduler). Judged beside that flush, it would be stale by a claim that is
    # never made: it waits for the flush, and is taken.
    held = FailedHeldFlush()
    monkeypatch.setattr(writerchild, "syncfs", held)
    served = Served(tmp_path)
    later = SLOT + timedelta(minutes=1)
    served.parent.sendall(request("claims", [("r0", later, later)]))
    assert held.entered.wait(30)
    served.parent.sendall(request("claims", [("r1", SLOT, SLOT), ("r0", SLOT, SLOT)]))
    threading.Event().wait(0.2)  # (time enough to write it, were it not held back)
    assert not (tmp_path / "schedule" / "claims" / "r1").exists()  # the whole batch waits
    held.release.set()
    values, errors, _ = read_reply(served.parent)
    assert values == [None]
    assert isinstance(errors[0], StateFault)  # taken back: not durable
    values, errors, _ = read_reply(served.parent)
    assert [value.status for value in values] == [ClaimStatus.TAKEN, ClaimStatus.TAKEN]
    assert errors == {}
    assert sorted(p.name for p in (tmp_path / "schedule" / "claims" / "r0").iterdir()) == [
        slot_name(SLOT)
    ]
    assert served.close()
