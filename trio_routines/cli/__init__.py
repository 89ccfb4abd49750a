"""The command line: ``python -m trio_routines <command>``.

A thin surface over the library: each command parses its options, opens what it needs (the
routines directory, the store, the agent), calls the runtime, and turns the answer into text
on stdout, logs on stderr and an exit status -- 0 success (a duplicate or stale ``fire``
included: nothing was wrong), 1 failure (a failed turn, an unknown routine, a broken routine
file, unusable state, a value that fails validation), 2 usage (what argparse refuses: an unknown
option, a missing one, a conflict between options). Every expected failure is one line on
stderr and never a traceback; a traceback means a bug.

Commands that change nothing (``history``, ``list``, ``next``, ``check``) read routine files
leniently: a broken file is reported and the rest go on. ``serve`` refuses to start while any
file is broken; ``run`` and ``fire`` refuse only when the routine they were asked for is.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import sys
from collections.abc import Awaitable, Callable, Sequence

import trio

from ..errors import InvalidWakeup, TrioRoutinesError
from ..logs import configure_logging
from ..text import shown
from .output import CliError, say_error, state_label
from .parser import build_parser, check_url_goes

__all__ = ["CliError", "build_parser", "main", "state_label"]

# Each command's module and function, imported when the command runs: `history` need not
# load the scheduler, the HTTP surface or the agents (a command starts in about half the time).
_COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("serve", "cmd_serve"),
    "run": ("firing", "cmd_run"),
    "fire": ("firing", "cmd_fire"),
    "history": ("views", "cmd_history"),
    "list": ("status", "cmd_list"),
    "status": ("status", "cmd_status"),
    "next": ("views", "cmd_next"),
    "check": ("views", "cmd_check"),
    "wake": ("wakes", "cmd_wake"),
    "unwake": ("wakes", "cmd_unwake"),
    "pause": ("pausing", "cmd_pause"),
    "resume": ("pausing", "cmd_resume"),
    "migrate": ("migrating", "cmd_migrate"),
}


def _command(name: str) -> Callable[[argparse.Namespace], Awaitable[int]]:
    module, function = _COMMANDS[name]
    command: Callable[[argparse.Namespace], Awaitable[int]] = getattr(
        importlib.import_module(f".{module}", __name__), function
    )
    return command


#: The commands that only read: with stdout closed they would do nothing (one that acts does
#: what it does, and what it would print goes nowhere).
_READS = frozenset({"history", "list", "status", "next", "check"})
_EXPECTED = (TrioRoutinesError, OSError, InvalidWakeup)


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def _tolerant_streams() -> None:
    """A terminal or pipe that cannot take a character (``LANG=C``) gets ``\\u2014``, not
    a UnicodeEncodeError halfway through a table."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


def _fill_closed() -> set[int]:
    """Put ``/dev/null`` on each of descriptors 0, 1 and 2 that was closed when we started
    (``list >&-``), and a stream on it: the next file we open would take that number, and a
    line printed would land in a claim file. Which were closed."""
    closed = set()
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.add(fd)
    for fd in sorted(closed):
        null = os.open(os.devnull, os.O_RDWR)  # the lowest free number: ``fd`` itself
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
    if 1 in closed:
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 -- the process's own stream
    if 2 in closed:
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115 -- the process's own stream
    return closed


def main(argv: Sequence[str] | None = None) -> int:
    try:
        closed = _fill_closed()
    except OSError as exc:  # no /dev/null to put there, or no descriptor left
        if sys.stderr is not None:
            sys.stderr.write(f"error: a standard stream is closed and cannot be filled: {exc}\n")
        return 1
    _tolerant_streams()
    parser = build_parser()
    args = parser.parse_args(argv)
    if 1 in closed and args.command in _READS:  # what it prints is all it does
        sys.stderr.write(f"error: stdout is closed: {args.command} has nowhere to write\n")
        return 1
    check_url_goes(parser, args)
    configure_logging(args.log_format, args.log_level)
    try:
        return trio.run(_command(args.command), args)
    except KeyboardInterrupt:
        return 130
    except BaseException as error:
        leaves = _leaves(error)
        if any(isinstance(leaf, KeyboardInterrupt) for leaf in leaves):
            return 130
        if any(isinstance(leaf, BrokenPipeError) for leaf in leaves):
            # The reader went away (`history | head`): nothing to say, nowhere to say it.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        expected = [leaf for leaf in leaves if isinstance(leaf, _EXPECTED)]
        if not expected or len(expected) != len(leaves):
            raise
        first = expected[0]
        say_error(shown(str(first)) or type(first).__name__)
        return first.code if isinstance(first, CliError) else 1
