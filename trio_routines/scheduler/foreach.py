"""The store calls made for many routines at once: :func:`for_each`, which the boot, the
member watch, the membership and the clock watch (after a jump back) use (a store that
batches concurrent calls serves thousands of routines in a few round trips)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import TypeVar

import trio

from ..errors import StateFault

T = TypeVar("T")


async def for_each(
    call: Callable[[str], Awaitable[T]],
    names: Collection[str],
    *,
    on_fault: Callable[[str, StateFault], None] | None = None,
) -> dict[str, T]:
    """``call(name)`` for every name at once; the first StateFault in the names' order, as one
    plain error, if any failed -- or, with ``on_fault``, each fault handed to it and its name
    left out of the answer. The answer is in the names' order, not the calls' (Trio runs
    them in an order of its own): what its callers log and settle goes in a known order."""
    answers: dict[str, T] = {}
    faults: dict[str, StateFault] = {}

    async def one(name: str) -> None:
        try:
            answers[name] = await call(name)
        except StateFault as exc:
            faults[name] = exc

    async with trio.open_nursery() as nursery:
        for name in names:
            nursery.start_soon(one, name)
    for name in names:
        if name in faults:
            if on_fault is None:
                raise faults[name]
            on_fault(name, faults[name])
    return {name: answers[name] for name in names if name in answers}
