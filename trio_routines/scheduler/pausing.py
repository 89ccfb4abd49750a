"""A pause or a resume asked of this scheduler, and whether it changed anything.

:class:`Pausing` owns one lock per routine being paused or resumed here, and is handed the
store's calls (:class:`~.calls.StoreCalls`) and the :class:`~.state.Runtime` (the clock).
Under its routine's lock a change reads the paused routines afresh, then writes: so of two
asked at once in this process, the second sees the first's change, and says it changed
nothing. (Replicas asked at once may each say they changed it: the store's write is
idempotent, the answer advisory.)
"""

from __future__ import annotations

import trio

from .calls import StoreCalls
from .state import Runtime


class Pausing:
    """Pauses and resumes, one at a time per routine in this process."""

    def __init__(self, runtime: Runtime, calls: StoreCalls) -> None:
        self._runtime = runtime
        self._calls = calls
        self._changing: dict[str, trio.Lock] = {}

    async def change(self, name: str, paused: bool) -> bool:
        """Pause (``paused``) or resume ``name`` in the store: whether it was not so before.
        Written whatever the read found (the store changes nothing where there is nothing to
        change): a change this process gave up on may still land (a stalled disk), and the
        next one asked here lands after it only if it is written, as a read does not wait for
        it. Raises :class:`~trio_routines.errors.StateFault` (nothing changed, but as
        :meth:`.StoreCalls.set_paused` says)."""
        lock = self._changing.setdefault(name, trio.Lock())
        try:
            async with lock:
                read = await self._calls.read_paused(self._runtime.host_now())
                await self._calls.set_paused(name, paused)
                return (name in read.names) is not paused
        finally:
            idle = not lock.locked() and lock.statistics().tasks_waiting == 0
            if idle and self._changing.get(name) is lock:
                del self._changing[name]  # none waits: the next makes its own
