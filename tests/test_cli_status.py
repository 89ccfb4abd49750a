"""``status`` against a real ``serve --http`` on loopback: its view, and the turns in flight;
and the replicas of a store that does not answer."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
from pg import schema_url
from procs import Env, in_process, one_line, stop, wait_for
from test_pinned_processes import bound_port, request

from trio_routines.cli import status as command
from trio_routines.cli.parser import build_parser
from trio_routines.testing.memory import MemoryStore

TOKEN = "status-token"


def status(
    env: Env, *args: str, token: str | None = TOKEN, here: bool = False
) -> subprocess.CompletedProcess[str]:
    """``status`` as an operator runs it against a server: from a directory with no routines
    and no state, with nothing but the URL (and the token); ``here``: in this process
    (:func:`procs.in_process`), for what it prints."""
    environ = env.environ()
    if token is not None:
        environ["TRIO_ROUTINES_TOKEN"] = token
    elsewhere = env.root / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    if here:
        return in_process(["status", *args], cwd=elsewhere, environ=environ)
    return subprocess.run(
        [sys.executable, "-m", "trio_routines", "status", *args],
        capture_output=True,
        text=True,
        env=environ,
        cwd=elsewhere,
        timeout=60,
    )


def serving(env: Env, grace: str) -> tuple[subprocess.Popen[bytes], int, str]:
    """``serve --http`` on a loopback port with a ``cmd:sleep 60`` agent and ``--grace``:
    the process, its port and its URL (its log in ``serve.log``)."""
    environ = {**env.environ(), "TRIO_ROUTINES_TOKEN": TOKEN}
    with (env.root / "serve.log").open("wb") as err:
        proc = subprocess.Popen(
            env.argv("serve", "--agent", "cmd:sleep 60", "--http", "127.0.0.1:0", "--grace", grace),
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=env.root,
            env=environ,
        )
    env.procs.append(proc)
    port = bound_port(env)
    return proc, port, f"http://127.0.0.1:{port}"


@pytest.fixture(params=["directory", "postgres"])
def shared_state(request: pytest.FixtureRequest, env: Env) -> Iterator[Env]:
    """``env`` with its state a state directory, or a fresh PostgreSQL schema."""
    if request.param == "directory":
        yield env
        return
    with schema_url() as url:
        env.state = url  # type: ignore[assignment]  # --state takes a URL as well as a path
        yield env


@pytest.mark.slow
def test_status_of_one_replica_shows_a_turn_that_another_runs(shared_state: Env) -> None:
    # A run on one replica: the other runs nothing and claims nothing, yet its listing and
    # `status --url` say the routine runs on a replica, as its `POST /run` says busy.
    env = shared_state
    env.routine("slow", prompt="take your time")
    environ = {"TRIO_ROUTINES_TOKEN": TOKEN}
    ports = []
    for name in ("one", "two"):
        env.start(
            "serve", "--agent", "cmd:sleep 60", "--http", "127.0.0.1:0", "--grace", "0",
            "--replica", name, log=f"{name}.log", extra=environ,
        )  # fmt: skip
        ports.append(bound_port(env, f"{name}.log"))
    one, two = ports
    started = request(one, "POST", "/run", {"name": "slow", "wait": False}, token=TOKEN)
    assert started[0] == 202
    wait_for(lambda: request(one, "GET", "/healthz")[1]["inFlight"] == 1, 20, "the turn")
    url = f"http://127.0.0.1:{two}"
    seen = status(env, "--url", url)
    assert seen.stdout.splitlines()[-1] == (
        f"IN FLIGHT  0 turns on {url}; running on any replica: slow"
    )
    listing = request(two, "GET", "/routines", token=TOKEN)[1]
    assert [(r["name"], r["running"]) for r in listing] == [("slow", True)]
    busy = request(two, "POST", "/run", {"name": "slow"}, token=TOKEN)[1]
    assert busy["ran"] is False
    for proc in env.procs:
        assert stop(proc) == 0


@pytest.mark.slow
def test_status_shows_the_turns_a_running_serve_has_in_flight(env: Env) -> None:
    env.routine("slow", prompt="take your time")
    env.routine("daily", cron="0 9 * * *")
    proc, port, url = serving(env, grace="0")

    idle = status(env, "--url", url)  # no routines directory, no state here: the server's
    assert idle.returncode == 0, idle.stderr
    assert idle.stdout.splitlines()[-1] == f"IN FLIGHT  0 turns on {url}"
    assert [line.split()[0] for line in idle.stdout.splitlines()[1:3]] == ["daily", "slow"]

    started = request(port, "POST", "/run", {"name": "slow", "wait": False}, token=TOKEN)
    assert started[0] == 202
    wait_for(lambda: request(port, "GET", "/healthz")[1]["inFlight"] == 1, 20, "the turn")
    busy = status(env, "--url", url)
    assert (
        busy.stdout.splitlines()[-1] == f"IN FLIGHT  1 turn on {url}; running on any replica: slow"
    )
    as_json = json.loads(status(env, "--url", url, "--json").stdout)
    assert as_json["server"] == {"url": url, "inFlight": 1, "running": ["slow"], "stopping": False}
    assert [r["name"] for r in as_json["routines"]] == ["daily", "slow"]
    assert [r["id"] for r in as_json["replicas"]] == [f"{socket.gethostname()}:{proc.pid}"]

    refused = status(env, "--url", url, token=None)  # GET /routines needs the token
    assert (refused.returncode, refused.stdout) == (1, "")
    assert one_line(refused.stderr) == (
        f"error: {url} answered 401: missing or wrong token: send Authorization: Bearer "
        "<TRIO_ROUTINES_TOKEN> — set TRIO_ROUTINES_TOKEN to the server's token\n"
    )

    assert stop(proc) == 0
    gone = status(env, "--url", url)
    assert (gone.returncode, gone.stdout) == (1, "")
    assert one_line(gone.stderr).startswith(f"error: {url}: no answer: ")
    assert "refused" in gone.stderr


@pytest.mark.slow
def test_status_says_a_server_that_drains_its_turns_is_stopping(env: Env) -> None:
    env.routine("slow", prompt="take your time")
    proc, port, url = serving(env, grace="60")  # the turn has its grace: the server drains it
    assert request(port, "POST", "/run", {"name": "slow", "wait": False}, token=TOKEN)[0] == 202
    wait_for(lambda: request(port, "GET", "/healthz")[1]["inFlight"] == 1, 20, "the turn")

    proc.send_signal(signal.SIGTERM)
    wait_for(lambda: request(port, "GET", "/healthz")[1]["stopping"], 20, "the stop")
    draining = status(env, "--url", url)
    assert draining.returncode == 0, draining.stderr
    assert draining.stdout.splitlines()[-1] == (
        f"IN FLIGHT  1 turn on {url} (stopping: it starts no new turns); "
        "running on any replica: slow"
    )
    as_json = json.loads(status(env, "--url", url, "--json").stdout)
    assert as_json["server"] == {"url": url, "inFlight": 1, "running": ["slow"], "stopping": True}
    assert stop(proc) == 0  # a second stop ends the turn now: a stop asked for is no failure
    assert "slow interrupted" in (env.root / "serve.log").read_text()


def test_status_without_a_server_says_so(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    result = env.run_cli("status")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == (
        "IN FLIGHT  - (no server asked: pass --url or set TRIO_ROUTINES_URL)"
    )
    assert json.loads(env.run_cli("status", "--json").stdout)["server"] is None


@pytest.mark.slow
def test_a_server_that_never_answers_costs_a_bounded_wait(env: Env) -> None:
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        result = status(env, "--url", url)
    assert (result.returncode, result.stdout) == (1, "")
    assert one_line(result.stderr).startswith(f"error: {url}: no answer")
    assert "timed out" in result.stderr or "within 10s" in result.stderr


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "127.0.0.1:8080", "http://", "http://h:99999"]
)
def test_a_url_that_is_no_http_server_address_is_a_usage_error(env: Env, url: str) -> None:
    env.routine("daily", cron="0 9 * * *")
    result = status(env, "--url", url, here=True)
    assert (result.returncode, result.stdout) == (2, "")
    assert "argument --url" in one_line(result.stderr)
    environ = {**env.environ(), "TRIO_ROUTINES_URL": url}
    from_env = in_process(env.argv("status")[3:], cwd=env.root, environ=environ)
    assert from_env.returncode == 2
    assert one_line(from_env.stderr).startswith("error: TRIO_ROUTINES_URL: ")


async def test_replicas_that_do_not_answer_in_time_are_said_to_give_no_answer(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A read cut off by its bound has no text of its own: the line says why instead."""
    monkeypatch.delenv("TRIO_ROUTINES_URL", raising=False)
    monkeypatch.setattr(command, "STORE_READ", 0.05)
    env.routine("adhoc")
    env.state.mkdir()  # a state there (else that is said first)
    store = MemoryStore()
    store.hang("replicas")

    @asynccontextmanager
    async def open_state(state: str, **_: object) -> AsyncIterator[MemoryStore]:
        yield store

    monkeypatch.setattr(command, "open_state", open_state)
    args = ["status", "--state", str(env.state), "--routines", str(env.routines)]
    assert await command.cmd_status(build_parser().parse_args(args)) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[-3] == "(no live replica)"
    assert err == "the replicas are unreadable: no answer\n"
