"""The replica's life in its store: heartbeat, a lost presence, a dead member's open claims.

Every poll interval the watch tells the store we are here (last seen, turns in flight; on
PostgreSQL this also proves the connection that carries our holds still answers). It looks
for members that died -- their own hold free -- and reconciles the open newest claims of our
routines whose holders are gone, once per dead member: a replica killed mid-turn has its
claim recorded ``interrupted`` within one poll interval (plus the store's answer), by any
live replica, not only at the next boot.

If the store can no longer vouch for our holds (the presence is **lost**), the turns we run
are no longer protected: another replica may rightly see them dead, and start the session's
next turn. So they are ended at once (settled ``interrupted``, with the reason), and the
watch joins again, every poll interval, until the store takes us back. Fires meanwhile fail
before their claim (a state fault: nothing is burned).
"""

from __future__ import annotations

import logging

import trio

from ..errors import StateFault
from ..instants import format_iso
from ..presence import IdInUse
from ..records import Outcome
from ..store import Store
from .calls import StoreCalls
from .foreach import for_each
from .grace import Grace
from .membership import LOOK_AT_LEAST, Looks, Membership
from .openclaims import (
    LEFT_OPEN,
    WATCH_BUDGET,
    OpenClaims,
    count_interrupted,
    found_by,
    said,
)
from .state import Runtime, log
from .streaks import Streaks

SWEPT_INTERRUPTED = "its replica stopped mid-turn (found by a live replica)"


class MemberWatch:
    """The heartbeat and the sweep of dead members; owns the members swept already.

    Collaborators: the ``store``, the :class:`Runtime` (routines, wall clock, stop, turns in
    flight), the :class:`StoreCalls`, the :class:`Membership` (the presence it beats for and
    replaces), the :class:`Grace` (the turns it ends when the presence is lost), the
    :class:`OpenClaims` and the :class:`Streaks` (the histories of the turns found dead).
    """

    def __init__(
        self,
        store: Store,
        runtime: Runtime,
        calls: StoreCalls,
        membership: Membership,
        grace: Grace,
        open_claims: OpenClaims,
        streaks: Streaks,
        *,
        poll_interval: float,
    ) -> None:
        self._store = store
        self._runtime = runtime
        self._calls = calls
        self._membership = membership
        self._grace = grace
        self._open_claims = open_claims
        self._streaks = streaks
        self._poll_interval = poll_interval
        self._swept: set[str] = set()  # dead replicas whose open claims were reconciled

    async def watch(self) -> None:
        """Run for as long as the loops do (see the module doc)."""
        self._membership.watched = True  # for as long as the loops run: never set back
        while True:
            presence = self._membership.presence
            if presence is None:
                return
            looks = Looks(presence, self._watch_interval())
            while await looks.next():
                try:
                    await self._membership.beat(presence)
                    await self._sweep()
                    await self._open_claims.reconcile(WATCH_BUDGET)
                except StateFault as exc:
                    log.warning(
                        "replica %s: the store did not answer the watch: %s",
                        self._runtime.replica,
                        exc,
                    )
            await self._lost(presence.replica)

    def _watch_interval(self) -> float:
        return max(LOOK_AT_LEAST, self._poll_interval)

    async def _lost(self, replica: str) -> None:
        """End our turns, then join again until the store takes us back."""
        self._grace.end_lost()  # each turn says why it ended (see fire.py)
        while not self._runtime.stopping.value:
            await trio.sleep(self._watch_interval())
            try:
                await self._membership.rejoin()
            except IdInUse:
                log.warning(
                    "replica %s could not join its store again yet: its id is still held "
                    "there, by its own earlier connection until the server lets that go (or "
                    "by another replica given the same --replica)",
                    replica,
                )
                continue
            except StateFault as exc:
                log.warning("replica %s could not join its store again: %s", replica, exc)
                continue
            log.info("replica %s joined its store again", replica)
            return

    async def _sweep(self) -> None:
        """Reconcile the open newest claims left by members found dead since the last look."""
        if getattr(self._store, "replicas", None) is None:
            return
        members = await self._membership.replicas()
        replica = self._runtime.replica
        dead = {m.id for m in members if not m.alive and m.id != replica} - self._swept
        if not dead:
            return
        self._swept |= dead
        newest = await for_each(self._calls.latest_fire, list(self._runtime.routines))
        suspects = {
            name: fire
            for name, fire in newest.items()
            if fire is not None and fire.is_open and fire.replica in dead
        }
        alive = await self._membership.claims_alive(list(suspects.items()))
        reason = found_by(SWEPT_INTERRUPTED, replica)
        for (name, fire), live in zip(suspects.items(), alive, strict=True):
            if live:
                continue
            recorded = await self._calls.settle_once(
                name, fire.slot, Outcome.INTERRUPTED, None, if_unsettled=True, error=reason
            )
            counted = None
            if recorded:
                counted, _ = await count_interrupted(
                    self._calls,
                    self._runtime.metrics,
                    self._streaks,
                    name,
                    fire.slot,
                    reason,
                    arm=getattr(self._runtime.routines.get(name), "cron", None) is not None,
                )
            log.log(
                logging.INFO if recorded and counted is False else logging.WARNING,
                "%s: the fire of slot %s claimed at %s by replica %s never finished — that "
                "replica stopped mid-turn; %s",
                name,
                format_iso(fire.slot),
                format_iso(fire.fired_at),
                fire.replica,
                said(recorded, counted, LEFT_OPEN),
            )

    async def note_dead_members(self) -> None:
        """At the boot: members already dead were reconciled by it (their newest claims)."""
        if getattr(self._store, "replicas", None) is None:
            return
        try:
            members = await self._membership.replicas()
        except StateFault as exc:
            log.debug("the replicas could not be read at the boot: %s", exc)
            return
        self._swept |= {m.id for m in members if not m.alive}
