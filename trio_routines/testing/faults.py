"""The faults a :class:`~.memory.MemoryStore` is told to inject: :class:`Faults`.

It owns what is asked (an error an operation raises, for some calls or until removed, perhaps
about one routine only; an operation that stalls until cancelled) and answers, on the way into
each operation, whether to raise or stall. The store and its members only ask it.
"""

from __future__ import annotations

from collections.abc import Awaitable

import trio

#: What :meth:`MemoryStore.fail` and :meth:`MemoryStore.hang` can be asked of: each call of the
#: store (and ``take``, ``beat``, ``join``, ``paused`` of its members and pause reads).
OPERATIONS = frozenset(
    (  # noqa: SIM905 -- 29 names, one a line, would be a tenth of the module
        "add_wakeup beat claim claims_alive defer_wakeup first_armed gaps history join "
        "latest_fire list_wakeups note_wake_turn open_claims paused paused_since ready record_gap "
        "record_usage remove_wakeup replicas resumed_at resumed_pause_since sessions_held "
        "set_paused settle take take_due_wakeup usage_since wake_turns"
    ).split()
)


class Faults:
    """The injected faults: ``errors`` (operation -> the exception it raises) and ``hangs``
    (the operations that stall), both also open to a test as the store's ``faults`` and
    ``hangs``."""

    def __init__(self) -> None:
        self.errors: dict[str, Exception] = {}
        self.hangs: set[str] = set()
        self._times: dict[str, int] = {}  # operation -> the calls left before it heals
        self._only: dict[str, str] = {}  # operation -> the one routine whose calls fail

    def fail(
        self, operation: str, error: Exception, *, times: int | None, routine: str | None
    ) -> None:
        """See :meth:`MemoryStore.fail`."""
        check_operation(operation)
        self.errors[operation] = error
        if times is None:
            self._times.pop(operation, None)
        else:
            self._times[operation] = times
        if routine is None:
            self._only.pop(operation, None)
        else:
            self._only[operation] = routine

    def hang(self, operation: str) -> None:
        """See :meth:`MemoryStore.hang`."""
        check_operation(operation)
        self.hangs.add(operation)

    def enter(self, operation: str) -> Awaitable[None]:
        """Await it on the way into ``operation``: a checkpoint, as real IO makes, then a stall
        when the operation hangs. Not a coroutine of its own while nothing hangs: a claim, a
        take and a settle per fire each enter, and at 10,000 fires in flight every coroutine
        is the collector's work."""
        if not self.hangs:
            return trio.lowlevel.checkpoint()  # noqa: ASYNC105 -- awaited by the caller
        return self._enter_hanging(operation)

    async def _enter_hanging(self, operation: str) -> None:
        await trio.lowlevel.checkpoint()
        if operation in self.hangs:
            await trio.sleep_forever()

    def consume(self, operation: str, routine: str | None = None) -> Exception | None:
        """The error this call of ``operation`` (about ``routine``) meets, if any, counted."""
        fault = self.errors.get(operation)
        if fault is None or self._only.get(operation, routine) != routine:
            return None
        if operation in self._times:
            self._times[operation] -= 1
            if self._times[operation] <= 0:
                del self._times[operation]
                del self.errors[operation]
        return fault

    def check(self, operation: str, routine: str | None = None) -> None:
        """Raise the error this call of ``operation`` (about ``routine``) meets, if any."""
        fault = self.consume(operation, routine)
        if fault is not None:
            raise fault


def check_operation(operation: str) -> None:
    if operation not in OPERATIONS:
        known = ", ".join(sorted(OPERATIONS))
        raise ValueError(f"the memory store has no operation {operation!r}: one of {known}")
