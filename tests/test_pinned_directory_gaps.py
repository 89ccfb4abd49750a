"""Pinned: the state directory's gaps file and the lock its writers take
(stores/directory/gaps.py), called directly.

Written for the mutation run of that module (docs/mutation.md): which claims keep a ``store``
gap from being written, the lock file (held here from a descriptor of this process's own,
which conflicts as another process's would), and the path each warning and fault names.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from oserrors import fail_directory_fsyncs

from trio_routines.errors import StateFault
from trio_routines.instants import slot_name
from trio_routines.records import Gap, GapReason
from trio_routines.stores import safefile
from trio_routines.stores.directory import gaps
from trio_routines.stores.directory.gaps import gaps_sync, record_gap_sync

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
LIMIT = 1 << 20  # the largest lock file taken for ours


def slot(i: int) -> datetime:
    return T0 + i * MINUTE


def gap(first: int, last: int, reason: GapReason = GapReason.STORE) -> Gap:
    return Gap(slot(first), slot(last), last - first + 1, reason)


def claim(root: Path, routine: str, i: int) -> None:
    path = root / "schedule" / "claims" / routine / slot_name(slot(i))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")  # whatever it holds, an entry named as a slot is a claim


def gaps_file(root: Path, routine: str = "r") -> Path:
    path = root / "schedule" / "gaps" / routine
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "state"


def test_a_store_gap_of_a_routine_never_claimed_is_recorded(root: Path) -> None:
    assert record_gap_sync(root, "r", gap(1, 3), None) is True
    assert gaps_sync(root, "r") == [gap(1, 3)]


@pytest.mark.parametrize("claimed", [1, 2, 3])
def test_a_store_gap_with_a_claim_from_its_first_slot_to_its_last_is_not_written(
    root: Path, claimed: int
) -> None:
    claim(root, "r", claimed)
    assert record_gap_sync(root, "r", gap(1, 3), None) is False
    assert gaps_sync(root, "r") == []
    assert not (root / "schedule" / "gaps").exists()


def test_a_store_gap_with_claims_only_around_it_is_recorded(root: Path) -> None:
    claim(root, "r", 0)
    claim(root, "r", 4)
    claim(root, "other", 2)
    assert record_gap_sync(root, "r", gap(1, 3), None) is True
    assert gaps_sync(root, "r") == [gap(1, 3)]


def test_a_gap_of_another_reason_is_recorded_whatever_was_claimed(root: Path) -> None:
    claim(root, "r", 2)
    assert record_gap_sync(root, "r", gap(1, 3, GapReason.PAUSED), None) is True
    assert gaps_sync(root, "r") == [gap(1, 3, GapReason.PAUSED)]


def aside(root: Path, routine: str = "r") -> list[Path]:
    return sorted((root / "schedule" / "gaps").glob(f"{routine}.corrupt-*"))


def test_a_gaps_file_that_is_not_json_is_named_and_kept_aside_by_the_next_write(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A torn file (a gap readable by hand in it) was written over by the next gap: every
    # gap it held was lost.
    path = gaps_file(root)
    torn = '[{"from":"2026-07-07T10:01:00.000Z","to":"2026-07-07T10:01:00.000Z","count":1,'
    path.write_text(torn)
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert gaps_sync(root, "r") == []
    assert caplog.messages == [f"ignoring the gaps in {path}: not a JSON array of gaps"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert record_gap_sync(root, "r", gap(2, 2), None) is True
    (kept,) = aside(root)
    assert kept.read_text() == torn
    # The damage was said by the read before: the write says only where it kept the file.
    assert caplog.messages == [f"kept the damaged gaps file {path} as {kept}"]
    assert gaps_sync(root, "r") == [gap(2, 2)]
    assert record_gap_sync(root, "r", gap(3, 3), None) is True  # whole now: nothing more aside
    assert aside(root) == [kept]


def test_the_same_damage_is_said_once_a_different_one_again_and_a_mended_file_is_forgotten(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = gaps_file(root)
    other = gaps_file(root, "other")
    not_json = f"ignoring the gaps in {path}: not a JSON array of gaps"
    stored = {"from": "2026-07-07T10:01:00.000Z", "to": "2026-07-07T10:01:00.000Z", "count": 1}
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        path.write_text("[")
        other.write_text("[")
        for _ in range(3):
            assert gaps_sync(root, "r") == []
        assert caplog.messages == [not_json]
        assert gaps_sync(root, "other") == []  # another file's damage is its own
        assert caplog.messages[1:] == [f"ignoring the gaps in {other}: not a JSON array of gaps"]
        caplog.clear()
        path.write_text(json.dumps([42]))  # a different damage of the same file
        assert gaps_sync(root, "r") == []
        assert gaps_sync(root, "r") == []
        (said,) = caplog.messages
        assert said.startswith(f"ignoring a gap in {path} that cannot be read: ")
        caplog.clear()
        path.write_text("[")  # the first damage again, after another: said again
        assert gaps_sync(root, "r") == []
        path.write_text(json.dumps([stored | {"reason": "store"}]))
        assert gaps_sync(root, "r") == [gap(1, 1)]
        path.write_text("[")  # damaged again after a clean read: said again
        assert gaps_sync(root, "r") == []
    assert caplog.messages == [not_json, not_json]


def test_a_damaged_gaps_file_of_a_long_name_is_kept_aside_under_a_name_that_fits(
    root: Path,
) -> None:
    # <name>.corrupt-<instant>-<hex> is 38 bytes longer than the name: past 217 bytes it was
    # ENAMETOOLONG, and no gap of the routine was ever recorded again.
    # 252 bytes, the longest name a routine may have; the last cut inside a character.
    for name in ("g" * 240, "é" * 126, "g" + "é" * 125):
        path = root / "schedule" / "gaps" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("garbage")
        assert record_gap_sync(root, name, gap(2, 2), None) is True
        assert gaps_sync(root, name) == [gap(2, 2)]
        (kept,) = [p for p in path.parent.iterdir() if ".corrupt-" in p.name]
        assert kept.read_text() == "garbage"
        assert len(kept.name.encode()) <= 255
        assert kept.name.startswith(name[:100])  # whose it was
        kept.unlink()


def test_a_directory_where_a_gaps_file_belongs_is_moved_aside_by_the_next_write(
    root: Path,
) -> None:
    # A directory cannot be linked aside (EPERM) nor written over: no gap of the routine was
    # ever recorded again.
    path = gaps_file(root)
    (path / "inside").mkdir(parents=True)
    assert gaps_sync(root, "r") == []
    assert record_gap_sync(root, "r", gap(2, 2), None) is True
    assert gaps_sync(root, "r") == [gap(2, 2)]
    (kept,) = aside(root)
    assert (kept / "inside").is_dir()  # kept as it was


def test_a_file_that_cannot_be_linked_is_not_moved(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # EPERM from a file (a file system refusing hard links): the write fails, naming it, and
    # nothing is moved.
    path = gaps_file(root)
    path.write_text("garbage")

    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(safefile.os, "link", refuse)
    with pytest.raises(StateFault, match=r"EPERM: Operation not permitted: .*r\.corrupt-"):
        record_gap_sync(root, "r", gap(2, 2), None)
    assert path.read_text() == "garbage"
    assert aside(root) == []


def test_a_gaps_file_with_an_entry_that_is_not_a_gap_is_kept_aside_by_the_next_write(
    root: Path,
) -> None:
    path = gaps_file(root)
    readable = {"from": "2026-07-07T10:01:00.000Z", "to": "2026-07-07T10:01:00.000Z"}
    original = json.dumps([{**readable, "count": 1, "reason": "store"}, {"count": "many"}])
    path.write_text(original)
    assert record_gap_sync(root, "r", gap(2, 2), None) is True
    (kept,) = aside(root)
    assert kept.read_text() == original
    assert gaps_sync(root, "r") == [gap(1, 1), gap(2, 2)]  # the readable one carried on


def test_a_gaps_file_that_is_a_link_is_renamed_aside_its_target_untouched(
    root: Path, tmp_path: Path
) -> None:
    path = gaps_file(root)
    target = tmp_path / "elsewhere"
    target.write_text("[]")
    path.symlink_to(target)
    assert record_gap_sync(root, "r", gap(2, 2), None) is True
    (kept,) = aside(root)
    assert kept.is_symlink()
    assert target.read_text() == "[]"
    assert not path.is_symlink()
    assert gaps_sync(root, "r") == [gap(2, 2)]


def test_a_gaps_file_that_is_a_link_is_refused_naming_it(
    root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = gaps_file(root)
    (tmp_path / "elsewhere").write_text("[]")
    path.symlink_to(tmp_path / "elsewhere")
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert gaps_sync(root, "r") == []
    assert caplog.messages == [
        f"ignoring the gaps in {path}: {path} is a symbolic link, not a regular file — refused;"
        " remove it"
    ]


def test_an_entry_that_is_not_a_gap_is_left_out_naming_the_file_and_why(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = gaps_file(root)
    stored = {"from": "2026-07-07T10:01:00.000Z", "to": "2026-07-07T10:01:00.000Z"}
    path.write_text(json.dumps([42, stored | {"count": 1, "reason": "store"}]))
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert gaps_sync(root, "r") == [gap(1, 1)]
    assert caplog.messages == [
        f"ignoring a gap in {path} that cannot be read: a gap must be an object"
    ]


def test_gaps_that_cannot_be_opened_are_a_fault_naming_them(root: Path) -> None:
    (root / "schedule").mkdir(parents=True)
    (root / "schedule" / "gaps").write_text("")
    where = root / "schedule" / "gaps"
    with pytest.raises(StateFault) as caught:
        gaps_sync(root, "r")
    assert str(caught.value) == (
        f"the gaps of 'r' are unreadable: ENOTDIR: Not a directory: {where}"
    )
    with pytest.raises(StateFault) as caught:
        record_gap_sync(root, "r", gap(1, 1, GapReason.PAUSED), None)
    assert str(caught.value) == (
        f"could not record a gap of 'r': ENOTDIR: Not a directory: {where}"
    )


def test_a_gaps_file_that_cannot_be_read_is_a_fault_naming_it(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = gaps_file(root)
    path.write_text("[]")

    def read(_fd: int, _n: int) -> bytes:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "read", read)
    with pytest.raises(StateFault) as caught:
        gaps_sync(root, "r")
    assert str(caught.value) == f"the gaps of 'r' are unreadable: EIO: I/O error: {path}"


def test_a_writer_waits_for_the_gaps_lock_and_says_so_when_it_stays_held(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_gap_sync(root, "r", gap(1, 1, GapReason.PAUSED), None)  # makes the lock file
    lock = root / "schedule" / "gaps.lock"
    (tmp_path / "gaps.lock").write_text("")  # not ours: only the one in schedule/ counts
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(gaps, "LOCK_SECONDS", 0.05)
    held = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(StateFault) as caught:
            record_gap_sync(root, "r", gap(3, 3, GapReason.PAUSED), None)
    finally:
        os.close(held)
    assert str(caught.value) == (f"could not record a gap of 'r': {lock} stayed locked for 0.05 s")
    assert gaps_sync(root, "r") == [gap(1, 1, GapReason.PAUSED)]


@pytest.mark.parametrize("meanwhile", [False, True])
@pytest.mark.parametrize("planted", ["full", "too large", "link"])
def test_a_lock_file_of_any_size_is_used_and_never_through_a_link(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, meanwhile: bool, planted: str
) -> None:
    """The lock file found in place, or made by another process between the look for it and
    the create (``meanwhile``)."""
    lock = root / "schedule" / "gaps.lock"
    lock.parent.mkdir(parents=True)

    def plant() -> None:
        if planted == "link":
            (tmp_path / "elsewhere").write_text("")
            lock.symlink_to(tmp_path / "elsewhere")
        else:
            lock.write_bytes(b"x" * (LIMIT + (planted == "too large")))

    if meanwhile:
        create = safefile.create_file

        def racing(schedule: int, name: str, path: Path) -> int:
            plant()
            return create(schedule, name, path)

        monkeypatch.setattr(safefile, "create_file", racing)
    else:
        plant()
    if planted != "link":  # a lock file is never read: one grown large locks as well
        assert record_gap_sync(root, "r", gap(1, 1, GapReason.PAUSED), None) is True
        assert lock.stat().st_size == LIMIT + (planted == "too large")
        return
    with pytest.raises(StateFault) as caught:
        record_gap_sync(root, "r", gap(1, 1, GapReason.PAUSED), None)
    why = f"{lock} is a symbolic link, not a regular file — refused; remove it"
    assert str(caught.value) == f"could not record a gap of 'r': {why}"


def test_a_lock_file_that_cannot_be_made_is_a_fault_naming_it(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / "schedule").mkdir(parents=True)
    real = os.open

    def failing(path: str, flags: int, *args: object, **kwargs: object) -> int:
        if flags & os.O_CREAT and path == "gaps.lock":
            raise OSError(errno.EIO, "I/O error")
        return real(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", failing)
    with pytest.raises(StateFault) as caught:
        record_gap_sync(root, "r", gap(1, 1, GapReason.PAUSED), None)
    lock = root / "schedule" / "gaps.lock"
    assert str(caught.value) == f"could not record a gap of 'r': EIO: I/O error: {lock}"


def test_a_gaps_directory_that_cannot_be_flushed_is_a_fault_naming_it(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gaps_file(root)  # the directories made: only the write's flush is left to fail
    fail_directory_fsyncs(monkeypatch)
    with pytest.raises(StateFault) as caught:
        record_gap_sync(root, "r", gap(1, 1, GapReason.PAUSED), None)
    where = root / "schedule" / "gaps"
    assert str(caught.value) == f"could not record a gap of 'r': EIO: I/O error: {where}"
