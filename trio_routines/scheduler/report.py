"""What a running scheduler reports: its :class:`Statistics` snapshot and its metric families.

Pure reads of the parts (:class:`.parts.Parts`), made in one go so one snapshot is
consistent; nothing here changes a part. ``Scheduler.statistics``, ``metric_families`` and
``render_metrics`` are these.
"""

from __future__ import annotations

from types import MappingProxyType

from ..metrics import Family, Metrics
from .parts import Parts
from .state import Statistics


def statistics(parts: Parts) -> Statistics:
    """A snapshot: armed routines, turns in flight, next slots, outcomes, clock jumps."""
    runtime = parts.runtime
    spending = parts.turns.spending
    return Statistics(
        armed=tuple(parts.arming.armed),
        in_flight=runtime.in_flight.value,
        next_due=parts.arming.shown_due(runtime.now(), parts.cron.firing, runtime.routines),
        outcomes=MappingProxyType(dict(parts.fire.outcomes)),
        clock_jumps=parts.clock.jumps,
        stopping=runtime.stopping.value,
        loop_restarts=MappingProxyType(dict(parts.restarts.counts)),
        settle_failures=MappingProxyType(dict(parts.calls.settle_failures)),
        future_claims=MappingProxyType(parts.arming.future_claims(runtime.now())),
        paused=parts.calls.paused,
        broken_files=parts.reload.broken,
        over_budget=MappingProxyType(
            {name: why for (kind, name), why in spending.over.items() if kind == "routine"}
        ),
        sessions_over_budget=MappingProxyType(
            {name: why for (kind, name), why in spending.over.items() if kind == "session"}
        ),
    )


def metric_families(parts: Parts, metrics: Metrics) -> list[Family]:
    """The runtime's series (:mod:`trio_routines.metrics`), one snapshot."""
    stats = statistics(parts)
    return metrics.families(
        in_flight=stats.in_flight,
        armed=len(stats.armed),
        clock_jumps=stats.clock_jumps,
        future_claims=stats.future_claims,
        next_due=stats.next_due,
        paused=stats.paused,
        kept_broken=parts.reload.kept_broken,
        broken=stats.broken_files,
        pending_wakeups=parts.wake.pending,
        loaded=parts.runtime.routines.keys(),
    )
