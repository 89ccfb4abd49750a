"""The state directory's pauses, gaps, first-armed records, usage ledgers and recent wake-up
turns: the store's async calls.

The files themselves are pause.py's, gaps.py's, armed.py's, ledgerfile.py's and waketurns.py's
(all build on ../safefile.py, and live outside ``claims/``, which is all an older reader looks
at). Each call runs in a worker thread of the store's, left to itself when its caller is
cancelled (abandon.py): a gap or a first-armed record given up may still land, which is
harmless (each is idempotent, and a caller told of a fault may repeat them). A pause or resume
given up before it began is not begun, and the next one waits for its thread: a late one must
not undo a later one. A usage record or a wake-up turn given up may land too; the scheduler
never repeats one, so it is counted once or not at all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from time import monotonic
from typing import Any, Protocol, TypeVar

import trio

from ...agent import Usage
from ...errors import StateFault
from ...ledger import Spent, check_key
from ...records import Gap
from ..abandon import Handoff, OneAtATime, run_abandoning

T = TypeVar("T")


class Run(Protocol):
    """The store's thread runner."""

    def __call__(self, fn: Callable[..., T], /, *args: Any) -> Awaitable[T]: ...


class Records:
    """The pause, gap and first-armed calls of :class:`~.store.DirectoryStore`."""

    def __init__(
        self, root: Path, run: Run, *, limiter: trio.CapacityLimiter, bound: float
    ) -> None:
        """``run``: the store's thread runner, ``await run(fn, *args)`` in one of its worker
        threads (``limiter``'s), left to itself when its caller is cancelled. ``bound``: how
        long a pause or resume waits for the thread of one given up before it."""
        self._root = root
        self._run = run
        self._limiter = limiter
        self._bound = bound
        self._pausing = OneAtATime()

    async def set_paused(self, routine: str, paused: bool, at: datetime | None = None) -> None:
        """One pause or resume at a time, in the order asked, each after the thread of the one
        before has ended, even one whose caller gave up (a stalled disk): a late pause must
        not land after a resume asked later, nor a late resume after a later pause. One given
        up before it began is not begun."""
        from .pause import set_paused_handing

        asked = monotonic()  # a resume's wait for the one before it counts toward its landing
        what = "pause" if paused else "resume"

        def busy(_: int) -> StateFault:
            return StateFault(
                f"could not {what} {routine!r}: another pause or resume was under way in this "
                f"process for {self._bound:g}s (a stalled disk?) — try again"
            )

        def still_under_way() -> StateFault:
            return StateFault(
                f"could not {what} {routine!r}: a pause or resume given up earlier is "
                f"still under way after {self._bound:g}s (a stalled disk?) — try again"
            )

        deadline = trio.current_time() + self._bound
        async with self._pausing.turn(deadline, busy, still_under_way) as ended:
            await run_abandoning(
                set_paused_handing,
                self._root,
                routine,
                paused,
                at,
                asked,
                limiter=self._limiter,
                handoff=Handoff(),
                ended=ended,
            )

    async def resumed_at(self, routine: str) -> datetime | None:
        from .pausestate import resumed_at_sync

        return await self._run(resumed_at_sync, self._root, routine)

    async def resumed_pause_since(self, routine: str) -> datetime | None:
        from .pausestate import resumed_pause_since_sync

        return await self._run(resumed_pause_since_sync, self._root, routine)

    async def paused_since(self, routine: str) -> datetime | None:
        from .pausestate import paused_since_sync

        return await self._run(paused_since_sync, self._root, routine)

    async def paused(self) -> frozenset[str]:
        from .pausestate import paused_sync

        return await self._run(paused_sync, self._root)

    async def paused_with_resumes(
        self, since: datetime
    ) -> tuple[frozenset[str], dict[str, tuple[datetime, datetime | None]]]:
        from .pausedread import paused_with_resumes_sync

        return await self._run(paused_with_resumes_sync, self._root, since)

    async def record_gap(self, routine: str, gap: Gap, *, extends: datetime | None = None) -> bool:
        """Add ``gap`` to ``routine``\'s gaps (the store contract); False when already there."""
        from .gaps import record_gap_sync

        return await self._run(record_gap_sync, self._root, routine, gap, extends)

    async def gaps(self, routine: str) -> list[Gap]:
        """The retained gaps of ``routine``, oldest first."""
        from .gaps import gaps_sync

        return await self._run(gaps_sync, self._root, routine)

    async def first_armed(self, routines: Sequence[str], at: datetime) -> dict[str, datetime]:
        """When each of ``routines`` was first armed; ``at`` for those named the first time."""
        from .armed import first_armed_sync

        return await self._run(first_armed_sync, self._root, list(routines), at)

    async def record_usage(self, kind: str, name: str, at: datetime, usage: Usage) -> None:
        """Add ``usage`` to the ledger of routine or session ``name`` (the store contract)."""
        from .ledgerfile import record_usage_sync

        await self._run(record_usage_sync, self._root, check_key(kind, name), name, at, usage)

    async def usage_since(self, kind: str, name: str, since: datetime) -> Spent:
        """What the turns of routine or session ``name`` spent from ``since`` on."""
        from .ledgerfile import spent_since_sync

        return await self._run(spent_since_sync, self._root, check_key(kind, name), name, since)

    async def note_wake_turn(self, session: str, at: datetime) -> None:
        """Record a wake-up turn of ``session`` at ``at`` (the rate limit's)."""
        from .waketurns import note_wake_turn_sync

        await self._run(note_wake_turn_sync, self._root, session, at)

    async def wake_turns(self, session: str, since: datetime) -> list[datetime]:
        """The recorded wake-up turns of ``session`` after ``since``, oldest first."""
        from .waketurns import wake_turns_sync

        return await self._run(wake_turns_sync, self._root, session, since)
