"""``run`` and ``fire`` (``trio_routines.cli.firing``), pinned in this process: what each prints
and exits with for every outcome, on a state directory with a scripted agent (``py:``) and
against a server's answers (``--url``): the request sent, and every shape of answer."""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import re
import signal
import sys
from datetime import UTC, datetime
from typing import Any

import pytest
import trio
from procs import Env

from trio_routines.cli import firing
from trio_routines.cli.client import Answer, Server
from trio_routines.cli.firing import cmd_fire, cmd_run, fire_result_json
from trio_routines.cli.output import CliError
from trio_routines.cli.parser import build_parser
from trio_routines.records import Outcome
from trio_routines.scheduler import FireResult
from trio_routines.stores.directory import DirectoryStore
from trio_routines.testing.scripted import Complete, Fail, Hang, ScriptedAgent
from trio_routines.turns import TurnResult

SLOT = "2026-07-07T09:00:00.000Z"
AT = datetime(2026, 7, 7, 9, tzinfo=UTC)
URL = "http://127.0.0.1:9"  # never reached: Server.call answers here

#: The agent of ``py:test_pinned_cli_firing:AGENT``; each test scripts its own.
AGENT = ScriptedAgent()
SPEC = f"py:{__name__}:AGENT"


@pytest.fixture
def agent(monkeypatch: pytest.MonkeyPatch) -> ScriptedAgent:
    fresh = ScriptedAgent()
    monkeypatch.setattr(sys.modules[__name__], "AGENT", fresh)
    return fresh


# --- on a state directory ---------------------------------------------------------------------


def test_run_prints_the_reply_and_ends_it_with_one_newline(env: Env, agent: ScriptedAgent) -> None:
    env.routine("adhoc", prompt="hello")
    agent.script(Complete(reply="one\ntwo"), Complete(reply="ended\n"), Complete(reply=""))
    for printed in ("one\ntwo\n", "ended\n", ""):
        done = env.run_cli("run", "adhoc", "--agent", SPEC, "--log-level", "WARNING")
        assert (done.returncode, done.stdout, done.stderr) == (0, printed, "")
    assert [turn.text for turn in agent.turns] == ["hello"] * 3
    agent.script(Fail("it broke"))
    failed = env.run_cli("run", "adhoc", "--agent", SPEC, "--log-level", "WARNING")
    assert (failed.returncode, failed.stdout) == (1, "")
    assert "adhoc failed" in failed.stderr


class _Terminal:
    """This process's stdout, as a terminal would be: ``isatty`` is all that differs."""

    def isatty(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(sys.stdout, name)


class _SysOnATerminal:
    stdout = _Terminal()

    def __getattr__(self, name: str) -> Any:
        return getattr(sys, name)


@pytest.mark.parametrize("terminal", [True, False])
def test_run_shows_a_replys_escape_sequences_escaped_only_on_a_terminal(
    env: Env, agent: ScriptedAgent, monkeypatch: pytest.MonkeyPatch, terminal: bool
) -> None:
    env.routine("adhoc", prompt="hello")
    if terminal:
        monkeypatch.setattr(firing, "sys", _SysOnATerminal())
    agent.script(Complete(reply="hi\x1b]0;pwned\x07\x1b[31mred\n\tok\u202e\n"))
    done = env.run_cli("run", "adhoc", "--agent", SPEC, "--log-level", "WARNING")
    shown = "hi\\x1b]0;pwned\\x07\\x1b[31mred\n\tok\\u202e\n"
    raw = "hi\x1b]0;pwned\x07\x1b[31mred\n\tok\u202e\n"
    assert (done.returncode, done.stdout) == (0, shown if terminal else raw)


class _Screen(io.StringIO):
    """One terminal that the reply and the log both write to."""

    def isatty(self) -> bool:
        return True


def test_a_log_line_during_a_reply_on_one_terminal_starts_a_line_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    screen = _Screen()
    monkeypatch.setattr(firing, "sys", argparse.Namespace(stdout=screen, stderr=screen))
    monkeypatch.setattr(firing.log, "handlers", [logging.StreamHandler(screen)])
    monkeypatch.setattr(firing.log, "propagate", False)
    reply = firing._ReplyLine(ends_for_logs=True)
    assert reply.open is False
    with reply:
        screen.write("partial")
        reply.open = True
        firing.log.warning("the turn ended")
        assert reply.open is False
        firing.log.warning("and again")  # the line was ended already: no blank line
        screen.write("done\n")
    reply.open = True
    firing.log.warning("after the reply")  # the filter is gone with the block
    assert screen.getvalue() == ("partial\nthe turn ended\nand again\ndone\nafter the reply\n")
    elsewhere = firing._ReplyLine(ends_for_logs=False)  # the log not on the reply's terminal
    with elsewhere:
        elsewhere.open = True
        firing.log.warning("said")
    assert elsewhere.open is True
    assert screen.getvalue().endswith("after the reply\nsaid\n")


@pytest.mark.parametrize(("out", "err"), [(True, True), (True, False), (False, True)])
def test_run_ends_the_replys_line_for_the_log_only_when_both_are_terminals(
    env: Env,
    agent: ScriptedAgent,
    monkeypatch: pytest.MonkeyPatch,
    out: bool,
    err: bool,
) -> None:
    made: list[bool] = []

    class Spied(firing._ReplyLine):
        def __init__(self, *, ends_for_logs: bool) -> None:
            made.append(ends_for_logs)
            super().__init__(ends_for_logs=ends_for_logs)

    class Streams:
        stdout = _Terminal() if out else sys.stdout
        stderr = _Terminal() if err else sys.stdout

    monkeypatch.setattr(firing, "_ReplyLine", Spied)
    monkeypatch.setattr(firing, "sys", Streams())
    env.routine("adhoc", prompt="hello")
    agent.script(Complete(reply="hi"))
    done = env.run_cli("run", "adhoc", "--agent", SPEC, "--log-level", "WARNING")
    assert done.returncode == 0
    assert made == [out and err]


def test_fire_prints_the_outcome_and_exits_by_it(env: Env, agent: ScriptedAgent) -> None:
    env.routine("daily", cron="0 9 * * *")
    agent.script(Fail("it broke"))
    common = ["--agent", SPEC, "--log-level", "WARNING", "--replica", "here:1"]
    failed = env.run_cli("fire", "daily", "--slot", SLOT, *common)
    assert failed.returncode == 1
    assert re.fullmatch(rf"daily {SLOT}: failed \(\d+ms\) — it broke\n", failed.stdout)
    (claim,) = env.history("daily")
    assert (claim["outcome"], claim["replica"]) == ("failed", "here:1")
    again = env.run_cli("fire", "daily", "--slot", SLOT, *common, "--json")
    assert again.returncode == 0
    assert again.stdout == (
        '{"name": "daily", "slot": "2026-07-07T09:00:00.000Z", "claimed": false, '
        '"outcome": null, "reason": "duplicate", "ms": null}\n'
    )
    later = "2026-07-08T09:00:00.000Z"
    done = env.run_cli("fire", "daily", "--slot", later, *common)
    assert done.returncode == 0
    assert re.fullmatch(rf"daily {later}: completed \(\d+ms\)\n", done.stdout)
    assert [turn.text for turn in agent.turns] == ["do the thing"] * 2


def test_a_failed_settle_is_retried_for_the_grace_given(
    env: Env, monkeypatch: pytest.MonkeyPatch, agent: ScriptedAgent
) -> None:
    """``--grace`` is also how long a fire's failed settle is retried: with none, not at all."""
    attempts: list[str] = []
    settle = DirectoryStore.settle

    async def failing_once(store: DirectoryStore, routine: str, *args: Any, **more: Any) -> bool:
        attempts.append(routine)
        if len(attempts) == 1:
            return False  # as a store says a settle it could not write
        return await settle(store, routine, *args, **more)

    monkeypatch.setattr(DirectoryStore, "settle", failing_once)
    env.routine("daily", cron="0 9 * * *")
    common = ["--agent", SPEC, "--log-level", "WARNING"]
    given_up = env.run_cli("fire", "daily", "--slot", SLOT, *common, "--grace", "0")
    assert given_up.returncode == 0, given_up.stderr
    assert attempts == ["daily"]
    assert [claim.get("outcome") for claim in env.history("daily")] == [None]
    later = "2026-07-08T09:00:00.000Z"
    retried = env.run_cli("fire", "daily", "--slot", later, *common, "--grace", "5")
    assert retried.returncode == 0, retried.stderr
    assert attempts == ["daily"] * 2
    assert [claim.get("outcome") for claim in env.history("daily")] == [None, "completed"]


@pytest.mark.parametrize("command", ["run", "fire"])
def test_without_an_agent_each_says_which_command_needs_one(
    env: Env, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRIO_ROUTINES_AGENT", raising=False)
    monkeypatch.delenv("TRIO_ROUTINES_URL", raising=False)
    env.routine("daily", cron="0 9 * * *")
    argv = [command, "daily", "--state", str(env.state), "--routines", str(env.routines)]
    if command == "fire":
        argv += ["--slot", SLOT]
    call = cmd_run if command == "run" else cmd_fire
    with pytest.raises(CliError, match=rf"^{command} needs an agent: pass --agent "):
        trio.run(call, build_parser().parse_args(argv))


@pytest.mark.parametrize("command", ["run", "fire"])
def test_a_broken_file_is_reported_once_even_before_an_unknown_name(
    env: Env, command: str, agent: ScriptedAgent
) -> None:
    env.routine("daily", cron="0 9 * * *")
    (env.routines / "broken.md").write_text("no front matter\n")
    slot = ["--slot", SLOT] if command == "fire" else []
    done = env.run_cli(command, "daily", *slot, "--agent", SPEC)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("broken.md") == 1
    assert "broken.md: must start with a '---' frontmatter line" in done.stderr
    unknown = env.run_cli(command, "nope", *slot, "--agent", SPEC)
    assert (unknown.returncode, unknown.stdout) == (1, "")
    assert unknown.stderr.count("broken.md") == 1  # the one meant may be the broken one
    assert unknown.stderr.splitlines()[-1] == (
        f'error: unknown routine "nope" — looked in {env.routines}; available: daily'
    )


@pytest.mark.parametrize("command", ["run", "fire"])
def test_sigterm_during_the_turn_stops_it_with_the_grace_given(
    env: Env, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The signal to this very process: the command's own watch takes it (``--grace 0``: the
    turn is interrupted at once)."""
    hanging = ScriptedAgent(Hang(), on_turn=lambda _: os.kill(os.getpid(), signal.SIGTERM))
    monkeypatch.setattr(sys.modules[__name__], "AGENT", hanging)
    env.routine("daily", cron="0 9 * * *")
    slot = ["--slot", SLOT] if command == "fire" else []
    done = env.run_cli(command, "daily", *slot, "--agent", SPEC, "--grace", "0")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "SIGTERM received — stopping now" in done.stderr
    if command == "fire":
        assert re.fullmatch(
            rf"daily {SLOT}: interrupted \(\d+ms\) — interrupted by stop\n", done.stdout
        )
        assert env.history("daily")[0]["outcome"] == "interrupted"
    else:
        assert done.stdout == ""


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        (Outcome.COMPLETED, 0),
        (Outcome.SKIPPED, 0),
        (Outcome.FAILED, 1),
        (Outcome.INTERRUPTED, 1),
    ],
)
def test_run_exits_0_for_a_completed_or_skipped_turn_and_1_otherwise(
    env: Env, monkeypatch: pytest.MonkeyPatch, outcome: Outcome, status: int
) -> None:
    async def ended(*_: Any) -> TurnResult:
        return TurnResult(outcome, 0)

    monkeypatch.setattr(firing, "stop_on_signals", ended)
    env.routine("adhoc")
    done = env.run_cli("run", "adhoc", "--agent", "echo")
    assert (done.returncode, done.stdout) == (status, "")


# --- what a fire's result shows ---------------------------------------------------------------


def shown(
    fired: FireResult, capsys: pytest.CaptureFixture[str], *, json: bool = False
) -> tuple[int, str]:
    status = firing._fire_shown(argparse.Namespace(json=json), fired)
    return status, capsys.readouterr().out


def test_a_fires_result_line_and_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    def fired(**more: Any) -> FireResult:
        return FireResult("daily", AT, **{"claimed": True, **more})

    assert shown(fired(outcome=Outcome.COMPLETED, ms=5), capsys) == (
        0,
        f"daily {SLOT}: completed (5ms)\n",
    )
    assert shown(fired(outcome=Outcome.SKIPPED, ms=0), capsys) == (
        0,
        f"daily {SLOT}: skipped (0ms)\n",
    )
    over = "over its budget: 1.2k of 1k tokens/day spent"
    assert shown(fired(outcome=Outcome.SKIPPED, ms=0, reason=over), capsys) == (
        0,
        f"daily {SLOT}: skipped (0ms): {over}\n",
    )
    assert shown(fired(outcome=Outcome.FAILED), capsys) == (1, f"daily {SLOT}: failed\n")
    # Why, in one line (through a server, said nowhere else).
    broke = fired(outcome=Outcome.FAILED, ms=3, failed="exit status 3:\nit broke")
    assert shown(broke, capsys) == (1, f"daily {SLOT}: failed (3ms) — exit status 3: it broke\n")
    assert shown(fired(outcome=Outcome.INTERRUPTED, ms=7), capsys)[0] == 1
    assert shown(fired(), capsys) == (1, f"daily {SLOT}: unreported\n")
    assert shown(fired(claimed=False, reason="stale"), capsys) == (
        0,
        f"daily {SLOT}: not claimed (stale)\n",
    )
    status, out = shown(fired(outcome=Outcome.FAILED, ms=3, failed="boom"), capsys, json=True)
    assert status == 1
    assert out == (
        '{"name": "daily", "slot": "2026-07-07T09:00:00.000Z", "claimed": true, '
        '"outcome": "failed", "reason": null, "ms": 3, "failed": "boom"}\n'
    )
    assert shown(fired(claimed=False, reason="duplicate"), capsys, json=True)[0] == 0


def test_a_fires_json_has_failed_only_when_it_failed() -> None:
    assert fire_result_json(FireResult("d", AT, claimed=False, reason="stale")) == {
        "name": "d",
        "slot": SLOT,
        "claimed": False,
        "outcome": None,
        "reason": "stale",
        "ms": None,
    }
    assert fire_result_json(
        FireResult("d", AT, claimed=True, outcome=Outcome.FAILED, ms=4, failed="x")
    ) == {
        "name": "d",
        "slot": SLOT,
        "claimed": True,
        "outcome": "failed",
        "reason": None,
        "ms": 4,
        "failed": "x",
    }


# --- against a server ---------------------------------------------------------------------------


def answering(monkeypatch: pytest.MonkeyPatch, *answers: Answer) -> list[tuple[Any, ...]]:
    """``Server.call`` answering ``answers`` in turn; each call's arguments, in order."""
    calls: list[tuple[Any, ...]] = []
    queue = list(answers)

    async def call(
        _server: Server, method: str, path: str, body: Any = None, *, waits: bool = False
    ) -> Answer:
        calls.append((method, path, body, waits))
        return queue.pop(0)

    monkeypatch.setattr(Server, "call", call)
    monkeypatch.delenv("TRIO_ROUTINES_URL", raising=False)
    return calls


def remote(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args([*argv, "--url", URL])


async def test_run_over_http_posts_the_name_and_waits_and_prints_the_reply(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = answering(
        monkeypatch,
        Answer(200, {"ran": True, "reply": "one two\nthree\n", "outcome": "completed"}),
        Answer(200, {"ran": True, "reply": "cut", "truncated": True, "outcome": "completed"}),
        Answer(200, {"ran": True, "reply": "", "truncated": "yes", "outcome": "completed"}),
        Answer(200, {"ran": True, "reply": ["x"], "outcome": "completed"}),
    )
    for out, err in [
        ("one two\nthree\n", ""),
        ("cut\n", "(the reply was cut by the server at 64 KiB)\n"),
        ("", ""),
        ("", ""),
    ]:
        assert await cmd_run(remote("run", "adhoc")) == 0
        assert capsys.readouterr() == (out, err)
    assert calls == [("POST", "/run", {"name": "adhoc", "wait": True}, True)] * 4


async def test_run_over_http_says_why_it_did_not_run_or_did_not_complete(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answering(
        monkeypatch,
        Answer(200, {"ran": False, "reason": "a wake-up turn runs"}),
        Answer(200, {"ran": False}),
        Answer(200, {"ran": True, "outcome": "failed", "failed": "exit 2", "reply": "half"}),
        Answer(200, {"ran": True, "outcome": "interrupted"}),
    )
    assert await cmd_run(remote("run", "adhoc")) == 0
    assert capsys.readouterr() == ("", "adhoc: not run — a wake-up turn runs\n")
    assert await cmd_run(remote("run", "adhoc")) == 0
    assert capsys.readouterr() == ("", "adhoc: not run — its session is busy\n")
    assert await cmd_run(remote("run", "adhoc")) == 1
    assert capsys.readouterr() == ("half\n", "adhoc: failed — exit 2\n")
    assert await cmd_run(remote("run", "adhoc")) == 1
    assert capsys.readouterr() == ("", "adhoc: interrupted — no reason given\n")


@pytest.mark.parametrize(
    "answer",
    [
        Answer(200, ["ran"]),
        Answer(200, {"ran": "yes"}),
        Answer(200, {"reply": "x"}),
        Answer(200, None),
    ],
)
async def test_run_over_http_refuses_an_answer_that_is_not_a_turns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], answer: Answer
) -> None:
    answering(monkeypatch, answer)
    with pytest.raises(CliError) as refused:
        await cmd_run(remote("run", "adhoc"))
    assert str(refused.value) == f"{URL}: the answer is not a turn's"
    assert capsys.readouterr() == ("", "")


async def test_a_refusal_or_a_bad_name_over_http_is_one_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = answering(
        monkeypatch, Answer(404, {"error": "no routine"}), Answer(409, {"error": "busy"})
    )
    with pytest.raises(CliError, match=rf"^{URL} answered 404: no routine$"):
        await cmd_run(remote("run", "adhoc"))
    with pytest.raises(CliError, match=rf"^{URL} answered 409: busy$"):
        await cmd_fire(remote("fire", "adhoc", "--slot", SLOT))
    for argv in (["run", "../x"], ["fire", "../x", "--slot", SLOT]):
        with pytest.raises(CliError, match="cannot be a routine name"):
            await (cmd_run if argv[0] == "run" else cmd_fire)(remote(*argv))
    assert len(calls) == 2


async def test_fire_over_http_posts_the_slot_and_shows_the_servers_result(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = answering(
        monkeypatch,
        Answer(200, {"claimed": True, "outcome": "completed", "ms": 12}),
        Answer(200, {"claimed": True, "outcome": "failed", "ms": True, "failed": "boom"}),
        Answer(200, {"claimed": "yes", "reason": "duplicate", "ms": "3", "failed": 4}),
        Answer(200, {"claimed": True, "outcome": "skipped", "ms": 0, "reason": "busy"}),
    )
    assert await cmd_fire(remote("fire", "daily", "--slot", "2026-07-07T11:00+02:00")) == 0
    assert capsys.readouterr().out == f"daily {SLOT}: completed (12ms)\n"
    assert await cmd_fire(remote("fire", "daily", "--slot", SLOT, "--json")) == 1
    assert json.loads(capsys.readouterr().out) == {
        "name": "daily",
        "slot": SLOT,
        "claimed": True,
        "outcome": "failed",
        "reason": None,
        "ms": None,
        "failed": "boom",
    }
    assert await cmd_fire(remote("fire", "daily", "--slot", SLOT, "--json")) == 0
    assert json.loads(capsys.readouterr().out) == {
        "name": "daily",
        "slot": SLOT,
        "claimed": False,
        "outcome": None,
        "reason": "duplicate",
        "ms": None,
    }
    assert await cmd_fire(remote("fire", "daily", "--slot", SLOT)) == 0
    assert capsys.readouterr().out == f"daily {SLOT}: skipped (0ms): busy\n"
    assert calls == [("POST", "/fire", {"name": "daily", "slot": SLOT, "wait": True}, True)] * 4


@pytest.mark.parametrize(
    "body",
    [
        ["claimed"],  # no .get
        {"outcome": "completed"},  # no "claimed"
        {"claimed": True, "outcome": "exploded"},  # no such outcome
        {"claimed": True, "outcome": ["completed"]},  # not even a text
    ],
)
async def test_fire_over_http_refuses_an_answer_that_is_not_a_fires(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], body: Any
) -> None:
    answering(monkeypatch, Answer(200, body))
    with pytest.raises(CliError) as refused:
        await cmd_fire(remote("fire", "daily", "--slot", SLOT))
    assert str(refused.value) == f"{URL}: the answer is not a fire's"
    assert refused.value.__suppress_context__
    assert capsys.readouterr() == ("", "")
