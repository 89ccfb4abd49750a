"""Bad input on the command line, as real processes: the exit status and one line each.

Also what a terminal is shown: nothing from outside (a file name, a failure text) reaches it
with its control characters live.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from procs import Env, lines, one_line, stop, wait_for
from test_cli import SLOT

from trio_routines.records import Outcome

# Every test here starts real processes (some seventy in all): marked slow, so that
# `pytest -m "not slow"` stays under a minute; the whole suite (and CI) runs them.
pytestmark = pytest.mark.slow

# --- every bad input: exit status and one line ----------------------------------------------


BAD_INPUT = [
    # (arguments, exit status, part of the one-line message)
    (["run", "nope", "--agent", "echo"], 1, 'unknown routine "nope" — looked in '),
    (["fire", "nope", "--slot", SLOT, "--agent", "echo"], 1, 'unknown routine "nope"'),
    (["next", "nope"], 1, 'unknown routine "nope"'),
    (["run", "broken", "--agent", "echo"], 1, "broken.md: must start with a '---'"),
    (["fire", "broken", "--slot", SLOT, "--agent", "echo"], 1, "broken.md: must start"),
    (["next", "broken"], 1, "broken.md: must start"),
    (["run", "..", "--agent", "echo"], 1, '".." cannot be a routine name'),
    (["fire", "a/b", "--slot", SLOT, "--agent", "echo"], 1, '"a/b" cannot be a routine name'),
    (["history", ".."], 1, '".." cannot be a routine name'),
    (["history", "a\\b"], 1, "cannot be a routine name"),
    (["next", "a/b"], 1, "cannot be a routine name"),
    (["fire", "daily", "--slot", "yesterday", "--agent", "echo"], 2, "is not an instant"),
    (["fire", "daily", "--slot", "2026-07-07T09:00:00", "--agent", "echo"], 2, "with a zone"),
    (["fire", "daily", "--slot", "2026-02-30T09:00Z", "--agent", "echo"], 2, "with a zone"),
    (["next", "daily", "--after", "noon"], 2, 'argument --after: "noon" is not an instant'),
    (["history", "daily", "--since", "2026-07-07"], 2, "argument --since"),
    (["history", "daily", "--outcome", "great"], 2, "invalid choice"),
    (["fire", "daily", "--slot", "2026-07-07T09:30:00Z", "--agent", "echo"], 1, "cron grid"),
    (["wake", "--session", "s", "--in", "120", "--prompt", "p"], 2, '"120" is not a delay'),
    (["wake", "--session", "s", "--in", "soon", "--prompt", "p"], 2, "is not a delay"),
    (["wake", "--session", "s", "--in", "99999999999d", "--prompt", "p"], 2, "too far away"),
    (["wake", "--session", "s", "--in", "10s", "--prompt", "p"], 1, "too soon"),
    (["wake", "--session", "s", "--cron", "* * * * *", "--prompt", "p"], 1, "too frequent"),
    (
        ["wake", "--session", "s", "--cron", "0 9 * * *", "--tz", "Mars/Base", "--prompt", "p"],
        1,
        "invalid cron/tz",
    ),
    (["next", "--cron", "0 9 * * * *"], 2, "argument --cron/--tz: expected 5 fields"),
    (["next", "adhoc"], 1, '"adhoc" runs on demand only'),
    (["run", "daily"], 2, "run needs an agent"),
    (["fire", "daily", "--slot", SLOT], 2, "fire needs an agent"),
    (["serve"], 2, "serve needs an agent"),
    (["run", "daily", "--agent", "gpt"], 2, 'unknown agent "gpt"'),
    (["run", "daily", "--agent", "py:no_such_mod:x"], 1, 'cannot import module "no_such_mod"'),
    (["serve", "--agent", "echo", "--http", "nonsense"], 2, "expected HOST:PORT"),
    (["serve", "--agent", "echo", "--http", "127.0.0.1:99999"], 2, "the port must be 0 to 65535"),
    ([], 2, "error: the following arguments are required: COMMAND"),
    (["fire", "daily", "--agent", "echo"], 2, "--slot"),
    (["wake", "--session", "s", "--prompt", "p"], 2, "one of the arguments --in --cron"),
    (["wake", "--session", "s", "--in", "5m", "--tz", "UTC", "--prompt", "p"], 2, "--tz goes"),
    (["next"], 2, "either a routine NAME or --cron"),
    (["next", "daily", "--cron", "* * * * *"], 2, "either a routine NAME or --cron"),
    (["next", "--cron", "* * * * *", "-n", "0"], 2, "between 1 and 1000"),
    (["next", "--cron", "* * * * *", "-n", "9" * 5000], 2, "must be between 1 and 1000"),
    (["next", "--cron", "* * * * *", "-n", "²"], 2, '"²" is not a whole number'),
    (["next", "--cron", "9" * 5000 + " * * * *"], 2, 'minute field: "99999999'),
    (["serve", "--agent", "echo", "--http", "127.0.0.1:" + "8" * 5000], 2, "expected HOST:PORT"),
    (["serve", "--agent", "echo", "--http", "127.0.0.1:²"], 2, "expected HOST:PORT"),
    (["serve", "--agent", "echo", "--grace", "-1"], 2, "must be a finite number"),
    (
        ["serve", "--agent", "echo", "--wakeup-timeout", "0"],
        2,
        "'0' must be a finite number of seconds above 0",
    ),
    (["serve", "--agent", "echo", "--wakeup-timeout", "soon"], 2, "is not a number of seconds"),
    (["frobnicate"], 2, "invalid choice"),
]


@pytest.mark.parametrize(("args", "status", "message"), BAD_INPUT)
def test_bad_input_is_one_line_and_the_right_status(
    env: Env, args: list[str], status: int, message: str
) -> None:
    env.routine("daily", cron="0 9 * * *")
    env.routine("adhoc")
    if "broken" in args:
        (env.routines / "broken.md").write_text("no frontmatter here\n")
    result = env.cli(*args)
    assert (result.returncode, result.stdout) == (status, ""), result.stderr
    assert message in one_line(result.stderr)
    assert not any(lines(env.marker))


UNREADABLE_STATE = [
    ["history", "daily"],
    ["history", "daily", "--json"],
    ["fire", "daily", "--slot", SLOT, "--agent", "echo"],
    ["list"],
    ["list", "--json"],
    ["wake", "--session", "s", "--in", "5m", "--prompt", "p"],
    ["unwake", "some-id", "--session", "s"],
    ["serve", "--agent", "echo"],
]


@pytest.mark.parametrize("args", UNREADABLE_STATE)
def test_unreadable_state_is_one_line_exit_1(env: Env, args: list[str]) -> None:
    env.routine("daily", cron="0 9 * * *")
    env.state.write_text("a regular file where the state directory should be")
    result = env.cli(*args)
    assert result.returncode == 1
    assert result.stdout == ""
    # The path given, what it is, and what to give: not a path inside it that no one gave.
    assert one_line(result.stderr) == (
        f"error: --state {env.state} is a regular file, not a state directory (ENOTDIR) — "
        "give --state the directory `serve` keeps its state in\n"
    )
    assert env.state.read_text() == "a regular file where the state directory should be"


READS_ROUTINES = [
    ["serve", "--agent", "echo"],
    ["run", "daily", "--agent", "echo"],
    ["fire", "daily", "--slot", SLOT, "--agent", "echo"],
    ["list"],
    ["next", "daily"],
    ["check"],
]


@pytest.mark.parametrize("args", READS_ROUTINES)
def test_a_missing_routines_directory_is_one_line_exit_1(env: Env, args: list[str]) -> None:
    env.routines.rmdir()
    result = env.cli(*args)
    assert (result.returncode, result.stdout) == (1, "")
    assert one_line(result.stderr).startswith(f"error: --routines {env.routines}: no such director")
    assert not env.state.exists()


def test_serve_warns_about_an_empty_routines_directory(env: Env) -> None:
    proc = env.serve("echo", "--no-wakeups")
    wait_for(lambda: "wake-ups: off" in env.log(), 20, "serve to arm")
    assert stop(proc) == 0
    assert f"WARN  no routines in {env.routines} — serving wake-ups only" in env.log()


def test_an_unknown_name_first_reports_the_broken_files_that_may_explain_it(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    (env.routines / "digest.md").write_text("---\ncron: 0 25 * * *\n---\nsummarise\n")
    for args in (["run", "digest2"], ["fire", "digest2", "--slot", SLOT]):
        result = env.cli(*args, "--agent", "echo")
        assert result.returncode == 1
        first, last = result.stderr.splitlines()
        assert "digest.md: invalid cron/tz" in first
        assert first.endswith("— skipped")
        assert last == (
            f'error: unknown routine "digest2" — looked in {env.routines}; available: daily'
        )
    assert not env.state.exists()


def test_names_and_reasons_never_reach_the_terminal_with_live_control_characters(
    env: Env,
) -> None:
    evil = "evil\x1b[2J\x9b31m"
    (env.routines / f"{evil}.md").write_text("---\ncron: 0 9 * * *\n---\nhi\n")
    (env.routines / "bad\x1b]0;owned\x07.md").write_text("no frontmatter\n")
    env.seed(evil, datetime(2026, 7, 7, 9, tzinfo=UTC), Outcome.FAILED, error="no\x1b[5m")
    runs = [
        env.cli("list"),
        env.cli("list", "--json"),
        env.cli("check"),
        env.cli("history", evil),
        env.cli("history", evil, "--json"),
        env.cli("next", evil, "-n", "1"),
        env.cli("run", evil, "--agent", "echo"),
        env.cli("run", "bad\x1b]0;owned\x07", "--agent", "echo"),
        env.cli("fire", evil + "x", "--slot", SLOT, "--agent", "echo"),
        env.cli("wake", "--session", "s\x1b[2J", "--in", "5m", "--prompt", "p"),
        env.cli("unwake", "id\x1b[2J", "--session", "s\x9b"),
    ]
    for result in runs:
        for raw in ("\x1b", "\x07", "\x9b"):
            assert raw not in result.stdout, (result.args, result.stdout)
            assert raw not in result.stderr, (result.args, result.stderr)
    listed, listed_json, checked = runs[0], runs[1], runs[2]
    assert "evil\\x1b[2J\\x9b31m" in listed.stdout
    assert "bad\\x1b]0;owned\\x07.md" in listed.stderr
    assert "bad\\x1b]0;owned\\x07.md" in checked.stderr
    assert "evil\\u001b[2J\\u009b31m" in listed_json.stdout
    assert "no\\x1b[5m" in runs[3].stdout


def test_a_name_that_reorders_what_follows_it_is_shown_escaped(env: Env) -> None:
    # A right-to-left override makes "rlo\u202etxt.md" read as another name.
    (env.routines / "rlo\u202exe.md").write_text("---\ncron: 0 9 * * *\n---\nhi\n")
    listed, listed_json = env.run_cli("list"), env.run_cli("list", "--json")
    assert "rlo\\u202exe" in listed.stdout
    assert "rlo\\u202exe" in listed_json.stdout
    for result in (listed, listed_json):
        assert "\u202e" not in result.stdout + result.stderr


def on_a_terminal(env: Env, *argv: str, log_too: bool = False) -> tuple[int, str]:
    """Run the command line with a terminal for its stdout (and, with ``log_too``, its
    stderr): its exit status and what the terminal showed."""
    import pty
    import subprocess

    ours, theirs = pty.openpty()
    try:
        done = subprocess.run(
            env.argv(*argv),
            stdout=theirs,
            stderr=theirs if log_too else subprocess.DEVNULL,
            cwd=env.root,
            env=env.environ(),
            timeout=60,
            check=False,
        )
        os.close(theirs)
        theirs = -1
        shown = b""
        while True:
            try:
                chunk = os.read(ours, 4096)
            except OSError:  # EIO: the terminal's other end is closed and read out
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(ours)
        if theirs >= 0:
            os.close(theirs)
    return done.returncode, shown.decode()


def test_run_shows_an_agents_escape_sequences_escaped_on_a_terminal_and_as_they_are_else(
    env: Env,
) -> None:
    (env.routines / "big.md").write_text("---\n---\nhi\n")
    agent = "cmd:printf 'hi\\033]0;pwned\\007\\033[31mred\\n\\tok\\n'"
    piped = env.cli("run", "big", "--agent", agent)
    assert (piped.returncode, piped.stdout) == (0, "hi\x1b]0;pwned\x07\x1b[31mred\n\tok\n")
    # The terminal turns "\n" into "\r\n" itself; nothing else was left to obey.
    assert on_a_terminal(env, "run", "big", "--agent", agent) == (
        0,
        "hi\\x1b]0;pwned\\x07\\x1b[31mred\r\n\tok\r\n",
    )


def test_run_on_a_terminal_ends_the_replys_line_before_a_log_line(env: Env) -> None:
    (env.routines / "short.md").write_text("---\n---\nhi\n")
    code, shown = on_a_terminal(
        env, "run", "short", "--agent", "cmd:printf 'no line end'", log_too=True
    )
    assert code == 0
    lines = shown.split("\r\n")
    # The reply's own line, then the turn's end on a line of its own, and no blank line.
    assert lines[-3:] == ["no line end", lines[-2], ""]
    assert lines[-2].split()[1:4] == ["INFO", "short", "completed"]


def test_operator_surfaces_never_cite_the_specification_or_speak_to_the_model() -> None:
    """The command line and the HTTP errors are read by people; the texts the agent reads (the
    wake-up envelope, the tools' answers) live in wakeuptexts.py and tools.py."""
    import trio_routines.cli
    import trio_routines.http

    for package in (trio_routines.cli, trio_routines.http):
        for source in Path(package.__file__).parent.glob("*.py"):
            text = source.read_text()
            for phrase in ("SPEC §", "conversation", "unwake({"):
                assert phrase not in text, f"{source.name}: {phrase}"


def _closing(env: Env, closed: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The command run with ``closed`` (``>&-``, ``2>&-``, ``<&-`` …) applied by a shell."""
    return subprocess.run(
        ["/bin/sh", "-c", f'exec "$@" {closed}', "sh", *env.argv(*args)],
        capture_output=True,
        text=True,
        cwd=env.root,
        env=env.environ(),
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("command", ["list", "status", "history", "next", "check"])
def test_a_command_that_only_reads_with_stdout_closed_says_so(env: Env, command: str) -> None:
    (env.routines / "hourly.md").write_text("---\ncron: 0 * * * *\n---\nhi\n")
    args = [command, "hourly"] if command == "history" else [command]
    done = _closing(env, ">&-", *args)
    assert (done.returncode, done.stderr) == (
        1,
        f"error: stdout is closed: {command} has nowhere to write\n",
    )
    quiet = _closing(env, ">&- 2>&-", *args)  # nowhere to say it either: the exit status
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (1, "", "")


def test_a_command_that_acts_with_its_streams_closed_does_it(env: Env) -> None:
    # No traceback from a stream that is None, and no file of ours on descriptor 0, 1 or 2.
    (env.routines / "minutely.md").write_text("---\ncron: '* * * * *'\n---\nhi\n")
    slot = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
    iso = slot.strftime("%Y-%m-%dT%H:%MZ")
    fired = _closing(env, "<&- >&-", "fire", "minutely", "--slot", iso, "--agent", "echo")
    assert fired.returncode == 0
    assert "Traceback" not in fired.stderr
    assert "completed" in fired.stderr  # its log lines
    ran = _closing(env, "<&- >&- 2>&-", "run", "minutely", "--agent", "echo")
    assert ran.returncode == 0
    history = env.cli("history", "minutely", "--json")
    assert [fire["outcome"] for fire in json.loads(history.stdout)] == ["completed"]


def test_a_closed_stream_that_cannot_be_filled_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from trio_routines import cli

    fstat = os.fstat

    def closed_stdin(fd: int) -> os.stat_result:
        if fd == 0:
            raise OSError(9, "Bad file descriptor")
        return fstat(fd)

    def no_descriptor_left(*args: object, **kwargs: object) -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(os, "fstat", closed_stdin)
    monkeypatch.setattr(os, "open", no_descriptor_left)
    assert cli.main(["list"]) == 1
    assert capsys.readouterr().err == (
        "error: a standard stream is closed and cannot be filled: [Errno 24] Too many open files\n"
    )
