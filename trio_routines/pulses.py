"""A pulse on every running command's lifeline: the sign, to the ``cmd:`` agent's supervisor
(:mod:`trio_routines.lifeline`), that the process that started the command still runs.

Why. A process that is stopped (``SIGSTOP``, a debugger) keeps its holds on a state directory,
since the kernel lets go of those locks when the process ends, not when it pauses. On
PostgreSQL the holds are the locks of its connections, and a connection the server ends
meanwhile (``pg_terminate_backend``, a restart, a proxy that drops it) takes them along: from
then on another replica sees the session free and may start its next turn, while this one's
command, a process of its own that nothing stopped, runs on. So every second a thread of ours
writes one byte to each running command's lifeline, and a supervisor that hears none for
:data:`PULSE_DEADLINE` seconds ends its command's group, as it does when the lifeline closes.
Two turns of one session then overlap for at most that long, never for the whole pause. A
thread and not a task: a busy event loop is no reason to end a turn (a herd of 10,000 fires
holds it for seconds); only a process that does not run at all, every thread of it, is.

The turn's agent then sees its command killed, and says why (:meth:`Pulses.late`): the
pulses stopped for longer than the deadline.
"""

from __future__ import annotations

import os
import select
import threading
import time

#: How often a pulse is written (seconds).
PULSE_EVERY = 1.0
#: How long a supervisor waits for a pulse before it ends its command (seconds): ten missed
#: pulses, so that a process starved of the processor for a few seconds is not taken for a
#: stopped one.
PULSE_DEADLINE = 10.0
PULSE = b"."  # any byte but lifeline.RELEASE


class Pulses:
    """The lifelines of the running commands, and the thread that pulses them.

    A descriptor is written to only while it is registered, under the lock: it is taken out
    (:meth:`discard`) before it is closed, so a pulse never lands on a descriptor number the
    process has given to something else since. A lifeline whose pipe is full (a supervisor
    that does not read: stopped too) is passed over, never waited on.
    """

    def __init__(self, every: float = PULSE_EVERY, deadline: float = PULSE_DEADLINE) -> None:
        self.every = every
        self.deadline = deadline
        self._lock = threading.Lock()
        self._fds: dict[int, bool] = {}  # a lifeline: whether a pulse to it came too late
        self._running = False
        self._pulsed = time.monotonic()  # when the thread last pulsed (or was started)
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        """In a child forked from this process: no thread runs here, and the lifelines are
        the parent's, which a child must not keep alive for it."""
        self._lock = threading.Lock()
        self._fds = {}
        self._running = False

    def add(self, fd: int) -> None:
        """Pulse ``fd`` from now on (starting the thread if none runs)."""
        with self._lock:
            self._fds[fd] = False
            if self._running:
                return
            self._running = True
            self._pulsed = time.monotonic()
        try:
            threading.Thread(target=self._pulse, name="trio_routines pulses", daemon=True).start()
        except BaseException:  # no thread (the process has run out of them): the next add tries
            with self._lock:
                self._running = False
            raise

    def discard(self, fd: int) -> bool:
        """Stop pulsing ``fd`` (before it is closed); whether a pulse to it came too late."""
        with self._lock:
            return self._fds.pop(fd, False)

    def late(self, fd: int) -> bool:
        """Whether this process went longer than the deadline without pulsing ``fd``: a pulse
        came too late, or none has come for that long now (the process just ran again, and
        its thread has not pulsed yet)."""
        with self._lock:
            if fd not in self._fds:
                return False
            return self._fds[fd] or time.monotonic() - self._pulsed > self.deadline

    def _pulse(self) -> None:
        try:
            self._pulse_while_any()
        finally:  # however it ends: the next add starts another
            with self._lock:
                self._running = False

    def _pulse_while_any(self) -> None:
        while True:
            # A relative wait, not ``time.sleep``: that one waits for an absolute instant of
            # the monotonic clock, which libfaketime (a wall clock set for a process) turns
            # into EINVAL, and the thread, gone, would have every command ended.
            select.select([], [], [], self.every)
            now = time.monotonic()
            with self._lock:
                if not self._fds:
                    return
                stalled = now - self._pulsed > self.deadline
                for fd in self._fds:
                    if stalled:
                        self._fds[fd] = True
                    _write(fd)
                self._pulsed = now


def _write(fd: int) -> None:
    """One pulse on ``fd`` if its pipe has room; nothing if it has none or is gone."""
    watch = select.poll()
    watch.register(fd, select.POLLOUT)
    try:
        if watch.poll(0):
            os.write(fd, PULSE)
    except OSError:
        pass  # the supervisor is gone: its exit status tells what happened


#: This process's pulses (one thread for all its commands).
PULSES = Pulses()
