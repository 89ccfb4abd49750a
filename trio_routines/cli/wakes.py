"""``wake`` and ``unwake``: a session's wake-ups added and cancelled from the command line."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

import trio

from ..converter import wakeup_from_json, wakeup_to_json
from ..errors import InvalidWakeup
from ..instants import format_iso
from ..records import Origin, OriginKind, Wakeup
from ..text import shell_option
from ..wakeups import NO_PROMPT, WakeupRequest, plan_add
from ..wakeuptexts import when_text
from .client import Server, path_part, query
from .output import (
    ADD_NOT_CONFIRMED,
    NOT_CONFIRMED,
    CliError,
    StoreDeadline,
    open_state,
    print_json,
    print_line,
    quoted,
    say,
    state_arg,
)

# The guardrails speak of the request's fields; on the command line they are options.
_OPTION_NAMES = {"`in`": "--in", '"in"': "--in"}


def added_line(wakeup: Wakeup) -> str:
    """What ``wake`` prints: when it fires, for whom, and how to cancel it."""
    return (
        f"wake-up {wakeup.id} {when_text(wakeup)} for session {quoted(wakeup.session)} — "
        "cancel with: "
        f"unwake {wakeup.id} {shell_option('--session', wakeup.session)}"
    )


async def cmd_wake(args: argparse.Namespace) -> int:
    if args.tz is not None and args.cron is None:
        args.command_parser.error("--tz goes with --cron")
    if args.until is not None and args.cron is None:
        args.command_parser.error("--until goes with --cron")
    prompt = args.prompt
    if prompt == "-":
        prompt = await trio.to_thread.run_sync(sys.stdin.read)
    server = Server.from_args(args)
    if server is not None:
        return await _wake_over_http(server, args, prompt)
    now = datetime.now(UTC)
    asked = Origin(kind=OriginKind.CLI)  # over --url, the server records http
    if args.delay is not None:
        request = WakeupRequest(
            session=args.session, prompt=prompt, fire_at=now + args.delay, origin=asked
        )
    else:
        request = WakeupRequest(
            session=args.session,
            prompt=prompt,
            cron=args.cron,
            tz=args.tz,
            origin=asked,
            until=args.until,
        )
    state = state_arg(args)
    deadline = StoreDeadline(state)
    try:
        # What the request alone decides (too soon, a cron too frequent, a blank prompt) is
        # refused before the state is opened: a refused wake creates no state directory.
        plan_add([], request, now)
        async with open_state(state, writes="wake") as store:
            wakeup = await deadline(
                f"adding a wake-up for session {quoted(args.session)}",
                store.add_wakeup(request, now),
                ADD_NOT_CONFIRMED.format("wake-up"),
            )
    except InvalidWakeup as exc:
        message = str(exc)
        for field, option in _OPTION_NAMES.items():
            message = message.replace(field, option)
        raise CliError(f"wake-up refused: {message}") from None
    if args.json:
        print_json(wakeup_to_json(wakeup), indent=None)
    else:
        print_line(added_line(wakeup))
    return 0


async def _wake_over_http(server: Server, args: argparse.Namespace, prompt: str) -> int:
    if not prompt.strip():  # as on the state itself (the server's words are its field's)
        raise CliError(f"wake-up refused: {NO_PROMPT}")
    body: dict[str, Any] = {"session": args.session, "prompt": prompt}
    if args.delay is not None:
        body["in"] = args.delay.total_seconds()
    else:
        body["cron"] = args.cron
        if args.tz is not None:
            body["tz"] = args.tz
        if args.until is not None:
            body["until"] = format_iso(args.until)
    answer = await server.call("POST", "/wakeups", body)
    if answer.status == 400:  # a guardrail: the same words as on the state itself
        message = answer.error()
        for field, option in _OPTION_NAMES.items():
            message = message.replace(field, option)
        raise CliError(f"wake-up refused: {message}")
    shown = server.ok(answer, 201)
    try:
        # The server never sends a prompt back (it does not show prompts): ours stands in.
        wakeup = wakeup_from_json({**shown["wakeup"], "prompt": prompt})
    except (KeyError, TypeError, ValueError) as exc:
        raise CliError(f"{server.url}: the answer is not a wake-up ({exc})") from None
    if args.json:
        print_json(shown["wakeup"], indent=None)
    else:
        print_line(added_line(wakeup))
    note = shown.get("note")
    if isinstance(note, str):  # the server fires no wake-ups itself
        say(f"note: {note[:300]}")
    return 0


async def cmd_unwake(args: argparse.Namespace) -> int:
    server = Server.from_args(args)
    if server is not None:
        answer = await server.call(
            "DELETE", f"/wakeups/{path_part(args.id)}{query(session=args.session)}"
        )
        removed = answer.status == 200
        if not removed and answer.status != 404:
            server.ok(answer, 200)  # raises: another success is another server's
        if removed and (
            not isinstance(answer.body, dict) or answer.body.get("removed") is not True
        ):
            raise server.not_ours("not a wake-up's removal")
    else:
        state = state_arg(args)
        deadline = StoreDeadline(state)
        async with open_state(state, writes="unwake", existing=True) as store:
            removed = await deadline(
                f"cancelling wake-up {quoted(args.id)} of session {quoted(args.session)}",
                store.remove_wakeup(args.id, args.session),
                NOT_CONFIRMED.format("cancellation"),
            )
    if not removed:
        raise CliError(
            f"no pending wake-up {quoted(args.id)} for session {quoted(args.session)} "
            "(already fired, cancelled, or another session's)"
        )
    print_line(f"wake-up {args.id} cancelled")
    return 0
