"""``run`` (a turn now, no claim) and ``fire`` (claim a slot, run it, settle it)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..agent import Agent
from ..instants import format_iso
from ..records import Outcome
from ..routines import Routine
from ..scheduler import FireResult, Scheduler
from ..store import Store
from .output import (
    agent_arg,
    check_name,
    load,
    open_state,
    pick,
    print_json,
    print_line,
    replica_arg,
    report_failures,
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
    agent = agent_arg(args, "run")
    result = await load(args.routines, report=False)
    routine = pick(result, args.name, args.routines)
    report_failures(result)
    wrote = ""

    def on_text(text: str) -> None:
        nonlocal wrote
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()
            wrote = text

    # `run` makes no claim and writes no history; it holds the routine's session in the
    # store, so that it is busy, as every replica's turns are, while one of them runs it.
    async with open_state(state_arg(args), migrate="create") as store:
        scheduler = _one_shot(args, agent, store, routine)
        turn = await stop_on_signals(
            scheduler, args.grace, lambda: scheduler.run_now(routine.name, on_text=on_text)
        )
    if wrote and not wrote.endswith("\n"):
        print_line()
    return 0 if turn.outcome in (Outcome.COMPLETED, Outcome.SKIPPED) else 1


async def cmd_fire(args: argparse.Namespace) -> int:
    check_name(args.name)
    slot = args.slot
    agent = agent_arg(args, "fire")
    result = await load(args.routines, report=False)
    routine = pick(result, args.name, args.routines)
    report_failures(result)
    async with open_state(state_arg(args), migrate="create") as store:
        scheduler = _one_shot(args, agent, store, routine)

        async def fire() -> FireResult:
            return await scheduler.fire(routine.name, slot)

        fired = await stop_on_signals(scheduler, args.grace, fire)
    if args.json:
        print_json(fire_result_json(fired), indent=None)
    elif fired.claimed:
        ms = f" ({fired.ms}ms)" if fired.ms is not None else ""
        outcome = fired.outcome.value if fired.outcome is not None else "unreported"
        print_line(f"{fired.name} {format_iso(fired.slot)}: {outcome}{ms}")
    else:
        print_line(f"{fired.name} {format_iso(fired.slot)}: not claimed ({fired.reason})")
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
