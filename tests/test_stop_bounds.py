"""A stop ends within its grace plus a small bound whatever the state directory does: real
processes, a writer child stopped with SIGSTOP while a herd's claims are in it, a disk that
stalls the claims' writes or a wake-up take's rewrite."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
import trio.testing
from procs import Env, before_a_minute, wait_for

from trio_routines.errors import StateFault
from trio_routines.instants import format_iso
from trio_routines.stores.directory import DirectoryStore
from trio_routines.stores.directory import store as directory_store
from trio_routines.stores.directory import writes as write_path
from trio_routines.wakeups import WakeupRequest

ROUTINES = 120  # more than a boot that starts the writer process reads (PROCESS_AT)
#: What a stop may take beyond its grace here: the stop's margin (2 s), closing the store
#: (a killed child reaped within 5 s), the interpreter's exit. docs/design.md has the bound.
BEYOND_GRACE = 20.0


def writer_child(parent: int) -> int | None:
    """The pid of ``parent``'s writer process, if it runs."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        if ppid == parent and b"stores.directory.writer.child" in command:
            return int(entry.name)
    return None


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError(f"no thread count for {pid}")


@pytest.mark.slow
def test_sigterm_with_a_stopped_writer_child_exits_within_the_grace_and_fires_nothing(
    env: Env,
) -> None:
    for i in range(ROUTINES):
        env.routine(f"m{i:03}", cron="* * * * *")
    # serve's wall clock starts 10 s before a minute's herd (~4 s to boot, start the writer
    # process and let it settle here); were it slower, the test waits for the next herd.
    env.clock = clock = before_a_minute(env.root / "wall.faketime", 10)
    serve = env.serve("echo", "--grace", "2")
    child = wait_for(lambda: writer_child(serve.pid), 30, "the writer process")
    # Up before it is stopped: else threads write, and the log's "given up" below would be
    # missing. Its flush thread starts right after it said it is up (child.py), so a second
    # thread is the sign, however long its imports took on a loaded machine.
    wait_for(lambda: threads_of(child) >= 2, 30, "the writer process up")
    os.kill(child, signal.SIGSTOP)
    try:
        # The next minute's herd: its claims go to the stopped child and are never answered.
        now = clock.now()
        herd = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
        time.sleep((herd - now).total_seconds() + 3)
        stopped_at = time.monotonic()
        serve.send_signal(signal.SIGTERM)
        # Without a bound of ours this waits for the writer's reply timeout (60 s).
        serve.wait(timeout=2 + BEYOND_GRACE)
        took = time.monotonic() - stopped_at
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert serve.returncode == 0, env.log()
    # No claim of the stalled herd was confirmed, so none of its turns ran.
    herd_slot = format_iso(herd)
    for i in range(0, ROUTINES, 17):
        for fire in env.history(f"m{i:03}"):
            if fire["slot"] == herd_slot:
                assert fire.get("outcome") != "completed", fire
    assert "writer process was given up" in env.log()
    print(f"SIGTERM to exit: {took:.1f}s")  # for the record, not asserted


async def test_the_store_is_not_ready_while_a_write_goes_unanswered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stat of the directory still answers; the claim in the stopped writer does not.
    monkeypatch.setattr(directory_store, "STALLED_AFTER", 0.2)
    hang = [sys.executable, str(Path(__file__).with_name("writers.py")), "hang"]
    async with DirectoryStore(tmp_path, writer_process=hang) as store:
        await store.ready()
        for i in range(write_path.PROCESS_AT):  # as a boot: the writer process starts
            await store.latest_fire(f"r{i:04}")
        process = store._writes.process
        assert process is not None
        with trio.fail_after(30):
            while not process.ready():  # noqa: ASYNC110 -- another process, not a Trio task
                await trio.sleep(0.01)
        slot = datetime(2026, 7, 7, 9, tzinfo=UTC)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.claim, "r0", slot, slot)
            await trio.testing.wait_all_tasks_blocked()
            await store.ready()  # not overdue yet
            await trio.sleep(0.5)
            with pytest.raises(StateFault) as raised:
                await store.ready()
            nursery.cancel_scope.cancel()  # its caller gives up: so does the store
        assert str(raised.value).startswith("the state directory's writes have not answered")
        await store.ready()  # nothing under way: ready again


@pytest.mark.slow
def test_sigterm_while_the_disk_stalls_the_claims_exits_within_the_grace_and_runs_nothing(
    env: Env,
) -> None:
    # Threads write here (too few routines for the writer process); the disk "freezes" just
    # before a minute's herd, and thaws only after the process is gone.
    for i in range(10):
        env.routine(f"m{i}", cron="* * * * *")
    # serve's wall clock starts 6 s before a minute's herd (~1.5 s to boot here, 2 s of
    # freeze before the herd); were it slower, the test waits for the next herd.
    env.clock = clock = before_a_minute(env.root / "wall.faketime", 6)
    marker = env.root / "frozen"
    script = Path(__file__).with_name("stalled_disk.py")
    serve_argv = env.argv("serve", "--agent", "echo")[3:]  # without "python -m trio_routines"
    argv = [sys.executable, str(script), str(marker), *serve_argv]
    with (env.root / "serve.log").open("wb") as err:
        serve = subprocess.Popen(
            [*argv, "--grace", "2"], stderr=err, cwd=env.root, env=env.environ()
        )
    env.procs.append(serve)
    wait_for(lambda: "wake-ups:" in env.log(), 30, "serve to start")
    now = clock.now()
    herd = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    time.sleep(max(0.0, (herd - now).total_seconds() - 2))
    marker.touch()
    try:
        time.sleep(5)  # the herd's claims are in the stalled writes
        serve.send_signal(signal.SIGTERM)
        # Without a bound of ours this waits for the thaw.
        serve.wait(timeout=2 + BEYOND_GRACE)
    finally:
        marker.unlink()
    assert serve.returncode == 0, env.log()
    herd_slot = format_iso(herd)
    for i in range(10):
        for entry in env.history(f"m{i}"):
            # The stalled claims were never made (the slot may be in a "store" gap instead).
            assert entry.get("slot") != herd_slot, entry
    assert "firing" not in env.log().split("SIGTERM received")[0].split(herd_slot[:16])[-1]


@pytest.mark.slow
def test_sigterm_while_the_disk_stalls_a_wakeup_take_exits_within_the_grace_and_loses_nothing(
    env: Env,
) -> None:
    # The wake loop's take of a due wake-up stalls before its rename (a frozen file system);
    # the disk thaws only after the process is gone.
    past = datetime.now(UTC) - timedelta(hours=1)
    request = WakeupRequest(session="s", prompt="look again", fire_at=past + timedelta(minutes=2))
    wakeup = trio.run(DirectoryStore(env.state).add_wakeup, request, past)
    marker = env.root / "frozen"
    marker.touch()
    script = Path(__file__).with_name("stalled_disk.py")
    serve_argv = env.argv("serve", "--agent", "echo")[3:]
    argv = [sys.executable, str(script), str(marker), "--wakeups", *serve_argv, "--grace", "2"]
    try:
        with (env.root / "serve.log").open("wb") as err:
            serve = subprocess.Popen(argv, stderr=err, cwd=env.root, env=env.environ())
        env.procs.append(serve)
        wait_for(lambda: "wake-ups:" in env.log(), 30, "serve to start")
        time.sleep(3)  # the take is in the stalled rewrite
        stopped_at = time.monotonic()
        serve.send_signal(signal.SIGTERM)
        # Without a bound of ours this waits for the thaw.
        serve.wait(timeout=2 + BEYOND_GRACE)
        took = time.monotonic() - stopped_at
    finally:
        marker.unlink()
    assert serve.returncode == 0, env.log()
    assert [entry["id"] for entry in env.wakeups()] == [wakeup.id]  # never taken, still there
    assert "wake-up poll ended by the stop" in env.log()
    print(f"SIGTERM to exit: {took:.1f}s")  # for the record, not asserted
