"""Clock watch: notice the wall clock jumping against Trio's clock, and say so once."""

from __future__ import annotations

import trio

from .state import SchedulerState, log


class ClockWatch(SchedulerState):
    def _note_offset(self) -> None:
        """Compare wall and Trio clocks; log a jump once, whichever loop notices it first."""
        offset = self.now().timestamp() - trio.current_time()
        if self._offset is None:
            self._offset = offset
            return
        jump = offset - self._offset
        if abs(jump) > self.jump_threshold:
            self._offset = offset
            self._jumps += 1
            direction = "forward" if jump > 0 else "backward"
            log.warning(
                "the wall clock jumped %s by %s — slots are re-read from the new time",
                direction,
                duration(abs(jump)),
            )
            self._wake_sleepers()

    def _wake_sleepers(self) -> None:
        """Wake every sleeping cron loop to re-read the wall clock and its routine."""
        self._sleepers.wake_all()


def duration(seconds: float) -> str:
    seconds = round(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    if seconds or not parts:
        parts.append(f"{seconds}s")
    return " ".join(parts)
