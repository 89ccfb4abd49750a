"""One turn of a session under the runtime's rules, for a cron fire, a wake-up and an
on-demand run alike: the session held (here and across replicas), the turn in a scope a stop
reaches, :func:`~trio_routines.current_fire` set, the turn traced, and what it spent recorded.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
import trio

from ..context import FireContext, firing
from ..errors import StateFault
from ..records import Outcome
from ..tracing import FireSpans, turn_span
from ..turns import TurnResult, run_turn
from .grace import CALLER, CALLER_ENDED, STOP_FIRST, Grace
from .holds import Holds, TurnHold
from .spending import Spending
from .state import LOST_BEFORE, LOST_ENDED, LOST_HOLD, log


class SessionTurns:
    """Runs turns; owns nothing of its own.

    Collaborators: the :class:`Holds` (one turn of a session at a time, here and in every
    replica), the :class:`Grace` (the turn's scope a stop reaches) and the :class:`Spending`
    (each turn's usage recorded; the budgets its callers check before a turn).
    """

    def __init__(self, holds: Holds, grace: Grace, spending: Spending) -> None:
        self._holds = holds
        self._grace = grace
        self.spending = spending

    async def turn(
        self,
        why: FireContext,
        label: str,
        text: str,
        timeout: float | None = None,
        on_text: Callable[[str], None] | None = None,
        *,
        hold: TurnHold | None = None,
        spans: FireSpans | None = None,
        on_start: Callable[[], Awaitable[None]] | None = None,
        quiet: bool = False,
    ) -> TurnResult:
        """One turn of ``why.session``; :func:`~trio_routines.current_fire` returns ``why``.

        ``hold``: the session already held for it (a fire's); else it is held here, and a
        store that cannot answer is a failed turn. ``spans``: a traced fire's (the turn's
        span is their child); else the turn is traced by its kind (:mod:`..tracing`).
        ``on_start``: awaited once the session is held, before the agent runs, unless the
        session is busy (a wake-up turn is recorded there: a busy one never ran).
        ``quiet``: a retry of a deferred wake-up (see :func:`~trio_routines.turns.run_turn`).
        """
        own = hold is None
        if hold is None:
            try:
                hold = await self._holds.enter(why.session)
            except StateFault as exc:
                log.error("%s: could not hold session %s: %s", label, why.session, exc)
                failed = f"the store did not answer: {exc}"
                return TurnResult(Outcome.FAILED, 0, failed=failed, began=False)
        traced = turn_span(why, spans)
        try:
            if on_start is not None and not hold.busy and not hold.lost():
                await on_start()  # (a turn that will not begin is not recorded as one)
            with self._grace.turn_scope() as grace, firing(why), traced:
                # Asked once the scope is where a loss ends every turn: a loss before it is
                # seen here, one after it ends the turn. A claim answered after the loss is
                # not run (another replica may take the session now).
                if not hold.busy and hold.lost():
                    log.warning("%s: %s", label, LOST_BEFORE)
                    turn = TurnResult(Outcome.INTERRUPTED, 0, failed=LOST_BEFORE, began=False)
                else:
                    turn = await run_turn(
                        hold.agent,
                        label,
                        why.session,
                        text,
                        timeout=timeout,
                        grace_scope=grace,
                        on_text=on_text,
                        ended_by=lambda: self._ended_by(grace),
                        quiet=quiet,
                        held=not hold.busy,
                    )
            if hold.busy:  # a turn of ours (any replica's) is in flight: no agent's words
                turn = attrs.evolve(turn, failed=None)
            # Ended because our holds were lost, not by a stop (asked of every turn: it forgets).
            elif self._grace.was_lost(grace) and turn.outcome is Outcome.INTERRUPTED:
                turn = attrs.evolve(turn, failed=LOST_HOLD)
            traced.ended(turn)
            if turn.usage is not None:  # shielded and bounded: never raises
                # Before the session goes: its next turn's budget sees what this one spent.
                await self.spending.record(why, turn.usage)
        finally:
            if own:
                hold.release()
        return turn

    def _ended_by(self, scope: trio.CancelScope) -> str | None:
        """Why ``scope``'s turn was ended early when a stop did not end it: our holds lost, or
        the caller of a fire or run by hand gave up (:mod:`.grace`)."""
        if self._grace.lost(scope):
            return LOST_ENDED
        caller = CALLER.get()
        if (
            caller is not None
            and caller.applies()
            and caller.passed()
            # A stop's deadline as near (both began at a host's cancel, say) names the stop.
            and caller.deadline < self._grace.deadline - STOP_FIRST
        ):
            return CALLER_ENDED
        return None
