"""The W3C Trace Context headers, ``traceparent`` and ``tracestate``: strict parsing.

A pure core: no OpenTelemetry, no IO (the spans are :mod:`trio_routines.tracing`'s). What a
caller sends is untrusted text, so each header is checked here, in one place, against the
W3C format, and anything else is ``None``: the caller's context is then ignored, never an
error, and its text is never logged (it is the caller's, of any length or content).

* ``traceparent``: ``<version>-<trace-id>-<parent-id>-<flags>``, lowercase hex of 2, 32, 16 and
  2 digits; version ``ff`` is invalid, and ids of all zeros are. Version ``00`` is exactly 55
  characters; a higher version may carry more after a dash, which is not read (the spec's
  forward compatibility: parse what version ``00`` defines). A repeated header is invalid.
* ``tracestate``: comma-separated ``key=value`` members (empty ones skipped), keys and values as
  the spec spells them, at most 32 members, no key twice. An invalid ``tracestate`` is dropped
  whole; the ``traceparent`` beside it still counts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["MAX_LENGTH", "MAX_MEMBERS", "TraceParent", "parse_traceparent", "parse_tracestate"]

#: Characters of one header read at most (the spec asks for 512 of ``tracestate`` kept).
MAX_LENGTH = 4096
#: Members of a ``tracestate`` at most (the spec's limit).
MAX_MEMBERS = 32

#: ``(trace id, parent span id, flags)``, as the integers OpenTelemetry's ``SpanContext`` takes.
TraceParent = tuple[int, int, int]

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_KEY_CHARS = r"[a-z0-9_\-*/]"
_KEY = rf"(?:[a-z]{_KEY_CHARS}{{0,255}}|[a-z0-9]{_KEY_CHARS}{{0,240}}@[a-z]{_KEY_CHARS}{{0,13}})"
# Printable ASCII but comma and equals sign; blanks inside, never at the end.
_VALUE = r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
_MEMBER = re.compile(rf"({_KEY})=({_VALUE})")
_OWS = " \t"


def parse_traceparent(values: Sequence[str]) -> TraceParent | None:
    """The one ``traceparent`` header among ``values`` (each header line's value), or None."""
    if len(values) != 1:
        return None
    value = values[0].strip(_OWS)
    if len(value) > MAX_LENGTH:
        return None
    match = _TRACEPARENT.match(value)
    if match is None:
        return None
    version, trace_id, span_id, flags = match.groups()
    if version == "ff" or (version == "00" and len(value) != 55):
        return None
    if len(value) > 55 and value[55] != "-":
        return None
    trace, span = int(trace_id, 16), int(span_id, 16)
    if not trace or not span:
        return None
    return trace, span, int(flags, 16)


def parse_tracestate(values: Sequence[str]) -> tuple[tuple[str, str], ...] | None:
    """The ``tracestate`` members of ``values`` (header lines, joined as one list), in order;
    ``()`` when there are none, ``None`` when the header is invalid."""
    if sum(len(value) for value in values) > MAX_LENGTH:
        return None
    members: list[tuple[str, str]] = []
    for value in values:
        for item in value.split(","):
            item = item.strip(_OWS)
            if not item:
                continue
            match = _MEMBER.fullmatch(item)
            if match is None:
                return None
            members.append((match[1], match[2]))
    keys = {key for key, _ in members}
    if len(members) > MAX_MEMBERS or len(keys) != len(members):
        return None
    return tuple(members)
