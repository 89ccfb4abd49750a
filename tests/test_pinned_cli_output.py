"""What every command shares (``trio_routines.cli.output``), pinned function by function: the
options' fall-backs to the environment, the owner check, the store opened and closed, the
routines loaded and picked with their one-line reasons, what is printed and how."""

from __future__ import annotations

import argparse
import logging
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_routines import tickets
from trio_routines.agents import EchoAgent
from trio_routines.cli import output
from trio_routines.cli.output import CliError
from trio_routines.context import FireContext
from trio_routines.names import name_problem
from trio_routines.routinedir import load_routines


def ns(**values: Any) -> argparse.Namespace:
    return argparse.Namespace(**values)


def test_a_cli_error_exits_1_unless_told_and_a_name_is_quoted_short_and_visible() -> None:
    assert CliError("x").code == 1
    assert CliError("x", 2).code == 2
    assert str(CliError("one line")) == "one line"
    assert output.quoted("daily") == '"daily"'
    assert output.quoted("a\x1b[2J") == '"a\\x1b[2J"'
    assert output.quoted("n" * 100) == '"' + "n" * 64 + '"'


def test_the_state_and_the_replica_fall_back_to_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TRIO_ROUTINES_STATE", raising=False)
    monkeypatch.delenv("TRIO_ROUTINES_REPLICA", raising=False)
    assert output.state_arg(ns(state=None)) == ".state"
    assert output.state_arg(ns(state="here")) == "here"
    monkeypatch.setenv("TRIO_ROUTINES_STATE", "from-env")
    assert output.state_arg(ns(state=None)) == "from-env"
    assert output.state_arg(ns(state="here")) == "here"

    assert output.replica_arg(ns()) is None
    assert output.replica_arg(ns(replica=None)) is None
    assert output.replica_arg(ns(replica="r1")) == "r1"
    monkeypatch.setenv("TRIO_ROUTINES_REPLICA", "")
    assert output.replica_arg(ns()) is None
    monkeypatch.setenv("TRIO_ROUTINES_REPLICA", "r2")
    assert output.replica_arg(ns()) == "r2"
    assert output.replica_arg(ns(replica="r1")) == "r1"
    with pytest.raises(CliError) as caught:
        output.replica_arg(ns(replica="x" * 200))
    assert (str(caught.value), caught.value.code) == (
        "--replica: a replica id must be 1 to 128 characters",
        2,
    )


def test_a_state_is_labelled_without_its_credentials() -> None:
    assert output.state_label("/var/lib/state") == "/var/lib/state"
    label = output.state_label("postgresql://user:s3cret@db/routines")
    assert "s3cret" not in label
    assert label.startswith("postgresql://user:")


def test_the_agent_comes_from_the_option_else_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TRIO_ROUTINES_AGENT", raising=False)
    with pytest.raises(CliError) as caught:
        output.agent_arg(ns(agent=None), "fire")
    assert (str(caught.value), caught.value.code) == (
        "fire needs an agent: pass --agent echo|cmd:<command>|py:<module>:<attr>|"
        "http(s)://host/path or set TRIO_ROUTINES_AGENT",
        2,
    )
    assert output.describe_agent(ns(agent=None)) == ""
    assert isinstance(output.agent_arg(ns(agent="echo"), "fire"), EchoAgent)
    assert (
        output.describe_agent(ns(agent="cmd:/opt/agent/run --key secret")) == "cmd:/opt/agent/run …"
    )
    monkeypatch.setenv("TRIO_ROUTINES_AGENT", "echo")
    assert isinstance(output.agent_arg(ns(agent=None), "fire"), EchoAgent)
    assert output.describe_agent(ns(agent=None)) == "echo"
    assert output.describe_agent(ns(agent="https://u:p@h/a?k=1")) == "https://h/a"


@pytest.mark.parametrize(
    ("spec", "said", "code"),
    [
        ("bogus", 'unknown agent "bogus" — ', 2),  # the spec itself: a usage error
        ("py:os:no_such_attribute", 'module "os" has no attribute "no_such_attribute"', 2),
        ("py:no_such_module_here:x", 'cannot import module "no_such_module_here" for py: ', 1),
    ],
)
def test_an_agent_the_command_line_cannot_use_is_a_usage_error_unless_it_may_pass(
    spec: str, said: str, code: int
) -> None:
    # A module that does not import may be installed by the next start: exit 1 is restarted.
    with pytest.raises(CliError) as caught:
        output.agent_arg(ns(agent=spec), "serve")
    assert str(caught.value).startswith(said)
    assert caught.value.code == code


@pytest.mark.parametrize("token", ["", None])
def test_without_a_token_the_agents_tickets_keep_this_processs_key(
    monkeypatch: pytest.MonkeyPatch, token: str | None
) -> None:
    if token is None:
        monkeypatch.delenv("TRIO_ROUTINES_TOKEN", raising=False)
    else:
        monkeypatch.setenv("TRIO_ROUTINES_TOKEN", token)
    monkeypatch.setattr(tickets, "_key", b"this process's own key")
    output.agent_arg(ns(agent="echo"), "run")
    assert tickets._key == b"this process's own key"


def test_with_a_token_the_agents_tickets_are_signed_as_every_replica_given_it_signs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRIO_ROUTINES_TOKEN", "the-token-of-every-replica")
    monkeypatch.setattr(tickets, "_key", b"this process's own key")
    output.agent_arg(ns(agent="echo"), "run")
    ticket = tickets.make_ticket(FireContext("run", "team", routine="standup"))
    monkeypatch.setattr(tickets, "_key", b"another process's key")
    tickets.share_key("the-token-of-every-replica")  # a replica given the same token
    assert tickets.read_ticket(ticket) == FireContext("run", "team", routine="standup")


def test_a_user_is_named_with_its_uid_or_by_its_uid_alone() -> None:
    assert output._user(0) == "root (uid 0)"
    unknown = next(uid for uid in range(61234, 62000) if not _exists(uid))
    assert output._user(unknown) == f"uid {unknown}"


def _exists(uid: int) -> bool:
    import pwd

    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def test_only_a_directory_another_user_owns_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    output.check_owner(str(state), "pause")  # ours
    output.check_owner(str(tmp_path / "absent"), "pause")
    output.check_owner("postgresql://user@db/routines", "pause")  # never looked at as a path
    owner = state.stat().st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    (tmp_path / "file").write_text("")
    with pytest.raises(CliError, match=r"is a regular file, not a state directory \(ENOTDIR\)"):
        output.check_owner(str(tmp_path / "file"), "pause")  # not a directory: what it is
    output.check_owner("postgresql://user@db/routines", "pause")
    them, me = output._user(owner), output._user(owner + 1)
    with pytest.raises(CliError) as caught:
        output.check_owner(str(state), "pause")
    assert str(caught.value) == (
        f"pause refused: the state directory {state} belongs to {them}, not to {me}, and the "
        "service could not change what pause wrote there — send it to the running service "
        f"with --url URL, or run it as {them}; nothing was changed"
    )
    with pytest.raises(CliError) as caught:
        output.check_owner(str(state), "serve")
    assert str(caught.value).endswith(f"wrote there — run it as {them}; nothing was changed")


class _Store:
    closed = False

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()
        self.closed = True


async def _use(state: str, writes: str | None = None) -> None:
    async with output.open_state(state, writes=writes):
        await trio.lowlevel.checkpoint()


async def _fail_in_a_cancelled_scope() -> None:
    """A body that fails inside a cancelled scope: the store is closed all the same."""
    with trio.CancelScope() as scope:
        async with output.open_state("s"):
            scope.cancel()
            raise RuntimeError


async def test_a_state_is_opened_with_its_schema_rule_and_always_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[tuple[str, str]] = []
    stores: list[_Store] = []

    def open_store(state: str, *, migrate: str) -> _Store:
        opened.append((state, migrate))
        stores.append(_Store())
        return stores[-1]

    monkeypatch.setattr(output, "open_store", open_store)
    async with output.open_state("s") as store:
        assert store is stores[0]
        assert not stores[0].closed
    assert stores[0].closed
    async with output.open_state("s", writes="pause"):
        pass
    async with output.open_state("s", migrate="always"):
        pass
    async with output.open_state("s", writes="serve", migrate="never"):
        pass
    assert opened == [("s", "never"), ("s", "create"), ("s", "always"), ("s", "never")]
    with pytest.raises(RuntimeError):
        await _fail_in_a_cancelled_scope()
    assert stores[-1].closed
    # A state that writes is checked for its owner before it is opened.
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setattr(os, "geteuid", lambda: state.stat().st_uid + 1)
    with pytest.raises(CliError, match=r"^pause refused: "):
        await _use(str(state), writes="pause")
    assert len(opened) == 5
    async with output.open_state(str(state)):
        pass

    def no_driver(state: str, *, migrate: str) -> _Store:
        raise ImportError("No module named 'psycopg'")

    monkeypatch.setattr(output, "open_store", no_driver)
    with pytest.raises(CliError) as caught:
        await _use("postgresql://u:pw@db/x")
    assert str(caught.value) == (
        f"--state {output.state_label('postgresql://u:pw@db/x')}: PostgreSQL support is not "
        "available (pip install 'trio-routines[postgres]'): No module named 'psycopg'"
    )
    assert caught.value.__suppress_context__


async def test_routines_load_from_a_directory_that_must_exist(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(CliError) as caught:
        await output.load(str(tmp_path / "absent"), report=True)
    assert str(caught.value) == (
        f"--routines {tmp_path / 'absent'}: no such directory (create it, or point --routines "
        "at the directory holding your <name>.md files)"
    )
    (tmp_path / "daily.md").write_text("---\ncron: 0 9 * * *\n---\nhi\n")
    (tmp_path / "bad.md").write_text("oops")
    caplog.set_level(logging.WARNING, "trio_routines")
    quiet = await output.load(str(tmp_path), report=False)
    assert [r.name for r in quiet.routines] == ["daily"]
    assert caplog.records == []
    await output.load(str(tmp_path), report=True)
    (failure,) = quiet.failures
    assert [r.getMessage() for r in caplog.records] == [f"{failure} — skipped"]
    assert caplog.records[0].levelno == logging.WARNING


def test_a_routine_is_picked_or_refused_with_the_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "daily.md").write_text("---\ncron: 0 9 * * *\n---\nhi\n")
    (tmp_path / "weekly.md").write_text("---\ncron: 0 9 * * 1\n---\nhi\n")
    (tmp_path / "bad.md").write_text("oops")
    result = load_routines(str(tmp_path))
    caplog.set_level(logging.WARNING, "trio_routines")
    assert output.pick(result, "daily", str(tmp_path)).name == "daily"
    assert caplog.records == []
    (failure,) = result.failures
    with pytest.raises(CliError) as caught:
        output.pick(result, "bad", str(tmp_path))
    assert str(caught.value) == str(failure)
    assert caplog.records == []
    with pytest.raises(CliError) as caught:
        output.pick(result, "nope", str(tmp_path))
    assert str(caught.value) == (
        f'unknown routine "nope" — looked in {tmp_path}; available: daily, weekly'
    )
    assert [r.getMessage() for r in caplog.records] == [f"{failure} — skipped"]
    with pytest.raises(CliError) as caught:
        output.pick(load_routines(str(tmp_path / "none")), "nope", "elsewhere")
    assert str(caught.value) == 'unknown routine "nope" — looked in elsewhere; available: (none)'
    with pytest.raises(CliError) as caught:
        output.check_name("../up")
    assert str(caught.value) == name_problem("../up")
    with pytest.raises(CliError):
        output.pick(result, "../up", str(tmp_path))
    output.check_name("daily")


def test_lines_and_json_are_printed_visible(capsys: pytest.CaptureFixture[str]) -> None:
    output.print_line("a\x1b[2Jb\tc")
    output.print_line()
    output.print_json({"k": "\x9b", "n": [1]})
    output.print_json({"k": 1}, indent=None)
    output.say("two\nlines \x1b")
    out, err = capsys.readouterr()
    assert out == 'a\\x1b[2Jb\\x09c\n\n{\n  "k": "\\u009b",\n  "n": [\n    1\n  ]\n}\n{"k": 1}\n'
    assert err == "two lines \\x1b\n"


class _Scheduler:
    def __init__(self) -> None:
        self.stops: list[float] = []
        self.stopped = trio.Event()

    def stop(self, grace: float) -> None:
        self.stops.append(grace)
        self.stopped.set()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
async def test_a_signal_during_the_body_stops_the_scheduler_with_the_grace(signum: int) -> None:
    scheduler = _Scheduler()

    async def body() -> str:
        os.kill(os.getpid(), signum)
        await scheduler.stopped.wait()
        return "done"

    with trio.fail_after(30):  # a bound for the test itself, not a measurement
        result = await output.stop_on_signals(scheduler, 7.5, body)  # type: ignore[arg-type]
    assert (result, scheduler.stops) == ("done", [7.5])

    async def quick() -> int:
        return 3

    assert await output.stop_on_signals(scheduler, 1, quick) == 3  # type: ignore[arg-type]


async def never() -> str:
    await trio.sleep_forever()
    raise AssertionError("unreachable")


async def test_a_store_call_that_does_not_answer_ends_at_the_deadline_in_one_line(
    autojump_clock: Any,
) -> None:
    start = trio.current_time()
    with pytest.raises(CliError) as unnamed:
        await output.StoreDeadline(None)("reading the paused routines", never())
    assert trio.current_time() - start == output.STORE_TIMEOUT  # the runtime's bound, no other
    assert str(unnamed.value) == (
        "the state store did not answer within 30s (reading the paused routines)"
        " — try again once it answers"
    )
    assert unnamed.value.code == 1
    with pytest.raises(CliError) as named:
        await output.StoreDeadline("postgresql://u:secret@db/x")("pausing", never(), "look")
    assert str(named.value) == (
        "the state store postgresql://u:***@db/x did not answer within 30s (pausing) — look"
    )


async def test_a_store_call_that_answers_in_time_gives_its_answer(autojump_clock: Any) -> None:
    async def slow() -> str:
        await trio.sleep(output.STORE_TIMEOUT - 1)
        return "answered"

    assert await output.StoreDeadline(None)("reading", slow()) == "answered"
