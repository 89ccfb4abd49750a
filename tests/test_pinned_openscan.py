"""Pinned: the state directory's walk over the claims for the open ones
(stores/directory/openscan.py), driven directly with claim files written by hand.

Written for the mutation run of that module (docs/mutation.md). The walk's promise is what it
reads as much as what it finds: each claim file it reads is seen through a spy on its
``read_file``, so a later visit that reads more (or less) than the claims added since and the
ones found open before fails here.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from trio_routines.instants import format_iso, slot_name
from trio_routines.records import Fire
from trio_routines.stores.directory import openscan
from trio_routines.stores.directory.claimfiles import ClaimFiles
from trio_routines.stores.directory.openscan import OpenScan

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def slot(i: int) -> datetime:
    return T0 + i * MINUTE


def name(i: int) -> str:
    return slot_name(slot(i))


def write(root: Path, routine: str, i: int, *, open_: bool = True, replica: str = "gone") -> Path:
    """The claim of ``routine``'s slot ``i``: open and naming ``replica``, or settled."""
    record: dict[str, Any] = {"firedAt": format_iso(slot(i)), "replica": replica}
    if not open_:
        record["outcome"] = "completed"
    path = root / "schedule" / "claims" / routine / name(i)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


def scan(root: Path) -> OpenScan:
    return OpenScan(ClaimFiles(root, 512, 10.0, None))


def found(result: list[tuple[str, Fire]]) -> list[tuple[str, datetime]]:
    return [(routine, fire.slot) for routine, fire in result]


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the claim files the walk reads (or tries to), in order."""
    seen: list[str] = []
    real = openscan.read_file

    def spy(directory: int, claim: str, where: Path, limit: int) -> bytes:
        seen.append(claim)
        return real(directory, claim, where, limit)

    monkeypatch.setattr(openscan, "read_file", spy)
    return seen


def test_a_later_visit_reads_only_the_claims_added_since_and_those_found_open(
    tmp_path: Path, reads: list[str]
) -> None:
    write(tmp_path, "a", 0, open_=False)
    write(tmp_path, "a", 1)
    write(tmp_path, "a", 2, open_=False)
    walk = scan(tmp_path)
    assert found(walk.step(["a"], 100)) == [("a", slot(1))]
    assert reads == [name(2), name(1), name(0)]  # newest first
    write(tmp_path, "a", 3, open_=False)
    write(tmp_path, "a", 4)
    reads.clear()
    assert found(walk.step(["a"], 100)) == [("a", slot(4)), ("a", slot(1))]
    assert reads == [name(4), name(3), name(1)]
    reads.clear()
    assert found(walk.step(["a"], 100)) == [("a", slot(4)), ("a", slot(1))]
    assert reads == [name(4), name(1)]


def test_a_claim_settled_or_refused_since_it_was_found_is_read_no_more(
    tmp_path: Path, reads: list[str]
) -> None:
    write(tmp_path, "a", 0)
    write(tmp_path, "a", 1)
    walk = scan(tmp_path)
    assert found(walk.step(["a"], 100)) == [("a", slot(1)), ("a", slot(0))]
    write(tmp_path, "a", 1, open_=False)
    claim = tmp_path / "schedule" / "claims" / "a" / name(0)
    claim.unlink()
    claim.mkdir()  # not a claim file: refused, nothing to settle
    reads.clear()
    assert walk.step(["a"], 100) == []
    assert reads == [name(1), name(0)]
    reads.clear()
    assert walk.step(["a"], 100) == []
    assert reads == []


def test_a_refused_claim_does_not_end_the_visit(tmp_path: Path) -> None:
    write(tmp_path, "a", 0)
    (tmp_path / "schedule" / "claims" / "a" / name(1)).mkdir()
    write(tmp_path, "a", 2)
    walk = scan(tmp_path)
    assert found(walk.step(["a"], 100)) == [("a", slot(2)), ("a", slot(0))]


def test_each_listing_and_each_claim_read_costs_one_unit_of_the_budget(tmp_path: Path) -> None:
    for i in range(4):
        write(tmp_path, "a", i)
    walk = scan(tmp_path)
    assert found(walk.step(["a"], 3)) == [("a", slot(3)), ("a", slot(2))]
    assert found(walk.step(["a"], 2)) == [("a", slot(1)), ("a", slot(0))]
    # That visit is over: the next one lists again (one unit) and reads the open ones.
    assert found(walk.step(["a"], 2)) == [("a", slot(3))]


def test_every_routine_is_visited_once_per_call_in_turn(tmp_path: Path) -> None:
    for routine in ("a", "b", "c"):
        write(tmp_path, routine, 0)
    walk = scan(tmp_path)
    assert found(walk.step(["a", "b", "c"], 100)) == [
        ("a", slot(0)),
        ("b", slot(0)),
        ("c", slot(0)),
    ]
    # One unit: a listing and no read; the next call goes on with that visit first.
    assert walk.step(["a", "b", "c"], 1) == []
    assert found(walk.step(["a", "b", "c"], 2)) == [("a", slot(0))]


def test_a_visit_under_way_of_a_routine_dropped_is_given_up(tmp_path: Path) -> None:
    for i in range(3):
        write(tmp_path, "a", i)
    write(tmp_path, "b", 0)
    walk = scan(tmp_path)
    assert found(walk.step(["a", "b"], 2)) == [("a", slot(2))]
    assert found(walk.step(["b"], 100)) == [("b", slot(0))]


def test_a_routine_dropped_and_named_again_is_read_whole_again(
    tmp_path: Path, reads: list[str]
) -> None:
    for i in range(3):
        write(tmp_path, "a", i, open_=False)
    write(tmp_path, "b", 0, open_=False)
    walk = scan(tmp_path)
    assert walk.step(["a"], 100) == []
    assert walk.step(["b"], 100) == []
    reads.clear()
    assert walk.step(["a"], 100) == []
    assert reads == [name(2), name(1), name(0)]


def test_a_claims_directory_removed_and_made_again_is_read_whole_again(
    tmp_path: Path,
) -> None:
    write(tmp_path, "a", 5, open_=False)
    walk = scan(tmp_path)
    assert walk.step(["a"], 100) == []
    (tmp_path / "schedule" / "claims" / "a" / name(5)).unlink()
    (tmp_path / "schedule" / "claims" / "a").rmdir()
    assert walk.step(["a"], 100) == []
    write(tmp_path, "a", 1)  # older than the newest seen before: read only from the start
    assert found(walk.step(["a"], 100)) == [("a", slot(1))]


def test_a_routine_whose_claims_appear_later_is_found_then(tmp_path: Path) -> None:
    walk = scan(tmp_path)
    assert walk.step(["a"], 100) == []
    assert walk.step(["a"], 100) == []
    write(tmp_path, "a", 0)
    assert found(walk.step(["a"], 100)) == [("a", slot(0))]
    write(tmp_path, "b", 0)  # beside one that has none yet
    assert found(walk.step(["c", "b"], 100)) == [("b", slot(0))]


@pytest.mark.parametrize("at_open", [1, 2], ids=["listing", "reads"])
def test_a_claims_directory_gone_during_a_visit_is_read_whole_once_it_is_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at_open: int
) -> None:
    # Gone at its listing or between it and its reads, and made again: the floor its last
    # whole visit set goes with it, and an older claim made since is found.
    write(tmp_path, "a", 0, open_=False)
    write(tmp_path, "a", 2, open_=False)
    walk = scan(tmp_path)
    assert walk.step(["a"], 100) == []  # read whole: its floor is slot 2
    files = walk._files
    real = files.open_claims
    opens = {"n": 0}

    def open_claims(routine: str, **kwargs: Any) -> int:
        opens["n"] += 1
        if opens["n"] == at_open:
            raise FileNotFoundError(errno.ENOENT, "gone")
        return real(routine, **kwargs)

    monkeypatch.setattr(files, "open_claims", open_claims)
    assert walk.step(["a"], 100) == []
    monkeypatch.setattr(files, "open_claims", real)
    write(tmp_path, "a", 1)  # below the floor it had
    assert found(walk.step(["a"], 100)) == [("a", slot(1))]


def test_an_empty_claims_directory_finds_nothing(tmp_path: Path) -> None:
    (tmp_path / "schedule" / "claims" / "a").mkdir(parents=True)
    walk = scan(tmp_path)
    assert walk.step(["a"], 100) == []
    write(tmp_path, "a", 0)
    assert found(walk.step(["a"], 100)) == [("a", slot(0))]


def failing_for(path: Path, call: Any) -> tuple[Any, dict[str, bool]]:
    """``call`` (``os.listdir`` or ``os.read``, given a descriptor first) failing with EIO
    for the descriptors of ``path`` while the returned switch is on."""
    on = {"on": True}

    def spied(fd: int, *args: Any) -> Any:
        if on["on"] and os.readlink(f"/proc/self/fd/{fd}") == str(path):
            raise OSError(errno.EIO, "I/O error")
        return call(fd, *args)

    return spied, on


def unlistable_a(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[OpenScan, Path, dict[str, bool]]:
    """A walk of routine ``a`` (one open claim) whose claims directory fails to list (EIO)
    while the switch is on: the walk, the directory, the switch."""
    write(tmp_path, "a", 0)
    where = tmp_path / "schedule" / "claims" / "a"
    listdir, switch = failing_for(where, os.listdir)
    monkeypatch.setattr(os, "listdir", listdir)
    return scan(tmp_path), where, switch


def test_a_claims_directory_that_cannot_be_listed_is_passed_over_and_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path, "b", 0)
    walk, where, switch = unlistable_a(tmp_path, monkeypatch)
    with caplog.at_level(logging.DEBUG, logger="trio_routines"):
        assert found(walk.step(["a", "b"], 100)) == [("b", slot(0))]  # b's are still found
        walk.step(["a", "b"], 100)
    said = (
        "the open claims of a could not be checked (its next visit tries again): EIO: I/O "
        f"error: {where}"
    )
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", said),
        ("DEBUG", said),  # the same fault again: said once
    ]
    switch["on"] = False
    assert found(walk.step(["a", "b"], 100)) == [("a", slot(0)), ("b", slot(0))]


def test_a_claim_that_cannot_be_read_is_passed_over_and_its_visit_sets_no_floor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(3):
        write(tmp_path, "a", i)
    write(tmp_path, "b", 0)
    read, switch = failing_for(tmp_path / "schedule" / "claims" / "a" / name(1), os.read)
    monkeypatch.setattr(os, "read", read)
    walk = scan(tmp_path)
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        # Newest first: slot 2 is found, slot 1 fails, slot 0 and b's are found all the same.
        assert found(walk.step(["a", "b"], 100)) == [("a", slot(2)), ("a", slot(0)), ("b", slot(0))]
        assert found(walk.step(["a"], 100)) == [("a", slot(2)), ("a", slot(0))]  # said once
    assert caplog.messages == [
        "the open claims of a could not be checked (its next visit tries again): EIO: I/O "
        f"error: {tmp_path / 'schedule' / 'claims' / 'a' / name(1)}"
    ]
    switch["on"] = False
    # Read whole again: the visits that passed it over set no floor above it.
    assert found(walk.step(["a"], 100)) == [("a", slot(2)), ("a", slot(1)), ("a", slot(0))]
    write(tmp_path, "a", 3, open_=False)  # a whole visit's floor: only the new, and the open
    assert found(walk.step(["a"], 100)) == [("a", slot(2)), ("a", slot(1)), ("a", slot(0))]


@pytest.mark.parametrize("gone", [False, True], ids=["mended", "gone-and-back"])
def test_a_visit_that_read_every_claim_after_one_was_passed_over_sets_the_floor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reads: list[str], gone: bool
) -> None:
    for i in range(3):
        write(tmp_path, "a", i, open_=False)
    where = tmp_path / "schedule" / "claims" / "a"
    read, switch = failing_for(where / name(1), os.read)
    monkeypatch.setattr(os, "read", read)
    walk = scan(tmp_path)
    # Slot 1 passed over: no floor. Gone and back: gone in the middle of that visit (its
    # budget spent at slot 1), forgotten then.
    assert walk.step(["a"], 3 if gone else 100) == []
    if gone:  # removed (forgotten) and made again
        for i in range(3):
            (where / name(i)).unlink()
        where.rmdir()
        assert walk.step(["a"], 100) == []
        for i in range(3):
            write(tmp_path, "a", i, open_=False)
    switch["on"] = False
    reads.clear()
    assert walk.step(["a"], 100) == []
    assert reads == [name(2), name(1), name(0)]  # whole, once more
    reads.clear()
    assert walk.step(["a"], 100) == []
    assert reads == []  # then its floor holds


def test_a_fault_that_ends_and_comes_again_is_said_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    walk, where, switch = unlistable_a(tmp_path, monkeypatch)
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        walk.step(["a"], 100)
        switch["on"] = False
        assert found(walk.step(["a"], 100)) == [("a", slot(0))]  # read whole: mended
        switch["on"] = True
        walk.step(["a"], 100)
        (where / name(0)).unlink()
        where.rmdir()
        walk.step(["a"], 100)  # gone: forgotten
        write(tmp_path, "a", 0)
        walk.step(["a"], 100)  # back, and failing again
    assert len(caplog.messages) == 3  # once, once more after it was mended, and after it went


def test_a_routine_whose_claims_are_no_directory_is_passed_over_by_name(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path, "b", 0)
    (tmp_path / "schedule" / "claims" / "a").write_text("")
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert found(scan(tmp_path).step(["a", "b"], 100)) == [("b", slot(0))]
    assert caplog.messages == [
        "the open claims of a could not be checked (its next visit tries again): ENOTDIR: Not "
        f"a directory: {tmp_path / 'schedule' / 'claims' / 'a'}"
    ]


@pytest.mark.parametrize("error", [errno.EIO, errno.ENOENT])
def test_a_claims_directory_that_goes_between_its_listing_and_its_reads_sets_no_floor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, error: int
) -> None:
    # Unreadable (EIO), or gone and made again (ENOENT): its claims are all read at a later
    # visit, none taken for read below a floor the failed visit set.
    for i in range(3):
        write(tmp_path, "a", i)
    walk = scan(tmp_path)
    files = walk._files
    real = files.open_claims
    opens = {"n": 0}

    def open_claims(routine: str, **kwargs: Any) -> int:
        opens["n"] += 1
        if opens["n"] == 2:  # the visit's reads, after its listing
            raise OSError(error, os.strerror(error))
        return real(routine, **kwargs)

    monkeypatch.setattr(files, "open_claims", open_claims)
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert walk.step(["a"], 100) == []
    assert found(walk.step(["a"], 100)) == [("a", slot(2)), ("a", slot(1)), ("a", slot(0))]
    if error == errno.EIO:  # said, by its routine (a directory gone is no fault)
        assert caplog.messages == [
            "the open claims of a could not be checked (its next visit tries again): EIO: "
            f"{os.strerror(errno.EIO)}"
        ]
    else:
        assert caplog.messages == []


def test_a_claims_root_that_cannot_be_opened_is_the_walks_error(tmp_path: Path) -> None:
    (tmp_path / "schedule").mkdir()
    (tmp_path / "schedule" / "claims").write_text("not a directory")
    with pytest.raises(NotADirectoryError) as caught:
        scan(tmp_path).step(["a"], 100)
    assert caught.value.filename == str(tmp_path / "schedule" / "claims")


def test_a_claims_root_removed_starts_the_walk_afresh(tmp_path: Path) -> None:
    write(tmp_path, "a", 5)
    walk = scan(tmp_path)
    assert found(walk.step(["a"], 100)) == [("a", slot(5))]
    root = tmp_path / "schedule" / "claims"
    (root / "a" / name(5)).unlink()
    (root / "a").rmdir()
    root.rmdir()
    assert walk.step(["a"], 100) == []
    write(tmp_path, "a", 1)  # below the floor the walk had: read, since it started afresh
    assert found(walk.step(["a"], 100)) == [("a", slot(1))]


def test_a_claim_is_read_leniently_and_its_oddities_name_its_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "schedule" / "claims" / "a" / name(0)
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"firedAt": "not an instant", "replica": "r\xff"}')
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        result = scan(tmp_path).step(["a"], 100)
    assert [(routine, fire.slot, fire.fired_at, fire.replica) for routine, fire in result] == [
        ("a", slot(0), slot(0), "r\ufffd")
    ]
    assert f"claim {path} carries an unreadable stamp" in caplog.text
