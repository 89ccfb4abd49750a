"""The built-in agents: echo, cmd: (real shell processes) and py:."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import trio
from procs import (
    Env,
    alive,
    clock_far_ahead,
    lines,
    run_script,
    script,
    stop,
    tree_environ,
    wait_for,
    years_ago,
)

from trio_routines.agent import Agent, Completed, Event, Failed, TextDelta
from trio_routines.agents import CommandAgent, EchoAgent, InvalidAgent, agent_from_spec
from trio_routines.context import FireContext, current_fire, firing
from trio_routines.errors import AgentUnavailable, TrioRoutinesError
from trio_routines.records import Origin, OriginKind, Outcome
from trio_routines.tickets import read_ticket
from trio_routines.turns import run_turn


async def collect(agent: Agent, session: str = "routine:daily", text: str = "hi") -> list[Event]:
    async with aclosing(agent.invoke(session, text)) as events:  # type: ignore[type-var]
        return [event async for event in events]


def reply(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


# --- echo -----------------------------------------------------------------------------------


async def test_echo_answers_with_the_prompt() -> None:
    events = await collect(agent_from_spec("echo"), text="good morning")
    assert events == [TextDelta("good morning"), Completed()]


# --- cmd: -----------------------------------------------------------------------------------


async def test_cmd_streams_stdout_and_completes_on_exit_zero() -> None:
    agent = agent_from_spec("cmd:printf 'one\\n'; sleep 0.1; printf 'two\\n'")
    events = await collect(agent)
    assert reply(events) == "one\ntwo\n"
    assert events[-1] == Completed()
    # Streamed as it came: the pause split the output into at least two deltas.
    assert sum(isinstance(e, TextDelta) for e in events) >= 2


async def test_cmd_gets_the_prompt_on_stdin() -> None:
    events = await collect(agent_from_spec("cmd:tr a-z A-Z"), text="shout this")
    assert reply(events) == "SHOUT THIS"


async def test_cmd_handles_a_large_prompt_and_a_flood_of_stderr_without_deadlock() -> None:
    prompt = "x" * 2_000_000
    agent = agent_from_spec("cmd:head -c 3000000 /dev/zero >&2; wc -c")
    with trio.fail_after(20):
        events = await collect(agent, text=prompt)
    assert reply(events).strip() == "2000000"
    assert events[-1] == Completed()


async def test_cmd_failure_reports_exit_status_and_the_stderr_tail() -> None:
    command = "cmd:echo partial; for i in 1 2 3 4 5 6 7; do echo line$i >&2; done; exit 3"
    events = await collect(agent_from_spec(command))
    assert reply(events) == "partial\n"
    last = events[-1]
    assert isinstance(last, Failed)
    assert last.details == "exit status 3: line3\nline4\nline5\nline6\nline7"
    assert not last.busy


async def test_cmd_killed_by_a_signal_says_so() -> None:
    events = await collect(agent_from_spec("cmd:kill -9 $$"))
    assert events[-1] == Failed("killed by SIGKILL")


async def test_cmd_failure_is_folded_onto_one_line_by_the_runtime(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = agent_from_spec("cmd:echo first >&2; echo second >&2; exit 1")
    result = await run_turn(agent, "daily", "routine:daily", "go")
    assert result.outcome is Outcome.FAILED
    assert result.failed == "exit status 1: first\nsecond"
    assert "daily failed" in caplog.text
    assert "exit status 1: first second" in caplog.text


async def test_cmd_environment_says_why_the_turn_runs() -> None:
    agent = agent_from_spec(
        'cmd:echo "$TRIO_ROUTINES_SESSION|$TRIO_ROUTINES_FIRE|$TRIO_ROUTINES_ROUTINE|'
        '$TRIO_ROUTINES_SLOT|$TRIO_ROUTINES_WAKEUP"'
    )
    slot = datetime(2026, 7, 7, 10, 0, tzinfo=UTC)
    with firing(FireContext("routine", "routine:daily", routine="daily", slot=slot)):
        events = await collect(agent, session="routine:daily")
    assert reply(events) == "routine:daily|routine|daily|2026-07-07T10:00:00.000Z|\n"
    assert current_fire() is None
    with firing(FireContext("wakeup", "routine:daily", wakeup="w-1")):
        events = await collect(agent, session="routine:daily")
    assert reply(events) == "routine:daily|wakeup|daily||w-1\n"
    with firing(FireContext("run", "team", routine="standup")):
        events = await collect(agent, session="team")
    assert reply(events) == "team|run|standup||\n"
    events = await collect(agent, session="chat-42")
    assert reply(events) == "chat-42||||\n"


async def test_cmd_environment_carries_the_turns_ticket_and_none_outside_a_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRIO_ROUTINES_TURN", "inherited.ticket")  # never passed on
    agent = agent_from_spec('cmd:printf %s "$TRIO_ROUTINES_TURN"')
    why = FireContext("wakeup", "chat-7", wakeup="w-9", origin=Origin(kind=OriginKind.HTTP))
    with firing(why):
        events = await collect(agent, session="chat-7")
    assert read_ticket(reply(events)) == why
    assert reply(await collect(agent, session="chat-7")) == ""


async def test_cmd_environment_says_where_the_scheduler_answers_when_it_serves_http(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRIO_ROUTINES_URL", "http://inherited.example")  # never passed on
    command = 'cmd:printf %s "$TRIO_ROUTINES_URL"'
    served = CommandAgent(command[4:], scheduler_url="http://127.0.0.1:8080")
    assert reply(await collect(served, session="chat-7")) == "http://127.0.0.1:8080"
    assert reply(await collect(agent_from_spec(command), session="chat-7")) == ""


@pytest.fixture
def pid_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "pids"
    yield path
    # Whatever happens in the test, leave no process behind.
    import os
    import signal

    for line in lines(path):
        if line.isdigit() and alive(int(line)):
            os.kill(int(line), signal.SIGKILL)


async def _cancel_mid_turn(agent: CommandAgent, pid_file: Path, expect: int) -> list[int]:
    events: list[Event] = []

    async def consume() -> None:
        async with aclosing(agent.invoke("routine:slow", "go")) as stream:  # type: ignore[type-var]
            async for event in stream:
                events.append(event)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        while len(lines(pid_file)) < expect:  # noqa: ASYNC110 — another process writes it
            await trio.sleep(0.02)
        nursery.cancel_scope.cancel()
    assert events == []  # cancelled: no terminal event
    return [int(line) for line in lines(pid_file)]


async def test_cancelled_cmd_terminates_its_whole_process_group(pid_file: Path) -> None:
    # The shell forks a grandchild that would never end on its own: it must die too, not be
    # orphaned. The shell notes the SIGTERM it gets first (the group is asked to leave).
    said = pid_file.with_name("said")
    agent = CommandAgent(
        f"trap 'echo TERM >> {said}; exit 143' TERM; echo $$ >> {pid_file}; "
        f"sleep 100000 & echo $! >> {pid_file}; wait"
    )
    pids = await _cancel_mid_turn(agent, pid_file, expect=2)
    wait_for(lambda: not any(alive(pid) for pid in pids), 60, "the process group to exit")
    assert lines(said) == ["TERM"]


async def test_cancelled_cmd_ignoring_sigterm_is_killed_after_the_grace(pid_file: Path) -> None:
    # The shell outlives the SIGTERM (it notes it and ticks on), so only the SIGKILL that
    # follows the grace can end it: its notes show TERM, then life after it, then nothing.
    said = pid_file.with_name("said")
    agent = CommandAgent(
        f"trap 'echo TERM >> {said}' TERM; echo $$ >> {pid_file}; "
        f"sleep 100000 & echo $! >> {pid_file}; "
        f"while :; do echo tick >> {said}; sleep 0.05; done",
        kill_grace=1.0,
    )
    pids = await _cancel_mid_turn(agent, pid_file, expect=2)
    wait_for(lambda: not any(alive(pid) for pid in pids), 60, "the process group to die")
    notes = lines(said)
    assert "TERM" in notes
    assert notes.count("TERM") == 1
    assert "tick" in notes[notes.index("TERM") + 1 :]  # it ran on after the SIGTERM


async def test_cmd_turn_under_the_runtime_timeout_fails_and_leaves_no_process(
    pid_file: Path,
) -> None:
    agent = CommandAgent(f"echo $$ >> {pid_file}; exec sleep 30")
    result = await run_turn(agent, "slow", "routine:slow", "go", timeout=0.5)
    assert result.outcome is Outcome.FAILED
    assert result.failed == "timed out after 0.5s"
    (pid,) = (int(line) for line in lines(pid_file))
    wait_for(lambda: not alive(pid), 5, "the command to exit")


@pytest.mark.slow
def test_a_sigkilled_serve_takes_its_command_and_the_commands_children_with_it(
    env: Env, pid_file: Path
) -> None:
    env.routine("yearly", cron="0 0 1 1 *")
    env.seed("yearly", years_ago(2))  # the boot catches up one missed slot at once
    # The shell, a background child, and that child's own child (a grandchild of the shell).
    agent = (
        f"cmd:echo $$ >> {pid_file}; "
        f"sh -c 'sleep 300 & echo $! >> {pid_file}; wait' & echo $! >> {pid_file}; "
        "trap '' TERM; wait"  # the shell itself ignores SIGTERM: it needs the SIGKILL
    )
    serve = env.start("serve", "--agent", agent)
    pids = [int(p) for p in wait_for(lambda: len(lines(pid_file)) >= 3 and lines(pid_file))]
    assert all(alive(pid) for pid in pids)
    assert stop(serve, signal.SIGKILL) == -signal.SIGKILL
    wait_for(lambda: not any(alive(pid) for pid in pids), 10, "the orphaned turn to die")


@pytest.mark.slow
def test_a_sigkilled_serve_takes_a_background_job_holding_the_reply_after_the_shell_exited(
    env: Env, pid_file: Path
) -> None:
    # The shell exits at once; what it left in the background holds the reply open, so the
    # turn is in flight. The supervisor must stay for it and end the group with serve.
    env.routine("yearly", cron="0 0 1 1 *")
    env.seed("yearly", years_ago(2))  # the boot catches up one missed slot at once
    agent = (
        f"cmd:echo $$ >> {pid_file}; "
        f"(sh -c 'echo $$ >> {pid_file}; exec sleep 300'; echo x) & echo started"
    )
    serve = env.start("serve", "--agent", agent)
    shell, job = (int(p) for p in wait_for(lambda: len(lines(pid_file)) >= 2 and lines(pid_file)))
    wait_for(lambda: not alive(shell), 10, "the shell to exit")
    assert alive(job)
    assert stop(serve, signal.SIGKILL) == -signal.SIGKILL
    wait_for(lambda: not alive(job), 10, "the background job to die with serve")


async def test_a_background_job_holding_the_reply_ends_the_turn_when_it_ends(
    pid_file: Path,
) -> None:
    agent = CommandAgent("(sleep 0.3; echo later) & echo started")
    events = await collect(agent)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "started\nlater\n"
    assert events[-1] == Completed()


async def test_a_command_whose_background_job_closed_the_reply_completes_when_it_exits(
    pid_file: Path,
) -> None:
    # Detached from the reply, the job is left alone once the turn is over, as before.
    agent = CommandAgent(f"sh -c 'echo $$ >> {pid_file}; exec sleep 300' >/dev/null & echo done")
    events = await collect(agent)
    assert events == [TextDelta("done\n"), Completed()]
    (job,) = (int(p) for p in wait_for(lambda: lines(pid_file)))
    assert alive(job)


@pytest.mark.parametrize("lowest_fd", [3, 1100])  # past 1024, select() could not watch it
def test_the_command_runs_under_a_supervisor_holding_its_lifeline(
    pid_file: Path, lowest_fd: int
) -> None:
    # What a SIGKILL of the runtime ends is the lifeline's write end: the supervisor reads
    # end-of-file and ends the group. Closing it by hand stands in for the runtime's death.
    import fcntl
    import subprocess as sp

    from trio_routines.agents import _LIFELINE

    read_end, held = os.pipe()
    lifeline = fcntl.fcntl(read_end, fcntl.F_DUPFD_CLOEXEC, lowest_fd)
    os.close(read_end)
    with open(os.devnull, "rb") as null:
        proc = sp.Popen(
            [sys.executable, "-I", "-S", _LIFELINE, str(lifeline), "600", "/bin/sh", "-c",
             f"echo $$ >> {pid_file}; sleep 300 & echo $! >> {pid_file}; wait"],
            stdin=null, pass_fds=(lifeline,), start_new_session=True,
        )  # fmt: skip
    os.close(lifeline)
    try:
        pids = [int(p) for p in wait_for(lambda: len(lines(pid_file)) >= 2 and lines(pid_file))]
        assert proc.poll() is None  # running while the lifeline holds
        os.close(held)
        assert proc.wait(timeout=10) == -signal.SIGKILL
        wait_for(lambda: not any(alive(pid) for pid in pids), 10, "the group to die")
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
def test_a_runtime_that_stops_running_has_its_command_ended_and_says_why(
    pid_file: Path, tmp_path: Path
) -> None:
    # SIGSTOP the runtime mid-turn: its PostgreSQL holds may go meanwhile (a connection the
    # server ends) and another replica start the session's next turn, while the command, a
    # process nothing stopped, ran on for the whole pause. Its supervisor, hearing no pulse
    # for the deadline, ends it; the turn, once the runtime runs again, says why it failed.
    script = tmp_path / "turn.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import trio
            from trio_routines.agents import agent_from_spec
            from trio_routines.pulses import PULSES
            from trio_routines.turns import run_turn

            PULSES.every, PULSES.deadline = 0.25, 2.0

            async def main():
                agent = agent_from_spec("cmd:echo $$ >> {pid_file}; exec sleep 120")
                turn = await run_turn(agent, "t", "s", "p")
                print(turn.outcome.value, turn.failed, flush=True)

            trio.run(main)
            """
        )
    )
    runtime = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        (command,) = (int(p) for p in wait_for(lambda: lines(pid_file)))
        os.kill(runtime.pid, signal.SIGSTOP)
        wait_for(lambda: not alive(command), 20, "the stopped runtime's command to be ended")
        os.kill(runtime.pid, signal.SIGCONT)
        out, _ = runtime.communicate(timeout=30)
    finally:
        if runtime.poll() is None:
            os.kill(runtime.pid, signal.SIGCONT)
            runtime.kill()
            runtime.wait()
    assert out.decode().strip() == (
        "failed this process did not run for over 2s (stopped, or starved of the processor), "
        "so the command was ended: on PostgreSQL, another replica may have started its "
        "session's next turn meanwhile"
    )


@pytest.mark.slow
def test_a_runtime_whose_wall_clock_is_set_pulses_all_the_same(tmp_path: Path) -> None:
    # Under libfaketime (a wall clock set for the process, as the clock tests do) a thread's
    # time.sleep fails at once (EINVAL): the pulses' thread died with it, and every command
    # was ended at the deadline. Its turn runs to its end.
    done = run_script(
        tmp_path / "turn.py",
        """
        import trio
        from trio_routines.agents import agent_from_spec
        from trio_routines.pulses import PULSES
        from trio_routines.turns import run_turn

        PULSES.every, PULSES.deadline = 0.1, 1.0

        async def main():
            turn = await run_turn(agent_from_spec("cmd:sleep 3; echo slept"), "t", "s", "p")
            print(turn.outcome.value, turn.failed, flush=True)

        trio.run(main)
        """,
        **clock_far_ahead(tmp_path),
    )
    assert done.stdout.decode().strip() == "completed None", done.stderr.decode()[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("timeout", "outcome"),
    [(None, "completed None"), (1.0, "failed timed out after 1s")],
    ids=["no-timeout", "timeout"],
)
def test_a_command_that_ends_while_the_runtime_is_stopped_keeps_its_outcome(
    tmp_path: Path, timeout: float | None, outcome: str
) -> None:
    # The runtime stopped (SIGSTOP) past the pulses' deadline while its command ran to its
    # end: the supervisor ended the group at the deadline, and the turn read as ended by the
    # stop ("this process did not run …, so the command was ended"), its reply whole in the
    # pipe and its exit status 0. A timeout the stop outlasted is a timeout all the same: the
    # runtime cannot tell whether the command ended before it (docs/design.md).
    began = tmp_path / "began"
    turn = f"""
        import trio
        from trio_routines.agents import agent_from_spec
        from trio_routines.pulses import PULSES
        from trio_routines.turns import run_turn

        PULSES.every, PULSES.deadline = 0.1, 1.0
        command = "touch {began}; sleep 0.5; echo done"

        async def main():
            agent = agent_from_spec("cmd:" + command)
            turn = await run_turn(agent, "t", "s", "p", timeout={timeout!r})
            print(turn.outcome.value, turn.failed, flush=True)

        trio.run(main)
        """
    runtime = subprocess.Popen(
        script(tmp_path / "turn.py", turn),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=tree_environ(),
    )
    try:
        wait_for(began.exists, 30, "the command to begin")
        runtime.send_signal(signal.SIGSTOP)
        time.sleep(2.5)  # the command's half second, and more than the deadline after it
        runtime.send_signal(signal.SIGCONT)
        out, err = runtime.communicate(timeout=60)
    finally:
        runtime.kill()
        runtime.wait()
    assert out.decode().strip() == outcome, err.decode()[-2000:]


def test_a_release_to_a_supervisor_gone_writes_nothing_and_raises_no_sigpipe(
    tmp_path: Path,
) -> None:
    # The supervisor exits before the release once nothing its command started runs: a write
    # to its pipe raised SIGPIPE, the end of a host that set that signal back to its default.
    done = run_script(
        tmp_path / "release.py",
        """
        import os, signal
        from trio_routines.agents import _release

        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        read, write = os.pipe()
        _release(write)  # read while the supervisor is there
        assert os.read(read, 1) == b"r"
        os.close(read)
        _release(write)  # gone
        print("alive", flush=True)
        """,
    )
    assert (done.returncode, done.stdout) == (0, b"alive\n"), done.stderr.decode()[-2000:]


class _Unpulsed:
    """The runtime's pulses as a stopped process gives them: none, and late when asked."""

    deadline = 0.5

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []

    def add(self, fd: int) -> None:
        self.asked.append(("add", fd))

    def late(self, fd: int) -> bool:
        self.asked.append(("late", fd))
        return True

    def discard(self, fd: int) -> bool:
        self.asked.append(("discard", fd))
        return True


async def test_a_command_its_supervisor_ended_for_want_of_pulses_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # In the test process (the stopped runtime above is another): no pulse comes, so the
    # supervisor ends the command at its deadline, and the turn asks the pulses, about its
    # own lifeline, whether they came late, then lets that lifeline go.
    from trio_routines import agents

    unpulsed = _Unpulsed()
    monkeypatch.setattr(agents, "PULSES", unpulsed)
    events = await collect(agent_from_spec("cmd:exec sleep 60"))
    assert events == [
        Failed(
            "this process did not run for over 0.5s (stopped, or starved of the processor), "
            "so the command was ended: on PostgreSQL, another replica may have started its "
            "session's next turn meanwhile"
        )
    ]
    held = unpulsed.asked[0][1]
    assert unpulsed.asked == [("add", held), ("late", held), ("discard", held)]


async def test_a_command_that_failed_on_its_own_says_so_even_after_a_stall(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Pulses late, but the command exited by itself: its own status and words, not a stop's.
    from trio_routines import agents

    unpulsed = _Unpulsed()
    monkeypatch.setattr(agents, "PULSES", unpulsed)
    events = await collect(agent_from_spec("cmd:echo no >&2; exit 1"))
    assert events == [Failed("exit status 1: no")]
    assert [what for what, _ in unpulsed.asked] == ["add", "discard"]  # late: not asked


@pytest.mark.slow
async def test_a_busy_event_loop_right_after_the_start_does_not_end_the_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The supervisor counts from its own start; the lifeline was pulsed only once the start
    # returned to a busy event loop (a herd's), and a healthy command was ended.
    from trio_routines import agents
    from trio_routines.pulses import Pulses

    monkeypatch.setattr(agents, "PULSES", Pulses(every=0.05, deadline=0.5))
    real = trio.lowlevel.open_process

    async def then_busy(*args: Any, **kwargs: Any) -> trio.Process:
        process = await real(*args, **kwargs)
        time.sleep(1.5)  # noqa: ASYNC251 -- the event loop held, on purpose: three deadlines
        return process

    monkeypatch.setattr(agents.trio.lowlevel, "open_process", then_busy)
    events = await collect(agent_from_spec("cmd:sleep 0.2; echo done"))
    assert events == [TextDelta("done\n"), Completed()]


# --- py: ------------------------------------------------------------------------------------


@pytest.fixture
def agent_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = "sample_agents_for_tests"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """
            from trio_routines import Completed, TextDelta

            class Shouter:
                async def invoke(self, session, text):
                    yield TextDelta(text.upper())
                    yield Completed()

            def make():
                return Shouter()

            def make_with(arg):
                return Shouter()

            def broken():
                raise RuntimeError("no key configured")

            def broken_lines():
                raise RuntimeError("no key\\nconfigured\\r\\n\\x1b[2Jtoday")

            instance = Shouter()

            class holder:
                agent = Shouter()

            number = 5
            """
        )
    )
    (tmp_path / f"{name}_exits.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)
    sys.modules.pop(f"{name}_exits", None)


@pytest.mark.parametrize("attribute", ["Shouter", "make", "instance", "holder.agent"])
async def test_py_loads_an_object_a_class_or_a_factory(agent_module: str, attribute: str) -> None:
    agent = agent_from_spec(f"py:{agent_module}:{attribute}")
    assert await collect(agent, text="hey") == [TextDelta("HEY"), Completed()]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("py:{m}", "must name a module and an attribute"),
        ("py::x", "must name a module and an attribute"),
        ("py:no_such_module_here:x", 'cannot import module "no_such_module_here"'),
        ("py:{m}:missing", 'has no attribute "missing"'),
        ("py:{m}:number", "is not an agent"),
        ("py:{m}:broken", "could not be built with no arguments: no key configured"),
        ("py:{m}:make_with", "could not be built with no arguments"),
        # The words of an error from outside, folded onto the one line, controls shown.
        ("py:{m}:broken_lines", "arguments: no key\\x0aconfigured\\x0d\\x0a\\x1b[2Jtoday"),
        ("py:no_such\nmodule:x", 'cannot import module "no_such\\x0amodule"'),
        ("py:{m}:missing\nline", 'has no attribute "missing\\x0aline"'),
        ("bogus:a\nb", 'unknown agent "bogus:a\\x0ab"'),
        # An exit is no agent: the process went on as if nothing had been asked, status 0.
        ("py:sys:exit", "could not be built with no arguments: it exited (SystemExit None)"),
        ("py:{m}_exits:x", "it exited (SystemExit 3)"),
        ("cmd:", '"cmd:" needs a shell command'),
        ("cmd:   ", '"cmd:" needs a shell command'),
        ("", "unknown agent"),
        ("openai", 'unknown agent "openai"'),
        ("ECHO", "unknown agent"),
    ],
)
def test_bad_specs_are_one_line_invalid_agent(agent_module: str, spec: str, message: str) -> None:
    with pytest.raises(InvalidAgent) as info:
        agent_from_spec(spec.format(m=agent_module))
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, TrioRoutinesError)
    assert isinstance(info.value, ValueError)
    # What loading it met (may pass), apart from what the spec says (never will).
    met = ("cannot import module", "could not be built", "it exited", "arguments: ")
    assert isinstance(info.value, AgentUnavailable) == any(m in message for m in met)


def test_spec_kinds() -> None:
    assert isinstance(agent_from_spec("echo"), EchoAgent)
    agent = agent_from_spec("cmd:cat")
    assert isinstance(agent, CommandAgent)
    assert agent.command == "cat"


async def test_echo_satisfies_the_protocol() -> None:
    agent: Agent = EchoAgent()
    stream: AsyncIterator[Event] = agent.invoke("s", "t")
    async with aclosing(stream):  # type: ignore[type-var]
        assert await stream.__anext__() == TextDelta("t")


async def test_cmd_never_inherits_the_stores_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIO_ROUTINES_STATE", "postgresql://u:state-secret@db/x")
    for name in ("PGPASSWORD", "PGPASSFILE", "PGSERVICEFILE", "PGSERVICE", "PGHOST", "PGUSER"):
        monkeypatch.setenv(name, f"{name}-value")
    monkeypatch.setenv("TRIO_ROUTINES_AGENT", "cmd:env")
    monkeypatch.setenv("OTHER_SETTING", "kept")
    events = await collect(agent_from_spec("cmd:env"), session="routine:daily")
    names = {line.partition("=")[0] for line in reply(events).splitlines()}
    assert "OTHER_SETTING" in names
    assert "PATH" in names
    assert {name for name in names if name.startswith(("TRIO_ROUTINES_", "PG"))} == {
        "TRIO_ROUTINES_SESSION",
        "TRIO_ROUTINES_FIRE",
        "TRIO_ROUTINES_ROUTINE",
        "TRIO_ROUTINES_SLOT",
        "TRIO_ROUTINES_WAKEUP",
        "TRIO_ROUTINES_TURN",
        "TRIO_ROUTINES_URL",
    }


def test_a_fired_cmd_turn_finds_neither_the_state_nor_a_database_password(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.routine("daily", cron="0 9 * * *")
    environ = {
        **env.environ(),
        "TRIO_ROUTINES_STATE": str(env.state),  # where the claims are: the command must not know
        "PGPASSWORD": "pg-secret",
        "PGPASSFILE": str(tmp_path / "pgpass"),
    }
    dump = tmp_path / "env.txt"
    argv = env.argv(
        "fire", "daily", "--slot", "2026-07-07T09:00:00Z", "--agent", f"cmd:env > {dump}"
    )
    argv = argv[: argv.index("--state")] + argv[argv.index("--routines") :]  # state from the env
    result = subprocess.run(argv, capture_output=True, text=True, env=environ, timeout=60)
    assert result.returncode == 0, result.stderr
    assert env.history("daily")[0]["outcome"] == "completed"  # the state the variable named
    seen = dump.read_text()
    assert "TRIO_ROUTINES_SLOT=2026-07-07T09:00:00.000Z" in seen
    assert str(env.state) not in seen
    assert "pg-secret" not in seen
    assert "PGPASSFILE" not in seen


async def test_cmd_never_inherits_our_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIO_ROUTINES_TOKEN", "api-secret")
    monkeypatch.setenv("TRIO_ROUTINES_AGENT_TOKEN", "agent-secret")
    monkeypatch.setenv("OTHER_SETTING", "kept")
    script = 'printf "%s|%s|%s" "${TRIO_ROUTINES_TOKEN-unset}" '
    script += '"${TRIO_ROUTINES_AGENT_TOKEN-unset}" "$OTHER_SETTING"'
    events = await collect(agent_from_spec(f"cmd:{script}"))
    assert reply(events) == "unset|unset|kept"
