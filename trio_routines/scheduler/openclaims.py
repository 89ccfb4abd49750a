"""Every open claim whose holder is gone is recorded ``interrupted`` -- not only the newest.

The boot reconciles each routine's newest claim, and the watch the newest claims of members
found dead. A claim left open further back -- a settle given up on a read-only disk, a claim
written by a writer process that died before it answered, a turn cut off while later slots
of its routine went on -- would stay unsettled for good (``unreported`` in history). So a
started scheduler (as its loops start: housekeeping that no slot's decision waits for) and
every watch also ask the store for open claims (``Store.open_claims``: a bounded piece at a
time -- the PostgreSQL store through its index of open claims, the state directory by a walk
over its claims, see ``stores/directory/openscan.py``), and settle ``interrupted`` each one
whose hold is free. A claim whose hold is held is running (or settling) somewhere, and is
left to its holder. Only claims that name their replica are considered: they were made by a
version that holds them while they run, so a free hold means a dead holder.
"""

from __future__ import annotations

import logging
from datetime import datetime

import trio

from ..errors import StateFault
from ..history import ended, failing_streak
from ..instants import format_iso
from ..metrics import Metrics
from ..records import Fire, Outcome
from ..store import Store
from ..text import error_text
from .calls import StoreCalls
from .membership import Membership
from .state import Runtime, log
from .streaks import Streaks

#: Claims (a store's unit: a claim read, a directory listed) looked at as the loops start and
#: by each watch, beyond the newest ones.
BOOT_BUDGET = 4096
WATCH_BUDGET = 1024
OPEN_INTERRUPTED = "never settled: its replica stopped mid-turn or could not record the outcome"
#: What a dead claim's line says when another record of it landed first (another replica's,
#: or this one's other look: the walk of the open claims beside a sweep of a dead member).
SETTLED_MEANWHILE = "settled meanwhile"
SETTLED_ELSEWHERE = f"{SETTLED_MEANWHILE} (its history says how)"
#: ... and when the claim could not be read back: said as recorded, counted by no one here.
NOT_READ_BACK = "recorded as interrupted, unless another record landed first (not read back)"


def found_by(reason: str, replica: str) -> str:
    """``reason`` as ``replica`` records a dead claim: naming the replica that wrote it.

    Several replicas may find one claim dead at once (their boots, their sweeps, their walks
    of the open claims). A settle ``if_unsettled`` writes only the first, and answers True to
    every one of them; each replica reads the record back and counts and says "recorded"
    only if the words are its own (:func:`read_back`)."""
    return error_text(f"{reason}; recorded by replica {replica}")  # as the store keeps it


#: How long a dead claim the store would not record interrupted (a hard link refused, a
#: read-only disk) is left before a watch of this process tries it again, in seconds: its
#: lines are said once an hour at most, not at every watch.
RETRY_UNRECORDED = 3600.0
#: Such claims remembered at most (the oldest forgotten: tried again at the next watch).
UNRECORDED_KEPT = 4096
#: What a dead claim's line ends with when the store did not record it (its own line says
#: why): left open, for a later watch (the boot's, a dead member's sweep), or for an hour.
LEFT_OPEN = "not recorded as interrupted (the store's line says why; left open)"
NOT_RECORDED = "not recorded as interrupted (the store's line says why; tried again in an hour)"

#: Why an open claim naming this replica, which it does not hold, is recorded interrupted.
OURS_UNSETTLED = (
    "this replica holds no turn of it (its outcome was never recorded, or an earlier process "
    "under this id made it)"
)


class OpenClaims:
    """Settles the dead of the open claims the store finds; collaborators: the ``store``,
    the :class:`Runtime` (the loaded routines), the :class:`StoreCalls` (bounds, settles)
    and the :class:`Membership` (whose claims live)."""

    def __init__(
        self, store: Store, runtime: Runtime, calls: StoreCalls, membership: Membership
    ) -> None:
        self._store = store
        self._runtime = runtime
        self._calls = calls
        self._membership = membership
        #: The dead claims the store would not record, and when (Trio's clock) they failed.
        self._unrecorded: dict[tuple[str, datetime], float] = {}
        #: Held by the walk under way (the loops' first, or a watch's).
        self._walking = trio.Lock()

    async def reconcile(self, budget: int) -> None:
        """Settle ``interrupted`` the dead ones of the next open claims the store finds.

        One walk at a time: a watch that comes while another walk is under way (the first,
        which may outlast a poll interval on a slow store) passes, rather than settle the
        same claims in the same words (each would read the record back as its own) or hold
        the watch's beat back. Never raises: a store that cannot answer now is asked again at
        the next watch (logged as a warning), and a store's bug here is an ERROR, not the end
        of the boot or of the watch that asked (this is housekeeping)."""
        if self._walking.locked():
            return
        async with self._walking:
            await self._walk(budget)

    async def _walk(self, budget: int) -> None:
        routines = self._runtime.routines
        read = getattr(self._store, "open_claims", None)
        if read is None or not routines:
            return
        try:
            found: list[tuple[str, Fire]] = []
            with self._calls.bounded():
                found = await read(list(routines), budget)
            if not found:
                return
            alive = await self._membership.claims_alive(found)
            # A store that answers for fewer or more claims than it was asked about: its bug.
            gone = [claim for claim, live in zip(found, alive, strict=True) if not live]
        except StateFault as exc:
            log.warning("the open claims could not be checked (tried again later): %s", exc)
            return
        except Exception as exc:
            log.error("the open claims could not be checked: %s: %s", type(exc).__name__, exc)
            return
        now = trio.current_time()
        dead = [
            (name, fire)
            for name, fire in await self._still_open(gone)
            if now >= self._unrecorded.get((name, fire.slot), -RETRY_UNRECORDED) + RETRY_UNRECORDED
        ]
        async with trio.open_nursery() as nursery:  # settles batch together
            for name, fire in dead:
                nursery.start_soon(self._interrupted, name, fire)

    async def _still_open(self, dead: list[tuple[str, Fire]]) -> list[tuple[str, Fire]]:
        """Those of ``dead`` still open when read again. The open claims were read before
        their holds: a holder may have settled its claim and then left in between (a stop's
        last settle, then its leave), and is no dead holder. A routine whose history cannot
        be read now keeps its claims for the next watch."""
        kept: list[tuple[str, Fire]] = []
        for name in dict.fromkeys(name for name, _ in dead):
            try:
                fires = await self._calls.history(name)
            except StateFault as exc:
                log.warning(
                    "the open claims of %s could not be checked (tried again later): %s", name, exc
                )
                continue
            except Exception as exc:  # a store's bug: housekeeping, never the end of a boot
                log.error(
                    "the open claims of %s could not be checked: %s: %s",
                    name,
                    type(exc).__name__,
                    exc,
                )
                continue
            settled = {fire.slot for fire in fires if fire.outcome is not None}
            kept += [(n, fire) for n, fire in dead if n == name and fire.slot not in settled]
        return kept

    async def _interrupted(self, name: str, fire: Fire) -> None:
        """Record ``fire`` interrupted, then say so; one the store did not take is said so,
        and left for :data:`RETRY_UNRECORDED`."""
        reason = found_by(OPEN_INTERRUPTED, self._runtime.replica)
        try:
            recorded = await self._calls.settle_once(
                name, fire.slot, Outcome.INTERRUPTED, None, if_unsettled=True, error=reason
            )
        except Exception as exc:  # a store's bug (settle never raises): a failed settle's WARN
            log.warning(
                "%s: slot %s could not be recorded interrupted: %s: %s",
                name,
                format_iso(fire.slot),
                type(exc).__name__,
                exc,
            )
            recorded = False
        # Ours and not held: a turn of this process whose settle the store never took (its
        # outcome was logged then), or of an earlier process under our id.
        whose = "its holder is gone" if fire.replica != self._runtime.replica else OURS_UNSETTLED
        mine = await read_back(self._calls, name, fire.slot, reason) if recorded else None
        log.log(
            logging.INFO if recorded and mine is False else logging.WARNING,
            "%s: the fire of slot %s claimed at %s by replica %s never finished and %s; %s",
            name,
            format_iso(fire.slot),
            format_iso(fire.fired_at),
            fire.replica,
            whose,
            said(recorded, mine, NOT_RECORDED),
        )
        if not recorded:
            self._unrecorded[name, fire.slot] = trio.current_time()
            if len(self._unrecorded) > UNRECORDED_KEPT:
                del self._unrecorded[next(iter(self._unrecorded))]
        elif mine:
            # Counted, not in the streak: a claim behind newer ones is no run in a row.
            self._runtime.metrics.found_interrupted(name)


def said(recorded: bool | None, mine: bool | None, not_recorded: str) -> str:
    """How a dead claim's line ends: recorded (``mine``: the record read back is this
    process's; None: it could not be read), settled meanwhile, or ``not_recorded``."""
    if not recorded:
        return not_recorded
    if mine is None:
        return NOT_READ_BACK
    return "recorded as interrupted" if mine else SETTLED_ELSEWHERE


async def read_back(calls: StoreCalls, name: str, slot: datetime, error: str) -> bool | None:
    """Whether the store holds ``name``'s claim at ``slot`` as the interrupted record written
    with ``error`` (:func:`found_by`): this process's write landed. None when it cannot be
    read now, or is gone; a store's bug here is an ERROR, and None (housekeeping)."""
    try:
        record, _ = await _record_of(calls, name, slot)
    except StateFault:
        return None
    except Exception as exc:
        log.error(
            "%s: slot %s could not be read back: %s: %s",
            name,
            format_iso(slot),
            type(exc).__name__,
            exc,
        )
        return None
    return None if record is None else _recorded(record, error)


async def _record_of(
    calls: StoreCalls, name: str, slot: datetime
) -> tuple[Fire | None, list[Fire] | None]:
    """``name``'s claim at ``slot`` as the store holds it now: read as the newest claim, one
    read, or else from the history, which is then given too. Raises StateFault."""
    newest = await calls.latest_fire(name)
    if newest is not None and newest.slot == slot:
        return newest, None
    fires = await calls.history(name)
    mine = [fire for fire in fires if fire.slot == slot]
    return (mine[-1] if mine else None), fires


async def count_interrupted(
    calls: StoreCalls,
    metrics: Metrics,
    streaks: Streaks,
    name: str,
    slot: datetime,
    error: str,
    *,
    arm: bool,
) -> tuple[bool | None, Fire | None]:
    """Count the claim of ``name`` at ``slot`` recorded interrupted with ``error`` by this
    process: only if the store holds that very record (a settle ``if_unsettled`` of a claim
    settled meanwhile, by another replica that found it dead too, writes nothing and answers
    True all the same). The newest claim's record is one read; its failure streak and last
    success are then one more failure until its history is read (:class:`Streaks`, after the
    boot). An older claim's is read from the history, streak and all. With ``arm``, the
    routine's series made (:meth:`Metrics.armed`) as a boot makes a cron routine's.

    True when counted, False when the store holds another record (not counted), None when
    it could not be read or is gone (not counted); with the record read, when there is one."""
    try:
        record, fires = await _record_of(calls, name, slot)
    except StateFault:
        return None, None
    if record is None:  # gone before it was read (pruned): whose landed is unknown
        return None, None
    if not _recorded(record, error):
        return False, record
    if fires is None:
        metrics.found_interrupted(name, (metrics.failing.get(name, 0) + 1, None))
        if arm:
            metrics.armed(name, slot)
        streaks.later(name, armed=arm, newest=slot)
        return True, record
    failing, success = failing_streak(fires)
    metrics.found_interrupted(name, (failing, None if success is None else ended(success)))
    if arm:  # with no success known, the last success reads the oldest instant known
        metrics.armed(name, fires[0].slot)
    return True, record


def _recorded(fire: Fire, error: str) -> bool:
    """Whether ``fire`` is the interrupted record written with ``error``."""
    return fire.outcome is Outcome.INTERRUPTED and fire.error == error
