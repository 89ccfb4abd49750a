"""SIGHUP reloads the routines directory of a running `serve` (a real process)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from procs import Env, stop, wait_for


def test_sighup_reloads_the_routines_and_keeps_a_broken_file_s_old_version(env: Env) -> None:
    env.routine("keep", cron="0 0 1 1 *")
    env.routine("gone", cron="0 0 1 1 *")
    (env.routines / "Daily.MD").write_text("---\ncron: 0 9 * * *\n---\nhi\n")
    proc = env.serve("echo", "--no-wakeups")
    said = 'passed over (a routine file is named <name>.md): "Daily.MD"'
    assert f"INFO  {env.routines}: {said}" in env.log()

    env.routine("new", cron="0 0 1 1 *")
    (env.routines / "gone.md").unlink()
    (env.routines / "keep.md").write_text("---\ncron: nope\n---\nbroken now\n")
    (env.routines / ".new.md").write_text("---\n---\nhidden\n")
    proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "routines updated:" in env.log(), 20, "the reload")
    log = env.log()
    assert "INFO  SIGHUP received — reloading the routines from " in log
    assert (
        'INFO  reload: passed over (a routine file is named <name>.md): ".new.md", "Daily.MD"'
        in log
    )
    assert "INFO  routines updated: added new; removed gone" in log
    assert "keep.md: " in log
    assert "— keeping the version loaded before" in log
    assert proc.poll() is None  # still serving

    proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "reload: no routine changed" in env.log(), 20, "the second reload")
    assert stop(proc) == 0
    assert env.log().splitlines()[-1].endswith("Z INFO  stopped")


def _threads(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return 0
    return int(next(line for line in status.splitlines() if line.startswith("Threads:")).split()[1])


@pytest.mark.slow
def test_a_sighup_during_the_start_up_is_queued_and_never_ends_serve(env: Env) -> None:
    # Enough routines that reading them (and booting them) takes a while: the first thread
    # serve starts is the one that reads the directory, so a SIGHUP sent as soon as it exists
    # lands while the routines are still being loaded -- where it used to end the process.
    for i in range(2000):
        env.routine(f"r{i:04}", cron="0 0 1 1 *")
    for attempt in range(3):
        log = f"serve{attempt}.log"
        proc = env.start("serve", "--agent", "echo", "--no-wakeups", log=log)
        deadline = time.monotonic() + 30
        while _threads(proc.pid) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        proc.send_signal(signal.SIGHUP)
        wait_for(
            lambda: "reload: no routine changed" in env.log(log) or proc.poll() is not None,  # noqa: B023
            30,
            "the queued reload",
        )
        text = env.log(log)
        assert proc.poll() is None, text  # still serving
        # The reload waited for the start-up: it comes after the routines were armed.
        assert text.index("serving 2000 routine(s)") < text.index("SIGHUP received"), text
        assert stop(proc) == 0
        assert env.log(log).splitlines()[-1].endswith("Z INFO  stopped")


def test_sighup_keeps_every_routine_when_the_directory_is_gone_or_emptied(env: Env) -> None:
    for name in ("a", "b", "c"):
        env.routine(name, cron="0 0 1 1 *")
    proc = env.serve("echo", "--no-wakeups")

    def reload(marker: str) -> str:
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: marker in env.log() or proc.poll() is not None, 20, marker)
        assert proc.poll() is None
        return env.log()

    env.routines.rename(env.root / "elsewhere")
    log = reload("the routines directory is gone")
    assert f"ERROR reload: {env.routines}: the routines directory is gone — the routines " in log

    env.routines.mkdir()  # swapped for an empty directory
    log = reload("holds no routine")
    assert f"ERROR reload: {env.routines} holds no routine — not removing all 3 loaded" in log
    assert "routines updated" not in log

    (env.routines / ".no-routines").write_text("")  # the operator means it
    log = reload("routines updated:")
    assert "INFO  routines updated: removed a, b, c" in log
    assert stop(proc) == 0
