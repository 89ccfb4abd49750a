"""Pause and resume files of the state directory store, pinned (issue 11).

A pause or resume that fails is one fault naming the routine, the directory and the file that
failed; a resume's instant is written through a temp file that never stays behind; reading it
back takes a short regular file holding an instant and nothing else.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trio
from oserrors import fail, lock_clock, locked_elsewhere, named, prefixed

from trio_routines.errors import StateFault
from trio_routines.instants import format_iso
from trio_routines.stores import safefile
from trio_routines.stores.directory import DirectoryStore, pausedread, pausestate
from trio_routines.stores.directory import pause as dirpause
from trio_routines.stores.directory import records as dirrecords

AT = datetime(2026, 7, 7, 9, tzinfo=UTC)
T0, T1, T2 = AT, AT.replace(hour=10), AT.replace(hour=11)
EIO = "EIO: Input/output error"
TEMP = r"\.resume-[0-9a-f]{16}"


def schedule_is_a_file(root: Path) -> Path:
    root.mkdir(exist_ok=True)
    (root / "schedule").write_text("")
    return root / "schedule"


def nth(n: int) -> object:
    """A matcher for the ``n``-th call (from 0) of the failing function."""
    calls = itertools.count()
    return lambda *args, **kw: next(calls) == n


# -- pausing and resuming ------------------------------------------------------------------------


@pytest.mark.parametrize("paused", [True, False], ids=["pause", "resume"])
async def test_a_schedule_that_is_no_directory_fails_a_pause_or_resume_by_name(
    tmp_path: Path, paused: bool
) -> None:
    schedule = schedule_is_a_file(tmp_path)
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(tmp_path).set_paused("r", paused)
    what = "pause" if paused else "resume"
    assert str(raised.value) == (
        f"could not {what} 'r' in {schedule / 'paused'}: ENOTDIR: Not a directory: {schedule}"
    )


PAUSE_FAULTS = {
    # place: (the module whose os fails, the call, which call of it, is the file named)
    "create": (safefile, "open", ".", False),  # the file, made unnamed in its directory
    "link": (safefile, "link", 0, True),  # ... and named
    "file-fsync": (safefile, "fsync", 0, True),
    "dir-fsync": (safefile, "fsync", 1, False),
    "instant": (safefile, "write", 0, True),  # the pause's instant, written into its file
}


@pytest.mark.parametrize("place", list(PAUSE_FAULTS))
@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC])
async def test_a_pause_that_fails_names_the_file_or_directory_and_pauses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, place: str, code: int
) -> None:
    where = tmp_path / "schedule" / "paused"
    where.mkdir(parents=True)
    store = DirectoryStore(tmp_path)
    module, call, which, file = PAUSE_FAULTS[place]
    matcher = named(which) if isinstance(which, str) else nth(which)
    fail(monkeypatch, module, call, code, matcher)  # type: ignore[arg-type]
    fail(monkeypatch, dirpause, "fsync", errno.EIO)  # the taking back's own flush, let go
    with pytest.raises(StateFault) as raised:
        await store.set_paused("r", True, AT)
    failed = where / "r" if file else where
    said = f"{errno.errorcode[code]}: {os.strerror(code)}"
    assert str(raised.value) == f"could not pause 'r' in {where}: {said}: {failed}"
    # Said to have failed, it pauses nothing: no file at its name, nor half of one.
    assert os.listdir(where) == []
    assert await store.paused() == frozenset()
    monkeypatch.undo()
    await store.set_paused("r", True, AT)  # asked again, it is made, with its instant
    assert await store.paused_since("r") == AT


async def test_a_pause_whose_taking_back_fails_too_says_it_may_pause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = tmp_path / "schedule" / "paused"
    where.mkdir(parents=True)
    fail(monkeypatch, safefile, "fsync", errno.EIO, nth(1))  # the directory's
    fail(monkeypatch, dirpause, "unlink", errno.EACCES)
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(tmp_path).set_paused("r", True, AT)
    assert str(raised.value) == (
        f"could not pause 'r' in {where}: {EIO}: {where}; its pause file could not be removed "
        f"again (EACCES: Permission denied: {where / 'r'}): it may pause the routine — look "
        "with `list`, and resume it if it shows paused"
    )


async def test_a_pause_where_something_else_has_its_name_is_refused_as_it_is(
    tmp_path: Path,
) -> None:
    where = tmp_path / "schedule" / "paused"
    (where / "r").mkdir(parents=True)
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(tmp_path).set_paused("r", True, AT)
    assert str(raised.value) == (
        f"cannot pause 'r': {where / 'r'} exists and is not a regular file"
    )
    assert os.listdir(where / "r") == []


@pytest.mark.parametrize("place", ["unlink", "dir-fsync"])
async def test_a_resume_that_fails_names_the_file_or_directory_and_resumes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, place: str
) -> None:
    store = DirectoryStore(tmp_path)
    await store.set_paused("r", True, T0)
    if place == "unlink":
        fail(monkeypatch, dirpause, "unlink", errno.EIO)
    else:
        fail(monkeypatch, safefile, "fsync", errno.EIO)
    with pytest.raises(StateFault) as raised:
        await store.set_paused("r", False)
    where = tmp_path / "schedule" / "paused"
    failed = where / "r" if place == "unlink" else f"{where} — it stays paused"
    assert str(raised.value) == f"could not resume 'r' in {where}: {EIO}: {failed}"
    monkeypatch.undo()
    # Removed but not flushed, the pause was put back as it was: the routine stays paused,
    # its pause's start kept, and only the file itself is there.
    assert await store.paused() == {"r"}
    assert await store.paused_since("r") == T0
    assert os.listdir(where) == ["r"]


async def test_a_resume_whose_pause_cannot_be_put_back_says_it_may_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    await store.set_paused("r", True, T0)
    fail(monkeypatch, safefile, "fsync", errno.EIO)
    monkeypatch.setattr(
        dirpause, "create_whole", lambda *args: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full"))
    )
    with pytest.raises(StateFault) as raised:
        await store.set_paused("r", False)
    where = tmp_path / "schedule" / "paused"
    assert str(raised.value) == (
        f"could not resume 'r' in {where}: {EIO}: {where}; its pause could not be put back "
        "(ENOSPC: full): it may run — look with `list`, and pause it again if it shows resumed"
    )
    monkeypatch.undo()
    assert await store.paused() == frozenset()


@pytest.mark.parametrize("held", ["unreadable", "too long"])
async def test_a_pause_put_back_whose_text_could_not_be_read_is_one_of_unknown_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: str
) -> None:
    store = DirectoryStore(tmp_path)
    where = tmp_path / "schedule" / "paused"
    await store.set_paused("r", True, T0)
    if held == "too long":  # a pause edited by hand: a regular file, so still a pause
        text = format_iso(T0)
        (where / "r").write_text(text + " " * (65 - len(text)))  # one byte past the read
    proxy = fail(monkeypatch, safefile, "fsync", errno.EIO)
    if held == "unreadable":
        proxy.also("read", errno.EIO)
    fail(monkeypatch, dirpause, "fsync", errno.EIO)  # the put-back's own flush fails too
    with pytest.raises(StateFault) as raised:
        await store.set_paused("r", False)
    assert str(raised.value).endswith(f"{where} — it stays paused")
    monkeypatch.undo()
    assert (where / "r").read_bytes() == b""
    assert await store.paused() == {"r"}
    assert await store.paused_since("r") is None


async def test_a_pause_that_stays_locked_is_not_put_back_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    where = tmp_path / "schedule" / "paused"
    await store.set_paused("r", True, T0)
    with locked_elsewhere(where):  # another process's pause under way, as it were
        fail(monkeypatch, safefile, "fsync", errno.EIO)
        lock_clock(monkeypatch, [0.0, 0.0, 11.0])
        with pytest.raises(StateFault) as raised:
            await store.set_paused("r", False)
    assert str(raised.value) == (
        f"could not resume 'r' in {where}: {EIO}: {where}; its pause could not be put back "
        "(its directory stayed locked for 10s): it may run — look with `list`, and pause it "
        "again if it shows resumed"
    )


async def test_a_resume_that_fails_keeps_a_pause_made_meanwhile_and_puts_back_no_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    where = tmp_path / "schedule" / "paused"
    await store.set_paused("r", True, T0)
    real = dirpause.create_whole

    def paused_meanwhile(directory: int, at: Path, name: str, data: bytes, temp: str) -> int:
        (where / name).write_text(format_iso(T2))  # another process paused it again
        return real(directory, at, name, data, temp)

    monkeypatch.setattr(dirpause, "create_whole", paused_meanwhile)
    fail(monkeypatch, safefile, "fsync", errno.EIO)
    with pytest.raises(StateFault) as raised:
        await store.set_paused("r", False)
    assert str(raised.value).endswith(f"{where} — it stays paused")
    assert await store.paused_since("r") == T2  # the other pause, as it made it
    monkeypatch.undo()
    # A link in the paused directory pauses nothing: a resume takes it away, and one whose
    # flush failed does not make it a pause.
    (where / "r").unlink()
    (where / "r").symlink_to(tmp_path / "target")
    fail(monkeypatch, safefile, "fsync", errno.EIO)
    with pytest.raises(StateFault) as raised:
        await store.set_paused("r", False)
    assert str(raised.value) == f"could not resume 'r' in {where}: {EIO}: {where}"
    monkeypatch.undo()
    assert os.listdir(where) == []


async def test_a_resume_that_cannot_tell_whether_its_routine_is_paused_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A resume with an instant first looks whether the routine is paused (one not paused
    # keeps none): a look that fails is the resume's fault, naming the paused directory.
    where = tmp_path / "schedule" / "paused"
    where.parent.mkdir(parents=True)
    where.write_text("")  # no directory
    store = DirectoryStore(tmp_path)
    with pytest.raises(StateFault) as raised:
        await store.set_paused("r", False, AT)
    assert str(raised.value) == (
        f"could not resume 'r' in {where}: ENOTDIR: Not a directory: {where}"
    )
    where.unlink()
    await store.set_paused("r", True)
    fail(monkeypatch, dirpause, "stat", errno.EIO, named("r"))
    with pytest.raises(StateFault) as raised:
        await store.set_paused("r", False, AT)
    assert str(raised.value) == f"could not resume 'r' in {where}: {EIO}"


async def test_a_link_in_the_paused_directory_is_no_pause_a_resume_takes_back(
    tmp_path: Path,
) -> None:
    where = tmp_path / "schedule" / "paused"
    where.mkdir(parents=True)
    (tmp_path / "elsewhere").write_text("")
    (where / "r").symlink_to(tmp_path / "elsewhere")
    store = DirectoryStore(tmp_path)
    await store.set_paused("r", False, AT)  # not paused (a link pauses nothing): no instant
    assert await store.resumed_at("r") is None
    assert (where / "r").is_symlink()
    assert (tmp_path / "elsewhere").exists()


# -- the resume's instant ---------------------------------------------------------------------


async def test_a_resume_whose_instant_has_no_safe_place_says_so(tmp_path: Path) -> None:
    where = tmp_path / "schedule" / "resumed"
    where.parent.mkdir()
    where.symlink_to(tmp_path)
    await DirectoryStore(tmp_path).set_paused("r", True)  # what a resume changes
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(tmp_path).set_paused("r", False, AT)
    assert str(raised.value) == (
        f"could not resume 'r': its instant cannot be kept in {where}: "
        f"{where} is a symbolic link, not a directory — refused"
    )


async def test_a_resume_whose_instant_cannot_be_kept_leaves_the_routine_paused(
    tmp_path: Path,
) -> None:
    # Else the next boot reads the slots passed while it was paused as missed while no
    # scheduler ran, and catches one of them up.
    store = DirectoryStore(tmp_path)
    await store.set_paused("r", True)
    (tmp_path / "schedule" / "resumed").mkdir()
    (tmp_path / "schedule" / "resumed" / "r").mkdir()  # no file can be renamed over it
    with pytest.raises(StateFault, match=r"^could not resume 'r': its instant cannot be kept"):
        await store.set_paused("r", False, AT)
    assert await store.paused() == frozenset({"r"})
    # A directory there holds no instant: taken as made when it was last written.
    found = await store.resumed_at("r")
    assert found is not None
    written = (tmp_path / "schedule" / "resumed" / "r").lstat().st_mtime
    assert abs(found.timestamp() - written) < 0.001


@pytest.mark.parametrize("place", ["create", "write", "temp-fsync", "dir-fsync"])
async def test_an_instant_that_cannot_be_written_names_the_temp_file_and_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, place: str
) -> None:
    where = tmp_path / "schedule" / "resumed"
    where.mkdir(parents=True)
    await DirectoryStore(tmp_path).set_paused("r", True)  # what a resume changes
    if place == "create":
        fail(monkeypatch, safefile, "open", errno.EIO, prefixed(".resume-"))
    elif place == "write":
        fail(monkeypatch, safefile, "write", errno.EIO)
    else:
        fail(monkeypatch, safefile, "fsync", errno.EIO, nth(0 if place == "temp-fsync" else 1))
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(tmp_path).set_paused("r", False, AT)
    prefix = re.escape(f"could not resume 'r': its instant cannot be kept in {where}: {EIO}: ")
    failed = re.escape(str(where)) + ("" if place == "dir-fsync" else "/" + TEMP)
    assert re.fullmatch(prefix + failed, str(raised.value)), str(raised.value)
    assert os.listdir(where) == (["r"] if place == "dir-fsync" else [])


@pytest.mark.parametrize("unlink_fails", [False, True])
async def test_an_instant_that_cannot_be_renamed_into_place_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unlink_fails: bool
) -> None:
    where = tmp_path / "schedule" / "resumed"
    await DirectoryStore(tmp_path).set_paused("r", True)  # what a resume changes
    proxy = fail(monkeypatch, safefile, "replace", errno.EIO)  # the rename is safefile's
    if unlink_fails:
        proxy.also("unlink", errno.EIO)
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(tmp_path).set_paused("r", False, AT)
    assert str(raised.value) == (
        f"could not resume 'r': its instant cannot be kept in {where}: {EIO}: {where / 'r'}"
    )
    left = os.listdir(where)
    assert len(left) == (1 if unlink_fails else 0)
    assert all(re.fullmatch(TEMP, name) for name in left)


async def test_an_instant_is_read_from_at_most_64_bytes_of_ascii(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    await store.set_paused("r", True)
    await store.set_paused("r", False, AT)
    path = tmp_path / "schedule" / "resumed" / "r"
    assert path.read_bytes() == format_iso(AT).encode()
    for content, read in [
        (format_iso(AT).ljust(64).encode(), AT),
        (format_iso(AT).ljust(65).encode(), None),  # too long for an instant: not ours
        (format_iso(AT).encode() + b"\xc2\xa0", None),  # a no-break space is no blank here
        (b"\xff" + format_iso(AT).encode(), None),
    ]:
        path.write_bytes(content)
        found = await store.resumed_at("r")
        if read is None:  # holding no instant: taken as made when it was last written
            assert found is not None, content
            assert abs(found.timestamp() - path.lstat().st_mtime) < 0.001, content
        else:
            assert found == read, content


async def test_a_pause_keeps_its_instant_in_its_file_and_an_earlier_empty_one_has_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    await store.set_paused("r", True, AT)
    path = tmp_path / "schedule" / "paused" / "r"
    assert path.read_bytes() == format_iso(AT).encode()
    assert await store.paused() == {"r"}
    for content, read in [
        (b"", None),  # an earlier version's pause: paused, since unknown
        (format_iso(AT).ljust(64).encode(), AT),
        (format_iso(AT).ljust(65).encode(), None),  # too long for an instant: not ours
        (b"\xff", None),
    ]:
        path.write_bytes(content)
        assert await store.paused_since("r") == read, content
        assert await store.paused() == {"r"}  # paused whatever it holds
    await store.set_paused("q", True)  # no instant given: an empty file, as before
    assert (tmp_path / "schedule" / "paused" / "q").read_bytes() == b""
    assert await store.paused_since("never") is None
    fail(monkeypatch, safefile, "read", errno.EIO)
    with pytest.raises(StateFault) as raised:
        await store.paused_since("r")
    assert str(raised.value) == f"the pause of 'r' is unreadable: {EIO}: {path}"


async def test_an_instant_that_cannot_be_read_is_a_fault_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    await store.set_paused("r", True)
    await store.set_paused("r", False, AT)
    fail(monkeypatch, safefile, "read", errno.EIO)
    with pytest.raises(StateFault) as raised:
        await store.resumed_at("r")
    path = tmp_path / "schedule" / "resumed" / "r"
    assert str(raised.value) == f"the resume of 'r' is unreadable: {EIO}: {path}"


async def test_a_schedule_that_is_no_directory_fails_the_reads_by_name(tmp_path: Path) -> None:
    schedule = schedule_is_a_file(tmp_path)
    store = DirectoryStore(tmp_path)
    with pytest.raises(StateFault) as raised:
        await store.resumed_at("r")
    assert (
        str(raised.value)
        == f"the resume of 'r' is unreadable: ENOTDIR: Not a directory: {schedule}"
    )
    with pytest.raises(StateFault) as raised:
        await store.paused_since("r")
    assert str(raised.value) == (
        f"the pause of 'r' is unreadable: ENOTDIR: Not a directory: {schedule}"
    )
    with pytest.raises(StateFault) as raised:
        await store.paused()
    assert str(raised.value) == (
        f"the paused routines are unreadable in {schedule / 'paused'}: "
        f"ENOTDIR: Not a directory: {schedule}"
    )


# -- the paused set -----------------------------------------------------------------------------


async def test_a_link_to_a_regular_file_pauses_nothing(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    await store.set_paused("a", True)
    paused = tmp_path / "schedule" / "paused"
    (tmp_path / "target").write_text("")
    (paused / "b").symlink_to(tmp_path / "target")
    assert await store.paused() == {"a"}


async def test_a_paused_directory_that_cannot_be_listed_is_a_fault_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    await store.set_paused("a", True)
    fail(monkeypatch, pausestate, "scandir", errno.EIO)
    with pytest.raises(StateFault) as raised:
        await store.paused()
    where = tmp_path / "schedule" / "paused"
    assert str(raised.value) == f"the paused routines are unreadable in {where}: {EIO}"


# -- when the pause a resume ended began ---------------------------------------------------------


async def test_a_resumes_pause_is_kept_beside_it_and_never_written_through_a_link(
    tmp_path: Path,
) -> None:
    store = DirectoryStore(tmp_path / "state")
    kept = tmp_path / "state" / "schedule" / "resumed-pause"
    await store.set_paused("r", True, T0)
    await store.set_paused("r", False, T1)
    assert (kept / "r").read_text() == format_iso(T0)
    assert await store.resumed_pause_since("r") == T0
    # A link planted in its place reads as none, and the next resume replaces the link: the
    # file it leads to is left as it was.
    outside = tmp_path / "outside"
    outside.write_text(format_iso(T1))
    (kept / "r").unlink()
    (kept / "r").symlink_to(outside)
    assert await store.resumed_pause_since("r") is None
    await store.set_paused("r", True, T1)
    await store.set_paused("r", False, T2)
    assert not (kept / "r").is_symlink()
    assert outside.read_text() == format_iso(T1)
    assert await store.resumed_pause_since("r") == T1
    # A pause of unknown start: its resume removes the earlier one's instant.
    await store.set_paused("r", True)
    await store.set_paused("r", False, T2)
    assert not (kept / "r").exists()
    assert await store.resumed_pause_since("r") is None
    await store.set_paused("q", True)  # never kept one: nothing to remove
    (kept).rmdir()
    await store.set_paused("q", False, T2)
    assert not kept.exists()
    assert await store.resumed_at("q") == T2


async def test_a_resume_whose_pause_cannot_be_kept_changes_nothing(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    await store.set_paused("r", True, T0)
    kept = tmp_path / "schedule" / "resumed-pause"
    kept.write_text("")  # no directory
    with pytest.raises(StateFault) as raised:
        await store.set_paused("r", False, T1)
    assert str(raised.value) == (
        f"could not resume 'r': its instant cannot be kept in {kept}: ENOTDIR: Not a "
        f"directory: {kept}"
    )
    assert await store.paused() == frozenset({"r"})  # still paused
    assert await store.resumed_at("r") is None
    with pytest.raises(StateFault) as raised:
        await store.resumed_pause_since("r")
    assert str(raised.value) == f"the resume of 'r' is unreadable: ENOTDIR: Not a directory: {kept}"


async def test_a_pause_whose_start_cannot_be_read_is_resumed_with_it_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    await store.set_paused("r", True, T0)

    def unreadable(root: Path, routine: str) -> datetime | None:
        raise StateFault("the pause of 'r' is unreadable: EIO")

    monkeypatch.setattr(dirpause, "paused_since_sync", unreadable)
    await store.set_paused("r", False, T1)  # not refused for it
    assert await store.paused() == frozenset()
    assert await store.resumed_at("r") == T1
    assert await store.resumed_pause_since("r") is None


# -- the paused read's resumes -------------------------------------------------------------------


async def test_a_paused_read_reads_only_the_resumes_written_in_the_last_minutes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = DirectoryStore(tmp_path)
    for name in ("old", "new", "damaged"):
        await store.set_paused(name, True, T0)
        await store.set_paused(name, False, T1)
    resumed = tmp_path / "schedule" / "resumed"
    (resumed / "damaged").write_text("no instant")  # holds no slot back: passed over
    hour_ago = (resumed / "new").stat().st_mtime - 3600
    os.utime(resumed / "old", (hour_ago, hour_ago))
    names, found = await store.paused_with_resumes(T0)
    assert names == frozenset()
    assert found == {"new": (T1, T0)}  # with when the pause it ended began
    assert not caplog.records  # (the boot's own read of it warns)
    written = time.time() - pausedread.RECENT_WRITES
    os.utime(resumed / "new", (written - 1, written - 1))
    assert (await store.paused_with_resumes(T0))[1] == {}
    os.utime(resumed / "new", (written + 1, written + 1))
    assert (await store.paused_with_resumes(T0))[1].keys() == {"new"}
    # The directory itself untouched for long: no resume of it is read, not one file.
    os.utime(resumed, (hour_ago, hour_ago))
    assert await store.paused_with_resumes(T0) == (frozenset(), {})
    os.utime(resumed, (written + 1, written + 1))
    assert (await store.paused_with_resumes(T0))[1].keys() == {"new"}
    assert (await store.paused_with_resumes(T1 + timedelta(milliseconds=1)))[1] == {}


@pytest.mark.parametrize("planted", ["file", "link"])
async def test_a_resumed_directory_that_cannot_be_read_holds_no_paused_read_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, planted: str
) -> None:
    # It failed every paused read, so every fire of every routine on every replica.
    store = DirectoryStore(tmp_path)
    await store.set_paused("daily", True, T0)
    resumed = tmp_path / "schedule" / "resumed"
    if planted == "file":
        resumed.write_text("")
    else:
        (tmp_path / "elsewhere").mkdir()
        resumed.symlink_to(tmp_path / "elsewhere")
    for _ in range(3):
        assert await store.paused_with_resumes(T0) == (frozenset({"daily"}), {})
    (warned,) = [r.getMessage() for r in caplog.records]  # once, not at every read
    assert warned.startswith(f"the resumes are unreadable in {resumed}: ")
    assert warned.endswith(" — passed over by the paused reads (no resume of it read)")


async def test_a_landed_instant_that_cannot_be_written_leaves_the_asked_one_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = DirectoryStore(tmp_path)
    await store.set_paused("daily", True, T0)
    monkeypatch.setattr(dirpause, "monotonic", iter([102.5]).__next__)  # once removed
    real = dirpause.replace_file
    writes = itertools.count()

    def second_fails(directory: int, name: str, where: Path, data: bytes, temp: str) -> None:
        if next(writes) == 2:  # the pause's start, the instant asked, then the landed one
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(directory, name, where, data, temp)

    monkeypatch.setattr(dirpause, "replace_file", second_fails)
    dirpause.set_paused_sync(tmp_path, "daily", False, T1, asked=100.0)
    resumed = tmp_path / "schedule" / "resumed"
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"could not resume 'daily': its instant cannot be kept in {resumed}: ENOSPC: No space "
        f"left on device — its instant stays when it was asked ({format_iso(T1)})"
    ]
    assert await store.resumed_at("daily") == T1
    assert await store.paused() == frozenset()


def test_a_resume_asked_without_its_moment_is_timed_from_its_call(tmp_path: Path) -> None:
    dirpause.set_paused_sync(tmp_path, "daily", True, T0)
    dirpause.set_paused_sync(tmp_path, "daily", False, T1)  # no ``asked``: now
    assert pausestate.resumed_at_sync(tmp_path, "daily") == T1
    assert pausestate.paused_sync(tmp_path) == frozenset()


async def test_a_pause_that_took_long_keeps_no_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dirpause, "monotonic", lambda: 105.0)  # made five seconds after
    dirpause.set_paused_sync(tmp_path, "daily", True, T0, asked=100.0)
    assert pausestate.resumed_at_sync(tmp_path, "daily") is None
    assert pausestate.paused_since_sync(tmp_path, "daily") == T0


async def test_a_pause_whose_directory_stays_locked_is_refused_and_says_try_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = tmp_path / "schedule" / "paused"
    where.mkdir(parents=True)
    with locked_elsewhere(where):
        lock_clock(monkeypatch, [0.0, 0.0, 11.0])
        with pytest.raises(StateFault) as raised:
            await DirectoryStore(tmp_path).set_paused("r", True)
    assert str(raised.value) == (
        f"could not pause 'r' in {where}: another process kept its directory locked for 10s "
        "(a stalled disk?) — try again"
    )
    assert os.listdir(where) == []


async def test_an_earlier_pauses_start_that_cannot_be_removed_is_named_and_keeps_the_pause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    await store.set_paused("r", True)  # of unknown start: its resume removes the one kept
    kept = tmp_path / "schedule" / "resumed-pause"
    kept.mkdir(parents=True)
    (kept / "r").write_text(format_iso(T0))  # an earlier resume's
    fail(monkeypatch, dirpause, "unlink", errno.EIO, named("r"))
    with pytest.raises(StateFault) as raised:
        await store.set_paused("r", False, T1)
    assert str(raised.value) == (
        f"could not resume 'r': its instant cannot be kept in {kept}: {EIO}: {kept / 'r'}"
    )
    assert await store.paused() == {"r"}


async def test_the_paused_listing_passes_over_names_no_routine_has(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    names = [f"r{i}" for i in range(12)]
    for name in names:
        await store.set_paused(name, True)
    where = tmp_path / "schedule" / "paused"
    for i in range(12):  # made by hand: wherever they fall in the listing
        (where / f" r{i}").write_text("")
    assert await store.paused() == frozenset(names)


@pytest.mark.parametrize(
    ("took", "kept"),
    [(0.199, T1), (0.2, T1 + timedelta(seconds=0.2)), (2.5, T1 + timedelta(seconds=2.5))],
)
async def test_a_resume_that_took_long_to_land_keeps_when_it_landed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, took: float, kept: datetime
) -> None:
    # Stamped, then written: a replica reading the stamp late took a slot between the two
    # for after the resume, while the replicas that read in time still saw the pause.
    store = DirectoryStore(tmp_path)
    await store.set_paused("daily", True, T0)
    asked = iter([100.0])  # when the resume was asked
    gone = iter([100.0 + took])  # once its pause is gone
    monkeypatch.setattr(dirrecords, "monotonic", lambda: next(asked))
    monkeypatch.setattr(dirpause, "monotonic", lambda: next(gone))
    await store.set_paused("daily", False, T1)
    assert await store.resumed_at("daily") == kept
    assert (await store.paused_with_resumes(T0))[1] == {"daily": (kept, T0)}
    assert await store.paused() == frozenset()


async def test_a_resume_that_waited_for_the_pause_before_it_keeps_when_it_landed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its wait counts too: one pause or resume at a time in a process, and the one before it
    # took 0.6 s (a slow disk); the resume itself is quick.
    store = DirectoryStore(tmp_path)
    await store.set_paused("daily", True, T0)
    real = dirpause._set_paused

    def slow(root: Path, routine: str, *args: Any) -> bool:
        if routine == "other":
            time.sleep(0.6)
        return real(root, routine, *args)

    monkeypatch.setattr(dirpause, "_set_paused", slow)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.set_paused, "other", True, T0)
        await trio.sleep(0.1)  # its thread is writing: the resume waits half a second or more
        await store.set_paused("daily", False, T1)
    kept = await store.resumed_at("daily")
    assert kept is not None
    assert T1 + timedelta(seconds=0.4) <= kept <= T1 + timedelta(seconds=30)


async def test_a_resume_that_cannot_be_read_is_passed_over_by_the_paused_read_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(pausedread, "_SAID", set())  # said once per process: not yet here
    store = DirectoryStore(tmp_path)
    for name in ("aa-broken", "bb-fine", "cc-fine"):
        await store.set_paused(name, True, T0)
        await store.set_paused(name, False, T1)
    real = pausestate.read_file

    def read_file(directory: int, name: str, where: Path, limit: int) -> bytes:
        if name == "aa-broken":
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(directory, name, where, limit)

    monkeypatch.setattr(pausestate, "read_file", read_file)
    for _ in range(2):  # the others still read, the problem said once
        assert (await store.paused_with_resumes(T0))[1] == {
            "bb-fine": (T1, T0),
            "cc-fine": (T1, T0),
        }
    assert [r.getMessage() for r in caplog.records] == [
        f"the resume of 'aa-broken' is unreadable: {EIO} — passed over by the paused reads "
        "(no resume of it read)"
    ]


def test_a_pause_taken_back_never_undoes_another_pause_that_saw_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pause A has named its file and waits on its flush, which then fails; pause B, asked
    # meanwhile, must not answer "paused already" on that file and see A take it back.
    import threading

    where = tmp_path / "schedule" / "paused"
    where.mkdir(parents=True)
    flushing, fail_it = threading.Event(), threading.Event()
    first = threading.get_ident()
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if threading.get_ident() == first and not fail_it.is_set():
            flushing.set()
            fail_it.wait(10)
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_fsync(fd)

    monkeypatch.setattr(safefile.os, "fsync", fsync)
    outcome: dict[str, object] = {}

    def second() -> None:
        try:
            dirpause.set_paused_sync(tmp_path, "r", True, T1)
            outcome["B"] = "paused"
        except StateFault as exc:
            outcome["B"] = exc

    other = threading.Thread(target=second)

    def start_second_once_flushing() -> None:
        flushing.wait(10)
        other.start()
        time.sleep(0.2)  # B asks while A's file is named, its flush under way
        fail_it.set()

    helper = threading.Thread(target=start_second_once_flushing)
    helper.start()
    try:
        with pytest.raises(StateFault, match="could not pause 'r'"):
            dirpause.set_paused_sync(tmp_path, "r", True, T0)
    finally:
        helper.join(10)
        other.join(10)
    assert outcome["B"] == "paused"  # B's own pause, made once A's was taken back
    assert pausestate.paused_sync(tmp_path) == {"r"}
    assert pausestate.paused_since_sync(tmp_path, "r") == T1


def test_a_pause_taken_back_removes_its_own_file_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Between the naming and the failed flush, a resume removed the file and a pause from
    # elsewhere made another (a hand, an earlier version): that one stays.
    where = tmp_path / "schedule" / "paused"
    where.mkdir(parents=True)
    real_fsync = os.fsync
    calls = itertools.count()

    def fsync(fd: int) -> None:
        if next(calls) == 0:  # the pause file's own flush
            (where / "r").unlink()
            (where / "r").write_text(format_iso(T2))
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_fsync(fd)

    monkeypatch.setattr(safefile.os, "fsync", fsync)
    with pytest.raises(StateFault, match=f"could not pause 'r' in {re.escape(str(where))}: EIO"):
        dirpause.set_paused_sync(tmp_path, "r", True, T0)
    assert pausestate.paused_since_sync(tmp_path, "r") == T2
