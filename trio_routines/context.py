"""What the runtime knows about the turn in progress, for agents that want it.

An agent is asked ``invoke(session, text)`` and nothing more; the slot a routine fires for is
not part of that protocol. The runtime sets :data:`current_slot` around a fire's turn instead,
and an agent that cares (the ``cmd:`` agent exports it as ``TRIO_ROUTINES_SLOT``) reads it.
A context variable follows the task that iterates the agent's events, so it needs no plumbing
through the layers in between, and concurrent fires in sibling tasks never see each other's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime

#: The slot whose turn is running in this task, or ``None`` outside a fire (``run``, wake-ups).
current_slot: ContextVar[datetime | None] = ContextVar("trio_routines_current_slot", default=None)


@contextmanager
def firing_slot(slot: datetime | None) -> Iterator[None]:
    """Make ``slot`` the :data:`current_slot` of this task for the duration of the block."""
    token = current_slot.set(slot)
    try:
        yield
    finally:
        current_slot.reset(token)
