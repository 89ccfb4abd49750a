"""Every state command against a running ``serve`` (``--url``), and none against a state
directory another user owns.

The commands run as an operator runs them against a service: from a directory with no routines
and no state, with nothing but the URL and the token; what they change, the server changes
(its state shows it).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from procs import Env, in_process, one_line, stop, wait_for
from test_pinned_processes import bound_port, request

from trio_routines.cli import main

TOKEN = "remote-token"


def remote(
    env: Env, *args: str, token: str | None = TOKEN, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    environ = env.environ()
    if token is not None:
        environ["TRIO_ROUTINES_TOKEN"] = token
    elsewhere = env.root / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "trio_routines", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=environ,
        cwd=elsewhere,
        timeout=60,
    )


@pytest.mark.slow
def test_every_state_command_works_over_http(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    env.routine("adhoc", prompt="say hi")
    environ = {**env.environ(), "TRIO_ROUTINES_TOKEN": TOKEN}
    proc = env.start(
        "serve", "--agent", "echo", "--http", "127.0.0.1:0", extra={"TRIO_ROUTINES_TOKEN": TOKEN}
    )
    port = bound_port(env)
    url = f"http://127.0.0.1:{port}"

    def ok(*args: str, stdin: str | None = None) -> str:
        done = remote(env, *args, "--url", url, stdin=stdin)
        assert done.returncode == 0, done.stderr
        return done.stdout

    # history: empty for a routine the server has; an error for one it has not.
    assert ok("history", "daily") == ""
    unknown = remote(env, "history", "nosuch", "--url", url)
    assert (unknown.returncode, unknown.stdout) == (1, "")
    assert one_line(unknown.stderr).startswith(
        f'error: {url} answered 404: no routine named "nosuch"'
    )

    # pause and resume: the server's state holds it.
    assert ok("pause", "daily").startswith("daily paused")
    assert request(port, "GET", "/routines", token=TOKEN)[1][1]["paused"] is True
    assert json.loads(ok("list", "--json"))["routines"][1]["paused"] is True
    assert ok("resume", "daily").startswith("daily resumed")
    assert request(port, "GET", "/routines", token=TOKEN)[1][1]["paused"] is False

    # fire: claimed, run and settled by the server; a second time a duplicate.
    slot = "2026-07-07T09:00:00.000Z"
    # The turn's length is the server's real time: its figure is not checked.
    fired_line = ok("fire", "daily", "--slot", slot)
    assert re.fullmatch(rf"daily {re.escape(slot)}: completed \(\d+ms\)\n", fired_line)
    again = json.loads(ok("fire", "daily", "--slot", slot, "--json"))
    assert (again["claimed"], again["reason"]) == (False, "duplicate")
    off_grid = remote(env, "fire", "daily", "--slot", "2026-07-07T09:01Z", "--url", url)
    assert off_grid.returncode == 1
    assert "is not on the cron grid" in off_grid.stderr
    (fired,) = json.loads(ok("history", "daily", "--json"))
    assert (fired["slot"], fired["outcome"]) == (slot, "completed")
    row = ok("history", "daily").splitlines()[1].split()
    assert (row[0], row[1], row[3]) == ("2026-07-07T09:00Z", fired["firedAt"], "completed")

    # run: the server's agent answers; the reply is printed.
    assert ok("run", "adhoc") == "say hi\n"

    # wake, list, unwake: the server's wake-ups.
    added = json.loads(
        ok("wake", "--session", "chat:1", "--in", "30m", "--prompt", "-", "--json", stdin="ping")
    )
    assert "prompt" not in added  # the server shows no prompt
    assert added["origin"] == {"kind": "http", "depth": 0}  # the server records http
    (pending,) = request(port, "GET", "/wakeups?session=chat:1", token=TOKEN)[1]
    assert pending["id"] == added["id"]
    listed = ok("list")
    assert added["id"] in listed
    assert "(not shown over HTTP)" in listed
    assert "  http  " in listed
    assert ok("unwake", added["id"], "--session", "chat:1") == f"wake-up {added['id']} cancelled\n"
    assert request(port, "GET", "/wakeups", token=TOKEN)[1] == []
    gone = remote(env, "unwake", added["id"], "--session", "chat:1", "--url", url)
    assert gone.returncode == 1
    assert "no pending wake-up" in gone.stderr
    refused = remote(
        env, "wake", "--session", "chat:1", "--in", "5s", "--prompt", "x", "--url", url
    )
    assert refused.returncode == 1
    assert one_line(refused.stderr).startswith("error: wake-up refused: ")

    # Without the token: refused by the server, nothing changed.
    anonymous = remote(env, "pause", "daily", "--url", url, token=None)
    assert (anonymous.returncode, anonymous.stdout) == (1, "")
    assert "answered 401" in anonymous.stderr
    assert "set TRIO_ROUTINES_TOKEN" in anonymous.stderr
    assert request(port, "GET", "/routines", token=TOKEN)[1][1]["paused"] is False

    # $TRIO_ROUTINES_URL stands for --url.
    environ["TRIO_ROUTINES_URL"] = url
    from_env = subprocess.run(
        [sys.executable, "-m", "trio_routines", "history", "daily", "--json"],
        capture_output=True,
        text=True,
        env=environ,
        cwd=env.root / "elsewhere",
        timeout=60,
    )
    assert from_env.returncode == 0, from_env.stderr
    assert json.loads(from_env.stdout)[0]["slot"] == slot
    assert stop(proc) == 0


@pytest.mark.parametrize("option", ["--state", "--agent", "--routines"])
@pytest.mark.parametrize("before", [False, True])
def test_state_agent_or_routines_with_a_url_is_a_usage_error(
    tmp_path: Path, option: str, before: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    # The server uses its own: --routines, which has a default, was ignored without a word.
    given = [option, str(tmp_path)]
    command = ["status", "--url", "http://127.0.0.1:9"]
    code = main(given + command if before else command + given)
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {option} is for working on the state itself; with --url")
    assert list(tmp_path.iterdir()) == []


WRITING = [
    ["pause", "daily"],
    ["resume", "daily"],
    ["fire", "daily", "--slot", "2026-07-07T09:00Z", "--agent", "echo"],
    ["run", "daily", "--agent", "echo"],
    ["wake", "--session", "s", "--in", "30m", "--prompt", "p"],
    ["unwake", "some-id", "--session", "s"],
    ["serve", "--agent", "echo"],
]


@pytest.mark.parametrize("argv", WRITING, ids=[a[0] for a in WRITING])
def test_a_state_directory_another_user_owns_is_never_written(
    env: Env, argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env.routine("daily", cron="0 9 * * *")
    env.state.mkdir()
    owner = env.state.stat().st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)  # we are someone else
    code = main([*argv, "--state", str(env.state), "--routines", str(env.routines)])
    assert code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: {argv[0]} refused: the state directory {env.state} belongs to ")
    assert "nothing was changed" in err
    if argv[0] != "serve":
        assert "--url URL" in err
    assert list(env.state.iterdir()) == []


def test_reading_a_state_directory_another_user_owns_is_allowed(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env.routine("daily", cron="0 9 * * *")
    env.state.mkdir()
    owner = env.state.stat().st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    common = ["--state", str(env.state), "--routines", str(env.routines)]
    assert main(["list", *common]) == 0
    assert main(["history", "daily", *common]) == 0
    assert main(["status", *common]) == 0
    capsys.readouterr()
    assert list(env.state.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
@pytest.mark.parametrize("routines", [True, False])
def test_root_pausing_a_service_users_state_creates_nothing(env: Env, routines: bool) -> None:
    # Refused before the routines are looked for: the service's may be where we are not.
    if routines:
        env.routine("daily", cron="0 9 * * *")
    env.state.mkdir()
    os.chown(env.state, 61234, 61234)  # a DynamicUser= uid, with no name here
    done = env.run_cli("pause", "daily")
    assert (done.returncode, done.stdout) == (1, "")
    assert one_line(done.stderr) == (
        f"error: pause refused: the state directory {env.state} belongs to uid 61234, not to "
        "root (uid 0), and the service could not change what pause wrote there — send it to "
        "the running service with --url URL, or run it as uid 61234; nothing was changed\n"
    )
    assert list(env.state.iterdir()) == []


@pytest.mark.parametrize("waits", [False, True])
async def test_a_server_that_never_answers_is_given_up_at_our_bound(
    waits: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    import trio

    from trio_routines.cli import client
    from trio_routines.cli.output import CliError

    monkeypatch.setattr(client, "TURN_WAIT" if waits else "ASK_TIMEOUT", 0.5)
    with socket.socket() as listener:  # accepts (the kernel's backlog), never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        server = client.Server(f"http://127.0.0.1:{port}", token=None)
        with trio.fail_after(30):  # a bound for the test itself, not a measurement
            with pytest.raises(CliError, match=r"no answer within 0\.5s") as caught:
                await server.call("POST", "/fire", {"name": "x"}, waits=waits)
    assert ("history" in str(caught.value)) is waits


@pytest.mark.parametrize("listing", ["daily", {"daily": {}}, [["daily"]]])
def test_a_listing_that_is_no_list_of_routines_is_one_line_not_a_traceback(
    env: Env, monkeypatch: pytest.MonkeyPatch, listing: object
) -> None:
    from trio_routines.cli.client import Server

    async def get(_server: Server, path: str) -> object:
        return listing if path == "/routines" else []

    monkeypatch.setattr(Server, "get", get)
    for command in ("list", "status"):
        argv = [command, "--url", "http://127.0.0.1:9"]
        done = in_process(argv, cwd=env.root, environ=env.environ())
        assert (done.returncode, done.stdout) == (1, "")
        assert one_line(done.stderr).startswith(
            "error: http://127.0.0.1:9: the answer is not a trio_routines server's ("
        )


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_is_not_followed_and_the_token_stays_home(env: Env, code: int) -> None:
    import http.server
    import threading

    reached: list[tuple[str, str, str | None]] = []

    class Elsewhere(http.server.BaseHTTPRequestHandler):
        def answer(self) -> None:
            reached.append((self.command, self.path, self.headers.get("Authorization")))
            body = json.dumps({"name": "daily", "paused": True}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = answer

        def log_message(self, *_: object) -> None:
            pass

    elsewhere = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)
    target = f"http://localhost:{elsewhere.server_address[1]}"

    class Redirecting(http.server.BaseHTTPRequestHandler):
        def answer(self) -> None:
            self.send_response(code)
            self.send_header("Location", target + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = answer

        def log_message(self, *_: object) -> None:
            pass

    redirecting = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)
    url = f"http://127.0.0.1:{redirecting.server_address[1]}"
    servers = [elsewhere, redirecting]
    threads = [
        threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
        for server in servers
    ]
    for thread in threads:
        thread.start()
    try:
        environ = {**env.environ(), "TRIO_ROUTINES_TOKEN": TOKEN}
        done = in_process(["pause", "daily", "--url", url], cwd=env.root, environ=environ)
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
    assert (done.returncode, done.stdout) == (1, "")
    assert one_line(done.stderr) == (
        f"error: {url} answered {code}: {http.HTTPStatus(code).phrase} — a redirect, not "
        "followed: give --url the server's own address\n"
    )
    assert reached == []  # neither the request nor the token went on


def answered_by_another(
    env: Env, argv: list[str], status: int, body: object = None
) -> tuple[str, subprocess.CompletedProcess[str]]:
    """``argv`` over ``--url`` to another service on a loopback port (or a proxy answering for
    it), which answers ``status`` with ``body`` (JSON; none: no body) and does nothing: its
    URL, and what the command did."""
    import http.server
    import threading

    class Other(http.server.BaseHTTPRequestHandler):
        def answer(self) -> None:
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            if data:
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_POST = do_DELETE = answer

        def log_message(self, *_: object) -> None:
            pass

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Other)
    url = f"http://127.0.0.1:{other.server_address[1]}"
    thread = threading.Thread(target=other.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        environ = {**env.environ(), "TRIO_ROUTINES_TOKEN": TOKEN}
        return url, in_process([*argv, "--url", url], cwd=env.root, environ=environ)
    finally:
        other.shutdown()
        other.server_close()


@pytest.mark.parametrize(
    ("argv", "body", "problem"),
    [
        (["pause", "daily"], {}, "not the pause of 'daily'"),
        (["pause", "daily"], {"name": "daily", "paused": False}, "not the pause of 'daily'"),
        (["pause", "daily"], {"name": "other", "paused": True}, "not the pause of 'daily'"),
        (["pause", "daily"], [], "not the pause of 'daily'"),
        (["resume", "daily"], {"name": "daily", "paused": True}, "not the resume of 'daily'"),
        (["resume", "daily"], {"name": "daily", "paused": 0}, "not the resume of 'daily'"),
        (["unwake", "w1", "--session", "s"], {}, "not a wake-up's removal"),
        (["unwake", "w1", "--session", "s"], {"removed": "yes"}, "not a wake-up's removal"),
        # A wake-up's addition answers 201: a 200 is another server's, whatever it says.
        (
            ["wake", "--session", "s", "--in", "2m", "--prompt", "p"],
            {"wakeup": {"id": "w1"}},
            "it said 200 where this request is answered 201",
        ),
    ],
)
def test_a_200_that_is_not_the_change_asked_for_is_no_success(
    env: Env, argv: list[str], body: object, problem: str
) -> None:
    # Another service on that port, or a proxy answering for it: it says 200 and did nothing.
    url, done = answered_by_another(env, argv, 200, body)
    assert (done.returncode, done.stdout) == (1, "")
    assert one_line(done.stderr) == (
        f"error: {url}: the answer is not a trio_routines server's ({problem})\n"
    )


def test_an_unwake_answered_with_another_success_is_another_servers(env: Env) -> None:
    # A cancel answers 200 (removed) or 404 (none): a 204 is no server of ours.
    url, done = answered_by_another(env, ["unwake", "w1", "--session", "s"], 204)
    assert (done.returncode, done.stdout) == (1, "")
    assert one_line(done.stderr) == (
        f"error: {url}: the answer is not a trio_routines server's (it said 204 where this "
        "request is answered 200)\n"
    )


@pytest.mark.parametrize("token", [" ", "a b", "a\nb", "tökén"])
def test_a_token_no_client_can_send_is_one_line_for_serve_and_for_a_command(
    env: Env, token: str
) -> None:
    from test_http import TOKEN_REFUSED

    env.routine("daily", cron="0 9 * * *")
    environ = {**env.environ(), "TRIO_ROUTINES_TOKEN": token}
    served = in_process(
        ["serve", "--agent", "echo", "--http", "127.0.0.1:0"], cwd=env.root, environ=environ
    )
    assert (served.returncode, served.stdout) == (2, "")
    assert one_line(served.stderr) == f"error: {TOKEN_REFUSED.format('TRIO_ROUTINES_TOKEN')}\n"
    assert not env.state.exists()  # nothing bound, nothing written
    asked = in_process(
        ["pause", "daily", "--url", "http://127.0.0.1:9"], cwd=env.root, environ=environ
    )
    assert (asked.returncode, asked.stdout) == (2, "")
    assert one_line(asked.stderr) == f"error: {TOKEN_REFUSED.format('TRIO_ROUTINES_TOKEN')}\n"


@pytest.mark.slow
def test_a_run_over_http_hears_its_turn_end_when_the_server_stops_meanwhile(env: Env) -> None:
    # The turn completed in the stop's grace and the client heard "no answer: Remote end
    # closed connection without response" (exit 1): serve ended its HTTP surface first.
    env.routine("adhoc", prompt="say hi")
    marker = env.root / "started"
    agent = f"cmd:touch {marker}; sleep 2; echo hi"
    proc = env.start("serve", "--agent", agent, "--http", "127.0.0.1:0")
    port = bound_port(env)
    client = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trio_routines",
            "run",
            "adhoc",
            "--url",
            f"http://127.0.0.1:{port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env.environ(),
        cwd=env.root,
    )
    env.procs.append(client)  # type: ignore[arg-type]
    wait_for(marker.exists, 20, "the turn to start")
    assert stop(proc) == 0
    out, err_text = client.communicate(timeout=30)
    assert (client.returncode, out) == (0, "hi\n"), err_text
