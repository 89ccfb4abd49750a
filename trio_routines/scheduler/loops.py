"""Cron loops: one task per routine, sleeping towards its next slot and firing it.

A loop ends when the scheduler stops, when its routine is removed or replaced by
:meth:`Scheduler.update_routines` (``runtime.routines[name]`` is no longer the very object it
runs; a fire in flight, or of a slot that came while it slept, finishes and settles first),
or when its cron has no next instant.
An unexpected exception restarts it (see :mod:`.restarts`).
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta

import trio

from ..claims import arm_from
from ..cron import next_run, parse_cron
from ..errors import StateFault
from ..gaps import is_late, old_reason, passed_over
from ..records import Fire, Gap, GapReason
from ..routines import Routine
from .arming import Arming
from .calls import StoreCalls
from .clock import ClockWatch
from .fire import FirePath
from .gaps import GapRecording
from .restarts import RESTART_FIRST, Restarts
from .sleepers import Sleepers
from .state import FireResult, NotYetDue, PausedRead, Runtime, log
from .unanswered import note_unanswered, record_unanswered

_MS = timedelta(milliseconds=1)
_MINUTE = timedelta(minutes=1)


class CronLoops:
    """One loop per cron routine; owns which fire each loop has under way.

    Collaborators: the :class:`Runtime` (routines, wall clock, stop), the :class:`FirePath`
    (each slot's fire), the :class:`StoreCalls` (a re-arm's read), the :class:`GapRecording`
    (what a loop passed over), the :class:`ClockWatch` (the offset, after every sleep), the
    :class:`Restarts`, the :class:`Sleepers` (where loops sleep) and the :class:`Arming`
    (each loop's next slot).
    """

    def __init__(
        self,
        runtime: Runtime,
        fire: FirePath,
        calls: StoreCalls,
        gaps: GapRecording,
        clock: ClockWatch,
        restarts: Restarts,
        sleepers: Sleepers,
        arming: Arming,
        *,
        max_wait: float,
    ) -> None:
        self._runtime = runtime
        self._fire = fire
        self._calls = calls
        self._gaps = gaps
        self._clock = clock
        self._restarts = restarts
        self._sleepers = sleepers
        self._arming = arming
        self._max_wait = max_wait
        #: A loop's fire under way, by routine: its marker.
        self.firing: dict[str, object] = {}
        self._waiters: dict[object, trio.Event] = {}  # marker -> set once that fire settled

    async def loop(
        self,
        routine: Routine,
        due: datetime | None,
        *,
        rearm: bool,
        passed: GapReason | None = None,
    ) -> None:
        """Fire ``routine`` at ``due`` and every slot after it; with ``rearm``, plan ``due``,
        the slots passed over since the newest claim recorded as ``passed`` (a changed
        routine's: those its previous version's turn overlapped) when it is given.

        Everything lives in this one frame, the restart policy included: at 10,000 routines
        every sleeping frame is memory.
        """
        assert routine.cron is not None
        name = routine.name
        # Parsed once (a fire's next slot skips the checks and the cache's lookup); the
        # routine's cron, zone and name are those of this very version, checked when loaded.
        schedule = parse_cron(routine.cron, routine.tz, name)
        backoff = RESTART_FIRST
        paused_tail: datetime | None = None  # the last slot of the paused gap being extended
        # Slots the store did not answer, not recorded yet: a tuple, so that a loop that has
        # none (nearly every one) keeps the one empty tuple, not a list of its own, asleep.
        unanswered: tuple[Gap, ...] = ()
        held: datetime | None = None  # the resume of a pause that held the slot just tried
        while True:
            try:
                if rearm:
                    previous = self.firing.get(name)
                    if previous is not None:  # the version this one replaces is still settling
                        await self._settled(previous)
                    del previous
                    due = await self._rearm_due(routine, passed, due)
                    rearm, passed = False, None
                    if not self._current(routine):
                        return
                    self._arming.set_due(routine, due)
                now = self._runtime.now()
                while due is not None:
                    # Sleep towards the slot, re-reading the wall clock after every wake: one
                    # read serves the wake's jump check, the sleep's end and the fire, and the
                    # read that planned the slot serves the first sleep's length.
                    read: PausedRead | None = None  # the timer's read for this wake, if any
                    came = False  # the slot came while this loop slept
                    while now < due:
                        remaining = (due - now).total_seconds()
                        at_slot = remaining <= self._max_wait
                        wait = self._sleepers.sleep_until(
                            trio.current_time() + (remaining if at_slot else self._max_wait),
                            slot=name if at_slot else None,
                        )
                        del now, remaining  # read again on waking: not kept asleep
                        read = await wait
                        del wait
                        now = self._runtime.now()
                        self._clock.note_offset(now)
                        came = now >= due
                        if not (came or self._current(routine)):
                            return
                    # A slot that came while the loop slept fires in the version it came in,
                    # even if a change woke the loop first (the timer holds a herd at its slot
                    # while it reads the paused routines): as a fire under way when the change
                    # came, it is not lost, and the new version arms after it.
                    if self._runtime.stopping.value or not (came or self._current(routine)):
                        return
                    if is_late(due, now, routine.catchup):  # a loop that woke far too late
                        # Less the slots other replicas fired meanwhile (a stopped process).
                        after = await self._gaps.after_claims(name, due - _MS)
                        reason = old_reason(routine.catchup)
                        await self._gaps.record_gap(
                            name, passed_over(routine.cron, routine.tz, name, after, now, reason)
                        )
                        del after, reason
                        paused_tail = None
                        now = self._runtime.now()  # the gap's write took time
                        due = schedule.next_after(now)
                        self._arming.set_due(routine, due)
                        continue
                    # A bare marker: at 10,000 fires at once, an Event each is collector work;
                    # the one a replacement waits on is made only then (see _settled).
                    firing = self.firing[name] = object()
                    early = False
                    result: FireResult | None = None
                    try:
                        # Shielded within: a stop lets it settle. ``now`` serves as the wall
                        # clock only with ``read``, which only a wake sets, right before ``now``
                        # is read: nothing awaited since. A late fire's start, what its turn
                        # stands for until then (``after_slot`` counts its overlap from it).
                        late = now if now - due >= _MINUTE else None
                        result = await self._fire.fire_slot(
                            routine, due, read=read, now=now, late=late
                        )
                    except NotYetDue:
                        early = True  # the clock went back meanwhile: sleep again
                    except StateFault as exc:
                        log.error(
                            "%s: fire failed (skipping this run, schedule stays armed): %s",
                            name,
                            exc,
                        )
                        unanswered = note_unanswered(routine, due, unanswered)
                    finally:
                        if self.firing.get(name) is firing:  # not a newer version's entry
                            del self.firing[name]
                        waiter = self._waiters.pop(firing, None)
                        if waiter is not None:
                            waiter.set()
                        del firing, waiter
                    if not self._current(routine):
                        if result is not None and routine.name not in self._runtime.routines:
                            # Removed during the fire: it stopped once the fire settled, and
                            # what its turn passed over is still its own to record (a changed
                            # one's successor records it: see Reload.update).
                            await self._gaps.after_slot(routine, due, result, now, paused_tail)
                        return
                    if early:
                        now = self._runtime.now()
                        continue
                    ended: datetime | None = None  # set when nothing passed during the fire
                    following: datetime | None = None
                    if result is not None:  # the store answered
                        # A claimed slot's settle's end: the wall clock now, unless something
                        # is awaited.
                        ended = result.settled_at if result.claimed else None
                        if unanswered:
                            unanswered = await record_unanswered(
                                self._gaps, self._calls, routine, unanswered
                            )
                            ended = None
                        if result.claimed:
                            # The common end: the slot after ``due`` had not come when the fire
                            # began (``now``) nor has it yet, so none was passed over (all
                            # after_slot looks for) and it is the next.
                            following = schedule.next_after(due)
                            if ended is None:
                                ended = self._runtime.now()
                            if not (
                                due <= ended
                                and (following is None or (following > ended and following > now))
                            ):
                                ended = None
                        # Held by a pause resumed since: the slots up to its resume were the
                        # pause's, those after it the routine's again (a late one caught up).
                        held = self._fire.held_until.pop(name, None)
                        if ended is None:
                            paused_tail = await self._gaps.after_slot(
                                routine, due, result, now, paused_tail, held
                            )
                        else:
                            paused_tail = None  # as after_slot's answer for a claimed slot
                        result = None  # not kept by the sleeping loop: one object per routine
                    backoff = RESTART_FIRST  # a slot went through: a later fault starts over
                    if ended is not None:
                        now, due = ended, following
                    else:
                        now = self._runtime.now()
                        due = schedule.next_after(now if held is None else min(held, now))
                    held = None
                    ended = following = None  # only ``now`` and ``due`` go on, to the sleep
                    self._arming.set_due(routine, due)
                return
            except Exception as exc:
                if self._runtime.stopping.value or not self._current(routine):
                    return
                backoff = await self._restarts.restart_after(f"cron:{name}", name, exc, backoff)
                # From the slot it was at: those that pass meanwhile are the fault's (unless a
                # re-arm's own reason was still to be recorded: a fault of the re-arm itself).
                rearm, passed = True, passed or GapReason.STORE

    def start(
        self,
        nursery: trio.Nursery,
        routine: Routine,
        due: datetime | None,
        *,
        rearm: bool,
        passed: GapReason | None = None,
    ) -> None:
        """Start :meth:`loop` in ``nursery``, named as Trio would name it, with one string
        shared by every loop: Trio would format that name anew for each task, and at 10,000
        sleeping routines every object a loop keeps is memory."""
        loop = functools.partial(self.loop, routine, due, rearm=rearm, passed=passed)
        nursery.start_soon(loop, name=LOOP_NAME)

    async def _settled(self, firing: object) -> None:
        """Return once the fire marked ``firing`` has settled."""
        waiter = self._waiters.get(firing)
        if waiter is None:
            waiter = self._waiters[firing] = trio.Event()
        await waiter.wait()

    def _current(self, routine: Routine) -> bool:
        """Whether ``routine`` is still the loaded version of its name (not removed, replaced)."""
        return self._runtime.routines.get(routine.name) is routine

    async def _rearm_due(
        self, routine: Routine, passed: GapReason | None, at: datetime | None
    ) -> datetime | None:
        """The next slot after both the newest claim and now: no double fire, no back-fire.
        With ``passed``, the slots from the newest claim (or from ``at``, the slot the loop
        was at, if it is later) to now that no claim nor gap accounts for are recorded as
        ``passed``: every slot is a claim or inside a gap."""
        assert routine.cron is not None
        name = routine.name
        newest = await self._calls.latest_fire(name)
        now = self._runtime.now()
        self._arming.note_future_claim(name, newest, now)
        if passed is not None and self._current(routine):  # else a newer version's to do
            await self._account(routine, newest, at, now, passed)
        return next_run(routine.cron, routine.tz, arm_from(newest, now), name)

    async def _account(
        self,
        routine: Routine,
        newest: Fire | None,
        at: datetime | None,
        now: datetime,
        reason: GapReason,
    ) -> None:
        assert routine.cron is not None
        marks = [] if newest is None else [newest.slot]
        if at is not None:
            marks.append(at - _MS)  # the slot the loop was at is not accounted for
        if not marks:
            return  # a version that never fired, the loop at no slot: nothing was passed
        try:
            gap_end = await self._gaps.newest_gap_end(routine.name)
        except StateFault:
            gap_end = None  # written at worst twice: the store keeps one of equal gaps
        if gap_end is not None:
            marks.append(gap_end)
        gap = passed_over(routine.cron, routine.tz, routine.name, max(marks), now, reason)
        await self._gaps.record_gap(routine.name, gap)


#: The name of every cron loop's task (see :meth:`CronLoops.start`).
LOOP_NAME = f"{CronLoops.loop.__module__}.{CronLoops.loop.__qualname__}"
