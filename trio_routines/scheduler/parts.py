"""The scheduler's parts, built and handed to each other once: :class:`Parts`.

This module owns the wiring, nothing else: which part is handed which collaborator (the table
in docs/design.md, Runtime), in an order where each is built from the parts above it, so
calls go one way. :class:`~trio_routines.scheduler.service.Scheduler` builds one
:class:`Parts` and keeps the public API; :mod:`.report` reads the parts for the statistics and
the metrics.
"""

from __future__ import annotations

from ..budgets import Budget
from ..metrics import Metrics
from ..sessions import SessionGate
from ..store import Store
from ..wakelimits import WakeLimits
from .arming import Arming
from .boot import Boot
from .calls import StoreCalls
from .claiming import Claiming
from .clock import ClockWatch
from .fire import FirePath
from .gaps import GapRecording
from .grace import Grace
from .holds import Holds
from .loops import CronLoops
from .members import MemberWatch
from .membership import Membership
from .openclaims import OpenClaims
from .pausing import Pausing
from .reload import Reload
from .restarts import Restarts
from .runs import OnDemandRuns
from .sleepers import Sleepers
from .spending import Spending
from .starting import Starting
from .state import Runtime
from .streaks import Streaks
from .turning import SessionTurns
from .wake import WakeLoop
from .wakecalls import WakeupCalls


class Parts:
    """Every part of one scheduler, each handed only what it may use.

    The attributes are the parts themselves; none of them is replaced after construction.
    """

    def __init__(
        self,
        *,
        agent: SessionGate,
        store: Store,
        runtime: Runtime,
        metrics: Metrics,
        session_budgets: tuple[Budget, ...],
        wake_limits: WakeLimits,
        store_timeout: float,
        external_clock: bool,
        wakeups: bool,
        max_wait: float,
        poll_interval: float,
        jump_threshold: float,
        wakeup_timeout: float | None,
    ) -> None:
        self.runtime = runtime
        self.grace = Grace()
        calls = self.calls = StoreCalls(store, runtime, self.grace, store_timeout=store_timeout)
        membership = self.membership = Membership(store, runtime, calls, self.grace)
        holds = Holds(agent, membership.current)
        # Where cron loops sleep (see sleepers.py); a herd's one paused read made at its slot.
        self.sleepers = Sleepers(prefetch=calls.prefetch_paused)
        self.restarts = Restarts(metrics)
        self.arming = Arming()
        self.clock = ClockWatch(
            runtime,
            self.sleepers,
            calls,
            self.restarts,
            self.arming,
            jump_threshold=jump_threshold,
            poll_interval=poll_interval,
        )
        spending = Spending(store, runtime, calls, session_budgets)
        self.turns = SessionTurns(holds, self.grace, spending)
        gaps = GapRecording(store, runtime, calls)
        claiming = Claiming(store, runtime, membership, holds)
        self.fire = FirePath(runtime, calls, membership, claiming, self.turns, gaps)
        open_claims = self.open_claims = OpenClaims(store, runtime, calls, membership)
        self.streaks = Streaks(calls, metrics)
        self.boot = Boot(runtime, calls, membership, gaps, self.arming, self.streaks)
        self.members = MemberWatch(
            store,
            runtime,
            calls,
            membership,
            self.grace,
            open_claims,
            self.streaks,
            poll_interval=poll_interval,
        )
        self.starting = Starting(
            membership, self.members, self.boot, self.arming, self.clock, plan=not external_clock
        )
        self.cron = CronLoops(
            runtime,
            self.fire,
            calls,
            gaps,
            self.clock,
            self.restarts,
            self.sleepers,
            self.arming,
            max_wait=max_wait,
        )
        self.wakeup_calls = WakeupCalls(store, runtime, calls, wake_limits)
        self.wake = WakeLoop(
            runtime,
            self.turns,
            calls,
            self.clock,
            self.restarts,
            self.wakeup_calls,
            poll_interval=poll_interval,
            turn_timeout=wakeup_timeout,
        )
        self.reload = Reload(
            runtime,
            self.arming,
            self.clock,
            self.cron,
            gaps,
            external_clock=external_clock,
            wakeups=wakeups,
        )
        self.runs = OnDemandRuns(runtime, calls, membership, holds, self.turns)
        self.pausing = Pausing(runtime, calls)
