"""A pause or resume of the state directory given up while the disk stalls it
(stores/directory/records.py, pause.py): one given up before it began is not begun, and the
next one waits for the thread of one given up, so that a late pause never lands after a later
resume. Virtual time: the clock is moved by hand once the thread is stalled."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
import trio.testing
from test_pinned_dirwakeups import Stall, stall

from trio_routines.errors import StateFault
from trio_routines.stores.directory import DirectoryStore, pause

__all__ = ["stall"]  # a fixture of test_pinned_dirwakeups, used here

AT = datetime(2026, 7, 7, 9, tzinfo=UTC)
BOUND = 0.5  # the store's lock_timeout: how long the next call waits for a thread given up


async def given_up(
    store: DirectoryStore, stall: Stall, paused: bool, at: datetime | None = None
) -> None:
    """``set_paused`` whose thread stalls, its caller giving up (a deadline of 1 s)."""
    with trio.move_on_after(1) as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.set_paused, "r", paused, at)
            assert await trio.to_thread.run_sync(stall.entered.wait, 10)
            await trio.testing.wait_all_tasks_blocked()
            trio.lowlevel.current_clock().jump(1)  # type: ignore[attr-defined]
            await trio.sleep(1)
    assert scope.cancelled_caught


async def thread_ended(limiter: trio.CapacityLimiter) -> None:
    """Until the store's threads (of ``limiter``) have all returned."""

    def idle() -> None:
        deadline = time.monotonic() + 10
        while limiter.borrowed_tokens and time.monotonic() < deadline:
            time.sleep(0.005)

    await trio.to_thread.run_sync(idle)  # (its own thread takes no place in ``limiter``)
    assert limiter.borrowed_tokens == 0


async def test_a_resume_given_up_before_it_began_keeps_no_instant(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mock_clock: trio.testing.MockClock,
    stall: Stall,
) -> None:
    limiter = trio.CapacityLimiter(4)
    store = DirectoryStore(tmp_path, lock_timeout=BOUND, writer_process=False, limiter=limiter)
    await store.set_paused("r", True)
    monkeypatch.setattr(pause, "open_dirs", stall.wrap(pause.open_dirs))
    await given_up(store, stall, False, AT)
    stall.thaw()
    await thread_ended(limiter)
    assert await store.paused() == {"r"}
    assert await store.resumed_at("r") is None
    await store.aclose()


async def test_a_resume_of_a_routine_not_paused_keeps_no_instant(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path, writer_process=False)
    await store.set_paused("other", True)  # (the pauses' directory is there)
    await store.set_paused("r", False, AT)
    assert await store.resumed_at("r") is None
    await store.set_paused("r", True)
    await store.set_paused("r", False, AT)
    assert await store.resumed_at("r") == AT
    (tmp_path / "schedule" / "paused" / "r").mkdir()  # no pause of ours: no file
    await store.set_paused("r", False, AT + timedelta(hours=1))
    assert await store.resumed_at("r") == AT
    await store.aclose()


async def test_a_pause_given_up_before_it_began_is_not_begun(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mock_clock: trio.testing.MockClock,
    stall: Stall,
) -> None:
    limiter = trio.CapacityLimiter(4)
    store = DirectoryStore(tmp_path, lock_timeout=BOUND, writer_process=False, limiter=limiter)
    monkeypatch.setattr(pause, "open_dirs", stall.wrap(pause.open_dirs))
    await given_up(store, stall, True)
    stall.thaw()  # the disk answers: the thread finds its caller gone
    await thread_ended(limiter)
    assert await store.paused() == frozenset()
    await store.aclose()


@pytest.mark.parametrize("first", ["pause", "resume"])
async def test_the_next_change_waits_for_one_given_up_and_never_lands_before_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mock_clock: trio.testing.MockClock,
    stall: Stall,
    first: str,
) -> None:
    # A pause given up then a resume, or a resume given up then a pause: the first is stalled
    # in its change itself (its flush), so it may still land; the second must not land first.
    limiter = trio.CapacityLimiter(4)
    store = DirectoryStore(tmp_path, lock_timeout=BOUND, writer_process=False, limiter=limiter)
    if first == "resume":
        await store.set_paused("r", True)
    monkeypatch.setattr(pause, "fsync", stall.wrap(pause.fsync))
    await given_up(store, stall, first == "pause")
    then = "resume" if first == "pause" else "pause"
    said: list[str] = []

    async def second() -> None:
        with pytest.raises(StateFault) as refused:
            await store.set_paused("r", then == "pause")
        said.append(str(refused.value))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(second)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(BOUND - 0.1)
        await trio.testing.wait_all_tasks_blocked()
        kept = said[:]
        mock_clock.jump(0.2)
    assert kept == []  # it waited for the first one's thread...
    assert said == [  # ...for as long as the bound, changing nothing
        f"could not {then} 'r': a pause or resume given up earlier is still under way after "
        "0.5s (a stalled disk?) — try again"
    ]
    stall.thaw()
    await thread_ended(limiter)
    landed = {"r"} if first == "pause" else set()
    assert await store.paused() == landed  # the first one landed, before the second
    await store.set_paused("r", then == "pause")  # asked again, it comes after it
    assert await store.paused() == ({"r"} if then == "pause" else set())
    await store.aclose()


async def test_a_pause_or_resume_takes_a_place_in_the_stores_thread_limiter(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    limiter = trio.CapacityLimiter(1)
    store = DirectoryStore(tmp_path, lock_timeout=BOUND, writer_process=False, limiter=limiter)
    await limiter.acquire_on_behalf_of("a stalled thread")
    done: list[bool] = []

    async def pause_it() -> None:
        await store.set_paused("r", True)
        done.append(True)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pause_it)
        await trio.testing.wait_all_tasks_blocked()
        waited = done[:]
        limiter.release_on_behalf_of("a stalled thread")
    assert waited == []
    assert done == [True]
    assert await store.paused() == {"r"}
    await store.aclose()


async def test_the_next_change_goes_on_once_the_one_given_up_ends_within_the_bound(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mock_clock: trio.testing.MockClock,
    stall: Stall,
) -> None:
    limiter = trio.CapacityLimiter(4)
    store = DirectoryStore(tmp_path, lock_timeout=BOUND, writer_process=False, limiter=limiter)
    monkeypatch.setattr(pause, "fsync", stall.wrap(pause.fsync))
    await given_up(store, stall, True)  # a pause, stalled in its flush
    done: list[bool] = []

    async def resume() -> None:
        await store.set_paused("r", False)
        done.append(True)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(resume)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(BOUND / 2)
        await trio.testing.wait_all_tasks_blocked()
        waited = done[:]
        stall.thaw()  # the disk answers within the bound: the pause lands, then the resume
    assert waited == []
    assert done == [True]
    assert await store.paused() == frozenset()
    await store.aclose()


async def test_a_change_waits_its_turn_behind_another_in_flight_for_at_most_the_bound(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mock_clock: trio.testing.MockClock,
    stall: Stall,
) -> None:
    # A pause whose caller still waits for it (an embedder's call without a deadline), its
    # disk stalled: a resume behind it in this process waits for its turn no longer than
    # the bound, and says so.
    store = DirectoryStore(tmp_path, lock_timeout=BOUND, writer_process=False)
    monkeypatch.setattr(pause, "fsync", stall.wrap(pause.fsync))
    said: list[str] = []

    async def resume() -> None:
        with pytest.raises(StateFault) as refused:
            await store.set_paused("r", False)
        said.append(str(refused.value))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.set_paused, "r", True)
        assert await trio.to_thread.run_sync(stall.entered.wait, 10)
        nursery.start_soon(resume)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(BOUND + 0.1)
        await trio.testing.wait_all_tasks_blocked()
        kept = said[:]
        stall.thaw()
    assert kept == [
        "could not resume 'r': another pause or resume was under way in this process for "
        "0.5s (a stalled disk?) — try again"
    ]
    assert await store.paused() == {"r"}
    await store.aclose()
