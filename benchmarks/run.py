"""Run every benchmark and print the tables: ``python benchmarks/run.py [--quick]``.

Each measurement runs in a fresh interpreter (``cases.py``) and is repeated; a figure is the
median over the repetitions with the minimum and maximum beside it. Comparisons (a floor, the
runtime, APScheduler 4) run back to back inside one invocation, because absolute times on a
shared two-core machine drift from one hour to the next.

The full run stays under ten minutes; ``--quick`` (smaller sets, one repetition) is a smoke
test of a minute or two. State directories live under ``--state`` (default
``/tmp/trio-routines-bench``); the boot case's seeded claims are kept there between runs
(writing 512,000 files takes a while) unless ``--clean`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"


# -- running cases -------------------------------------------------------------------------


def case(name: str, **params: Any) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter and return its JSON result."""
    proc = subprocess.run(
        [PYTHON, str(HERE / "cases.py"), name, json.dumps(params)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def cases_together(name: str, params: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run several copies of one case at once (several schedulers sharing a store)."""
    procs = [
        subprocess.Popen(
            [PYTHON, str(HERE / "cases.py"), name, json.dumps(p)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in params
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"{name} failed:\n{err[-2000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def discard(state: Path, directory: Path) -> None:
    """Put a used state directory aside, to be removed once every measurement is done.

    Removing it at once would skew what follows: ext4 without a journal (this machine kind's
    disk) skips inodes freed in the last 1-5 minutes when it allocates new ones, scanning past
    each, so 10,000 files created right after 10,000 were removed cost ~0.6 ms each instead of
    ~0.03 ms (``find_inode_bit`` -> ``recently_deleted`` in the kernel). A rename frees nothing.
    """
    if directory.exists():
        trash = state / "trash"
        trash.mkdir(exist_ok=True)
        directory.rename(trash / f"{directory.name}-{uuid.uuid4().hex[:8]}")


#: How long ext4 without a journal passes over freed inodes: five minutes at most.
RECENTLY_FREED_S = 300.0


def empty_trash(state: Path) -> None:
    """Remove what :func:`discard` put aside, and note when (see :func:`after_trash`)."""
    if (state / "trash").exists():
        shutil.rmtree(state / "trash", ignore_errors=True)
        (state / "trash-emptied").write_text(f"{time.time()}\n")


def after_trash(state: Path) -> None:
    """Wait until a previous run's removals no longer slow the creates of this one."""
    try:
        emptied = float((state / "trash-emptied").read_text())
    except (OSError, ValueError):
        return
    wait = emptied + RECENTLY_FREED_S - time.time()
    if wait > 0:
        print(f"(waiting {wait:.0f} s: the previous run removed its files just now)", flush=True)
        time.sleep(wait)


def journal(device: str, fstype: str) -> str:
    """Whether an ext4 file system keeps a journal (what an exclusive create costs depends)."""
    if fstype != "ext4":
        return ""
    task = Path("/sys/fs/ext4") / Path(device).name / "journal_task"
    try:
        return ", journal" if task.read_text().strip() not in ("", "<none>") else ", no journal"
    except OSError:
        return ""


def slot_in(seconds: float) -> float:
    """A whole-second instant at least ``seconds`` from now: the slot of a burst."""
    return float(int(time.time() + seconds) + 1)


def repeat(reps: int, measure: Callable[[], dict[str, Any]]) -> list[dict[str, Any]]:
    return [measure() for _ in range(reps)]


class Stat:
    """Median, minimum and maximum of one figure over repetitions."""

    def __init__(self, values: Iterable[float]) -> None:
        self.values = sorted(values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def show(self, digits: int = 1) -> str:
        med, low, high = self.median, self.values[0], self.values[-1]
        if len(self.values) == 1:
            return f"{med:,.{digits}f}"
        return f"{med:,.{digits}f} ({low:,.{digits}f}–{high:,.{digits}f})"


def stat(results: list[dict[str, Any]], key: str | Callable[[dict[str, Any]], float]) -> Stat:
    get = key if callable(key) else (lambda r: float(r[key]))
    return Stat(get(r) for r in results)


class Report:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.verdicts: list[tuple[str, str, str, str]] = []

    def out(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)

    def table(self, title: str, header: list[str], rows: list[list[str]]) -> None:
        self.out(f"### {title}")
        self.out()
        self.out("| " + " | ".join(header) + " |")
        self.out("|" + "|".join(" --- " for _ in header) + "|")
        for row in rows:
            self.out("| " + " | ".join(row) + " |")
        self.out()

    def target(self, what: str, target: str, result: str, met: bool) -> None:
        self.verdicts.append((what, target, result, "met" if met else "**missed**"))


# -- machine facts ---------------------------------------------------------------------------


def facts(state: Path) -> list[tuple[str, str]]:
    cpu = "unknown"
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mount = subprocess.run(
        ["findmnt", "-n", "-o", "SOURCE,FSTYPE,OPTIONS", "--target", str(state)],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    device, fstype, options = [*mount, "?", "?", "?"][:3]
    versions = []
    for package in ("trio-routines", "trio", "apscheduler", "anyio", "psycopg", "attrs"):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} (not installed)")
    pg = subprocess.run(
        ["psql", PG_ADMIN, "-Atc", "show server_version"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return [
        ("CPU", f"{cpu}, {os.cpu_count()} cores"),
        ("OS", f"{platform.system()} {platform.release()}"),
        ("Python", platform.python_version()),
        ("packages", ", ".join(versions)),
        ("PostgreSQL", pg or "unreachable"),
        ("state directory", f"{state} on {device}, {fstype}{journal(device, fstype)} ({options})"),
        ("load average at start", ", ".join(f"{x:.2f}" for x in os.getloadavg())),
    ]


# -- the benchmarks --------------------------------------------------------------------------


def bench_idle(report: Report, sizes: list[int], reps: int, seconds: float) -> None:
    rows = []
    for n in sizes:
        runs = {
            kind: repeat(reps, lambda kind=kind, n=n: case(kind, n=n, seconds=seconds))
            for kind in ("idle_bare", "idle_routines", "idle_aps")
        }
        per = {
            kind: stat(results, lambda r, n=n: (r["armed_kib"] - r["base_kib"]) / n)
            for kind, results in runs.items()
        }
        cpu = {kind: stat(results, "idle_cpu_ms_per_s") for kind, results in runs.items()}
        for kind, label in (
            ("idle_bare", "bare Trio task sleeping to a deadline"),
            ("idle_routines", "trio_routines cron routine"),
            ("idle_aps", "APScheduler 4 cron schedule (memory store)"),
        ):
            rows.append([f"{n:,}", label, per[kind].show(2), cpu[kind].show(2)])
        routine = per["idle_routines"].median
        report.target(
            f"idle memory per routine, N={n:,}",
            "≤ 4 KiB",
            f"{routine:.2f} KiB ({routine - 4:+.2f} KiB)",
            routine <= 4,
        )
        excess = cpu["idle_routines"].median - cpu["idle_bare"].median
        report.target(
            f"CPU while idle, N={n:,}",
            "none beyond the bare-Trio floor",
            f"{cpu['idle_routines'].median:.2f} ms/s vs floor {cpu['idle_bare'].median:.2f} ms/s",
            excess < 0.5,
        )
    report.table(
        "1. Idle cost (RSS after arming minus baseline, per item; CPU over an idle window)",
        ["N", "what", "KiB per item", "idle CPU ms per s"],
        rows,
    )


BURSTS = (
    ("bare", "bare Trio sleeps"),
    ("floor", "Trio floor: a fire's Trio steps, no scheduler"),
    ("memory", "trio_routines, MemoryStore"),
    ("frozen", "trio_routines, MemoryStore, gc.freeze() after boot"),
    ("directory", "trio_routines, DirectoryStore"),
    ("beside", "two-process floor: the MemoryStore burst, its claims written by another process"),
    ("aps", "APScheduler 4, memory store"),
)


def burst(kind: str, n: int, state: Path) -> dict[str, Any]:
    lead = 2.0 + n / 5000  # process start plus boot, with room to spare
    if kind == "bare":
        return case("burst_bare", n=n, slot=slot_in(lead))
    if kind == "floor":
        return case("burst_trio_floor", n=n, slot=slot_in(lead))
    if kind in ("memory", "frozen"):
        return case("burst_routines", n=n, slot=slot_in(lead), freeze=kind == "frozen")
    if kind == "directory":
        return directory_burst(state, n, slot_in(lead + n / 4000))
    if kind == "beside":
        return directory_burst(state, n, slot_in(lead + n / 4000), "beside_floor")
    return case("burst_aps", n=n, slot=slot_in(lead + 1))


def bench_bursts(
    report: Report, state: Path, sizes: list[int], reps: dict[int, int], aps_reps: int
) -> dict[tuple[int, str], list[dict[str, Any]]]:
    """Every kind of burst once per repetition, back to back, so that a ratio (the runtime
    against its floor, the state directory against the memory store) is taken within one
    repetition: on a shared host the absolute times drift by 2x from one run to the next.
    APScheduler 4 takes seconds a burst at 10,000: it runs in the first ``aps_reps`` only."""
    all_runs: dict[tuple[int, str], list[dict[str, Any]]] = {}
    rows = []
    for n in sizes:
        for rep in range(reps[n]):
            for kind, _label in BURSTS:
                if kind != "aps" or rep < aps_reps:
                    all_runs.setdefault((n, kind), []).append(burst(kind, n, state))
        for kind, label in BURSTS:
            runs = all_runs[n, kind]
            late = [r for r in runs if r["armed_before_slot_s"] <= 0]
            note = f" ({len(late)} run(s) armed after the slot!)" if late else ""
            rows.append(
                [
                    f"{n:,}",
                    label + note,
                    stat(runs, "p50_ms").show(),
                    stat(runs, "p99_ms").show(),
                    stat(runs, "max_ms").show(),
                    stat(runs, "cpu_per_fire_us").show(0),
                    stat(runs, "gc_per_fire_us").show(0) if "gc_per_fire_us" in runs[0] else "",
                    str(len(runs)),
                ]
            )
    report.table(
        "2–3. Fire lateness (slot → agent entered, real clock) and CPU per fire",
        [
            "N due at once",
            "what",
            "p50 ms",
            "p99 ms",
            "last started ms",
            "CPU µs/fire",
            "of which collector",
            "runs",
        ],
        rows,
    )
    return all_runs


def ratios(
    runs: dict[tuple[int, str], list[dict[str, Any]]], n: int, ours: str, base: str, key: str
) -> Stat:
    """``ours`` over ``base`` for figure ``key``, taken within each repetition."""
    pairs = zip(runs[n, ours], runs[n, base], strict=False)
    return Stat(a[key] / b[key] for a, b in pairs)


def directory_burst(
    state: Path, n: int, slot: float, kind: str = "burst_routines"
) -> dict[str, Any]:
    """A burst that writes claims in a state directory of its own (``kind``: the store's
    burst, or the two-process floor's), put aside once measured."""
    directory = state / f"burst-{uuid.uuid4().hex[:8]}"
    try:
        if kind == "burst_routines":
            return case(kind, n=n, slot=slot, store="directory", state=str(directory))
        return case(kind, n=n, slot=slot, state=str(directory))
    finally:
        discard(state, directory)


def burst_targets(report: Report, runs: dict[tuple[int, str], list[dict[str, Any]]]) -> None:
    """The targets against floors measured in the same repetitions (ratios within each), then
    the absolute ones of the first release."""
    sizes = sorted({n for n, _ in runs})
    for n in sizes:
        cpu = ratios(runs, n, "memory", "floor", "cpu_per_fire_us")
        report.target(
            f"CPU per fire, {n:,} due at once, MemoryStore / the Trio floor of a fire",
            "≤ 1.5×",
            f"{cpu.show(2)}× ({stat(runs[n, 'memory'], 'cpu_per_fire_us').median:.0f} µs "
            f"against {stat(runs[n, 'floor'], 'cpu_per_fire_us').median:.0f})",
            cpu.median <= 1.5,
        )
        late = ratios(runs, n, "memory", "floor", "p99_ms")
        report.target(
            f"p99 lateness, {n:,} due at once, MemoryStore / the Trio floor of a fire",
            "≤ 1.5×",
            f"{late.show(2)}× ({stat(runs[n, 'memory'], 'p99_ms').median:.0f} ms "
            f"against {stat(runs[n, 'floor'], 'p99_ms').median:.0f})",
            late.median <= 1.5,
        )
        durable = ratios(runs, n, "directory", "memory", "max_ms")
        beside = ratios(runs, n, "beside", "memory", "max_ms")
        report.target(
            f"last turn started, {n:,} due at once, DirectoryStore / MemoryStore",
            "≤ 1.2×",
            f"{durable.show(2)}× ({stat(runs[n, 'directory'], 'max_ms').median:.0f} ms "
            f"against {stat(runs[n, 'memory'], 'max_ms').median:.0f}); the two-process "
            f"floor {beside.show(2)}× ({stat(runs[n, 'beside'], 'max_ms').median:.0f} ms)",
            durable.median <= 1.2,
        )
    if (1000, "memory") in runs:
        p99 = stat(runs[1000, "memory"], "p99_ms").median
        floor = stat(runs[1000, "bare"], "p99_ms").median
        report.target(
            "1,000 due at once, p99 lateness, MemoryStore",
            "< 5 ms",
            f"{p99:.0f} ms ({p99 / 5:.0f}× the target; bare-Trio floor {floor:.0f} ms)",
            p99 < 5,
        )
    for store, limit in (("memory", 1000.0), ("directory", 3000.0)):
        if (10000, store) in runs:
            last = stat(runs[10000, store], "max_ms").median
            aps = stat(runs[10000, "aps"], "max_ms").median
            report.target(
                f"10,000 due at once, last started, {store} store",
                f"< {limit / 1000:.0f} s",
                f"{last / 1000:.2f} s ({last / limit:.2f}× the target; "
                f"APScheduler 4: {aps / 1000:.1f} s)",
                last < limit,
            )


def bench_claims(
    report: Report,
    state: Path,
    n: int,
    reps: int,
    directory_runs: dict[int, list[dict[str, Any]]],
    directory_sizes: list[int],
    *,
    postgres: bool = True,
) -> None:
    rows = []

    def floor(kind: str, size: int, **params: Any) -> dict[str, Any]:
        directory = state / f"floor-{uuid.uuid4().hex[:8]}"
        try:
            return case(kind, state=str(directory), n=size, **params)
        finally:
            discard(state, directory)

    for size in directory_sizes:
        runs = directory_runs.get(size) or repeat(
            reps, lambda size=size: burst("directory", size, state)
        )
        sequential = repeat(reps, lambda size=size: floor("create_floor", size, threads=1))
        parallel = repeat(reps, lambda size=size: floor("create_floor", size, threads=16))
        grouped = repeat(reps, lambda size=size: floor("group_floor", size, threads=1))
        grouped16 = repeat(reps, lambda size=size: floor("group_floor", size, threads=16))
        writes = repeat(reps, lambda size=size: floor("store_writes", size))
        renames = repeat(reps, lambda size=size: floor("store_writes", size, spares=True))
        shared = repeat(
            reps,
            lambda size=size: floor("shared_floor", size, slot=slot_in(2.0 + size / 4000)),
        )
        ours = stat(runs, "max_ms")
        best = min(stat(grouped, "total_ms").median, stat(grouped16, "total_ms").median)
        rows += [
            [
                f"{size:,} exclusive creates + fsync file + fsync dir, 1 thread",
                stat(sequential, "total_ms").show(),
            ],
            ["the same, 16 threads", stat(parallel, "total_ms").show()],
            [
                f"{size:,} exclusive creates, then one syncfs (group-commit floor), 1 thread",
                stat(grouped, "total_ms").show(),
            ],
            ["the same, 16 threads", stat(grouped16, "total_ms").show()],
            ["  of which the one syncfs", stat(grouped, "syncfs_ms").show()],
            [
                f"the store's own writes of {size:,} claims, one thread, then one syncfs "
                "(no event loop)",
                stat(writes, "total_ms").show(),
            ],
            ["the same, each claim renaming its routine's spare", stat(renames, "total_ms").show()],
            [
                f"the memory-store burst of {size:,} and, in a thread of the same process, "
                "the group-commit floor's creates and syncfs (one-interpreter floor)",
                stat(shared, "last_ms").show(),
            ],
            ["  of which the writes, beside the burst", stat(shared, "writes_took_ms").show()],
            [f"trio_routines DirectoryStore: {size:,} due at once, last started", ours.show()],
        ]
        target = 150.0 * size / 1000
        report.target(
            f"{size:,} due at once, DirectoryStore, last turn started",
            f"≤ {target:,.0f} ms",
            f"{ours.median:.0f} ms; group-commit floor {best:.0f} ms = {ours.median / best:.2f}×",
            ours.median <= target,
        )

    for schedulers in (1, 4) if postgres else ():
        results = repeat(reps, lambda s=schedulers: postgres_burst(n, s))
        rows.append(
            [
                f"trio_routines PostgresStore, {schedulers} scheduler(s): {n:,} due, last started",
                stat(results, "last_ms").show(),
            ]
        )
        if any(r["taken"] != n or r["turns"] != n for r in results):
            rows.append(["  ⚠ not every slot ran exactly once", json.dumps(results)])
    for connections in (1, 8) if postgres else ():
        results = repeat(
            reps,
            lambda c=connections: case("insert_floor", n=n, connections=c, schema=fresh_schema()),
        )
        rows.append(
            [
                f"{n:,} plain single-row autocommit INSERTs, {connections} connection(s)",
                stat(results, "total_ms").show(),
            ]
        )
    if postgres:
        drop_schemas()
    report.table(
        "4. Claim throughput (time until every claim is durable and every turn started)",
        ["what", "ms"],
        rows,
    )


SCHEMAS: list[str] = []


def fresh_schema() -> str:
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    SCHEMAS.append(schema)
    return schema


def drop_schemas() -> None:
    for schema in SCHEMAS:
        subprocess.run(
            ["psql", PG_ADMIN, "-qc", f"DROP SCHEMA IF EXISTS {schema} CASCADE"],
            capture_output=True,
            check=False,
        )
    SCHEMAS.clear()


def postgres_burst(n: int, schedulers: int) -> dict[str, Any]:
    schema = fresh_schema()
    # Create the schema first, so that the measured fires do not include the migration.
    subprocess.run(
        [
            PYTHON,
            "-c",
            "import trio; from trio_routines.stores.postgres import PostgresStore as S; "
            f"s = S({PG_ADMIN!r}, schema={schema!r}); "
            "trio.run(s.latest_fire, 'r00000'); trio.run(s.aclose)",
        ],
        check=True,
        capture_output=True,
    )
    slot = slot_in(3.0 + schedulers * 0.5)
    results = cases_together(
        "burst_routines",
        [
            dict(n=n, slot=slot, store="postgres", schema=schema, return_starts=True, timeout=15.0)
            for _ in range(schedulers)
        ],
    )
    starts = [s for r in results for s in r["starts"]]
    taken = sum(r["outcomes"].get("completed", 0) for r in results)
    return {
        "last_ms": (max(starts) - slot) * 1e3 if starts else float("nan"),
        "turns": len(starts),
        "taken": taken,
    }


def bench_boot(report: Report, state: Path, routines: int, claims: int, reps: int) -> None:
    seed = state / f"boot-{routines}x{claims}"
    seeded = case("seed_claims", state=str(seed), routines=routines, claims=claims)
    if seeded["seeded"]:
        report.out(f"(seeded {routines * claims:,} claim files in {seeded['seconds']:.0f} s)")
        report.out()
    runs = repeat(reps, lambda: case("boot", state=str(seed), routines=routines))
    boot, listing = stat(runs, "boot_ms"), stat(runs, "listing_ms")
    walked = stat(runs, "walked_ms")
    boot_cpu, listing_cpu = stat(runs, "boot_cpu_ms"), stat(runs, "listing_cpu_ms")
    reads = stat(runs, "files_read")
    scanned = stat(runs, lambda r: float(r.get("open_scan_reads", 0)))
    report.table(
        f"5. Boot: {routines:,} routines × {claims} claims each (warm cache)",
        ["what", "ms"],
        [
            ["start → armed (nursery.start returns)", boot.show()],
            ["start → the walk for open claims done (it runs beside the loops)", walked.show()],
            [f"os.listdir of the {routines:,} claim directories", listing.show()],
            ["start → armed, CPU time (every thread)", boot_cpu.show()],
            ["os.listdir, CPU time", listing_cpu.show()],
            ["claim files read during boot: the newest claims", reads.show(0)],
            ["  and by the walk for open claims (a bounded budget)", scanned.show(0)],
        ],
    )
    ratio = boot.median / listing.median
    report.target(
        f"boot, {routines:,} routines × {claims} claims",
        "≤ 2× the listing cost, newest claim only (the open claims' walk runs after)",
        f"{boot.median:.0f} ms vs listing {listing.median:.0f} ms = {ratio:.1f}×; "
        f"{reads.median:.0f} files read",
        ratio <= 2 and reads.median <= routines,
    )


def bench_wakeups(report: Report, state: Path, sizes: list[int], reps: int) -> None:
    rows = []
    for n in sizes:
        for store in ("memory", "directory"):
            directory = state / f"wakeups-{uuid.uuid4().hex[:8]}"
            try:
                runs = repeat(
                    3 if reps > 1 else 1,
                    lambda s=store, d=directory, n=n: case(
                        "wakeups", store=s, state=str(d), n=n, reps=reps
                    ),
                )
            finally:
                discard(state, directory)
            rows.append(
                [
                    f"{n:,}",
                    store,
                    stat(runs, "poll_ms").show(3),
                    stat(runs, "add_ms").show(3),
                    stat(runs, "take_ms").show(3),
                ]
            )
            if store == "directory" and n == max(sizes):
                poll = stat(runs, "poll_ms").median
                report.target(
                    f"wake-up poll with {n:,} pending, DirectoryStore",
                    "< 10 ms",
                    f"{poll:.1f} ms ({poll / 10:.1f}× the target)",
                    poll < 10,
                )
    report.table(
        "6. Wake-ups: cost of one call with N pending (median per call)",
        ["N pending", "store", "poll (nothing due) ms", "add ms", "take ms"],
        rows,
    )


def bench_bytecodes(report: Report, n: int) -> None:
    """Python bytecodes per fire, the floor's and the runtime's (memory store): a count that
    the host's load does not move, for comparing two versions of the fire path."""
    floor = case("burst_trio_floor", n=n, slot=slot_in(2 + n / 4000), bytecodes=True)
    ours = case("burst_routines", n=n, slot=slot_in(2 + n / 4000), bytecodes=True)
    ratio = ours["bytecodes_per_fire"] / floor["bytecodes_per_fire"]
    report.table(
        f"Python bytecodes per fire, {n:,} due at once (one run each; the count, not a time)",
        ["", "bytecodes per fire", "the most of it, per fire"],
        [
            [label, f"{run['bytecodes_per_fire']:,.0f}", _most(run["bytecodes_by_file"])]
            for label, run in (("a fire's Trio steps (floor)", floor), ("trio_routines", ours))
        ]
        + [["ratio", f"{ratio:.2f}×", ""]],
    )


def window_instructions(state: Path, name: str, **params: Any) -> int:
    """Machine instructions the process ran in a burst's measured window, under Valgrind's
    callgrind: zeroed at the window's start and dumped at its end (``cases.CollectorTime``
    marks both with a system call made nowhere else)."""
    out = state / f"callgrind-{uuid.uuid4().hex[:8]}"
    try:
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--zero-before=os_getppid",
                "--dump-before=os_getpgrp",
                f"--callgrind-out-file={out}",
                PYTHON,
                str(HERE / "cases.py"),
                name,
                json.dumps(params),
            ],
            capture_output=True,
            timeout=900,
            check=True,
        )
        dump = Path(f"{out}.1")  # the dump made at the window's end
        for line in dump.read_text().splitlines():
            if line.startswith("summary:"):
                return int(line.split()[1])
        raise RuntimeError(f"no summary in {dump}")
    finally:
        for leftover in state.glob(f"{out.name}*"):
            leftover.unlink()


def bench_instructions(report: Report, state: Path, n: int) -> None:
    """Machine instructions per fire, the floor's and the runtime's (memory store): C (the
    interpreter, datetime, dicts, the collector) included, and as unmoved by the host's load
    as a count of bytecodes. Needs ``valgrind`` and an interpreter with its symbols (the
    window's marks are found by name); the burst runs some 50 times slower under it."""
    if shutil.which("valgrind") is None:
        report.out("(instructions: valgrind is not installed; skipped)")
        return
    lead = 30 + n / 50  # the interpreter's start and the boot, under Valgrind
    floor = window_instructions(state, "burst_trio_floor", n=n, slot=slot_in(lead))
    ours = window_instructions(state, "burst_routines", n=n, slot=slot_in(lead))
    report.table(
        f"Machine instructions per fire, {n:,} due at once (callgrind; one run each)",
        ["", "instructions per fire"],
        [
            ["a fire's Trio steps (floor)", f"{floor / n:,.0f}"],
            ["trio_routines, MemoryStore", f"{ours / n:,.0f}"],
            ["ratio", f"{ours / floor:.2f}×"],
        ],
    )


def _most(by_file: dict[str, float]) -> str:
    return ", ".join(f"{name} {count:,.0f}" for name, count in list(by_file.items())[:5])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sets, one repetition")
    parser.add_argument("--state", type=Path, default=Path("/tmp/trio-routines-bench"))
    parser.add_argument("--clean", action="store_true", help="remove the seeded boot claims")
    parser.add_argument(
        "--reps", type=int, help="repetitions of the bursts (default: 6 at 1,000, 3 at 10,000)"
    )
    parser.add_argument(
        "--only",
        nargs="*",
        help="idle bursts claims directory boot wakeups postgres pgboot bytecodes instructions",
    )
    args = parser.parse_args()
    state: Path = args.state
    state.mkdir(parents=True, exist_ok=True)
    only = set(args.only or ["idle", "bursts", "claims", "boot", "wakeups", "postgres", "pgboot"])
    quick = args.quick
    reps = 1 if quick else 3
    report = Report()
    started = time.monotonic()

    if only & {"bursts", "claims", "directory", "boot", "wakeups"}:  # those create files
        after_trash(state)
    report.out(f"## Results ({'quick' if quick else 'full'} run, {time.strftime('%Y-%m-%d')})")
    report.out()
    for key, value in facts(state):
        report.out(f"- **{key}:** {value}")
    report.out()

    if "idle" in only:
        bench_idle(report, [1000] if quick else [1000, 10000], reps, 1.0 if quick else 3.0)
    runs: dict[tuple[int, str], list[dict[str, Any]]] = {}
    if "bursts" in only:
        sizes = [1000] if quick else [1000, 10000]
        burst_reps = {1000: args.reps or (1 if quick else 6), 10000: args.reps or 3}
        runs = bench_bursts(report, state, sizes, burst_reps, aps_reps=1 if quick else 2)
        burst_targets(report, runs)
    if "claims" in only:
        sizes = [1000] if quick else [1000, 10000]
        directory_runs = {n: runs[(n, "directory")] for n in sizes if (n, "directory") in runs}
        # The PostgreSQL rows moved to section 7 ("postgres": 1, 2 and 4 schedulers, 10,000).
        bench_claims(report, state, 1000, reps, directory_runs, sizes, postgres=False)
    if "directory" in only:  # the state-directory rows of "claims" alone, without PostgreSQL
        sizes = [1000] if quick else [1000, 10000]
        bench_claims(report, state, 1000, reps, {}, sizes, postgres=False)
    if "boot" in only:
        if quick:
            bench_boot(report, state, 100, 512, 1)
        else:
            bench_boot(report, state, 1000, 512, reps)
    if "wakeups" in only:
        bench_wakeups(report, state, [1000] if quick else [1000, 10000], 5 if quick else 15)
    if "postgres" in only:
        from pgbench import bench_postgres  # beside this file: the PostgreSQL rows

        bench_postgres(report, [1000] if quick else [1000, 10000], reps, 1, state / "pg")
    if "bytecodes" in only:
        bench_bytecodes(report, 1000)
    if "instructions" in only:
        bench_instructions(report, state, 1000)
    if "pgboot" in only:
        from pgboot import bench_pg_boot  # beside this file: a PostgreSQL boot's store calls

        bench_pg_boot(report, [1000] if quick else [1000, 10000], 1 if quick else 3)

    report.table(
        "Targets",
        ["target", "wanted", "result (median)", "verdict"],
        [list(v) for v in report.verdicts],
    )
    report.out(f"Total time: {time.monotonic() - started:.0f} s")
    empty_trash(state)  # after the last measurement: see discard()
    if args.clean:
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
