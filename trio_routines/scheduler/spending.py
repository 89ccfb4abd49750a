"""What turns spend: each turn's usage recorded in the store's ledger (routines' and sessions').

A routine's turns (its cron fires and its on-demand runs) are recorded under the routine, a
wake-up's turn under its session (:mod:`trio_routines.ledger`). A record is a bounded store
call made after the turn, shielded (a stop never cuts it short once the turn ran); a store
that fails it or keeps no ledger costs a warning, never the turn's outcome, and the usage is
not recorded again (a record that may have landed is never repeated: counted once or not at
all). A store without a ledger records nothing and keeps no budgets.
"""

from __future__ import annotations

import trio

from ..agent import Usage
from ..context import FireContext
from ..errors import StateFault
from ..store import Store, UsageRecords
from .calls import StoreCalls
from .state import Runtime, log


class Spending:
    """Records turns' usage in the store's ledger; owns the count of records that failed.

    Collaborators: the ``store`` (its ledger, when it keeps one), the :class:`Runtime` (the
    wall clock) and the :class:`StoreCalls` (the bound of each call).
    """

    def __init__(self, store: Store, runtime: Runtime, calls: StoreCalls) -> None:
        self._ledger = store if isinstance(store, UsageRecords) else None
        self._runtime = runtime
        self._calls = calls
        #: Usage records that the store failed (each a warning).
        self.record_failures = 0

    @property
    def keeps_ledger(self) -> bool:
        """Whether the store keeps usage ledgers (else no budget is kept)."""
        return self._ledger is not None

    async def record(self, why: FireContext, usage: Usage | None) -> None:
        """Count and record ``usage`` of the turn ``why`` describes (nothing for None)."""
        if usage is None:
            return
        routine = why.routine if why.kind != "wakeup" and why.routine is not None else ""
        self._runtime.metrics.spent(
            routine, usage.input_tokens, usage.output_tokens, usage.cost, usage.currency
        )
        if self._ledger is None:
            return
        if why.kind == "wakeup":
            kind, name = "session", why.session
        elif why.routine is not None:
            kind, name = "routine", why.routine
        else:
            return
        problem = "the store did not answer in time"
        with trio.CancelScope(shield=True), self._calls.bounded():
            try:
                await self._ledger.record_usage(kind, name, self._runtime.now(), usage)
                return
            except StateFault as exc:
                problem = str(exc)
        self.record_failures += 1
        log.warning("%s %s: the turn's usage was not recorded: %s", kind, name, problem)
