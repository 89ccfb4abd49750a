"""Claim files of the state directory store, pinned (issue 11).

Every claim, settle or read that fails says so once, whole, naming the file (or directory)
that failed; damaged claims are read leniently and settled over; no call leaks a descriptor;
what a flush is asked to make durable is the file system the claims live on; and a caller
cancelled during a flush neither burns its slot nor skips the prune of a taken claim.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import logging
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from oserrors import FailingOS, fail, named

from trio_routines.errors import StateFault
from trio_routines.instants import format_iso, slot_name
from trio_routines.records import ClaimStatus, Outcome
from trio_routines.stores import safefile
from trio_routines.stores.directory import DirectoryStore, blocking, claimfiles, settlefiles
from trio_routines.stores.groupcommit import Batch

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
T1 = T0 + timedelta(hours=1)
NAME = slot_name(T0)
EIO = "EIO: Input/output error"


def records(caplog: pytest.LogCaptureFixture, level: int = logging.WARNING) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= level]


def claims(root: Path) -> Path:
    return root / "schedule" / "claims" / "daily"


def nth(n: int) -> Callable[..., bool]:
    calls = itertools.count()
    return lambda *args, **kw: next(calls) == n


# -- claiming ---------------------------------------------------------------------------------


async def test_claims_that_cannot_be_listed_are_unusable_by_name(tmp_path: Path) -> None:
    (tmp_path / "schedule").write_text("")
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(tmp_path).claim("daily", T0, T0)
    assert str(raised.value) == (
        f"claims of 'daily' are unusable in {claims(tmp_path)}: "
        f"ENOTDIR: Not a directory: {tmp_path / 'schedule'}"
    )


async def test_a_listing_that_fails_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail(monkeypatch, claimfiles, "listdir", errno.EIO)
    fail(monkeypatch, blocking, "listdir", errno.EIO)
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(tmp_path).claim("daily", T0, T0)
    where = claims(tmp_path)
    assert str(raised.value) == f"claims of 'daily' are unusable in {where}: {EIO}: {where}"
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(tmp_path).history("daily")
    assert str(raised.value) == (
        f"the fired-slot claims for 'daily' are unreadable (state: {tmp_path}): {EIO}: {where}"
    )


CLAIM_FAULTS = {
    # place: (safefile's call that fails, which call (by name or count), the message, the file
    # it names)
    "create": ("open", ".", "could not claim slot {slot} of 'daily'", "dir"),
    "stamp": ("write", None, "could not claim slot {slot} of 'daily'", "file"),
    "name": ("link", None, "could not claim slot {slot} of 'daily'", "file"),
    "stamp-fsync": ("fsync", 0, "could not stamp the claim {path}", "file"),
    "dir-fsync": ("fsync", 1, "could not stamp the claim {path}", "dir"),
}


@pytest.mark.parametrize("place", list(CLAIM_FAULTS))
def test_a_claim_that_fails_is_named_and_leaves_no_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, place: str
) -> None:
    where = claims(tmp_path)
    where.mkdir(parents=True)
    call, which, message, failed = CLAIM_FAULTS[place]
    if which is None:
        fail(monkeypatch, safefile, call, errno.EIO)
    else:
        matcher = named(which) if isinstance(which, str) else nth(which)  # fresh per test
        fail(monkeypatch, safefile, call, errno.EIO, matcher)
    store = DirectoryStore(tmp_path, syncfs=None)
    with pytest.raises(StateFault) as raised:
        store.claim_sync("daily", T0, T0)
    path = where / NAME
    named_file = path if failed == "file" else where
    said = message.format(slot=format_iso(T0), path=path)
    assert str(raised.value) == f"{said}: {EIO}: {named_file}"
    assert os.listdir(where) == []


# Where the file system has no unnamed files (or /proc is not there to name one by), a claim
# is written under a temp name instead; where the O_TMPFILE open is refused, the same.
MAKING = {
    "unnamed": lambda monkeypatch: None,
    "named": lambda monkeypatch: monkeypatch.setattr(safefile, "_UNNAMED", 0),
    "refused": lambda monkeypatch: fail(
        monkeypatch, safefile, "open", errno.EOPNOTSUPP, named(".")
    ),
    # written unnamed, but the link through /proc refused (a sandbox): written again, named
    "unlinkable": lambda monkeypatch: fail(
        monkeypatch, safefile, "link", errno.EPERM, lambda src, *a, **kw: src.startswith("/proc")
    ),
}


@pytest.mark.parametrize("making", list(MAKING))
@pytest.mark.parametrize("syncfs", [None, lambda fd: None])
def test_no_reader_ever_sees_a_claim_half_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, making: str, syncfs: Any
) -> None:
    where = claims(tmp_path)
    where.mkdir(parents=True)
    MAKING[making](monkeypatch)
    seen: list[list[str]] = []
    write_all = safefile.write_all

    def looked_at(fd: int, data: bytes, path: Any) -> None:
        seen.append(os.listdir(where))  # what a reader finds while the claim is written
        write_all(fd, data, path)

    monkeypatch.setattr(safefile, "write_all", looked_at)
    store = DirectoryStore(tmp_path, syncfs=syncfs, writer_process=False)
    assert store.claim_sync("daily", T0, T0, replica="web-1").taken
    *unnamed, names = seen
    assert unnamed == ([[]] if making == "unlinkable" else [])
    if making == "unnamed":
        assert names == []
    else:
        (temp,) = names
        assert temp.startswith(claimfiles.NEW_CLAIM)
    assert os.listdir(where) == [NAME]  # no temp name left behind
    (fire,) = store.history_sync("daily")
    assert (fire.slot, fire.fired_at, fire.replica, fire.outcome) == (T0, T0, "web-1", None)


@pytest.mark.parametrize("making", list(MAKING))
def test_a_claim_named_by_another_meanwhile_is_a_duplicate_and_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, making: str
) -> None:
    where = claims(tmp_path)
    where.mkdir(parents=True)
    MAKING[making](monkeypatch)
    theirs = '{"firedAt":"2026-07-07T10:00:00.000Z","replica":"web-2"}'
    write_all = safefile.write_all

    def racing(fd: int, data: bytes, path: Any) -> None:
        (where / NAME).write_text(theirs)  # another replica names the slot first
        write_all(fd, data, path)

    monkeypatch.setattr(safefile, "write_all", racing)
    store = DirectoryStore(tmp_path, syncfs=None, writer_process=False)
    result = store.claim_sync("daily", T0, T0, replica="web-1")
    assert (result.status, result.newest) == (ClaimStatus.DUPLICATE, NAME)
    assert os.listdir(where) == [NAME]
    assert (where / NAME).read_text() == theirs


@pytest.mark.parametrize("call", ["write", "link"])
def test_a_claim_under_a_temp_name_that_fails_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    where = claims(tmp_path)
    where.mkdir(parents=True)
    MAKING["named"](monkeypatch)
    fail(monkeypatch, safefile, call, errno.ENOSPC)
    store = DirectoryStore(tmp_path, syncfs=None, writer_process=False)
    with pytest.raises(StateFault) as raised:
        store.claim_sync("daily", T0, T0)
    assert str(raised.value) == (
        f"could not claim slot {format_iso(T0)} of 'daily': ENOSPC: No space left on device: "
        f"{where / NAME}"
    )
    assert os.listdir(where) == []


def test_a_slot_that_is_the_newest_claim_is_a_duplicate_without_a_file_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path, syncfs=None, writer_process=False)
    assert store.claim_sync("daily", T0, T0).taken
    new_file = (".", NAME)  # an unnamed file, or the slot's own name (the way of old)
    making = fail(monkeypatch, safefile, "open", errno.EIO, lambda name, *a, **kw: name in new_file)
    monkeypatch.setattr(safefile, "create_temp", lambda *args: pytest.fail("a temp file made"))
    result = store.claim_sync("daily", T0, T0)
    assert (result.status, result.newest) == (ClaimStatus.DUPLICATE, NAME)
    assert making.hits == []


def test_a_temp_name_a_crash_left_behind_is_stepped_over(tmp_path: Path) -> None:
    where = claims(tmp_path)
    where.mkdir(parents=True)
    left = where / f"{claimfiles.NEW_CLAIM}0123456789abcdef"
    left.write_text('{"firedAt":"2026-07-07T09:00:00.000Z"}')
    store = DirectoryStore(tmp_path, syncfs=None, writer_process=False)
    assert store.claim_sync("daily", T0, T0).taken
    assert store.claim_sync("daily", T0 - timedelta(hours=1), T0).status is ClaimStatus.STALE
    assert [fire.slot for fire in store.history_sync("daily")] == [T0]
    assert sorted(os.listdir(where)) == [left.name, NAME]


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_no_claim_or_settle_leaks_a_descriptor(tmp_path: Path) -> None:
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc")
    for syncfs in (None, lambda fd: None):
        store = DirectoryStore(tmp_path / str(syncfs is None), keep=2, syncfs=syncfs)
        store.claim_sync("daily", T0, T0)
        before = open_descriptors()
        for slot in (T0, T0 - timedelta(hours=1), T1):  # duplicate, stale, taken
            store.claim_sync("daily", slot, slot)
        store.settle_sync("daily", T1, Outcome.COMPLETED, 1)
        store.settle_sync("daily", T1, Outcome.FAILED, 1, if_unsettled=True)
        store.settle_sync("daily", T0 + timedelta(hours=5), Outcome.FAILED, 1)  # no such claim
        store.history_sync("daily")
        assert open_descriptors() == before


async def test_what_is_flushed_is_the_file_system_the_claims_live_on(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path, syncfs=lambda fd: None)
    assert store._writes.commit is not None
    asked: list[tuple[int, int]] = []
    cover = store._writes.commit.cover

    def spy(fds: dict[int, tuple[int, int]]) -> Batch:
        asked.extend((device, ticket) for device, (ticket, _) in fds.items())
        return cover(fds)

    store._writes.commit.cover = spy  # type: ignore[method-assign]
    await store.claim("daily", T0, T0)
    await store.settle("daily", T0, Outcome.COMPLETED, 1)
    (claimed, claim_ticket), (settled, settle_ticket) = asked
    assert claimed == settled == os.stat(tmp_path).st_dev
    # each write's ticket, taken when its descriptor was opened: the settle's opened later
    assert isinstance(claim_ticket, int)
    assert isinstance(settle_ticket, int)
    assert claim_ticket < settle_ticket


class HeldFlush:
    """A flush that waits for the test, then succeeds or fails."""

    def __init__(self, fails: bool) -> None:
        self.fails = fails
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, fd: int) -> None:
        self.entered.set()
        assert self.release.wait(30)
        if self.fails:
            raise OSError(errno.EIO, os.strerror(errno.EIO))


async def claim_cancelled_during_its_flush(store: DirectoryStore, flush: HeldFlush) -> list[str]:
    outcomes: list[str] = []
    scope = trio.CancelScope()

    async def claim() -> None:
        with scope:
            try:
                result = await store.claim("daily", T1, T1)
                outcomes.append(result.status.value)
            except StateFault:
                outcomes.append("fault")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(claim)
        while not flush.entered.is_set():  # noqa: ASYNC110 -- set by a worker thread
            await trio.sleep(0.001)
        scope.cancel()
        flush.release.set()
    return outcomes


# A caller cancelled while its flush runs (its deadline passed: the disk may have stalled)
# gives up at once and abandons the flush, whatever the flush then does: its claim stays as
# the flush leaves it, unrun -- neither taken back nor pruned after (the disk may not answer
# either); the reconcile of open claims records it.


async def test_a_caller_cancelled_during_a_failing_flush_gives_up_and_leaves_its_claim(
    tmp_path: Path,
) -> None:
    flush = HeldFlush(fails=True)
    store = DirectoryStore(tmp_path, syncfs=flush)
    assert await claim_cancelled_during_its_flush(store, flush) == []
    assert os.listdir(claims(tmp_path)) == [slot_name(T1)]


async def test_a_caller_cancelled_during_its_flush_gives_up_before_its_prune(
    tmp_path: Path,
) -> None:
    DirectoryStore(tmp_path, syncfs=None).claim_sync("daily", T0, T0)
    flush = HeldFlush(fails=False)
    store = DirectoryStore(tmp_path, keep=1, syncfs=flush)
    assert await claim_cancelled_during_its_flush(store, flush) == []
    assert sorted(os.listdir(claims(tmp_path))) == [slot_name(T0), slot_name(T1)]
    await store.claim("daily", T1 + (T1 - T0), T1)  # the next claim prunes both
    assert len(os.listdir(claims(tmp_path))) == 1


# -- reading claims ---------------------------------------------------------------------------


async def test_a_planted_claim_is_one_whole_warning_and_nothing_else(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    claims(tmp_path).mkdir(parents=True)
    os.mkfifo(claims(tmp_path) / NAME)
    caplog.set_level(logging.DEBUG, logger="trio_routines")
    (fire,) = await DirectoryStore(tmp_path).history("daily")
    assert (fire.slot, fire.fired_at, fire.outcome) == (T0, T0, None)
    assert records(caplog, logging.DEBUG) == [
        f"unreadable claim: {claims(tmp_path) / NAME} is a FIFO, not a regular file — refused;"
        " remove it (its slot stays taken; read as unsettled)"
    ]


async def test_a_claim_removed_while_read_is_skipped_and_the_rest_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    slots = [T0 - timedelta(hours=h) for h in (2, 1, 0)]
    for slot in slots:
        await store.claim("daily", slot, slot)
    real = blocking.read_file

    def pruned_meanwhile(parent: int, name: str, where: Path, limit: int) -> bytes:
        if name == slot_name(slots[0]):
            os.unlink(where)
        return real(parent, name, where, limit)

    monkeypatch.setattr(blocking, "read_file", pruned_meanwhile)
    assert [f.slot for f in await store.history("daily")] == slots[1:]


@pytest.mark.parametrize("settle", [False, True])
async def test_damaged_claims_are_read_and_settled_leniently_naming_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, settle: bool
) -> None:
    where = claims(tmp_path)
    where.mkdir(parents=True)
    (where / NAME).write_bytes(b'{"firedAt":"\xff"}')  # not UTF-8, and no instant
    store = DirectoryStore(tmp_path)
    if settle:
        assert await store.settle("daily", T0, Outcome.COMPLETED, 1)
    else:
        (fire,) = await store.history("daily")
        assert (fire.fired_at, fire.outcome) == (T0, None)
    assert records(caplog) == [
        f"claim {where / NAME} carries an unreadable stamp — using the slot instant"
    ]
    if settle:
        assert (where / NAME).read_bytes() == (
            b'{"firedAt":"2026-07-07T10:00:00.000Z","outcome":"completed","ms":1}'
        )


# -- settling ---------------------------------------------------------------------------------


def settle_warning(outcome: str, detail: str) -> str:
    return f"daily: could not record the {outcome} outcome of slot {format_iso(T0)}: {detail}"


async def test_a_settle_of_a_planted_claim_is_one_whole_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    where = claims(tmp_path)
    where.mkdir(parents=True)
    os.mkfifo(where / NAME)
    assert await DirectoryStore(tmp_path).settle("daily", T0, Outcome.FAILED, 1) is False
    assert records(caplog) == [
        f"daily: could not open the claim for slot {format_iso(T0)} to settle it: "
        f"{where / NAME} is a FIFO, not a regular file — refused; remove it"
    ]


async def test_a_settle_that_waits_too_long_for_the_claim_says_who_holds_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = DirectoryStore(tmp_path, lock_timeout=0.01)
    await store.claim("daily", T0, T0)
    path = claims(tmp_path) / NAME
    held = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert await store.settle("daily", T0, Outcome.COMPLETED, 1) is False
    finally:
        os.close(held)
    assert records(caplog) == [
        settle_warning("completed", f"ETIMEDOUT: another settle holds the claim: {path}")
    ]


SETTLE_FAULTS: dict[str, tuple[Any, str]] = {
    "read": (safefile, "read"),
    "write": (settlefiles, "pwrite"),
    "truncate": (settlefiles, "ftruncate"),
    "fsync": (safefile, "fsync"),
}


@pytest.mark.parametrize("place", list(SETTLE_FAULTS))
def test_a_settle_that_fails_is_one_warning_naming_the_claim(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, place: str
) -> None:
    store = DirectoryStore(tmp_path, syncfs=None)
    store.claim_sync("daily", T0, T0)
    module, call = SETTLE_FAULTS[place]
    fail(monkeypatch, module, call, errno.EIO)
    assert store.settle_sync("daily", T0, Outcome.FAILED, 1) is False
    path = claims(tmp_path) / NAME
    assert records(caplog) == [settle_warning("failed", f"{EIO}: {path}")]


def test_a_claim_whose_close_fails_after_its_settle_is_still_settled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path, syncfs=None)
    store.claim_sync("daily", T0, T0)
    closes: list[int] = []

    def close(fd: int) -> None:  # closed, but the file system reports a late write error
        closes.append(fd)
        os.close(fd)
        if len(closes) == 1:  # the claim's own descriptor is closed first
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    proxy = FailingOS()
    proxy.close = close  # type: ignore[method-assign]
    monkeypatch.setattr(settlefiles, "os", proxy)
    assert store.settle_sync("daily", T0, Outcome.COMPLETED, 1) is True
    assert len(closes) == 2  # the claim's descriptor, then its directory's
    (fire,) = store.history_sync("daily")
    assert fire.outcome is Outcome.COMPLETED


async def test_a_settle_whose_claim_cannot_be_opened_names_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    await store.claim("daily", T0, T0)
    fail(monkeypatch, safefile, "open", errno.EIO, named(NAME))
    assert await store.settle("daily", T0, Outcome.FAILED, 1) is False
    assert records(caplog) == [
        f"daily: could not open the claim for slot {format_iso(T0)} to settle it: "
        f"{EIO}: {claims(tmp_path) / NAME}"
    ]


# -- what a taken claim reports, and what a failed flush leaves -----------------------------------


async def test_a_taken_claim_reports_its_own_slot(tmp_path: Path) -> None:
    result = await DirectoryStore(tmp_path).claim("daily", T0, T0)
    assert (result.status, result.newest) == (ClaimStatus.TAKEN, NAME)


def test_a_failed_flush_leaves_the_previous_newest_claim_as_the_stale_gate(
    tmp_path: Path,
) -> None:
    where = claims(tmp_path)
    where.mkdir(parents=True)
    old = [T0 - timedelta(hours=2), T0 - timedelta(hours=1)]
    for slot in old:  # two claims where keep=1 allows one: as a larger keep left them
        (where / slot_name(slot)).write_bytes(b"")

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    with pytest.raises(StateFault):
        DirectoryStore(tmp_path, keep=1, syncfs=failing).claim_sync("daily", T0, T0)
    assert os.listdir(where) == [slot_name(old[1])]


async def test_claims_wait_for_the_stores_limiter(tmp_path: Path) -> None:
    limiter = trio.CapacityLimiter(1)
    store = DirectoryStore(tmp_path, limiter=limiter)
    async with trio.open_nursery() as nursery, limiter:
        nursery.start_soon(store.claim, "daily", T0, T0)
        await trio.testing.wait_all_tasks_blocked()
        assert limiter.statistics().tasks_waiting == 1
        assert not claims(tmp_path).exists()
    assert os.listdir(claims(tmp_path)) == [NAME]


def test_a_prune_goes_on_past_a_claim_removed_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = claims(tmp_path)
    where.mkdir(parents=True)
    old = [T0 - timedelta(hours=h) for h in (3, 2, 1)]
    for slot in old:  # three claims where keep=1 allows one: as a larger keep left them
        (where / slot_name(slot)).write_bytes(b"")

    def unlink(name: str, *, dir_fd: int) -> None:
        os.unlink(name, dir_fd=dir_fd)
        if name == slot_name(old[0]):  # another process pruned it first
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))

    proxy = FailingOS()
    proxy.unlink = unlink  # type: ignore[method-assign]
    monkeypatch.setattr(claimfiles, "os", proxy)
    assert DirectoryStore(tmp_path, keep=1, syncfs=None).claim_sync("daily", T0, T0).taken
    assert os.listdir(where) == [NAME]
