"""The built-in agents of the command line, chosen by a spec string.

* ``echo`` answers every turn with its prompt: for trying the scheduler out.
* ``cmd:<shell command>`` runs ``/bin/sh -c <command>`` once per turn. The prompt is its
  stdin; its environment says why it runs (:func:`~trio_routines.current_fire`):
  ``TRIO_ROUTINES_SESSION``, ``TRIO_ROUTINES_FIRE`` (``routine``, ``wakeup``, ``run``, or empty
  outside the runtime), ``TRIO_ROUTINES_ROUTINE`` (the routine's name; for a wake-up, the name
  in a ``routine:<name>`` session, else empty), ``TRIO_ROUTINES_SLOT`` (the slot of a cron
  fire, else empty), ``TRIO_ROUTINES_WAKEUP`` (a wake-up's id, else empty) and
  ``TRIO_ROUTINES_TURN`` (the turn's ticket for its wake-up tools: :mod:`.tickets`) with
  ``TRIO_ROUTINES_URL`` (where ``serve --http`` answers, else empty); no other
  ``TRIO_ROUTINES_*`` nor any ``PG*`` variable (:data:`HIDDEN_FROM_COMMANDS`). Its stdout is
  the reply, streamed as it comes. Exit status 0 completes the turn; anything else fails it
  with the exit status and the last lines of stderr. A last line of stdout of
  ``trio-routines-usage: {"input_tokens": …, "output_tokens": …, "cost": …, "currency": …}``
  reports what the turn spent (:data:`~trio_routines.usage.USAGE_LINE`): it is not part of
  the reply (a malformed one is a warning, never a failure).
* ``py:<module>:<attribute>`` imports any Python agent: an object with ``invoke``, or a class
  or factory taking no arguments that builds one (:mod:`.agentspec`, which also says a spec
  as safe to log).
* ``http://…`` and ``https://…`` post each turn to an agent server
  (:mod:`trio_routines.agent_http`; needs the ``agent-http`` extra).

Theory of operation of ``cmd:``. The command runs in a session (and so a process group) of its
own, so that a cancelled turn can end everything it started -- the shell and whatever it forked
-- and not just the shell: the group gets SIGTERM, up to :data:`KILL_GRACE` seconds to leave,
then SIGKILL. The group's leader is a small supervisor (:mod:`trio_routines.lifeline`) holding
the read end of a pipe whose write end only this process holds: if this process dies, even by
SIGKILL, the supervisor sees end-of-file and kills the group at once, so no turn outlives its
runtime (nor the session holds that died with it).
The prompt is handed over through an unlinked temporary file and stderr goes to another, so
the only pipe is stdout, read by the task that iterates the events. That keeps the event
generator free of background tasks (Trio forbids yielding from inside a nursery there) and
cannot deadlock however much the command writes to stderr or however long the prompt is.
"""

from __future__ import annotations

import codecs
import logging
import os
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO

import trio

from . import tracing
from .agent import Agent, Completed, Event, Failed, TextDelta
from .agentspec import load_python_agent
from .context import current_fire
from .errors import InvalidAgent
from .instants import format_iso
from .logs import one_line
from .names import session_routine
from .procgroup import runs_in_group
from .pulses import PULSES
from .stores.abandon import run_abandoning
from .tickets import make_ticket
from .usage import UsageLine

log = logging.getLogger("trio_routines")

__all__ = ["KILL_GRACE", "CommandAgent", "EchoAgent", "InvalidAgent", "agent_from_spec"]

#: Seconds a cancelled command's process group gets between SIGTERM and SIGKILL.
KILL_GRACE = 2.0
#: What a command does not inherit, by name prefix: our own settings (the state, with a
#: database's password in it; the HTTP surface's token; the HTTP agent's) and libpq's
#: variables (``PGPASSWORD``, ``PGPASSFILE``, ``PGSERVICEFILE``, ``PGHOST``, ...), which
#: together say where the store is and how to log in to it.
HIDDEN_FROM_COMMANDS = ("TRIO_ROUTINES_", "PG")
#: How much of the end of stderr a failed command reports, in bytes and in lines.
STDERR_TAIL_BYTES = 4096
STDERR_TAIL_LINES = 5
#: Seconds a turn waits for its scratch files to close (a frozen disk may hold the close).
CLOSE_WAIT = 1.0

_SHELL = "/bin/sh"
_LIFELINE = str(Path(__file__).with_name("lifeline.py"))
RELEASE = b"r"  # lifeline.RELEASE (that script imports nothing of ours)
#: A command its supervisor ended because this process did not run (pulses.py).
_STOPPED = (
    "this process did not run for over {:g}s (stopped, or starved of the processor), so the "
    "command was ended: on PostgreSQL, another replica may have started its session's next "
    "turn meanwhile"
)


class EchoAgent:
    """Answers every turn with its own prompt."""

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        await trio.lowlevel.checkpoint()
        yield TextDelta(text)
        yield Completed()


class CommandAgent:
    """Runs a shell command per turn (this module's text above says how)."""

    def __init__(
        self, command: str, *, kill_grace: float = KILL_GRACE, scheduler_url: str | None = None
    ) -> None:
        if not command.strip():
            raise InvalidAgent('"cmd:" needs a shell command after the colon, e.g. cmd:cat')
        self.command = command
        self.kill_grace = kill_grace
        #: Where the command reaches the scheduler's HTTP surface (``serve --http`` sets it).
        self.scheduler_url = scheduler_url

    def __repr__(self) -> str:
        return f"CommandAgent({self.command!r})"

    def environment(self, session: str) -> dict[str, str]:
        """The command's environment: ours without the store's credentials nor our tokens (a
        turn steered by its prompt must not find the store to write into, its claims, its
        wake-ups, nor a token to call us back with), and the turn's own variables."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(HIDDEN_FROM_COMMANDS)}
        fire = current_fire()
        routine = fire.routine if fire is not None else None
        if routine is None:
            routine = session_routine(session)
        env["TRIO_ROUTINES_SESSION"] = session
        env["TRIO_ROUTINES_FIRE"] = fire.kind if fire is not None else ""
        env["TRIO_ROUTINES_ROUTINE"] = routine or ""
        slot = fire.slot if fire is not None else None
        env["TRIO_ROUTINES_SLOT"] = format_iso(slot) if slot is not None else ""
        env["TRIO_ROUTINES_WAKEUP"] = (fire.wakeup if fire is not None else None) or ""
        # The turn's ticket: the wake-up tools of this session alone, as this turn (tickets.py).
        env["TRIO_ROUTINES_TURN"] = make_ticket(fire) if fire is not None else ""
        env["TRIO_ROUTINES_URL"] = self.scheduler_url or ""  # where to send it
        # The turn's trace context (W3C), when there is one; never one inherited from whoever
        # started us: a cron fire is a root (the clock caused it), and a caller's context is
        # the caller's turn's alone.
        env.pop("TRACEPARENT", None)
        env.pop("TRACESTATE", None)
        trace = tracing.outgoing()
        if trace:
            env["TRACEPARENT"] = trace["traceparent"]
            if "tracestate" in trace:
                env["TRACESTATE"] = trace["tracestate"]
        return env

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        # In a thread its caller may leave (a frozen disk under TMPDIR must not hold a turn past
        # its grace): files made for a caller gone are closed by the thread.
        stdin, stderr = await run_abandoning(
            _scratch_files,
            text,
            limiter=trio.to_thread.current_default_thread_limiter(),
            late=_close_both,
        )
        process: trio.Process | None = None
        finished = False
        lifeline = held = -1
        try:
            lifeline, held = os.pipe()
            # Never waited on: a supervisor stopped too, its pipe full, blocks no write of ours.
            os.set_blocking(held, False)
            # Pulsed from now on, before the start (which may wait for a busy event loop): the
            # supervisor counts from its own start, and finds the pulses waiting in the pipe.
            PULSES.add(held)
            process = await trio.lowlevel.open_process(
                [
                    *(sys.executable, "-I", "-S", _LIFELINE, str(lifeline)),
                    *(str(PULSES.deadline), _SHELL, "-c", self.command),
                ],
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=self.environment(session),
                start_new_session=True,
                pass_fds=(lifeline,),
            )
            # The child has its own copies now; ours only keep the files alive. ``held`` stays
            # open until the command is over: the kernel closing it is what ends an orphan.
            os.close(lifeline)
            lifeline = -1
            stdin.close()
            assert process.stdout is not None
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            last = UsageLine()  # a usage line at the end is held back from the reply
            while chunk := await process.stdout.receive_some():
                piece = last.feed(decoder.decode(chunk))
                if piece:
                    yield TextDelta(piece)
            piece, usage, problem = last.close_after(decoder.decode(b"", final=True))
            if piece:
                yield TextDelta(piece)
            if problem is not None:
                log.warning("the cmd: agent's usage line is left out: %s", one_line(problem))
            if usage is not None:
                yield usage
            # The reply is over: the supervisor may now exit with the command (see
            # lifeline.py). Until now it stayed, even if the shell had exited, because
            # something the shell left behind held the reply open: the turn was in flight.
            _release(held)
            status = await process.wait()
            finished = True
            if status == 0:
                yield Completed()
            elif status == -signal.SIGKILL and PULSES.late(held):
                yield Failed(_STOPPED.format(PULSES.deadline))
            else:
                tail = await trio.to_thread.run_sync(_tail, stderr, abandon_on_cancel=True)
                yield Failed(_describe_status(status) + (f": {tail}" if tail else ""))
        finally:
            if process is not None:
                await self._end(process, finished, held)
            if held >= 0:
                PULSES.discard(held)  # before it is closed: its number may be reused
            for fd in (lifeline, held):
                if fd >= 0:
                    os.close(fd)
            # Closed in a thread, waited for a moment: the last close of an unnamed file frees
            # it on the disk, which a frozen file system makes wait, and the event loop must not.
            with trio.CancelScope(deadline=trio.current_time() + CLOSE_WAIT, shield=True):
                await trio.to_thread.run_sync(_close_all, stdin, stderr, abandon_on_cancel=True)

    async def _end(self, process: trio.Process, finished: bool, held: int) -> None:
        """Close our pipe; unless the turn ran to its end, end the command's process group.

        A turn cut short (cancelled, closed early, or failing in our own code) takes down
        the whole group, even when the shell itself has exited already: what it forked may
        still run. A turn that ran to its end leaves alone what the command chose to detach.
        """
        # Shielded, and bounded: a cancelled turn must still clean up, and never hang.
        with trio.CancelScope(shield=True):
            if process.stdout is not None:
                await process.stdout.aclose()
            if finished:
                return
            # Released, so that the supervisor leaves with the shell and ``wait`` below sees
            # it; the rest of the group is ours to end, as before.
            _release(held)
            _signal_group(process.pid, signal.SIGTERM)
            with trio.move_on_after(self.kill_grace) as waited:
                await process.wait()
                # Nothing signals when a group empties; its members are not our children.
                while await trio.to_thread.run_sync(_group_alive, process.pid):  # noqa: ASYNC110
                    await trio.sleep(0.05)
            if not waited.cancelled_caught:
                return  # the group is gone: its id may already be someone else's
            _signal_group(process.pid, signal.SIGKILL)
            with trio.move_on_after(self.kill_grace):
                await process.wait()


def _release(held: int) -> None:
    # Written only while the supervisor reads: it exits before the release once nothing the
    # command started runs, and a write to a pipe nobody reads raises SIGPIPE, which a host
    # application may have set back to its default (the end of the process).
    watch = select.poll()
    watch.register(held, select.POLLOUT)
    try:
        if any(flags & (select.POLLERR | select.POLLHUP) for _, flags in watch.poll(0)):
            return
        os.write(held, RELEASE)
    except OSError:
        pass  # the supervisor is gone already: its exit status tells what happened


def _scratch_files(prompt: str) -> tuple[IO[bytes], IO[bytes]]:
    # Handed to the caller, which closes both once the turn is over.
    stdin = tempfile.TemporaryFile()  # noqa: SIM115
    try:
        stdin.write(prompt.encode("utf-8", errors="replace"))
        stdin.flush()
        stdin.seek(0)
        return stdin, tempfile.TemporaryFile()
    except BaseException:
        stdin.close()
        raise


def _close_all(*files: IO[bytes]) -> None:
    for file in files:
        file.close()


def _close_both(files: tuple[IO[bytes], IO[bytes]]) -> None:
    _close_all(*files)


def _tail(stderr: IO[bytes]) -> str:
    size = stderr.seek(0, os.SEEK_END)
    stderr.seek(max(0, size - STDERR_TAIL_BYTES))
    text = stderr.read().decode("utf-8", errors="replace")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-STDERR_TAIL_LINES:])


def _describe_status(status: int) -> str:
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"killed by {name}"
    return f"exit status {status}"


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already (or its id was recycled by someone else's)


def _group_alive(pgid: int) -> bool:
    """Whether a member of group ``pgid`` still runs; one that exited counts as gone, reaped
    or not (see :func:`~trio_routines.procgroup.runs_in_group`)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return runs_in_group(pgid)


def agent_from_spec(spec: str) -> Agent:
    """Build the agent ``spec`` names: ``echo``, ``cmd:<shell command>``, ``py:<mod>:<attr>``
    or an ``http://`` / ``https://`` URL. Raises :class:`InvalidAgent` with a one-line reason.
    """
    text = spec.strip()
    if text == "echo":
        return EchoAgent()
    if text.startswith("cmd:"):
        return CommandAgent(text[len("cmd:") :])
    if text.startswith("py:"):
        return load_python_agent(text[len("py:") :])
    if text.lower().startswith(("http://", "https://")):
        try:
            from .agent_http import HttpAgent  # httpx only when asked for
        except ImportError:
            raise InvalidAgent(
                'the http(s):// agent needs httpx: pip install "trio-routines[agent-http]"'
            ) from None
        return HttpAgent(text)
    shown = text if len(text) <= 40 else text[:40] + "…"
    raise InvalidAgent(
        f'unknown agent "{shown}" — use echo, cmd:<shell command>, py:<module>:<attribute> '
        "or http(s)://host/path"
    )
