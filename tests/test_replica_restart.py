"""A replica killed mid-turn and started again under its id, on PostgreSQL: the session of the
turn it was running is free for the new process (real processes, the real server)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from pg import schema_url
from procs import Env, lines, wait_for


@pytest.mark.slow
def test_a_replica_started_again_under_its_id_finds_the_killed_ones_session_free(
    tmp_path: Path,
) -> None:
    with schema_url() as state:
        env = Env(tmp_path)
        env.state = state  # type: ignore[assignment]  # --state takes a URL as well as a path
        env.routine("big", prompt="think")
        first = env.start(
            "run",
            "big",
            "--replica",
            "web:1",
            "--agent",
            f"cmd:echo first >> {env.marker}; sleep 60",
        )
        try:
            wait_for(lambda: lines(env.marker) == ["first"], 30, "the first turn to start")
            first.send_signal(signal.SIGKILL)  # mid-turn: its holds' rows stay behind
            first.wait(30)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
        # The same id again (a fixed --replica, or a container's host:1): the dead process's
        # rows name our own lock now; they must not read as a turn still running.
        again = env.cli(
            "run", "big", "--replica", "web:1", "--agent", f"cmd:echo second >> {env.marker}"
        )
        assert again.returncode == 0, again.stderr
        assert "session busy" not in again.stderr
        assert lines(env.marker) == ["first", "second"]
