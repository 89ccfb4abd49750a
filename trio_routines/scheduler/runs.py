"""On-demand runs: one turn of a routine now, without a claim (``run`` on the command line,
``POST /run``). No slot, no history; the session's hold makes it busy like any other turn."""

from __future__ import annotations

import functools
from collections.abc import Callable

import trio

from ..context import FireContext
from ..errors import StateFault
from ..routines import Routine
from ..turns import TurnResult
from .calls import StoreCalls
from .grace import bounded_by_caller
from .holds import Holds, TurnHold
from .membership import Membership
from .state import Runtime, Stopping
from .turning import SessionTurns


class OnDemandRuns:
    """Runs of a routine outside its schedule (owns nothing; handed the runtime, the store
    calls for their deadlines, the membership, the holds, and the :class:`SessionTurns` that
    run the agent)."""

    def __init__(
        self,
        runtime: Runtime,
        calls: StoreCalls,
        membership: Membership,
        holds: Holds,
        turns: SessionTurns,
    ) -> None:
        self._runtime = runtime
        self._calls = calls
        self._membership = membership
        self._holds = holds
        self._turns = turns

    async def run_now(
        self, name: str, *, on_text: Callable[[str], None] | None = None
    ) -> TurnResult:
        """Run one turn of a routine now, without a claim: no slot, no history. Raises
        StateFault, nothing run, when the store cannot hold the routine's session. The turn
        is shielded (a stop ends it after its grace, and so does the routine's timeout; a
        caller's cancel leaves it the default grace, then ends it too: :mod:`.grace`), and a
        caller cancelled meanwhile hears of it once the turn has ended, as from ``fire``."""
        routine = self._runtime.routine(name)
        if self._runtime.stopping.value:
            raise Stopping("the scheduler is stopping; no new turns are accepted")
        async with self._membership.present():
            # Outside a run, our presence is watched meanwhile.
            result = await bounded_by_caller(
                functools.partial(
                    self._membership.guarded, functools.partial(self._run, routine, on_text)
                ),
                self._runtime.default_grace,
            )
            # Its session free in the store before it answers, as a caller's fire's.
            await self._membership.let_go_now(self._calls.store_deadline())
        await trio.lowlevel.checkpoint_if_cancelled()  # a cancelled caller hears of it now
        return result

    async def _run(self, routine: Routine, on_text: Callable[[str], None] | None) -> TurnResult:
        """The run's turn, its session held first (shielded: the turn has its own grace)."""
        with trio.CancelScope(shield=True), self._runtime.working():
            hold = await self._hold(routine)
            why = FireContext(
                "run", routine.session, routine=routine.name, replica=self._runtime.replica
            )
            try:
                result = await self._turns.turn(
                    why, routine.name, routine.prompt, routine.timeout, on_text, hold=hold
                )
            finally:
                hold.release()
        return result

    async def _hold(self, routine: Routine) -> TurnHold:
        """The routine's session held for one turn (perhaps busy); StateFault, nothing held,
        when the store cannot answer in time."""
        said = f"could not hold the session of {routine.name!r}"
        try:
            with self._calls.bounded():
                return await self._holds.enter(routine.session)
        except StateFault as exc:
            raise StateFault(f"{said}: {exc}") from None
        raise self._calls.no_answer(said)

    async def start_run(self, name: str) -> bool:
        """Start one turn of a routine in the running scheduler's nursery, without a claim.

        Returns False, starting nothing, when the routine's session is busy here or in any
        replica sharing the store; otherwise the session is already held for this turn when
        this returns, so no other turn can slip in between the answer and the start.
        Raises StateFault when the store cannot say.
        """
        routine = self._runtime.routine(name)
        if self._runtime.stopping.value:
            raise Stopping("the scheduler is stopping; no new turns are accepted")
        if self._runtime.nursery is None:
            raise Stopping("the scheduler is not running; no turn can be started in it")
        hold = await self._hold(routine)
        if hold.busy:
            hold.release()
            return False
        await self._runtime.nursery.start(self._run_in_background, routine, hold)
        return True

    async def _run_in_background(
        self,
        routine: Routine,
        hold: TurnHold,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        with trio.CancelScope(shield=True), self._runtime.working():
            task_status.started()
            why = FireContext(
                "run", routine.session, routine=routine.name, replica=self._runtime.replica
            )
            try:
                await self._turns.turn(
                    why, routine.name, routine.prompt, routine.timeout, hold=hold
                )
            finally:
                hold.release()
