"""Spare claim files (stores/directory/spares.py): a claim renames its routine's spare.

A claim that finds a spare writes its text over the spare's and renames it to its slot's
name; one that finds none, or one it cannot trust (a link, a FIFO, a directory, a hard link
to some other file), or a file system that cannot rename without replacing, makes its own file
as before. Readers pass over a spare without a word.
"""

from __future__ import annotations

import errno
import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from trio_routines.claims import SPARE_CLAIM, claim_names
from trio_routines.converter import claim_text
from trio_routines.instants import slot_name
from trio_routines.records import ClaimStatus
from trio_routines.stores.directory import DirectoryStore, spares
from trio_routines.stores.directory.blocking import read_claims
from trio_routines.stores.directory.claimbatch import CLAIM_LIMIT
from trio_routines.stores.directory.claimfiles import NEW_CLAIM, ClaimFiles
from trio_routines.stores.safefile import open_dirs

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
T1 = T0 + timedelta(minutes=1)
T2 = T1 + timedelta(minutes=1)


def files_in(root: Path, keep: int = 512) -> ClaimFiles:
    return ClaimFiles(root, keep, 1.0, syncfs=None)  # each claim fsynced: nothing pending


def routine_dir(root: Path, routine: str = "r0") -> Path:
    return root / "schedule" / "claims" / routine


def make(files: ClaimFiles, *routines: str) -> int:
    """The spares of ``routines``, whose claims directories are made first."""
    for routine in routines:
        routine_dir(files.root, routine).mkdir(parents=True, exist_ok=True)
    return files.spares.make(files, list(routines))


def claim(files: ClaimFiles, slot: datetime, routine: str = "r0") -> ClaimStatus:
    result, pending = files.create(routine, slot, slot, "host:1")
    assert pending is None
    return result.status


def stat_failing_for(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """``os.stat`` of ``name`` (and of nothing else) fails with EIO until the patch is undone."""
    real = os.stat

    def failing(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if path == name:
            raise OSError(errno.EIO, os.strerror(errno.EIO), path)
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", failing)


def rename_failing(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    """Every rename of a spare fails with ``code``."""

    def failing(directory: int, old: bytes, new: bytes) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(spares, "rename_new", failing)


def test_a_claim_renames_its_routines_spare_and_leaves_no_spare_behind(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = files_in(tmp_path)
    assert make(files, "r0") == 1
    spare = routine_dir(tmp_path) / SPARE_CLAIM
    assert spare.read_bytes() == spares.BLANK
    made = spare.stat().st_ino
    assert claim(files, T0) is ClaimStatus.TAKEN
    taken = routine_dir(tmp_path) / slot_name(T0)
    assert taken.stat().st_ino == made  # the very file, renamed
    assert taken.read_bytes() == claim_text(T0, replica="host:1").encode()
    assert sorted(os.listdir(routine_dir(tmp_path))) == [slot_name(T0)]
    # the next claim has no spare: it makes its own file, and looks for none
    assert claim(files, T1) is ClaimStatus.TAKEN
    assert (routine_dir(tmp_path) / slot_name(T1)).read_bytes() == claim_text(
        T1, replica="host:1"
    ).encode()
    with caplog.at_level(logging.DEBUG, logger="trio_routines"):
        assert claim(files, T2) is ClaimStatus.TAKEN
    assert "spare" not in caplog.text


def test_a_spare_longer_than_the_claim_is_cut_to_the_claims_text(tmp_path: Path) -> None:
    files = files_in(tmp_path)
    routine_dir(tmp_path).mkdir(parents=True)
    (routine_dir(tmp_path) / SPARE_CLAIM).write_bytes(b"x" * 3000)
    assert claim(files, T0) is ClaimStatus.TAKEN
    taken = routine_dir(tmp_path) / slot_name(T0)
    assert taken.read_bytes() == claim_text(T0, replica="host:1").encode()
    assert read_claims(files, "r0")[0].replica == "host:1"


def test_a_spare_is_made_once_and_kept_until_a_claim_takes_it(tmp_path: Path) -> None:
    files = files_in(tmp_path)
    assert make(files, "r0", "r1", "r0") == 2
    made = (routine_dir(tmp_path) / SPARE_CLAIM).stat().st_ino
    assert files.spares.make(files, ["r0"]) == 0
    assert (routine_dir(tmp_path) / SPARE_CLAIM).stat().st_ino == made
    assert (routine_dir(tmp_path, "r1") / SPARE_CLAIM).read_bytes() == spares.BLANK
    assert not [name for name in os.listdir(routine_dir(tmp_path)) if name.startswith(NEW_CLAIM)]


def test_a_duplicate_or_stale_claim_leaves_the_spare_as_it_was(tmp_path: Path) -> None:
    files = files_in(tmp_path)
    assert claim(files, T1) is ClaimStatus.TAKEN
    make(files, "r0")
    made = (routine_dir(tmp_path) / SPARE_CLAIM).stat().st_ino
    assert claim(files, T1) is ClaimStatus.DUPLICATE
    assert claim(files, T0) is ClaimStatus.STALE
    assert (routine_dir(tmp_path) / SPARE_CLAIM).stat().st_ino == made
    assert (routine_dir(tmp_path) / SPARE_CLAIM).read_bytes() == spares.BLANK


def test_the_spare_is_no_claim_for_the_gate_nor_for_the_pruning(tmp_path: Path) -> None:
    files = files_in(tmp_path, keep=2)
    claim(files, T0)
    claim(files, T1)
    make(files, "r0")
    assert claim(files, T2) is ClaimStatus.TAKEN  # T1 is the newest, not the spare
    assert sorted(os.listdir(routine_dir(tmp_path))) == [slot_name(T1), slot_name(T2)]


def take_into(tmp_path: Path, name: str) -> int | None:
    """:meth:`Spares.take` of routine r0's spare under ``name``, as a claim calls it."""
    files = files_in(tmp_path)
    directory = open_dirs(tmp_path, ("schedule", "claims", "r0"))
    try:
        return files.spares.take(directory, routine_dir(tmp_path), name, b"claim\n")
    finally:
        os.close(directory)


def test_a_spare_whose_slot_name_is_taken_stays_a_spare(tmp_path: Path) -> None:
    files = files_in(tmp_path)
    make(files, "r0")
    (routine_dir(tmp_path) / slot_name(T0)).write_bytes(b"theirs\n")
    with pytest.raises(FileExistsError):
        take_into(tmp_path, slot_name(T0))
    assert (routine_dir(tmp_path) / slot_name(T0)).read_bytes() == b"theirs\n"
    assert (routine_dir(tmp_path) / SPARE_CLAIM).is_file()


def test_a_spare_taken_returns_the_claims_descriptor_open_for_writing(tmp_path: Path) -> None:
    files = files_in(tmp_path)
    make(files, "r0")
    fd = take_into(tmp_path, slot_name(T0))
    assert fd is not None
    try:
        assert os.fstat(fd).st_ino == (routine_dir(tmp_path) / slot_name(T0)).stat().st_ino
        os.write(fd, b"more\n")  # open for writing, at the claim's end
    finally:
        os.close(fd)
    assert (routine_dir(tmp_path) / slot_name(T0)).read_bytes() == b"claim\nmore\n"


def plant(tmp_path: Path, kind: str, outside: Path) -> None:
    spare = routine_dir(tmp_path) / SPARE_CLAIM
    routine_dir(tmp_path).mkdir(parents=True)
    if kind == "symlink":
        spare.symlink_to(outside)
    elif kind == "hard link":
        os.link(outside, spare)
    elif kind == "fifo":
        os.mkfifo(spare)
    else:
        spare.mkdir()


@pytest.mark.parametrize("kind", ["symlink", "hard link", "fifo", "directory"])
def test_a_spare_that_is_not_a_file_of_its_own_is_left_alone_and_the_claim_is_made(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    outside = tmp_path / "outside"
    outside.write_bytes(b"not yours\n")
    plant(tmp_path / "state", kind, outside)
    files = files_in(tmp_path / "state")
    with caplog.at_level(logging.DEBUG, logger="trio_routines"):
        assert claim(files, T0) is ClaimStatus.TAKEN
    taken = routine_dir(tmp_path / "state") / slot_name(T0)
    assert not taken.is_symlink()
    assert taken.read_bytes() == claim_text(T0, replica="host:1").encode()
    assert outside.read_bytes() == b"not yours\n"
    assert os.path.lexists(routine_dir(tmp_path / "state") / SPARE_CLAIM)  # left as it was
    assert files.spares.usable  # a planted spare says nothing of the file system
    where = routine_dir(tmp_path / "state")
    said = {
        "symlink": f"{where}: the spare claim file is unusable: ELOOP: Too many levels of "
        f"symbolic links: {SPARE_CLAIM}",
        "hard link": f"{where}: the spare claim file is not a file of ours alone",
        "fifo": f"{where}: the spare claim file is unusable: ENXIO: No such device or address: "
        f"{SPARE_CLAIM}",
        "directory": f"{where}: the spare claim file is unusable: EISDIR: Is a directory: "
        f"{SPARE_CLAIM}",
    }
    assert said[kind] in [record.getMessage() for record in caplog.records]
    assert make(files, "r0") == 0  # its name stays taken: none made over it


def test_a_file_system_that_cannot_rename_without_replacing_makes_claims_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    files = files_in(tmp_path)
    make(files, "r0", "r1")
    rename_failing(monkeypatch, errno.EINVAL)
    with caplog.at_level(logging.INFO, logger="trio_routines"):
        assert claim(files, T0) is ClaimStatus.TAKEN
    assert [record.getMessage() for record in caplog.records] == [
        "claims make their own files here (no renameat2): EINVAL: Invalid argument"
    ]
    assert files.spares.usable is False
    assert (routine_dir(tmp_path) / slot_name(T0)).read_bytes() == claim_text(
        T0, replica="host:1"
    ).encode()
    assert not files.spares.usable
    assert make(files, "r2") == 0  # none made any more
    assert not (routine_dir(tmp_path, "r2") / SPARE_CLAIM).exists()
    monkeypatch.undo()
    assert claim(files, T0, "r1") is ClaimStatus.TAKEN  # nor taken: r1's stays
    assert (routine_dir(tmp_path, "r1") / SPARE_CLAIM).exists()


def test_without_renameat2_no_spare_is_made_or_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spares, "_RENAMEAT2", None)
    (tmp_path / "a").write_text("a")
    directory = os.open(tmp_path, os.O_RDONLY)
    try:
        with pytest.raises(OSError, match="not implemented") as raised:
            spares.rename_new(directory, b"a", b"b")
    finally:
        os.close(directory)
    assert raised.value.errno == errno.ENOSYS
    assert (tmp_path / "a").exists()
    files = files_in(tmp_path)
    assert not files.spares.usable
    assert files.spares.make(files, ["r0"]) == 0


@pytest.mark.parametrize("found", ["at import", "again"])
def test_rename_new_names_a_file_and_never_replaces_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, found: str
) -> None:
    if found == "again":  # looked up in a test, where mutation testing sees it run
        monkeypatch.setattr(spares, "_RENAMEAT2", spares._libc_renameat2())
    directory = os.open(tmp_path, os.O_RDONLY)
    try:
        (tmp_path / "a").write_text("a")
        (tmp_path / "b").write_text("b")
        with pytest.raises(FileExistsError) as raised:
            spares.rename_new(directory, b"a", b"b")
        assert str(raised.value) == "[Errno 17] File exists"
        assert (tmp_path / "b").read_text() == "b"
        spares.rename_new(directory, b"a", b"c")
        assert sorted(os.listdir(tmp_path)) == ["b", "c"]
        with pytest.raises(FileNotFoundError):
            spares.rename_new(directory, b"a", b"d")
    finally:
        os.close(directory)


def test_a_spare_that_cannot_be_made_is_passed_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "schedule").write_text("")  # no directory can be opened under it
    files = files_in(tmp_path)
    with caplog.at_level(logging.DEBUG, logger="trio_routines"):
        assert files.spares.make(files, ["r0"]) == 0
        assert files.spares.make(files, ["../escape"]) == 0
    said = [record.getMessage() for record in caplog.records]
    assert said[0].startswith("could not make a spare claim file for 'r0': [Errno 20] Not a")
    assert said[1] == (
        "could not make a spare claim file for '../escape': \"../escape\" cannot be a routine "
        'name (no path separators, "." or "..")'
    )
    caplog.clear()
    (tmp_path / "schedule").unlink()
    routine_dir(tmp_path).mkdir(parents=True)

    def failing(*args: object) -> int:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(spares, "create_whole", failing)
    with caplog.at_level(logging.DEBUG, logger="trio_routines"):
        assert files.spares.make(files, ["r0"]) == 0
    assert [record.getMessage() for record in caplog.records] == [
        f"could not make a spare claim file in {routine_dir(tmp_path)}: EIO: Input/output error"
    ]


async def test_readers_pass_over_the_spare_without_a_word(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = files_in(tmp_path)
    make(files, "r0", "r1")
    claim(files, T0, "r1")
    make(files, "r1")
    async with DirectoryStore(tmp_path, writer_process=False) as store:
        with caplog.at_level(logging.DEBUG, logger="trio_routines"):
            assert await store.latest_fire("r0") is None
            assert await store.history("r0") == []
            fire = await store.latest_fire("r1")
            assert fire is not None
            assert fire.slot == T0
            assert [f.slot for f in await store.history("r1")] == [T0]
            assert claim_names([SPARE_CLAIM, slot_name(T0)]) == [slot_name(T0)]
    assert SPARE_CLAIM not in caplog.text


def test_no_spare_is_made_where_a_routine_has_no_claims_directory(tmp_path: Path) -> None:
    files = files_in(tmp_path)
    assert files.spares.make(files, ["r0"]) == 0
    assert not (tmp_path / "schedule").exists()
    (tmp_path / "schedule" / "claims").mkdir(parents=True)
    assert files.spares.make(files, ["r0"]) == 0
    assert not routine_dir(tmp_path).exists()  # its first claim makes it


def test_a_spare_of_a_claims_largest_size_is_taken(tmp_path: Path) -> None:
    files = files_in(tmp_path)
    make(files, "r0")
    (routine_dir(tmp_path) / SPARE_CLAIM).write_bytes(b" " * CLAIM_LIMIT)
    made = (routine_dir(tmp_path) / SPARE_CLAIM).stat().st_ino
    assert claim(files, T0) is ClaimStatus.TAKEN
    assert (routine_dir(tmp_path) / slot_name(T0)).stat().st_ino == made


@pytest.mark.parametrize("why", ["another owner", "too large"])
def test_a_spare_not_ours_or_too_large_is_left_alone(tmp_path: Path, why: str) -> None:
    files = files_in(tmp_path)
    make(files, "r0")
    spare = routine_dir(tmp_path) / SPARE_CLAIM
    if why == "another owner":
        files.spares._uid = os.geteuid() + 1
    else:
        spare.write_bytes(b" " * (CLAIM_LIMIT + 1))
    made = spare.stat().st_ino
    assert claim(files, T0) is ClaimStatus.TAKEN
    assert (routine_dir(tmp_path) / slot_name(T0)).stat().st_ino != made
    assert spare.stat().st_ino == made


@pytest.mark.parametrize("by", ["a file", "a dangling link"])
def test_a_spare_replaced_while_it_is_written_is_not_the_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, by: str
) -> None:
    files = files_in(tmp_path)
    make(files, "r0")
    rename = spares.rename_new

    def replaced_first(directory: int, old: bytes, new: bytes) -> None:
        # removed by hand, and made again by another replica, after the claim opened it
        os.unlink(old, dir_fd=directory)
        if by == "a file":
            fd = os.open(old, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=directory)
            os.write(fd, b"another\n")
            os.close(fd)
        else:
            os.symlink(tmp_path / "nowhere", old, dir_fd=directory)
        rename(directory, old, new)

    monkeypatch.setattr(spares, "rename_new", replaced_first)
    with caplog.at_level(logging.DEBUG, logger="trio_routines"):
        assert claim(files, T0) is ClaimStatus.TAKEN
    assert (
        f"{routine_dir(tmp_path)}: the spare claim file is unusable: it was replaced while it "
        "was written" in [record.getMessage() for record in caplog.records]
    )
    assert (routine_dir(tmp_path) / slot_name(T0)).read_bytes() == claim_text(
        T0, replica="host:1"
    ).encode()
    assert sorted(os.listdir(routine_dir(tmp_path))) == [slot_name(T0)]


def test_a_spare_that_cannot_be_looked_for_is_not_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    files = files_in(tmp_path)
    routine_dir(tmp_path).mkdir(parents=True)
    before = set(os.listdir("/proc/self/fd"))
    stat_failing_for(monkeypatch, SPARE_CLAIM)
    with caplog.at_level(logging.DEBUG, logger="trio_routines"):
        assert files.spares.make(files, ["r0"]) == 0
    monkeypatch.undo()
    assert [record.getMessage() for record in caplog.records] == [
        f"could not make a spare claim file in {routine_dir(tmp_path)}: EIO: Input/output "
        f"error: {SPARE_CLAIM}"
    ]
    assert os.listdir(routine_dir(tmp_path)) == []
    assert set(os.listdir("/proc/self/fd")) == before  # the directory closed


def test_a_spare_renamed_that_cannot_be_looked_at_after_is_the_claim_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = files_in(tmp_path)
    make(files, "r0")
    made = (routine_dir(tmp_path) / SPARE_CLAIM).stat().st_ino
    stat_failing_for(monkeypatch, slot_name(T0))
    assert claim(files, T0) is ClaimStatus.TAKEN  # decided by the rename: never a duplicate
    monkeypatch.undo()
    assert (routine_dir(tmp_path) / slot_name(T0)).stat().st_ino == made


def test_a_spare_whose_rename_fails_otherwise_is_left_and_the_claim_makes_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    files = files_in(tmp_path)
    make(files, "r0")
    rename_failing(monkeypatch, errno.EIO)
    with caplog.at_level(logging.DEBUG, logger="trio_routines"):
        assert claim(files, T0) is ClaimStatus.TAKEN
    assert [record.getMessage() for record in caplog.records] == [
        f"{routine_dir(tmp_path)}: the spare claim file is unusable: EIO: Input/output error"
    ]
    assert files.spares.usable  # a passing failure: spares are still taken
    assert (routine_dir(tmp_path) / slot_name(T0)).read_bytes() == claim_text(
        T0, replica="host:1"
    ).encode()
