"""Worker-thread calls a caller may leave (abandon.py), pinned: the limiter's place given back,
each call's own entry among those under way and when it began, the debug line of a failure
nobody hears of, and a thread that cannot start."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
import trio

from trio_routines.stores.abandon import Handoff, run_abandoning


async def wait_for(event: threading.Event) -> None:
    with trio.fail_after(10):
        while not event.is_set():  # noqa: ASYNC110 -- set by a worker thread
            await trio.sleep(0.005)


def test_a_new_handoff_has_not_been_given_up() -> None:
    assert Handoff().gave_up is False


async def test_each_call_gives_its_place_in_the_limiter_back() -> None:
    limiter = trio.CapacityLimiter(1)
    with trio.fail_after(10):  # a place kept would make the second call wait for ever
        assert await run_abandoning(lambda: "first", limiter=limiter) == "first"
        assert limiter.borrowed_tokens == 0
        assert await run_abandoning(lambda: "second", limiter=limiter) == "second"
    assert limiter.borrowed_tokens == 0


async def test_each_call_under_way_has_its_own_entry_stamped_when_it_began() -> None:
    begun: dict[object, float] = {}
    entered = [threading.Event(), threading.Event()]
    release = [threading.Event(), threading.Event()]
    ended = [trio.Event(), trio.Event()]
    before = trio.current_time()

    def work(index: int) -> None:
        entered[index].set()
        release[index].wait(10)

    async def call(index: int) -> None:
        await run_abandoning(work, index, limiter=None, begun=begun, ended=ended[index])

    async with trio.open_nursery() as nursery:
        for index in (0, 1):
            nursery.start_soon(call, index)
        for index in (0, 1):
            await wait_for(entered[index])
        assert len(begun) == 2
        assert all(before <= at <= trio.current_time() for at in begun.values())
        release[0].set()
        with trio.fail_after(10):
            await ended[0].wait()
        assert len(begun) == 1  # the one still under way keeps its entry
        release[1].set()
    assert begun == {}


async def test_a_failure_nobody_waits_for_is_logged_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_routines")
    entered, release = threading.Event(), threading.Event()
    ended = trio.Event()
    late: list[object] = []

    def work(handoff: Handoff) -> None:
        entered.set()
        release.wait(10)
        raise ValueError("the disk said no")

    async def cancel_when_entered(scope: trio.CancelScope) -> None:
        await wait_for(entered)
        scope.cancel()

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_when_entered, scope)
            await run_abandoning(
                work, limiter=None, handoff=Handoff(), late=late.append, ended=ended
            )
    assert scope.cancelled_caught
    release.set()
    with trio.fail_after(10):
        await ended.wait()
    assert late == []  # an error is not an answer to deal with
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "trio_routines"]
    assert lines == [
        (logging.DEBUG, "a call given up by its caller failed: ValueError('the disk said no')")
    ]


async def test_a_thread_that_cannot_start_leaves_nothing_under_way_nor_a_place_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(fn: Callable[..., Any], deliver: Callable[..., Any]) -> None:
        raise RuntimeError("no thread for you")

    monkeypatch.setattr(trio.lowlevel, "start_thread_soon", refuse)
    limiter = trio.CapacityLimiter(1)
    begun: dict[object, float] = {}
    with pytest.raises(RuntimeError, match=r"^no thread for you$"):
        await run_abandoning(lambda: None, limiter=limiter, begun=begun)
    assert begun == {}
    assert limiter.borrowed_tokens == 0


@pytest.mark.parametrize("where", ["before", "waiting for its place"])
async def test_a_call_given_up_before_its_thread_started_is_ended(where: str) -> None:
    # Whoever waits for the end of a call given up (the next wake-up call, the next walk of
    # open claims) must not wait for a thread that never was.
    limiter = trio.CapacityLimiter(1)
    await limiter.acquire_on_behalf_of("another call")
    ended = trio.Event()
    ran = threading.Event()
    with trio.CancelScope() as scope:
        if where == "before":
            scope.cancel()
        else:
            scope.deadline = trio.current_time() + 0.01
        await run_abandoning(ran.set, limiter=limiter, ended=ended)
    assert scope.cancelled_caught
    assert ended.is_set()
    assert not ran.is_set()
    limiter.release_on_behalf_of("another call")
    assert limiter.borrowed_tokens == 0  # and took no place


async def test_a_thread_that_cannot_start_is_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(fn: Callable[..., Any], deliver: Callable[..., Any]) -> None:
        raise RuntimeError("no thread for you")

    monkeypatch.setattr(trio.lowlevel, "start_thread_soon", refuse)
    ended = trio.Event()
    with pytest.raises(RuntimeError, match=r"^no thread for you$"):
        await run_abandoning(lambda: None, limiter=None, ended=ended)
    assert ended.is_set()
