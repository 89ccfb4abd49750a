"""A wall clock for tests that moves with Trio's (mock) clock, plus jumps of its own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import trio


class WallClock:
    """A wall clock that moves with Trio's clock, plus jumps of its own.

    Call it (inside ``trio.run``) for the current wall time: ``start`` plus however far Trio's
    clock has moved since the first call, plus every :meth:`jump`. With
    ``trio.testing.MockClock`` that makes virtual hours pass in microseconds, and lets a test
    step the wall clock forward or backward the way an NTP step or a VM restore would.
    """

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("start must be an aware datetime")
        self.start = start.astimezone(UTC)
        self._base: float | None = None
        self._offset = timedelta()

    def __call__(self) -> datetime:
        now = trio.current_time()
        if self._base is None:
            self._base = now
        return self.start + timedelta(seconds=now - self._base) + self._offset

    def jump(self, delta: timedelta) -> None:
        """Move the wall clock by ``delta`` (negative: backwards) without Trio's clock."""
        self._offset += delta

    def set(self, when: datetime) -> None:
        """Make the wall clock read ``when`` now (an aware datetime, as for the start)."""
        if when.tzinfo is None:
            raise ValueError("when must be an aware datetime")
        self.jump(when.astimezone(UTC) - self())
