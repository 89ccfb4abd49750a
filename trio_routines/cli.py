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
import functools
import importlib
import json
import logging
import math
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlsplit, urlunsplit
from zoneinfo import ZoneInfo

import trio

from .agent import Agent
from .agents import agent_from_spec
from .context import firing_slot
from .converter import fire_to_json, wakeup_to_json
from .cron import cron_error, next_run
from .errors import InvalidWakeup, TrioRoutinesError
from .instants import format_iso, parse_iso
from .logs import configure_logging, one_line
from .names import name_problem
from .records import Outcome, Wakeup
from .routines import LoadResult, Routine, find_routine, load_routines
from .scheduler import FireResult, Scheduler
from .store import Store
from .stores import is_postgres_url, open_store
from .wakeups import (
    POLL_INTERVAL,
    WakeupRequest,
    added_reply,
    bad_delay_reply,
    parse_delay,
    removed_reply,
)

log = logging.getLogger("trio_routines")
T = TypeVar("T")

DEFAULT_STATE = ".state"
DEFAULT_ROUTINES = "routines"
DEFAULT_GRACE = 5.0
HISTORY_TAIL = 20


class CliError(TrioRoutinesError):
    """An expected failure of a command: its one-line message and exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# --- the parser -----------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse, with its complaints on one line (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see --help)\n")


def _non_negative_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number of seconds >= 0")
    return value


def _positive_seconds(text: str) -> float:
    value = _non_negative_seconds(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be above 0")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 1 and 1000")
    return value


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
        default=default(None),
        help="state directory, or a postgresql:// URL "
        f"(default: $TRIO_ROUTINES_STATE, else {DEFAULT_STATE})",
    )
    group.add_argument(
        "--routines",
        metavar="DIR",
        default=default(DEFAULT_ROUTINES),
        help=f"the routines directory (default: {DEFAULT_ROUTINES})",
    )
    group.add_argument(
        "--agent",
        metavar="SPEC",
        default=default(None),
        help="echo, cmd:<shell command> or py:<module>:<attribute> "
        "(default: $TRIO_ROUTINES_AGENT; needed by serve, run and fire)",
    )
    group.add_argument(
        "--log-format", choices=("text", "json"), default=default("text"), help="(default: text)"
    )
    group.add_argument(
        "--log-level",
        type=str.lower,
        choices=("debug", "info", "warning", "error"),
        default=default("info"),
        help="(default: info)",
    )


def _add_turn_grace(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--grace",
        type=_non_negative_seconds,
        default=DEFAULT_GRACE,
        metavar="SECONDS",
        help="on SIGINT/SIGTERM, how long the turn may still finish "
        f"(default: {DEFAULT_GRACE:g}; a second signal stops it at once)",
    )


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    _add_common(common, suppress=True)
    parser = _Parser(
        prog="python -m trio_routines",
        description="Fire cron routines and self-scheduled wake-ups into an agent, "
        "each cron slot at most once.",
    )
    _add_common(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = commands.add_parser(
            name, help=help_text, description=help_text, parents=[common]
        )
        sub.set_defaults(command_parser=sub)
        return sub

    serve = command("serve", "run the scheduler until SIGINT or SIGTERM, then stop gracefully")
    serve.add_argument(
        "--grace",
        type=_non_negative_seconds,
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
        type=_positive_seconds,
        default=POLL_INTERVAL,
        metavar="SECONDS",
        help=f"wake-up poll interval (default: {POLL_INTERVAL:g})",
    )
    serve.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="also serve the HTTP API (token from $TRIO_ROUTINES_TOKEN)",
    )

    run = command("run", "run one routine's turn now, without a claim; the reply goes to stdout")
    run.add_argument("name", metavar="NAME")
    _add_turn_grace(run)

    fire = command("fire", "claim a slot of a routine, run it, settle it (the external clock)")
    fire.add_argument("name", metavar="NAME")
    fire.add_argument("--slot", required=True, metavar="ISO", help="e.g. 2026-07-07T10:00:00Z")
    fire.add_argument("--json", action="store_true", help="print the outcome as JSON")
    _add_turn_grace(fire)

    history = command("history", "a routine's fires: newest 20 as text, or all as JSON")
    history.add_argument("name", metavar="NAME")
    history.add_argument("--json", action="store_true")

    listing = command("list", "routines with their next instant, and pending wake-ups")
    listing.add_argument("--json", action="store_true")

    upcoming = command("next", "the next instants of a routine, or of --cron EXPR [--tz TZ]")
    upcoming.add_argument("name", metavar="NAME", nargs="?")
    upcoming.add_argument("--cron", metavar="EXPR")
    upcoming.add_argument("--tz", metavar="TZ")
    upcoming.add_argument("-n", type=_count, default=5, metavar="N", help="how many (default: 5)")
    upcoming.add_argument("--after", metavar="ISO", help="count from this instant (default: now)")

    command("check", "validate the routines directory (and the agent spec, when one is given)")

    wake = command("wake", "add a wake-up for a session")
    wake.add_argument("--session", required=True)
    when = wake.add_mutually_exclusive_group(required=True)
    when.add_argument("--in", dest="delay", metavar="DELAY", help="90s, 30m, 1.5h, 2d")
    when.add_argument("--cron", metavar="EXPR", help="recurring, at most every 10 minutes")
    wake.add_argument("--tz", metavar="TZ", help="the time zone of --cron (default: UTC)")
    wake.add_argument("--prompt", required=True, help="what the woken turn does (- reads stdin)")
    wake.add_argument("--json", action="store_true", help="print the stored wake-up as JSON")

    unwake = command("unwake", "cancel a pending wake-up of a session")
    unwake.add_argument("id", metavar="ID")
    unwake.add_argument("--session", required=True)

    return parser


# --- helpers --------------------------------------------------------------------------------


def _quoted(text: str) -> str:
    return json.dumps(text[:64], ensure_ascii=False)


def _state(args: argparse.Namespace) -> str:
    state: str = args.state or os.environ.get("TRIO_ROUTINES_STATE") or DEFAULT_STATE
    return state


def state_label(state: str) -> str:
    """The state as messages show it: a database URL loses its password."""
    if not is_postgres_url(state):
        return state
    parts = urlsplit(state)
    if parts.password is None:
        return state
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _agent(args: argparse.Namespace, command: str) -> Agent:
    spec = args.agent or os.environ.get("TRIO_ROUTINES_AGENT")
    if not spec:
        raise CliError(
            f"{command} needs an agent: pass --agent echo|cmd:<command>|py:<module>:<attr> "
            "or set TRIO_ROUTINES_AGENT",
            code=2,
        )
    return agent_from_spec(spec)


def _describe_agent(args: argparse.Namespace) -> str:
    spec: str = args.agent or os.environ.get("TRIO_ROUTINES_AGENT") or ""
    return "cmd:…" if spec.startswith("cmd:") else spec


@asynccontextmanager
async def _store(state: str) -> AsyncIterator[Store]:
    try:
        store = open_store(state)
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


async def _load(directory: str, *, report: bool) -> LoadResult:
    result = await trio.to_thread.run_sync(load_routines, directory)
    if report:
        _report(result)
    return result


def _report(result: LoadResult) -> None:
    for failure in result.failures:
        log.warning("%s — skipped", failure)


def _check_name(name: str) -> None:
    problem = name_problem(name)
    if problem is not None:
        raise CliError(problem)


def _pick(result: LoadResult, name: str, directory: str) -> Routine:
    """The routine ``name``, or the one-line reason it cannot be had."""
    _check_name(name)
    routine = find_routine(result, name)
    if routine is not None:
        return routine
    wanted = os.path.join(directory, f"{name}.md")
    for failure in result.failures:
        if failure.file == wanted:
            raise CliError(str(failure))
    available = ", ".join(r.name for r in result.routines) or "(none)"
    raise CliError(
        f"unknown routine {_quoted(name)} — looked in {directory}; available: {available}"
    )


def _print(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _print_json(value: Any) -> None:
    _print(json.dumps(value, ensure_ascii=False, indent=2))


async def _stop_on_signals(
    scheduler: Scheduler, grace: float, body: Callable[[], Awaitable[T]]
) -> T:
    """Run ``body``; SIGINT/SIGTERM stop ``scheduler`` with ``grace`` (a second: at once)."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch_signals, signals, scheduler, grace)
            result = await body()
            nursery.cancel_scope.cancel()
    return result


async def _watch_signals(signals: AsyncIterator[int], scheduler: Scheduler, grace: float) -> None:
    """The first signal stops with ``grace``; another one stops at once."""
    remaining = grace
    async for signum in signals:
        name = signal.Signals(signum).name
        if remaining > 0:
            log.info("%s received — stopping; in-flight turns get %gs to finish", name, remaining)
        else:
            log.warning("%s received — stopping now", name)
        scheduler.stop(remaining)
        remaining = 0.0


# --- commands -------------------------------------------------------------------------------


async def cmd_serve(args: argparse.Namespace) -> int:
    result = await _load(args.routines, report=False)
    if result.failures:
        for failure in result.failures:
            sys.stderr.write(f"error: {one_line(str(failure))}\n")
        raise CliError(
            f"serve refuses to start: {len(result.failures)} broken routine file(s) in "
            f"{args.routines} (see `python -m trio_routines check`)"
        )
    agent = _agent(args, "serve")
    serve_http: Callable[..., Awaitable[object]] | None = None
    host, port = "", 0
    token = os.environ.get("TRIO_ROUTINES_TOKEN") or None
    if args.http:
        host, port = _host_port(args.http)
        # The HTTP surface is optional (hypercorn is an extra): import it only when asked for.
        try:
            http = importlib.import_module("trio_routines.http")
            serve_http = http.serve_http
        except (ImportError, AttributeError) as exc:
            raise CliError(f"--http is not available in this installation: {exc}") from None
        check_bind = getattr(http, "check_bind", None)
        if check_bind is not None:
            check_bind(host, token)  # refuse an unsafe address before anything starts
    state = _state(args)
    async with _store(state) as store:
        scheduler = Scheduler(
            agent=agent,
            store=store,
            routines=result.routines,
            external_clock=args.external_clock,
            wakeups=not args.no_wakeups,
            poll_interval=args.poll,
        )
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:

                async def run_scheduler(*, task_status: trio.TaskStatus[Scheduler]) -> None:
                    await scheduler.run(task_status=task_status)
                    # Stopped and settled: whatever else serves (HTTP, the signal watch) ends.
                    nursery.cancel_scope.cancel()

                await nursery.start(run_scheduler)
                _log_armed(args, state, scheduler, result.routines)
                # --- hook: the HTTP surface, in the same nursery as the runtime -----------
                if serve_http is not None:
                    await nursery.start(
                        functools.partial(serve_http, scheduler, host, port, token=token)
                    )
                # ---------------------------------------------------------------------------
                nursery.start_soon(_watch_signals, signals, scheduler, args.grace)
    log.info("stopped")
    return 0


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise CliError(f"--http {_quoted(text)}: expected HOST:PORT, e.g. 127.0.0.1:8080")
    return host, int(port)


def _log_armed(
    args: argparse.Namespace, state: str, scheduler: Scheduler, routines: Sequence[Routine]
) -> None:
    log.info(
        "serving %d routine(s) from %s — agent %s, state %s",
        len(routines),
        args.routines,
        _describe_agent(args),
        state_label(state),
    )
    now = datetime.now(UTC)
    on_demand = []
    for routine in routines:
        if routine.cron is None:
            on_demand.append(routine.name)
        elif args.external_clock:
            log.info("%s: cron %s — fired by the external clock only", routine.name, _cron(routine))
        else:
            upcoming = next_run(routine.cron, routine.tz, now)
            shown = format_iso(upcoming) if upcoming is not None else "(never)"
            log.info("armed %s: cron %s — next %s", routine.name, _cron(routine), shown)
    if on_demand:
        log.info("on demand: %s", ", ".join(on_demand))
    if scheduler.wakeups:
        log.info("wake-ups: polling every %gs", scheduler.poll_interval)
    else:
        log.info("wake-ups: off")


def _cron(routine: Routine) -> str:
    return f'"{routine.cron}"' + (f" {routine.tz}" if routine.tz else "")


async def cmd_run(args: argparse.Namespace) -> int:
    _check_name(args.name)
    agent = _agent(args, "run")
    result = await _load(args.routines, report=False)
    routine = _pick(result, args.name, args.routines)
    _report(result)
    # `run` touches no state: no claim, no history. The in-memory store just fills the slot.
    from .testing import MemoryStore

    scheduler = Scheduler(agent=agent, store=MemoryStore(), routines=[routine], wakeups=False)
    wrote = ""

    def on_text(text: str) -> None:
        nonlocal wrote
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()
            wrote = text

    turn = await _stop_on_signals(
        scheduler, args.grace, lambda: scheduler.run_now(routine.name, on_text=on_text)
    )
    if wrote and not wrote.endswith("\n"):
        _print()
    return 0 if turn.outcome in (Outcome.COMPLETED, Outcome.SKIPPED) else 1


async def cmd_fire(args: argparse.Namespace) -> int:
    _check_name(args.name)
    slot = parse_iso(args.slot)
    if slot is None:
        raise CliError(
            f"--slot {_quoted(args.slot)} is not an ISO instant with a zone "
            "(e.g. 2026-07-07T10:00:00Z)"
        )
    agent = _agent(args, "fire")
    result = await _load(args.routines, report=False)
    routine = _pick(result, args.name, args.routines)
    _report(result)
    async with _store(_state(args)) as store:
        scheduler = Scheduler(agent=agent, store=store, routines=[routine], wakeups=False)

        async def fire() -> FireResult:
            with firing_slot(slot):
                return await scheduler.fire(routine.name, slot)

        fired = await _stop_on_signals(scheduler, args.grace, fire)
    if args.json:
        _print(json.dumps(fire_result_json(fired), ensure_ascii=False))
    elif fired.claimed:
        ms = f" ({fired.ms}ms)" if fired.ms is not None else ""
        outcome = fired.outcome.value if fired.outcome is not None else "unreported"
        _print(f"{fired.name} {format_iso(fired.slot)}: {outcome}{ms}")
    else:
        _print(f"{fired.name} {format_iso(fired.slot)}: not claimed ({fired.reason})")
    if not fired.claimed:
        return 0
    return 0 if fired.outcome in (Outcome.COMPLETED, Outcome.SKIPPED) else 1


def fire_result_json(fired: FireResult) -> dict[str, Any]:
    """``{name, slot, claimed, outcome, reason, ms, failed?}``: ``fire --json``'s answer."""
    entry: dict[str, Any] = {
        "name": fired.name,
        "slot": format_iso(fired.slot),
        "claimed": fired.claimed,
        "outcome": fired.outcome.value if fired.outcome is not None else None,
        "reason": fired.reason,
        "ms": fired.ms,
    }
    if fired.failed is not None:
        entry["failed"] = fired.failed
    return entry


async def cmd_history(args: argparse.Namespace) -> int:
    _check_name(args.name)
    state = _state(args)
    async with _store(state) as store:
        fires = await store.history(args.name)
    if args.json:
        _print_json([fire_to_json(fire) for fire in fires])
        return 0
    if not fires:
        sys.stderr.write(
            f"no recorded fires for {_quoted(args.name)} (state: {state_label(state)})\n"
        )
        return 0
    for fire in fires[-HISTORY_TAIL:]:
        outcome = fire.outcome.value if fire.outcome is not None else "unreported"
        ms = f"{fire.ms}ms" if fire.ms is not None else ""
        _print(f"{format_iso(fire.fired_at)}  {outcome:<11} {ms:>8}")
    if len(fires) > HISTORY_TAIL:
        sys.stderr.write(f"(the last {HISTORY_TAIL} of {len(fires)} fires — --json for all)\n")
    sys.stderr.write(
        f"(what these runs said: session routine:{args.name} — kept by the agent; "
        "the state holds outcomes only)\n"
    )
    return 0


async def cmd_list(args: argparse.Namespace) -> int:
    result = await _load(args.routines, report=True)
    state = _state(args)
    async with _store(state) as store:
        wakeups = await store.list_wakeups()
    now = datetime.now(UTC)
    upcoming = {
        r.name: next_run(r.cron, r.tz, now) if r.cron is not None else None for r in result.routines
    }
    if args.json:
        routines = []
        for routine in result.routines:
            entry: dict[str, Any] = {"name": routine.name}
            if routine.cron is not None:
                entry["cron"] = routine.cron
            if routine.tz is not None:
                entry["tz"] = routine.tz
            due = upcoming[routine.name]
            entry["next"] = format_iso(due) if due is not None else None
            routines.append(entry)
        _print_json({"routines": routines, "wakeups": [wakeup_to_json(w) for w in wakeups]})
        return 0
    if not result.routines and not wakeups:
        sys.stderr.write(
            f"nothing scheduled — no routines in {args.routines}, no pending wake-ups "
            f"(state: {state_label(state)})\n"
        )
        return 0
    for routine in result.routines:
        if routine.cron is None:
            _print(f"{routine.name} on demand")
            continue
        due = upcoming[routine.name]
        shown = format_iso(due) if due is not None else "(never)"
        zone = f" {routine.tz}" if routine.tz else ""
        _print(f"{routine.name:<20} {shown:<26}cron {routine.cron}{zone}")
    for wakeup in wakeups:
        _print(_wakeup_line(wakeup))
    return 0


def _wakeup_line(wakeup: Wakeup) -> str:
    if wakeup.cron is None:
        kind = "one-shot"
    else:
        kind = f"cron {wakeup.cron}" + (f" {wakeup.tz}" if wakeup.tz else "")
    prompt = one_line(wakeup.prompt)[:60]
    return (
        f"wake {wakeup.id}  {format_iso(wakeup.fire_at)}  {kind}  "
        f"session={one_line(wakeup.session)}  {prompt}"
    )


async def cmd_next(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.command_parser
    if (args.name is None) == (args.cron is None):
        parser.error("next needs either a routine NAME or --cron EXPR (not both)")
    if args.tz is not None and args.cron is None:
        parser.error("--tz goes with --cron (a routine's own tz is used for NAME)")
    if args.after is None:
        after = datetime.now(UTC)
    else:
        parsed = parse_iso(args.after)
        if parsed is None:
            raise CliError(f"--after {_quoted(args.after)} is not an ISO instant with a zone")
        after = parsed
    if args.cron is not None:
        cron, tz = args.cron, args.tz
        problem = cron_error(cron, tz)
        if problem is not None:
            raise CliError(f"invalid cron/tz — {problem}")
    else:
        _check_name(args.name)
        result = await _load(args.routines, report=False)
        routine = _pick(result, args.name, args.routines)
        _report(result)
        if routine.cron is None:
            raise CliError(f"{_quoted(routine.name)} runs on demand only (it has no cron)")
        cron, tz = routine.cron, routine.tz
    zone = ZoneInfo(tz) if tz else None
    instant: datetime | None = after
    for _ in range(args.n):
        assert instant is not None
        instant = next_run(cron, tz, instant)
        if instant is None:
            sys.stderr.write(f'(cron "{cron}" never fires again)\n')
            break
        local = f"  {instant.astimezone(zone):%Y-%m-%d %H:%M %Z} ({tz})" if zone else ""
        _print(f"{format_iso(instant)}{local}")
    return 0


async def cmd_check(args: argparse.Namespace) -> int:
    result = await _load(args.routines, report=False)
    spec = args.agent or os.environ.get("TRIO_ROUTINES_AGENT")
    if spec:
        agent_from_spec(spec)
    if result.failures:
        for failure in result.failures:
            sys.stderr.write(f"{one_line(str(failure))}\n")
        sys.stderr.write(f"{len(result.failures)} broken routine file(s) in {args.routines}\n")
        return 1
    on_cron = sum(1 for r in result.routines if r.cron is not None)
    _print(
        f"ok — {len(result.routines)} routine(s) in {args.routines}: {on_cron} on cron, "
        f"{len(result.routines) - on_cron} on demand"
    )
    return 0


async def cmd_wake(args: argparse.Namespace) -> int:
    if args.tz is not None and args.cron is None:
        args.command_parser.error("--tz goes with --cron")
    prompt = args.prompt
    if prompt == "-":
        prompt = await trio.to_thread.run_sync(sys.stdin.read)
    now = datetime.now(UTC)
    if args.delay is not None:
        seconds = parse_delay(args.delay)
        try:
            if seconds is None:
                raise OverflowError
            fire_at = now + timedelta(seconds=seconds)
        except OverflowError:
            raise CliError(f"--in: {bad_delay_reply(args.delay)}") from None
        request = WakeupRequest(session=args.session, prompt=prompt, fire_at=fire_at)
    else:
        request = WakeupRequest(session=args.session, prompt=prompt, cron=args.cron, tz=args.tz)
    async with _store(_state(args)) as store:
        wakeup = await store.add_wakeup(request, now)
    if args.json:
        _print(json.dumps(wakeup_to_json(wakeup), ensure_ascii=False))
    else:
        _print(added_reply(wakeup))
    return 0


async def cmd_unwake(args: argparse.Namespace) -> int:
    async with _store(_state(args)) as store:
        removed = await store.remove_wakeup(args.id, args.session)
    if not removed:
        raise CliError(removed_reply(args.id, False))
    _print(removed_reply(args.id, True))
    return 0


# --- the entry point ------------------------------------------------------------------------


_COMMANDS: dict[str, Callable[[argparse.Namespace], Awaitable[int]]] = {
    "serve": cmd_serve,
    "run": cmd_run,
    "fire": cmd_fire,
    "history": cmd_history,
    "list": cmd_list,
    "next": cmd_next,
    "check": cmd_check,
    "wake": cmd_wake,
    "unwake": cmd_unwake,
}


_EXPECTED = (TrioRoutinesError, OSError, InvalidWakeup)


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def main(argv: Sequence[str] | None = None) -> int:
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
        sys.stderr.write(f"error: {one_line(str(first)) or type(first).__name__}\n")
        return first.code if isinstance(first, CliError) else 1
