"""Fires and wake-up turns in flight: the count every part reads, and a stop's drain."""

from __future__ import annotations

import trio


class InFlight:
    """Fires (claim to settle) and wake-ups (take to deferral) in flight: the count
    ``value``, and :meth:`wait_none` for a stop's drain.

    A plain count rather than a ``trio_util.AsyncValue``: every fire changes it twice, and an
    AsyncValue's setter looks through its waiters at every change. The one waiter there is (a
    drain) makes its event only when it waits.
    """

    __slots__ = ("_none", "value")

    def __init__(self) -> None:
        self.value = 0
        self._none: trio.Event | None = None  # a drain's: set when the count reaches 0

    def enter(self) -> None:
        self.value += 1

    def leave(self) -> None:
        self.value -= 1
        if not self.value and self._none is not None:
            self._none.set()
            self._none = None

    async def wait_none(self) -> None:
        """Return once nothing is in flight: at once if nothing is, else when the count next
        reaches 0 (a fire may start right after: a drain begins after a stop, which starts
        none)."""
        if not self.value:
            await trio.lowlevel.checkpoint()
            return
        if self._none is None:
            self._none = trio.Event()
        await self._none.wait()


class Working:
    """What ``with self._working():`` enters: one more turn in flight for the block."""

    __slots__ = ("_count",)

    def __init__(self, count: InFlight) -> None:
        self._count = count

    def __enter__(self) -> None:
        self._count.enter()

    def __exit__(self, *exc_info: object) -> None:
        self._count.leave()
