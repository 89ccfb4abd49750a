"""Hostile input that other test files do not already cover (docs/bad-input.md has the map).

* log injection: failure text and routine names carrying newlines, Unicode line separators
  and terminal escapes must not forge a log record, in the text and the JSON log format;
* names: very long ones, control characters, traversal spelled through percent-encoding;
* state directories: a dangling symlink, a symlink to elsewhere, a claim slot occupied by a
  directory, a ``schedule`` that is a file;
* routine files: frontmatter tricks not in tests/test_routines.py, and binary content;
* HTTP: a client that stalls mid-body does not hold up anyone else.

Permissions: the tests run as root, for whom ``chmod 000`` changes nothing, so permission
errors are injected as ``EACCES`` for every store operation in tests/test_faults.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio
from procs import Env, lines
from test_cli import SLOT
from test_http import ON_GRID, ROUTINES, body_of, raw_exchange, serving, status_of

from trio_routines.errors import InvalidRoutine
from trio_routines.instants import parse_iso, slot_name
from trio_routines.routinedir import load_routines
from trio_routines.routines import Routine, parse_routine_text
from trio_routines.stores.directory import DirectoryStore

LEVEL = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO |WARN |ERROR|FATAL) ")
# A failure text that tries every way to start a record of its own, or to rewrite the screen.
FORGED = (
    "first\nINFO  daily completed (1ms)\r\nWARN  forged\u2028INFO  forged too\x85"
    "INFO  and again\x1b[1A\x1b[2KERROR rewritten\x07\x00end"
)


def _agent_failing_with(env: Env, text: str) -> str:
    (env.root / "failure.txt").write_bytes(text.encode("utf-8", "surrogatepass"))
    return f"cmd:cat {env.root / 'failure.txt'} >&2; exit 3"


def _physical_lines(stderr: bytes) -> list[str]:
    # Split the way a log viewer might: on every Unicode line boundary, not only on \n.
    return stderr.decode("utf-8").splitlines()


# --- log injection --------------------------------------------------------------------------


def test_failure_text_cannot_forge_a_text_log_record(env: Env) -> None:
    env.routine("daily", cron='"0 9 * * *"')
    agent = _agent_failing_with(env, FORGED)
    result = subprocess.run(
        env.argv("fire", "daily", "--slot", SLOT, "--agent", agent),
        capture_output=True,
        env=env.environ(),
        cwd=env.root,
        timeout=60,
    )
    assert result.returncode == 1
    records = _physical_lines(result.stderr)
    assert records
    assert all(LEVEL.match(record) for record in records), records
    fired = re.compile(r" ERROR daily slot=2026-07-07T09:00Z replica=\S+ failed")
    (failed,) = [r for r in records if fired.search(r)]
    assert "forged too" in failed  # the text is there, folded onto the one line
    assert not any(ch in failed for ch in "\x1b\x07\x00\x85")  # no raw control characters
    assert "\\x1b[1A" in failed  # shown escaped instead


def test_failure_text_cannot_forge_a_json_log_record(env: Env) -> None:
    env.routine("daily", cron='"0 9 * * *"')
    agent = _agent_failing_with(env, FORGED)
    result = subprocess.run(
        env.argv("--log-format", "json", "fire", "daily", "--slot", SLOT, "--agent", agent),
        capture_output=True,
        env=env.environ(),
        cwd=env.root,
        timeout=60,
    )
    assert result.returncode == 1
    records = [json.loads(line) for line in _physical_lines(result.stderr)]
    assert {"ts", "level", "message"} <= set(records[0])
    (failed,) = [r for r in records if r["message"].startswith("daily failed")]
    assert "forged too" in failed["message"]
    assert not re.search(r"[\n\r\u2028\u2029\x85]", failed["message"])


@pytest.mark.slow
def test_a_routine_name_with_line_breaks_stays_on_one_log_line(env: Env) -> None:
    name = "evil\nINFO  forged\u2028x\x1b[2J"
    (env.routines / f"{name}.md").write_text("---\ncron: 0 9 * * *\n---\nhi\n")
    for log_format in ("text", "json"):
        result = subprocess.run(
            env.argv("--log-format", log_format, "fire", name, "--slot", SLOT, "--agent", "echo"),
            capture_output=True,
            env=env.environ(),
            cwd=env.root,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        records = _physical_lines(result.stderr)
        if log_format == "text":
            assert all(LEVEL.match(record) for record in records), records
        else:
            assert all("\n" not in json.loads(record)["message"] for record in records)
    # The name is a legal one: its claims live in a directory of that very name.
    assert (env.state / "schedule" / "claims" / name).is_dir()


# --- names ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_longest_file_name_makes_a_working_routine(env: Env) -> None:
    name = "n" * 252  # 255 bytes with ".md": the most a file name may hold
    env.routine(name, cron='"0 9 * * *"')
    result = env.cli("fire", name, "--slot", SLOT, "--agent", "echo")
    assert result.returncode == 0, result.stderr
    (entry,) = env.history(name)
    assert entry["outcome"] == "completed"


@pytest.mark.parametrize("command", [["history"], ["history", "--json"]])
@pytest.mark.slow
def test_a_name_too_long_for_the_file_system_is_one_line_not_a_traceback(
    env: Env, command: list[str]
) -> None:
    result = env.cli(command[0], "x" * 300, *command[1:])
    assert "Traceback" not in result.stderr
    assert result.returncode in (0, 1)
    assert len(result.stderr.splitlines()) <= 2, result.stderr


@pytest.mark.parametrize(
    "path",
    [
        b"/routines/..%2F..%2Fetc/history",
        b"/routines/%2e%2e/history",
        b"/routines/..%5Cdaily/history",
        b"/routines/daily%00/history",
        b"/routines/%1b%5b2J/history",
        b"/routines/../routines/daily/history",
        b"/wakeups/..%2F..%2Fschedule",
    ],
)
async def test_http_path_tricks_reach_no_other_file(path: bytes) -> None:
    async with serving() as server:
        head = b"GET " + path + b" HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        if path.startswith(b"/wakeups/"):
            head = head.replace(b"GET", b"DELETE", 1)
        response = await raw_exchange(server.port, head)
        assert status_of(response) in (400, 404), response
        assert server.agent.turns == []


async def test_a_path_whose_escapes_are_no_utf8_is_refused_and_names_no_routine() -> None:
    # The server decodes a path's escapes leniently: /routines/%ff/pause reached a routine
    # named U+FFFD and paused it, though the query string's like refused.
    async with serving() as server:
        server.scheduler.update_routines([*ROUTINES, Routine(name="\ufffd", prompt="p")])

        async def post(path: bytes) -> tuple[int, Any]:
            head = b"POST " + path + b" HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n"
            response = await raw_exchange(server.port, head + b"Connection: close\r\n\r\n")
            return status_of(response), body_of(response)

        refused = (400, {"error": "the path is not valid UTF-8"})
        for path in (b"/routines/%ff/pause", b"/routines/%ef%bf/pause", b"/routines/a%80b/pause"):
            assert await post(path) == refused
        assert await post(b"/routines/%3F%ff/pause") == refused  # a "?" escaped is the path's
        assert await server.store.paused() == set()
        # its name's own escapes reach it
        assert await post(b"/routines/%EF%BF%BD/pause") == (200, {"name": "\ufffd", "paused": True})


async def test_a_client_stalling_mid_body_does_not_hold_up_others() -> None:
    stalled = trio.Event()

    async def stall(stream: trio.SocketStream) -> None:
        await stream.send_all(b'{"name": "daily", ')
        stalled.set()
        await trio.sleep_forever()

    async with serving() as server:
        head = (
            b"POST /fire HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: 200\r\n\r\n"
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(raw_exchange, server.port, head, stall)
            await stalled.wait()
            with trio.fail_after(5):
                reply = await server.call("POST", "/fire", {"name": "daily", "slot": ON_GRID})
            assert reply.status == 202
            assert (await server.call("GET", "/healthz")).status == 200
            nursery.cancel_scope.cancel()
        await server.settled("daily")


# --- state directories ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["fire", "daily", "--slot", SLOT, "--agent", "echo"],
        ["run", "daily", "--agent", "echo"],
        ["serve", "--agent", "echo"],
        ["history", "daily"],
        ["list"],
        ["status"],
        ["pause", "daily"],
        ["resume", "daily"],
        ["wake", "--session", "s", "--in", "5m", "--prompt", "p"],
        ["unwake", "w-1", "--session", "s"],
        ["migrate"],
    ],
)
@pytest.mark.parametrize("slash", ["", "/"])
def test_a_dangling_symlink_as_state_is_one_line_exit_1(
    env: Env, args: list[str], slash: str
) -> None:
    # A reading command read it as a state where nothing ever ran, and said nothing.
    env.routine("daily", cron='"0 9 * * *"')
    env.state.symlink_to(env.root / "nowhere")
    given = f"{env.state}{slash}"
    env.state = given  # type: ignore[assignment]  # as typed: a path may end in a slash
    result = env.run_cli(*args)
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        f"error: --state {given} is a symbolic link to {env.root / 'nowhere'}, which does "
        "not exist — restore what it points to, or give --state the state directory itself\n"
    )
    assert result.stdout == ""
    assert not (env.root / "nowhere").exists()  # nothing created through the dangling link


def test_a_state_symlinked_elsewhere_is_followed(env: Env) -> None:
    env.routine("daily", cron='"0 9 * * *"')
    real = env.root / "real-state"
    real.mkdir()
    env.state.symlink_to(real)
    assert env.run_cli("fire", "daily", "--slot", SLOT, "--agent", "echo").returncode == 0
    assert (real / "schedule" / "claims" / "daily" / slot_name(parse_iso(SLOT))).is_file()  # type: ignore[arg-type]


def test_a_directory_squatting_on_a_claim_name_is_never_fired_over(env: Env) -> None:
    env.routine("daily", cron='"0 9 * * *"')
    squatter = env.state / "schedule" / "claims" / "daily" / slot_name(parse_iso(SLOT))  # type: ignore[arg-type]
    squatter.mkdir(parents=True)
    fire = env.run_cli("fire", "daily", "--slot", SLOT, "--agent", f"cmd:echo x >> {env.marker}")
    assert fire.returncode == 0
    assert "not claimed (duplicate)" in fire.stdout
    assert lines(env.marker) == []
    # Reading it is one warning naming it; it reads as a claim without outcome.
    history = env.run_cli("history", "daily")
    assert history.returncode == 0, history.stderr
    assert f"{squatter} is a directory, not a regular file" in history.stderr
    assert "unreported" in history.stdout
    assert squatter.is_dir()


def test_schedule_being_a_file_is_one_line_exit_1(env: Env) -> None:
    env.routine("daily", cron='"0 9 * * *"')
    env.state.mkdir()
    (env.state / "schedule").write_text("not a directory")
    for args in (
        ["fire", "daily", "--slot", SLOT, "--agent", "echo"],
        ["wake", "--session", "s", "--in", "5m", "--prompt", "p"],
        ["serve", "--agent", "echo"],
    ):
        result = env.run_cli(*args)
        assert result.returncode == 1, (args, result.stderr)
        assert result.stderr.startswith("error: "), result.stderr
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert "ENOTDIR" in result.stderr or "EEXIST" in result.stderr, result.stderr


# --- routine files --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("---\ncron: 0 9 * * *\ncron: 0 10 * * *\n---\nx\n", "duplicate key"),
        ("---\nCRON: 0 9 * * *\n---\nx\n", "unknown key"),
        ("---\ncron : 0 9 * * *\nprompt: steal\n---\nx\n", "unknown key"),
        ("---\n  - cron: 0 9 * * *\n---\nx\n", "expected 'key: value'"),
        ("---\ncron: !!python/object 0 9 * * *\n---\nx\n", "invalid cron"),
        ("---\ncron: '0 9 * * *\n---\nx\n", "unmatched quote"),
        ("---\ntimeout: 1e309\n---\nx\n", "timeout"),
        ("\n---\ncron: 0 9 * * *\n---\nx\n", "must start with"),
        ("---\ncron: 0 9 * * *\n", "no closing"),
    ],
)
def test_frontmatter_tricks_are_refused_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(InvalidRoutine, match=re.escape(reason)):
        parse_routine_text("daily", text)


def test_a_binary_routine_file_is_one_failure_and_its_siblings_load(tmp_path: Path) -> None:
    (tmp_path / "good.md").write_text("---\n---\nhello\n")
    (tmp_path / "blob.md").write_bytes(os.urandom(4096) + b"\xff\xfe")
    (tmp_path / "nul.md").write_bytes(b"---\n---\nhi\x00there\n")
    result = load_routines(tmp_path)
    assert "good" in [r.name for r in result.routines]
    failures = {Path(f.file).name: f.reason for f in result.failures}
    assert failures["blob.md"] == "not UTF-8 text"
    # A NUL inside UTF-8 text is text: it loads (the prompt goes to the agent, never a path).
    assert "nul" in [r.name for r in result.routines] or "nul.md" in failures


def test_serve_refuses_a_binary_routine_file_in_one_line_per_file(env: Env) -> None:
    (env.routines / "blob.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff")
    result = env.run_cli("serve", "--agent", "echo")
    assert result.returncode == 1
    assert "blob.md: not UTF-8 text" in result.stderr
    assert "Traceback" not in result.stderr


def test_check_reports_a_routine_file_symlinked_outside(env: Env) -> None:
    outside = env.root / "secret.md"
    outside.write_text("---\n---\nread me\n")
    (env.routines / "leak.md").symlink_to(outside)
    result = env.run_cli("check")
    assert result.returncode == 1
    assert "leak.md: is a symlink leading outside" in result.stderr


def test_store_refuses_traversal_names_before_touching_the_disk(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "state")
    for name in ("..", "../x", "a/b", "a\\b", "a\x00b", ""):
        with pytest.raises(ValueError, match="cannot be a routine name"):
            store.claim_sync(name, parse_iso(SLOT), parse_iso(SLOT))  # type: ignore[arg-type]
    assert not (tmp_path / "state").exists()


def test_a_dangling_state_link_of_a_long_target_is_named_cut(env: Env) -> None:
    env.routine("daily", cron='"0 9 * * *"')
    target = env.root / ("t" * 250)
    env.state.symlink_to(target)
    result = env.run_cli("list")
    assert result.returncode == 1
    shown = str(target)[:200] + "…"  # a link may hold 4 KiB: the line stays a line
    assert result.stderr == (
        f"error: --state {env.state} is a symbolic link to {shown}, which does not exist — "
        "restore what it points to, or give --state the state directory itself\n"
    )
