"""The writer process makes spare claim files while it is idle (writer/child.py, spares.py).

Run in this process, as tests/test_pinned_writerchild.py runs the child's loop: a ``spares``
request is answered nothing, and its routines' spares are made once no request came for the
lull; each routine whose slot a batch took gets its next spare the same way; a request that
comes meanwhile waits for a few spares at most.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from procs import wait_for

from tests.test_pinned_writerchild import SLOT, Served, our_logger, request
from tests.test_pinned_writerwire import open_fds
from trio_routines.claims import SPARE_CLAIM
from trio_routines.errors import StateFault
from trio_routines.instants import slot_name
from trio_routines.records import ClaimResult, ClaimStatus
from trio_routines.stores.batch import Answer
from trio_routines.stores.directory.claimfiles import ClaimFiles
from trio_routines.stores.directory.writer import child as writerchild

__all__ = ["our_logger"]  # serve takes the logger over: given back after each test


def spare(root: Path, routine: str) -> Path:
    return root / "schedule" / "claims" / routine / SPARE_CLAIM


@pytest.fixture(autouse=True)
def short_lull(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writerchild, "LULL", 0.01)


def test_the_routines_a_boot_read_get_spares_and_no_answer(tmp_path: Path) -> None:
    for routine in ("a", "b"):
        (tmp_path / "schedule" / "claims" / routine).mkdir(parents=True)
    served = Served(tmp_path)
    served.parent.sendall(request("spares", ["a", "b"]))
    wait_for(lambda: spare(tmp_path, "a").exists() and spare(tmp_path, "b").exists())
    # the next reply read is the claims' own: the spares request had none
    values, errors, _ = served.ask("claims", [("a", SLOT, SLOT)])
    assert [value.status for value in values] == [ClaimStatus.TAKEN]
    assert errors == {}
    assert served.close()


def test_a_routine_whose_slot_was_taken_gets_its_next_spare(tmp_path: Path) -> None:
    served = Served(tmp_path)
    values, _, _ = served.ask("claims", [("r1", SLOT, SLOT), ("r2", SLOT, SLOT)])
    assert [value.status for value in values] == [ClaimStatus.TAKEN, ClaimStatus.TAKEN]
    wait_for(lambda: spare(tmp_path, "r1").exists() and spare(tmp_path, "r2").exists())
    spare(tmp_path, "r1").unlink()
    # a duplicate and a stale claim used no spare: none is made for them; a taken one is
    later = SLOT + timedelta(minutes=1)
    values, _, _ = served.ask(
        "claims", [("r1", SLOT, SLOT), ("r2", later, later), ("r1", SLOT - timedelta(1), SLOT)]
    )
    assert [value.status for value in values] == [
        ClaimStatus.DUPLICATE,
        ClaimStatus.TAKEN,
        ClaimStatus.STALE,
    ]
    wait_for(lambda: spare(tmp_path, "r2").exists())
    (tmp_path / "schedule" / "claims" / "r3").mkdir()
    served.parent.sendall(request("spares", ["r3"]))  # made after any queued before it
    wait_for(lambda: spare(tmp_path, "r3").exists())
    assert not spare(tmp_path, "r1").exists()
    assert served.close()


def test_only_the_routines_whose_slot_was_taken_have_used_their_spare() -> None:
    items = [("a", SLOT, SLOT), ("b", SLOT, SLOT), ("c", SLOT, SLOT), ("d", SLOT, SLOT)]
    answers: list[Answer[Any]] = [
        Answer(value=(ClaimResult(ClaimStatus.TAKEN, "x"), None)),
        Answer(value=(ClaimResult(ClaimStatus.DUPLICATE, "x"), None)),
        Answer(error=StateFault("no")),
        Answer(value=(ClaimResult(ClaimStatus.TAKEN, "x"), ["old"])),
    ]
    assert writerchild.taken_for(items, answers) == ["a", "d"]


class Idle:
    """``_Idle`` on one end of a socket pair, its spares recorded instead of made (with
    ``real``, made, in the claims directories of ``real``'s routines, made first)."""

    def __init__(self, root: Path, real: tuple[str, ...] = ()) -> None:
        self.parent, self.child = socket.socketpair()
        self.files = ClaimFiles(root, 3, 0.2, syncfs=True)
        self.made: list[list[str]] = []
        self.idle = writerchild._Idle(self.child, self.files)
        if real:
            for routine in real:
                (root / "schedule" / "claims" / routine).mkdir(parents=True)
        else:
            self.files.spares.make = self.record  # type: ignore[method-assign]

    def record(self, files: ClaimFiles, routines: list[str]) -> int:
        assert files is self.files
        self.made.append(list(routines))
        return len(routines)

    def close(self) -> None:
        self.parent.close()
        self.child.close()


def test_spares_are_made_a_few_at_a_time_once_the_lull_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writerchild, "SPARES_AT_ONCE", 2)
    rig = Idle(tmp_path)
    rig.idle.want(["a", "b", "c", "b", "d", "e"])
    rig.idle.until_request()  # nothing comes: every spare is made, then it returns
    assert rig.made == [["a", "b"], ["c", "d"], ["e"]]
    rig.idle.until_request()  # none left: it returns at once, to the blocking read
    assert len(rig.made) == 3
    rig.close()


def test_a_request_waits_for_one_round_of_spares_at_most(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writerchild, "SPARES_AT_ONCE", 2)
    rig = Idle(tmp_path)

    def record_then_request(files: ClaimFiles, routines: list[str]) -> int:
        rig.parent.sendall(b"x")  # a request comes while these are made
        return rig.record(files, routines)

    rig.files.spares.make = record_then_request  # type: ignore[method-assign]
    rig.idle.want(["a", "b", "c", "d"])
    rig.idle.until_request()
    assert rig.made == [["a", "b"]]  # then the request is read; the rest wait
    rig.close()


def test_no_spare_is_made_before_the_lull_passed_without_a_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writerchild, "LULL", 3600.0)
    rig = Idle(tmp_path)
    rig.idle.want(["a"])
    rig.parent.sendall(b"x")  # a request is there: read it first
    rig.idle.until_request()
    assert rig.made == []
    rig.idle.heard()
    assert rig.made == []
    monkeypatch.setattr(writerchild, "LULL", 0.0)
    rig.child.recv(1)  # read: nothing waits now
    rig.idle.until_request()
    assert rig.made == [["a"]]
    rig.close()


def test_a_request_that_came_during_the_lull_is_read_without_making_spares(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = Idle(tmp_path)
    rig.idle.heard()
    rig.idle.want(["a"])
    monkeypatch.setattr(writerchild, "LULL", 3600.0)
    rig.parent.sendall(b"x")
    rig.idle.until_request()  # returns at once: the request is there
    assert rig.made == []
    rig.close()


def test_a_claim_takes_the_spare_made_for_it_and_its_next_one_is_made(tmp_path: Path) -> None:
    for i in range(40):
        (tmp_path / "schedule" / "claims" / f"r{i}").mkdir(parents=True)
    served = Served(tmp_path)
    served.parent.sendall(request("spares", [f"r{i}" for i in range(40)]))
    wait_for(lambda: spare(tmp_path, "r39").exists())
    first = spare(tmp_path, "r5").stat().st_ino
    values, _, _ = served.ask("claims", [("r5", SLOT, SLOT)])
    assert values[0].status is ClaimStatus.TAKEN
    claim = tmp_path / "schedule" / "claims" / "r5" / slot_name(SLOT)
    assert claim.stat().st_ino == first  # the spare, renamed
    wait_for(lambda: spare(tmp_path, "r5").exists())
    assert spare(tmp_path, "r5").stat().st_ino != first
    assert served.close()


def test_the_spares_made_are_flushed_once_none_is_left_to_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushed: list[int] = []
    monkeypatch.setattr(writerchild, "syncfs", lambda fd: flushed.append(os.fstat(fd).st_ino))
    monkeypatch.setattr(writerchild, "SPARES_AT_ONCE", 2)
    rig = Idle(tmp_path, real=("a", "b", "c"))
    rig.idle.want(["a", "b", "c"])
    rig.idle.until_request()
    wait_for(lambda: flushed)
    assert flushed == [(tmp_path / "schedule" / "claims").stat().st_ino]  # once, after all
    rig.idle.want(["a", "b"])  # there already: none made, nothing to flush
    rig.idle.until_request()
    assert spare(tmp_path, "c").exists()
    assert flushed == [(tmp_path / "schedule" / "claims").stat().st_ino]
    rig.close()


def test_spares_that_cannot_be_flushed_are_left_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed: list[int] = []

    def failing(fd: int) -> None:
        failed.append(fd)
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(writerchild, "syncfs", failing)
    before = open_fds()
    rig = Idle(tmp_path, real=("a",))
    rig.idle.want(["a"])
    rig.idle.until_request()
    rig.close()
    wait_for(lambda: failed)
    wait_for(lambda: open_fds() == before)  # the thread closed its descriptor
    assert spare(tmp_path, "a").exists()


def test_spares_are_flushed_when_some_round_made_one_and_not_when_none_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushed: list[int] = []
    monkeypatch.setattr(writerchild, "syncfs", lambda fd: flushed.append(fd))
    monkeypatch.setattr(writerchild, "SPARES_AT_ONCE", 2)
    rig = Idle(tmp_path, real=("a", "b", "c"))
    (tmp_path / "schedule" / "claims" / "c" / SPARE_CLAIM).write_bytes(b"\n")
    rig.idle.want(["c"])  # there already: nothing made, nothing to flush
    rig.idle.until_request()
    rig.idle.want(["a", "b", "c"])  # two made in the first round, none in the last
    rig.idle.until_request()
    for thread in threading.enumerate():
        if thread.name == "spares":  # each flush's own, a daemon
            assert thread.daemon
            thread.join(30)
    assert len(flushed) == 1
    rig.close()
