"""abandon.py: a caller leaves its thread when cancelled, unless the thread has handed its
answer over already; the thread then learns which, and deals with an answer nobody takes."""

from __future__ import annotations

import threading

import trio
import trio.lowlevel

from trio_routines.stores.abandon import Handoff, run_abandoning


async def wait_for(event: threading.Event) -> None:
    with trio.fail_after(10):
        while not event.is_set():  # noqa: ASYNC110 -- set by a worker thread
            await trio.sleep(0.005)


async def test_a_caller_cancelled_leaves_and_the_thread_deals_with_its_answer() -> None:
    entered, release, finished = threading.Event(), threading.Event(), threading.Event()
    late: list[str] = []
    handed: list[bool] = []

    def work(handoff: Handoff) -> str:
        entered.set()
        release.wait(10)
        handed.append(handoff.hand_over())
        return "answer"

    def dealt(answer: str) -> None:
        late.append(answer)
        finished.set()

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_and_cancel, entered, scope)
            await run_abandoning(work, limiter=None, handoff=Handoff(), late=dealt)
    assert scope.cancelled_caught  # left while the thread still waited
    release.set()
    await wait_for(finished)
    assert handed == [False]
    assert late == ["answer"]


async def wait_and_cancel(entered: threading.Event, scope: trio.CancelScope) -> None:
    await wait_for(entered)
    scope.cancel()


async def test_an_answer_handed_over_is_never_dropped_by_a_cancellation() -> None:
    # The race trio.to_thread cannot close: the thread is done, its caller is cancelled
    # before it takes the answer. Here the caller takes it, and is cancelled afterwards.
    handed_over, release = threading.Event(), threading.Event()
    late: list[str] = []
    got: list[str] = []

    def work(handoff: Handoff) -> str:
        assert handoff.hand_over()
        handed_over.set()
        release.wait(10)  # the caller is cancelled meanwhile
        return "answer"

    async def cancel_then_release(scope: trio.CancelScope) -> None:
        await wait_for(handed_over)
        scope.cancel()  # its abort runs now, while the thread still waits
        release.set()

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_then_release, scope)
            got.append(
                await run_abandoning(work, limiter=None, handoff=Handoff(), late=late.append)
            )
            await trio.lowlevel.checkpoint()  # the cancellation arrives here, after the answer
    assert scope.cancelled_caught
    assert got == ["answer"]
    assert late == []


async def test_a_thread_that_must_start_starts_for_a_caller_cancelled_already() -> None:
    ran = threading.Event()
    limiter = trio.CapacityLimiter(1)
    answered: list[None] = []
    async with limiter:  # no place free: it does not wait for one either
        with trio.CancelScope() as scope:
            scope.cancel()
            # The caller leaves at once -- unless the thread, started first, already handed
            # its answer over (a race the thread may win), which the caller then takes.
            answered.append(await run_abandoning(ran.set, limiter=limiter, must_start=True))
            await trio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    await wait_for(ran)  # started all the same
    assert answered in ([], [None])


async def test_a_call_counts_as_under_way_until_its_thread_returns() -> None:
    release = threading.Event()
    begun: dict[object, float] = {}
    ended = trio.Event()
    with trio.move_on_after(0.1):
        await run_abandoning(release.wait, 10, limiter=None, begun=begun, ended=ended)
    assert len(begun) == 1  # given up, still under way
    release.set()
    with trio.fail_after(10):
        await ended.wait()
    assert begun == {}
