"""One caller's claim or settle on its way through the state directory's writer process
(process.py), and the fault of one that never left."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from .process import WriterProcess

_ABORT_SUCCEEDED = trio.lowlevel.Abort.SUCCEEDED


class Unsent(Exception):
    """The writer process was gone before this item's batch was sent: nothing was written."""


class Call:
    """One caller's item, and once its batch was answered: its value (a claim's result, or
    whether a settle was recorded) or its error. The writer process's answers are final;
    one a worker thread wrote (see ../writes.py) also names what to prune once flushed
    (None: nothing awaits a flush) and the flush to wait for.

    A herd makes thousands of these, each alive until its batch is answered: one object, no
    closure and no tuple per call, so that fewer outlive the collector's young generations.
    """

    __slots__ = (
        *("done", "error", "flush", "gave_up", "in_flight", "item", "later", "task", "value"),
        "owner",
    )

    def __init__(self, item: Any, owner: WriterProcess | None = None) -> None:
        self.item = item
        self.owner = owner  # the writer process its batch goes to
        self.task: trio.lowlevel.Task | None = None
        self.in_flight = self.gave_up = self.done = False
        self.value: Any = None
        self.later: Sequence[str] | None = None
        self.flush: Any = None
        self.error: Exception | None = None

    def __call__(self, _: Any) -> trio.lowlevel.Abort:
        """The abort of a parked caller: before its batch is sent it leaves it (process.py's
        ``_seal`` skips it); after, it leaves all the same, and the writer process is given up
        (see process.py's module doc)."""
        self.gave_up = True
        self.task = None
        if self.in_flight and self.owner is not None:
            self.owner.give_up_soon()
        return _ABORT_SUCCEEDED

    def fail(self, error: Exception) -> None:
        self.error = error
        self.done = True
        self.wake()

    def wake(self) -> None:
        task, self.task = self.task, None
        if task is not None:
            trio.lowlevel.reschedule(task)
