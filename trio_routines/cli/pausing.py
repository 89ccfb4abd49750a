"""``pause`` and ``resume``: a routine held back in the state store, for every replica."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from .output import check_name, load, open_state, pick, print_line, state_arg


async def cmd_pause(args: argparse.Namespace) -> int:
    routine = pick(await load(args.routines, report=False), args.name, args.routines)
    async with open_state(state_arg(args), migrate="create") as store:
        await store.set_paused(routine.name, True)
    print_line(
        f"{routine.name} paused — no scheduler on this state claims its slots until "
        f"`resume {routine.name}`"
    )
    return 0


async def cmd_resume(args: argparse.Namespace) -> int:
    check_name(args.name)
    async with open_state(state_arg(args), migrate="create") as store:
        if args.name not in await store.paused():
            # A routine whose file is gone or broken may still be resumed; an unknown one not.
            pick(await load(args.routines, report=False), args.name, args.routines)
            print_line(f"{args.name} was not paused")
            return 0
        await store.set_paused(args.name, False, datetime.now(UTC))
    print_line(f"{args.name} resumed — it fires from its next slot; paused slots are not run")
    return 0
