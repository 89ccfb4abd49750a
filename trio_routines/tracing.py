"""Tracing with OpenTelemetry: a span per fire and per turn, the caller's context in and out.

Theory of operation. OpenTelemetry is an optional extra (``otel``: its API alone). Nothing
imports it until :func:`load` runs -- a scheduler's constructor calls it, and so does the first
traced call otherwise -- and then once: ``_trace`` becomes the API's ``opentelemetry.trace``, or
``None`` when the extra is absent. Spans go to the global tracer provider, so the host chooses
the SDK, the exporter and the sampler; this module only names things.

Tracing is *on* when a host set a provider: the API's default (a proxy until one is set) and
its no-op provider mean nobody listens. The fire path is hot (10,000 fires at once, see
benchmarks/), so a fire asks once (:func:`fire_spans` returns ``None`` when off: with the
extra absent, one global read) and each later step tests ``is None``: no span, no context, no
object per fire.

The spans. A cron fire is ``routine.fire`` with three children: ``claim`` (the paused read,
unless the timer made it for the whole herd before the fire began; the holds and the claim),
``turn`` and ``settle``. An external fire (``Scheduler.fire``,
``POST /fire``) is the child of the caller's context; the cron loop's own fires are roots (the
clock caused them, not whoever started the scheduler). A wake-up's turn is ``wakeup.turn``, a
root (its add request, ``wakeup.add``, is the caller's child: the context is not stored with
the wake-up); an on-demand run is ``routine.run``, the caller's child. A failed or
interrupted outcome is status ERROR with the reason.

Contexts in and out. The HTTP surface hands a request's ``traceparent`` and ``tracestate`` to
:func:`caller`, which checks them strictly (:mod:`.tracecontext`; anything else is ignored)
and makes them current for the handler -- unless a span is current already, a host's own
instrumentation's, which knows better. Whatever context is current while an agent is invoked
(the turn's span) goes out with the turn (:func:`outgoing`): the HTTP agent sends it as
``traceparent``, a ``cmd:`` agent gets ``TRACEPARENT``. A caller's context is carried on even
when tracing is off, through the API's non-recording spans (a service that does not trace
still passes it on), at no cost to the cron fires, which have none.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .instants import format_iso
from .records import Outcome
from .text import error_text
from .tracecontext import parse_traceparent, parse_tracestate

if TYPE_CHECKING:
    from .context import FireContext
    from .records import ClaimResult
    from .scheduler.state import FireResult
    from .turns import TurnResult

__all__ = ["FireSpans", "TurnSpan", "caller", "fire_spans", "load", "outgoing", "turn_span"]

TRACER_NAME = "trio_routines"
ROUTINE = "trio_routines.routine"
SLOT = "trio_routines.slot"
OUTCOME = "trio_routines.outcome"
REPLICA = "trio_routines.replica"
SESSION = "trio_routines.session"
WAKEUP = "trio_routines.wakeup"
CLAIM = "trio_routines.claim"

_UNLOADED: Any = object()
_trace: Any = _UNLOADED  # opentelemetry.trace once loaded; None: the extra is not installed
_context: Any = None  # opentelemetry.context
_root: Any = None  # an empty context: a root span's parent
_untraced_providers: tuple[type, ...] = ()
_noop: Any = None  # the API's no-op tracer: carries a caller's context when tracing is off
_provider: Any = None  # the global provider last seen, and our tracer from it (None: off)
_tracer: Any = None
_environment_names_provider: bool | None = None  # see _named_in_environment
_NOTHING = nullcontext()
_ERRORS = (Outcome.FAILED, Outcome.INTERRUPTED)


def load() -> bool:
    """Import the OpenTelemetry API, once; whether it is installed."""
    global _trace, _context, _root, _untraced_providers, _noop
    if _trace is _UNLOADED:
        try:
            from opentelemetry import context, trace
        except ImportError:
            _trace = None
            return False
        _context, _root, _noop = context, context.Context(), trace.NoOpTracer()
        _untraced_providers = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        _trace = trace
    return _trace is not None


def _active() -> Any:
    """Our tracer when a provider is set (tracing is on), else None. The API is loaded.

    While no provider is set, the API's ``get_tracer_provider`` looks the environment up for
    one on every call (a failed lookup: an exception); asked once per fire, that was most of
    what tracing off cost a fire. Its global is read first instead, where this version of the
    API keeps it: unset and no provider named in the environment means off, as the API's own
    answer (its proxy provider) would say.
    """
    global _provider, _tracer
    if getattr(_trace, "_TRACER_PROVIDER", _UNLOADED) is None and not _named_in_environment():
        return None
    provider = _trace.get_tracer_provider()
    if provider is not _provider:  # a host set one since: look it up once
        from . import __version__

        _provider = provider
        untraced = isinstance(provider, _untraced_providers)
        _tracer = None if untraced else provider.get_tracer(TRACER_NAME, __version__)
    return _tracer


def _named_in_environment() -> bool:
    """Whether the environment names a provider for the API to load (read once: the API loads
    it at its first call, and the variable is set before a process starts)."""
    global _environment_names_provider
    if _environment_names_provider is None:
        _environment_names_provider = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
    return _environment_names_provider


def _caller_tracer() -> Any:
    """The tracer for a span under the current context: ours when tracing is on, else the
    no-op one when a caller's context is current (to carry it on), else None."""
    tracer = _active()
    if tracer is None and _trace.get_current_span().get_span_context().is_valid:
        return _noop
    return tracer


def _failed(span: Any, reason: str) -> None:
    span.set_status(_trace.Status(_trace.StatusCode.ERROR, error_text(reason)))


def _raised(span: Any, exc: BaseException) -> None:
    if isinstance(exc, Exception):
        span.record_exception(exc)
    _failed(span, str(exc) or type(exc).__name__)


class FireSpans:
    """The spans of one cron fire: ``routine.fire``, and its ``claim``, ``turn``, ``settle``."""

    __slots__ = ("_claim", "_fire", "_settle", "context", "tracer")

    def __init__(
        self, tracer: Any, parent: Any, name: str, slot: datetime, replica: str | None
    ) -> None:
        attributes = {ROUTINE: name, SLOT: format_iso(slot)}
        if replica is not None:
            attributes[REPLICA] = replica
        self.tracer = tracer
        self._fire: Any = tracer.start_span("routine.fire", context=parent, attributes=attributes)
        #: The fire's span as a parent: its children's context.
        self.context = _trace.set_span_in_context(self._fire, parent)
        self._claim: Any = tracer.start_span("claim", context=self.context)
        self._settle: Any = None

    def claimed(self, claim: ClaimResult) -> None:
        """The claim's answer: its span ends."""
        self._claim.set_attribute(CLAIM, claim.status.value)
        self._claim.end()
        self._claim = None

    def settling(self) -> None:
        self._settle = self.tracer.start_span("settle", context=self.context)

    def done(self, result: FireResult) -> FireResult:
        """The fire's result: every span ends, the fire's with its outcome."""
        if self._fire is None:
            return result
        outcome = result.outcome.value if result.outcome is not None else result.reason
        if outcome is not None:
            self._fire.set_attribute(OUTCOME, outcome)
        if result.outcome in _ERRORS:
            _failed(self._fire, result.failed or result.outcome.value)
        self._end(None)
        return result

    def raised(self, exc: BaseException) -> None:
        """The fire raised ``exc`` (nothing claimed, or a bug): every span ends in error."""
        self._end(exc)

    def _end(self, exc: BaseException | None) -> None:
        for span in (self._claim, self._settle, self._fire):
            if span is not None:
                if exc is not None:
                    _raised(span, exc)
                span.end()
        self._claim = self._settle = self._fire = None  # ended once, whatever follows


def fire_spans(
    name: str, slot: datetime, replica: str | None, *, external: bool
) -> FireSpans | None:
    """The spans of a fire of ``slot``, started; None when it is not traced. ``external``: a
    caller's fire (its context is the parent), else the cron loop's (a root)."""
    if _trace is None or (_trace is _UNLOADED and not load()):
        return None
    if not external:
        tracer = _active()
        return None if tracer is None else FireSpans(tracer, _root, name, slot, replica)
    tracer = _caller_tracer()
    return None if tracer is None else FireSpans(tracer, None, name, slot, replica)


def done(spans: FireSpans | None, result: FireResult) -> FireResult:
    """``result``, after ending ``spans`` with it (when the fire is traced)."""
    return result if spans is None else spans.done(result)


class TurnSpan:
    """A turn's span: current while the agent runs (so it goes out with the turn), ended with
    the turn's outcome by :meth:`ended`, or in error by an exception leaving the block."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: Any) -> None:
        self._span = span
        self._token: Any = None

    def __enter__(self) -> None:
        if self._span is not None:
            self._token = _context.attach(_trace.set_span_in_context(self._span))

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if self._span is None:
            return
        _context.detach(self._token)
        if exc is not None:
            _raised(self._span, exc)
            self._span.end()

    def ended(self, turn: TurnResult) -> None:
        if self._span is None:
            return
        self._span.set_attribute(OUTCOME, turn.outcome.value)
        if turn.outcome in _ERRORS:
            _failed(self._span, turn.failed or turn.outcome.value)
        self._span.end()


UNTRACED = TurnSpan(None)  # shared: it holds nothing


def turn_span(why: FireContext, fire: FireSpans | None) -> TurnSpan:
    """The span of a turn started for ``why``: a child of ``fire`` (a cron fire's), a root
    ``wakeup.turn``, or a ``routine.run`` under the caller's context; or :data:`UNTRACED`."""
    if fire is not None:
        tracer, parent, name = fire.tracer, fire.context, "turn"
    elif why.kind == "routine" or _trace is None or (_trace is _UNLOADED and not load()):
        return UNTRACED
    elif why.kind == "wakeup":
        tracer, parent, name = _active(), _root, "wakeup.turn"
    else:
        tracer, parent, name = _caller_tracer(), None, "routine.run"
    if tracer is None:
        return UNTRACED
    attributes = {SESSION: why.session}
    if why.routine is not None:
        attributes[ROUTINE] = why.routine
    if why.wakeup is not None:
        attributes[WAKEUP] = why.wakeup
    if why.replica is not None:
        attributes[REPLICA] = why.replica
    return TurnSpan(tracer.start_span(name, context=parent, attributes=attributes))


class _Step:
    """A short span current for a block, ended with it (in error if the block raised)."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: Any) -> None:
        self._span = span

    def __enter__(self) -> Any:
        self._token = _context.attach(_trace.set_span_in_context(self._span))
        return self._span

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        _context.detach(self._token)
        if exc is not None:
            _raised(self._span, exc)
        self._span.end()


def step(name: str, attributes: Mapping[str, str]) -> AbstractContextManager[Any]:
    """A span ``name`` under the current context for the block; what it yields takes
    ``set_attribute`` (None when not traced)."""
    if _trace is None or (_trace is _UNLOADED and not load()):
        return _NOTHING
    tracer = _caller_tracer()
    if tracer is None:
        return _NOTHING
    return _Step(tracer.start_span(name, attributes=dict(attributes)))


class _Attached:
    __slots__ = ("_context", "_token")

    def __init__(self, context: Any) -> None:
        self._context = context

    def __enter__(self) -> None:
        self._token = _context.attach(self._context)

    def __exit__(self, *exc_info: object) -> None:
        _context.detach(self._token)


def caller(
    traceparent: Sequence[bytes], tracestate: Sequence[bytes]
) -> AbstractContextManager[None]:
    """Make a request's W3C context current for the block: its ``traceparent`` and
    ``tracestate`` header values, checked (:mod:`.tracecontext`); nothing when they are
    invalid, absent, a span is current already, or the extra is not installed."""
    if not traceparent or _trace is None or (_trace is _UNLOADED and not load()):
        return _NOTHING
    parent = parse_traceparent([value.decode("latin-1") for value in traceparent])
    if parent is None or _trace.get_current_span().get_span_context().is_valid:
        return _NOTHING
    state = parse_tracestate([value.decode("latin-1") for value in tracestate]) or ()
    trace_id, span_id, flags = parent
    span_context = _trace.SpanContext(
        trace_id,
        span_id,
        is_remote=True,
        trace_flags=_trace.TraceFlags(flags),
        trace_state=_trace.TraceState(list(state)),
    )
    return _Attached(_trace.set_span_in_context(_trace.NonRecordingSpan(span_context)))


def outgoing() -> dict[str, str]:
    """The current context as W3C headers (``traceparent``, and ``tracestate`` when it has
    one), for a turn's agent; empty when there is none or the extra is not installed."""
    if _trace is None or (_trace is _UNLOADED and not load()):
        return {}
    found = _trace.get_current_span().get_span_context()
    if not found.is_valid:
        return {}
    headers = {
        "traceparent": f"00-{found.trace_id:032x}-{found.span_id:016x}-{found.trace_flags:02x}"
    }
    state = found.trace_state.to_header()
    if state:
        headers["tracestate"] = state
    return headers
