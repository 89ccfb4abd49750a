"""Code of ours run in a forked child of the test process, which mutation testing still sees.

mutmut learns which tests reach a mutated function from what its trampolines record in the
test process during its clean ("stats") run (docs/mutation.md). What a forked child reaches
is recorded in the child and dies with it, so a function reached only there would be judged
by no test at all: the supervisor of ``cmd:`` turns (``trio_routines/lifeline.py``) is one, as
it runs as a process of its own, spawns the command, and ends by ``os._exit`` or a signal.

:func:`fork` runs a function in a child and, during mutmut's stats run only, has the child
send each function it reaches up a pipe the moment it first reaches it (the child may end at
any point, by a signal included); :meth:`Child.reap` waits for the child and hands them to
mutmut as if the parent had reached them. Outside a mutation run it is a plain fork.

The child never outlives the test process (on Linux): a test stopped by a bound or by mutmut's
timeout (tests/mutation_bounds.py) runs no teardown, and a child left behind would hold the
test process's descriptors, mutmut's output among them, for as long as a hanging mutant runs.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

RETURNED = 98  # the function returned: the child exits with this status
RAISED = 97  # the function raised
ORPHANED = 96  # the test process was gone before the child could tie its life to it
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _mutmut_hits() -> Any:
    """mutmut's set of the functions reached during the current test, in its stats run."""
    if os.environ.get("MUTANT_UNDER_TEST") != "stats":
        return None
    try:
        from mutmut.state import state
    except ImportError:
        return None
    return getattr(state(), "_stats", None)


class _Relay(set[str]):
    """A set that writes each name it is given once to ``fd`` as a line."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd

    def add(self, name: str) -> None:
        if name not in self:
            super().add(name)
            os.write(self._fd, name.encode() + b"\n")


class Child:
    """A forked child: its pid, and the functions it reached for mutmut (when asked)."""

    def __init__(self, pid: int, hits: int | None) -> None:
        self.pid = pid
        self._hits = hits
        self.status: int | None = None

    def poll(self) -> int | None:
        """The child's wait status once it has ended (reaped then), else ``None``."""
        if self.status is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.status = status
                self._collect()
        return self.status

    def reap(self, timeout: float = 15.0) -> int:
        """Wait for the child (a bounded poll) and return its wait status."""
        deadline = time.monotonic() + timeout
        while (status := self.poll()) is None:
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"the forked child did not end within {timeout}s")
            time.sleep(0.01)
        return status

    def kill(self) -> None:
        """SIGKILL the child (and its group, when it leads one) and reap it."""
        for kill in (os.killpg, os.kill):
            try:
                kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.status is None:
            _, self.status = os.waitpid(self.pid, 0)
            self._collect()

    def _collect(self) -> None:
        if self._hits is None:
            return
        hits, self._hits = self._hits, None
        os.set_blocking(hits, False)
        data = b""
        try:
            while chunk := os.read(hits, 65536):
                data += chunk
        except BlockingIOError:
            pass
        finally:
            os.close(hits)
        recorded = _mutmut_hits()
        if recorded is not None:
            recorded.update(data.decode().split())


def _die_with(parent: int) -> None:
    """SIGKILL this process when the thread that forked it (the test's) ends."""
    if sys.platform != "linux":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:
        os._exit(ORPHANED)


def fork(target: Callable[[], object]) -> Child:
    """Run ``target`` in a forked child, which exits with :data:`RETURNED` or :data:`RAISED`
    unless ``target`` ends it first."""
    relay = os.pipe() if _mutmut_hits() is not None else None
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        status = RAISED
        try:
            _die_with(parent)
            if relay is not None:
                os.close(relay[0])
                from mutmut.state import state

                state()._stats = _Relay(relay[1])
            target()
            status = RETURNED
        finally:
            os._exit(status)
    if relay is None:
        return Child(pid, None)
    os.close(relay[1])
    return Child(pid, relay[0])
