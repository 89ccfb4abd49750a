"""The command line's defaults, pinned with commands run without the options.

``--state`` defaults to ``$TRIO_ROUTINES_STATE``, else ``.state``; ``--routines`` defaults to
``routines``; both relative to the working directory. Each command runs in this process as
``python -m trio_routines`` would (``procs.in_process``: its own working directory and
environment), which is what these defaults are read from.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from procs import Env, in_process

SLOT = "2026-07-07T09:00:00.000Z"
CLAIM = "2026-07-07T09-00-00-000Z"


def run(env: Env, *args: str, state: str | None = None) -> subprocess.CompletedProcess[str]:
    environ = env.environ()
    if state is not None:
        environ["TRIO_ROUTINES_STATE"] = state
    return in_process(list(args), cwd=env.root, environ=environ)


def claims(root: Path) -> list[str]:
    directory = root / "schedule" / "claims" / "daily"
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def test_without_options_routines_come_from_routines_and_state_goes_to_dot_state(
    env: Env,
) -> None:
    env.routine("daily", cron="0 9 * * *")  # written into <cwd>/routines
    result = run(env, "fire", "daily", "--slot", SLOT, "--agent", "echo", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["outcome"] == "completed"
    assert claims(env.root / ".state") == [CLAIM]
    assert not env.state.exists()  # the fixture's own state directory stays unused
    listed = run(env, "list")
    assert listed.returncode == 0, listed.stderr
    (row,) = [line for line in listed.stdout.splitlines() if line.startswith("daily ")]
    assert "completed" in row  # the fire, read back from .state


def test_the_environment_names_the_state_when_no_option_does(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    result = run(env, "fire", "daily", "--slot", SLOT, "--agent", "echo", state="from-env")
    assert result.returncode == 0, result.stderr
    assert claims(env.root / "from-env") == [CLAIM]
    assert not (env.root / ".state").exists()
    given = run(
        env, "fire", "daily", "--slot", SLOT, "--agent", "echo", "--state", "given",
        state="from-env",
    )  # fmt: skip
    assert given.returncode == 0, given.stderr
    assert claims(env.root / "given") == [CLAIM]


def test_another_routines_directory_replaces_the_default(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    (env.root / "other").mkdir()
    result = run(env, "list", "--routines", "other")
    assert result.returncode == 0, result.stderr
    assert "daily" not in result.stdout
