"""Fires and wake-up turns in flight: the count every part reads, and a stop's drain."""

from __future__ import annotations

import trio


class InFlight:
    """Fires (claim to settle) and wake-up turns in flight: the count ``value`` (what the
    statistics, ``/healthz`` and the heartbeat report), the wake-up takes under way (not
    turns: most find nothing due), and :meth:`wait_none` for a stop's drain, which waits for
    both (a take under way may yet return a wake-up whose turn must run).

    A plain count rather than a ``trio_util.AsyncValue``: every fire changes it twice, and an
    AsyncValue's setter looks through its waiters at every change. The one waiter there is (a
    drain) makes its event only when it waits.
    """

    __slots__ = ("_none", "_taking", "value")

    def __init__(self) -> None:
        self.value = 0
        self._taking = 0
        self._none: trio.Event | None = None  # a drain's: set when both counts reach 0

    def enter(self) -> None:
        self.value += 1

    def leave(self) -> None:
        self.value -= 1
        if not self.value:
            self._drained()

    def begin_take(self) -> None:
        self._taking += 1

    def end_take(self) -> None:
        self._taking -= 1
        if not self._taking:
            self._drained()

    def _drained(self) -> None:
        """One count reached 0: a drain waiting returns if the other is 0 too."""
        if not (self.value or self._taking) and self._none is not None:
            self._none.set()
            self._none = None

    async def wait_none(self) -> None:
        """Return once nothing is in flight nor being taken: at once if so, else when both
        counts next reach 0 (a fire may start right after: a drain begins after a stop,
        which starts none)."""
        if not self.value and not self._taking:
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


class Taking:
    """What ``with runtime.taking():`` enters: a wake-up take under way, which a stop's drain
    waits for but which is no turn in flight."""

    __slots__ = ("_count",)

    def __init__(self, count: InFlight) -> None:
        self._count = count

    def __enter__(self) -> None:
        self._count.begin_take()

    def __exit__(self, *exc_info: object) -> None:
        self._count.end_take()
