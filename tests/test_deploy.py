"""examples/deploy: the systemd unit and the Prometheus alert rules are valid and mean it.

``systemd-analyze verify`` checks the unit, ``promtool`` checks the rules and runs their unit
tests (``alerts_test.yml``: each alert fires on the series trio_routines exports). .ci/run
installs both from Debian's packages, so in CI neither check can be skipped.
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trio_routines import Routine, Scheduler
from trio_routines.testing import MemoryStore, ScriptedAgent

DEPLOY = Path(__file__).resolve().parent.parent / "examples" / "deploy"
UNIT = DEPLOY / "trio-routines.service"
SCRIPT = Path(sys.executable).parent / "trio-routines"


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing: .ci/run installs it")
        pytest.skip(f"{name} is not installed here (CI installs it)")
    return found


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNIT)
    return parser


def test_the_unit_verifies_with_systemd_analyze(tmp_path: Path) -> None:
    verify = tool("systemd-analyze")
    # The unit names /opt/trio-routines/venv; verify checks that ExecStart exists, so point it
    # at the console script this test runs with.
    text = UNIT.read_text().replace("/opt/trio-routines/venv/bin/trio-routines", str(SCRIPT))
    copy = tmp_path / "trio-routines.service"
    copy.write_text(text)
    done = subprocess.run(
        [verify, "verify", str(copy)], capture_output=True, text=True, timeout=120, check=False
    )
    # Unknown or bad values are only warnings: the unit must produce none.
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_the_unit_is_hardened_and_outlasts_the_grace() -> None:
    service = unit()["Service"]
    assert service["DynamicUser"] == "yes"
    assert service["StateDirectory"] == "trio-routines"
    assert service["ProtectSystem"] == "strict"
    assert service["Restart"] == "on-failure"
    assert service["RestartForceExitStatus"] == "SIGHUP"  # a reload before serve's handler
    assert int(service["LimitNOFILE"]) >= 8192  # half for connections, half for the rest
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert service["KillMode"] == "mixed"  # the agents' groups are serve's to end, in the grace
    grace = float(re.search(r"--grace (\S+)", service["ExecStart"])[1])  # type: ignore[index]
    assert float(service["TimeoutStopSec"]) > grace + 5
    assert " serve " in service["ExecStart"]


def test_the_alert_rules_check_and_fire_with_promtool() -> None:
    promtool = tool("promtool")
    for argv in (["check", "rules", "alerts.yml"], ["test", "rules", "alerts_test.yml"]):
        done = subprocess.run(
            [promtool, *argv], cwd=DEPLOY, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "SUCCESS" in done.stdout


def test_the_alert_rules_use_series_we_export() -> None:
    scheduler = Scheduler(
        agent=ScriptedAgent(), store=MemoryStore(), routines=[Routine(name="x", prompt="p")]
    )
    names = set()
    for family in scheduler.metric_families():
        names |= {sample.name for sample in family.samples}
        names.add(family.name + ("_total" if family.kind == "counter" else ""))
    used = set(re.findall(r"\btrio_routines_\w+", (DEPLOY / "alerts.yml").read_text()))
    assert used
    assert used <= names, used - names
    for name in (
        "trio_routines_last_success_timestamp_seconds",
        "trio_routines_next_fire_timestamp_seconds",
        "trio_routines_consecutive_failures",
        "trio_routines_slots_missed_total",
        "trio_routines_routine_paused",
        "trio_routines_routine_files_kept_broken",
        "trio_routines_pending_wakeups",
    ):
        assert name in used
