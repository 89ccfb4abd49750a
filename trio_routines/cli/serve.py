"""``serve``: the scheduler (and, with ``--http``, the HTTP surface) until a signal stops it."""

from __future__ import annotations

import argparse
import functools
import importlib
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import trio

from ..agent import Agent
from ..agents import CommandAgent
from ..errors import TrioRoutinesError
from ..hosting import Answering, start_watched
from ..instants import format_iso
from ..routinedir import passed_over
from ..routines import Routine
from ..scheduler import Scheduler
from ..wakelimits import WakeLimits
from .output import (
    CliError,
    agent_arg,
    check_owner,
    describe_agent,
    load,
    open_state,
    replica_arg,
    say_error,
    state_arg,
    state_label,
)

log = logging.getLogger("trio_routines")


async def cmd_serve(args: argparse.Namespace) -> int:
    # The signal handlers come first, before the routines are read (1.5 s for 10,000 files):
    # SIGHUP's default action ends the process, and systemd counts that as a clean exit, so an
    # early `systemctl reload` would leave the service dead. A SIGHUP that arrives during the
    # start-up waits in the receiver and is handled once the runtime runs; a stop, once the
    # scheduler's boot begins (which it then gives up at once).
    with (
        trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals,
        trio.open_signal_receiver(signal.SIGHUP) as hangups,
    ):
        return await _start(args, signals, hangups)


async def _start(
    args: argparse.Namespace, signals: AsyncIterator[int], hangups: AsyncIterator[int]
) -> int:
    """Read and check everything, bind HTTP, then serve: nothing touches the store before."""
    result = await load(args.routines, report=False)
    if result.failures:
        for failure in result.failures:
            say_error(str(failure))
        raise CliError(
            f"serve refuses to start: {len(result.failures)} broken routine file(s) in "
            f"{args.routines} (see `python -m trio_routines check`)"
        )
    if result.others:
        log.info("%s: %s", args.routines, passed_over(result.others))
    check_owner(state_arg(args), "serve")  # before the address is bound or a file written
    agent = agent_arg(args, "serve")
    serve_http: Callable[..., Awaitable[object]] | None = None
    listener: socket.socket | None = None
    token = os.environ.get("TRIO_ROUTINES_TOKEN") or None
    if args.http:
        host, port = args.http
        # The HTTP surface is optional (hypercorn is an extra): import it only when asked for.
        try:
            http = importlib.import_module("trio_routines.http")
            serve_http = http.serve_http
        except (ImportError, AttributeError) as exc:
            raise CliError(f"--http is not available in this installation: {exc}") from None
        try:  # refuse an unsafe address before anything starts
            http.check_bind(host, token, "TRIO_ROUTINES_TOKEN")
        except TrioRoutinesError as exc:  # a usage error (exit 2): a restart repeats it
            raise CliError(str(exc), code=2) from None
        try:  # bound before the store is touched: a taken address changes nothing
            listener = http.bind_http(host, port)
        except OSError as exc:
            shown_host = f"[{host}]" if ":" in host else host  # as every refusal to start
            raise CliError(
                f"cannot serve HTTP on {shown_host}:{port}: {exc.strerror or exc}"
            ) from None
        if isinstance(agent, CommandAgent):  # its commands call back here with their tickets
            agent.scheduler_url = local_url(host, listener.getsockname()[1])
            if token is None:
                log.warning("%s", OPEN_TO_COMMANDS)
    state = state_arg(args)
    if not result.routines:
        log.warning(
            "no routines in %s — serving wake-ups only (add <name>.md files there)", args.routines
        )
    try:
        return await _serve(
            args, agent, state, result.routines, (serve_http, listener, token), signals, hangups
        )
    finally:
        if listener is not None:  # serving may have closed it already: closing is idempotent
            listener.close()


async def _serve(
    args: argparse.Namespace,
    agent: Agent,
    state: str,
    routines: Sequence[Routine],
    http: tuple[Callable[..., Awaitable[object]] | None, socket.socket | None, str | None],
    signals: AsyncIterator[int],
    hangups: AsyncIterator[int],
) -> int:
    serve_http, listener, token = http
    async with open_state(state, migrate="always") as store:
        scheduler = Scheduler(
            agent=agent,
            store=store,
            routines=routines,
            external_clock=args.external_clock,
            wakeups=not args.no_wakeups,
            poll_interval=args.poll,
            wakeup_timeout=args.wakeup_timeout,
            default_grace=args.grace,  # also how long a failed settle is retried
            replica=replica_arg(args),
            session_budget=args.session_budget,
            wake_limits=WakeLimits(
                rate=args.wake_rate, depth=args.wake_depth, lifetime=args.wake_lifetime
            ),
        )
        answering = Answering()
        async with trio.open_nursery() as nursery:
            # The stop signals are watched from before the boot, whose store calls may each
            # take the store timeout: one during the boot gives it up at once.
            runs = await start_watched(nursery, scheduler, signals, args.grace, answering)
            if runs:
                _log_armed(args, state, scheduler, routines)
                # --- hook: the HTTP surface, in the same nursery as the runtime -----------
                if serve_http is not None:
                    surface = functools.partial(serve_http, scheduler, token=token, sock=listener)
                    await nursery.start(answering.serve, surface)
                # ---------------------------------------------------------------------------
                nursery.start_soon(_reload_on_hangup, hangups, scheduler, args.routines)
    log.info("stopped" if runs else "stopped during the boot: nothing was armed or fired")
    return 0


async def _reload_on_hangup(
    hangups: AsyncIterator[int], scheduler: Scheduler, directory: str
) -> None:
    """SIGHUP reloads the routines directory into the running scheduler."""
    async for _ in hangups:
        log.info("SIGHUP received — reloading the routines from %s", directory)
        await scheduler.reload_routines(directory)


#: Said at the start of a ``cmd:`` agent's ``serve --http`` without a token.
OPEN_TO_COMMANDS = (
    "the HTTP API has no token (TRIO_ROUTINES_TOKEN): any local process, a cmd: command "
    "among them, may call it as the operator (pause, fire, every session's wake-ups); with a "
    "token, a command holds only its turn's ticket (docs/agents.md: What a command can reach)"
)


def _log_armed(
    args: argparse.Namespace, state: str, scheduler: Scheduler, routines: Sequence[Routine]
) -> None:
    log.info(
        "serving %d routine(s) from %s — agent %s, state %s",
        len(routines),
        args.routines,
        describe_agent(args),
        state_label(state),
    )
    statistics = scheduler.statistics()
    next_due, paused = statistics.next_due, statistics.paused  # what the loops will really do
    on_demand = []
    for routine in routines:
        if routine.cron is None:
            on_demand.append(routine.name)
        elif args.external_clock:
            log.info("%s: cron %s — fired by the external clock only", routine.name, _cron(routine))
        else:
            upcoming = next_due.get(routine.name)
            if upcoming is None:  # the boot said why (a cron that never fires again, say)
                log.info("not armed %s: cron %s — no next slot", routine.name, _cron(routine))
                continue
            shown = format_iso(upcoming)
            if routine.name in paused:  # its slots come and are skipped until a resume
                shown += " (paused: not run until `resume`)"
            elif upcoming <= scheduler.now():  # (the boot said why)
                shown += " (due already: it runs now)"
            log.info("armed %s: cron %s — next %s", routine.name, _cron(routine), shown)
    if on_demand:
        log.info("on demand: %s", ", ".join(on_demand))
    if scheduler.wakeups:
        limits = scheduler.wake_limits
        log.info(
            "wake-ups: polling every %gs; turns may schedule %s an hour per session, "
            "chains %s deep",
            scheduler.poll_interval,
            "any number" if limits.rate is None else f"at most {limits.rate}",
            "any number" if limits.depth is None else f"at most {limits.depth}",
        )
    else:
        log.info("wake-ups: off")


def _cron(routine: Routine) -> str:
    resolved = f" (= {routine.resolved_cron})" if routine.resolved_cron != routine.cron else ""
    return f'"{routine.cron}"{resolved}' + (f" {routine.tz}" if routine.tz else "")


def local_url(host: str, port: int) -> str:
    """The HTTP surface's address as a command on this host reaches it: a wildcard bind is
    reached on loopback."""
    reached = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
    shown = f"[{reached}]" if ":" in reached else reached
    return f"http://{shown}:{port}"
