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
import io
import os
import sys
from collections.abc import Awaitable, Callable, Sequence

import trio

from ..errors import InvalidWakeup, TrioRoutinesError
from ..logs import configure_logging
from ..text import shown
from .firing import cmd_fire, cmd_run, fire_result_json
from .migrating import cmd_migrate
from .output import CliError, state_label
from .parser import build_parser
from .pausing import cmd_pause, cmd_resume
from .serve import cmd_serve
from .status import cmd_list, cmd_status
from .views import cmd_check, cmd_history, cmd_next
from .wakes import cmd_unwake, cmd_wake

__all__ = ["CliError", "build_parser", "fire_result_json", "main", "state_label"]

_COMMANDS: dict[str, Callable[[argparse.Namespace], Awaitable[int]]] = {
    "serve": cmd_serve,
    "run": cmd_run,
    "fire": cmd_fire,
    "history": cmd_history,
    "list": cmd_list,
    "status": cmd_status,
    "next": cmd_next,
    "check": cmd_check,
    "wake": cmd_wake,
    "unwake": cmd_unwake,
    "pause": cmd_pause,
    "resume": cmd_resume,
    "migrate": cmd_migrate,
}


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


def main(argv: Sequence[str] | None = None) -> int:
    _tolerant_streams()
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_format, args.log_level)
    try:
        return trio.run(_COMMANDS[args.command], args)
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
        sys.stderr.write(f"error: {shown(str(first)) or type(first).__name__}\n")
        return first.code if isinstance(first, CliError) else 1
