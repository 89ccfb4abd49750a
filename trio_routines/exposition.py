"""The text exposition format of Prometheus (0.0.4), with no dependency: the series as values
(:class:`Family`, :class:`Sample`) and :func:`render`, which writes them for ``GET /metrics``.
What the series are is :mod:`trio_routines.metrics`'s."""

from __future__ import annotations

import math

import attrs

Labels = tuple[tuple[str, str], ...]


@attrs.frozen
class Sample:
    """One line of a family: its full name (with ``_total``, ``_bucket``, ...), labels, value."""

    name: str
    labels: Labels
    value: float


@attrs.frozen
class Family:
    """One metric: ``name`` without the ``_total`` of a counter, its type and help text."""

    name: str
    kind: str  # "counter", "gauge" or "histogram"
    help: str
    samples: tuple[Sample, ...]


def number(value: float) -> str:
    """A sample's value, or a bucket's bound, as the format writes it."""
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    return repr(float(value)) if value % 1 else str(int(value))


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def render(families: list[Family]) -> str:
    """The text exposition format (0.0.4): ``# HELP`` and ``# TYPE`` before every family."""
    lines: list[str] = []
    for family in families:
        shown = family.name + "_total" if family.kind == "counter" else family.name
        lines.append(f"# HELP {shown} {_help(family.help)}")
        lines.append(f"# TYPE {shown} {family.kind}")
        for sample in family.samples:
            labels = ",".join(f'{key}="{_label(value)}"' for key, value in sample.labels)
            lines.append(
                f"{sample.name}{{{labels}}} {number(sample.value)}"
                if labels
                else f"{sample.name} {number(sample.value)}"
            )
    return "\n".join(lines) + "\n"
