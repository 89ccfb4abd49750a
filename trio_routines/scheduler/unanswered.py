"""Slots the store did not answer: kept by their loop, recorded as ``store`` gaps later.

A claim that fails on a store fault (:class:`~trio_routines.errors.StateFault`: the paused
read or the claim itself did not answer within the bound) fires nothing, and nothing can be
written then. The loop keeps the slot in its own frame -- consecutive slots of the cron as one
run, at most :data:`KEEP_RUNS` runs -- and, after the next slot the store answered (claimed,
refused, paused), writes each run as a ``store`` gap, oldest first; a run the store still
cannot take stays for the next time.

A claim whose answer was lost may have been made all the same (the store wrote it after we
gave up). The store therefore records a ``store`` gap only when no claim exists from its first
slot to its last, checked in the same step as the write (store.py). When it refuses a run of
several slots, the loop reads the routine's history once and records the run's slots that
have no claim, in runs of their own: a slot is a claim or inside a gap, never both (short of
a replica claiming one of them in the instant between the check and the write: a gap is a
report, never a decision). A loop that restarts, or a process that stops, before the store
answers again forgets its runs: they were logged as errors when they failed.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import attrs

from ..cron import next_run
from ..errors import StateFault
from ..gaps import COUNT_LIMIT
from ..records import Gap, GapReason
from ..routines import Routine
from .calls import StoreCalls
from .gaps import GapRecording, gap_words
from .state import log

#: Runs of unanswered slots a loop keeps; beyond, the oldest is forgotten (logged already).
KEEP_RUNS = 64
_MS = timedelta(milliseconds=1)


def note_unanswered(routine: Routine, slot: datetime, runs: tuple[Gap, ...]) -> tuple[Gap, ...]:
    """``runs`` with ``slot`` added: to the newest run when it is that run's next slot."""
    assert routine.cron is not None
    newest = runs[-1] if runs else None
    if newest is not None and next_run(routine.cron, routine.tz, newest.last, routine.name) == slot:
        return (*runs[:-1], attrs.evolve(newest, last=slot, count=newest.count + 1))
    return (*runs, Gap(slot, slot, 1, GapReason.STORE))[-KEEP_RUNS:]


async def record_unanswered(
    gaps: GapRecording, calls: StoreCalls, routine: Routine, runs: tuple[Gap, ...]
) -> tuple[Gap, ...]:
    """Record ``runs`` (the store answers again); those it still cannot take stay."""
    for index, run in enumerate(runs):
        try:
            if not await gaps.write_gap(routine.name, run) and run.count > 1:
                await _record_unclaimed(gaps, calls, routine, run)
        except StateFault as exc:
            log.warning(
                "%s: %s the store did not answer are not recorded yet: %s",
                routine.name,
                gap_words(run),
                exc,
            )
            return runs[index:]
    return ()


async def _record_unclaimed(
    gaps: GapRecording, calls: StoreCalls, routine: Routine, run: Gap
) -> None:
    """The store refused ``run``: record its slots that have no claim, if any."""
    assert routine.cron is not None
    fires = await calls.history(routine.name)
    claimed = {fire.slot for fire in fires if run.first <= fire.slot <= run.last}
    if not claimed:  # a gap recorded already covers it (another replica's)
        return
    pieces: tuple[Gap, ...] = ()
    slot: datetime | None = run.first
    for _ in range(COUNT_LIMIT):
        if slot is None or slot > run.last:
            break
        if slot not in claimed:
            pieces = note_unanswered(routine, slot, pieces)
        slot = next_run(routine.cron, routine.tz, slot, routine.name)
    for piece in pieces:
        await gaps.write_gap(routine.name, piece)
