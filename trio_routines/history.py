"""A routine's history: its claims and its gaps, read together and shown in slot order.

``history`` (text and ``--json``) and ``GET /routines/{name}/history`` show both, so a slot
that never ran is never silent: it is a claim with its outcome, or inside a gap with its
reason (:mod:`trio_routines.gaps`). A store without gaps (one of yours, from before them)
shows claims only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta

from .errors import StateFault
from .instants import format_iso
from .ledger import Kind, Spent, budget_spent, fires_spent
from .records import Fire, Gap, GapReason, Outcome
from .store import GapRecords, Store, UsageRecords

#: The span of every "spent in the last 24 h" figure shown: ``status``'s SPENT 24H and its
#: ``spent24h``, the page, ``GET /routines``' ``spent24h``; and each listed session's
#: ``sessionSpent24h`` (``status``/``list`` and ``GET /wakeups``).
SPENT_SHOWN = timedelta(hours=24)

#: What each reason means, in a history line or a log line.
GAP_WHY = {
    GapReason.OVERLAP: "the previous turn was still running",
    GapReason.DOWN: "no scheduler ran, and nothing was caught up (catchup: none, it had never "
    "fired, it was paused when one came back, or another slot was fired by hand)",
    GapReason.PAUSED: "the routine was paused",
    GapReason.CAUGHT_UP: "no scheduler ran, or it woke late (a suspended machine, a clock "
    "that jumped); the catch-up fired an earlier slot instead",
    GapReason.LATE: "no scheduler ran, or it woke late; older than the catch-up window",
    GapReason.STORE: "the store failed or did not answer when the slot was due",
    GapReason.REMOVED: "the routine was not loaded (removed from the routines, then added again)",
}


async def read_history(
    store: Store, routine: str, gaps_unread: Callable[[StateFault], None] | None = None
) -> tuple[list[Fire], list[Gap]]:
    """Every retained claim and gap of ``routine``, each oldest first (StateFault if unreadable),
    but a one-slot gap whose slot was claimed (see :func:`unclaimed`). ``gaps_unread``: told
    why the gaps are unreadable, which then read as none (else that is a StateFault too)."""
    fires = await store.history(routine)
    gaps: list[Gap] = []
    if isinstance(store, GapRecords):
        try:
            gaps = await store.gaps(routine)
        except StateFault as exc:
            if gaps_unread is None:
                raise
            gaps_unread(exc)
    return fires, unclaimed(gaps, fires)


def unclaimed(gaps: Sequence[Gap], fires: Sequence[Fire]) -> list[Gap]:
    """``gaps`` less a gap of one slot that has a claim: a replica that ended a long turn
    recorded the slot that came during it as passed over, and a stalled replica claimed it
    after that (its claim is what happened). A gap of several slots is kept as recorded: its
    slots between the first and the last are the cron's, which a claim's slot (one fired by
    hand, or before the cron was changed) need not be."""
    if not gaps or not fires:
        return list(gaps)
    claimed = {fire.slot for fire in fires}
    return [gap for gap in gaps if gap.count != 1 or gap.first not in claimed]


def in_slot_order(fires: Sequence[Fire], gaps: Sequence[Gap]) -> list[Fire | Gap]:
    """Claims and gaps together, oldest first (a gap by its first slot)."""
    entries: list[tuple[datetime, int, Fire | Gap]] = [(f.slot, 0, f) for f in fires]
    entries += [(g.first, 1, g) for g in gaps]
    entries.sort(key=lambda entry: (entry[0], entry[1]))
    return [entry for _, _, entry in entries]


def gap_line(gap: Gap, show: Callable[[datetime], str] = format_iso) -> str:
    """``missed 2 slots 23:58Z–23:59Z: no scheduler ran, …`` (``show`` writes an instant)."""
    about = "about " if gap.estimated else ""
    slots = "slot" if gap.count == 1 else "slots"
    span = show(gap.first) if gap.first == gap.last else f"{show(gap.first)}–{show(gap.last)}"
    return f"missed {about}{gap.count} {slots} {span}: {GAP_WHY[gap.reason]}"


def ended(fire: Fire) -> datetime:
    """When ``fire``'s turn ended: its claim's instant and its duration. A stored duration
    that runs past the calendar's end (a hand-edited or damaged record) is no duration."""
    try:
        return fire.fired_at + timedelta(milliseconds=fire.ms or 0)
    except OverflowError:
        return fire.fired_at


def failing_streak(fires: Sequence[Fire]) -> tuple[int, Fire | None]:
    """How many claimed slots ended failed or interrupted since the newest completed one, and
    that one (None when none is retained). Skipped and unsettled claims are passed over."""
    count = 0
    for fire in reversed(fires):
        if fire.outcome is Outcome.COMPLETED:
            return count, fire
        if fire.outcome in (Outcome.FAILED, Outcome.INTERRUPTED):
            count += 1
    return count, None


async def running_slots(store: Store, routine: str, fires: Sequence[Fire]) -> set[datetime]:
    """The slots among ``fires`` whose claim is open and held by a live replica now (none for
    a store without replicas). Raises StateFault when the holds cannot be read."""
    open_slots = [fire.slot for fire in fires if fire.is_open]
    read = getattr(store, "claims_alive", None)
    if not open_slots or read is None:
        return set()
    alive: list[bool] = await read([(routine, slot) for slot in open_slots])
    return {slot for slot, live in zip(open_slots, alive, strict=True) if live}


async def day_spent(
    store: Store, kind: Kind, name: str, now: datetime, fires: Sequence[Fire] = ()
) -> Spent:
    """What the turns of routine (``kind="routine"``) or session ``name`` spent in the
    :data:`SPENT_SHOWN` before ``now``, from the store's usage ledger: the sums its budgets
    count, which outlive the claims a store keeps (a routine firing every minute keeps less
    than a day of them). A store without a ledger keeps no budgets: then what its kept claims
    ``fires`` say. Raises StateFault when the ledger is unreadable."""
    if isinstance(store, UsageRecords):  # a routine's with its session's wake-up turns
        return await budget_spent(store, kind, name, now - SPENT_SHOWN)
    return fires_spent(fires, now - SPENT_SHOWN)


async def sessions_spent(
    store: Store, sessions: Iterable[str], now: datetime
) -> dict[str, Spent | StateFault]:
    """What the wake-up turns of each of ``sessions`` spent in the :data:`SPENT_SHOWN` before
    ``now``, from the store's usage ledger: one read per distinct session (only the sessions
    asked for, never a scan of the ledger), a session whose ledger is unreadable mapped to
    its StateFault. Empty for a store without a ledger: it keeps no session's spending."""
    if not isinstance(store, UsageRecords):
        return {}
    found: dict[str, Spent | StateFault] = {}
    for session in sorted(set(sessions)):
        try:
            found[session] = await store.usage_since("session", session, now - SPENT_SHOWN)
        except StateFault as exc:
            found[session] = exc
    return found
