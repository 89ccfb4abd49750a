"""``status`` and ``list``: what is scheduled, how it went lately, and what runs right now.

One row per routine, as ``systemctl list-timers`` shows timers: NEXT and LEFT (when it fires
next, and how long until then; ``paused`` for a routine paused in the store), LAST (the newest
claimed slot and its outcome), a strip of the last ten outcomes, and the schedule. Then the
pending wake-ups, then (``status``) the live replicas. With ``--url`` (or
``$TRIO_ROUTINES_URL``) the whole view comes from a running ``serve``'s HTTP surface (the token
from ``$TRIO_ROUTINES_TOKEN``; :mod:`.served`), with no routines directory or state needed
here, and ``status`` adds how many turns it has in flight and of which routines; a server that
does not answer is an error. Without a URL the view is read from the state and the routines
directory, and no server is asked.

Everything here reads; nothing claims, settles or fires.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import attrs
import trio

from ..claims import arm_from
from ..cron import next_run
from ..errors import StateFault
from ..history import day_spent, failing_streak, running_slots
from ..instants import format_iso
from ..ledger import Spent, describe_spent, spent_to_json
from ..records import Fire, Wakeup
from ..replicas import ReplicaInfo, replica_json
from ..routines import Routine, catchup_text
from ..store import Store
from ..text import name_shown, shown
from .client import Server
from .output import (
    StoreDeadline,
    load,
    open_state,
    print_json,
    print_line,
    quoted,
    say,
    say_if_no_state,
    state_arg,
    state_label,
)
from .served import served_in_flight, served_replicas, served_view
from .table import Name, aligned, left, outcome_word, schedule, short_instant, strip, table
from .wakeuprows import session_spent, wakeup_json, wakeup_lines

STORE_READ = 10.0  # seconds: how long status waits for the store's list of replicas
RECENT = 10  # outcomes in the strip


@attrs.frozen
class RoutineRow:
    routine: Routine
    next: datetime | None
    recent: Sequence[Fire]
    problem: str | None = None  # why its claims could not be read
    paused: bool = False  # paused in the store: no scheduler claims its slots
    failing: int = 0  # claimed slots failed or interrupted since the last completed one
    last_success: Fire | None = None  # the newest completed claim retained
    spent: Spent = attrs.field(factory=Spent)  # what its turns of the last 24 h spent (ledger)
    #: The slots among ``recent`` whose claim is open and held by a live replica: running.
    running: frozenset[datetime] = frozenset()

    @property
    def last(self) -> Fire | None:
        return self.recent[-1] if self.recent else None


@attrs.frozen
class InFlight:
    """What a running server said: the turns in flight and the routines whose turn runs."""

    url: str
    count: int
    running: tuple[str, ...] = ()
    stopping: bool = False


def failing_lines(rows: Sequence[RoutineRow]) -> list[str]:
    """``daily: failing for 3 runs — last success 2026-07-20T09:00Z`` for each failing routine."""
    out = []
    for row in rows:
        if row.failing:
            runs = "run" if row.failing == 1 else "runs"
            success = row.last_success
            since = (
                f"last success {short_instant(success.slot)}"
                if success is not None
                else "no success in its history"
            )
            name = name_shown(row.routine.name)
            out.append(f"{name}: failing for {row.failing} {runs} — {since}")
    return out


async def routine_rows(
    store: Store, routines: Sequence[Routine], now: datetime, asked: StoreDeadline | None = None
) -> list[RoutineRow]:
    """Each routine's row, every read within ``asked`` (the store's deadline)."""
    asked = asked or StoreDeadline(None)
    rows = []
    try:
        paused = await asked("reading the paused routines", store.paused())
    except StateFault as exc:
        say(f"which routines are paused is unreadable — {exc}")
        paused = frozenset()
    for routine in routines:
        problem = None
        try:
            fires = await asked(
                f"reading the claims of {quoted(routine.name)}", store.history(routine.name)
            )
        except StateFault as exc:
            fires, problem = [], str(exc)
        try:  # an open claim: a turn a live replica runs now, or one a crash left
            running = await asked(
                f"reading which turns of {quoted(routine.name)} run now",
                running_slots(store, routine.name, fires[-RECENT:]),
            )
        except StateFault as exc:
            say(f"which turns of {routine.name} run now is unreadable — {exc}")
            running = set()
        upcoming = None
        if routine.cron is not None:
            # A newest claim stamped in the future (a clock that ran ahead) holds back every
            # slot before it: the next instant is counted from it, as the running loops do.
            after = arm_from(fires[-1] if fires else None, now)
            upcoming = next_run(routine.cron, routine.tz, after, routine.name)
        held = routine.name in paused
        failing, success = failing_streak(fires)
        try:
            spent = await asked(
                f"reading what the turns of {quoted(routine.name)} spent",
                day_spent(store, "routine", routine.name, now, fires),
            )
        except StateFault as exc:
            say(f"what the turns of {routine.name} spent is unreadable — {exc}")
            spent = Spent()
        rows.append(
            RoutineRow(
                routine,
                None if held else upcoming,
                fires[-RECENT:],
                problem,
                held,
                failing,
                success,
                spent,
                frozenset(running),
            )
        )
    return rows


def _next(row: RoutineRow) -> str:
    if row.paused:
        return "paused"
    if row.next is not None:
        return short_instant(row.next)
    return "-" if row.routine.cron is None else "never"


def routine_lines(rows: Sequence[RoutineRow], now: datetime) -> list[str]:
    cells = []
    for row in rows:
        last = row.last
        shown_last = (
            f"{short_instant(last.slot)} {outcome_word(last, row.running)}" if last else "-"
        )
        if row.problem is not None:
            shown_last = "unreadable"
        cells.append(
            [
                Name(row.routine.name),
                _next(row),
                left(row.next, now),
                shown_last,
                strip(row.recent, RECENT, running=row.running),
                schedule(row.routine),
            ]
        )
    headers = ["ROUTINE", "NEXT", "LEFT", "LAST", "RECENT", "SCHEDULE"]
    if any(row.spent != Spent() for row in rows):  # a column only when some turn spent
        headers.insert(5, "SPENT 24H")
        for cell, row in zip(cells, rows, strict=True):
            cell.insert(5, describe_spent(row.spent) or "-")
    return table(headers, cells)


def routine_json(row: RoutineRow) -> dict[str, Any]:
    routine = row.routine
    entry: dict[str, Any] = {"name": routine.name}
    if routine.cron is not None:
        entry["cron"] = routine.cron
        if routine.resolved_cron != routine.cron:
            entry["resolved_cron"] = routine.resolved_cron
    if routine.tz is not None:
        entry["tz"] = routine.tz
    entry["next"] = format_iso(row.next) if row.next is not None else None
    last = row.last
    entry["last"] = None
    if last is not None:
        entry["last"] = {"slot": format_iso(last.slot), "outcome": outcome_word(last, row.running)}
        if last.replica is not None:
            entry["last"]["replica"] = last.replica
    entry["recent"] = [outcome_word(fire, row.running) for fire in row.recent]
    entry["paused"] = row.paused
    if routine.catchup is not None:
        entry["catchup"] = catchup_text(routine.catchup)
    if row.spent != Spent():  # what its turns of the last 24 hours spent (the ledger)
        entry["spent24h"] = spent_to_json(row.spent)
    if row.failing:  # failed or interrupted since its last success (None: none retained)
        entry["failing"] = row.failing
        success = row.last_success
        entry["lastSuccess"] = format_iso(success.slot) if success is not None else None
    return entry


def in_flight_line(flight: InFlight | None) -> str:
    if flight is None:
        return "IN FLIGHT  - (no server asked: pass --url or set TRIO_ROUTINES_URL)"
    # The count is the asked server's own; the routines running are the store's, whichever
    # replica runs them.
    turns = "1 turn" if flight.count == 1 else f"{flight.count} turns"
    running = f"; running on any replica: {', '.join(flight.running)}" if flight.running else ""
    stopping = " (stopping: it starts no new turns)" if flight.stopping else ""
    return f"IN FLIGHT  {turns} on {flight.url}{stopping}{running}"


def _unread(fault: StateFault) -> StateFault:
    """No read answered: the state is unreadable, not only the wake-ups read first. A fault
    saying where and why (a PostgreSQL call's: no server, no database) is said as the state's."""
    where, why = getattr(fault, "where", None), getattr(fault, "why", None)
    if isinstance(where, str) and isinstance(why, str):
        return StateFault(f"the state in {where} is unreadable: {why}")
    return fault


# --- the commands ---------------------------------------------------------------------------


async def _view(
    args: argparse.Namespace,
) -> tuple[list[RoutineRow], list[Wakeup] | None, datetime, dict[str, Spent]]:
    """The routines' rows and the pending wake-ups in the order of their instants (None:
    unreadable, said on stderr; the routines are shown all the same)."""
    result = await load(args.routines, report=True)
    state = state_arg(args)
    await say_if_no_state(state)
    asked = StoreDeadline(state)
    async with open_state(state) as store:
        wakeups: list[Wakeup] | None
        try:
            listed = await asked("reading the pending wake-ups", store.list_wakeups())
            wakeups = sorted(listed, key=lambda w: (w.fire_at, w.id))  # then ids: GET /wakeups
        except StateFault as exc:
            # The wake-ups alone unreadable (the paused routines are read): the routines are
            # shown. Else the store is (not reached, no tables yet): one line, as elsewhere.
            try:
                await asked("reading the paused routines", store.paused())
            except StateFault:
                raise _unread(exc) from None
            say(f"the pending wake-ups are unreadable — {exc}")
            wakeups = None
        now = datetime.now(UTC)
        rows = await routine_rows(store, result.routines, now, asked)
        spent = await asked(
            "reading what the sessions spent", session_spent(store, wakeups or [], now)
        )
    for row in rows:
        if row.problem is not None:
            say(f"{row.routine.name}: its claims are unreadable — {row.problem}")
    return rows, wakeups, now, spent


async def cmd_list(args: argparse.Namespace) -> int:
    server = Server.from_args(args)
    wakeups: list[Wakeup] | None
    shown_wakeups: list[dict[str, Any]] | None
    if server is not None:
        served = await served_view(server)
        rows, wakeups, now = served.rows, served.wakeups, served.now
        shown_wakeups, spent = served.wakeups_json, served.session_spent
    else:
        rows, wakeups, now, spent = await _view(args)
        shown_wakeups = None if wakeups is None else [wakeup_json(w, spent) for w in wakeups]
    if args.json:
        print_json({"routines": [routine_json(row) for row in rows], "wakeups": shown_wakeups})
        return 0
    if not rows and wakeups == []:
        where = server.url if server is not None else f"state: {state_label(state_arg(args))}"
        routines = "" if server is not None else f" in {args.routines}"
        say(f"nothing scheduled — no routines{routines}, no pending wake-ups ({where})")
        return 0
    _print_tables(rows, wakeups, now, spent)
    return 0


async def cmd_status(args: argparse.Namespace) -> int:
    server = Server.from_args(args)
    wakeups: list[Wakeup] | None
    shown_wakeups: list[dict[str, Any]] | None
    flight: InFlight | None = None
    if server is not None:
        # Everything from the server: no routines directory or state needed here.
        served = await served_view(server)
        rows, wakeups, now = served.rows, served.wakeups, served.now
        shown_wakeups, spent = served.wakeups_json, served.session_spent
        members = [m for m in await served_replicas(server) if m.alive]
        count, stopping = await served_in_flight(server)
        flight = InFlight(server.url, count, served.running, stopping)
    else:
        rows, wakeups, now, spent = await _view(args)
        shown_wakeups = None if wakeups is None else [wakeup_json(w, spent) for w in wakeups]
        members = await _live_replicas(args)
    if args.json:
        asked: dict[str, Any] | None = None
        if flight is not None:
            asked = {
                "url": flight.url,
                "inFlight": flight.count,
                "running": list(flight.running),
                "stopping": flight.stopping,
            }
        print_json(
            {
                "routines": [routine_json(row) for row in rows],
                "wakeups": shown_wakeups,
                "server": asked,
                "replicas": [replica_json(m) for m in members],
            }
        )
        return 0
    _print_tables(rows, wakeups, now, spent)
    if failing := failing_lines(rows):
        print_line()
        for line in failing:
            print_line(line)
    print_line()
    for line in replica_lines(members, now):
        print_line(line)
    print_line()
    print_line(in_flight_line(flight))
    return 0


async def _live_replicas(args: argparse.Namespace) -> list[ReplicaInfo]:
    """The live members of the store (none for a store that keeps no replicas)."""
    async with open_state(state_arg(args)) as store:
        read = getattr(store, "replicas", None)
        if read is None:
            return []
        try:
            with trio.fail_after(STORE_READ):
                members: list[ReplicaInfo] = await read()
        except (StateFault, trio.TooSlowError) as exc:
            say(f"the replicas are unreadable: {str(exc) or 'no answer'}")
            return []
    return [m for m in members if m.alive]


def replica_lines(members: Sequence[ReplicaInfo], now: datetime) -> list[str]:
    """One line a live replica, in aligned columns: id, version, since when, last seen, turns
    in flight."""
    if not members:
        return ["(no live replica)"]
    rows = [
        [
            name_shown(m.id),
            f"v{shown(m.version)}",
            f"started {format_iso(m.started)}",
            f"seen {max(0, round((now - m.last_seen).total_seconds()))}s ago",
            f"{m.in_flight} in flight",
        ]
        for m in members
    ]
    return [f"replicas ({len(members)} live):"] + [f"  {line}" for line in aligned(rows)]


def _print_tables(
    rows: Sequence[RoutineRow],
    wakeups: Sequence[Wakeup] | None,
    now: datetime,
    spent: Mapping[str, Spent],
) -> None:
    for line in routine_lines(rows, now) if rows else ["(no routines)"]:
        print_line(line)
    print_line()
    if wakeups is None:
        print_line("(the pending wake-ups are unreadable)")
        return
    for line in wakeup_lines(wakeups, now, spent) if wakeups else ["(no pending wake-ups)"]:
        print_line(line)
