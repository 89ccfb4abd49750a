"""The state directory's thread calls stalled in the "kernel" (a thread blocked on an event, as
a frozen file system blocks it): their callers leave at once, and nothing stored is lost.

Real clock (threads); every wait has a generous bound, and none is asserted tighter.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_routines.errors import StateFault
from trio_routines.records import Outcome, Wakeup
from trio_routines.replicas import ReplicaInfo
from trio_routines.stores.directory import DirectoryStore, blocking, claimfiles, wakeuplog
from trio_routines.stores.directory import holds as directory_holds
from trio_routines.stores.directory import store as directory_store
from trio_routines.stores.directory.wakeupjournal import Journal
from trio_routines.wakeups import WakeupRequest

NOW = datetime(2026, 7, 7, 9, tzinfo=UTC)
SLOT = datetime(2026, 7, 7, 9, tzinfo=UTC)
PROMPTLY = 10.0  # what "at once" may take on a loaded machine: the stall itself is endless


class Stall:
    """Makes a patched function block (in its thread) until :meth:`thaw`; counts entries."""

    def __init__(self) -> None:
        self.thawed = threading.Event()
        self.entered = threading.Event()
        self.calls = 0

    def wrap(self, real: Callable[..., Any], *, first_only: bool = True) -> Callable[..., Any]:
        def stalled(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls == 1 or not first_only:
                self.entered.set()
                self.thawed.wait(60)
            return real(*args, **kwargs)

        return stalled

    def thaw(self) -> None:
        self.thawed.set()


@pytest.fixture
def stall() -> Iterator[Stall]:
    stall = Stall()
    yield stall
    stall.thaw()  # never leave a thread blocked


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def settled(store: DirectoryStore) -> None:
    """Until every thread of the store's, given up or not, has returned."""
    with trio.fail_after(30):
        while store._begun:  # noqa: ASYNC110 -- threads, not Trio tasks
            await trio.sleep(0.01)
        if store._wakeups._turns.ended is not None:
            await store._wakeups._turns.ended.wait()


async def not_ready_until_thawed(store: DirectoryStore, stall: Stall) -> None:
    """Past ``STALLED_AFTER`` (made 0.2 s), the store is not ready while the stalled call is
    under way, and is again once it is thawed and has returned."""
    await trio.sleep(0.3)
    with pytest.raises(StateFault, match="have not answered"):
        await store.ready()
    stall.thaw()
    await settled(store)
    await store.ready()


async def due(store: DirectoryStore, session: str = "s") -> Wakeup:
    """A wake-up due at NOW (added an hour before)."""
    request = WakeupRequest(session=session, prompt="p", fire_at=NOW)
    return await store.add_wakeup(request, NOW - timedelta(hours=1))


def stall_appends(monkeypatch: pytest.MonkeyPatch, stall: Stall) -> None:
    """The next append to ``wakeups.journal`` stalls before it lands."""
    monkeypatch.setattr(Journal, "append", stall.wrap(Journal.append))


def stall_locked_reads(monkeypatch: pytest.MonkeyPatch, stall: Stall) -> None:
    """The next catch-up under the writers' lock stalls (before any change)."""
    real = wakeuplog.WakeupLog._writable

    def writable(self: wakeuplog.WakeupLog, directory: int) -> int:
        if stall.calls == 0:
            stall.calls += 1
            stall.entered.set()
            stall.thawed.wait(60)
        return real(self, directory)

    monkeypatch.setattr(wakeuplog.WakeupLog, "_writable", writable)


@pytest.mark.slow  # a second or more of the real clock: a stall outlived
async def test_a_take_whose_append_lands_after_its_caller_gave_up_is_undone(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stall: Stall,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = DirectoryStore(tmp_path, lock_timeout=0.5)
    wakeup = await due(store)
    stall_appends(monkeypatch, stall)
    with trio.fail_after(PROMPTLY), pytest.raises(StateFault) as raised:
        await store.take_due_wakeup(NOW)  # the store's own bound: twice lock_timeout
    assert "did not answer within 1s" in str(raised.value)
    assert "undone" in str(raised.value)
    assert stall.entered.is_set()
    stall.thaw()  # the append lands now, long after its caller left...
    with caplog.at_level(logging.WARNING, "trio_routines"):
        await settled(store)
    # ...and is undone under the lock it still held: the wake-up is pending again.
    assert [w.id for w in await store.list_wakeups()] == [wakeup.id]
    assert any(
        "made after all" in r.message and wakeup.id in r.message and "undone" in r.message
        for r in caplog.records
    )
    assert await store.take_due_wakeup(NOW) == wakeup  # and is delivered once


async def test_a_take_given_up_before_its_change_makes_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stall: Stall
) -> None:
    store = DirectoryStore(tmp_path, lock_timeout=10)
    wakeup = await due(store)
    stall_locked_reads(monkeypatch, stall)
    with trio.fail_after(PROMPTLY):
        with trio.move_on_after(0.3) as cut:  # the caller's deadline (a stop's bound)
            await store.take_due_wakeup(NOW)
    assert cut.cancelled_caught
    writes = count_appends(monkeypatch)
    stall.thaw()
    await settled(store)
    assert writes == []  # the thread saw its caller gone before any change
    assert await store.take_due_wakeup(NOW) == wakeup


def count_appends(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    writes: list[bytes] = []
    real = Journal.append

    def counted(self: Journal, fd: int, data: bytes) -> None:
        writes.append(data)
        real(self, fd, data)

    monkeypatch.setattr(Journal, "append", counted)
    return writes


@pytest.mark.slow  # a second or more of the real clock: a stall outlived
async def test_an_add_given_up_is_an_error_and_never_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stall: Stall
) -> None:
    store = DirectoryStore(tmp_path, lock_timeout=0.5)
    stall_appends(monkeypatch, stall)
    request = WakeupRequest(session="s", prompt="p", fire_at=NOW + timedelta(hours=1))
    with trio.fail_after(PROMPTLY), pytest.raises(StateFault):
        await store.add_wakeup(request, NOW)
    stall.thaw()
    await settled(store)
    assert await store.list_wakeups() == []  # the caller was told no, and it is no


@pytest.mark.slow  # a second or more of the real clock: a stall outlived
async def test_a_removal_given_up_is_undone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stall: Stall
) -> None:
    store = DirectoryStore(tmp_path, lock_timeout=0.5)
    wakeup = await due(store)
    stall_appends(monkeypatch, stall)
    with trio.fail_after(PROMPTLY), pytest.raises(StateFault):
        await store.remove_wakeup(wakeup.id)
    stall.thaw()
    await settled(store)
    assert await store.list_wakeups() == [wakeup]


@pytest.mark.slow  # a second or more of the real clock: a stall outlived
async def test_a_deferral_given_up_is_still_made(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stall: Stall,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A deferral puts back a wake-up already taken: undoing it would lose the wake-up.
    store = DirectoryStore(tmp_path, lock_timeout=0.5)
    await due(store)
    taken = await store.take_due_wakeup(NOW)
    assert taken is not None
    stall_appends(monkeypatch, stall)
    with trio.fail_after(PROMPTLY), pytest.raises(StateFault) as raised:
        await store.defer_wakeup(taken, NOW + timedelta(minutes=1))
    assert "may still be re-queued" in str(raised.value)
    stall.thaw()
    with caplog.at_level(logging.WARNING, "trio_routines"):
        await settled(store)
    assert [w.id for w in await store.list_wakeups()] == [taken.id]
    assert any("made after all" in r.message for r in caplog.records)


@pytest.mark.slow  # a second or more of the real clock: a stall outlived
async def test_the_next_call_waits_for_a_call_given_up_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stall: Stall
) -> None:
    store = DirectoryStore(tmp_path, lock_timeout=0.5)
    await due(store)
    stall_appends(monkeypatch, stall)
    with trio.fail_after(PROMPTLY), pytest.raises(StateFault):
        await store.take_due_wakeup(NOW)
    # Still stalled: the next call does not contend with it for the flock (which would
    # blame "another store object"), and does not pile up a second stalled thread.
    with trio.fail_after(PROMPTLY), pytest.raises(StateFault) as raised:
        await store.list_wakeups()
    assert "a call given up earlier is still under way" in str(raised.value)
    assert stall.calls == 1
    stall.thaw()
    await settled(store)
    assert len(await store.list_wakeups()) == 1


@pytest.mark.slow  # a second or more of the real clock: a stall outlived
async def test_the_store_is_not_ready_while_a_wakeup_write_stalls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stall: Stall
) -> None:
    monkeypatch.setattr(directory_store, "STALLED_AFTER", 0.2)
    store = DirectoryStore(tmp_path, lock_timeout=0.5)
    await due(store)
    await store.ready()
    stall_appends(monkeypatch, stall)
    with trio.fail_after(PROMPTLY), pytest.raises(StateFault):
        await store.take_due_wakeup(NOW)
    # Given up by its caller, the write is still under way: the disk is no less stalled.
    await not_ready_until_thawed(store, stall)


async def test_a_contended_settle_is_left_at_its_callers_deadline_and_closes_its_descriptor(
    tmp_path: Path,
) -> None:
    store = DirectoryStore(tmp_path, writer_process=False)
    assert (await store.claim("r", SLOT, SLOT)).taken
    path = store.claim_dir("r") / "2026-07-07T09-00-00-000Z"
    before = fds()
    holder = os.open(path, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)  # "another process" settling the same claim
    try:
        with trio.fail_after(PROMPTLY):
            with trio.move_on_after(0.3) as cut:  # waits up to lock_timeout (10 s) otherwise
                await store.settle("r", SLOT, Outcome.COMPLETED, 5)
        assert cut.cancelled_caught
    finally:
        os.close(holder)  # the settle left behind gets the lock now and writes
    await settled(store)
    (fire,) = await store.history("r")
    assert fire.outcome is Outcome.COMPLETED  # it landed, later: an outcome is never undone
    assert fds() == before  # the descriptor it kept for a flush was closed by its thread


async def test_a_stalled_thread_batch_is_left_and_closes_its_descriptors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stall: Stall
) -> None:
    store = DirectoryStore(tmp_path, writer_process=False)
    assert (await store.claim("r", SLOT, SLOT)).taken
    before = fds()
    real = claimfiles.ClaimFiles.create_each
    monkeypatch.setattr(
        claimfiles.ClaimFiles,
        "create_each",
        lambda self, items: stall.wrap(real)(self, items),
    )
    later = SLOT + timedelta(minutes=1)
    with trio.fail_after(PROMPTLY):
        with trio.move_on_after(0.3) as cut:
            await store.claim("r", later, later)
    assert cut.cancelled_caught
    stall.thaw()
    await settled(store)
    # The claim was made for nobody (the reconcile of open claims records it); the
    # descriptor its flush would have gone through is closed.
    assert fds() == before


async def test_a_boot_read_stalled_is_left_at_its_callers_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stall: Stall
) -> None:
    store = DirectoryStore(tmp_path, writer_process=False)
    assert (await store.claim("r", SLOT, SLOT)).taken
    monkeypatch.setattr(blocking, "read_claims", stall.wrap(blocking.read_claims))
    with trio.fail_after(PROMPTLY):
        with trio.move_on_after(0.3) as cut:
            await store.latest_fire("r")
    assert cut.cancelled_caught
    stall.thaw()
    await settled(store)
    fire = await store.latest_fire("r")
    assert fire is not None
    assert fire.slot == SLOT


@pytest.mark.slow  # a second or more of the real clock: a stall outlived
async def test_the_store_is_not_ready_while_a_heartbeat_stalls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stall: Stall
) -> None:
    # A frozen file system held the replica's heartbeat (its record's rewrite) while every
    # replica said ready: no claim or settle happened to be under way.
    monkeypatch.setattr(directory_store, "STALLED_AFTER", 0.2)
    store = DirectoryStore(tmp_path, lock_timeout=0.5)
    presence = await store.join(ReplicaInfo("a", "0.1.0", "host", 1, NOW, NOW))
    await store.ready()
    monkeypatch.setattr(directory_holds, "write_replica", stall.wrap(directory_holds.write_replica))
    with trio.move_on_after(0.1) as cut:  # the watch's deadline: it leaves the thread
        await presence.beat(0, NOW)
    assert cut.cancelled_caught
    await not_ready_until_thawed(store, stall)
    await presence.leave()
    await store.aclose()
