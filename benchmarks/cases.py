"""The measurements, each run in a fresh interpreter by ``run.py``.

Usage: ``python benchmarks/cases.py CASE JSON-PARAMS``; the last line printed is one JSON
object with the results. A fresh process per measurement keeps resident-memory figures honest
(nothing freed by an earlier case lingers in the heap) and stops one case's threads, caches or
garbage from slowing the next.

Real-clock cases agree on a slot instant ``T`` (seconds since the epoch, a whole second). The
runtime's cron only knows minutes, so it gets a wall clock shifted so that ``T`` reads as a
minute boundary; lateness is still measured on the real clock, from ``T`` to the moment the
agent (or job function, or bare task) is first entered.
"""

from __future__ import annotations

import gc
import json
import logging
import math
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import trio

from trio_routines import Completed, DirectoryStore, Routine, Scheduler
from trio_routines.converter import claim_text
from trio_routines.records import Outcome, Wakeup
from trio_routines.stores.directory.wakeupjournal import JOURNAL, snapshot
from trio_routines.testing import MemoryStore, ScriptedAgent
from trio_routines.wakeups import WakeupRequest

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
FAR_WALL = datetime(2030, 6, 15, 12, 0, tzinfo=UTC)  # idle runs: no routine is due near this
SLOT_WALL = datetime(2030, 1, 1, 0, 0, tzinfo=UTC)  # burst runs: the minute T reads as


# -- helpers -------------------------------------------------------------------------------


def rss_kib() -> int:
    """Resident set size of this process, from the kernel's own accounting."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def settled_rss() -> int:
    gc.collect()
    return rss_kib()


def shifted_clock(wall_at_start: datetime) -> Callable[[], datetime]:
    """A wall clock running at real speed that reads ``wall_at_start`` now."""
    offset = wall_at_start.timestamp() - time.time()
    return lambda: datetime.fromtimestamp(time.time() + offset, UTC)


def slot_clock(slot_epoch: float) -> Callable[[], datetime]:
    """A wall clock that reads :data:`SLOT_WALL` at the real instant ``slot_epoch``."""
    offset = SLOT_WALL.timestamp() - slot_epoch
    return lambda: datetime.fromtimestamp(time.time() + offset, UTC)


def idle_cron(i: int) -> tuple[int, int]:
    """A distinct (minute, hour) on 1 January for routine ``i``: never due during a run."""
    return i % 60, (i // 60) % 24


def trio_deadline(epoch: float) -> float:
    return trio.current_time() + (epoch - time.time())


def fsync_dir(path: Path | str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class RecordingAgent:
    """Completes every turn at once and notes (real clock) when each one was entered."""

    def __init__(self) -> None:
        self.starts: list[float] = []

    async def invoke(self, session: str, text: str) -> AsyncIterator[Any]:
        self.starts.append(time.time())
        yield Completed()


def routine_names(n: int) -> list[str]:
    return [f"r{i:05d}" for i in range(n)]


def lateness_summary(starts: list[float], slot: float) -> dict[str, Any]:
    late = sorted(s - slot for s in starts)
    if not late:
        return {"count": 0}
    return {
        "count": len(late),
        "first_ms": late[0] * 1e3,
        "p50_ms": late[len(late) // 2] * 1e3,
        "p99_ms": late[min(len(late) - 1, math.ceil(0.99 * len(late)) - 1)] * 1e3,
        "max_ms": late[-1] * 1e3,
    }


# -- 1. idle cost ----------------------------------------------------------------------------


async def _idle_window(seconds: float) -> dict[str, float]:
    await trio.sleep(0.5)  # let every task reach its long sleep
    armed = settled_rss()
    cpu = time.process_time()
    await trio.sleep(seconds)
    return {"armed_kib": armed, "idle_cpu_ms_per_s": (time.process_time() - cpu) * 1e3 / seconds}


def idle_routines(n: int, seconds: float, wakeups: bool = True) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        base = settled_rss()
        routines = [
            Routine(name=name, prompt="p", cron=f"{m} {h} 1 1 *")
            for name, (m, h) in zip(routine_names(n), map(idle_cron, range(n)), strict=True)
        ]
        scheduler = Scheduler(
            agent=RecordingAgent(),
            store=MemoryStore(),
            routines=routines,
            now=shifted_clock(FAR_WALL),
            wakeups=wakeups,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(scheduler.run)
            result = await _idle_window(seconds)
            scheduler.stop(0)
        return {"base_kib": base, **result}

    return trio.run(main)


def idle_bare(n: int, seconds: float) -> dict[str, Any]:
    async def sleeper(deadline: float) -> None:
        await trio.sleep_until(deadline)

    async def main() -> dict[str, Any]:
        base = settled_rss()
        async with trio.open_nursery() as nursery:
            start = trio.current_time()
            for i in range(n):
                nursery.start_soon(sleeper, start + 86400 + i)
            result = await _idle_window(seconds)
            nursery.cancel_scope.cancel()
        return {"base_kib": base, **result}

    return trio.run(main)


async def aps_job() -> None:
    APS_STARTS.append(time.time())


APS_STARTS: list[float] = []


def idle_aps(n: int, seconds: float) -> dict[str, Any]:
    import anyio
    from apscheduler import AsyncScheduler
    from apscheduler.datastores.memory import MemoryDataStore
    from apscheduler.triggers.cron import CronTrigger

    async def main() -> dict[str, Any]:
        base = settled_rss()
        async with AsyncScheduler(MemoryDataStore()) as scheduler:
            for i in range(n):
                minute, hour = idle_cron(i)
                trigger = CronTrigger(minute=minute, hour=hour, day=1, month=1, timezone="UTC")
                await scheduler.add_schedule(aps_job, trigger, id=f"r{i:05d}")
            await scheduler.start_in_background()
            result = await _idle_window(seconds)
            await scheduler.stop()
        return {"base_kib": base, **result}

    result: dict[str, Any] = anyio.run(main, backend="trio")
    return result


# -- 2, 3, 4. bursts -------------------------------------------------------------------------


def _claim_dirs(root: Path, names: list[str]) -> None:
    """Create each routine's claim directory ahead of time and make it durable: a long-lived
    state directory, not a first boot (a fresh directory makes the first fsyncs dearer)."""
    claims = root / "schedule" / "claims"
    claims.mkdir(parents=True, exist_ok=True)
    for name in names:
        (claims / name).mkdir(exist_ok=True)
    os.sync()


class WithoutHolds:
    """A store seen without its replicas part (``join``, ``claims_alive``, ``replicas``): the
    scheduler then holds sessions within its process only, as before replicas had holds."""

    _HIDDEN = frozenset({"join", "claims_alive", "replicas", "claims_take_holds"})

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        if name in self._HIDDEN:
            raise AttributeError(name)
        return getattr(self._store, name)


def make_store(
    kind: str, state: str | None, names: list[str], schema: str | None, holds: bool = True
) -> Any:
    store = _make_store(kind, state, names, schema)
    return store if holds else WithoutHolds(store)


def _make_store(kind: str, state: str | None, names: list[str], schema: str | None) -> Any:
    if kind == "memory":
        return MemoryStore()
    if kind == "directory":
        assert state is not None
        _claim_dirs(Path(state), names)
        return DirectoryStore(state)
    if kind == "postgres":
        from trio_routines.stores.postgres import PostgresStore

        return PostgresStore(PG_URL, schema=schema)
    raise ValueError(kind)


class Bytecodes:
    """The Python bytecodes this thread runs while installed, by the file of their code.

    A count, not a time: it does not move with the host's load (CPU time per fire moved by up
    to 2x between repetitions on a shared host), so two versions of the fire path can be
    compared in one run each. It leaves out what runs in C (Trio's core is Python; datetime,
    dicts and the collector are not) and other threads (a store's workers), so it complements
    the CPU figures rather than replacing them. The tracing makes the burst itself slower:
    read the count, not the burst's times.
    """

    def __init__(self) -> None:
        self.by_file: Counter[str] = Counter()

    def _frame(self, frame: Any, _event: str, _arg: Any) -> Any:
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        by_file, name = self.by_file, frame.f_code.co_filename

        def step(_frame: Any, event: str, _arg: Any) -> Any:
            if event == "opcode":
                by_file[name] += 1
            return step

        return step

    def __enter__(self) -> Bytecodes:
        sys.settrace(self._frame)
        return self

    def __exit__(self, *exc_info: object) -> None:
        sys.settrace(None)

    def per_fire(self, fires: int) -> dict[str, Any]:
        """The count per fire, and the files that ran the most of it (paths shortened)."""
        fires = max(1, fires)
        top = {
            _short(name): round(count / fires, 1) for name, count in self.by_file.most_common(15)
        }
        return {"bytecodes_per_fire": sum(self.by_file.values()) / fires, "bytecodes_by_file": top}


def _short(path: str) -> str:
    for marker in ("site-packages/", "trio_routines/", "benchmarks/"):
        if marker in path:
            return (marker if marker != "site-packages/" else "") + path.split(marker, 1)[1]
    return Path(path).name


class CollectorTime:
    """CPU time (this process) spent in the cyclic garbage collector while installed.

    Installed for exactly a burst's measured window, so it also marks that window for
    Valgrind's instruction counts (``run.py --only instructions``): ``os.getppid()`` on the
    way in and ``os.getpgrp()`` on the way out, two system calls nothing else here makes,
    which callgrind is told to zero its counts before and to dump them before.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = [0, 0, 0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            self.seconds += time.process_time() - self._started
            self.collections[info["generation"]] += 1

    def __enter__(self) -> CollectorTime:
        os.getppid()  # the window's start, for callgrind (see above)
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        gc.callbacks.remove(self)
        os.getpgrp()  # the window's end


def set_tracing(mode: str) -> None:
    """Tracing for a burst: see :func:`burst_routines`. Before the scheduler is built."""
    if mode == "absent":
        sys.modules["opentelemetry"] = None  # type: ignore[assignment]  # an import fails
    elif mode == "on":
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        class Nowhere(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Nowhere()))
        trace.set_tracer_provider(provider)
    elif mode != "off":
        raise ValueError(mode)


def burst_routines(
    n: int,
    slot: float,
    store: str = "memory",
    state: str | None = None,
    schema: str | None = None,
    return_starts: bool = False,
    timeout: float = 60.0,
    freeze: bool = False,
    holds: bool = True,
    tracing: str = "off",
    bytecodes: bool = False,
    herd: int = 1,
) -> dict[str, Any]:
    """``n`` routines of cron ``* * * * *``, all due at the real instant ``slot``.

    The run ends once every routine's slot is decided and any turn it started is settled
    (several schedulers sharing a PostgreSQL store each see some turns and some duplicates),
    or at ``timeout``. With ``freeze``, the armed scheduler's objects are moved out of the
    collector's way (``gc.freeze()``) before the slot, as a host may do after its boot.
    Without ``holds``, the store's replicas part is hidden (see :class:`WithoutHolds`).
    ``tracing``: ``off`` (no provider set: the API's default), ``absent`` (the ``otel`` extra
    cannot be imported) or ``on`` (the SDK, its spans batched to an exporter that drops them).
    With ``bytecodes``, the Python bytecodes run in the window are counted (:class:`Bytecodes`).
    ``herd``: which minute's herd is measured, 1 for the first after the boot (every routine's
    first fire: its caches still cold), 2 for the next one, as every later minute finds it.
    """
    set_tracing(tracing)
    names = routine_names(n)
    backend = make_store(store, state, names, schema, holds)
    routines = [Routine(name=name, prompt="p", cron="* * * * *") for name in names]

    async def main() -> dict[str, Any]:
        agent = RecordingAgent()
        scheduler = Scheduler(
            agent=agent, store=backend, routines=routines, now=slot_clock(slot), wakeups=False
        )
        cpu: dict[str, float] = {}
        async with trio.open_nursery() as nursery:
            booted = time.time()
            await nursery.start(scheduler.run)
            armed = time.time()
            if freeze:
                gc.collect()
                gc.freeze()
            herd_slot = slot + 60 * (herd - 1)
            await trio.sleep_until(trio_deadline(herd_slot - 0.2))
            earlier = len(agent.starts)  # the turns of the herds before, left out
            cpu["start"] = time.process_time()
            times_at_start = os.times()
            counter = Bytecodes() if bytecodes else None
            with (
                CollectorTime() as collector,
                counter or nullcontext(),
                trio.move_on_at(trio_deadline(herd_slot + timeout)),
            ):
                # Until every fire is settled: the CPU of a fire includes its settle. The
                # runtime offers no event for that, so poll its statistics as a host would,
                # every 250 ms: a snapshot copies every armed routine's next slot and finds
                # the slot after each routine whose turn runs, which is the harness's CPU, not
                # the fires' (a scraper's every 15 s): 1.6 ms a snapshot with 10,000 turns
                # under way, as a state directory's herd keeps them while its claims are
                # written. Polled every 50 ms, that was about 3 % of such a herd, and little
                # of the memory store's, whose turns end as they start. Polling seldom adds
                # idle time only, which the CPU clock does not count; lateness is read at
                # each agent call.
                while sum(scheduler.statistics().outcomes.values()) < n * herd:  # noqa: ASYNC110
                    await trio.sleep(0.25)
            cpu["end"] = time.process_time()
            times_at_end = os.times()
            outcomes = dict(scheduler.statistics().outcomes)
            scheduler.stop(0)
        await backend.aclose()
        starts = agent.starts[earlier:]
        fires = max(1, len(starts))
        return {
            **lateness_summary(starts, herd_slot),
            "starts": starts if return_starts else None,
            "boot_s": armed - booted,
            "armed_before_slot_s": slot - armed,
            "cpu_per_fire_us": (cpu["end"] - cpu["start"]) * 1e6 / fires,
            # The same window split into user and kernel time (os.times(): this process).
            "user_per_fire_us": (times_at_end.user - times_at_start.user) * 1e6 / fires,
            "kernel_per_fire_us": (times_at_end.system - times_at_start.system) * 1e6 / fires,
            "gc_per_fire_us": collector.seconds * 1e6 / fires,
            "gc_collections": collector.collections,
            "outcomes": outcomes,
            **(counter.per_fire(len(starts)) if counter is not None else {}),
        }

    return trio.run(main)


def burst_trio_floor(n: int, slot: float, bytecodes: bool = False) -> dict[str, Any]:
    """What Trio itself costs for the steps of one fire, with no scheduler logic at all.

    Each of ``n`` tasks sleeps to ``slot`` (the wake), then, in a shielded scope as a fire
    runs, yields three times (the shared paused read, the claim and the settle of an
    in-memory store each yield once) and enters two more cancel scopes (the turn's grace and
    the settle's bound): the Trio operations every fire of the runtime makes.
    ``bytecodes``: as :func:`burst_routines`'s.
    """
    starts: list[float] = []
    checkpoint = trio.lowlevel.checkpoint

    async def fire(deadline: float) -> None:
        await trio.sleep_until(deadline)
        with trio.CancelScope(shield=True):
            await checkpoint()  # the paused read
            await checkpoint()  # the claim
            with trio.CancelScope():  # noqa: ASYNC100 -- the turn, under its grace
                starts.append(time.time())
            with trio.CancelScope():  # the settle, under its bound
                await checkpoint()

    async def main() -> dict[str, Any]:
        async with trio.open_nursery() as nursery:
            deadline = trio_deadline(slot)
            for _ in range(n):
                nursery.start_soon(fire, deadline)
            armed = time.time()
            await trio.sleep_until(trio_deadline(slot - 0.2))
            cpu = time.process_time()
            collector = CollectorTime().__enter__()  # left once every fire is done
            counter = Bytecodes().__enter__() if bytecodes else None
        if counter is not None:
            counter.__exit__()
        cpu = time.process_time() - cpu
        collector.__exit__()
        fires = max(1, len(starts))
        return {
            **lateness_summary(starts, slot),
            "armed_before_slot_s": slot - armed,
            "cpu_per_fire_us": cpu * 1e6 / fires,
            "gc_per_fire_us": collector.seconds * 1e6 / fires,
            **(counter.per_fire(len(starts)) if counter is not None else {}),
        }

    return trio.run(main)


def burst_bare(n: int, slot: float) -> dict[str, Any]:
    starts: list[float] = []

    async def sleeper(deadline: float) -> None:
        await trio.sleep_until(deadline)
        starts.append(time.time())

    async def main() -> dict[str, Any]:
        async with trio.open_nursery() as nursery:
            deadline = trio_deadline(slot)
            for _ in range(n):
                nursery.start_soon(sleeper, deadline)
            armed = time.time()
            await trio.sleep_until(trio_deadline(slot - 0.2))
            cpu = time.process_time()
        cpu = time.process_time() - cpu
        return {
            **lateness_summary(starts, slot),
            "armed_before_slot_s": slot - armed,
            "cpu_per_fire_us": cpu * 1e6 / max(1, len(starts)),
        }

    return trio.run(main)


def burst_aps(n: int, slot: float, timeout: float = 90.0) -> dict[str, Any]:
    import anyio
    from apscheduler import AsyncScheduler, JobReleased
    from apscheduler.datastores.memory import MemoryDataStore
    from apscheduler.triggers.cron import CronTrigger

    second = datetime.fromtimestamp(slot, UTC).second

    async def main() -> dict[str, Any]:
        released = 0
        done = anyio.Event()

        def on_release(_event: Any) -> None:
            nonlocal released
            released += 1
            if released >= n:
                done.set()

        async with AsyncScheduler(MemoryDataStore(), max_concurrent_jobs=n) as scheduler:
            scheduler.subscribe(on_release, {JobReleased})
            for i in range(n):
                trigger = CronTrigger(second=second, timezone="UTC")
                await scheduler.add_schedule(aps_job, trigger, id=f"r{i:05d}")
            await scheduler.start_in_background()
            armed = time.time()
            await anyio.sleep(slot - 0.2 - time.time())
            cpu = time.process_time()
            with anyio.move_on_after(slot + timeout - time.time()):
                await done.wait()
            cpu = time.process_time() - cpu
            await scheduler.stop()
        return {
            **lateness_summary(APS_STARTS, slot),
            "armed_before_slot_s": slot - armed,
            "cpu_per_fire_us": cpu * 1e6 / max(1, len(APS_STARTS)),
            "released": released,
        }

    result: dict[str, Any] = anyio.run(main, backend="trio")
    return result


# -- 4. floors: exclusive creates with fsync, plain inserts ----------------------------------


def create_floor(state: str, n: int, threads: int) -> dict[str, Any]:
    """``n`` exclusive creates, each with its content, fsync of file and of its directory.

    One file per pre-created, synced directory: the same shape as ``n`` routines' claims.
    ``threads`` workers share the work (the directory store's limiter allows 16).
    """
    names = routine_names(n)
    _claim_dirs(Path(state), names)
    claims = Path(state) / "schedule" / "claims"
    data = claim_text(SLOT_WALL).encode()

    def create(name: str) -> None:
        directory = claims / name
        fd = os.open(directory / "2030-01-01T00-00-00-000Z", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(directory)

    started = time.perf_counter()
    if threads == 1:
        for name in names:
            create(name)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(create, names))
    elapsed = time.perf_counter() - started
    return {"total_ms": elapsed * 1e3, "per_create_ms": elapsed * 1e3 / n}


def _floor_files(state: str, n: int) -> tuple[Path, list[str], bytes]:
    """Claim directories for ``n`` routines (made and synced), and a claim's text."""
    names = routine_names(n)
    _claim_dirs(Path(state), names)
    return Path(state) / "schedule" / "claims", names, claim_text(SLOT_WALL).encode()


def _creates_then_syncfs(claims: Path, names: list[str], data: bytes, threads: int) -> float:
    """One new claim file per routine (exclusive create, its text, no fsync), by ``threads``
    workers, then one ``syncfs`` if there is one: the seconds the ``syncfs`` took."""
    from trio_routines.stores.durable import SYNCFS

    def create(name: str) -> None:
        fd = os.open(
            claims / name / "2030-01-01T00-00-00-000Z", os.O_CREAT | os.O_EXCL | os.O_WRONLY
        )
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    root = os.open(claims, os.O_RDONLY | os.O_DIRECTORY)  # opened before the writes it covers
    try:
        if threads == 1:
            for name in names:
                create(name)
        else:
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(create, names))
        synced = time.perf_counter()
        if SYNCFS is not None:
            SYNCFS(root)
    finally:
        os.close(root)
    return time.perf_counter() - synced


def group_floor(state: str, n: int, threads: int) -> dict[str, Any]:
    """The group-commit floor: ``n`` exclusive creates with their content, then one ``syncfs``.

    The same files as :func:`create_floor`, made durable the way the store's group commit
    does when every claim lands in one batch: no per-file fsync, one journal commit.
    """
    from trio_routines.stores.durable import SYNCFS

    if SYNCFS is None:
        return {"total_ms": math.nan, "per_create_ms": math.nan}
    claims, names, data = _floor_files(state, n)
    started = time.perf_counter()
    syncfs_s = _creates_then_syncfs(claims, names, data, threads)
    elapsed = time.perf_counter() - started
    return {
        "total_ms": elapsed * 1e3,
        "per_create_ms": elapsed * 1e3 / n,
        "syncfs_ms": syncfs_s * 1e3,
    }


def store_writes(state: str, n: int, spares: bool = False) -> dict[str, Any]:
    """The state directory store's own writes of ``n`` claims, alone: its batch writes
    (``ClaimFiles.create_each``, one thread, ``WRITE_BATCH`` at a time: the no-link opens,
    the stale gate's listing, the exclusive create) and one ``syncfs``; no event loop. With
    ``spares``, each routine's spare claim file is made (and made durable) first, as the
    writer process makes them while idle, and each claim renames its own."""
    from trio_routines.claims import KEEP_CLAIMS
    from trio_routines.stores.directory.claimfiles import ClaimFiles
    from trio_routines.stores.directory.writes import WRITE_BATCH
    from trio_routines.stores.durable import SYNCFS, Descriptors, hand_in

    names = routine_names(n)
    _claim_dirs(Path(state), names)
    files = ClaimFiles(Path(state), KEEP_CLAIMS, 10.0, SYNCFS)
    if spares:
        files.spares.make(files, names)
        os.sync()
    started = time.perf_counter()
    held: Descriptors = {}
    for first in range(0, n, WRITE_BATCH):
        batch = [(name, SLOT_WALL, SLOT_WALL) for name in names[first : first + WRITE_BATCH]]
        answers, fds = files.create_each(batch)
        assert all(answer.unwrap()[0].taken for answer in answers)
        for device, (ticket, fd) in fds.items():
            hand_in(held, device, fd, ticket)
    written = time.perf_counter()
    for _, fd in held.values():
        if SYNCFS is not None:
            SYNCFS(fd)
        os.close(fd)
    ended = time.perf_counter()
    return {"total_ms": (ended - started) * 1e3, "writes_ms": (written - started) * 1e3}


def writes_at(state: str, n: int, slot: float) -> dict[str, Any]:
    """The writer process's work for a herd of ``n`` claims, alone in a process: from the real
    instant ``slot``, the store's batch writes (``ClaimFiles.create_each``, ``WRITE_BATCH`` at
    a time), each batch flushed (``syncfs``) before the next is written, as the writer process
    does; each claim renames its routine's spare claim file, made (and made durable) before
    the slot, as the writer process makes them while idle. When the writes began and ended
    (real time)."""
    from trio_routines.claims import KEEP_CLAIMS
    from trio_routines.stores.directory.claimfiles import ClaimFiles
    from trio_routines.stores.directory.writes import WRITE_BATCH
    from trio_routines.stores.durable import SYNCFS

    names = routine_names(n)
    _claim_dirs(Path(state), names)
    files = ClaimFiles(Path(state), KEEP_CLAIMS, 10.0, SYNCFS)
    files.spares.make(files, names)
    os.sync()
    time.sleep(max(0.0, slot - time.time()))
    started = time.time()
    for first in range(0, n, WRITE_BATCH):
        batch = [(name, SLOT_WALL, SLOT_WALL) for name in names[first : first + WRITE_BATCH]]
        answers, held = files.create_each(batch)
        assert all(answer.unwrap()[0].taken for answer in answers)
        for _, fd in held.values():
            if SYNCFS is not None:
                SYNCFS(fd)
            os.close(fd)
    return {"start": started, "end": time.time()}


def beside_floor(state: str, n: int, slot: float) -> dict[str, Any]:
    """The two-process floor of a durable burst: the memory-store burst of ``n`` routines
    and, from the same slot, :func:`writes_at`'s writes of the same claims in a process of
    their own -- the two kinds of work side by side on two cores, as the writer process
    runs them, but no turn waits for its claim. Its last turn started (``max_ms``) is the
    later of the burst's last turn and the last write's flush."""
    params = json.dumps({"state": state, "n": n, "slot": slot})
    writer = subprocess.Popen(
        [sys.executable, __file__, "writes_at", params], stdout=subprocess.PIPE, text=True
    )
    try:
        burst = burst_routines(n, slot)
        out, _ = writer.communicate(timeout=300)
    finally:
        writer.kill()
    written = json.loads(out.strip().splitlines()[-1])
    written_ms = (written["end"] - slot) * 1e3
    return {
        **burst,
        "burst_max_ms": burst["max_ms"],
        "written_ms": written_ms,
        "max_ms": max(burst["max_ms"], written_ms),
    }


def shared_floor(state: str, n: int, slot: float) -> dict[str, Any]:
    """The one-interpreter floor of a durable burst: the memory-store burst of ``n`` routines
    and, from the same slot, :func:`group_floor`'s ``n`` creates and one ``syncfs`` in a
    worker thread of the same process -- both kinds of work, with nothing between them.

    The two share CPython's interpreter lock: the thread needs it back after each system
    call, and gets it only when the event loop lets go (see benchmarks/README.md).
    """
    claims, names, data = _floor_files(state, n)
    done: dict[str, float] = {}

    def write_all() -> None:
        time.sleep(max(0.0, slot - time.time()))
        done["start"] = time.time()
        _creates_then_syncfs(claims, names, data, 1)
        done["end"] = time.time()

    writer = threading.Thread(target=write_all)
    writer.start()
    burst = burst_routines(n, slot)
    writer.join()
    written = (done["end"] - slot) * 1e3
    return {
        "last_ms": max(burst["max_ms"], written),
        "burst_ms": burst["max_ms"],
        "written_ms": written,
        "writes_took_ms": (done["end"] - done["start"]) * 1e3,
    }


def insert_floor(n: int, connections: int, schema: str) -> dict[str, Any]:
    """``n`` single-row autocommit inserts into a claims-shaped table."""
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        conn.execute(
            f"CREATE TABLE {schema}.floor (routine text, slot timestamptz, "
            "fired_at timestamptz, outcome text, ms bigint, PRIMARY KEY (routine, slot))"
        )
    conns = [psycopg.connect(PG_URL, autocommit=True) for _ in range(connections)]
    try:
        for conn in conns:  # a warm connection, as a pool would hand out
            conn.execute("SELECT 1")
        rows = routine_names(n)
        stmt = f"INSERT INTO {schema}.floor (routine, slot, fired_at) VALUES (%s, %s, %s)"

        def work(index: int) -> None:
            conn = conns[index]
            for name in rows[index::connections]:
                conn.execute(stmt, (name, SLOT_WALL, SLOT_WALL))

        started = time.perf_counter()
        workers = [threading.Thread(target=work, args=(i,)) for i in range(connections)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        elapsed = time.perf_counter() - started
    finally:
        for conn in conns:
            conn.close()
    return {"total_ms": elapsed * 1e3, "per_insert_ms": elapsed * 1e3 / n}


# -- 5. boot ---------------------------------------------------------------------------------


def seed_claims(state: str, routines: int, claims: int) -> dict[str, Any]:
    """Write ``claims`` settled claims for each routine (no fsync: this is setup)."""
    marker = Path(state) / f"seeded-{routines}x{claims}"
    if marker.exists():
        return {"seeded": False}
    started = time.perf_counter()
    root = Path(state) / "schedule" / "claims"
    first = SLOT_WALL - timedelta(minutes=claims)
    from trio_routines.instants import slot_name

    slots = [first + timedelta(minutes=k) for k in range(claims)]
    files = [(slot_name(s), claim_text(s, Outcome.COMPLETED, 12).encode()) for s in slots]
    for name in routine_names(routines):
        directory = root / name
        directory.mkdir(parents=True, exist_ok=True)
        for file_name, data in files:
            fd = os.open(directory / file_name, os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
    marker.touch()
    return {"seeded": True, "seconds": time.perf_counter() - started}


def count_file_reads(module: Any) -> list[int]:
    """Count the calls of ``module.read_file`` from now on: the one-item list's count."""
    count = [0]
    read_file = module.read_file

    def counting(parent: int, name: str, where: Path, limit: int) -> bytes:
        count[0] += 1
        return read_file(parent, name, where, limit)  # type: ignore[no-any-return]

    module.read_file = counting
    return count


def _booting(state: str, names: list[str]) -> Scheduler:
    """A scheduler of yearly routines ``names`` on the state directory ``state``, its clock
    just before the slot after the newest seeded claim: nothing is a catch-up."""
    return Scheduler(
        agent=RecordingAgent(),
        store=DirectoryStore(state),
        routines=[Routine(name=name, prompt="p", cron="0 0 1 1 *") for name in names],
        now=shifted_clock(SLOT_WALL - timedelta(seconds=30)),
        wakeups=False,
    )


def boot(state: str, routines: int) -> dict[str, Any]:
    """Start to armed over a seeded state directory, against listing its directories; the
    claim files read for the newest claims, and those the walk for open claims read, which
    goes on after the start returns (its end: when its reads stop)."""
    import trio_routines.stores.directory.blocking as claimfiles  # where claims are read back
    import trio_routines.stores.directory.openscan as openscan  # the open claims' walk

    newest = count_file_reads(claimfiles)
    scanned = count_file_reads(openscan)
    names = routine_names(routines)
    claims = Path(state) / "schedule" / "claims"

    # CPU time (every thread of the process) beside the wall clock: on a shared machine the
    # wall-clock ratio swings with the load, the CPU ratio much less.
    def listing() -> tuple[float, float]:
        started, cpu = time.perf_counter(), time.process_time()
        for name in names:
            os.listdir(claims / name)
        return time.perf_counter() - started, time.process_time() - cpu

    async def main() -> tuple[float, float, float]:
        scheduler = _booting(state, names)
        async with trio.open_nursery() as nursery:
            started, cpu = time.perf_counter(), time.process_time()
            await nursery.start(scheduler.run)
            elapsed = time.perf_counter() - started, time.process_time() - cpu
            # The walk for open claims goes on once the scheduler is ready: its end is when
            # its reads stop (none for 200 ms), up to 10 s.
            seen, walked = -1, time.perf_counter()
            while seen != scanned[0] and time.perf_counter() - started < 10:
                seen, walked = scanned[0], time.perf_counter()
                await trio.sleep(0.2)
            scheduler.stop(0)
        return elapsed[0], elapsed[1], walked - started

    listing()  # warm the dentry cache, so both sides read from memory
    before = listing()
    booted, booted_cpu, walked = trio.run(main)
    after = listing()
    return {
        "boot_ms": booted * 1e3,
        "walked_ms": walked * 1e3,
        "listing_ms": min(before, after)[0] * 1e3,
        "boot_cpu_ms": booted_cpu * 1e3,
        "listing_cpu_ms": min(before[1], after[1]) * 1e3,
        "files_read": newest[0],
        "open_scan_reads": scanned[0],
    }


def seed_herd(state: str, routines: int, claims: int, newest: str) -> None:
    """``claims`` settled claims for each of ``routines``, the newest of them ``"completed"``,
    ``"failed"`` or ``"open"`` (no fsync: this is setup); once per ``state`` directory."""
    from trio_routines.instants import slot_name

    marker = Path(state) / f"seeded-{routines}x{claims}-{newest}"
    if marker.exists():
        return
    first = SLOT_WALL - timedelta(minutes=claims)
    slots = [first + timedelta(minutes=k) for k in range(claims)]
    last = {
        "completed": claim_text(slots[-1], Outcome.COMPLETED, 12),
        "failed": claim_text(slots[-1], Outcome.FAILED, 12),
        "open": claim_text(slots[-1]),
    }[newest]
    texts = [claim_text(slot, Outcome.COMPLETED, 12) for slot in slots[:-1]] + [last]
    for name in routine_names(routines):
        directory = Path(state) / "schedule" / "claims" / name
        directory.mkdir(parents=True, exist_ok=True)
        for slot, text in zip(slots, texts, strict=True):
            (directory / slot_name(slot)).write_bytes(text.encode())
    marker.touch()


def boot_after_herd(state: str, routines: int, claims: int, newest: str) -> dict[str, Any]:
    """Start to armed over a state directory seeded by :func:`seed_herd`: after a herd that
    ran, failed, or died with its process (the boot records each interrupted, so the state
    is no longer the one seeded: copy a seeded one for each run). The wall clock's time."""
    seed_herd(state, routines, claims, newest)
    names = routine_names(routines)

    async def main() -> float:
        scheduler = _booting(state, names)
        async with trio.open_nursery() as nursery:
            started = time.perf_counter()
            await nursery.start(scheduler.run)
            elapsed = time.perf_counter() - started
            scheduler.stop(0)
        return elapsed

    logging.getLogger("trio_routines").setLevel(logging.ERROR)  # a line per interrupted fire
    return {"boot_s": trio.run(main)}


# -- 6. wake-ups -----------------------------------------------------------------------------


def _pending(n: int, now: datetime) -> list[Wakeup]:
    far = now + timedelta(days=30)
    return [
        Wakeup(id=f"w{i:06d}", session=f"s{i // 20:05d}", prompt="check", fire_at=far)
        for i in range(n)
    ]


def wakeups(store: str, state: str | None, n: int, reps: int) -> dict[str, Any]:
    """Cost of a poll (nothing due), an add and a take, with ``n`` wake-ups pending."""
    now = datetime.now(UTC)
    pending = _pending(n, now)
    due = [
        Wakeup(id=f"d{i:06d}", session=f"due{i:05d}", prompt="due", fire_at=now)
        for i in range(reps)
    ]
    backend: Any
    if store == "memory":
        backend = MemoryStore()
        backend.wakeups = [*pending, *due]
    else:
        assert state is not None
        schedule = Path(state) / "schedule"
        schedule.mkdir(parents=True, exist_ok=True)
        entries = [*pending, *due]
        (schedule / JOURNAL).write_bytes(snapshot((w, n) for n, w in enumerate(entries, 1)))
        backend = DirectoryStore(state)

    async def timed(call: Callable[[], Any]) -> list[float]:
        samples = []
        for _ in range(reps):
            started = time.perf_counter()
            await call()
            samples.append((time.perf_counter() - started) * 1e3)
        return samples

    async def main() -> dict[str, list[float]]:
        later = now + timedelta(days=1)
        counter = iter(range(10**6))
        # Due entries sit at the end, so a poll scans everything first; polls use a "now"
        # before them so that nothing is due.
        polls = await timed(lambda: backend.take_due_wakeup(now - timedelta(hours=1)))
        takes = await timed(lambda: backend.take_due_wakeup(now))
        adds = await timed(
            lambda: backend.add_wakeup(
                WakeupRequest(session=f"new{next(counter)}", prompt="p", fire_at=later), now
            )
        )
        return {"poll_ms": polls, "take_ms": takes, "add_ms": adds}

    samples = trio.run(main)
    return {key: sorted(values)[len(values) // 2] for key, values in samples.items()}


def status_page(n: int, cron: str = "* * * * *", renders: int = 3) -> dict[str, Any]:
    """``GET /``'s work for ``n`` routines of ``cron`` whose history is sparse (two claims 23
    hours apart, so each timeline spans the whole day): the snapshot (``gather``, where the
    cron slots are searched) and the HTML, first with an empty memory of the slots, then
    ``renders`` times within the same minute and once a minute later; with the cron searches
    counted. ``walk_*`` is the old way, every slot of the span walked, timed on 100 routines.
    """
    from trio_routines.cron import next_run
    from trio_routines.http import expected as expected_module
    from trio_routines.http.expected import ExpectedSlots
    from trio_routines.http.page import gather
    from trio_routines.http.render import main_html

    now = [datetime(2030, 6, 15, 12, 0, 30, tzinfo=UTC)]
    calls = [0]

    def counting(cron_: str, tz: str | None, after: datetime, seed: str | None = None) -> Any:
        calls[0] += 1
        return next_run(cron_, tz, after, seed)

    expected_module.next_run = counting  # type: ignore[assignment]
    names = routine_names(n)

    async def main() -> dict[str, Any]:
        store = MemoryStore()
        minute = now[0].replace(second=0)
        for name in names:
            for slot in (minute - timedelta(hours=23), minute):
                await store.claim(name, slot, slot)
                await store.settle(name, slot, Outcome.COMPLETED, 5)
        scheduler = Scheduler(
            agent=ScriptedAgent(),
            store=store,
            routines=[Routine(name=name, prompt="p", cron=cron) for name in names],
            external_clock=True,
            now=lambda: now[0],
        )
        memory = ExpectedSlots()
        result: dict[str, Any] = {}

        async def render(label: str) -> None:
            calls[0] = 0
            started = time.perf_counter()
            view = await gather(scheduler, expected=memory)
            gathered = time.perf_counter()
            main_html(view)
            done = time.perf_counter()
            result[f"{label}_gather_s"] = round(gathered - started, 4)
            result[f"{label}_html_s"] = round(done - gathered, 4)
            result[f"{label}_searches_per_routine"] = round(calls[0] / n, 2)

        await render("first")
        for _ in range(renders):
            await render("cached")
        now[0] += timedelta(minutes=1)
        await render("next_minute")
        # The old way: walk every slot of each timeline's span (on at most 100 routines).
        sample = scheduler.routines[names[0]]
        started = time.perf_counter()
        for _ in range(min(n, 100)):
            at = now[0] - timedelta(hours=23, minutes=1)
            while (at := next_run(cron, None, at, sample.name)) is not None and at <= now[0]:
                pass
        per_routine = (time.perf_counter() - started) / min(n, 100)
        result["walk_s_per_routine"] = round(per_routine, 5)
        result["walk_estimate_s"] = round(per_routine * n, 2)
        result["rss_kib"] = settled_rss()
        return result

    return trio.run(main)


CASES: dict[str, Callable[..., dict[str, Any]]] = {
    "status_page": status_page,
    "idle_routines": idle_routines,
    "idle_bare": idle_bare,
    "idle_aps": idle_aps,
    "burst_routines": burst_routines,
    "burst_bare": burst_bare,
    "burst_trio_floor": burst_trio_floor,
    "burst_aps": burst_aps,
    "create_floor": create_floor,
    "group_floor": group_floor,
    "shared_floor": shared_floor,
    "writes_at": writes_at,
    "beside_floor": beside_floor,
    "store_writes": store_writes,
    "insert_floor": insert_floor,
    "seed_claims": seed_claims,
    "boot": boot,
    "boot_after_herd": boot_after_herd,
    "seed_herd": seed_herd,
    "wakeups": wakeups,
}


if __name__ == "__main__":
    case, params = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(CASES[case](**params)))
