"""examples/deploy: the systemd units, the Prometheus alert rules and scrape configuration are
valid and mean it.

``systemd-analyze verify`` checks both units (a state directory, and PostgreSQL), ``promtool``
checks the rules, runs their unit tests (``alerts_test.yml``: each alert fires on the series
trio_routines exports) and checks the scrape configuration. .ci/run installs both from
Debian's packages, so in CI neither check can be skipped.
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
PG_UNIT = DEPLOY / "trio-routines-postgres.service"
UNITS = [UNIT, PG_UNIT]
SCRIPT = Path(sys.executable).parent / "trio-routines"


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing: .ci/run installs it")
        pytest.skip(f"{name} is not installed here (CI installs it)")
    return found


def unit(path: Path = UNIT) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(path)
    return parser


@pytest.mark.parametrize("path", UNITS, ids=[u.name for u in UNITS])
def test_the_unit_verifies_with_systemd_analyze(tmp_path: Path, path: Path) -> None:
    verify = tool("systemd-analyze")
    # The unit names /opt/trio-routines/venv; verify checks that ExecStart exists, so point it
    # at the console script this test runs with.
    text = path.read_text().replace("/opt/trio-routines/venv/bin/trio-routines", str(SCRIPT))
    copy = tmp_path / path.name
    copy.write_text(text)
    done = subprocess.run(
        [verify, "verify", str(copy)], capture_output=True, text=True, timeout=120, check=False
    )
    # Unknown or bad values are only warnings: the unit must produce none.
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


@pytest.mark.parametrize("path", UNITS, ids=[u.name for u in UNITS])
def test_the_unit_is_hardened_and_outlasts_the_grace(path: Path) -> None:
    service = unit(path)["Service"]
    assert service["DynamicUser"] == "yes"
    assert service["ProtectSystem"] == "strict"
    assert service["Restart"] == "on-failure"
    assert service["RestartForceExitStatus"] == "SIGHUP"  # a reload before serve's handler
    assert service["RestartPreventExitStatus"] == "2"  # a usage error: restarting repeats it
    assert int(service["LimitNOFILE"]) >= 8192  # half for connections, half for the rest
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert service["KillMode"] == "mixed"  # the agents' groups are serve's to end, in the grace
    grace = float(re.search(r"--grace (\S+)", service["ExecStart"])[1])  # type: ignore[index]
    assert float(service["TimeoutStopSec"]) > grace + 5
    assert " serve " in service["ExecStart"]


def test_the_directory_unit_keeps_its_state_in_the_state_directory() -> None:
    service = unit()["Service"]
    assert service["StateDirectory"] == "trio-routines"
    assert service["Environment"] == "TRIO_ROUTINES_STATE=/var/lib/trio-routines"


def test_the_postgresql_unit_starts_after_the_database_and_installs_the_driver() -> None:
    parsed = unit(PG_UNIT)
    for key in ("After", "Wants"):
        assert "postgresql.service" in parsed["Unit"][key].split()
        assert "network-online.target" in parsed["Unit"][key].split()
    service = parsed["Service"]
    assert "StateDirectory" not in service  # the state is the database
    assert "Environment" not in service  # its URL, with the password, is in the env file only
    assert service["EnvironmentFile"] == "/etc/trio-routines/env"  # required: no state without
    text = PG_UNIT.read_text()
    assert "pip install 'trio-routines[http,postgres]'" in text
    assert "TRIO_ROUTINES_STATE=postgresql://" in text
    # Everything but where the state lives is the directory unit's, hardening included.
    keep = {
        k: v
        for k, v in unit()["Service"].items()
        if k not in ("StateDirectory", "WorkingDirectory", "Environment", "EnvironmentFile")
    }
    assert {k: v for k, v in service.items() if k != "EnvironmentFile"} == keep


def test_the_scrape_configuration_checks_with_promtool(tmp_path: Path) -> None:
    promtool = tool("promtool")
    # promtool checks that the token file exists: point it at one of ours.
    token = tmp_path / "trio-routines.token"
    token.write_text("a-token\n")
    text = (DEPLOY / "prometheus.yml").read_text()
    assert "credentials_file: /etc/prometheus/trio-routines.token" in text
    (tmp_path / "prometheus.yml").write_text(
        text.replace("/etc/prometheus/trio-routines.token", str(token))
    )
    shutil.copy(DEPLOY / "alerts.yml", tmp_path / "alerts.yml")
    done = subprocess.run(
        [promtool, "check", "config", "prometheus.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_scrape_configuration_sends_the_token_to_metrics() -> None:
    text = (DEPLOY / "prometheus.yml").read_text()
    assert re.search(r"metrics_path: /metrics\n", text)
    assert re.search(r"authorization:\n\s+type: Bearer\n\s+credentials_file: ", text)
    assert "alerts.yml" in text


@pytest.mark.slow  # two promtool processes: seconds
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
        "trio_routines_routine_files_broken",
        "trio_routines_pending_wakeups",
        "trio_routines_over_budget_total",
    ):
        assert name in used
