"""The state directory writes a herd's claims and settles a batch per worker-thread call.

(Until its writer process is up: see tests/test_writer.py. The herds here write in threads.)

One writer thread at a time (two side by side contend for the interpreter lock at every system
call), claims before settles, and a claim's caller always hears what its write did, even if
it was cancelled meanwhile: the slot is never taken for nobody.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import trio
import trio.testing

from trio_routines.instants import slot_name
from trio_routines.records import ClaimStatus, Outcome
from trio_routines.stores.directory import DirectoryStore
from trio_routines.stores.directory import writes as write_path

SLOT = datetime(2026, 7, 7, 9, tzinfo=UTC)


class Writes:
    """Wraps the store's batch writes: counts them, the most at once, and can hold one."""

    def __init__(self, store: DirectoryStore) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.busy = 0
        self.most = 0
        self.lock = threading.Lock()
        self.passes: threading.Semaphore | None = None  # with hold(): one write per pass
        files = store._files
        files.create_each = self.wrap("claims", files.create_each)  # type: ignore[method-assign]
        settles = store._writes._settles
        settles.write_each = self.wrap("settles", settles.write_each)  # type: ignore[method-assign]

    def wrap(self, kind: str, write: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def spy(items: Any) -> Any:
            with self.lock:
                self.busy += 1
                self.most = max(self.most, self.busy)
                self.calls.append((kind, [item[0] for item in items]))
            try:
                if self.passes is not None:
                    assert self.passes.acquire(timeout=30)
                return write(items)
            finally:
                with self.lock:
                    self.busy -= 1

        return spy

    def hold(self) -> None:
        self.passes = threading.Semaphore(0)

    def let_through(self, writes: int = 1) -> None:
        assert self.passes is not None
        self.passes.release(writes)

    async def entered(self, calls: int) -> None:
        with trio.fail_after(20):
            while len(self.calls) < calls:  # noqa: ASYNC110 -- set by the worker thread
                await trio.sleep(0.001)


async def test_a_herd_is_written_in_few_thread_calls_one_at_a_time(tmp_path: Path) -> None:
    names = [f"r{i:04}" for i in range(600)]
    store = DirectoryStore(tmp_path, writer_process=False)  # the threads' batches
    writes = Writes(store)

    async def fire(name: str) -> None:
        assert (await store.claim(name, SLOT, SLOT)).taken
        assert await store.settle(name, SLOT, Outcome.COMPLETED, 1)

    async with trio.open_nursery() as nursery:
        for name in names:
            nursery.start_soon(fire, name)
    claims = [batch for kind, batch in writes.calls if kind == "claims"]
    settles = [batch for kind, batch in writes.calls if kind == "settles"]
    assert sorted(n for batch in claims for n in batch) == names
    assert sorted(n for batch in settles for n in batch) == names
    # 600 at once: a few batches of at most WRITE_BATCH each, not 1,200 thread hand-offs
    assert max(len(batch) for batch in claims + settles) <= write_path.WRITE_BATCH
    # (a first batch may be a lone early caller, depending on Trio's order of the herd)
    assert len(claims) <= 600 // write_path.WRITE_BATCH + 3
    assert len(settles) <= 600 // write_path.WRITE_BATCH + 3
    assert writes.most == 1  # never two writer threads side by side
    for name in names:
        fire_ = (await store.history(name))[-1]
        assert fire_.outcome is Outcome.COMPLETED


async def test_claims_waiting_for_the_writer_go_before_settles(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    assert (await store.claim("settled", SLOT, SLOT)).taken
    writes = Writes(store)
    writes.hold()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.claim, "first", SLOT, SLOT)
        await writes.entered(1)  # its write holds the writer
        nursery.start_soon(store.settle, "settled", SLOT, Outcome.COMPLETED, 1)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(store.claim, "later", SLOT, SLOT)  # asks after the settle
        await trio.testing.wait_all_tasks_blocked()
        writes.let_through(3)
    assert writes.calls == [("claims", ["first"]), ("claims", ["later"]), ("settles", ["settled"])]


async def test_a_claim_cancelled_while_written_gives_up_at_once(tmp_path: Path) -> None:
    # Its write may never return (a stalled disk): it leaves; the claim made for nobody
    # stays, unrun, for the reconcile of open claims.
    store = DirectoryStore(tmp_path)
    writes = Writes(store)
    writes.hold()
    heard: list[ClaimStatus] = []
    scope = trio.CancelScope()
    later = SLOT + timedelta(hours=1)

    async def claim_then_checkpoint() -> None:
        with scope:
            heard.append((await store.claim("rider", later, later)).status)
            await trio.lowlevel.checkpoint()  # the cancellation arrives here
            heard.append(ClaimStatus.STALE)  # never reached

    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.claim, "leader", SLOT, SLOT)
        await writes.entered(1)  # the leader's write, held
        nursery.start_soon(store.claim, "second", SLOT, SLOT)  # leads the next batch
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(claim_then_checkpoint)  # rides on it
        await trio.testing.wait_all_tasks_blocked()
        writes.let_through()
        await writes.entered(2)  # the rider's batch is in the writer, held
        scope.cancel()  # the rider is parked, its item in flight
        await trio.testing.wait_all_tasks_blocked()
        assert heard == []
        writes.let_through()
    assert scope.cancelled_caught
    assert heard == []  # gone at once, without waiting for the write
    assert (store.claim_dir("rider") / slot_name(later)).is_file()
    assert writes.calls == [("claims", ["leader"]), ("claims", ["second", "rider"])]


async def test_a_herds_first_flush_waits_until_all_its_claims_are_written(
    tmp_path: Path,
) -> None:
    # Turns starting while the writer still writes would contend with it for the interpreter
    # lock: a herd's claims are all written (several batches) before the flush that lets
    # its turns start. A lone claim is flushed at once.
    seen: list[int] = []

    def syncfs(fd: int) -> None:
        seen.append(len(list((tmp_path / "schedule" / "claims").glob("*/*"))))

    store = DirectoryStore(tmp_path, syncfs=syncfs, writer_process=False)  # threads write
    names = [f"r{i:04}" for i in range(3 * write_path.WRITE_BATCH)]
    async with trio.open_nursery() as nursery:
        for name in names:
            nursery.start_soon(store.claim, name, SLOT, SLOT)
    assert store._writes.claim_writes.batches >= 3
    assert seen == [len(names)]  # one flush, after every write
    assert (await store.claim("lone", SLOT, SLOT)).taken
    assert seen == [len(names), len(names) + 1]


async def test_a_settle_waiting_on_a_locked_claim_does_not_hold_up_claims(tmp_path: Path) -> None:
    # Another process settling the same claim holds its lock: this settle waits for it (up to
    # lock_timeout) in a thread of its own, while the one writer thread goes on with claims.
    store = DirectoryStore(tmp_path, lock_timeout=20)
    assert (await store.claim("locked", SLOT, SLOT)).taken
    holder = os.open(store.claim_dir("locked") / slot_name(SLOT), os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    settled: list[bool] = []
    try:
        async with trio.open_nursery() as nursery:

            async def settle() -> None:
                settled.append(await store.settle("locked", SLOT, Outcome.COMPLETED, 1))

            nursery.start_soon(settle)
            await trio.testing.wait_all_tasks_blocked()
            with trio.fail_after(10):  # not the settle's 20 s
                assert (await store.claim("free", SLOT, SLOT)).taken
            assert settled == []  # still waiting for the lock
            fcntl.flock(holder, fcntl.LOCK_UN)
    finally:
        os.close(holder)
    assert settled == [True]
    (fire,) = await store.history("locked")
    assert fire.outcome is Outcome.COMPLETED
