"""Counters for ``GET /metrics``, in the Prometheus text exposition format (version 0.0.4).

The runtime records what happens to each fire -- its outcome, its turn's duration, how late it
started behind its slot -- and every refused claim and clock jump; :meth:`Metrics.render`
writes them out. A dozen series do not need a client library: the format is a few lines of
text, so this module has no dependency (the design notes say why).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Mapping
from datetime import datetime

#: Bucket bounds in seconds for turn durations and for lateness behind the slot.
DURATION_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)
LATENESS_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 60.0, 300.0)


class _Histogram:
    __slots__ = ("bounds", "counts", "sum", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum = 0.0
        self.total = 0

    def observe(self, value: float) -> None:
        # Counted in the first bucket that holds it; rendering makes the counts cumulative.
        index = bisect.bisect_left(self.bounds, value)
        if index < len(self.bounds):
            self.counts[index] += 1
        self.sum += value
        self.total += 1

    def cumulative(self) -> list[int]:
        return list(itertools.accumulate(self.counts))


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return "+Inf" if math.isinf(value) else repr(float(value)) if value % 1 else str(int(value))


class Metrics:
    """What the runtime counts; one per :class:`~trio_routines.Scheduler`."""

    def __init__(self) -> None:
        self.fires: Counter[tuple[str, str]] = Counter()
        self.refused: Counter[tuple[str, str]] = Counter()
        self.restarts: Counter[tuple[str, str | None]] = Counter()
        self.settle_failures: Counter[str] = Counter()
        self.durations: defaultdict[str, _Histogram] = defaultdict(
            lambda: _Histogram(DURATION_BUCKETS)
        )
        self.lateness: defaultdict[str, _Histogram] = defaultdict(
            lambda: _Histogram(LATENESS_BUCKETS)
        )

    def fired(self, routine: str, outcome: str, ms: int, late: float) -> None:
        """A claimed slot settled with ``outcome`` after ``ms``; its turn began ``late`` s late."""
        self.fires[routine, outcome] += 1
        self.durations[routine].observe(ms / 1000)
        self.lateness[routine].observe(max(0.0, late))

    def refuse(self, routine: str, reason: str) -> None:
        self.refused[routine, reason] += 1

    def restarted(self, loop: str, routine: str | None) -> None:
        """A loop (``cron`` of ``routine``, ``wake`` or ``clock``) died and was restarted."""
        self.restarts[loop, routine] += 1

    def settle_failed(self, routine: str) -> None:
        """An outcome that could not be written, retries included: the claim stays open."""
        self.settle_failures[routine] += 1

    def render(
        self,
        *,
        in_flight: int,
        armed: int,
        clock_jumps: int,
        future_claims: Mapping[str, datetime] | None = None,
    ) -> str:
        lines: list[str] = []

        def family(name: str, kind: str, text: str) -> None:
            lines.append(f"# HELP {name} {text}")
            lines.append(f"# TYPE {name} {kind}")

        family("trio_routines_fires_total", "counter", "Claimed slots by routine and outcome.")
        for (routine, outcome), count in sorted(self.fires.items()):
            lines.append(
                f'trio_routines_fires_total{{routine="{_label(routine)}",outcome="{outcome}"}} '
                f"{count}"
            )
        family(
            "trio_routines_claims_refused_total",
            "counter",
            "Slots not claimed, by routine and reason (duplicate or stale).",
        )
        for (routine, reason), count in sorted(self.refused.items()):
            lines.append(
                f"trio_routines_claims_refused_total"
                f'{{routine="{_label(routine)}",reason="{reason}"}} {count}'
            )
        for name, text, histograms in (
            ("trio_routines_turn_seconds", "Turn duration of claimed slots.", self.durations),
            (
                "trio_routines_lateness_seconds",
                "How late a claimed slot's turn began behind the slot.",
                self.lateness,
            ),
        ):
            family(name, "histogram", text)
            for routine, histogram in sorted(histograms.items()):
                label = f'routine="{_label(routine)}"'
                for bound, count in zip(histogram.bounds, histogram.cumulative(), strict=True):
                    lines.append(f'{name}_bucket{{{label},le="{_number(bound)}"}} {count}')
                lines.append(f'{name}_bucket{{{label},le="+Inf"}} {histogram.total}')
                lines.append(f"{name}_sum{{{label}}} {_number(histogram.sum)}")
                lines.append(f"{name}_count{{{label}}} {histogram.total}")
        family(
            "trio_routines_loop_restarts_total",
            "counter",
            "Loops restarted after an unexpected exception (cron by routine, wake, clock).",
        )
        for (loop, owner), count in sorted(self.restarts.items(), key=str):
            labels = f'loop="{loop}"' + (f',routine="{_label(owner)}"' if owner is not None else "")
            lines.append(f"trio_routines_loop_restarts_total{{{labels}}} {count}")
        family(
            "trio_routines_settle_failures_total",
            "counter",
            "Outcomes lost: the store could not record them within the settle's retries.",
        )
        for routine, count in sorted(self.settle_failures.items()):
            lines.append(
                f'trio_routines_settle_failures_total{{routine="{_label(routine)}"}} {count}'
            )
        family(
            "trio_routines_future_claim_timestamp_seconds",
            "gauge",
            "A routine's newest claim, when it lies in the future (a clock that ran ahead): "
            "nothing fires before the first slot after it.",
        )
        for routine, slot in sorted((future_claims or {}).items()):
            lines.append(
                f'trio_routines_future_claim_timestamp_seconds{{routine="{_label(routine)}"}} '
                f"{_number(slot.timestamp())}"
            )
        family("trio_routines_clock_jumps_total", "counter", "Wall-clock jumps noticed.")
        lines.append(f"trio_routines_clock_jumps_total {clock_jumps}")
        family("trio_routines_in_flight", "gauge", "Fires and wake-up turns in flight.")
        lines.append(f"trio_routines_in_flight {in_flight}")
        family("trio_routines_armed_routines", "gauge", "Cron routines with a next slot.")
        lines.append(f"trio_routines_armed_routines {armed}")
        return "\n".join(lines) + "\n"
