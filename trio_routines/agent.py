"""The agent protocol: what the runtime fires turns into.

An agent is anything with ``invoke(session, text)`` returning an async iterator of events:
text deltas, then one terminal event, :class:`Completed` or :class:`Failed`. The runtime does
not keep the reply (the agent's own session is where it lives); it only needs the outcome.
Any number of :class:`Usage` events may come before the terminal one: what the turn spent.

An iterator that raises is a failed turn. A :class:`Failed` event whose code is
:data:`SESSION_BUSY` means the turn never started because its session already had one in
flight: the one failure that is safe to retry, and not an error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

import attrs

SESSION_BUSY = "session_busy"


@attrs.frozen
class TextDelta:
    """A piece of the reply."""

    text: str


@attrs.frozen
class Completed:
    """The turn finished."""


@attrs.frozen
class Failed:
    """The turn did not finish; ``details`` says why, ``code`` classifies it."""

    details: str
    code: str | None = None

    @property
    def busy(self) -> bool:
        """Whether the session already had a turn in flight (the turn never started)."""
        return self.code == SESSION_BUSY


@attrs.frozen
class Usage:
    """What a turn spent so far: tokens in and out, and a cost in ``currency``; all optional.

    A turn may yield several: they add up (tokens to tokens, costs of one currency to each
    other; see :mod:`trio_routines.usage` for the rule and the checks). Nothing is checked
    here, so an agent cannot fail its own turn by reporting a bad value: the runtime drops a
    bad field with a warning and keeps the rest. ``currency`` is a code such as ``USD``
    (``USD`` when a cost comes without one).
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = None
    currency: str | None = None


Event = TextDelta | Usage | Completed | Failed


@runtime_checkable
class Agent(Protocol):
    """What the runtime fires into: anything with this one method.

    ``invoke`` returns an async iterator of events: any number of :class:`TextDelta` (and of
    :class:`Usage`, what the turn spent), then one
    :class:`Completed` or :class:`Failed` (a ``Failed`` with the busy code means the session
    already has a turn in flight). Raising from the iterator fails the turn (an exception, or
    ``SystemExit``: a library's ``sys.exit()`` ends the turn, not the scheduler; so would a
    host's signal handler calling it while the agent's code runs: a host stops the scheduler
    with ``stop`` or Trio's signal receiver); the runtime cancels it on a routine's timeout
    or at the end of a stop's grace, and closes it.

    The runtime reads the stream to its end and is lenient about its shape: a stream that
    ends without ``Completed`` or ``Failed`` completes; events after the first of them are
    still read (text after ``Completed`` goes to a kept output; the last ``Failed`` wins, and
    one with empty details is no failure); anything that is not an event is passed over,
    logged at DEBUG.
    """

    def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        """Run one turn of ``session`` with the prompt ``text``."""
        ...
