"""Real processes: kills during wake-up turns, SIGINT and a second signal, ``serve --http``.

Each test was checked to fail with its behaviour broken by hand. Waits are bounded polls;
no test asserts how long something took.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from procs import Env, alive, lines, stop, wait_for, years_ago

from trio_routines.instants import format_iso, parse_iso

pytestmark = pytest.mark.slow

# The victim's turn hangs until killed; any other session's turn ends at once.
AGENT = (
    'cmd:echo "$TRIO_ROUTINES_SESSION $$" >> {marker}; '
    'if [ "$TRIO_ROUTINES_SESSION" = victim ]; then sleep 60; fi'
)


def past() -> str:
    return format_iso(datetime.now(UTC) - timedelta(minutes=5))


def sessions(env: Env) -> list[str]:
    return [line.split()[0] for line in lines(env.marker)]


def kill_mid_turn(env: Env) -> None:
    """Start serve, wait for the victim's turn, SIGKILL serve: the turn dies with it."""
    proc = env.start("serve", "--agent", AGENT.format(marker=env.marker))
    victim = wait_for(lambda: [x for x in lines(env.marker) if x.startswith("victim ")], 20)
    pid = int(victim[0].split()[1])
    try:
        assert stop(proc, signal.SIGKILL) == -signal.SIGKILL
        wait_for(lambda: not alive(pid), 10, "the turn to die with serve")
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def restart_with_a_control_wake_up(env: Env) -> None:
    """Serve again until a fresh due wake-up has fired: that drain saw every due entry."""
    control = {"id": "control-1", "session": "control", "prompt": "p", "fireAt": past()}
    env.write_wakeups([*env.wakeups(), control])
    proc = env.start("serve", "--agent", AGENT.format(marker=env.marker), log="second.log")
    wait_for(lambda: "control" in sessions(env), 20, "the control wake-up to fire")
    assert stop(proc) == 0


def test_a_one_shot_killed_mid_turn_is_gone_and_never_replayed(env: Env) -> None:
    env.write_wakeups([{"id": "victim-1", "session": "victim", "prompt": "p", "fireAt": past()}])
    kill_mid_turn(env)
    assert env.wakeups() == []  # taken before its turn started: at most once
    restart_with_a_control_wake_up(env)
    assert sessions(env) == ["victim", "control"]
    assert env.wakeups() == []
    assert "victim" not in env.log("second.log")


def test_a_recurring_wake_up_killed_mid_turn_keeps_its_next_occurrence(env: Env) -> None:
    added = env.cli("wake", "--session", "victim", "--cron", "0 0 1 1 *", "--prompt", "p", "--json")
    assert added.returncode == 0, added.stderr
    (entry,) = env.wakeups()
    env.write_wakeups([{**entry, "fireAt": past()}])
    kill_mid_turn(env)
    (after,) = env.wakeups()
    # Advanced before the turn started: the occurrence that ran is not pending any more.
    next_year = datetime(datetime.now(UTC).year + 1, 1, 1, tzinfo=UTC)
    assert (after["id"], after["cron"]) == (entry["id"], "0 0 1 1 *")
    assert parse_iso(after["fireAt"]) == next_year
    restart_with_a_control_wake_up(env)
    assert sessions(env) == ["victim", "control"]
    assert [w["id"] for w in env.wakeups()] == [entry["id"]]


def test_sigint_stops_with_the_grace_and_a_second_signal_stops_at_once(env: Env) -> None:
    env.routine("yearly", cron="0 0 1 1 *")
    env.seed("yearly", years_ago(2))  # the boot catches up one slot at once
    agent = f"cmd:sleep 60 & echo $! >> {env.marker}; wait"
    proc = env.start("serve", "--grace", "120", "--agent", agent)
    (pid,) = wait_for(lambda: lines(env.marker), 20, "the turn to start")
    try:
        proc.send_signal(signal.SIGINT)
        wait_for(lambda: "SIGINT received — stopping;" in env.log(), 20, "the first SIGINT")
        assert "in-flight turns get 120s to finish" in env.log()
        assert proc.poll() is None  # the turn has its grace: nothing is cut yet
        assert "outcome" not in env.claims("yearly")[1]
        proc.send_signal(signal.SIGINT)
        # Well before the 120 s grace: the second signal does not wait for it.
        assert proc.wait(timeout=30) == 0
        log = env.log()
        assert "SIGINT received — stopping now" in log
        assert "Traceback" not in log
        _, fire = env.claims("yearly")
        assert fire["outcome"] == "interrupted"
        wait_for(lambda: not alive(int(pid)), 5, "the command's grandchild to exit")
    finally:
        if alive(int(pid)):
            os.kill(int(pid), signal.SIGKILL)


def test_a_second_signal_of_another_kind_stops_at_once_too(env: Env) -> None:
    env.routine("yearly", cron="0 0 1 1 *")
    env.seed("yearly", years_ago(2))
    agent = f"cmd:sleep 60 & echo $! >> {env.marker}; wait"
    proc = env.start("serve", "--grace", "120", "--agent", agent)
    (pid,) = wait_for(lambda: lines(env.marker), 20, "the turn to start")
    try:
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: "SIGTERM received — stopping;" in env.log(), 20, "the SIGTERM")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert "SIGINT received — stopping now" in env.log()
        assert env.claims("yearly")[1]["outcome"] == "interrupted"
    finally:
        if alive(int(pid)):
            os.kill(int(pid), signal.SIGKILL)


# -- serve --http, end to end ----------------------------------------------------------------


def request(
    port: int, method: str, path: str, body: Any = None, token: str | None = None
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as answer:
            status, raw = answer.status, answer.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    text = raw.decode()
    try:
        return status, json.loads(text)
    except json.JSONDecodeError:
        return status, text


def bound_port(env: Env, log: str = "serve.log") -> int:
    bound = re.compile(r"HTTP surface on http://127\.0\.0\.1:(\d+)")
    found = wait_for(lambda: bound.search(env.log(log)), 20, f"the HTTP bind ({log})")
    return int(found.group(1))


def test_serve_http_answers_real_requests_and_stops_on_sigterm(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    agent = f'cmd:echo "$TRIO_ROUTINES_SLOT" >> {env.marker}; echo done'
    proc = env.start("serve", "--agent", agent, "--http", "127.0.0.1:0")
    port = bound_port(env)

    assert request(port, "GET", "/healthz") == (
        200,
        {"status": "ok", "inFlight": 0, "stopping": False},
    )
    status, routines = request(port, "GET", "/routines")
    assert status == 200
    assert [r["name"] for r in routines] == ["daily"]

    slot = "2026-07-07T09:00:00.000Z"
    status, fired = request(port, "POST", "/fire", {"name": "daily", "slot": slot, "wait": True})
    assert status == 200
    assert (fired["claimed"], fired["outcome"]) == (True, "completed")
    assert lines(env.marker) == [slot]
    status, again = request(port, "POST", "/fire", {"name": "daily", "slot": slot})
    assert (status, again["claimed"], again["reason"]) == (200, False, "duplicate")
    status, history = request(port, "GET", "/routines/daily/history")
    assert status == 200
    assert [(f["slot"], f["outcome"]) for f in history] == [(slot, "completed")]

    status, metrics = request(port, "GET", "/metrics")
    assert status == 200
    assert 'outcome="completed"' in metrics
    assert request(port, "GET", "/nowhere")[0] == 404

    assert stop(proc) == 0
    with pytest.raises(urllib.error.URLError, match="refused"):
        request(port, "GET", "/healthz")
    assert env.history("daily")[0]["outcome"] == "completed"  # the same state, on disk


def test_serve_http_with_a_token_refuses_requests_without_it(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    environ = env.environ()
    environ["TRIO_ROUTINES_TOKEN"] = "s3cret-token"
    with (env.root / "serve.log").open("wb") as err:
        proc = subprocess.Popen(
            env.argv("serve", "--agent", "echo", "--http", "127.0.0.1:0"),
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=env.root,
            env=environ,
        )
    env.procs.append(proc)
    port = bound_port(env)
    status, _ = request(port, "GET", "/routines")
    assert status == 401
    status, routines = request(port, "GET", "/routines", token="s3cret-token")
    assert status == 200
    assert [r["name"] for r in routines] == ["daily"]
    assert request(port, "GET", "/routines", token="wrong-token")[0] == 401
    assert stop(proc) == 0
    assert "s3cret-token" not in env.log()
