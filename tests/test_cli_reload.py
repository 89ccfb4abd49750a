"""SIGHUP reloads the routines directory of a running `serve` (a real process)."""

from __future__ import annotations

import signal

from procs import Env, stop, wait_for


def test_sighup_reloads_the_routines_and_keeps_a_broken_file_s_old_version(env: Env) -> None:
    env.routine("keep", cron="0 0 1 1 *")
    env.routine("gone", cron="0 0 1 1 *")
    proc = env.serve("echo", "--no-wakeups")

    env.routine("new", cron="0 0 1 1 *")
    (env.routines / "gone.md").unlink()
    (env.routines / "keep.md").write_text("---\ncron: nope\n---\nbroken now\n")
    proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "routines updated:" in env.log(), 20, "the reload")
    log = env.log()
    assert "INFO  SIGHUP received — reloading the routines from " in log
    assert "INFO  routines updated: added new; removed gone" in log
    assert "keep.md: " in log
    assert "— keeping the version loaded before" in log
    assert proc.poll() is None  # still serving

    proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "reload: no routine changed" in env.log(), 20, "the second reload")
    assert stop(proc) == 0
    assert env.log().splitlines()[-1].endswith("Z INFO  stopped")
