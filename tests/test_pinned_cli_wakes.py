"""``wake`` and ``unwake`` (``trio_routines.cli.wakes``), pinned in this process: on a state
directory (the wake-up stored, its line or its JSON, the refusals in the command line's words)
and against a real server on a loopback port (``--url``)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from procs import Env, one_line
from test_http import serving
from test_pinned_cli_pausing import assert_unanswered, never, recording

from trio_routines.cli import output
from trio_routines.cli.client import Answer, Server
from trio_routines.cli.output import CliError
from trio_routines.cli.parser import build_parser
from trio_routines.cli.wakes import added_line, cmd_unwake, cmd_wake
from trio_routines.http.wakeupapi import NOT_FIRED_HERE
from trio_routines.instants import format_iso, parse_iso
from trio_routines.records import Wakeup
from trio_routines.stores.directory import DirectoryStore
from trio_routines.wakeups import NO_PROMPT

FIRE_AT = datetime(2026, 7, 7, 9, tzinfo=UTC)
NEVER = "0 0 31 2 *"  # 31 February: never fires
NEVER_SAID = "this cron never fires (or fires only once) — use --in for a one-shot."


def test_the_added_line_says_when_for_whom_and_how_to_cancel() -> None:
    once = Wakeup(id="w1", session="chat:42", prompt="p", fire_at=FIRE_AT)
    assert added_line(once) == (
        'wake-up w1 at 2026-07-07T09:00:00.000Z for session "chat:42" — cancel with: '
        "unwake w1 --session chat:42"
    )
    cron = Wakeup(id="w2", session="s", prompt="p", fire_at=FIRE_AT, cron="0 9 * * *")
    assert added_line(cron) == (
        'wake-up w2 cron "0 9 * * *", first at 2026-07-07T09:00:00.000Z for session "s" — '
        "cancel with: unwake w2 --session s"
    )
    zoned = Wakeup(
        id="w3",
        session="s\x1b",
        prompt="p",
        fire_at=FIRE_AT,
        cron="0 11 * * *",
        tz="Europe/Berlin",
        until=FIRE_AT + timedelta(days=2),
    )
    assert added_line(zoned) == (
        'wake-up w3 cron "0 11 * * *" Europe/Berlin, first at 2026-07-07T09:00:00.000Z, until '
        '2026-07-09T09:00:00.000Z for session "s\\x1b" — cancel with: unwake w3 --session '
        "$'s\\x1b'"  # a word bash reads back as the session, never the escape itself
    )


def test_the_cancel_command_is_one_shell_word_whatever_the_session() -> None:
    for session, word in [
        ("chat 42", "'chat 42'"),
        ("it's $HOME", "'it'\"'\"'s $HOME'"),
        ("a\nb", "$'a\\x0ab'"),
        ("a\\b'", "$'a\\\\b\\''"),
    ]:
        line = added_line(Wakeup(id="w1", session=session, prompt="p", fire_at=FIRE_AT))
        assert line.endswith(f"unwake w1 --session {word}")
    # A session that begins with a dash would be read as an option: `--session=-x`.
    line = added_line(Wakeup(id="w1", session="-x", prompt="p", fire_at=FIRE_AT))
    assert line.endswith("unwake w1 --session=-x")


def test_a_one_shot_is_stored_from_now_said_and_cancelled(env: Env) -> None:
    before = datetime.now(UTC)
    added = env.run_cli("wake", "--session", "chat", "--in", "30m", "--prompt", "look again")
    after = datetime.now(UTC)
    assert added.returncode == 0, added.stderr
    (stored,) = env.wakeups()
    assert (stored["session"], stored["prompt"], stored["origin"]) == (
        "chat",
        "look again",
        {"kind": "cli", "depth": 0},
    )
    assert [key for key in ("cron", "tz", "until") if key in stored] == []
    fire_at = parse_iso(stored["fireAt"])
    assert fire_at is not None
    assert before - timedelta(milliseconds=1) <= fire_at - timedelta(minutes=30) <= after
    assert added.stdout == (
        f'wake-up {stored["id"]} at {stored["fireAt"]} for session "chat" — cancel with: '
        f"unwake {stored['id']} --session chat\n"
    )

    other = env.run_cli("unwake", stored["id"], "--session", "other")
    assert (other.returncode, other.stdout) == (1, "")
    assert one_line(other.stderr) == (
        f'error: no pending wake-up "{stored["id"]}" for session "other" (already fired, '
        "cancelled, or another session's)\n"
    )
    cancelled = env.run_cli("unwake", stored["id"], "--session", "chat")
    assert (cancelled.returncode, cancelled.stdout, cancelled.stderr) == (
        0,
        f"wake-up {stored['id']} cancelled\n",
        "",
    )
    assert env.wakeups() == []


def test_a_recurring_one_keeps_its_zone_and_end_and_json_is_one_line(env: Env) -> None:
    until = (datetime.now(UTC) + timedelta(days=3)).replace(microsecond=0)
    added = env.run_cli(
        "wake", "--session", "s", "--cron", "0 9 * * *", "--tz", "Europe/Berlin",
        "--until", until.isoformat(), "--prompt", "-", "--json",
        stdin="from stdin\n",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    (stored,) = env.wakeups()
    assert (stored["cron"], stored["tz"], stored["prompt"]) == (
        "0 9 * * *",
        "Europe/Berlin",
        "from stdin\n",
    )
    assert parse_iso(stored["until"]) == until
    assert stored["origin"] == {"kind": "cli", "depth": 0}
    assert added.stdout.count("\n") == 1
    assert json.loads(added.stdout) == stored


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--in", "5m", "--tz", "UTC"], "--tz goes with --cron"),
        (["--in", "5m", "--until", "2026-07-07T09:00Z"], "--until goes with --cron"),
    ],
)
def test_a_zone_or_an_end_without_cron_is_a_usage_error(
    env: Env, args: list[str], message: str
) -> None:
    refused = env.run_cli("wake", "--session", "s", "--prompt", "p", *args)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == f"python -m trio_routines wake: error: {message} (see --help)\n"
    assert env.wakeups() == []


def test_a_refusal_speaks_of_the_options(env: Env) -> None:
    refused = env.run_cli("wake", "--session", "s", "--cron", NEVER, "--prompt", "p")
    assert (refused.returncode, refused.stdout) == (1, "")
    assert one_line(refused.stderr) == f"error: wake-up refused: {NEVER_SAID}\n"
    assert env.wakeups() == []


def test_a_wake_the_request_alone_refuses_creates_no_state(env: Env) -> None:
    assert not env.state.exists()
    for args in (["--in", "30s"], ["--cron", "* * * * *"], ["--in", "5m", "--session", " "]):
        refused = env.run_cli("wake", "--session", "s", "--prompt", "p", *args)
        assert (refused.returncode, refused.stdout) == (1, ""), refused.stderr
        assert one_line(refused.stderr).startswith("error: wake-up refused: ")
        assert not env.state.exists()
    added = env.run_cli("wake", "--session", "s", "--prompt", "p", "--in", "5m")
    assert added.returncode == 0, added.stderr
    assert env.state.is_dir()


def parsed(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


@pytest.fixture
def no_server_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TRIO_ROUTINES_TOKEN", "TRIO_ROUTINES_URL", "TRIO_ROUTINES_STATE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_server_env")
@pytest.mark.parametrize("prompt", ["", "  \n"])
async def test_a_wake_up_without_a_prompt_is_refused_over_http_as_on_the_state(
    tmp_path: Any, prompt: str
) -> None:
    # Over --url the server's words were its field's: "prompt" must be a non-empty string.
    async with serving() as server:
        url = f"http://127.0.0.1:{server.port}"
        for where in (["--url", url], ["--state", str(tmp_path / "state")]):
            args = parsed("wake", "--session", "s", "--in", "1h", "--prompt", prompt, *where)
            with pytest.raises(CliError) as refused:
                await cmd_wake(args)
            assert str(refused.value) == f"wake-up refused: {NO_PROMPT}"
        assert await server.store.list_wakeups() == []
    assert not (tmp_path / "state").exists()


@pytest.mark.usefixtures("no_server_env")
@pytest.mark.parametrize("fired_here", [True, False])
async def test_a_server_that_runs_no_wake_ups_adds_one_saying_who_fires_it(
    capsys: pytest.CaptureFixture[str], fired_here: bool
) -> None:
    # serve --no-wakeups stored it and said nothing: none fires it there.
    async with serving(wakeups=fired_here) as server:
        url = f"http://127.0.0.1:{server.port}"
        body = {"session": "chat", "prompt": "p", "in": "90s"}
        answer = await server.call("POST", "/wakeups", body)
        assert answer.status == 201
        assert answer.json.get("note") == (None if fired_here else NOT_FIRED_HERE)
        once = parsed("wake", "--session", "chat", "--in", "90s", "--prompt", "p", "--url", url)
        assert await cmd_wake(once) == 0
        assert len(await server.store.list_wakeups()) == 2
    said = capsys.readouterr()
    assert said.out.startswith("wake-up ")
    # (Only the notes: a log handler an earlier test left may write on stderr too.)
    notes = [line for line in said.err.splitlines() if line.startswith("note: ")]
    assert notes == ([] if fired_here else [f"note: {NOT_FIRED_HERE}"])


@pytest.mark.usefixtures("no_server_env")
async def test_over_http_the_server_adds_and_cancels(capsys: pytest.CaptureFixture[str]) -> None:
    async with serving() as server:
        url = f"http://127.0.0.1:{server.port}"
        before = server.scheduler.now()
        once = parsed("wake", "--session", "chat", "--in", "90s", "--prompt", "p", "--url", url)
        assert await cmd_wake(once) == 0
        (stored,) = await server.store.list_wakeups()
        assert (stored.session, stored.prompt, stored.cron) == ("chat", "p", None)
        assert stored.origin is not None
        assert stored.origin.kind.value == "http"
        assert before <= stored.fire_at - timedelta(seconds=90) <= server.scheduler.now()
        assert capsys.readouterr().out == added_line(stored) + "\n"

        until = (server.scheduler.now() + timedelta(days=2)).replace(microsecond=0)
        recurring = parsed(
            "wake", "--session", "s", "--cron", "0 9 * * *", "--tz", "Europe/Berlin",
            "--until", until.isoformat(), "--prompt", "q", "--json", "--url", url,
        )  # fmt: skip
        assert await cmd_wake(recurring) == 0
        (second,) = [w for w in await server.store.list_wakeups() if w.session == "s"]
        assert (second.cron, second.tz, second.until, second.prompt) == (
            "0 9 * * *",
            "Europe/Berlin",
            until,
            "q",
        )
        out = capsys.readouterr().out
        assert out.count("\n") == 1
        shown = json.loads(out)
        assert (shown["id"], shown["until"], "prompt" in shown) == (
            second.id,
            format_iso(until),
            False,
        )
        plain = parsed(
            "wake", "--session", "p", "--cron", "0 9 * * *", "--prompt", "r", "--url", url
        )
        assert await cmd_wake(plain) == 0
        (third,) = [w for w in await server.store.list_wakeups() if w.session == "p"]
        assert (third.tz, third.until is not None) == (None, True)  # the server's default end
        capsys.readouterr()

        with pytest.raises(CliError) as refused:
            await cmd_wake(
                parsed("wake", "--session", "s", "--cron", NEVER, "--prompt", "p", "--url", url)
            )
        assert str(refused.value) == f"wake-up refused: {NEVER_SAID}"

        assert await cmd_unwake(parsed("unwake", stored.id, "--session", "chat", "--url", url)) == 0
        assert capsys.readouterr().out == f"wake-up {stored.id} cancelled\n"
        assert stored.id not in [w.id for w in await server.store.list_wakeups()]
        with pytest.raises(CliError) as gone:
            await cmd_unwake(parsed("unwake", stored.id, "--session", "chat", "--url", url))
        assert str(gone.value) == (
            f'no pending wake-up "{stored.id}" for session "chat" (already fired, cancelled, '
            "or another session's)"
        )
        assert capsys.readouterr().out == ""


@pytest.mark.usefixtures("no_server_env")
async def test_over_http_a_refusal_is_the_servers_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with serving(token="the-token") as server:  # and we send none
        url = f"http://127.0.0.1:{server.port}"
        hint = " — set TRIO_ROUTINES_TOKEN to the server's token"
        with pytest.raises(CliError) as refused:
            await cmd_unwake(parsed("unwake", "w1", "--session", "s", "--url", url))
        assert str(refused.value).startswith(f"{url} answered 401: ")
        assert str(refused.value).endswith(hint)
        with pytest.raises(CliError) as refused:
            await cmd_wake(
                parsed("wake", "--session", "s", "--in", "5m", "--prompt", "p", "--url", url)
            )
        assert str(refused.value).startswith(f"{url} answered 401: ")
        assert capsys.readouterr().out == ""


@pytest.mark.usefixtures("no_server_env")
async def test_an_answer_that_is_no_wake_up_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sent: list[tuple[str, str, Any]] = []

    async def call(_server: Server, method: str, path: str, body: Any = None) -> Answer:
        sent.append((method, path, body))
        return Answer(201, {"wakeup": {"id": "w1"}})

    monkeypatch.setattr(Server, "call", call)
    url = "http://127.0.0.1:9"
    with pytest.raises(CliError) as refused:
        await cmd_wake(
            parsed("wake", "--session", "s", "--in", "5m", "--prompt", "p", "--url", url)
        )
    assert str(refused.value).startswith(f"{url}: the answer is not a wake-up (")
    assert sent == [("POST", "/wakeups", {"session": "s", "prompt": "p", "in": 300.0})]
    assert capsys.readouterr().out == ""


@pytest.mark.usefixtures("no_server_env")
async def test_over_http_unwake_deletes_the_wake_up_of_its_session(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What reaches the server: the method as sent (HTTP's methods are case-sensitive, though
    our own server reads them in any case), the id in the path and the session in the query,
    both percent-encoded."""
    async with recording() as (url, seen):
        assert await cmd_unwake(parsed("unwake", "w/1", "--session", "chat:42", "--url", url)) == 0
    assert seen == [(b"DELETE /wakeups/w%2F1?session=chat%3A42 HTTP/1.1", b"")]
    assert capsys.readouterr().out == "wake-up w/1 cancelled\n"


@pytest.mark.parametrize(
    ("command", "hung", "asked"),
    [
        (
            ("wake", "--session", "chat", "--in", "30m", "--prompt", "look again"),
            "add_wakeup",
            '(adding a wake-up for session "chat") — the wake-up is not confirmed: once the'
            " store answers, look for it before adding it again",
        ),
        (
            ("unwake", "w1", "--session", "chat"),
            "remove_wakeup",
            '(cancelling wake-up "w1" of session "chat") — the cancellation is not'
            " confirmed: try again once it answers",
        ),
    ],
)
def test_a_state_that_does_not_answer_ends_a_wake_up_command_in_one_line(
    env: Env, monkeypatch: pytest.MonkeyPatch, command: tuple[str, ...], hung: str, asked: str
) -> None:
    env.state.mkdir()  # a state some scheduler made (unwake refuses one that is not there)
    monkeypatch.setattr(output, "STORE_TIMEOUT", 0.2)
    monkeypatch.setattr(DirectoryStore, hung, never)
    assert_unanswered(env, command, asked)
