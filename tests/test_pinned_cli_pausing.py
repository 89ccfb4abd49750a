"""``pause`` and ``resume`` (``trio_routines.cli.pausing``), pinned in this process: on a state
directory (what each prints, what it writes, what it refuses and why) and against a real
server on a loopback port (``--url``)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import pytest
import trio
from procs import Env, in_process, one_line
from test_http import serving

from trio_routines.cli import output
from trio_routines.cli.output import CliError
from trio_routines.cli.parser import build_parser
from trio_routines.cli.pausing import cmd_pause, cmd_resume
from trio_routines.instants import truncate_ms
from trio_routines.stores.directory import DirectoryStore

PAUSED = "daily paused — no scheduler on this state claims its slots until `resume daily`\n"
ALREADY = (
    "daily was already paused — no scheduler on this state claims its slots until `resume daily`\n"
)
RESUMED = "daily resumed — it fires from its next slot; paused slots are not run\n"


def paused(env: Env) -> frozenset[str]:
    async def read() -> frozenset[str]:
        async with DirectoryStore(env.state) as store:
            return await store.paused()

    return trio.run(read)


def resumed_at(env: Env, name: str) -> datetime | None:
    async def read() -> datetime | None:
        async with DirectoryStore(env.state) as store:
            return await store.resumed_at(name)

    return trio.run(read)


def paused_since(env: Env, name: str) -> datetime | None:
    async def read() -> datetime | None:
        async with DirectoryStore(env.state) as store:
            return await store.paused_since(name)

    return trio.run(read)


def test_pause_then_resume_on_the_state_say_so_and_record_when(env: Env) -> None:
    env.state.mkdir()  # a state some scheduler made
    env.routine("daily", cron="0 9 * * *")
    env.routine("other", cron="0 9 * * *")
    (env.routines / "broken.md").write_text("no front matter\n")  # not reported: not asked for
    began = datetime.now(UTC)
    done = env.run_cli("pause", "daily")
    ended = datetime.now(UTC)
    assert (done.returncode, done.stdout, done.stderr) == (0, PAUSED, "")
    assert paused(env) == {"daily"}
    since = paused_since(env, "daily")  # the pause's start, kept for the boot's gaps
    assert since is not None
    assert truncate_ms(began) <= since <= ended
    again = env.run_cli("pause", "daily")  # idempotent, and says it was
    assert (again.returncode, again.stdout, again.stderr) == (0, ALREADY, "")
    assert paused_since(env, "daily") == since  # the first pause's start stands

    before = datetime.now(UTC)
    resumed = env.run_cli("resume", "daily")
    after = datetime.now(UTC)
    assert (resumed.returncode, resumed.stdout, resumed.stderr) == (0, RESUMED, "")
    assert paused(env) == frozenset()
    when = resumed_at(env, "daily")
    assert when is not None
    assert before <= when <= after

    not_paused = env.run_cli("resume", "daily")
    assert (not_paused.returncode, not_paused.stdout, not_paused.stderr) == (
        0,
        "daily was not paused\n",
        "",
    )
    assert resumed_at(env, "daily") == when  # nothing written


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("sp ace", "'sp ace'"),
        ("it's", "'it'\"'\"'s'"),
        ("plain", "plain"),
        ("-dash", "-- -dash"),  # else read as an option: `resume -dash` asked for a NAME
    ],
)
def test_the_resume_a_pause_names_is_a_command_a_shell_reads_back(
    env: Env, name: str, shown: str
) -> None:
    # `resume sp ace`, copied as printed, resumed nothing: two words.
    env.state.mkdir()
    env.routine(name)
    where = ["--state", str(env.state), "--routines", str(env.routines)]
    done = in_process(["pause", *where, "--", name], cwd=env.root, environ=env.environ())
    assert done.stdout == (
        f"{name} paused — no scheduler on this state claims its slots until `resume {shown}`\n"
    )
    resume = ["resume", *where, *shlex.split(shown)]  # as printed, after the options
    assert in_process(resume, cwd=env.root, environ=env.environ()).returncode == 0
    assert paused(env) == frozenset()


def test_an_unknown_or_bad_name_is_refused_and_nothing_is_written(env: Env) -> None:
    env.state.mkdir()
    env.routine("daily", cron="0 9 * * *")
    for command in ("pause", "resume"):
        unknown = env.run_cli(command, "nope")
        assert (unknown.returncode, unknown.stdout) == (1, "")
        assert one_line(unknown.stderr) == (
            f'error: unknown routine "nope" — looked in {env.routines}; available: daily\n'
        )
        bad = env.run_cli(command, "../x")
        assert (bad.returncode, bad.stdout) == (1, "")
        assert one_line(bad.stderr) == (
            'error: "../x" cannot be a routine name (no path separators, "." or "..")\n'
        )
    assert paused(env) == frozenset()


@pytest.mark.parametrize(
    "command",
    [("pause", "daily"), ("resume", "daily"), ("unwake", "w1", "--session", "chat")],
)
@pytest.mark.parametrize("where", ["state", "typo/deep/state"])
def test_a_change_to_a_state_directory_that_is_not_there_is_refused_and_makes_none(
    env: Env, command: tuple[str, ...], where: str
) -> None:
    # A mistyped --state made the whole path anew and said the pause was done, while the
    # service's own state went on firing.
    env.routine("daily", cron="0 9 * * *")
    env.state = state = env.root / where
    done = env.run_cli(*command)
    assert (done.returncode, done.stdout) == (1, "")
    assert one_line(done.stderr) == (
        f"error: no state directory at {state} — {command[0]} changes the state a scheduler "
        "keeps, which `serve` makes: is --state (or TRIO_ROUTINES_STATE) right?\n"
    )
    assert not (env.root / where.split("/")[0]).exists()


@pytest.mark.parametrize("command", [("status",), ("list",), ("history", "daily")])
def test_a_reading_command_on_a_state_directory_that_is_not_there_says_so(
    env: Env, command: tuple[str, ...]
) -> None:
    # It read as nothing ever run, exit 0 and not a word, as a mistyped --state would.
    env.routine("daily", cron="0 9 * * *")
    env.state = state = env.root / "typo"
    done = env.run_cli(*command)
    assert done.returncode == 0, done.stderr
    assert (
        f"no state directory at {state} — nothing has run or been stored there: is --state "
        "(or TRIO_ROUTINES_STATE) right?\n"
    ) in done.stderr
    assert not state.exists()  # and none is made
    env.state = env.root / "state"
    assert env.run_cli("pause", "daily").returncode == 1  # (no state: refused, makes none)
    (env.root / "state").mkdir()
    there = env.run_cli(*command)
    assert there.returncode == 0, there.stderr
    assert "no state directory" not in there.stderr


def test_a_state_that_cannot_be_looked_at_is_the_stores_to_refuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # EACCES on the way (a parent of mode 0700): not "no state directory", which would send
    # the operator to look for a typo.
    def denied(path: object, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(output.os, "stat", denied)
    output.check_owner(str(tmp_path / "state"), "pause", existing=True)  # no refusal of its own
    monkeypatch.undo()
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(CliError, match=r"^--state \S+ is a symbolic link to \S+, which does not"):
        output.check_owner(str(link), "pause", existing=True)
    with pytest.raises(CliError, match=r"^no state directory at "):
        output.check_owner(str(tmp_path / "nowhere"), "pause", existing=True)
    # A database is always there to ask.
    output.check_owner("postgresql://db/x", "pause", existing=True)


@pytest.mark.parametrize("command", [("pause", "daily"), ("resume", "daily")])
def test_a_state_that_is_a_file_is_refused_as_what_it_is(
    env: Env, command: tuple[str, ...]
) -> None:
    env.routine("daily", cron="0 9 * * *")
    env.state.write_text("not a directory")
    done = env.run_cli(*command)
    assert (done.returncode, done.stdout) == (1, "")
    assert one_line(done.stderr) == (
        f"error: --state {env.state} is a regular file, not a state directory (ENOTDIR) — "
        "give --state the directory `serve` keeps its state in\n"
    )
    assert env.state.read_text() == "not a directory"
    os.unlink(env.state)
    os.mkfifo(env.state)  # opened by nothing: no open may hang on it
    assert "is a FIFO, not a state directory" in one_line(env.run_cli(*command).stderr)


def test_a_paused_routine_whose_file_is_gone_may_still_be_resumed(env: Env) -> None:
    env.state.mkdir()
    env.routine("daily", cron="0 9 * * *")
    assert env.run_cli("pause", "daily").returncode == 0
    (env.routines / "daily.md").unlink()
    resumed = env.run_cli("resume", "daily")
    assert (resumed.returncode, resumed.stdout, resumed.stderr) == (0, RESUMED, "")
    assert paused(env) == frozenset()
    gone = env.run_cli("pause", "daily")  # but not paused again
    assert gone.returncode == 1
    assert one_line(gone.stderr).startswith('error: unknown routine "daily"')


def test_a_bad_name_is_refused_before_any_server_is_asked(env: Env) -> None:
    # Port 9 (discard) on loopback answers nothing: a request would fail otherwise.
    for command in ("pause", "resume"):
        argv = [command, "../x", "--url", "http://127.0.0.1:9"]
        bad = in_process(argv, cwd=env.root, environ=env.environ())
        assert (bad.returncode, bad.stdout) == (1, "")
        assert one_line(bad.stderr) == (
            'error: "../x" cannot be a routine name (no path separators, "." or "..")\n'
        )


async def test_over_http_the_server_pauses_and_resumes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRIO_ROUTINES_TOKEN", raising=False)
    monkeypatch.delenv("TRIO_ROUTINES_URL", raising=False)
    async with serving() as server:
        url = f"http://127.0.0.1:{server.port}"

        def args(*argv: str) -> argparse.Namespace:
            return build_parser().parse_args([*argv, "--url", url])

        assert await cmd_pause(args("pause", "daily")) == 0
        assert capsys.readouterr().out == PAUSED
        assert await server.store.paused() == {"daily"}
        assert await cmd_resume(args("resume", "daily")) == 0
        assert capsys.readouterr().out == RESUMED
        assert await server.store.paused() == frozenset()
        assert await server.store.resumed_at("daily") is not None

        for command, call in (("pause", cmd_pause), ("resume", cmd_resume)):
            with pytest.raises(CliError) as refused:
                await call(args(command, "nope"))
            assert str(refused.value).startswith(f"{url} answered 404: ")
            assert capsys.readouterr().out == ""


@asynccontextmanager
async def recording(
    extra: dict[str, object] | None = None,
) -> AsyncIterator[tuple[str, list[tuple[bytes, bytes]]]]:
    """A server on a loopback port that answers every request 200 with what our server says
    when it did what was asked (a pause, a resume of routine "daily", a wake-up's removal):
    its URL, and each request's first line and body as read off the socket."""
    seen: list[tuple[bytes, bytes]] = []

    async def answer(stream: trio.SocketStream) -> None:
        received = b""
        while b"\r\n\r\n" not in received:
            received += await stream.receive_some()
        head, _, body = received.partition(b"\r\n\r\n")
        length = [
            int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
            if line.startswith(b"content-length:")
        ]  # fmt: skip
        while len(body) < sum(length):
            body += await stream.receive_some()
        line = head.split(b"\r\n")[0]
        seen.append((line, body))
        said = (
            {"removed": True}
            if line.startswith(b"DELETE")
            else {"name": "daily", "paused": b"/pause " in line} | (extra or {})
        )
        data = json.dumps(said).encode()
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
            + data
        )
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(partial(trio.serve_tcp, answer, 0, host="127.0.0.1"))
        yield f"http://127.0.0.1:{listener.socket.getsockname()[1]}", seen
        nursery.cancel_scope.cancel()


async def test_over_http_each_sends_an_empty_json_object_to_its_route(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What reaches the server: the method as sent (HTTP's methods are case-sensitive, though
    our own server reads them in any case), the route and the body."""
    monkeypatch.delenv("TRIO_ROUTINES_TOKEN", raising=False)
    monkeypatch.delenv("TRIO_ROUTINES_URL", raising=False)
    async with recording() as (url, seen):
        for command, call in (("pause", cmd_pause), ("resume", cmd_resume)):
            assert await call(build_parser().parse_args([command, "daily", "--url", url])) == 0
    assert seen == [
        (b"POST /routines/daily/pause HTTP/1.1", b"{}"),
        (b"POST /routines/daily/resume HTTP/1.1", b"{}"),
    ]
    assert capsys.readouterr().out == PAUSED + RESUMED


async def test_over_http_a_resume_the_server_found_not_paused_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRIO_ROUTINES_TOKEN", raising=False)
    monkeypatch.delenv("TRIO_ROUTINES_URL", raising=False)
    for changed, said in ((False, "daily was not paused\n"), (True, RESUMED)):
        async with recording({"changed": changed}) as (url, _):
            args = build_parser().parse_args(["resume", "daily", "--url", url])
            assert await cmd_resume(args) == 0
        assert capsys.readouterr().out == said


async def test_over_http_a_pause_the_server_found_paused_already_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRIO_ROUTINES_TOKEN", raising=False)
    monkeypatch.delenv("TRIO_ROUTINES_URL", raising=False)
    for answer, said in (({"changed": False}, ALREADY), ({}, PAUSED), ({"changed": True}, PAUSED)):
        async with recording(answer) as (url, _):
            args = build_parser().parse_args(["pause", "daily", "--url", url])
            assert await cmd_pause(args) == 0
        assert capsys.readouterr().out == said


async def never(*args: object, **kwargs: object) -> None:
    await trio.sleep_forever()


@pytest.mark.parametrize(
    ("command", "hung", "asked"),
    [
        (
            ("pause", "daily"),
            "set_paused",
            '(pausing "daily") — the pause is not confirmed: try again once it answers',
        ),
        (
            ("pause", "daily"),
            "paused",
            "(reading the paused routines) — try again once it answers",
        ),
        (
            ("resume", "daily"),
            "paused",
            "(reading the paused routines) — try again once it answers",
        ),
        (
            ("resume", "daily"),
            "set_paused",
            '(resuming "daily") — the resume is not confirmed: try again once it answers',
        ),
    ],
)
def test_a_state_that_does_not_answer_ends_the_command_in_one_line(
    env: Env, monkeypatch: pytest.MonkeyPatch, command: tuple[str, ...], hung: str, asked: str
) -> None:
    env.state.mkdir()
    env.routine("daily", cron="0 9 * * *")
    if command[0] == "resume":
        assert env.run_cli("pause", "daily").returncode == 0  # resume finds it paused
    monkeypatch.setattr(output, "STORE_TIMEOUT", 0.2)
    monkeypatch.setattr(DirectoryStore, hung, never)
    assert_unanswered(env, command, asked)


def assert_unanswered(env: Env, command: tuple[str, ...], asked: str) -> None:
    """``command`` on a state that does not answer: exit 1, the one line naming the state
    and what it was ``asked``, nothing printed on standard output."""
    done = env.run_cli(*command)
    assert (done.returncode, done.stdout) == (1, "")
    line = one_line(done.stderr)
    assert line.startswith(f"error: the state store {env.state} did not answer within ")
    assert line.endswith(f" {asked}\n")
