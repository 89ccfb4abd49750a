"""The ``cmd:`` agent's supervisor (lifeline.py) pinned, run in a forked child of the test.

The runtime starts the script as ``python -I -S lifeline.py``, a process no mutation run can
reach (docs/mutation.md); here its ``main`` runs in a fork (tests/forked.py) set up as the
runtime sets up the script: the leader of a new process group, holding the read end of a
pipe whose write end only the test holds, the reply on a pipe. Each test was checked to fail
with the behaviour it names broken by hand. Waits are bounded polls; none asserts how long
something took. Every command ends on its own within a minute: a broken supervisor (a mutant)
may leave its group behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest
from forked import Child, fork
from procs import alive, wait_for

from trio_routines import lifeline

SHELL = "/bin/sh"
NOBODY = 65534


class Supervisor:
    """``lifeline.main`` supervising ``sh -c command`` in a forked child; the test is the
    runtime: it holds the lifeline's write end and reads the reply."""

    def __init__(
        self,
        command: str,
        cwd: Path,
        *,
        prompt: bool = False,
        no_cores: bool = False,
        deadline: float | None = 600.0,
    ) -> None:
        lifeline_read, self.held = os.pipe()
        stdin_read, self.stdin = os.pipe() if prompt else (os.open(os.devnull, os.O_RDONLY), -1)
        self.stdout, stdout_write = os.pipe()
        self.stderr, stderr_write = os.pipe()
        ours = [self.held, self.stdin, self.stdout, self.stderr]

        def supervise() -> None:
            os.setpgid(0, 0)  # start_new_session: the leader of a group of its own
            os.chdir(cwd)  # where a core file would go
            for fd in ours:
                if fd >= 0:
                    os.close(fd)
            for fd, given in enumerate((stdin_read, stdout_write, stderr_write)):
                os.dup2(given, fd)
                os.close(given)
            # close_fds and pass_fds: of what the test process holds, the command could
            # inherit the lifeline alone (the supervisor holds the rest, as a fork does).
            for fd in map(int, os.listdir("/proc/self/fd")):
                if fd > 2:
                    try:
                        os.set_inheritable(fd, fd == lifeline_read)
                    except OSError:
                        pass  # the directory's own descriptor, closed by now
            # As the script finds them when the runtime was started in the background
            # (SIGINT and SIGQUIT ignored) by Python (SIGPIPE and SIGXFSZ ignored), core
            # files allowed.
            for signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(signum, signal.SIG_IGN)
            # SIGHUP as a service manager leaves it, whatever the test run inherited (under
            # nohup it is ignored, and a shell cannot take back a signal ignored at its start).
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
            hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0) if no_cores else (hard, hard))
            if no_cores and os.geteuid() == 0:  # a user who may not raise a limit again
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            command_line = command.replace("LIFELINE_FD", str(lifeline_read))
            deadlined = [] if deadline is None else [str(deadline)]
            lifeline.main(
                ["lifeline.py", str(lifeline_read), *deadlined, SHELL, "-c", command_line]
            )

        self.child: Child = fork(supervise)
        for fd in (lifeline_read, stdin_read, stdout_write, stderr_write):
            os.close(fd)

    @property
    def pid(self) -> int:
        return self.child.pid

    def read(self, fd: int, timeout: float = 10.0) -> str:
        """Everything written to ``fd``'s pipe, once every writer has closed it."""
        data = b""
        watch = select.poll()
        watch.register(fd, select.POLLIN)
        while True:
            if not watch.poll(timeout * 1000):
                raise AssertionError(f"the pipe stayed open for {timeout}s")
            chunk = os.read(fd, 65536)
            if not chunk:
                return data.decode()
            data += chunk

    def reply(self) -> str:
        return self.read(self.stdout)

    def first_line(self) -> str:
        """The reply's first line, read without waiting for its end."""
        data = b""
        while not data.endswith(b"\n"):
            if not select.select([self.stdout], [], [], 10.0)[0]:
                raise AssertionError("no line on the reply")
            chunk = os.read(self.stdout, 1)
            assert chunk, f"the reply ended before a line: {data!r}"
            data += chunk
        return data.decode()

    def release(self) -> None:
        """The runtime read the reply to its end (a supervisor gone already, its command and
        all it started over, reads nothing: as the runtime's own release, said to no one)."""
        with contextlib.suppress(BrokenPipeError):
            os.write(self.held, lifeline.RELEASE)

    def cut(self) -> None:
        """The runtime is gone: the kernel closes the lifeline's write end."""
        os.close(self.held)
        self.held = -1

    def running(self) -> bool:
        return self.child.poll() is None

    def stays(self, seconds: float = 0.3) -> bool:
        """Whether the supervisor is still running after ``seconds`` more (a bounded look
        for an exit that should not come)."""
        try:
            wait_for(lambda: not self.running(), seconds)
        except AssertionError:
            return True
        return False

    def reaps(self, pid: int) -> None:
        """Wait until the supervisor has waited for its child ``pid`` (gone even as a zombie),
        and fail at once should the supervisor end first (its child is then init's to reap,
        which in a container may never come)."""
        wait_for(lambda: not Path(f"/proc/{pid}").exists() or not self.running(), 10)
        assert self.running(), "the supervisor ended before it reaped its child"

    def status(self) -> int:
        return self.child.reap()

    def close(self) -> None:
        self.child.kill()
        for fd in (self.held, self.stdin, self.stdout, self.stderr):
            if fd >= 0:
                os.close(fd)


class Start(Protocol):
    def __call__(
        self,
        command: str,
        *,
        prompt: bool = False,
        no_cores: bool = False,
        deadline: float | None = ...,
    ) -> Supervisor: ...


@pytest.fixture
def supervise(tmp_path: Path) -> Iterator[Start]:
    started: list[Supervisor] = []

    def start(
        command: str,
        *,
        prompt: bool = False,
        no_cores: bool = False,
        deadline: float | None = 600.0,
    ) -> Supervisor:
        started.append(
            Supervisor(command, tmp_path, prompt=prompt, no_cores=no_cores, deadline=deadline)
        )
        return started[-1]

    yield start
    for each in started:
        each.close()


def exited(status: int) -> int | None:
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else None


def killed_by(status: int) -> int | None:
    return os.WTERMSIG(status) if os.WIFSIGNALED(status) else None


def test_the_supervisor_exits_as_the_command_did_once_released_while_a_leftover_runs(
    supervise: Start,
) -> None:
    sup = supervise("echo $$; sleep 60 & exit 3")  # what it left may hold the reply open
    shell = int(sup.first_line())
    sup.reaps(shell)
    assert sup.stays()  # the command is over, the runtime has not released it yet
    sup.release()
    assert exited(sup.status()) == 3


def test_the_supervisor_exits_as_the_command_did_once_nothing_it_started_runs(
    supervise: Start,
) -> None:
    # No release needed, and no pulse: a command that ended while the runtime was stopped
    # was ended at the deadline, its group with nothing left in it, and its turn read as
    # ended by the stop, its reply whole in the pipe.
    sup = supervise("exit 3", deadline=0.5)
    assert exited(sup.status()) == 3
    orphaned = supervise("(sleep 0.3; exit 9) & exit 4", deadline=5.0)  # adopted, then gone
    assert exited(orphaned.status()) == 4


def test_the_orphans_it_adopts_are_reaped_as_they_exit_not_at_the_commands_end(
    supervise: Start, tmp_path: Path
) -> None:
    # Adopted, an orphan that exits is this script's to reap: left until the command's end,
    # a long command that leaves short jobs behind would fill the process table.
    sup = supervise(
        "for i in 1 2 3; do (sleep 0.05 & echo $! >> orphans); done; echo $$; read line; exit 2",
        prompt=True,
    )
    sup.first_line()
    orphans = [int(pid) for pid in (tmp_path / "orphans").read_text().split()]
    assert len(orphans) == 3
    for pid in orphans:  # gone from the process table, not a zombie in it
        wait_for(lambda pid=pid: not Path(f"/proc/{pid}").exists(), 10, f"orphan {pid} reaped")
    assert sup.stays(0.3)  # the command still runs
    os.write(sup.stdin, b"go\n")
    assert exited(sup.status()) == 2


def test_a_leftover_that_left_the_group_is_detached_not_waited_for(
    supervise: Start, tmp_path: Path
) -> None:
    # A daemon (setsid) is the command's choice to detach: counted as still running, it kept
    # the supervisor, and a stopped runtime's deadline ended the turn as ended by the stop.
    sup = supervise("setsid sleep 60 & echo $! > daemon; exit 5", deadline=0.5)
    assert exited(sup.status()) == 5
    daemon = int((tmp_path / "daemon").read_text())
    try:
        assert alive(daemon)  # left alone, as a terminal would
    finally:
        os.kill(daemon, signal.SIGKILL)


def test_a_leftover_still_running_at_the_deadline_ends_with_the_group(supervise: Start) -> None:
    sup = supervise("sleep 60 & exit 0", deadline=0.5)  # the turn is in flight until it ends
    assert killed_by(sup.status()) == signal.SIGKILL


def test_a_release_before_the_command_ends_lets_it_go_when_the_command_ends(
    supervise: Start,
) -> None:
    sup = supervise("read line; exit 5", prompt=True)
    sup.release()
    assert sup.stays()  # released, but the command still runs
    os.write(sup.stdin, b"go\n")
    assert exited(sup.status()) == 5


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP])
def test_a_command_killed_by_a_signal_is_passed_on_as_that_signal_without_a_core(
    supervise: Start, tmp_path: Path, signum: int
) -> None:
    # SIGTERM: the supervisor's own handler for it is put back to the default first.
    sup = supervise(f"ulimit -c 0; kill -{signum} $$; exit 9")
    assert sup.reply() == ""
    sup.release()
    status = sup.status()
    assert killed_by(status) == signum
    assert not os.WCOREDUMP(status)  # the command's death, not a crash of ours
    assert list(tmp_path.iterdir()) == []


def test_a_signal_is_passed_on_where_core_files_are_forbidden_for_good(supervise: Start) -> None:
    # A hard limit of 0 (systemd's LimitCORE=0), which an unprivileged supervisor cannot raise
    # again: its own SIGTERM handler must still give way to the default.
    sup = supervise("kill -TERM $$; exit 9", no_cores=True)
    sup.release()
    assert killed_by(sup.status()) == signal.SIGTERM


@pytest.mark.parametrize("name", ["PIPE", "XFSZ", "INT"])
def test_the_command_gets_the_default_action_of_signals_python_or_a_shell_ignores(
    supervise: Start, name: str
) -> None:
    sup = supervise(f"kill -{name} $$; exit 9")
    sup.release()
    assert killed_by(sup.status()) == getattr(signal, f"SIG{name}")


def test_the_supervisor_outlives_a_sigterm_to_its_group_to_pass_on_the_commands_end(
    supervise: Start,
) -> None:
    # What the command left ignores the SIGTERM: the supervisor, which did not die of it,
    # stays with it, and passes the command's own end on once released.
    sup = supervise("trap '' TERM; sleep 60 & trap - TERM; echo $$; exec sleep 60")
    shell = int(sup.first_line())
    os.killpg(sup.pid, signal.SIGTERM)  # how the runtime ends a turn cut short
    sup.reaps(shell)
    assert sup.stays()
    sup.release()
    assert killed_by(sup.status()) == signal.SIGTERM


def test_the_supervisor_keeps_none_of_its_stdio_once_the_command_runs(
    supervise: Start,
) -> None:
    # Its copies would keep the reply (or the prompt, or stderr) open after the command and
    # everything it started are gone: the reply would never end, a prompt never refused.
    sup = supervise("echo $$; echo err >&2", prompt=True)
    shell = int(sup.reply())
    assert sup.read(sup.stderr) == "err\n"
    # A process lets go of its files before it is a zombie, not all before its pipes end.
    wait_for(lambda: not alive(shell), 10, "the shell to exit")
    with pytest.raises(BrokenPipeError):
        os.write(sup.stdin, b"nobody reads this\n")
    sup.release()
    assert exited(sup.status()) == 0


def test_the_command_does_not_inherit_the_lifeline(supervise: Start) -> None:
    # Its read end stays the supervisor's: a command holding it could read the release.
    sup = supervise("[ -e /proc/$$/fd/2 ] && [ ! -e /proc/$$/fd/LIFELINE_FD ] && echo free")
    sup.release()
    assert sup.reply() == "free\n"
    assert exited(sup.status()) == 0


def test_the_runtime_gone_ends_the_whole_group_and_the_supervisor(
    supervise: Start,
) -> None:
    sup = supervise("echo $$; sleep 60 & echo $!; wait")
    pids = [int(sup.first_line()), int(sup.first_line())]
    assert sup.stays()
    sup.cut()
    assert killed_by(sup.status()) == signal.SIGKILL
    wait_for(lambda: not any(alive(pid) for pid in pids), 10, "the group to die")


def test_the_group_is_killed_at_once_with_no_sigterm_and_no_grace(supervise: Start) -> None:
    # The runtime's session holds died with it: another replica may start the session's next
    # turn now. A command told to go first (SIGTERM) and given a grace would run beside it;
    # this one would say "bye" on a SIGTERM, and never gets one.
    sup = supervise("trap 'echo bye; exit 0' TERM; sleep 60 & echo $$; wait")
    sup.first_line()
    sup.cut()
    assert killed_by(sup.status()) == signal.SIGKILL
    assert sup.reply() == ""


# A job the command started in the background, slow to leave on SIGTERM: it would say "late"
# 0.75 s after a SIGTERM (so a kill has that long to come first, on a loaded machine too).
SLOW_JOB = "(trap 'sleep 0.75; echo late; exit 0' TERM; sleep 60 & echo job; wait) &"


def shell_pid(sup: Supervisor) -> int:
    """The shell's pid among the reply's first two lines (the other is the job's "job")."""
    (pid,) = {sup.first_line(), sup.first_line()} - {"job\n"}
    return int(pid)


def test_what_the_command_left_running_is_killed_with_it(supervise: Start) -> None:
    sup = supervise(f"{SLOW_JOB} echo $$; exec sleep 60")
    shell_pid(sup)
    sup.cut()
    assert killed_by(sup.status()) == signal.SIGKILL
    assert sup.reply() == ""  # the job was killed with it, before it could say "late"


def test_what_a_command_that_left_before_the_runtime_died_left_running_is_killed(
    supervise: Start,
) -> None:
    sup = supervise(f"{SLOW_JOB} echo $$")
    shell = shell_pid(sup)
    sup.reaps(shell)
    sup.cut()
    assert killed_by(sup.status()) == signal.SIGKILL
    assert sup.reply() == ""


def test_a_group_ignoring_sigterm_is_killed(supervise: Start) -> None:
    sup = supervise("trap '' TERM; echo $$; sleep 60 & echo $!; wait; wait")
    pids = [int(sup.first_line()), int(sup.first_line())]
    sup.cut()
    assert killed_by(sup.status()) == signal.SIGKILL
    wait_for(lambda: not any(alive(pid) for pid in pids), 10, "the group to die")


def test_a_job_left_holding_the_reply_dies_with_the_runtime_after_the_shell_exited(
    supervise: Start,
) -> None:
    sup = supervise("echo $$; sleep 60 & echo $!")
    shell, job = int(sup.first_line()), int(sup.first_line())
    sup.reaps(shell)
    assert sup.stays()  # the reply is still open: the turn is in flight
    sup.cut()
    assert killed_by(sup.status()) == signal.SIGKILL
    wait_for(lambda: not alive(job), 10, "the job to die")
    assert sup.reply() == ""


# --- the pulses: a runtime that stops running without dying -----------------------------------


def test_no_byte_for_the_deadline_ends_the_group_as_a_cut_lifeline_does(
    supervise: Start, tmp_path: Path
) -> None:
    # The runtime pulses every second while it runs (pulses.py); stopped (SIGSTOP), it writes
    # none, and its holds may go with a connection the server ends: another replica may start
    # the session's next turn. The command must not run on beside it.
    sup = supervise(f"sleep 300 & echo $!; echo $$ > {tmp_path / 'shell'}; wait", deadline=1.0)
    child = int(sup.first_line())
    assert killed_by(sup.status()) == signal.SIGKILL
    wait_for(lambda: not alive(child), 10, "the group to die")


@pytest.mark.slow
def test_pulses_keep_the_command_and_are_no_release(supervise: Start) -> None:
    sup = supervise("echo $$; read line; sleep 60 & exit 4", prompt=True, deadline=1.0)
    shell = int(sup.first_line())
    for _ in range(8):  # twice the deadline, a pulse every quarter of it
        os.write(sup.held, b".")
        assert sup.stays(0.25)
    os.write(sup.stdin, b"go\n")
    sup.reaps(shell)
    for _ in range(3):
        os.write(sup.held, b".")  # a pulse is no release: it stays
        assert sup.stays(0.25)
    os.write(sup.held, b"." + lifeline.RELEASE)  # a pulse and the release in one read's reach
    assert exited(sup.status()) == 4


@pytest.mark.slow
def test_after_the_release_pulses_still_keep_the_command_and_their_want_ends_it(
    supervise: Start,
) -> None:
    # A command may close its reply (the release comes then) and go on working while the
    # runtime waits for its end: should the runtime stop meanwhile, it must not run on.
    sup = supervise("exec 1>&-; read line; exit 6", prompt=True, deadline=0.5)
    sup.release()
    for _ in range(6):  # three deadlines, a pulse every half of one
        os.write(sup.held, b".")
        assert sup.stays(0.25)
    os.write(sup.stdin, b"go\n")
    assert exited(sup.status()) == 6
    unpulsed = supervise("exec 1>&-; exec sleep 60", deadline=0.5)
    unpulsed.release()
    assert killed_by(unpulsed.status()) == signal.SIGKILL


def test_a_runtime_of_before_the_pulses_gives_no_deadline_and_is_obeyed(supervise: Start) -> None:
    # Upgraded in place, a runtime still running starts the new script without a deadline.
    sup = supervise("echo $$; sleep 60 & exit 3", deadline=None)
    shell = int(sup.first_line())
    sup.reaps(shell)
    assert sup.stays(0.5)  # no pulse ever comes, and nothing ends it
    sup.release()
    assert exited(sup.status()) == 3


# -- its helpers, in this process (the forked supervisors' calls are not seen by a mutation
# run's coverage) --------------------------------------------------------------------------


def _subreaper() -> int:
    """This process's child-subreaper setting (``PR_GET_CHILD_SUBREAPER``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    value = ctypes.c_int(-1)
    assert libc.prctl(37, ctypes.byref(value), 0, 0, 0) == 0
    return value.value


def test_orphans_are_adopted_on_linux_and_not_asked_for_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _subreaper() == 0
    try:
        assert lifeline._adopt_orphans() is True
        assert _subreaper() == 1
    finally:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 0, 0, 0, 0)
    monkeypatch.setattr(lifeline.sys, "platform", "darwin")
    assert lifeline._adopt_orphans() is False
    assert _subreaper() == 0
    monkeypatch.setattr(lifeline.sys, "platform", "linux")
    monkeypatch.setitem(sys.modules, "ctypes", None)  # a Python built without it
    assert lifeline._adopt_orphans() is False
    assert _subreaper() == 0


def test_what_runs_in_the_group_is_told_from_the_children_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert lifeline._runs_in_group(False, adopted=False) is True  # cannot be told
    assert lifeline._runs_in_group(True, adopted=False) is True
    assert lifeline._runs_in_group(False, adopted=True) is False  # no child left
    detached = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert lifeline._runs_in_group(True, adopted=True) is False  # another group's
        ours = subprocess.Popen(["sleep", "30"])  # this group's
        try:
            assert lifeline._runs_in_group(True, adopted=True) is True
        finally:
            ours.kill()
            ours.wait()

        # No list of children to read (a kernel without it): taken as running.
        def unlisted(*args: object, **kwargs: object) -> object:
            raise FileNotFoundError("no /proc/self/task/<pid>/children")

        monkeypatch.setattr(lifeline, "open", unlisted, raising=False)
        assert lifeline._runs_in_group(True, adopted=True) is True
    finally:
        detached.kill()
        detached.wait()


def test_reaping_takes_every_child_that_exited_and_says_whether_one_runs() -> None:
    ended = subprocess.Popen(["sh", "-c", "exit 7"])
    running = subprocess.Popen(["sleep", "30"])

    def exited() -> bool:
        return Path(f"/proc/{ended.pid}/stat").read_bytes().rsplit(b") ", 1)[1][:1] == b"Z"

    try:
        wait_for(exited, 10, "the child to exit")
        status, left = lifeline._reap(ended.pid)
        assert status is not None
        assert (os.waitstatus_to_exitcode(status), left) == (7, True)  # sleep still runs
        assert not Path(f"/proc/{ended.pid}").exists()  # reaped, not left a zombie
    finally:
        ended.returncode = 7  # reaped here, not by its Popen
        running.kill()
        running.wait()
    if not Path(f"/proc/self/task/{os.getpid()}/children").read_text().split():
        assert lifeline._reap(ended.pid) == (None, False)  # none left: nothing runs
