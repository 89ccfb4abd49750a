"""`pause` and `resume` as real processes, honoured by `fire` on the same state."""

from __future__ import annotations

import pytest
from procs import Env, one_line


@pytest.mark.slow
def test_pause_and_resume_from_the_command_line(env: Env) -> None:
    env.state.mkdir()  # a state some scheduler made
    env.routine("daily", cron="0 9 * * *")
    paused = env.cli("pause", "daily")
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.startswith("daily paused — no scheduler on this state claims its slots")
    assert (env.state / "schedule" / "paused" / "daily").is_file()

    fired = env.cli("fire", "daily", "--slot", "2026-07-07T09:00Z", "--agent", "echo")
    assert fired.returncode == 0, fired.stderr
    assert fired.stdout == "daily 2026-07-07T09:00:00.000Z: not claimed (paused)\n"
    assert env.history("daily") == []

    resumed = env.cli("resume", "daily")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("daily resumed — it fires from its next slot")
    assert not (env.state / "schedule" / "paused" / "daily").exists()
    again = env.cli("resume", "daily")
    assert (again.returncode, again.stdout) == (0, "daily was not paused\n")

    unknown = env.cli("pause", "nope")
    assert unknown.returncode == 1
    assert one_line(unknown.stderr).startswith('error: unknown routine "nope"')
