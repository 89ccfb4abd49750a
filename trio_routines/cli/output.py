r"""What every command shares: its options read, its state and agent opened, its text printed.

Printing goes through :func:`print_line`, :func:`print_json` and :func:`say` (flushed at once,
so a pipe sees each line when it is written). Nothing they write can move a terminal's cursor:
text lines show control characters as ``\xNN`` and JSON escapes them, C1 and DEL included
(which ``json.dumps`` leaves raw). Every expected failure is a :class:`CliError`, one line and an
exit status.
"""

from __future__ import annotations

import argparse
import logging
import os
import pwd
import signal
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import trio

from ..agent import Agent
from ..agents import agent_from_spec
from ..agentspec import describe_agent as describe_spec
from ..errors import AgentUnavailable, InvalidAgent, TrioRoutinesError
from ..logs import configured_format
from ..names import name_problem
from ..replicas import REPLICA_ENV, replica_problem
from ..routinedir import LoadResult, find_routine, load_routines
from ..routines import Routine
from ..scheduler.state import DEFAULT_GRACE as DEFAULT_GRACE
from ..scheduler.state import STORE_TIMEOUT, duration
from ..store import Store
from ..stores import is_postgres_url, open_store, state_problem
from ..stores.credentials import shown_state
from ..stores.fileplaces import kind_of
from ..text import name_shown, safe_json, shown, visible
from ..tickets import share_key

if TYPE_CHECKING:  # imported where used: a command that fires nothing does not load them
    from ..scheduler import Scheduler

log = logging.getLogger("trio_routines")
T = TypeVar("T")

DEFAULT_STATE = ".state"
DEFAULT_ROUTINES = "routines"


class CliError(TrioRoutinesError):
    """An expected failure of a command: its one-line message and exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def quoted(text: str) -> str:
    """A name from outside, quoted for a message: one visible line that no other name shows
    as (see :class:`~.table.Name`), at most 64 characters."""
    return '"' + name_shown(text)[:64] + '"'


def state_arg(args: argparse.Namespace) -> str:
    """``--state``, else ``$TRIO_ROUTINES_STATE``, else the default; a URL of no store is
    refused (see :func:`~trio_routines.stores.state_problem`)."""
    state: str = args.state or os.environ.get("TRIO_ROUTINES_STATE") or DEFAULT_STATE
    problem = state_problem(state)
    if problem is not None:
        source = "--state" if args.state else "$TRIO_ROUTINES_STATE"
        raise CliError(f"{source}: {problem}", 2)
    return state


def replica_arg(args: argparse.Namespace) -> str | None:
    """``--replica``, else ``$TRIO_ROUTINES_REPLICA``, else None (``host:pid``)."""
    replica = getattr(args, "replica", None) or os.environ.get(REPLICA_ENV) or None
    if replica is None:
        return None
    problem = replica_problem(replica)
    if problem is not None:
        raise CliError(f"--replica: {problem}", 2)
    return replica


def state_label(state: str) -> str:
    """The state as messages show it: every credential in it masked."""
    return shown_state(state)


def agent_arg(args: argparse.Namespace, command: str) -> Agent:
    spec = args.agent or os.environ.get("TRIO_ROUTINES_AGENT")
    if not spec:
        raise CliError(
            f"{command} needs an agent: pass --agent "
            "echo|cmd:<command>|py:<module>:<attr>|http(s)://host/path "
            "or set TRIO_ROUTINES_AGENT",
            code=2,
        )
    token = os.environ.get("TRIO_ROUTINES_TOKEN")
    if token:
        # Its turns' tickets are honoured by every replica given the token (tickets.py):
        # serve's, and a run's or a fire's on the command line.
        share_key(token)
    try:
        return agent_from_spec(spec)
    except AgentUnavailable as exc:  # what loading it met, which may pass: a restart may help
        raise CliError(str(exc)) from None
    except InvalidAgent as exc:  # the option's value: a usage error, which a restart repeats
        raise CliError(str(exc), code=2) from None


def describe_agent(args: argparse.Namespace) -> str:
    spec: str = args.agent or os.environ.get("TRIO_ROUTINES_AGENT") or ""
    return describe_spec(spec)


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:  # a systemd DynamicUser= exists only while its service runs
        return f"uid {uid}"


def check_owner(state: str, command: str, *, existing: bool = False) -> None:
    """Refuse to change a state directory that another user owns, before anything is written.

    What the command created there (``schedule/``, a pause file, a lock) would belong to us:
    the service's own user could then no longer write its state (``/readyz`` not ready, a
    resume failing with EACCES). Its owner, or the running service over HTTP, does it instead.
    An absent directory is created as ours, unless ``existing``: a command that acts on what
    a scheduler keeps there (a pause, a resume, a wake-up's removal) made it anew, parents and
    all, at a mistyped path, and said it was done (``serve`` makes it; so do ``fire``, ``run``
    and ``wake``, which may come first). One that is no directory is refused as what it is
    (:func:`check_is_directory`); one that cannot be looked at (EACCES, a dangling link) is
    the store's to report, in its own words.
    """
    if is_postgres_url(state):
        return
    check_is_directory(state)
    try:
        status = os.stat(state)
    except FileNotFoundError:
        if existing and not os.path.lexists(state):
            raise CliError(
                f"no state directory at {state_label(state)} — {command} changes the state a "
                "scheduler keeps, which `serve` makes: is --state (or TRIO_ROUTINES_STATE) right?"
            ) from None
        return
    except OSError:
        return
    me = os.geteuid()
    if not stat.S_ISDIR(status.st_mode) or status.st_uid == me:
        return
    owner, you = _user(status.st_uid), _user(me)
    instead = f"run it as {owner}"
    if command != "serve":
        instead = f"send it to the running service with --url URL, or {instead}"
    raise CliError(
        f"{command} refused: the state directory {state_label(state)} belongs to {owner}, not "
        f"to {you}, and the service could not change what {command} wrote there — {instead}; "
        "nothing was changed"
    )


def check_is_directory(state: str) -> None:
    """Refuse a state path that is there but is no directory (a regular file, a FIFO), or a
    symbolic link to nothing, naming it: the store would fail on a path inside it, in words
    about that path, and a reading command would read the link as a state where nothing ever
    ran. What cannot be looked at (EACCES) is the store's to say; an absent one is made."""
    if is_postgres_url(state):
        return
    try:
        status = os.stat(state)
    except FileNotFoundError:
        _check_not_dangling(state)
        return
    except OSError:
        return
    if not stat.S_ISDIR(status.st_mode):
        raise CliError(
            f"--state {state_label(state)} is {kind_of(status.st_mode)}, not a state directory "
            "(ENOTDIR) — give --state the directory `serve` keeps its state in"
        )


def _entry(state: str) -> str:
    """The directory entry a state path names: without its trailing slashes, through which a
    look would follow a link (``link/``)."""
    return state.rstrip(os.sep) or state


def _check_not_dangling(state: str) -> None:
    """Refuse a ``state`` that is a symbolic link to nothing (its target moved, a typo in
    it): nothing is made through it."""
    try:
        target = os.readlink(_entry(state))
    except OSError:  # no link: absent, or a link in its parents (the store says so)
        return
    shown_target = target if len(target) <= 200 else target[:200] + "…"  # a link holds 4 KiB
    raise CliError(
        f"--state {state_label(state)} is a symbolic link to {shown_target}, which does not "
        "exist — restore what it points to, or give --state the state directory itself"
    )


@asynccontextmanager
async def open_state(
    state: str,
    *,
    writes: str | None = None,
    existing: bool = False,
    migrate: Literal["always", "create", "never"] | None = None,
) -> AsyncIterator[Store]:
    """The store ``state`` names; ``writes``: the command that will change it, ``existing``:
    a state it must find there (see :func:`check_owner`). A PostgreSQL schema is upgraded
    only by ``serve`` and ``migrate`` (``migrate="always"``); a command that writes may
    create an empty database's tables; one that only reads never writes a schema (see
    stores/postgres/schema.py)."""
    if writes is not None:
        check_owner(state, writes, existing=existing)
    else:
        check_is_directory(state)
    if migrate is None:
        migrate = "never" if writes is None else "create"
    try:
        store = open_store(state, migrate=migrate)
    except ImportError as exc:
        raise CliError(
            f"--state {state_label(state)}: PostgreSQL support is not available "
            f"(pip install 'trio-routines[postgres]'): {exc}"
        ) from None
    try:
        yield store
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()


# What a change cut off by our deadline tells the user ("the pause", "the cancellation"): the
# store may not have made it, or may still make it (a state directory's write still in the
# kernel when the command's process ends; a PostgreSQL commit already sent to a server whose
# commits stall). Asking again is harmless for a pause, a resume or a removal, which are
# idempotent; an add asked again could be made twice, so it says to look first.
NOT_CONFIRMED = "the {} is not confirmed: try again once it answers"
#: An add cut off so: asking again could add it twice, were the first to land after all.
ADD_NOT_CONFIRMED = (
    "the {} is not confirmed: once the store answers, look for it before adding it again"
)


class StoreDeadline:
    """The deadline of a command's store calls on ``state`` (None: a state not named): each
    read or write within :data:`~trio_routines.scheduler.state.STORE_TIMEOUT`, the deadline
    the runtime gives each of its own (scheduler/calls.py). A store that does not answer by
    then ends the command, in one line naming the store and what it was asked (both stores
    let a call cut off be left to its thread); Ctrl-C still ends the wait at once.
    """

    def __init__(self, state: str | None) -> None:
        self.store = "the state store" + ("" if state is None else f" {state_label(state)}")

    async def __call__(
        self, asked: str, call: Awaitable[T], then: str = "try again once it answers"
    ) -> T:
        """``await call``, the store asked ``asked`` (``reading the paused routines``);
        ``then``: what to do when it does not answer."""
        with trio.move_on_after(STORE_TIMEOUT):
            return await call
        raise CliError(
            f"{self.store} did not answer within {duration(STORE_TIMEOUT)} ({asked}) — {then}"
        )


async def load(directory: str, *, report: bool) -> LoadResult:
    """The routines of ``directory``, which must exist: a typo in ``--routines`` is no empty
    directory (the library reads an absent directory as empty; the command line does not)."""
    if not await trio.to_thread.run_sync(os.path.lexists, directory):
        raise CliError(
            f"--routines {directory}: no such directory (create it, or point --routines at "
            "the directory holding your <name>.md files)"
        )
    result = await trio.to_thread.run_sync(load_routines, directory)
    if report:
        report_failures(result)
    return result


def report_failures(result: LoadResult) -> None:
    for failure in result.failures:
        log.warning("%s — skipped", failure)


def check_name(name: str) -> None:
    problem = name_problem(name)
    if problem is not None:
        raise CliError(problem)


def pick(result: LoadResult, name: str, directory: str) -> Routine:
    """The routine ``name``, or the one-line reason it cannot be had."""
    check_name(name)
    routine = find_routine(result, name)
    if routine is not None:
        return routine
    wanted = os.path.join(directory, f"{name}.md")
    for failure in result.failures:
        if failure.file == wanted:
            raise CliError(str(failure))
    report_failures(result)  # a broken file may be the routine that was meant
    available = ", ".join(r.name for r in result.routines) or "(none)"
    raise CliError(
        f"unknown routine {quoted(name)} — looked in {directory}; available: {available}"
    )


def print_line(text: str = "") -> None:
    """One line on stdout, control characters shown as ``\\xNN``."""
    sys.stdout.write(visible(text) + "\n")
    sys.stdout.flush()


def print_json(value: Any, *, indent: int | None = 2) -> None:
    """JSON with every control character escaped (``\\u009b``): safe on a terminal."""
    sys.stdout.write(safe_json(value, indent=indent) + "\n")
    sys.stdout.flush()


async def say_if_no_state(state: str) -> None:
    """One line when the state directory a reading command reads is not there: it reads as
    nothing ever run, which a mistyped ``--state`` would show as well (nothing is made).
    Looked at in a thread, as :func:`load` looks for the routines directory."""
    if is_postgres_url(state):
        return
    if not await trio.to_thread.run_sync(os.path.lexists, _entry(state), abandon_on_cancel=True):
        say(
            f"no state directory at {state_label(state)} — nothing has run or been stored "
            "there: is --state (or TRIO_ROUTINES_STATE) right?"
        )


def say(text: str) -> None:
    """One line for the operator on stderr (hints, summaries), shown safely."""
    sys.stderr.write(shown(text) + "\n")
    sys.stderr.flush()


def say_error(text: str) -> None:
    """``error: <text>`` on stderr: a plain line, or, where the log is written as JSON or for
    the journal (``--log-format``), an ERROR record in that format: a service's reason to
    stop is read where its log is (``journalctl -p err``)."""
    if configured_format() in (None, "text"):
        sys.stderr.write(f"error: {shown(text)}\n")
        sys.stderr.flush()
        return
    log.error("%s", shown(text))


async def stop_on_signals(
    scheduler: Scheduler, grace: float, body: Callable[[], Awaitable[T]]
) -> T:
    """Run ``body``; SIGINT/SIGTERM stop ``scheduler`` with ``grace`` (a second: at once)."""
    from ..hosting import watch_signals

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_signals, signals, scheduler, grace)
            result = await body()
            nursery.cancel_scope.cancel()
    return result
