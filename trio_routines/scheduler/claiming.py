"""A fire's claim with its holds: the claim's and the session's, taken with the claim in
the way the store makes it safe (see :mod:`trio_routines.replicas`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime

import trio

from ..errors import StateFault
from ..instants import format_iso, slot_name
from ..presence import LocalPresence
from ..records import ClaimResult, ClaimStatus
from ..replicas import claim_key
from ..routines import Routine
from ..store import Store
from .holds import Holds, TurnHold
from .membership import Membership
from .state import Runtime, takes_replica


class Claiming:
    """How this store's claims and their holds are taken; owns what it learnt of the store
    once (the claim's options, whether a written claim lives with its replica, whether a
    claim is seen only whole).

    Collaborators: the ``store`` (the claim itself), the :class:`Runtime` (this replica's
    id), the :class:`Membership` (its presence, for a store whose claims take holds) and the
    :class:`Holds` (the claim's and the session's).
    """

    def __init__(
        self, store: Store, runtime: Runtime, membership: Membership, holds: Holds
    ) -> None:
        self._store = store
        self._membership = membership
        self._holds = holds
        # A store written before replicas were recorded takes no ``replica``: it gets none.
        self._claim_options = {"replica": runtime.replica} if takes_replica(store) else {}
        #: A written claim is alive while the replica it names is: the store lets go of its
        #: key once it is written, and this process keeps it.
        self._claims_live_with_replica = getattr(
            store, "claims_live_with_replica", False
        ) is True and bool(self._claim_options)
        #: No replica sees a claim of the store half made: its key is held here only.
        self._claims_whole = self._claims_live_with_replica and (
            getattr(store, "claims_appear_whole", False) is True
        )
        #: The claims being decided here, by key: a second fire of one waits for its answer
        #: (a :class:`_Decision`, made only when one waits), for the slot's fate is not
        #: known before it.
        self._deciding: dict[int, _Decision | None] = {}

    async def hold_and_claim(
        self, routine: Routine, slot: datetime, now: datetime
    ) -> tuple[TurnHold, ClaimResult]:
        """The claim's hold and the session's, then the claim: while the claim's hold is held,
        every replica sees the claim alive (replicas.py). Where a claim is alive while the
        replica it names is, the store lets go of the claim's hold once the claim is written,
        or never takes it: where no replica sees a claim half made (the state directory),
        or where it takes the session's in the claim's own step (PostgreSQL)."""
        name, key = routine.name, claim_key(routine.name, slot)
        deciding = self._deciding
        decide: Callable[..., Awaitable[ClaimResult]] = self._store.claim
        while key in deciding:
            # This very slot is being decided here: answered "duplicate" now, a fire of a slot
            # that turns out stale (a newer claim is there) would say it was claimed. Once
            # decided, it is held here (a duplicate, without asking), refused by the store for
            # good (that answer is ours too, not asked again), or, the decision cut off,
            # asked again.
            refused = await self._decided(key)
            if refused is not None:
                decide = _answering(refused)
        deciding[key] = None
        args, options = (name, slot, now), self._claim_options
        claim: ClaimResult | None = None
        try:
            try:
                if self._claims_take_holds():
                    # No closure per fire: at 10,000 fires at once, every object a fire keeps
                    # while its claim is on its way is the collector's work (benchmarks/).
                    hold, claim = await self._holds.enter_claiming(
                        routine.session, key, decide, args, options
                    )
                    # None: the slot is this process's already.
                    return hold, claim or ClaimResult(ClaimStatus.DUPLICATE, slot_name(slot))
                if self._claims_whole:
                    hold, claim = await self._holds.enter_whole(
                        routine.session, key, decide, args, options
                    )
                    return hold, claim or ClaimResult(ClaimStatus.DUPLICATE, slot_name(slot))
                hold = await self._holds.enter(routine.session, key)
            except StateFault as exc:
                said = f"could not claim slot {format_iso(slot)} of {name!r}"
                if str(exc).startswith(said):  # the store's own claim said so already
                    raise
                raise StateFault(f"{said}: {exc}") from None
            if not hold.claimed:  # another replica is deciding or running this very slot
                return hold, ClaimResult(ClaimStatus.DUPLICATE, slot_name(slot))
            try:
                claim = await decide(name, slot, now, **options)
            except BaseException:
                hold.release()
                raise
            if self._claims_live_with_replica:
                # Written, the claim names this replica, which keeps it alive from now on: the
                # store's lock of the claim covered only its making (a claim file is made, then
                # written), and this process keeps the key against a second fire of the slot.
                hold.let_store_go(key)
            return hold, claim
        finally:
            waiting = deciding.pop(key)
            if waiting is not None:
                waiting.done(claim)

    async def _decided(self, key: int) -> ClaimResult | None:
        """Return once the decision of the claim ``key`` under way here has ended: the store's
        refusal of the slot (stale, or taken by another), which stands for good; None when it
        was taken here, or the decision was cut off (a fault, a cancel)."""
        decision = self._deciding[key]
        if decision is None:
            decision = self._deciding[key] = _Decision()
        await decision.ended.wait()
        return decision.refused

    def _claims_take_holds(self) -> bool:
        """Whether the store takes a claim's holds in the claim's own step, for our presence."""
        presence = self._membership.presence
        return (
            getattr(self._store, "claims_take_holds", False) is True
            and presence is not None
            and not isinstance(presence, LocalPresence)
        )


class _Decision:
    """A claim being decided here that another fire of its slot waits for."""

    __slots__ = ("ended", "refused")

    def __init__(self) -> None:
        self.ended = trio.Event()
        self.refused: ClaimResult | None = None

    def done(self, claim: ClaimResult | None) -> None:
        """The decision ended with ``claim`` (None: cut off before the store answered)."""
        if claim is not None and claim.status in (ClaimStatus.STALE, ClaimStatus.DUPLICATE):
            # Its status and newest slot only: the holds the store took with it (PostgreSQL)
            # were the decider's, not a waiter's.
            self.refused = ClaimResult(claim.status, claim.newest)
        self.ended.set()


def _answering(refused: ClaimResult) -> Callable[..., Awaitable[ClaimResult]]:
    """A claim that answers ``refused`` without asking the store, which refused it already."""

    async def answer(*args: object, **options: object) -> ClaimResult:
        return refused

    return answer
