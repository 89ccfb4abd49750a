"""The runtime's series in a host's ``prometheus_client`` registry (the ``metrics`` extra).

A host that already serves ``prometheus_client`` metrics gets ours in the same scrape::

    from trio_routines.prometheus import register
    register(scheduler)  # the default registry; or register(scheduler, my_registry)

The collector reads :meth:`~trio_routines.Scheduler.metric_families` at every scrape: the same
families, help texts and samples as ``GET /metrics`` (which needs no client library).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import REGISTRY, CollectorRegistry

from .scheduler import Scheduler


class Collector:
    """A ``prometheus_client`` collector over one scheduler's series."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def describe(self) -> Iterator[Metric]:
        """The families without their samples: the names the registry checks when the
        collector is registered, so that a second registration of them is refused."""
        for family in self.scheduler.metric_families():
            yield Metric(family.name, family.help, family.kind)

    def collect(self) -> Iterator[Metric]:
        """The scheduler's families, read now (``prometheus_client`` calls it per scrape)."""
        for family in self.scheduler.metric_families():
            metric = Metric(family.name, family.help, family.kind)
            for sample in family.samples:
                metric.add_sample(sample.name, dict(sample.labels), sample.value)
            yield metric


def register(scheduler: Scheduler, registry: CollectorRegistry = REGISTRY) -> Collector:
    """Add ``scheduler``'s series to ``registry`` (the default one unless given); returns the
    collector, for ``registry.unregister``. A registry that holds any of those series already
    (this scheduler's, registered twice, or another's) refuses them: ``prometheus_client``'s
    ValueError."""
    collector = Collector(scheduler)
    registry.register(collector)
    return collector
