"""The state directory's write path, pinned: what its options and bounds mean to a caller.

Reads, wake-up calls and the replicas' calls wait for the store's own limiter, and every
write under way (a batch in a thread, a flush, a wake-up call) counts for ``ready`` until it
returns, more than 10 s of it making the store not ready. A batch's leader cancelled while
the batch is written leaves at once, claims and settles alike, and the rest of its batch
hear why; a caller cancelled just as its
flush answers still takes back a claim that is not durable, or hears a taken one and waits
for its prune. A settle waiting for another's lock holds a worker thread and waits for its
flush. One claim's failure is not its batch's; the settles of one routine's slots share a
batch. Only a store with group commit starts a writer process, and a cancelled ``aclose``
leaves that child's reap (5 s, a kill, 5 s more) to its thread.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import subprocess
import threading
import types
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from test_stalled_directory import settled

from trio_routines.errors import StateFault
from trio_routines.instants import format_iso, slot_name
from trio_routines.records import ClaimStatus, Outcome
from trio_routines.stores import safefile
from trio_routines.stores.directory import DirectoryStore, settlefiles
from trio_routines.stores.directory.writer import process as writer_process
from trio_routines.stores.directory.writes import PROCESS_AT

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
T1 = T0 + timedelta(hours=1)
EIO = "EIO: Input/output error"
NOT_READY = (
    "the state directory's writes have not answered for {s}s "
    "(a stalled disk, or a stopped writer process): {root}"
)


def claims(root: Path, routine: str = "daily") -> Path:
    return root / "schedule" / "claims" / routine


class Gate:
    """Holds a wrapped call in its thread (as a stalled disk would) until let through."""

    def __init__(self) -> None:
        self.entered = threading.Semaphore(0)
        self.passes = threading.Semaphore(0)
        self.calls: list[list[tuple[Any, ...]]] = []

    def wrap(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def held(*args: Any) -> Any:
            if args and isinstance(args[0], list):  # a batch: its items' routine and slot
                self.calls.append([item[:2] for item in args[0]])
            self.entered.release()
            assert self.passes.acquire(timeout=30)
            return real(*args)

        return held

    async def wait_entered(self) -> None:
        assert await trio.to_thread.run_sync(self.entered.acquire, True, 30)

    def let_through(self, calls: int = 1) -> None:
        self.passes.release(calls)


@pytest.fixture
def gate() -> Iterator[Gate]:
    gate = Gate()
    yield gate
    gate.let_through(100)  # never leave a thread held


# -- the limiter and readiness ----------------------------------------------------------------


async def test_reads_wakeups_and_replicas_wait_for_the_stores_limiter(tmp_path: Path) -> None:
    limiter = trio.CapacityLimiter(1)
    store = DirectoryStore(tmp_path, limiter=limiter)
    answers: list[object] = []

    async def ask(call: Callable[[], Any]) -> None:
        answers.append(await call())

    async with trio.open_nursery() as nursery, limiter:
        nursery.start_soon(ask, lambda: store.history("daily"))
        nursery.start_soon(ask, store.list_wakeups)
        nursery.start_soon(ask, store.replicas)
        await trio.testing.wait_all_tasks_blocked()
        assert limiter.statistics().tasks_waiting == 3
        assert answers == []
    assert answers == [[], [], []]


Stalled = tuple[DirectoryStore, Callable[[], Awaitable[object]]]


def stalled_flush(root: Path, gate: Gate) -> Stalled:
    """A claim whose flush stalls; the store has group commit and a writer process (not up)."""
    store = DirectoryStore(root, syncfs=gate.wrap(lambda fd: None))
    return store, lambda: store.claim("daily", T0, T0)


def stalled_batch(root: Path, gate: Gate) -> Stalled:
    """A claim whose batch write stalls in its thread; no group commit, no writer process."""
    store = DirectoryStore(root, syncfs=None)
    store._files.create_each = gate.wrap(store._files.create_each)  # type: ignore[method-assign]
    return store, lambda: store.claim("daily", T0, T0)


def stalled_wakeups(root: Path, gate: Gate) -> Stalled:
    """A wake-up call whose thread stalls; group commit, no writer process."""
    store = DirectoryStore(root, writer_process=False)
    log = store._wakeups.log
    log.refresh = gate.wrap(log.refresh)  # type: ignore[method-assign]
    return store, store.list_wakeups


STALLS: dict[str, Callable[[Path, Gate], Stalled]] = {
    "flush": stalled_flush,
    "batch": stalled_batch,
    "wakeup": stalled_wakeups,
}


@pytest.mark.parametrize("stalled", list(STALLS))
async def test_a_call_under_way_for_more_than_10s_makes_the_store_not_ready(
    tmp_path: Path, mock_clock: trio.testing.MockClock, gate: Gate, stalled: str
) -> None:
    store, call = STALLS[stalled](tmp_path, gate)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await gate.wait_entered()
        await store.ready()
        mock_clock.jump(10)
        await store.ready()  # 10 s exactly: not yet
        mock_clock.jump(1)
        with pytest.raises(StateFault) as raised:
            await store.ready()
        assert str(raised.value) == NOT_READY.format(s=11, root=tmp_path)
        gate.let_through()
    await store.ready()  # it answered


# -- callers cancelled ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["claims", "settles"])
async def test_a_batchs_leader_cancelled_while_it_is_written_leaves_and_the_rest_hear_why(
    tmp_path: Path, gate: Gate, kind: str
) -> None:
    store = DirectoryStore(tmp_path, syncfs=None, writer_process=False)
    for routine in ("first", "leader", "rider"):
        store.claim_sync(routine, T0, T0)
    heard: dict[str, object] = {}
    scope = trio.CancelScope()
    slot = T1 if kind == "claims" else T0  # a new claim, or a settle of the one made

    async def write(routine: str) -> None:
        try:
            if kind == "claims":
                heard[routine] = (await store.claim(routine, slot, slot)).status
            else:
                heard[routine] = await store.settle(routine, slot, Outcome.COMPLETED, 1)
        except StateFault as exc:
            heard[routine] = str(exc)

    async def leader() -> None:
        with scope:
            await write("leader")

    files = store._files
    if kind == "claims":
        files.create_each = gate.wrap(files.create_each)  # type: ignore[method-assign]
    else:
        settles = store._writes._settles
        settles.write_each = gate.wrap(settles.write_each)  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(write, "first")
        await gate.wait_entered()  # its batch holds the writer
        nursery.start_soon(leader)  # queued first: it leads the next batch
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(write, "rider")
        await trio.testing.wait_all_tasks_blocked()
        gate.let_through()
        await gate.wait_entered()  # the next batch, both of theirs, in the writer
        scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        left_at_once = scope.cancelled_caught
        gate.let_through()
    await settled(store)  # the given-up batch's thread, let through above
    assert left_at_once
    assert gate.calls == [[("first", slot)], [("leader", slot), ("rider", slot)]]
    assert heard == {
        "first": ClaimStatus.TAKEN if kind == "claims" else True,
        "rider": (
            f"the state directory {tmp_path} did not answer in time (a stalled disk?): "
            "the write was given up, and may or may not have been made"
        ),
    }


class Flush:
    """A syncfs that answers at once, failing or not, and notes that it answered."""

    def __init__(self, fails: bool) -> None:
        self.fails = fails
        self.answered = False

    def __call__(self, fd: int) -> None:
        self.answered = True
        if self.fails:
            raise OSError(errno.EIO, os.strerror(errno.EIO))


class CancelAsTheFlushAnswers(trio.abc.Instrument):
    """Cancels ``scope`` just as ``flush``'s answer reaches the task that waits for it, before
    that task runs again: as a deadline that passes at that very moment does."""

    def __init__(self, flush: Flush, scope: trio.CancelScope) -> None:
        self.flush = flush
        self.scope = scope
        self.task: trio.lowlevel.Task | None = None

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task and self.flush.answered and not self.scope.cancel_called:
            self.scope.cancel()


async def claim_cancelled_as_its_flush_answers(
    store: DirectoryStore, flush: Flush, slot: datetime
) -> list[object]:
    heard: list[object] = []
    scope = trio.CancelScope()
    instrument = CancelAsTheFlushAnswers(flush, scope)

    async def claim() -> None:
        instrument.task = trio.lowlevel.current_task()
        with scope:
            try:
                heard.append((await store.claim("daily", slot, slot)).status)
            except StateFault as exc:  # its take-back answered before the cancellation
                heard.append(str(exc))

    trio.lowlevel.add_instrument(instrument)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(claim)
    finally:
        trio.lowlevel.remove_instrument(instrument)
    assert scope.cancel_called
    return heard


async def test_a_caller_cancelled_as_its_flush_fails_still_takes_its_claim_back(
    tmp_path: Path,
) -> None:
    # A claim that is not durable must go, or its slot would be burned: the take-back starts
    # even though its caller is cancelled, and goes on alone once the caller left.
    flush = Flush(fails=True)
    store = DirectoryStore(tmp_path, syncfs=flush, writer_process=False)
    caller_left, taken_back = threading.Event(), threading.Event()
    real = store._files.unclaim_after

    def unclaim_after(routine: str, slot: datetime) -> None:
        assert caller_left.wait(30)  # held until its caller has gone
        real(routine, slot)
        taken_back.set()

    store._files.unclaim_after = unclaim_after  # type: ignore[method-assign]
    try:
        assert await claim_cancelled_as_its_flush_answers(store, flush, T1) == []
        assert os.listdir(claims(tmp_path)) == [slot_name(T1)]  # not taken back yet
    finally:
        caller_left.set()
    assert await trio.to_thread.run_sync(taken_back.wait, 30)
    assert os.listdir(claims(tmp_path)) == []


async def test_a_caller_cancelled_as_its_flush_answers_hears_its_claim_after_the_prune(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    # The claim is taken and durable: its caller hears so, whatever comes, and the pruning of
    # the claim before it (keep=1) is waited for (briefly) under the same shield. The clock
    # stands still: that brief bound never passes, however slow the prune's thread.
    DirectoryStore(tmp_path, syncfs=None).claim_sync("daily", T0, T0)
    flush = Flush(fails=False)
    store = DirectoryStore(tmp_path, keep=1, syncfs=flush, writer_process=False)
    assert await claim_cancelled_as_its_flush_answers(store, flush, T1) == [ClaimStatus.TAKEN]
    assert os.listdir(claims(tmp_path)) == [slot_name(T1)]


# -- settles ----------------------------------------------------------------------------------


async def test_a_contended_settle_holds_a_worker_thread_and_waits_for_its_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    DirectoryStore(tmp_path, syncfs=None).claim_sync("daily", T0, T0)
    limiter = trio.CapacityLimiter(1)
    store = DirectoryStore(tmp_path, limiter=limiter, syncfs=Flush(fails=True))
    holder = os.open(claims(tmp_path) / slot_name(T0), os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)  # "another process" settling the same claim
    waiting, go = threading.Event(), threading.Event()
    real = safefile.lock_within

    def lock_within(fd: int, seconds: float) -> bool:
        if seconds == 0:  # the batch's try: it finds the claim locked, and lets it go
            got = real(fd, seconds)
            fcntl.flock(holder, fcntl.LOCK_UN)
            return got
        waiting.set()  # the settle's own wait for the lock, in a thread of its own
        assert go.wait(30)
        return real(fd, seconds)

    monkeypatch.setattr(settlefiles, "lock_within", lock_within)
    settled: list[bool] = []
    try:
        async with trio.open_nursery() as nursery:

            async def settle() -> None:
                settled.append(await store.settle("daily", T0, Outcome.COMPLETED, 1))

            nursery.start_soon(settle)
            assert await trio.to_thread.run_sync(waiting.wait, 30)
            nursery.start_soon(store.history, "daily")  # waits for the settle's thread
            await trio.testing.wait_all_tasks_blocked()
            assert limiter.statistics().tasks_waiting == 1
            go.set()
    finally:
        go.set()  # never leave the thread held
        os.close(holder)
    # written, but its flush failed: not recorded, and said so
    assert settled == [False]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        f"daily: could not record the completed outcome of slot {format_iso(T0)}: {EIO}"
    ]


async def test_settles_of_one_routines_slots_share_a_batch_but_one_slots_never_do(
    tmp_path: Path, gate: Gate
) -> None:
    store = DirectoryStore(tmp_path, syncfs=None, writer_process=False)
    store.claim_sync("first", T0, T0)
    store.claim_sync("daily", T0, T0)
    store.claim_sync("daily", T1, T1)
    settles = store._writes._settles
    settles.write_each = gate.wrap(settles.write_each)  # type: ignore[method-assign]
    heard: list[bool] = []

    async def settle(routine: str, slot: datetime, outcome: Outcome) -> None:
        heard.append(await store.settle(routine, slot, outcome, 1, if_unsettled=True))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(settle, "first", T0, Outcome.COMPLETED)
        await gate.wait_entered()  # holds the writer while the rest queue, in this order
        for slot, outcome in ((T0, Outcome.COMPLETED), (T1, Outcome.COMPLETED)):
            nursery.start_soon(settle, "daily", slot, outcome)
            await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(settle, "daily", T0, Outcome.FAILED)  # already settled by then
        await trio.testing.wait_all_tasks_blocked()
        gate.let_through(3)
    assert gate.calls == [[("first", T0)], [("daily", T0), ("daily", T1)], [("daily", T0)]]
    assert heard == [True] * 4
    assert [fire.outcome for fire in await store.history("daily")] == [Outcome.COMPLETED] * 2


async def test_one_claims_failure_is_not_the_rest_of_its_batchs(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path, syncfs=None, writer_process=False)
    claims(tmp_path, "broken").parent.mkdir(parents=True)
    claims(tmp_path, "broken").write_text("")  # not a directory
    heard: dict[str, object] = {}

    async def claim(routine: str) -> None:
        try:
            heard[routine] = (await store.claim(routine, T0, T0)).status
        except StateFault as exc:
            heard[routine] = str(exc)

    async with trio.open_nursery() as nursery:  # arriving together: one batch
        nursery.start_soon(claim, "broken")
        nursery.start_soon(claim, "daily")
    assert store._writes.claim_writes.batches == 1
    where = claims(tmp_path, "broken")
    assert heard == {
        "broken": f"claims of 'broken' are unusable in {where}: ENOTDIR: Not a directory: {where}",
        "daily": ClaimStatus.TAKEN,
    }
    assert os.listdir(claims(tmp_path)) == [slot_name(T0)]


# -- the writer process -----------------------------------------------------------------------


class Child:
    """A writer process that never exits by itself: each wait for it is held by the test."""

    def __init__(self, children: list[Child], argv: list[str], **options: Any) -> None:
        children.append(self)
        self.argv = argv
        self.waits: list[float] = []
        self.waited = threading.Semaphore(0)
        self.release = threading.Event()
        self.killed = False

    def poll(self) -> int | None:
        return None

    def kill(self) -> None:
        self.killed = True

    def wait(self, timeout: float) -> int:
        self.waits.append(timeout)
        self.waited.release()
        self.release.wait(30)
        raise subprocess.TimeoutExpired(self.argv, timeout)


@pytest.fixture
def children(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Child]]:
    started: list[Child] = []
    fake = types.SimpleNamespace(
        Popen=lambda argv, **options: Child(started, argv, **options),
        DEVNULL=subprocess.DEVNULL,
        TimeoutExpired=subprocess.TimeoutExpired,
    )
    monkeypatch.setattr(writer_process, "subprocess", fake)
    yield started
    for child in started:
        child.release.set()


async def read_many(store: DirectoryStore) -> None:
    """A boot's reads of many routines: the store's writer process starts (if it has one)."""
    for i in range(PROCESS_AT):
        assert await store.latest_fire(f"r{i}") is None


async def test_a_store_without_group_commit_never_starts_a_writer_process(
    tmp_path: Path, children: list[Child]
) -> None:
    store = DirectoryStore(tmp_path, syncfs=None)  # per-file fsyncs, in threads
    await read_many(store)
    assert children == []
    assert (await store.claim("daily", T0, T0)).taken


async def test_a_cancelled_aclose_leaves_the_writer_process_to_its_reap(
    tmp_path: Path, children: list[Child], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reap's clock stands still: each of its waits is its whole bound.
    monkeypatch.setattr(writer_process, "time", types.SimpleNamespace(monotonic=lambda: 100.0))
    store = DirectoryStore(tmp_path)
    await read_many(store)
    (child,) = children
    scope = trio.CancelScope()

    async def close() -> None:
        with scope:
            await store.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(close)
        assert await trio.to_thread.run_sync(child.waited.acquire, True, 30)
        scope.cancel()  # a stop's grace ran out: it must not wait for a child stuck
        await trio.testing.wait_all_tasks_blocked()
        left_at_once = scope.cancelled_caught
        child.release.set()
    assert left_at_once
    # the reap goes on alone: 5 s for the child to exit, then it is killed, and 5 s more
    assert await trio.to_thread.run_sync(child.waited.acquire, True, 30)
    assert child.killed
    assert child.waits == [5.0, 5.0]
