"""``run`` (a turn now, no claim) and ``fire`` (claim a slot, run it, settle it)."""

from __future__ import annotations

import argparse
import logging
import sys
from datetime import datetime
from typing import Any

from ..agent import Agent
from ..instants import format_iso
from ..logs import log
from ..records import Outcome
from ..routines import Routine
from ..scheduler import FireResult, Scheduler
from ..store import Store
from ..text import one_line, visible_lines
from .client import Server
from .output import (
    CliError,
    agent_arg,
    check_name,
    load,
    open_state,
    pick,
    print_json,
    print_line,
    replica_arg,
    report_failures,
    say,
    state_arg,
    stop_on_signals,
)


def _one_shot(args: argparse.Namespace, agent: Agent, store: Store, routine: Routine) -> Scheduler:
    """The scheduler of a one-shot command: one routine, no loops of its own, no wake-ups."""
    return Scheduler(
        agent=agent,
        store=store,
        routines=[routine],
        wakeups=False,
        default_grace=args.grace,  # also how long a failed settle is retried
        replica=replica_arg(args),
    )


async def cmd_run(args: argparse.Namespace) -> int:
    check_name(args.name)
    server = Server.from_args(args)
    if server is not None:
        return await _run_over_http(server, args.name)
    agent = agent_arg(args, "run")
    result = await load(args.routines, report=False)
    routine = pick(result, args.name, args.routines)
    report_failures(result)
    # The agent's words go out as they are, unless to a terminal: there, an escape sequence
    # in them (a window title, a colour, a cursor move) would be obeyed, so control characters
    # other than line breaks and tabs are shown as \xNN, as every other line shows them.
    terminal = sys.stdout.isatty()
    reply = _ReplyLine(ends_for_logs=terminal and sys.stderr.isatty())

    def on_text(text: str) -> None:
        if text:
            sys.stdout.write(visible_lines(text) if terminal else text)
            sys.stdout.flush()
            reply.open = not text.endswith("\n")

    # `run` makes no claim and writes no history; it holds the routine's session in the
    # store, so that it is busy, as every replica's turns are, while one of them runs it.
    async with open_state(state_arg(args), writes="run") as store:
        scheduler = _one_shot(args, agent, store, routine)
        with reply:
            turn = await stop_on_signals(
                scheduler, args.grace, lambda: scheduler.run_now(routine.name, on_text=on_text)
            )
    if reply.open:
        print_line()
    return 0 if turn.outcome in (Outcome.COMPLETED, Outcome.SKIPPED) else 1


class _ReplyLine(logging.Filter):
    """Whether the reply written so far ends inside a line (``open``). With ``ends_for_logs``
    (the reply and the log on one terminal), a log line of ours written meanwhile (the turn's
    end, say) ends the reply's line first, so that it starts a line of its own."""

    def __init__(self, *, ends_for_logs: bool) -> None:
        super().__init__()
        self.open = False
        self._handlers = list(log.handlers) if ends_for_logs else []

    def __enter__(self) -> None:
        for handler in self._handlers:
            handler.addFilter(self)

    def __exit__(self, *exc: object) -> None:
        for handler in self._handlers:
            handler.removeFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if self.open:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.open = False
        return True


async def cmd_fire(args: argparse.Namespace) -> int:
    check_name(args.name)
    slot = args.slot
    server = Server.from_args(args)
    if server is not None:
        return _fire_shown(args, await _fire_over_http(server, args.name, slot))
    agent = agent_arg(args, "fire")
    result = await load(args.routines, report=False)
    routine = pick(result, args.name, args.routines)
    report_failures(result)
    async with open_state(state_arg(args), writes="fire") as store:
        scheduler = _one_shot(args, agent, store, routine)

        async def fire() -> FireResult:
            return await scheduler.fire(routine.name, slot)

        fired = await stop_on_signals(scheduler, args.grace, fire)
    return _fire_shown(args, fired)


def _fire_shown(args: argparse.Namespace, fired: FireResult) -> int:
    if args.json:
        print_json(fire_result_json(fired), indent=None)
    elif fired.claimed:
        ms = f" ({fired.ms}ms)" if fired.ms is not None else ""
        outcome = fired.outcome.value if fired.outcome is not None else "unreported"
        # Why a claimed slot was skipped (its session busy, the routine over its budget), or
        # why its turn failed (through a server said nowhere else; here, as the log says too).
        why = f": {fired.reason}" if fired.reason is not None else ""
        failed = f" — {one_line(fired.failed)}" if fired.failed else ""
        print_line(f"{fired.name} {format_iso(fired.slot)}: {outcome}{ms}{why}{failed}")
    else:
        print_line(f"{fired.name} {format_iso(fired.slot)}: not claimed ({fired.reason})")
    if not fired.claimed:
        return 0
    return 0 if fired.outcome in (Outcome.COMPLETED, Outcome.SKIPPED) else 1


async def _run_over_http(server: Server, name: str) -> int:
    """``POST /run``, waiting for the turn: the reply arrives whole, not streamed."""
    body = server.ok(
        await server.call("POST", "/run", {"name": name, "wait": True}, waits=True), 200
    )
    if not isinstance(body, dict) or not isinstance(body.get("ran"), bool):
        raise CliError(f"{server.url}: the answer is not a turn's")
    if not body["ran"]:  # busy, as a local run: nothing wrong, nothing ran
        say(f"{name}: not run — {body.get('reason') or 'its session is busy'}")
        return 0
    reply = body.get("reply")
    if isinstance(reply, str) and reply:
        for line in reply.removesuffix("\n").split("\n"):
            print_line(line)
    if body.get("truncated") is True:
        say("(the reply was cut by the server at 64 KiB)")
    if body.get("outcome") == Outcome.COMPLETED.value:
        return 0
    say(f"{name}: {body.get('outcome')} — {body.get('failed') or 'no reason given'}")
    return 1


async def _fire_over_http(server: Server, name: str, slot: datetime) -> FireResult:
    """``POST /fire`` with ``wait``: the server claims, runs and settles the slot."""
    request = {"name": name, "slot": format_iso(slot), "wait": True}
    body = server.ok(await server.call("POST", "/fire", request, waits=True), 200)
    try:
        outcome = body.get("outcome")
        ms = body.get("ms")
        return FireResult(
            name,
            slot,
            claimed=body["claimed"] is True,
            outcome=None if outcome is None else Outcome(outcome),
            reason=body.get("reason"),
            ms=ms if isinstance(ms, int) and not isinstance(ms, bool) else None,
            failed=body.get("failed") if isinstance(body.get("failed"), str) else None,
        )
    except (AttributeError, KeyError, TypeError, ValueError):
        raise CliError(f"{server.url}: the answer is not a fire's") from None


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
