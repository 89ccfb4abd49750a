"""Run a command that dies with the process that started it: the ``cmd:`` agent's supervisor.

Usage (by :class:`~trio_routines.agents.CommandAgent`, never by hand)::

    python -I -S lifeline.py <fd> <deadline> <program> [<arg>...]

Theory of operation. The runtime starts this script as the leader of a new process group
and keeps the write end of a pipe (the *lifeline*) whose read end is ``<fd>`` here. The write
end lives in the runtime alone (close-on-exec, handed to no other child), so the kernel closes
it exactly when the runtime exits, however it exits -- SIGKILL included. This script spawns
the command in its own group and waits for whichever comes first:

* the command has exited *and* the runtime has released us (one byte, :data:`RELEASE`, on
  the lifeline, written once it has read the reply to its end), or nothing it started
  runs any more: this script exits the way the command did (same status, or killed by the same
  signal), so the runtime sees the command's own outcome. Until then it stays, even after
  the command exited: what the command left behind may still hold the reply open
  (``(sleep 60; echo x) & echo started``), and the turn is in flight until the reply ends --
  the group must still die with the runtime then. This script adopts what the command leaves
  behind (Linux's child subreaper), so it knows when nothing is left: then there is nothing
  to end, and a command that ended while the runtime was stopped keeps its outcome, which
  the runtime reads when it runs again (the deadline below ended the group before, and the
  turn read as ended, its reply whole in the pipe);
* the lifeline reads end-of-file before any release: the runtime is gone, and nobody will
  ever read the reply. The whole group gets SIGKILL at once (this script included), with no
  grace: the runtime's holds on the turn's session went with it, so another replica may
  start the next turn of that session now, and two turns of one session must never run side
  by side. (A turn the runtime ends itself gets SIGTERM and a grace from the runtime, which
  releases this script first.)
* no byte on the lifeline for ``<deadline>`` seconds: the runtime writes one every second
  until this script has exited (:mod:`trio_routines.pulses`), so it has stopped running
  (``SIGSTOP``, a debugger) without dying. Its holds on PostgreSQL may go meanwhile
  (a connection the server ends), and another replica may then start the session's next
  turn: the group gets SIGKILL as above, so that the two overlap for at most the deadline.

Why not ``PR_SET_PDEATHSIG``: Linux sends that signal when the *thread* that forked the child
exits, not the process, and Trio forks from worker threads that exit after idling; a
``preexec_fn`` that sets it is unsafe in a threaded parent anyway. The lifeline is plain POSIX,
so it works the same on every system with ``/bin/sh``. What it cannot reach is a process that
leaves the group on purpose (``setsid``, ``setpgid``, a daemon): such a process is detached,
as it would be from a terminal. See docs/design.md.

Only the standard library is imported, and the script runs isolated from the environment's
``PYTHON*`` variables and site packages: it must start fast and cannot be redirected.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

RELEASE = b"r"  # the runtime read the reply to its end: exit with the command


def _ignore(signum: int, frame: object) -> None:
    """A handler that does nothing: the wake-up fd is what wakes the loop."""


def _detach_stdio() -> None:
    # The command has its own copies; ours would keep the reply pipe open after it exits.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


#: ``prctl``'s option that makes this script the reaper of the command's orphans (Linux).
_PR_SET_CHILD_SUBREAPER = 36


def _adopt_orphans() -> bool:
    """Become the parent of every process the command leaves behind when its own parent
    exits (Linux's child subreaper), so that this script knows when none is left: whether it
    could."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (ImportError, OSError, AttributeError):  # no ctypes, or no such call
        return False


def _runs_in_group(left: bool, adopted: bool) -> bool:
    """Whether something the command started may still run in this group, once the command
    was reaped: one of the children ``left`` that is of this group (one that left the group
    on purpose, a daemon, is detached: neither waited for nor ended, as from a terminal).
    True when it cannot be told (no orphans adopted, no list of children)."""
    if not adopted:
        return True
    if not left:
        return False
    try:
        with open(f"/proc/self/task/{os.getpid()}/children", "rb") as listed:
            children = [int(pid) for pid in listed.read().split()]
    except (OSError, ValueError):
        return True
    group = os.getpgrp()
    for pid in children:
        try:
            if os.getpgid(pid) == group:
                return True
        except ProcessLookupError:
            continue  # reaped meanwhile: gone
    return False


def _reap(child: int) -> tuple[int | None, bool]:
    """Reap every child that exited, the command and the orphans adopted (which would stay
    zombies until the command's end otherwise): the command's status, if it was among them,
    and whether a child is left, still running."""
    status = None
    while True:
        try:
            pid, ended = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status, False
        if pid == 0:
            return status, True
        if pid == child:
            status = ended


def _end_group() -> None:
    """Everyone in the group goes at once, this script included (see the module doc)."""
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _exit_like(status: int) -> None:
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file of ours
            signal.signal(signum, signal.SIG_DFL)
        except (ValueError, OSError, ImportError):
            pass  # SIGKILL and SIGSTOP cannot be changed, and need not be
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)
    os._exit(os.waitstatus_to_exitcode(status))


def main(argv: list[str]) -> None:
    lifeline = int(argv[1])
    try:
        deadline, command = float(argv[2]), argv[3:]
    except ValueError:  # started by a runtime of before the pulses (an upgrade in place)
        deadline, command = float("inf"), argv[2:]
    os.set_inheritable(lifeline, False)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, _ignore)
    signal.signal(signal.SIGTERM, _ignore)  # a handler, not SIG_IGN: it does not survive exec
    # Python ignores SIGPIPE and SIGXFSZ for itself, and a runtime started in the background
    # by a shell has SIGINT and SIGQUIT ignored: the command gets the usual defaults.
    restore = [signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGQUIT]
    adopted = _adopt_orphans()
    child = os.posix_spawn(command[0], command, os.environ, setsigdef=restore)
    _detach_stdio()
    # poll, not select: the lifeline keeps the runtime's fd number, which may pass 1024.
    watch = select.poll()
    watch.register(wake_read, select.POLLIN)
    watch.register(lifeline, select.POLLIN)
    status: int | None = None
    released = False
    heard = time.monotonic()  # the last byte on the lifeline (or the start)
    while True:
        ended, left = _reap(child)
        status = status if ended is None else ended
        if status is not None and (released or not _runs_in_group(left, adopted)):
            _exit_like(status)
        # Watched until the supervisor exits, the release included: a command may close its
        # reply (the release) and go on working while the runtime waits for its end.
        wait = max(0.0, heard + deadline - time.monotonic())
        events = watch.poll(None if wait == float("inf") else int(wait * 1000) + 1)
        if not events and time.monotonic() - heard >= deadline:
            ended, left = _reap(child)
            status = status if ended is None else ended
            if status is not None and not _runs_in_group(left, adopted):
                _exit_like(status)  # nothing left to end (see the module doc)
            _end_group()  # the runtime has stopped running (see the module doc)
        for fd, _ in events:
            if fd == wake_read:
                os.read(wake_read, 512)
                continue
            byte = os.read(lifeline, 1)
            if not byte:  # end-of-file (POLLHUP reads as it too)
                _end_group()
            heard = time.monotonic()
            if byte == RELEASE:
                released = True


if __name__ == "__main__":
    main(sys.argv)
