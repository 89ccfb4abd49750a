"""The one helper that opens state files (``stores/safefile.py``), pinned (issue 11).

Its messages, whole; a file swapped for a link or a FIFO between the look and the open; the
bounds of a read and of a lock wait; the modes new files and directories get; what creating
the state directory makes durable; and every failing call naming its full path.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from oserrors import FailingOS, fail, lock_clock
from procs import clock_far_ahead, run_script

from trio_routines.errors import StateFault
from trio_routines.instants import slot_name
from trio_routines.records import Outcome
from trio_routines.stores import safefile
from trio_routines.stores.directory import DirectoryStore
from trio_routines.stores.directory.claimfiles import NEW_CLAIM
from trio_routines.stores.directory.pause import set_paused_sync
from trio_routines.stores.directory.wakeupfile import WakeupFile
from trio_routines.stores.safefile import Refused, describe, kind_of, lock_within, open_dir, read_fd

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
NAME = slot_name(T0)
EIO = "EIO: Input/output error"


@pytest.fixture
def directory(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def test_describe_puts_the_errno_name_first_and_the_file_last() -> None:
    assert describe(OSError(errno.EIO, "Input/output error", "/x")) == f"{EIO}: /x"
    assert describe(OSError(errno.EIO, "Input/output error")) == EIO
    assert describe(OSError("no errno at all")) == "no errno at all"
    assert describe(OSError(9999, "an errno without a name", "/x")) == (
        "an errno without a name: /x"
    )
    assert describe(Refused("/x is a FIFO")) == "/x is a FIFO"
    assert describe(Refused("/x is a FIFO", "remove it")) == "/x is a FIFO; remove it"


def test_a_refusal_keeps_its_reason_apart_from_its_remedy() -> None:
    refused = Refused("/x is a FIFO — refused", "remove it")
    assert (refused.reason, refused.remedy) == ("/x is a FIFO — refused", "remove it")
    assert str(refused) == "/x is a FIFO — refused; remove it"
    plain = Refused("/x holds 9 bytes, more than 8 — refused")
    assert (plain.reason, plain.remedy, str(plain)) == (
        "/x holds 9 bytes, more than 8 — refused",
        None,
        "/x holds 9 bytes, more than 8 — refused",
    )


def test_a_file_of_no_known_kind_is_named_as_such() -> None:
    assert kind_of(0) == "not a regular file"
    assert kind_of(stat.S_IFIFO | 0o644) == "a FIFO"


# -- a file swapped between the look and the open ------------------------------------------------


def swapped_after_the_look(monkeypatch: pytest.MonkeyPatch, plant: object) -> None:
    real = safefile._refuse_if_odd

    def look_then_swap(parent: int, name: str, where: Path) -> None:
        real(parent, name, where)
        os.unlink(where)
        plant(where)  # type: ignore[operator]

    monkeypatch.setattr(safefile, "_refuse_if_odd", look_then_swap)


def test_a_claim_swapped_for_a_link_after_the_look_is_refused_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    store = DirectoryStore(tmp_path / "state")
    store.claim_sync("daily", T0, T0 + timedelta(minutes=5))
    swapped_after_the_look(monkeypatch, lambda where: where.symlink_to(victim))
    (fire,) = store.history_sync("daily")
    assert fire.fired_at == T0  # read as a claim without its stamp
    path = store.claim_dir("daily") / NAME
    assert [r.getMessage() for r in caplog.records] == [
        f"unreadable claim: {path} is a symbolic link, not a regular file — refused "
        "(its slot stays taken; read as unsettled)"
    ]
    assert victim.read_bytes() == b"precious"


def test_a_claim_swapped_for_a_fifo_after_the_look_is_refused_without_blocking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    store.claim_sync("daily", T0, T0)
    swapped_after_the_look(monkeypatch, os.mkfifo)
    assert store.settle_sync("daily", T0, Outcome.COMPLETED, 1) is False


def test_a_temp_name_swapped_for_a_link_before_its_link_is_linked_as_the_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, directory: int
) -> None:
    """Where no unnamed file can be made, the file is written under a temp name and linked in:
    a temp name swapped for a symbolic link meanwhile names the link, never its target (a
    second name for a file outside the state directory)."""
    monkeypatch.setattr(safefile, "_UNNAMED", 0)
    (tmp_path / "outside").mkdir()
    victim = tmp_path / "outside" / "victim"
    victim.write_bytes(b"precious")
    written = safefile.write_all

    def then_swapped(fd: int, data: bytes, where: safefile.Where) -> None:
        written(fd, data, where)
        (temp,) = (p for p in tmp_path.iterdir() if p.name.startswith(".made-"))
        temp.unlink()
        temp.symlink_to(victim)

    monkeypatch.setattr(safefile, "write_all", then_swapped)
    os.close(safefile.create_whole(directory, tmp_path, "made", b"ours", ".made-"))
    assert stat.S_ISLNK(os.lstat(tmp_path / "made").st_mode)
    assert os.stat(victim).st_nlink == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["made", "outside"]  # no temp name


def test_refusals_after_the_open_are_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, directory: int
) -> None:
    (tmp_path / "x").write_bytes(b"")
    swapped_after_the_look(monkeypatch, os.mkfifo)
    with pytest.raises(Refused) as raised:
        safefile.read_file(directory, "x", tmp_path / "x", 10)
    assert str(raised.value) == f"{tmp_path / 'x'} is a FIFO, not a regular file — refused"


def test_a_planted_link_is_refused_by_its_look_with_advice(tmp_path: Path, directory: int) -> None:
    (tmp_path / "target").write_bytes(b"")
    (tmp_path / "x").symlink_to(tmp_path / "target")
    with pytest.raises(Refused) as raised:
        safefile.read_file(directory, "x", tmp_path / "x", 10)
    assert str(raised.value) == (
        f"{tmp_path / 'x'} is a symbolic link, not a regular file — refused; remove it"
    )


# -- bounded reads -------------------------------------------------------------------------------


def test_a_read_takes_at_most_one_byte_past_its_limit(tmp_path: Path) -> None:
    data = bytes(range(256)) * 800  # 204,800 bytes: several chunks
    (tmp_path / "x").write_bytes(data)
    fd = os.open(tmp_path / "x", os.O_RDONLY)
    try:
        assert read_fd(fd, tmp_path / "x", len(data)) == data
        os.lseek(fd, 0, os.SEEK_SET)
        with pytest.raises(Refused) as raised:
            read_fd(fd, tmp_path / "x", 100_000)
        assert str(raised.value) == f"{tmp_path / 'x'} grew past 100000 bytes while read — refused"
        assert os.lseek(fd, 0, os.SEEK_CUR) == 100_001
    finally:
        os.close(fd)


# -- bounded lock waits ----------------------------------------------------------------------------


def test_a_lock_wait_polls_until_its_deadline_inclusive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lock").write_bytes(b"")
    holder = os.open(tmp_path / "lock", os.O_RDWR)
    waiter = os.open(tmp_path / "lock", os.O_RDWR)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        slept = lock_clock(monkeypatch, [10.0, 10.001, 10.25])
        assert lock_within(waiter, 0.25) is False
        assert slept == [0.005]
        fcntl.flock(holder, fcntl.LOCK_UN)
        slept = lock_clock(monkeypatch, [20.0])
        assert lock_within(waiter, 0.25) is True
        assert slept == []
    finally:
        os.close(holder)
        os.close(waiter)


# -- modes, and what creating the state directory makes durable ------------------------------------


@pytest.mark.parametrize("unnamed", [True, False], ids=["unnamed", "temp-named"])
def test_new_files_and_directories_get_their_modes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unnamed: bool
) -> None:
    """Every file the store makes is rw-r--r-- (never executable), however it is made: a claim
    written unnamed or under a temp name, a pause file, the wake-up writers' lock."""
    if not unnamed:
        monkeypatch.setattr(safefile, "_UNNAMED", 0)
    named: list[str] = []
    create_temp = safefile.create_temp

    def counted(parent: int, prefix: str, directory: safefile.Where) -> tuple[int, str]:
        named.append(prefix)
        return create_temp(parent, prefix, directory)

    monkeypatch.setattr(safefile, "create_temp", counted)
    store = DirectoryStore(tmp_path)
    old = os.umask(0)
    try:
        store.claim_sync("daily", T0, T0)
        set_paused_sync(tmp_path, "daily", True, T0)
        with WakeupFile(tmp_path, 1.0).locked():
            pass
    finally:
        os.umask(old)
    claim_named = named.count(NEW_CLAIM)
    if unnamed and claim_named:
        pytest.skip("this file system makes no unnamed files: the claim took a temp name")
    assert claim_named == (0 if unnamed else 1)  # the claim's path, as the case says
    schedule = tmp_path / "schedule"
    claims = schedule / "claims"
    modes = [
        stat.S_IMODE(p.stat().st_mode)
        for p in (schedule, claims, claims / "daily", claims / "daily" / NAME)
    ]
    assert modes == [0o755, 0o755, 0o755, 0o644]
    made = sorted(p for p in schedule.rglob("*") if p.is_file())
    assert {p.name for p in made} >= {NAME, "daily", "wakeups.lock"}
    assert {p.relative_to(tmp_path).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in made} == {
        p.relative_to(tmp_path).as_posix(): 0o644 for p in made
    }


def test_creating_the_state_directory_fsyncs_the_parent_of_each_new_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        os.fsync(fd)

    proxy = FailingOS()
    proxy.fsync = fsync  # type: ignore[attr-defined]
    monkeypatch.setattr(safefile, "os", proxy)
    root = tmp_path / "a" / "state"
    DirectoryStore(root, syncfs=None).claim_sync("daily", T0, T0)
    parents = [tmp_path, tmp_path / "a", root, root / "schedule", root / "schedule" / "claims"]
    assert synced[:5] == [str(p) for p in parents]


def test_a_dangling_link_as_the_state_directory_is_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "state").symlink_to(tmp_path / "nowhere" / "state")
    with pytest.raises(StateFault) as raised:
        DirectoryStore(tmp_path / "state").claim_sync("daily", T0, T0)
    where = tmp_path / "state" / "schedule" / "claims" / "daily"
    assert str(raised.value) == (
        f"claims of 'daily' are unusable in {where}: ENOTDIR: Not a directory: {tmp_path / 'state'}"
    )


def test_a_state_directory_that_is_a_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "state").write_bytes(b"")
    with pytest.raises(StateFault) as raised:
        DirectoryStore(tmp_path / "state").history_sync("daily")
    assert str(raised.value) == (
        f"the fired-slot claims for 'daily' are unreadable (state: {tmp_path / 'state'}): "
        f"ENOTDIR: Not a directory: {tmp_path / 'state'}"
    )


def test_a_missing_subdirectory_is_made_only_when_asked(tmp_path: Path, directory: int) -> None:
    with pytest.raises(FileNotFoundError):
        open_dir(directory, "x", tmp_path / "x")
    assert os.listdir(tmp_path) == []


# -- every failing call names its full path --------------------------------------------------------


def unusable(root: Path, detail: str) -> str:
    return f"claims of 'daily' are unusable in {root / 'schedule' / 'claims' / 'daily'}: {detail}"


@pytest.mark.parametrize(
    ("call", "named"),
    [
        ("mkdir", ""),  # making root/schedule
        ("fsync", ""),  # fsyncing root, the parent of the new root/schedule
        ("open", "schedule"),  # opening root/schedule once made
    ],
)
def test_making_a_subdirectory_that_fails_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str, named: str
) -> None:
    calls = {"n": 0}

    def second_open_of_schedule(*args: object, **kw: object) -> bool:
        if args and args[0] == "schedule":
            calls["n"] += 1
            return calls["n"] == 2  # the first finds nothing; the one after the mkdir fails
        return False

    when = second_open_of_schedule if named else (lambda *a, **kw: True)
    fail(monkeypatch, safefile, call, errno.EIO, when)
    with pytest.raises(StateFault) as raised:
        DirectoryStore(tmp_path, syncfs=None).claim_sync("daily", T0, T0)
    failed = tmp_path if call == "fsync" else tmp_path / "schedule"
    assert str(raised.value) == unusable(tmp_path, f"{EIO}: {failed}")


def test_a_look_that_fails_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "schedule").write_bytes(b"")  # ENOTDIR: then a look tells a link from a file
    fail(monkeypatch, safefile, "stat", errno.EIO)
    with pytest.raises(StateFault) as raised:
        DirectoryStore(tmp_path).claim_sync("daily", T0, T0)
    assert str(raised.value) == unusable(tmp_path, f"{EIO}: {tmp_path / 'schedule'}")
    os.unlink(tmp_path / "schedule")
    DirectoryStore(tmp_path).claim_sync("daily", T0, T0)
    with pytest.raises(StateFault) as raised:
        DirectoryStore(tmp_path).history_sync("daily")
    path = tmp_path / "schedule" / "claims" / "daily" / NAME
    assert str(raised.value) == (
        f"the fired-slot claims for 'daily' are unreadable (state: {tmp_path}): {EIO}: {path}"
    )


def test_making_the_state_directory_names_the_parent_it_cannot_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail(monkeypatch, safefile, "fsync", errno.EIO)
    root = tmp_path / "state"
    with pytest.raises(StateFault) as raised:
        DirectoryStore(root, syncfs=None).claim_sync("daily", T0, T0)
    assert str(raised.value) == unusable(root, f"{EIO}: {tmp_path}")


def test_a_path_joined_when_shown_shows_as_the_path_would(tmp_path: Path) -> None:
    where = safefile.Within(tmp_path / "claims", "daily")
    path = where / "2026-07-07T09-00-00-000Z"
    assert str(where) == str(tmp_path / "claims" / "daily")
    assert os.fspath(path) == str(tmp_path / "claims" / "daily" / "2026-07-07T09-00-00-000Z")
    assert (where.parent, where.name) == (tmp_path / "claims", "daily")
    assert path.parent is where
    # an error names the whole path, as with a Path
    directory = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(FileNotFoundError) as caught:
            safefile.open_dir(directory, "missing", safefile.Within(tmp_path, "missing"))
    finally:
        os.close(directory)
    assert caught.value.filename == str(tmp_path / "missing")
    assert describe(caught.value) == f"ENOENT: No such file or directory: {tmp_path / 'missing'}"


@pytest.mark.slow
def test_a_lock_wait_under_a_set_wall_clock_waits_rather_than_failing(tmp_path: Path) -> None:
    # Under libfaketime (a wall clock set for the process, as the clock tests and operators'
    # clock drills do) time.sleep fails at once (EINVAL): a contended lock's wait was an
    # error, and a gap that another replica's write held back was not recorded.
    done = run_script(
        tmp_path / "wait.py",
        f"""
        import fcntl, os
        from trio_routines.stores.safefile import lock_within

        path = {str(tmp_path / "lock")!r}
        holder = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        waiter = os.open(path, os.O_RDWR)
        fcntl.flock(holder, fcntl.LOCK_EX)
        print(lock_within(waiter, 0.3), flush=True)
        fcntl.flock(holder, fcntl.LOCK_UN)
        print(lock_within(waiter, 0.3), flush=True)
        """,
        **clock_far_ahead(tmp_path),
    )
    assert done.stdout.decode().split() == ["False", "True"], done.stderr.decode()[-2000:]
