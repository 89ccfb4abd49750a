"""The commands that change nothing: ``history``, ``next``, ``check`` (``list``: status.py)."""

from __future__ import annotations

import argparse
import os
from datetime import UTC, datetime

import trio

from ..agents import agent_from_spec
from ..converter import history_from_json, history_to_json
from ..cron import cron_error, next_run, parse_cron, resolve_hashed
from ..errors import StateFault
from ..history import gap_line, in_slot_order, read_history, running_slots
from ..instants import format_iso
from ..names import name_problem
from ..records import Fire, Gap
from ..routinedir import passed_over
from ..routines import catchup_text
from ..text import visible_lines
from ..usage import describe as describe_usage
from .client import Server, path_part
from .output import (
    CliError,
    StoreDeadline,
    check_name,
    load,
    open_state,
    pick,
    print_json,
    print_line,
    quoted,
    report_failures,
    say,
    say_if_no_state,
    state_arg,
    state_label,
)
from .table import Name, duration, outcome_word, reason, short_instant, table

HISTORY_TAIL = 20
#: Why a routine that was only ``run`` has no history.
RUNS_UNRECORDED = "a run (run NAME, POST /run) claims no slot and is not recorded"


async def cmd_history(args: argparse.Namespace) -> int:
    check_name(args.name)
    unread: list[StateFault] = []  # the gaps, when only they cannot be read: claims shown
    server = Server.from_args(args)
    if server is not None:
        answer = await server.get(f"/routines/{path_part(args.name)}/history")
        try:
            fires, gaps, running = history_from_json(answer)
        except ValueError as exc:
            raise CliError(f"{server.url}: the answer is not a history ({exc})") from None
        where = server.url
    else:
        state = state_arg(args)
        await say_if_no_state(state)
        asked = StoreDeadline(state)
        async with open_state(state) as store:
            fires, gaps = await asked(
                f"reading the history of {quoted(args.name)}",
                read_history(store, args.name, unread.append),
            )
            running = await asked(
                f"reading which turns of {quoted(args.name)} run now",
                running_slots(store, args.name, fires),
            )
        where = f"state: {state_label(state)}"
        for fault in unread:
            say(f"{fault} — its claims alone are shown")
        if not fires and not gaps and not unread:
            await _known_without_history(args, where)
    recorded = len(fires) + len(gaps)
    if args.since is not None:
        fires = [fire for fire in fires if fire.slot >= args.since]
        gaps = [gap for gap in gaps if gap.last >= args.since]
    if args.outcome:
        fires = [fire for fire in fires if outcome_word(fire) in args.outcome]
        if "missed" not in args.outcome:
            gaps = []
    entries = in_slot_order(fires, gaps)
    limit = args.n if args.n is not None else (None if args.json else HISTORY_TAIL)
    matching = len(entries)
    if limit is not None:
        entries = entries[-limit:]
    status = 1 if unread else 0  # shown, but not all of it
    if args.json:
        print_json(history_to_json(entries, running))
        return status
    if not entries:
        what = "recorded fires" if not recorded else "fires matching --since/--outcome"
        # A run leaves nothing here: said, where one may have been looked for.
        runs = "" if recorded else f" — {RUNS_UNRECORDED}"
        say(f"no {what} for {quoted(args.name)} ({where}){runs}")
        return status
    rows = [
        [short_instant(entry.first), "-", "-", "missed", "-", "-", gap_line(entry, short_instant)]
        if isinstance(entry, Gap)
        else [
            short_instant(entry.slot),
            format_iso(entry.fired_at),
            duration((entry.fired_at - entry.slot).total_seconds() * 1000),
            outcome_word(entry, running),
            duration(entry.ms),
            Name(entry.replica or "-"),
            reason(entry),
        ]
        for entry in reversed(entries)
    ]
    headers = ["SLOT", "FIRED AT", "LATE", "OUTCOME", "TOOK", "BY", "REASON"]
    if any(isinstance(entry, Fire) and entry.usage is not None for entry in entries):
        # What each turn spent, as its agent reported it: a column only when some did.
        headers.insert(5, "SPENT")
        for row, entry in zip(rows, reversed(entries), strict=True):
            spent = describe_usage(entry.usage) if isinstance(entry, Fire) else ""
            row.insert(5, spent or "-")
    header, *lines = table(headers, rows)
    print_line(header)
    for line, entry in zip(lines, reversed(entries), strict=True):
        print_line(line)
        if args.output and isinstance(entry, Fire) and entry.output is not None:
            _print_output(entry.output)
    if matching > len(entries):
        say(f"(the newest {len(entries)} of {matching} — -n N or --json for more)")
    kept = sum(1 for entry in entries if isinstance(entry, Fire) and entry.output is not None)
    if kept and not args.output:
        say(f"({kept} of these kept the end of their reply: --output shows it)")
    elif not kept and args.output:  # asked for, and none there: why (not noise otherwise)
        say(
            "(no reply's end is kept for these: a turn keeps one when its routine's file sets "
            f"output: as it runs; what each run said is the agent's, in session "
            f"routine:{args.name})"
        )
    return status


def _print_output(output: str) -> None:
    """A fire's kept output under its row, indented, control characters escaped."""
    for line in visible_lines(output).split("\n"):
        print_line(f"    | {line}".rstrip())


async def _known_without_history(args: argparse.Namespace, where: str) -> None:
    """A name with no history must be a routine of the routines directory: a typo, or the
    wrong ``--state``, is an error, not an empty history."""
    if not await trio.to_thread.run_sync(os.path.isdir, args.routines):
        raise CliError(
            f"no history of {quoted(args.name)} ({where}), and no routines directory "
            f"{args.routines} to know it by — check the name, --state (or --url) and --routines"
        )
    try:
        pick(await load(args.routines, report=False), args.name, args.routines)
    except CliError as exc:
        raise CliError(f"{exc} (and no history of it: {where})") from None


async def cmd_next(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.command_parser
    if (args.name is None) == (args.cron is None):
        parser.error("next needs either a routine NAME or --cron EXPR (not both)")
    if args.tz is not None and args.cron is None:
        parser.error("--tz goes with --cron (a routine's own tz is used for NAME)")
    if args.seed_name is not None and args.cron is None:
        parser.error("--name goes with --cron (it seeds H as a routine of that name would)")
    after = args.after if args.after is not None else datetime.now(UTC)
    if args.cron is not None:
        # Values of the command line, as --after is: a usage error (exit 2), not a state's.
        cron, tz, seed = args.cron, args.tz, args.seed_name
        if seed is not None and (problem := name_problem(seed)) is not None:
            parser.error(f"argument --name: {problem}")
        if (problem := cron_error(cron, tz, seed)) is not None:
            parser.error(f"argument --cron/--tz: {problem}")
    else:
        check_name(args.name)
        result = await load(args.routines, report=False)
        routine = pick(result, args.name, args.routines)
        report_failures(result)
        if routine.cron is None:
            raise CliError(f"{quoted(routine.name)} runs on demand only (it has no cron)")
        cron, tz, seed = routine.cron, routine.tz, routine.name
    if seed is not None and resolve_hashed(cron, seed) != cron:
        say(f'(H resolved for {quoted(seed)}: "{resolve_hashed(cron, seed)}")')
    zone = parse_cron(cron, tz, seed).zone if tz else None  # UTC needs no zone data
    instant: datetime | None = after
    for _ in range(args.n):
        assert instant is not None
        instant = next_run(cron, tz, instant, seed)
        if instant is None:
            say(f'(cron "{cron}" never fires again)')
            break
        local = f"  {instant.astimezone(zone):%Y-%m-%d %H:%M %Z} ({tz})" if zone else ""
        print_line(f"{format_iso(instant)}{local}")
    return 0


async def cmd_check(args: argparse.Namespace) -> int:
    result = await load(args.routines, report=False)
    for failure in result.failures:
        say(str(failure))
    if result.failures:
        say(f"{len(result.failures)} broken routine file(s) in {args.routines}")
    # Loaded, and shown as "never fires again" by list and the page, but never run: for a
    # check, a mistake (February 30, April 31) as much as a broken file.
    now = datetime.now(UTC)
    never = [r for r in result.routines if r.cron and next_run(r.cron, r.tz, now, r.name) is None]
    for routine in never:
        say(f'{quoted(routine.name)}: cron "{routine.cron}" never fires: no day matches it')
    spec = args.agent or os.environ.get("TRIO_ROUTINES_AGENT")
    if spec:
        agent_from_spec(spec)  # a bad one is one more line, after every broken file's
    if result.others:
        print_line(passed_over(result.others))
    if result.failures or never:
        return 1
    on_cron = sum(1 for r in result.routines if r.cron is not None)
    print_line(
        f"ok — {len(result.routines)} routine(s) in {args.routines}: {on_cron} on cron, "
        f"{len(result.routines) - on_cron} on demand"
    )
    windows = [r for r in result.routines if r.catchup is not None]
    if windows:
        shown_windows = ", ".join(f"{quoted(r.name)} {catchup_text(r.catchup)}" for r in windows)
        print_line(f"catch-up windows: {shown_windows} (the others catch up once, any age)")
    return 0
