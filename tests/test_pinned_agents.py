"""The built-in agents pinned where tests/test_agents.py only samples them (docs/mutation.md).

The messages of a refused spec whole; a spec's description for the logs at its edges; what a
``cmd:`` turn does with text that is no UTF-8 (a prompt, a reply, stderr), with a long stderr
and an unknown signal; how it starts its supervisor (isolated from ``PYTHON*``); what it cleans
up when it cannot start, or when a job it left behind outlives the SIGTERM.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from procs import alive, wait_for
from test_agents import _cancel_mid_turn, collect, pid_file, reply

from trio_routines import tracing
from trio_routines.agent import Completed, Failed, TextDelta
from trio_routines.agents import CommandAgent, InvalidAgent, agent_from_spec
from trio_routines.agentspec import describe_agent

__all__ = ["pid_file"]  # a fixture of test_agents, used here

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
KINDS = "use echo, cmd:<shell command>, py:<module>:<attribute> or http(s)://host/path"


def refusal(spec: str) -> str:
    with pytest.raises(InvalidAgent) as info:
        agent_from_spec(spec)
    return str(info.value)


# --- specs ----------------------------------------------------------------------------------


def test_an_unknown_spec_is_shown_whole_up_to_40_characters_then_cut() -> None:
    forty = "x" * 40
    assert refusal(forty) == f'unknown agent "{forty}" — {KINDS}'
    assert refusal(forty + "y") == f'unknown agent "{forty}…" — {KINDS}'
    assert refusal(forty + "yz") == f'unknown agent "{forty}…" — {KINDS}'


def test_an_empty_command_is_refused_with_an_example() -> None:
    assert refusal("cmd: ") == '"cmd:" needs a shell command after the colon, e.g. cmd:cat'


def test_without_httpx_an_http_spec_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "trio_routines.agent_http", None)  # import fails
    assert refusal("HTTPS://agent.example/turn") == (
        'the http(s):// agent needs httpx: pip install "trio-routines[agent-http]"'
    )


@pytest.fixture
def agent_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = "pinned_agents_for_tests"
    (tmp_path / f"{name}.py").write_text(
        "from trio_routines import Completed, TextDelta\n"
        "class Callable:\n"
        "    async def invoke(self, session, text):\n"
        "        yield TextDelta(text)\n"
        "        yield Completed()\n"
        "    def __call__(self):\n"
        "        raise AssertionError('an agent is not built again')\n"
        "agent = Callable()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


async def test_a_callable_agent_is_taken_as_it_is_not_called(agent_module: str) -> None:
    agent = agent_from_spec(f"py:{agent_module}:agent")
    assert await collect(agent, text="as is") == [TextDelta("as is"), Completed()]


def test_py_splits_the_module_at_the_first_colon(agent_module: str) -> None:
    assert refusal(f"py:{agent_module}:agent:x") == (
        f'module "{agent_module}" has no attribute "agent:x"'
    )


@pytest.mark.parametrize(
    ("spec", "shown"),
    [
        ("http://agent.example/turn?key=s3cret", "http://agent.example/turn"),
        ("HTTP://agent.example:8080/turn?key=s3cret", "HTTP://agent.example:8080/turn"),
        ("https://agent.example/turn#key=s3cret", "https://agent.example/turn"),
        ("https://agent.example/turn#a#b", "https://agent.example/turn"),
        ("https://agent.example/turn?a=1?b=2", "https://agent.example/turn"),
        ("https://agent.example/turn?next=https://other.example/x", "https://agent.example/turn"),
        ("https://u:p@agent.example/users/@me/turn", "https://agent.example/users/@me/turn"),
        ("https://u:p@ss@agent.example/turn", "https://agent.example/turn"),
        ("cmd:./agent --say 'unclosed", "cmd:./agent …"),
        ("cmd:./agent one", "cmd:./agent …"),
    ],
)
def test_a_spec_is_described_without_its_secrets(spec: str, shown: str) -> None:
    assert describe_agent(spec) == shown


# --- cmd: text that is no UTF-8 -------------------------------------------------------------


async def test_a_prompt_that_is_no_utf8_reaches_the_command_replaced() -> None:
    events = await collect(agent_from_spec("cmd:cat"), text="a\ud800b")
    assert events == [TextDelta("a?b"), Completed()]


async def test_a_reply_that_is_no_utf8_is_replaced_also_when_it_ends_mid_character() -> None:
    events = await collect(agent_from_spec(r"cmd:printf 'a\377b\n'; printf 'c\342\202'"))
    assert reply(events) == "a\ufffdb\nc\ufffd"
    assert events[-1] == Completed()


async def test_the_held_back_end_of_a_reply_is_yielded_at_its_end() -> None:
    # It might have been the start of a usage line; it was not.
    events = await collect(agent_from_spec("cmd:printf 'trio-rout'"))
    assert events == [TextDelta("trio-rout"), Completed()]


async def test_a_stderr_tail_that_is_no_utf8_is_replaced() -> None:
    events = await collect(agent_from_spec(r"cmd:printf 'bad \377 byte\n' >&2; exit 4"))
    assert events == [Failed("exit status 4: bad \ufffd byte")]


async def test_the_stderr_tail_is_its_last_4096_bytes() -> None:
    # Two lines of 3000 bytes: the tail starts 1094 bytes before the first one's end.
    command = "cmd:head -c 3000 /dev/zero | tr '\\0' a >&2; echo >&2; "
    command += "head -c 3000 /dev/zero | tr '\\0' b >&2; echo >&2; exit 2"
    events = await collect(agent_from_spec(command))
    assert events == [Failed("exit status 2: " + "a" * 1094 + "\n" + "b" * 3000)]


async def test_a_signal_without_a_name_is_told_by_its_number() -> None:
    events = await collect(agent_from_spec("cmd:kill -40 $$"))  # a real-time signal
    assert events == [Failed("killed by signal 40")]


# --- cmd: the supervisor and what a turn cleans up ------------------------------------------


async def test_the_supervisor_runs_isolated_from_python_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A module on PYTHONPATH that would shadow one the supervisor imports.
    (tmp_path / "select.py").write_text("raise SystemExit(99)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    events = await collect(agent_from_spec("cmd:echo ran"))
    assert events == [TextDelta("ran\n"), Completed()]


def test_an_inherited_tracestate_never_goes_out_with_our_traceparent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRACESTATE", "inherited=1")
    with tracing.caller([TRACEPARENT.encode()], []):
        env = CommandAgent("true").environment("s")
    assert env["TRACEPARENT"] == TRACEPARENT
    assert "TRACESTATE" not in env


def test_a_turn_without_a_context_passes_on_none_inherited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Whoever started the scheduler may have been traced: its context is not the turns'.
    monkeypatch.setenv("TRACEPARENT", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    monkeypatch.setenv("TRACESTATE", "inherited=1")
    env = CommandAgent("true").environment("s")
    assert "TRACEPARENT" not in env
    assert "TRACESTATE" not in env
    assert env["PATH"] == os.environ["PATH"]  # the rest is inherited as before


def open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


@pytest.mark.parametrize("failing", ["pipe", "process"])
async def test_a_command_that_cannot_start_raises_why_and_leaves_no_descriptor(
    monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    cause = OSError(24, "Too many open files")

    def refuse(*args: object, **kwargs: object) -> object:
        raise cause

    if failing == "pipe":
        monkeypatch.setattr(os, "pipe", refuse)
    else:
        monkeypatch.setattr(trio.lowlevel, "open_process", refuse)
    before = open_fds()
    with pytest.raises(OSError, match="Too many open files") as info:
        await collect(agent_from_spec("cmd:true"))
    assert info.value is cause
    monkeypatch.undo()
    assert open_fds() <= before


async def test_the_reply_pipe_is_closed_when_the_turn_is_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[trio.Process] = []
    original = trio.lowlevel.open_process

    async def keeping(*args: object, **kwargs: object) -> trio.Process:
        process = await original(*args, **kwargs)  # type: ignore[arg-type]
        started.append(process)
        return process

    monkeypatch.setattr(trio.lowlevel, "open_process", keeping)
    assert await collect(agent_from_spec("cmd:echo hi")) == [TextDelta("hi\n"), Completed()]
    (process,) = started
    assert process.stdout is not None
    with pytest.raises(trio.ClosedResourceError):
        await process.stdout.receive_some()


async def test_a_job_outliving_the_sigterm_is_killed_after_the_grace(pid_file: Path) -> None:
    # The shell leaves with the SIGTERM (so does the supervisor, released); a job it started,
    # ignoring SIGTERM, stays in the group until the SIGKILL that ends the grace.
    agent = CommandAgent(
        f"sh -c 'trap \"\" TERM; echo $$ >> {pid_file}; exec sleep 300' >/dev/null & "
        "exec sleep 300",
        kill_grace=0.3,
    )
    (job,) = await _cancel_mid_turn(agent, pid_file, expect=1)
    wait_for(lambda: not alive(job), 10, "the job to die")


async def test_a_turn_whose_scratch_files_hang_is_left_at_once_when_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A frozen file system under TMPDIR holds the making of the prompt's file: the turn's
    # grace must still end it, the files made later dropped.
    import threading

    from trio_routines import agents

    entered, thaw, returned = threading.Event(), threading.Event(), threading.Event()
    real = agents._scratch_files

    def hung(text: str) -> object:
        entered.set()
        thaw.wait(10)
        returned.set()
        return real(text)

    monkeypatch.setattr(agents, "_scratch_files", hung)
    try:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(collect, agent_from_spec("cmd:true"))
                await trio.to_thread.run_sync(entered.wait, 10)
                scope.cancel()  # the turn's grace ran out
        left = not returned.is_set()
    finally:
        thaw.set()
    # Until its thread has ended, the files it made closed (else it would call the next
    # test's patched functions).
    limiter = trio.to_thread.current_default_thread_limiter()
    with trio.fail_after(10):
        while limiter.borrowed_tokens:  # noqa: ASYNC110 -- released by the thread's end
            await trio.sleep(0.01)
    assert left  # before the file system answered


async def test_a_turn_waits_for_its_scratch_files_to_close_no_longer_than_close_wait(
    monkeypatch: pytest.MonkeyPatch, mock_clock: trio.testing.MockClock
) -> None:
    # The last close of an unnamed file may wait for a frozen disk: the turn's end waits for it
    # CLOSE_WAIT at most, the files left to their thread.
    import threading

    from trio_routines import agents

    entered, thaw, returned = threading.Event(), threading.Event(), threading.Event()
    real = agents._close_all

    def hung(*files: Any) -> None:
        entered.set()
        thaw.wait(10)
        real(*files)
        returned.set()

    monkeypatch.setattr(agents, "_close_all", hung)
    events: list[object] = []
    try:
        async with trio.open_nursery() as nursery:

            async def turn() -> None:
                events.extend(await collect(agent_from_spec("cmd:true")))

            nursery.start_soon(turn)
            await trio.to_thread.run_sync(entered.wait, 10)
            await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(agents.CLOSE_WAIT - 0.1)
            await trio.testing.wait_all_tasks_blocked()
            waited = events[:]
            mock_clock.jump(0.2)
        left = not returned.is_set()
    finally:
        thaw.set()
    assert waited == []  # it waited for the close...
    assert events == [Completed()]  # ...then ended, the close still under way
    assert left
