"""A turn's ticket across real ``serve`` replicas, on one state directory and on one PostgreSQL
database: a turn run by one replica calls the wake-up tools through another's HTTP surface, as
that turn; a replica given another token refuses the ticket."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest
from procs import Env, stop, wait_for
from test_pinned_processes import bound_port, request

TOKEN = "replicas-share-this-token"


@pytest.fixture
def env(env_on_either_store: Env) -> Env:
    """On a state directory and on PostgreSQL (``conftest.py``)."""
    return env_on_either_store


def _replica(env: Env, name: str, agent: str, token: str) -> tuple[subprocess.Popen[bytes], int]:
    """``serve --http`` as replica ``name`` with ``token``; the process and its port."""
    argv = ("serve", "--agent", agent, "--replica", name, "--http", "127.0.0.1:0")
    log = f"{name}.log"
    proc = env.start(*argv, log=log, extra={"TRIO_ROUTINES_TOKEN": token})
    return proc, bound_port(env, log)


def tool_call(port: int, ticket: str, body: dict[str, Any]) -> tuple[int, Any]:
    """``POST /tools/call`` with ``ticket`` as its credential."""
    sent = urllib.request.Request(
        f"http://127.0.0.1:{port}/tools/call",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Ticket {ticket}"},
    )
    try:
        with urllib.request.urlopen(sent, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.slow
def test_a_turns_ticket_is_honoured_by_every_replica_sharing_the_token(env: Env) -> None:
    env.routine("adhoc", prompt="say hi")
    ticket_file = env.root / "ticket"
    agent = f'cmd:printf %s "$TRIO_ROUTINES_TURN" > {ticket_file}'
    one, one_port = _replica(env, "one", agent, TOKEN)
    two, two_port = _replica(env, "two", agent, TOKEN)
    three, three_port = _replica(env, "three", agent, "another-deployments-token")

    status, started = request(one_port, "POST", "/run", {"name": "adhoc"}, token=TOKEN)
    assert (status, started["outcome"]) == (200, "completed"), started
    ticket = wait_for(lambda: ticket_file.exists() and ticket_file.read_text(), 30, "the ticket")

    ask = {"name": "schedule_wakeup", "arguments": {"prompt": "follow up", "in": "2h"}}
    status, answered = tool_call(two_port, ticket, ask)  # no bearer: the ticket is the credential
    assert status == 200, answered
    assert answered["text"].startswith("Scheduled ")
    status, refused = tool_call(three_port, ticket, ask)
    assert status == 403
    assert "made by a process given another TRIO_ROUTINES_TOKEN" in refused["error"]

    for proc in (one, two, three):
        assert stop(proc) == 0
    listed = env.cli("list", "--json")
    assert listed.returncode == 0, listed.stderr
    (wakeup,) = json.loads(listed.stdout)["wakeups"]
    assert wakeup["session"] == "routine:adhoc"
    assert wakeup["origin"] == {"kind": "routine", "depth": 1, "routine": "adhoc"}


@pytest.mark.slow
def test_a_run_on_the_command_line_signs_its_turns_ticket_with_the_token(env: Env) -> None:
    # Not only serve: a `run` (or a `fire`) by hand hands its agent a ticket that the
    # replicas serving the same token honour.
    env.routine("adhoc", prompt="say hi")
    ticket_file = env.root / "ticket"
    agent = f'cmd:printf %s "$TRIO_ROUTINES_TURN" > {ticket_file}'
    done = subprocess.run(
        env.argv("run", "adhoc", "--agent", agent),
        capture_output=True,
        text=True,
        cwd=env.root,
        env={**env.environ(), "TRIO_ROUTINES_TOKEN": TOKEN},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    _, port = _replica(env, "one", "echo", TOKEN)
    status, listed = tool_call(port, ticket_file.read_text(), {"name": "list_wakeups"})
    assert (status, listed) == (200, {"text": "No wake-ups pending for this conversation."})


@pytest.mark.slow
def test_a_command_calls_the_tools_back_where_serve_answers(env: Env) -> None:
    # serve --http tells its cmd: commands where it answers; the command sends its ticket there.
    env.routine("adhoc", prompt="say hi")
    call_back = (
        "import json, os, urllib.request; "
        "body = json.dumps({'name': 'schedule_wakeup', "
        "'arguments': {'prompt': 'again', 'in': '1h'}}).encode(); "
        "sent = urllib.request.Request(os.environ['TRIO_ROUTINES_URL'] + '/tools/call', "
        "data=body, method='POST', headers={'Content-Type': 'application/json', "
        "'Authorization': 'Ticket ' + os.environ['TRIO_ROUTINES_TURN']}); "
        "print(json.load(urllib.request.urlopen(sent, timeout=30))['text'])"
    )
    agent = f'cmd:{sys.executable} -c "{call_back}"'
    one, port = _replica(env, "one", agent, TOKEN)
    status, ran = request(port, "POST", "/run", {"name": "adhoc"}, token=TOKEN)
    assert (status, ran["outcome"]) == (200, "completed"), ran
    assert ran["reply"].startswith("Scheduled ")
    assert stop(one) == 0
    (wakeup,) = json.loads(env.cli("list", "--json").stdout)["wakeups"]
    assert wakeup["origin"] == {"kind": "routine", "depth": 1, "routine": "adhoc"}
