"""Worker-thread calls that their caller may leave, and what the thread does about it.

A call on the state directory blocks in the kernel for as long as the disk makes it (a
frozen file system: until the thaw), and nothing can call it back. So its caller never
waits for it once cancelled (its deadline, a stop's bound): it leaves at once and the thread
goes on alone. What the thread does then must stay correct without anyone hearing of it.

Theory of operation. Caller and thread share a :class:`Handoff`: at its end (or at a commit
point of its own) the thread *hands over* its answer, and a cancelled caller *gives up*;
whichever comes first, under one lock, decides. A caller whose thread has handed over does
not leave (Trio's abort fails): the answer is a scheduling round away, and its cancellation
is delivered at its next checkpoint, as for any call that completed. A caller that gave up
first leaves, and the thread learns it when it tries to hand over: it then deals with its
answer itself -- ``late(answer)`` closes the descriptors nobody will flush, a wake-up change
is undone under the lock it still holds (directory/wakeups.py). Work that has not begun its change
peeks at :attr:`Handoff.gave_up` and does not begin it.

(``trio.to_thread.run_sync(abandon_on_cancel=True)`` cannot tell the thread: a result that
arrives just as its caller is cancelled is dropped, and the thread cannot know it was.)

A thread given up still holds its place in the limiter until it returns, and a write under
way still counts as under way (``begun``, for the store's ``ready``): the disk is no less
stalled for the caller having left.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, Generic, TypeVar

import trio

log = logging.getLogger("trio_routines")
T = TypeVar("T")


class Handoff:
    """Whether a caller still waits for its thread's answer (see the module doc)."""

    __slots__ = ("_gave_up", "_handed", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gave_up = False
        self._handed = False

    @property
    def gave_up(self) -> bool:
        """Whether the caller left: a thread about to make a change checks it first."""
        return self._gave_up

    def hand_over(self) -> bool:
        """In the thread: True if the caller will take the answer, False if it gave up (the
        thread deals with it). The same answer again on a second call."""
        with self._lock:
            if not self._gave_up:
                self._handed = True
            return self._handed

    def give_up(self) -> bool:
        """In Trio: True if the caller may leave (nothing handed over yet)."""
        with self._lock:
            if not self._handed:
                self._gave_up = True
            return self._gave_up


class _Result(Generic[T]):
    __slots__ = ("error", "value")

    def __init__(self) -> None:
        self.value: T | None = None
        self.error: BaseException | None = None


async def run_abandoning(
    fn: Callable[..., T],
    *args: Any,
    limiter: trio.CapacityLimiter | None,
    handoff: Handoff | None = None,
    late: Callable[[T], None] | None = None,
    begun: dict[object, float] | None = None,
    ended: trio.Event | None = None,
    must_start: bool = False,
) -> T:
    """``fn(*args)`` in a worker thread; a cancelled caller leaves it (see the module doc).

    ``handoff``: the one ``fn`` hands over through itself (it gets it as its argument too);
    otherwise its answer is handed over once it returns. ``late(answer)``: what the thread
    does with an answer its caller gave up (an error is logged at DEBUG). ``begun``: the
    call is noted there, by a key of its own, from its start until the thread returns;
    ``ended`` is set then, or at once if no thread was started (the caller was cancelled
    before, while it waited for its place in ``limiter`` say, or the thread could not start):
    whoever waits for it must not wait for ever. ``must_start``: the thread starts even if
    the caller is cancelled already, and without a place in ``limiter`` (work that must be
    done, such as taking back a claim that is not durable: rare, and it must not wait behind
    stalled calls).
    """
    if handoff is None:
        handoff = Handoff()
    else:
        args = (handoff, *args)
    borrower = object()
    release: Callable[[], None] = lambda: None  # noqa: E731
    try:
        if not must_start:
            await trio.lowlevel.checkpoint_if_cancelled()
            if limiter is not None:
                await limiter.acquire_on_behalf_of(borrower)
                release = lambda: limiter.release_on_behalf_of(borrower)  # noqa: E731
    except BaseException:
        if ended is not None:
            ended.set()  # no thread was started: none is under way
        raise
    key = object()
    if begun is not None:
        begun[key] = trio.current_time()
    task = trio.lowlevel.current_task()
    token = trio.lowlevel.current_trio_token()
    result: _Result[T] = _Result()
    context = contextvars.copy_context()  # as trio.to_thread: a fire's log fields go along

    def work() -> None:
        try:
            result.value = context.run(fn, *args)
        except BaseException as exc:
            result.error = exc
        if handoff.hand_over():
            return
        if result.error is not None:
            log.debug("a call given up by its caller failed: %r", result.error)
        elif late is not None:
            late(result.value)  # type: ignore[arg-type]  # a value when there is no error

    def back() -> None:  # in Trio, once the thread returned
        release()
        if begun is not None:
            begun.pop(key, None)
        if ended is not None:
            ended.set()
        if not handoff.gave_up:
            trio.lowlevel.reschedule(task)

    def returned(_: object) -> None:  # in the thread
        try:
            token.run_sync_soon(back)
        except trio.RunFinishedError:
            pass

    def abort(_: Any) -> trio.lowlevel.Abort:
        if handoff.give_up():
            return trio.lowlevel.Abort.SUCCEEDED
        return trio.lowlevel.Abort.FAILED  # handed over: rescheduled by back() in a moment

    try:
        trio.lowlevel.start_thread_soon(work, returned)
    except BaseException:
        release()
        if begun is not None:
            begun.pop(key, None)
        if ended is not None:
            ended.set()
        raise
    await trio.lowlevel.wait_task_rescheduled(abort)
    if result.error is not None:
        raise result.error
    return result.value  # type: ignore[return-value]  # a value when there is no error


class OneAtATime:
    """Calls that go one at a time, each only once the thread of the one before has ended,
    even one its caller gave up on: a change given up that lands late must not land after a
    later one. The thread is :func:`run_abandoning`'s, given the event :meth:`turn` yields as
    its ``ended``."""

    def __init__(self) -> None:
        self._lock = trio.Lock()
        self.ended: trio.Event | None = None  # set once the thread of the last call returned

    @contextlib.asynccontextmanager
    async def turn(
        self,
        deadline: float,
        busy: Callable[[int], Exception],
        still_under_way: Callable[[], Exception],
    ) -> AsyncIterator[trio.Event]:
        """This call's turn, by ``deadline``: ``busy(waiting)`` is raised if another call of
        this process held it until then (``waiting``: how many more wait), and
        ``still_under_way()`` if the thread of one given up had not ended by then."""
        with trio.move_on_at(deadline) as waited:
            await self._lock.acquire()
        if waited.cancelled_caught:
            raise busy(self._lock.statistics().tasks_waiting)
        try:
            before = self.ended
            if before is not None:
                with trio.move_on_at(deadline):
                    await before.wait()
                if not before.is_set():
                    raise still_under_way()
            ended = self.ended = trio.Event()
            yield ended
        finally:
            self._lock.release()
