"""``status`` against a real ``serve --http`` on loopback: the turns it has in flight."""

from __future__ import annotations

import json
import socket
import subprocess

import pytest
from procs import Env, one_line, stop, wait_for
from test_pinned_processes import bound_port, request

TOKEN = "status-token"


def status(env: Env, *args: str, token: str | None = TOKEN) -> subprocess.CompletedProcess[str]:
    environ = env.environ()
    if token is not None:
        environ["TRIO_ROUTINES_TOKEN"] = token
    return subprocess.run(
        env.argv("status", *args),
        capture_output=True,
        text=True,
        env=environ,
        cwd=env.root,
        timeout=60,
    )


@pytest.mark.slow
def test_status_shows_the_turns_a_running_serve_has_in_flight(env: Env) -> None:
    env.routine("slow", prompt="take your time")
    env.routine("daily", cron="0 9 * * *")
    environ = {**env.environ(), "TRIO_ROUTINES_TOKEN": TOKEN}
    with (env.root / "serve.log").open("wb") as err:
        proc = subprocess.Popen(
            env.argv("serve", "--agent", "cmd:sleep 60", "--http", "127.0.0.1:0", "--grace", "0"),
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=env.root,
            env=environ,
        )
    env.procs.append(proc)
    port = bound_port(env)
    url = f"http://127.0.0.1:{port}"

    idle = status(env, "--url", url)
    assert idle.returncode == 0, idle.stderr
    assert idle.stdout.splitlines()[-1] == f"IN FLIGHT  0 turns ({url})"

    started = request(port, "POST", "/run", {"name": "slow", "wait": False}, token=TOKEN)
    assert started[0] == 202
    wait_for(lambda: request(port, "GET", "/healthz")[1]["inFlight"] == 1, 20, "the turn")
    busy = status(env, "--url", url)
    assert busy.stdout.splitlines()[-1] == f"IN FLIGHT  1 turn ({url}): slow"
    as_json = json.loads(status(env, "--url", url, "--json").stdout)
    assert as_json["server"] == {"url": url, "inFlight": 1, "running": ["slow"]}
    assert [r["name"] for r in as_json["routines"]] == ["daily", "slow"]

    refused = status(env, "--url", url, token=None)  # GET /routines needs the token
    assert refused.stdout.splitlines()[-1] == (
        f"IN FLIGHT  - ({url}: answered 401 Unauthorized — set TRIO_ROUTINES_TOKEN to the "
        "server's token)"
    )

    assert stop(proc) == 0
    gone = status(env, "--url", url)
    assert gone.returncode == 0
    last = gone.stdout.splitlines()[-1]
    assert last.startswith(f"IN FLIGHT  - ({url}: no answer: ")
    assert "refused" in last


def test_status_without_a_server_says_so(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    result = status(env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == (
        "IN FLIGHT  - (no server asked: pass --url or set TRIO_ROUTINES_URL)"
    )
    assert json.loads(status(env, "--json").stdout)["server"] is None


@pytest.mark.slow
def test_a_server_that_never_answers_costs_a_bounded_wait(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        result = status(env, "--url", url)
    assert result.returncode == 0, result.stderr
    last = result.stdout.splitlines()[-1]
    assert last.startswith(f"IN FLIGHT  - ({url}: no answer")
    assert "timed out" in last or "within 3s" in last


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "127.0.0.1:8080", "http://", "http://h:99999"]
)
def test_a_url_that_is_no_http_server_address_is_a_usage_error(env: Env, url: str) -> None:
    env.routine("daily", cron="0 9 * * *")
    result = status(env, "--url", url)
    assert (result.returncode, result.stdout) == (2, "")
    assert "argument --url" in one_line(result.stderr)
    environ = {**env.environ(), "TRIO_ROUTINES_URL": url}
    from_env = subprocess.run(
        env.argv("status"), capture_output=True, text=True, env=environ, cwd=env.root, timeout=60
    )
    assert from_env.returncode == 2
    assert one_line(from_env.stderr).startswith("error: TRIO_ROUTINES_URL: ")
