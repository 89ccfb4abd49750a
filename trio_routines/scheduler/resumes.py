"""Whether a pause held a slot that is fired after the pause was resumed (by any replica or
command): a replica late to the slot, or a caller's fire of it, finds the routine no longer
paused, yet the slot was the pause's on the replicas that read in time."""

from __future__ import annotations

from datetime import datetime, timedelta

from ..errors import StateFault
from ..instants import format_iso
from .calls import StoreCalls
from .gaps import GapRecording
from .state import CLOCKS_APART, RESUME_LAG, PausedRead, Runtime, log

#: How long after a slot a read must begin to look for a replica's record of the slot as
#: paused: one that found it paused writes that record after its own read, a few
#: milliseconds on, so a read begun sooner (a herd's, at the slot) could not see it.
RECORDED_AFTER = timedelta(milliseconds=100)


class PauseHeld:
    """Asks the latest resume, and the replicas' records, whether a pause held a slot; owns
    nothing.

    Collaborators: the :class:`Runtime` (the wall clock), the :class:`StoreCalls` (the
    latest resume and when its pause began) and the :class:`GapRecording` (a slot recorded
    paused).
    """

    def __init__(self, runtime: Runtime, calls: StoreCalls, gaps: GapRecording) -> None:
        self._runtime = runtime
        self._calls = calls
        self._gaps = gaps

    async def held(
        self, name: str, slot: datetime, read: PausedRead, *, external: bool = False
    ) -> datetime | None:
        """The instant up to which a pause of ``name`` held ``slot`` on the replicas that read
        in time though none holds it now (resumed since, by any replica or command), or None
        when none held it: such a slot stays paused, never run, and a loop's slots up to that
        instant were the pause's. (A slot the boot planned knew the resumes already.)

        The latest resume says so when it came after the slot, unless the pause it ended
        began after the slot too, or its instant is ahead of our clock by more than clocks
        differ (it tells nothing then). A resume stamped just before the slot may have landed
        after it (stamped, then written: :data:`RESUME_LAG`), while the replicas that read in
        time still saw the pause: whether one recorded the slot paused says. A read begun
        less than :data:`RESUME_LAG` after the slot brought the resumes it needs; a later
        fire asks the store.

        A caller's slot (``external``: a hand fire, an external clock's late delivery) may lie
        behind pauses before the latest: one a replica recorded paused is held too (its
        instant, the slot's, is the caller's: the loop is told of its own slots only)."""
        try:
            if read.started - slot < RESUME_LAG:
                resumed, began = read.resumed.get(name) or (None, None)
            elif external:
                resumed, began = await self._latest_resume(name, slot)
            else:
                resumed = await self._calls.resumed_at(name)
                near = resumed is not None and resumed > slot - RESUME_LAG
                began = await self._calls.resumed_pause_since(name) if near else None
            if resumed is None or resumed > self._runtime.now() + CLOCKS_APART:
                return None
            if external:
                if resumed <= slot - RESUME_LAG:  # resumed well before it: no pause since
                    return None
                if resumed > slot and began is not None and began <= slot:
                    return slot  # the latest pause held it
                # An earlier pause, one whose start is not known (an older version's), or a
                # resume stamped close before the slot: the replicas' records of it say.
                return slot if await self._gaps.recorded_paused(name, slot) else None
            if began is not None and began > slot:  # the pause came after the slot
                return None
            if resumed <= slot and not (
                resumed >= slot - RESUME_LAG
                # A read begun as the slot came cannot see a record made after it (a herd's,
                # right after a resume, would read every routine's gaps for nothing).
                and read.started - slot >= RECORDED_AFTER
                and await self._gaps.recorded_paused(name, slot)
            ):
                return None
            return max(resumed, slot)
        except StateFault as exc:
            raise StateFault(
                f"could not claim slot {format_iso(slot)} of {name!r}: {exc}"
            ) from None

    async def _latest_resume(
        self, name: str, slot: datetime
    ) -> tuple[datetime | None, datetime | None]:
        """A caller's fire's view of ``name``'s latest resume and when the pause it ended
        began: (None, None) when the store cannot say (a resume record that cannot be read,
        passed over as the paused reads pass over it, with a warning), so that damage there
        holds back no caller's fire of a routine perhaps never paused."""
        try:
            resumed = await self._calls.resumed_at(name)
            near = resumed is not None and resumed > slot - RESUME_LAG
            return resumed, (await self._calls.resumed_pause_since(name) if near else None)
        except StateFault as exc:
            log.warning(
                "%s: slot %s: its latest resume cannot be read (%s) — taken as no pause held it",
                name,
                format_iso(slot),
                exc,
            )
            return None, None
