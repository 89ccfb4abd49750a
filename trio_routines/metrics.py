"""The runtime's metrics: one set of series, written as Prometheus text or handed to a client.

The runtime records what happens to each fire -- its outcome, its turn's duration, how late it
started behind its slot, when a routine last succeeded -- and every refused claim, restarted
loop, lost settle and clock jump. :meth:`Metrics.families` turns that, plus a snapshot of the
scheduler, into :class:`Family` values (name, type, help, samples); both ways out are made
from them, so they cannot disagree: :func:`render` (:mod:`trio_routines.exposition`, the
format's own layer) writes the text exposition format (0.0.4) for ``GET /metrics`` with no
dependency, and :mod:`trio_routines.prometheus` (the ``metrics`` extra) hands the same
families to a host's ``prometheus_client`` registry.
"""

from __future__ import annotations

import bisect
import itertools
from array import array
from collections import Counter, defaultdict
from collections.abc import Collection, Iterator, Mapping
from datetime import datetime
from typing import Any

from .exposition import Family, Labels, Sample, number, render
from .records import Outcome

__all__ = ["Family", "Histograms", "Labels", "Metrics", "Sample", "render"]

#: Bucket bounds in seconds for turn durations and for lateness behind the slot.
DURATION_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)
LATENESS_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 60.0, 300.0)
PREFIX = "trio_routines_"
_OUTCOMES = tuple(outcome.value for outcome in Outcome)


class Histograms:
    """A histogram per routine over ``bounds``, as one array of floats: a count per bound and
    one past the last (+Inf's own, never shown), the sum, the count (exact up to 2**53). Not an
    object holding a list: every routine that fired keeps two, and every full collection walks
    them (at 10,000, 40,000 objects for 20,000 arrays, which hold no references to visit)."""

    __slots__ = ("_by_routine", "_empty", "bounds")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self._empty = array("d", bytes(8 * (len(bounds) + 3)))
        self._by_routine: dict[str, array[float]] = {}

    def observe(self, routine: str, value: float) -> None:
        histogram = self._by_routine.get(routine)  # the samples make the counts cumulative
        if histogram is None:
            histogram = self._by_routine[routine] = array("d", self._empty)
        histogram[bisect.bisect_left(self.bounds, value)] += 1
        histogram[-2] += value
        histogram[-1] += 1

    def samples(self, name: str) -> Iterator[Sample]:
        """Each routine's buckets (cumulative), sum and count, by routine name."""
        bounds = self.bounds
        for routine, histogram in sorted(self._by_routine.items()):
            labels = _routine(routine)
            counts = histogram[: len(bounds)]
            for bound, count in zip(bounds, itertools.accumulate(counts), strict=True):
                yield Sample(f"{name}_bucket", (*labels, ("le", number(bound))), int(count))
            total = int(histogram[-1])
            yield Sample(f"{name}_bucket", (*labels, ("le", "+Inf")), total)
            yield Sample(f"{name}_sum", labels, histogram[-2])
            yield Sample(f"{name}_count", labels, total)


def _routine(name: str) -> Labels:
    return (("routine", name),)


def _by_loop(item: tuple[tuple[str, str | None], int]) -> tuple[str, str]:
    """A restart count's place: by loop, then routine, like every other family's samples (a
    loop of no routine sorts as an empty name, never compared with ``None``)."""
    (loop, owner), _ = item
    return loop, owner or ""


class Metrics:
    """What the runtime counts; one per :class:`~trio_routines.Scheduler`."""

    def __init__(self) -> None:
        self.fires: Counter[tuple[str, str]] = Counter()
        self.refused: Counter[tuple[str, str]] = Counter()
        self.restarts: Counter[tuple[str, str | None]] = Counter()
        self.settle_failures: Counter[str] = Counter()
        self.missed: Counter[tuple[str, str]] = Counter()
        self.failing: dict[str, int] = {}  # consecutive failed or interrupted outcomes
        self.last_success: dict[str, datetime] = {}
        self.durations = Histograms(DURATION_BUCKETS)
        self.lateness = Histograms(LATENESS_BUCKETS)
        #: Tokens by (routine, "in" or "out"), costs by (routine, currency); "" for wake-ups.
        self.tokens: Counter[tuple[str, str]] = Counter()
        self.costs: defaultdict[tuple[str, str], float] = defaultdict(float)
        #: Turns not started over budget, by routine ("" for wake-ups).
        self.over_budget: Counter[str] = Counter()

    def fired(
        self, routine: str, outcome: str, ms: int, late: float, at: datetime | None = None
    ) -> None:
        """A claimed slot settled with ``outcome`` after ``ms`` at ``at``; its turn began
        ``late`` s late."""
        self.fires[routine, outcome] += 1
        if outcome == "completed":
            self.failing[routine] = 0
            if at is not None:
                self.succeeded(routine, at)
        elif outcome in ("failed", "interrupted"):
            self.failing[routine] = self.failing.get(routine, 0) + 1
        self.durations.observe(routine, ms / 1000)
        self.lateness.observe(routine, late if late > 0.0 else 0.0)

    def found_interrupted(
        self, routine: str, streak: tuple[int, datetime | None] | None = None
    ) -> None:
        """A claimed slot whose turn died with its process (this one's before a restart, or
        another replica's) was recorded ``interrupted`` here: counted as a fire of that
        outcome. ``streak``: the routine's failures since its newest completed turn and that
        turn's end, as its history reads with this record in it (the newest claim's; an older
        one found open leaves the streak as it was). Of several replicas that find one dead at
        once, only the one whose record landed counts it (``scheduler/openclaims.py``)."""
        self.fires[routine, "interrupted"] += 1
        if streak is not None:
            failing, success = streak
            self.failing[routine] = failing
            if success is not None:
                self.succeeded(routine, success)

    def tally(self, routine: str) -> int:
        """How many outcomes of ``routine`` were counted (a change says a fire was counted)."""
        fires = self.fires
        return sum(fires.get((routine, outcome), 0) for outcome in _OUTCOMES)

    def streak_read(
        self, routine: str, failing: int, success: datetime | None, *, oldest: datetime | None
    ) -> None:
        """``routine``'s failures in a row and its last success as its history reads them, in
        place of what a boot seeded from its newest claim: ``failing`` since its newest
        completed turn, which ended at ``success``. With none retained, the last success
        reads ``oldest`` (the oldest claim's slot; None: shown only once one is known), or
        the older instant known already."""
        self.failing[routine] = failing
        if success is not None:
            self.last_success[routine] = success
        elif oldest is not None:
            self.known_since(routine, oldest)

    def succeeded(self, routine: str, at: datetime) -> None:
        """``routine`` last completed a claimed slot at ``at`` (also seeded at boot)."""
        if routine not in self.last_success or self.last_success[routine] < at:
            self.last_success[routine] = at

    def armed(self, routine: str, at: datetime, failing: int = 0) -> None:
        """``routine`` is armed, failing for ``failing`` runs: its series exist from now on.

        With no success known, the last success reads ``at`` (the oldest instant known of it),
        so "no success for a day" fires for a routine that never completed, too.
        """
        self.last_success.setdefault(routine, at)
        self.failing.setdefault(routine, failing)

    def known_since(self, routine: str, at: datetime) -> None:
        """``routine`` was first armed at ``at``: with no claim of it, the oldest instant known
        (so "no success for a day" counts across restarts, not from the latest boot)."""
        if routine not in self.last_success or at < self.last_success[routine]:
            self.last_success[routine] = at

    def refuse(self, routine: str, reason: str) -> None:
        self.refused[routine, reason] += 1

    def slots_missed(self, routine: str, reason: str, count: int) -> None:
        """``count`` slots of ``routine`` were passed over, recorded as a gap with ``reason``."""
        self.missed[routine, reason] += count

    def spent(
        self,
        routine: str,
        input_tokens: int | None,
        output_tokens: int | None,
        cost: float | None,
        currency: str | None,
    ) -> None:
        """A turn of ``routine`` (``""``: a wake-up's) reported what it spent."""
        if input_tokens:
            self.tokens[routine, "in"] += input_tokens
        if output_tokens:
            self.tokens[routine, "out"] += output_tokens
        if cost is not None and currency:
            self.costs[routine, currency] += cost

    def budget_stopped(self, routine: str) -> None:
        """A turn of ``routine`` (``""``: a wake-up's) was not started: over its budget."""
        self.over_budget[routine] += 1

    def restarted(self, loop: str, routine: str | None) -> None:
        """A loop (``cron`` of ``routine``, ``wake`` or ``clock``) died and was restarted."""
        self.restarts[loop, routine] += 1

    def settle_failed(self, routine: str) -> None:
        """An outcome that could not be written, retries included: the claim stays open."""
        self.settle_failures[routine] += 1

    def families(
        self,
        *,
        in_flight: int,
        armed: int,
        clock_jumps: int,
        future_claims: Mapping[str, datetime] | None = None,
        next_due: Mapping[str, datetime | None] | None = None,
        paused: Collection[str] = (),
        kept_broken: Collection[str] = (),
        broken: Collection[str] = (),
        pending_wakeups: int | None = None,
        loaded: Collection[str] | None = None,
    ) -> list[Family]:
        """Every series, with the scheduler's snapshot given as arguments. ``loaded``: the
        routines loaded now (None: all counted); a routine's gauges of its successes, its
        failures and its pause are shown only while it is loaded, so that the alerts on them
        end with a reload that removes it (its counters stay: they only ever grow; its pause
        stays in the store, and shows again if it comes back)."""
        last_success, failing = self.last_success, self.failing
        if loaded is not None:
            last_success = {r: at for r, at in last_success.items() if r in loaded}
            failing = {r: n for r, n in failing.items() if r in loaded}
            paused = [r for r in paused if r in loaded]

        def counter(name: str, text: str, samples: Iterator[Sample]) -> Family:
            return Family(PREFIX + name, "counter", text, tuple(samples))

        def gauge(name: str, text: str, samples: Iterator[Sample]) -> Family:
            return Family(PREFIX + name, "gauge", text, tuple(samples))

        def per_routine(name: str, values: Mapping[str, datetime | None]) -> Iterator[Sample]:
            for routine, when in sorted(values.items()):
                if when is not None:
                    yield Sample(PREFIX + name, _routine(routine), when.timestamp())

        fires = PREFIX + "fires_total"
        refused = PREFIX + "claims_refused_total"
        restarts = PREFIX + "loop_restarts_total"
        missed = PREFIX + "slots_missed_total"
        settles = PREFIX + "settle_failures_total"
        found = [
            counter(
                "fires",
                "Claimed slots by routine and outcome.",
                (
                    Sample(fires, (("routine", r), ("outcome", o)), n)
                    for (r, o), n in sorted(self.fires.items())
                ),
            ),
            counter(
                "claims_refused",
                "Slots not claimed, by routine and reason (duplicate, stale or paused).",
                (
                    Sample(refused, (("routine", r), ("reason", why)), n)
                    for (r, why), n in sorted(self.refused.items())
                ),
            ),
            counter(
                "slots_missed",
                "Slots passed over (never claimed), by routine and reason (overlap, down, "
                "paused, caught-up, late, store, removed): the gaps this scheduler recorded.",
                (
                    Sample(missed, (("routine", r), ("reason", why)), n)
                    for (r, why), n in sorted(self.missed.items())
                ),
            ),
        ]
        for name, text, histograms in (
            ("turn_seconds", "Turn duration of claimed slots.", self.durations),
            (
                "lateness_seconds",
                "How late a claimed slot's turn began behind the slot.",
                self.lateness,
            ),
        ):
            found.append(
                Family(PREFIX + name, "histogram", text, tuple(histograms.samples(PREFIX + name)))
            )
        found += [
            counter(
                "loop_restarts",
                "Loops restarted after an unexpected exception (cron by routine, wake, clock).",
                (
                    Sample(
                        restarts,
                        (("loop", loop),) + (() if owner is None else _routine(owner)),
                        n,
                    )
                    for (loop, owner), n in sorted(self.restarts.items(), key=_by_loop)
                ),
            ),
            counter(
                "tokens",
                "Tokens the agent reported its turns spent, by routine (empty for wake-up "
                "turns) and direction (in, out).",
                (
                    Sample(PREFIX + "tokens_total", (("routine", r), ("direction", d)), n)
                    for (r, d), n in sorted(self.tokens.items())
                ),
            ),
            counter(
                "cost",
                "Cost the agent reported its turns spent, by routine (empty for wake-up turns) "
                "and currency.",
                (
                    Sample(PREFIX + "cost_total", (("routine", r), ("currency", c)), n)
                    for (r, c), n in sorted(self.costs.items())
                ),
            ),
            counter(
                "over_budget",
                "Turns not started because their budget was spent, by routine (empty for "
                "wake-up turns).",
                (
                    Sample(PREFIX + "over_budget_total", _routine(r), n)
                    for r, n in sorted(self.over_budget.items())
                ),
            ),
            counter(
                "settle_failures",
                "Outcomes lost: the store could not record them within the settle's retries.",
                (Sample(settles, _routine(r), n) for r, n in sorted(self.settle_failures.items())),
            ),
            gauge(
                "last_success_timestamp_seconds",
                "When a routine last completed a claimed slot (Unix time; seeded at boot from "
                "its claims). Before any success is known: the oldest instant known of it (its "
                "oldest claim, or when it was first armed here), so the series exists.",
                per_routine("last_success_timestamp_seconds", last_success),
            ),
            gauge(
                "consecutive_failures",
                "Claimed slots that ended failed or interrupted since the routine last "
                "completed one (skipped ones do not count; seeded at boot from its claims).",
                (
                    Sample(PREFIX + "consecutive_failures", _routine(r), n)
                    for r, n in sorted(failing.items())
                ),
            ),
            gauge(
                "routine_paused",
                "1 for each loaded routine paused in the store (it claims none).",
                (Sample(PREFIX + "routine_paused", _routine(r), 1) for r in sorted(paused)),
            ),
            gauge(
                "routine_files_kept_broken",
                "Routine files a reload could not load, whose previous version still runs.",
                iter([Sample(PREFIX + "routine_files_kept_broken", (), len(kept_broken))]),
            ),
            gauge(
                "routine_files_broken",
                "Routine files the last reload could not load, skipped or their previous "
                "version kept: the next start refuses them.",
                iter([Sample(PREFIX + "routine_files_broken", (), len(broken))]),
            ),
            gauge(
                "pending_wakeups",
                "Wake-ups pending in the store (re-read every few polls of the wake loop).",
                iter(
                    []
                    if pending_wakeups is None
                    else [Sample(PREFIX + "pending_wakeups", (), pending_wakeups)]
                ),
            ),
            gauge(
                "next_fire_timestamp_seconds",
                "The next slot an armed routine will fire (Unix time).",
                per_routine("next_fire_timestamp_seconds", next_due or {}),
            ),
            gauge(
                "future_claim_timestamp_seconds",
                "A routine's newest claim, when it lies in the future (a clock that ran ahead): "
                "nothing fires before the first slot after it.",
                per_routine("future_claim_timestamp_seconds", future_claims or {}),
            ),
            counter(
                "clock_jumps",
                "Wall-clock jumps noticed.",
                iter([Sample(PREFIX + "clock_jumps_total", (), clock_jumps)]),
            ),
            gauge(
                "in_flight",
                "Fires and wake-up turns in flight.",
                iter([Sample(PREFIX + "in_flight", (), in_flight)]),
            ),
            gauge(
                "armed_routines",
                "Cron routines with a next slot.",
                iter([Sample(PREFIX + "armed_routines", (), armed)]),
            ),
        ]
        return found

    def render(self, **snapshot: Any) -> str:
        """:func:`render` of :meth:`families` (same arguments)."""
        return render(self.families(**snapshot))
