"""What turns spend, and what they may: each turn's usage recorded in the store's ledger
(routines' and sessions'), and the budgets checked against it before a turn starts.

A routine's turns (its cron fires and its on-demand runs) are recorded under the routine, a
wake-up's turn under its session (:mod:`trio_routines.ledger`). A record is a bounded store
call made after the turn, shielded (a stop never cuts it short once the turn ran); a store
that fails it or keeps no ledger costs a warning, never the turn's outcome, and the usage is
not recorded again (a record that may have landed is never repeated: counted once or not at
all). A store without a ledger records nothing and keeps no budgets (a warning says so once).

A budget check (:meth:`Spending.over_budget`) reads what the routine or the session spent in
each budget's window from the ledger, which every replica shares; a routine's counts its
session's wake-up turns too (:func:`~trio_routines.ledger.budget_spent`), and a wake-up
turn in a routine's session is checked against that routine's budgets as well as against
the sessions' (a turn cannot step around its routine's budget through a wake-up). A turn
over one does not start: the reason is logged once per window (a warning; each further
refusal in that window at debug level), counted (``trio_routines_over_budget_total``) and
kept for the page until a check finds the budget free again. A ledger that cannot be read
refuses the turn too (the budget cannot be known): spending is what a budget guards.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import trio

from ..agent import Usage
from ..budgets import Budget
from ..context import FireContext
from ..errors import StateFault
from ..ledger import Spent, budget_spent
from ..store import Store, UsageRecords
from .calls import StoreCalls
from .state import Runtime, log


class Spending:
    """Records turns' usage in the store's ledger; owns the count of records that failed.

    Collaborators: the ``store`` (its ledger, when it keeps one), the :class:`Runtime` (the
    wall clock) and the :class:`StoreCalls` (the bound of each call).
    """

    def __init__(
        self,
        store: Store,
        runtime: Runtime,
        calls: StoreCalls,
        session_budgets: tuple[Budget, ...] = (),
    ) -> None:
        self._ledger = store if isinstance(store, UsageRecords) else None
        self._runtime = runtime
        self._calls = calls
        #: The budgets of every session's wake-up turns.
        self.session_budgets = session_budgets
        #: Usage records that the store failed (each a warning).
        self.record_failures = 0
        #: ``(kind, name)`` -> why its turns do not start now (the last check's answer).
        self.over: dict[tuple[str, str], str] = {}
        self._logged: dict[tuple[str, str], datetime] = {}  # when each was last logged
        self._warned_no_ledger = False

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

    async def over_budget(self, kind: str, name: str, budgets: tuple[Budget, ...]) -> str | None:
        """Why a turn of routine or session ``name`` may not start now, or None when it may
        (no budget, or each with room left). Logs once per window; counts every refusal."""
        if not budgets:
            return None
        if self._ledger is None:
            if not self._warned_no_ledger:
                self._warned_no_ledger = True
                log.warning("the store keeps no usage ledger: budgets are not kept")
            return None
        now = self._runtime.now()
        spent: dict[timedelta, Spent] = {}
        reason: str | None = None
        window = timedelta(hours=1)
        for budget in budgets:
            if budget.length not in spent:
                found, problem = await self._spent(kind, name, now - budget.length)
                if found is None:
                    reason = f"budget unknown: {problem} — not run"
                    break
                spent[budget.length] = found
            if not budget.allows(spent[budget.length]):
                reason, window = budget.over_text(spent[budget.length]), budget.length
                break
        key = (kind, name)
        if reason is None:
            self.over.pop(key, None)
            self._logged.pop(key, None)
            return None
        self.over[key] = reason
        self._runtime.metrics.budget_stopped(name if kind == "routine" else "")
        last = self._logged.get(key)
        if last is None or now - last >= window or now < last:
            self._logged[key] = now
            log.warning(
                "%s %s: %s — its turns do not start until the window frees up "
                "(logged once per window by this process)",
                kind,
                name,
                reason,
            )
        else:
            log.debug("%s %s: %s", kind, name, reason)
        return reason

    async def _spent(self, kind: str, name: str, since: datetime) -> tuple[Spent | None, str]:
        assert self._ledger is not None
        problem = "the store did not answer in time"
        with trio.CancelScope(shield=True), self._calls.bounded():
            try:
                return await budget_spent(self._ledger, kind, name, since), ""
            except StateFault as exc:
                problem = str(exc)
        return None, problem
