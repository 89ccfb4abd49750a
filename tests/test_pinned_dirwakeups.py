"""Pinned by mutation testing (docs/mutation.md): the state directory's wake-up calls
(stores/directory/wakeups.py) given up while their thread stalls, in virtual time, and the
small values of ready.py and claimbatch.py.

A stalled thread is one blocked on an event (as a frozen file system blocks it); the clock is
Trio's MockClock, moved by hand once the thread is stalled, so each bound is met exactly.
"""

from __future__ import annotations

import logging
import os
import pickle
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from trio_routines.converter import dumps, wakeup_to_json
from trio_routines.errors import StateFault
from trio_routines.records import Wakeup
from trio_routines.stores.directory import DirectoryStore, wakeuplog
from trio_routines.stores.directory.claimbatch import Contended
from trio_routines.stores.directory.ready import stalled_for
from trio_routines.stores.directory.wakeupjournal import Journal
from trio_routines.wakeups import WakeupRequest

NOW = datetime(2026, 7, 7, 9, tzinfo=UTC)
BOUND = 0.5  # lock_timeout: a call is given up after twice it


class Stall:
    """Makes a patched function block (in its thread) on its first call until :meth:`thaw`."""

    def __init__(self) -> None:
        self.thawed = threading.Event()
        self.entered = threading.Event()
        self.calls = 0

    def wrap(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def stalled(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls == 1:
                self.entered.set()
                self.thawed.wait(30)
            return real(*args, **kwargs)

        return stalled

    def thaw(self) -> None:
        self.thawed.set()


@pytest.fixture
def stall() -> Iterator[Stall]:
    stall = Stall()
    yield stall
    stall.thaw()  # never leave a thread blocked


class Call:
    """A store call run beside the test, its outcome kept."""

    def __init__(self) -> None:
        self.done = False
        self.value: object = None
        self.error: BaseException | None = None

    async def run(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            self.value = await fn(*args)
        except StateFault as exc:
            self.error = exc
        finally:
            self.done = True


def path_of(tmp_path: Path) -> Path:
    return tmp_path / "schedule" / "wakeups.journal"


async def given_up(
    clock: trio.testing.MockClock, stall: Stall, fn: Callable[..., Any], *args: Any
) -> str:
    """Run ``fn(*args)``, whose thread stalls, to its bound of twice ``BOUND`` (and not
    before), and return its error's text."""
    call = Call()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(call.run, fn, *args)
        try:
            assert await trio.to_thread.run_sync(stall.entered.wait, 10)
            await trio.testing.wait_all_tasks_blocked()
            clock.jump(2 * BOUND - 0.25)
            await trio.testing.wait_all_tasks_blocked()
            assert not call.done  # still waiting for its thread
            clock.jump(0.5)
            await trio.testing.wait_all_tasks_blocked()
            assert call.done  # left at its bound, the thread still stalled
        finally:
            stall.thaw()  # (at once, when an assertion failed)
    assert call.error is not None
    return str(call.error)


async def ended(store: DirectoryStore) -> None:
    """Until the thread of the store's last wake-up call, given up or not, has returned."""
    last = store._wakeups._turns.ended
    if last is not None:
        await last.wait()


async def due(store: DirectoryStore, session: str = "s") -> Wakeup:
    """A wake-up due at NOW (added an hour before)."""
    request = WakeupRequest(session=session, prompt="p", fire_at=NOW)
    return await store.add_wakeup(request, NOW - timedelta(hours=1))


async def test_a_take_given_up_says_its_bound_and_that_a_late_change_is_undone(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mock_clock: trio.testing.MockClock,
    stall: Stall,
) -> None:
    store = DirectoryStore(tmp_path, lock_timeout=BOUND, writer_process=False)
    wakeup = await due(store)
    monkeypatch.setattr(Journal, "append", stall.wrap(Journal.append))
    text = await given_up(mock_clock, stall, store.take_due_wakeup, NOW)
    assert text == (
        f"the wake-up store {path_of(tmp_path)} did not answer within 1s (a stalled disk?): "
        "given up — a change that lands later is undone"
    )
    await ended(store)
    assert await store.list_wakeups() == [wakeup]


async def test_a_change_whose_compaction_stalls_is_left_at_its_bound_and_undone(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mock_clock: trio.testing.MockClock,
    stall: Stall,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A new generation is written within the change, before its answer is handed over: a
    # disk that stalls it holds the caller no longer than any other write would.
    monkeypatch.setattr(wakeuplog, "SLACK", 0)  # the take's line makes the journal due
    store = DirectoryStore(tmp_path, lock_timeout=BOUND, writer_process=False)
    wakeup = await due(store)
    monkeypatch.setattr(Journal, "write_generation", stall.wrap(Journal.write_generation))
    before = set(os.listdir("/proc/self/fd"))
    text = await given_up(mock_clock, stall, store.take_due_wakeup, NOW)
    assert text.endswith("given up — a change that lands later is undone")
    await ended(store)
    assert set(os.listdir("/proc/self/fd")) == before  # the new journal's descriptor closed
    assert await store.list_wakeups() == [wakeup]  # the take, made and compacted, undone
    assert "and undone" in caplog.text


@pytest.mark.parametrize("reopened", [True, False])
async def test_a_change_given_up_after_a_compaction_not_reopened_is_undone_in_the_new_journal(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mock_clock: trio.testing.MockClock,
    stall: Stall,
    caplog: pytest.LogCaptureFixture,
    reopened: bool,
) -> None:
    # The new generation renamed in, then its opening failed (no descriptor left, say): the
    # undo goes to the journal opened again, never to the file the rename replaced; and if
    # it cannot be opened at all, the change is reported made, not undone.
    monkeypatch.setattr(wakeuplog, "SLACK", 0)
    store = DirectoryStore(tmp_path, lock_timeout=BOUND, writer_process=False)
    wakeup = await due(store)
    real_write, real_open = Journal.write_generation, Journal.open
    refusing = [False]

    def write_generation(self: Journal, directory: int, data: bytes) -> None:
        real_write(self, directory, data)
        refusing[0] = True

    def open_journal(self: Journal, directory: int, *, append: bool = False) -> int:
        if append and refusing[0]:
            refusing[0] = not reopened  # once, or every time
            raise OSError(24, "Too many open files")
        return real_open(self, directory, append=append)

    monkeypatch.setattr(Journal, "write_generation", stall.wrap(write_generation))
    monkeypatch.setattr(Journal, "open", open_journal)
    before = set(os.listdir("/proc/self/fd"))
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        await given_up(mock_clock, stall, store.take_due_wakeup, NOW)
        await ended(store)
    assert set(os.listdir("/proc/self/fd")) == before  # none left open, none closed twice
    refusing[0] = False
    said = [r.getMessage() for r in caplog.records if "given up by its caller" in r.getMessage()]
    assert len(said) == 1
    if reopened:
        assert said[0].endswith("), and undone")
        assert await store.list_wakeups() == [wakeup]
    else:  # why: the journal could not be opened again
        assert "could not be undone: schedule state " in said[0]
        assert "EMFILE: Too many open files" in said[0]
        assert await store.list_wakeups() == []  # taken, and told so


async def test_a_call_after_one_given_up_waits_for_its_thread_and_says_so(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mock_clock: trio.testing.MockClock,
    stall: Stall,
) -> None:
    store = DirectoryStore(tmp_path, lock_timeout=BOUND, writer_process=False)
    await due(store)
    monkeypatch.setattr(Journal, "append", stall.wrap(Journal.append))
    first = Call()
    second = Call()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(first.run, store.take_due_wakeup, NOW)
        try:
            assert await trio.to_thread.run_sync(stall.entered.wait, 10)
            await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(2 * BOUND + 0.25)
            await trio.testing.wait_all_tasks_blocked()
            assert first.done
            nursery.start_soon(second.run, store.list_wakeups)
            await trio.testing.wait_all_tasks_blocked()
            assert not second.done  # waiting for the thread given up, not contending with it
            mock_clock.jump(BOUND + 0.25)
            await trio.testing.wait_all_tasks_blocked()
            assert second.done
            assert stall.calls == 1  # no second thread piled up behind the stalled one
        finally:
            stall.thaw()
    assert str(second.error) == (
        f"the wake-up store {path_of(tmp_path)}: a call given up earlier is still under way "
        "after 0.5s (a stalled disk?) — try again"
    )
    await ended(store)
    assert len(await store.list_wakeups()) == 1


async def test_a_call_given_up_before_its_thread_started_leaves_none_to_wait_for(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    # Every place in the store's limiter taken (threads stalled on a frozen disk, say): a call
    # given up while it waits for one started no thread, and once the places are free again,
    # the calls after it answer, rather than each waiting for a thread that never was.
    limiter = trio.CapacityLimiter(1)
    store = DirectoryStore(tmp_path, lock_timeout=BOUND, writer_process=False, limiter=limiter)
    wakeup = await due(store)
    await limiter.acquire_on_behalf_of("a stalled thread")
    first = Call()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(first.run, store.take_due_wakeup, NOW)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(2 * BOUND + 0.25)
    limiter.release_on_behalf_of("a stalled thread")
    assert "did not answer within 1s (a stalled disk?): given up" in str(first.error)
    after = Call()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(after.run, store.list_wakeups)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(BOUND + 0.25)  # as long as a call waits for one given up before it
    assert (after.error, after.value) == (None, [wakeup])


async def test_a_list_given_up_says_only_given_up(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mock_clock: trio.testing.MockClock,
    stall: Stall,
) -> None:
    store = DirectoryStore(tmp_path, lock_timeout=BOUND, writer_process=False)
    await due(store)
    real = wakeuplog.WakeupLog.refresh
    monkeypatch.setattr(wakeuplog.WakeupLog, "refresh", stall.wrap(real))
    text = await given_up(mock_clock, stall, store.list_wakeups)
    assert text == (
        f"the wake-up store {path_of(tmp_path)} did not answer within 1s (a stalled disk?): "
        "given up"
    )


async def test_a_deferral_given_up_says_so_and_is_made_when_it_lands(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mock_clock: trio.testing.MockClock,
    stall: Stall,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = DirectoryStore(tmp_path, lock_timeout=BOUND, writer_process=False)
    await due(store)
    taken = await store.take_due_wakeup(NOW)
    assert taken is not None
    monkeypatch.setattr(Journal, "append", stall.wrap(Journal.append))
    later = NOW + timedelta(minutes=1)
    with caplog.at_level(logging.WARNING, "trio_routines"):
        text = await given_up(mock_clock, stall, store.defer_wakeup, taken, later)
        await ended(store)
    assert text == (
        f"the wake-up store {path_of(tmp_path)} did not answer within 1s (a stalled disk?): "
        f"given up — wake-up {taken.id} may still be re-queued"
    )
    # Made after all (a deferral puts back a wake-up already taken), never undone.
    (deferred,) = await store.list_wakeups()
    assert (deferred.id, deferred.fire_at, deferred.attempts) == (taken.id, later, 1)
    assert any("made after all" in r.message for r in caplog.records)


async def test_deferring_a_wakeup_still_pending_moves_it(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path, writer_process=False)
    wakeup = await due(store)
    other = await due(store, "t")
    later = NOW + timedelta(minutes=5)
    assert await store.defer_wakeup(wakeup, later)
    listed = await store.list_wakeups()
    assert [(w.id, w.fire_at, w.attempts) for w in listed] == [
        (other.id, NOW, None),
        (wakeup.id, later, 1),
    ]
    assert await store.take_due_wakeup(NOW) == other
    assert await store.take_due_wakeup(NOW) is None


async def test_a_take_passes_an_expired_wakeup_for_the_next_due(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    schedule = tmp_path / "schedule"
    schedule.mkdir()
    expired = Wakeup(
        id="expired",
        session="s",
        prompt="p",
        fire_at=NOW - timedelta(hours=2),
        cron="0 * * * *",
        until=NOW - timedelta(hours=1),
    )
    one_shot = Wakeup(id="one", session="s", prompt="q", fire_at=NOW - timedelta(minutes=1))
    data = dumps([wakeup_to_json(expired), wakeup_to_json(one_shot)]).encode()
    (schedule / "wakeups.json").write_bytes(data)
    store = DirectoryStore(tmp_path, writer_process=False)
    with caplog.at_level(logging.WARNING, "trio_routines"):
        assert await store.take_due_wakeup(NOW) == one_shot
    assert any("expired" in r.message for r in caplog.records)
    assert await store.list_wakeups() == []


def test_stalled_for_is_the_wait_of_the_oldest_call() -> None:
    assert stalled_for(10.0, [7.0, None, 4.0]) == 6.0
    assert stalled_for(10.0, [None]) is None


def test_contended_names_the_claim_and_survives_the_writer_pipe() -> None:
    slot = datetime(2026, 7, 7, 10, tzinfo=UTC)
    error = Contended("r", slot)
    text = "r: the claim of slot 2026-07-07T10-00-00-000Z is locked by a settle"
    assert str(error) == text
    back = pickle.loads(pickle.dumps(error))
    assert (type(back), back.routine, back.slot, str(back)) == (Contended, "r", slot, text)
