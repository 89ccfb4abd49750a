"""The argument parser: every command, its options, and the options all of them share."""

from __future__ import annotations

import argparse
import os
import sys

from .. import __version__
from ..records import Outcome
from ..wakelimits import DEFAULT_DEPTH, DEFAULT_LIFETIME, DEFAULT_RATE
from ..wakeups import POLL_INTERVAL
from . import values
from .output import DEFAULT_GRACE, DEFAULT_ROUTINES, DEFAULT_STATE
from .parsing import Given, Parser


def _add_common(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """The options every command takes, accepted before or after the command's name.

    The copies on the commands default to SUPPRESS, so that an option given before the
    command is not overwritten by the command's default (argparse's subparser behaviour).
    """

    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group("common options")
    group.add_argument(
        "--state",
        metavar="PATH_OR_URL",
        type=values.given,
        default=default(None),
        help="state directory, or a postgresql:// URL "
        f"(default: $TRIO_ROUTINES_STATE, else {DEFAULT_STATE})",
    )
    group.add_argument(
        "--routines",
        metavar="DIR",
        action=Given,
        default=default(DEFAULT_ROUTINES),
        help=f"the routines directory (default: {DEFAULT_ROUTINES})",
    )
    group.add_argument(
        "--agent",
        metavar="SPEC",
        type=values.given,
        default=default(None),
        help="echo, cmd:<shell command>, py:<module>:<attribute> or an http(s):// URL "
        "(default: $TRIO_ROUTINES_AGENT; needed by serve, run and fire)",
    )
    group.add_argument(
        "--replica",
        metavar="NAME",
        type=values.replica,
        default=default(None),
        help="this process's replica id, stored with every claim it makes "
        "(default: $TRIO_ROUTINES_REPLICA, else <host>:<pid>)",
    )
    group.add_argument(
        "--log-format",
        choices=("text", "json", "journal"),
        default=default(None),
        help="stderr as text ('<instant> INFO  digest slot=<slot> completed (1200ms)'), one JSON "
        "object a line (ts, level, message, host, pid; on fire lines routine, slot, outcome, "
        "ms, late_ms, error), or for systemd's journal the text line without our instant, led "
        "by its syslog priority ('<6>INFO  digest ...') (default: journal when stderr is the "
        "journal's stream ($JOURNAL_STREAM), else text)",
    )
    group.add_argument(
        "--log-level",
        type=str.lower,
        choices=("debug", "info", "warning", "error"),
        default=default("info"),
        help="the least level logged; a duplicate claim (normal with replicas) is debug "
        "(default: info)",
    )


def _add_turn_grace(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--grace",
        type=values.non_negative_seconds,
        default=DEFAULT_GRACE,
        metavar="SECONDS",
        help="on SIGINT/SIGTERM, how long the turn may still finish "
        f"(default: {DEFAULT_GRACE:g}; a second signal stops it at once)",
    )


def _add_url(parser: argparse.ArgumentParser, *, before: bool = False) -> None:
    """``--url`` on a command that can ask a running ``serve``; with ``before``, on the
    program, for a ``--url`` given before the command's name (then checked to go with it:
    :func:`check_url_goes`). The command's copy defaults to SUPPRESS, as the common options'
    do, so that it keeps a ``--url`` given before the name."""
    parser.add_argument(
        "--url",
        type=values.server_url,
        metavar="URL",
        default=None if before else argparse.SUPPRESS,
        help="send it to a running serve's HTTP surface instead of touching the state, e.g. "
        "http://127.0.0.1:8080 (default: $TRIO_ROUTINES_URL; the token from "
        "$TRIO_ROUTINES_TOKEN)",
    )
    if not before:
        parser.set_defaults(takes_url=True)


def _refuse_url(parser: argparse.ArgumentParser) -> None:
    """``--url`` after a command that cannot send itself to a server: read, unlisted in its
    help, so that :func:`check_url_goes` refuses it as it does one given before the name."""
    parser.add_argument(
        "--url", type=values.server_url, default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )


def check_url_goes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse a ``--url`` given with a command that cannot send itself to a server (before
    its name or after)."""
    if args.url is not None and not getattr(args, "takes_url", False):
        parser.error(
            f"--url does not go with {args.command}: it sends run, fire, history, list, "
            "status, wake, unwake, pause and resume to a running serve"
        )


def _prog() -> str:
    """The command as it was run: the ``trio-routines`` script (the systemd units run it), or
    ``python -m trio_routines``."""
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return script if script == "trio-routines" else "python -m trio_routines"


def build_parser() -> argparse.ArgumentParser:
    common = Parser(add_help=False)
    _add_common(common, suppress=True)
    parser = Parser(
        prog=_prog(),
        description="Fire cron routines and self-scheduled wake-ups into an agent, "
        "each cron slot at most once.",
    )
    _add_common(parser, suppress=False)
    _add_url(parser, before=True)
    parser.add_argument("--version", action="version", version=f"trio-routines {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = commands.add_parser(
            name, help=help_text, description=help_text, parents=[common]
        )
        sub.set_defaults(command_parser=sub)
        return sub

    serve = command("serve", "run the scheduler until SIGINT or SIGTERM, then stop gracefully")
    _refuse_url(serve)
    serve.add_argument(
        "--grace",
        type=values.non_negative_seconds,
        default=DEFAULT_GRACE,
        metavar="SECONDS",
        help=f"how long in-flight turns may finish on stop (default: {DEFAULT_GRACE:g})",
    )
    serve.add_argument(
        "--external-clock",
        action="store_true",
        help="arm no cron loops: slots arrive through `fire` or POST /fire",
    )
    serve.add_argument("--no-wakeups", action="store_true", help="do not fire wake-ups")
    serve.add_argument(
        "--poll",
        type=values.poll_seconds,
        default=POLL_INTERVAL,
        metavar="SECONDS",
        help="how often due wake-ups are looked for, and the replica's heartbeat and its look "
        f"for dead replicas' claims (default: {POLL_INTERVAL:g})",
    )
    serve.add_argument(
        "--wakeup-timeout",
        type=values.positive_seconds,
        default=None,
        metavar="SECONDS",
        help="end a wake-up turn that runs longer, as failed, so that the wake-ups due after "
        "it run (default: no timeout)",
    )
    serve.add_argument(
        "--session-budget",
        type=values.budgets,
        default=(),
        metavar="BUDGETS",
        help="what each session's wake-up turns may spend per rolling window, e.g. "
        '"200k tokens/day, 5 USD/week" (default: no budget)',
    )
    serve.add_argument(
        "--wake-rate",
        type=values.limit,
        default=DEFAULT_RATE,
        metavar="N",
        help="at most N wake-up turns per session in any hour: a turn scheduling more is "
        f"refused (default: {DEFAULT_RATE}; off: no limit)",
    )
    serve.add_argument(
        "--wake-depth",
        type=values.limit,
        default=DEFAULT_DEPTH,
        metavar="N",
        help="at most N wake-ups in a chain each set by the turn of the one before "
        f"(default: {DEFAULT_DEPTH}; off: no limit)",
    )
    serve.add_argument(
        "--wake-lifetime",
        type=values.lifetime,
        default=DEFAULT_LIFETIME,
        metavar="SPAN",
        help="the longest a recurring wake-up lives, and its until when none is given "
        f"(default: {DEFAULT_LIFETIME.days}d)",
    )
    serve.add_argument(
        "--http",
        type=values.host_port,
        metavar="HOST:PORT",
        help="also serve the HTTP API (token from $TRIO_ROUTINES_TOKEN)",
    )

    run = command("run", "run one routine's turn now, without a claim; the reply goes to stdout")
    run.add_argument("name", metavar="NAME")
    _add_url(run)
    _add_turn_grace(run)

    fire = command("fire", "claim a slot of a routine, run it, settle it (the external clock)")
    fire.add_argument("name", metavar="NAME")
    fire.add_argument(
        "--slot",
        required=True,
        type=values.instant,
        metavar="ISO",
        help="the slot, with its zone: 2026-07-07T10:00Z, 2026-07-07T12:00:00+02:00, ...",
    )
    fire.add_argument("--json", action="store_true", help="print the outcome as JSON")
    _add_url(fire)
    _add_turn_grace(fire)

    history = command(
        "history", "a routine's fires, newest first: slot, lateness, outcome, duration, reason"
    )
    history.add_argument("name", metavar="NAME")
    _add_url(history)
    history.add_argument(
        "-n",
        type=values.count,
        metavar="N",
        help="the newest N (default: 20 as text, all as JSON)",
    )
    history.add_argument(
        "--since",
        type=values.instant,
        metavar="ISO",
        help="only the slots at or after this instant (a gap that reaches it is shown whole)",
    )
    history.add_argument(
        "--outcome",
        action="append",
        choices=[*(o.value for o in Outcome), "unreported", "unknown", "missed"],
        help="only fires that ended so (repeatable); unreported: claimed, never settled; "
        "unknown: settled with an outcome this version does not know; "
        "missed: the gaps (slots passed over, with the reason)",
    )
    history.add_argument(
        "--json",
        action="store_true",
        help='oldest first, as [{slot, firedAt, outcome, ...} or {"gap": {from, to, count, '
        "reason}}]; a fire's kept output, if any, as its output field",
    )
    history.add_argument(
        "--output",
        action="store_true",
        help="under each fire, the end of its reply, for a routine that keeps it (output: in "
        "its file), control characters escaped",
    )

    listing = command(
        "list", "routines (next, time left, last outcome, recent outcomes) and pending wake-ups"
    )
    listing.add_argument("--json", action="store_true")
    _add_url(listing)

    status = command("status", "what list shows, then the turns a running serve has in flight")
    _add_url(status)
    status.add_argument("--json", action="store_true")

    upcoming = command("next", "the next instants of a routine, or of --cron EXPR [--tz TZ]")
    upcoming.add_argument("name", metavar="NAME", nargs="?")
    upcoming.add_argument("--cron", metavar="EXPR")
    upcoming.add_argument("--tz", metavar="TZ")
    upcoming.add_argument(
        "--name",
        dest="seed_name",
        metavar="NAME",
        help="with --cron: the routine name that resolves H fields (as that routine would)",
    )
    upcoming.add_argument(
        "-n", type=values.count, default=5, metavar="N", help="how many (default: 5)"
    )
    upcoming.add_argument(
        "--after", type=values.instant, metavar="ISO", help="count from this instant (default: now)"
    )

    _refuse_url(upcoming)
    _refuse_url(
        command("check", "validate the routines directory (and the agent spec, when one is given)")
    )

    wake = command("wake", "add a wake-up for a session")
    wake.add_argument("--session", required=True)
    when = wake.add_mutually_exclusive_group(required=True)
    when.add_argument(
        "--in", dest="delay", type=values.delay, metavar="DELAY", help="90s, 30m, 1.5h, 2d"
    )
    when.add_argument("--cron", metavar="EXPR", help="recurring, at most every 10 minutes")
    wake.add_argument("--tz", metavar="TZ", help="the time zone of --cron (default: UTC)")
    wake.add_argument(
        "--until",
        type=values.instant,
        metavar="ISO",
        help="with --cron: stop repeating after this instant (default: 30 days from now)",
    )
    wake.add_argument("--prompt", required=True, help="what the woken turn does (- reads stdin)")
    wake.add_argument("--json", action="store_true", help="print the stored wake-up as JSON")
    _add_url(wake)

    unwake = command("unwake", "cancel a pending wake-up of a session")
    unwake.add_argument("id", metavar="ID")
    unwake.add_argument("--session", required=True)
    _add_url(unwake)

    pause = command("pause", "hold a routine back: no scheduler on this state claims its slots")
    pause.add_argument("name", metavar="NAME")
    _add_url(pause)
    resume = command("resume", "fire a paused routine again, from its next slot (no back-fire)")
    resume.add_argument("name", metavar="NAME")
    _add_url(resume)

    _refuse_url(
        command("migrate", "bring a PostgreSQL state's tables to this version (serve does it too)")
    )

    return parser
