"""``wake`` and ``unwake``: a session's wake-ups added and cancelled from the command line."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime

import trio

from ..converter import wakeup_to_json
from ..wakeups import WakeupRequest, added_reply, removed_reply
from .output import CliError, open_state, print_line, state_arg


async def cmd_wake(args: argparse.Namespace) -> int:
    if args.tz is not None and args.cron is None:
        args.command_parser.error("--tz goes with --cron")
    prompt = args.prompt
    if prompt == "-":
        prompt = await trio.to_thread.run_sync(sys.stdin.read)
    now = datetime.now(UTC)
    if args.delay is not None:
        request = WakeupRequest(session=args.session, prompt=prompt, fire_at=now + args.delay)
    else:
        request = WakeupRequest(session=args.session, prompt=prompt, cron=args.cron, tz=args.tz)
    async with open_state(state_arg(args)) as store:
        wakeup = await store.add_wakeup(request, now)
    if args.json:
        print_line(json.dumps(wakeup_to_json(wakeup), ensure_ascii=False))
    else:
        print_line(added_reply(wakeup))
    return 0


async def cmd_unwake(args: argparse.Namespace) -> int:
    async with open_state(state_arg(args)) as store:
        removed = await store.remove_wakeup(args.id, args.session)
    if not removed:
        raise CliError(removed_reply(args.id, False))
    print_line(removed_reply(args.id, True))
    return 0
