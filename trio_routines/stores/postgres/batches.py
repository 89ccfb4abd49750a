"""The claims and settles of a PostgreSQL store, gathered into batches: one transaction for
the claims (or outcomes) asked for together, each caller answered on its own (see
:mod:`trio_routines.stores.batch`)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import psycopg

from ...errors import StateFault
from ...instants import format_iso
from ...records import ClaimResult
from ..batch import Answer, Batcher, Entry
from .call import Call, CallFault
from .claims import ClaimItem, HolderGone, SettleItem, claim_batch, settle_batch, taken_too_late
from .conn import Connections
from .schema import Schema

Conn = psycopg.Connection[Any]


class Batches:
    """The store's two batchers (``claims``, ``settles``) and what each batch does; owns
    nothing else. Collaborators: the :class:`Connections` (each batch is one call) and the
    :class:`Schema`; ``keep``: the claims a routine keeps."""

    def __init__(self, conns: Connections, tables: Schema, keep: int) -> None:
        self._conns = conns
        self._tables = tables
        self._keep = keep
        self.claims: Batcher[ClaimItem, ClaimResult] = Batcher(
            self._flush_claims, key=lambda item: item[0]
        )
        self.settles: Batcher[SettleItem, None] = Batcher(
            self._flush_settles, key=lambda item: (item[0], item[1])
        )

    async def _flush_claims(
        self, entries: Sequence[Entry[ClaimItem, ClaimResult]]
    ) -> list[Answer[ClaimResult]]:
        items = [entry.item for entry in entries]
        try:
            results, settled = await self._conns.run(
                f"could not claim {len(items)} slot(s)",
                claim_batch,
                self._tables,
                self._keep,
                items,
                list(entries),
            )
        except CallFault as exc:
            return [
                Answer(error=exc.retold(f"could not claim slot {format_iso(slot)} of {routine!r}"))
                for routine, slot, *_ in items
            ]
        except HolderGone:
            gone = f"this replica's hold on {self._conns.where} is gone (its connection ended)"
            return [
                Answer(
                    error=StateFault(f"could not claim slot {format_iso(slot)} of {r!r}: {gone}")
                )
                for r, slot, *_ in items
            ]
        # A caller that gave up after the thread looked: its claim is settled from here.
        late = [
            entry.item
            for entry, result, done in zip(entries, results, settled, strict=True)
            if result.taken and entry.gave_up and not done
        ]
        if late:
            with contextlib.suppress(StateFault):  # then the next boot's reconcile does it
                await self._conns.run("could not settle late claims", self._late, late)
        return [Answer(value=result) for result in results]

    def _late(self, conn: Conn, _call: Call, late: list[ClaimItem]) -> None:
        taken_too_late(conn, self._tables, late)

    async def _flush_settles(
        self, entries: Sequence[Entry[SettleItem, None]]
    ) -> list[Answer[None]]:
        items = [entry.item for entry in entries]
        try:
            await self._conns.run(
                f"could not record {len(items)} outcome(s)", settle_batch, self._tables, items
            )
        except CallFault as exc:
            return [
                Answer(
                    error=exc.retold(
                        f"{routine}: could not record the {outcome.value} outcome of slot "
                        f"{format_iso(slot)}"
                    )
                )
                for routine, slot, outcome, *_ in items
            ]
        return [Answer() for _ in items]
