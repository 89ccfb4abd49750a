"""``pause`` and ``resume``: a routine held back in the state store, for every replica."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from ..text import shell_name
from .client import Server, path_part
from .output import (
    NOT_CONFIRMED,
    StoreDeadline,
    check_name,
    check_owner,
    load,
    open_state,
    pick,
    print_line,
    quoted,
    state_arg,
)


def _paused_line(name: str, *, already: bool = False) -> str:
    # The name as a shell reads it back: `resume sp ace`, copied as printed, failed.
    said = "was already paused" if already else "paused"
    return (
        f"{name} {said} — no scheduler on this state claims its slots until "
        f"`resume {shell_name(name)}`"
    )


_RESUMED = "resumed — it fires from its next slot; paused slots are not run"


async def _over_http(server: Server, name: str, *, paused: bool) -> int:
    verb = "pause" if paused else "resume"
    answer = await server.call("POST", f"/routines/{path_part(name)}/{verb}", {})
    said = server.ok(answer, 200)
    # Said by this very server of this routine, or not done: a proxy's or another service's
    # 200 is no pause.
    if not isinstance(said, dict) or said.get("name") != name or said.get("paused") is not paused:
        raise server.not_ours(f"not the {verb} of {name!r}")
    if paused:
        print_line(_paused_line(name, already=said.get("changed") is False))
    elif said.get("changed") is False:  # (an older server does not say: resumed)
        print_line(f"{name} was not paused")
    else:
        print_line(f"{name} {_RESUMED}")
    return 0


async def cmd_pause(args: argparse.Namespace) -> int:
    check_name(args.name)
    server = Server.from_args(args)
    if server is not None:
        return await _over_http(server, args.name, paused=True)
    state = state_arg(args)
    # Refused first, as every command that writes is: the routines it names are the
    # service's, perhaps in a directory this user is not in (/etc/trio-routines/routines).
    check_owner(state, "pause", existing=True)
    routine = pick(await load(args.routines, report=False), args.name, args.routines)
    asked = StoreDeadline(state)
    async with open_state(state, writes="pause", existing=True) as store:
        already = routine.name in await asked("reading the paused routines", store.paused())
        # Written all the same (its first pause's instant stands): a resume still on its way
        # must not land after it, as it would had this pause written nothing.
        await asked(
            f"pausing {quoted(routine.name)}",
            store.set_paused(routine.name, True, datetime.now(UTC)),
            NOT_CONFIRMED.format("pause"),
        )
    print_line(_paused_line(routine.name, already=already))
    return 0


async def cmd_resume(args: argparse.Namespace) -> int:
    check_name(args.name)
    server = Server.from_args(args)
    if server is not None:
        return await _over_http(server, args.name, paused=False)
    state = state_arg(args)
    asked = StoreDeadline(state)
    async with open_state(state, writes="resume", existing=True) as store:
        if args.name not in await asked("reading the paused routines", store.paused()):
            # A routine whose file is gone or broken may still be resumed; an unknown one not.
            pick(await load(args.routines, report=False), args.name, args.routines)
            print_line(f"{args.name} was not paused")
            return 0
        await asked(
            f"resuming {quoted(args.name)}",
            store.set_paused(args.name, False, datetime.now(UTC)),
            NOT_CONFIRMED.format("resume"),
        )
    print_line(f"{args.name} {_RESUMED}")
    return 0
