"""The runtime's series pinned whole (metrics.py): the exposition of every family, line by line,
and what each call counts into them (see docs/mutation.md)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from prometheus_client.parser import text_string_to_metric_families

from trio_routines.metrics import Family, Metrics, Sample, render

T0 = datetime(2026, 7, 7, 7, tzinfo=UTC)  # 1783407600 in Unix time
HOUR = timedelta(hours=1)
QUIET = {"in_flight": 0, "armed": 0, "clock_jumps": 0}


def values(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of every family: (name, labels) -> value."""
    return {
        (sample.name, sample.labels): sample.value
        for family in metrics.families(**QUIET)
        for sample in family.samples
    }


def lines_of(metrics: Metrics, name: str) -> list[str]:
    return [line for line in metrics.render(**QUIET).splitlines() if line.startswith(name)]


def test_restarts_and_lost_settles_add_up_and_restarts_are_listed_by_loop_then_routine() -> None:
    metrics = Metrics()
    for loop, routine in [
        ("wake", None),
        ("cron", "b"),
        ("cron", "a b"),
        ("clock", None),
        ("cron", "a"),
        ("clock", None),
    ]:
        metrics.restarted(loop, routine)
    metrics.settle_failed("r")
    metrics.settle_failed("r")
    # Ordered as every other family: by name, "a" before "a b" (a loop of no routine has none).
    assert lines_of(metrics, "trio_routines_loop_restarts_total") == [
        'trio_routines_loop_restarts_total{loop="clock"} 2',
        'trio_routines_loop_restarts_total{loop="cron",routine="a"} 1',
        'trio_routines_loop_restarts_total{loop="cron",routine="a b"} 1',
        'trio_routines_loop_restarts_total{loop="cron",routine="b"} 1',
        'trio_routines_loop_restarts_total{loop="wake"} 1',
    ]
    assert lines_of(metrics, "trio_routines_settle_failures_total") == [
        'trio_routines_settle_failures_total{routine="r"} 2'
    ]
    # A loop counted both with and without a routine (the runtime never does): listed still,
    # the one without first.
    metrics.restarted("wake", "r")
    assert lines_of(metrics, 'trio_routines_loop_restarts_total{loop="wake"') == [
        'trio_routines_loop_restarts_total{loop="wake"} 1',
        'trio_routines_loop_restarts_total{loop="wake",routine="r"} 1',
    ]


def test_render_escapes_help_and_labels_and_writes_every_kind_of_number() -> None:
    help_text = 'a back\\slash, a "quote"\nand a second line'
    family = Family(
        "x",
        "gauge",
        help_text,
        (
            Sample("x", (("k", 'quo"te\\\n'),), 2.0),
            Sample("x", (("k", "fraction"),), 0.125),
            Sample("x", (("k", "up"),), math.inf),
            Sample("x", (("k", "down"),), -math.inf),
            Sample("x", (("k", "negative"),), -3.0),
            Sample("x", (), 1e20),
        ),
    )
    text = render([family])
    assert text == (
        '# HELP x a back\\\\slash, a "quote"\\nand a second line\n'
        "# TYPE x gauge\n"
        'x{k="quo\\"te\\\\\\n"} 2\n'
        'x{k="fraction"} 0.125\n'
        'x{k="up"} +Inf\n'
        'x{k="down"} -Inf\n'
        'x{k="negative"} -3\n'
        "x 100000000000000000000\n"
    )
    # A client's parser reads back what was written.
    [parsed] = text_string_to_metric_families(text)
    assert parsed.documentation == help_text
    assert [(s.labels, s.value) for s in parsed.samples] == [
        ({"k": 'quo"te\\\n'}, 2.0),
        ({"k": "fraction"}, 0.125),
        ({"k": "up"}, math.inf),
        ({"k": "down"}, -math.inf),
        ({"k": "negative"}, -3.0),
        ({}, 1e20),
    ]
