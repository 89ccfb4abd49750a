"""Tracing's edges, called directly (tests/test_tracing.py runs the spans through a scheduler
and the HTTP surface): the API loaded at the first call, absent, or keeping its provider where
this version does not; a provider looked up once, and never while none is set; the no-op
provider; an exception leaving a turn or a step; a caller's context current only inside its
block; the tracer's name and version; a cron fire's children cut off from the context it
started in.

Each test sets its own provider (the SDK's, with an in-memory exporter) for itself alone, as
tests/test_tracing.py does, and puts tracing's state back afterwards.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import pytest
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from span_rig import recorded_spans

import trio_routines
from trio_routines import Outcome, tracing
from trio_routines.context import FireContext
from trio_routines.scheduler.state import FireResult
from trio_routines.turns import TurnResult

SLOT = datetime(2026, 7, 7, 11, 0, tzinfo=UTC)
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{CALLER}-01".encode()
WAKEUP = FireContext("wakeup", "chat:42", wakeup="w-1", replica="r-1")
RUN = FireContext("run", "routine:adhoc", routine="adhoc")
COMPLETED = FireResult("hourly", SLOT, True, outcome=Outcome.COMPLETED, ms=5)


@pytest.fixture(autouse=True)
def state(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tracing's globals as they are, put back after the test; no provider in the environment."""
    for name in (
        "_trace",
        "_context",
        "_root",
        "_untraced_providers",
        "_noop",
        "_provider",
        "_tracer",
        "_environment_names_provider",
    ):
        monkeypatch.setattr(tracing, name, getattr(tracing, name))
    monkeypatch.delenv("OTEL_PYTHON_TRACER_PROVIDER", raising=False)
    monkeypatch.setattr(tracing, "_environment_names_provider", None)
    assert tracing.load()


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    """The spans ended under the SDK's provider, set for this test."""
    return recorded_spans(monkeypatch)


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    found = trace.get_tracer_provider()
    assert isinstance(found, TracerProvider)
    return found


def names(exporter: InMemorySpanExporter) -> list[str]:
    return [span.name for span in exporter.get_finished_spans()]


def use_every_call() -> list[object]:
    """What each entry point gives for a cron fire, a wake-up's turn, a run, a step, a caller's
    context and the context going out (a caller's context current for the last four)."""
    given: list[object] = [
        tracing.fire_spans("hourly", SLOT, None, external=False),
        tracing.turn_span(WAKEUP, None),
    ]
    with tracing.caller([TRACEPARENT], []) as entered:
        given.append(entered)
        given.append(tracing.fire_spans("hourly", SLOT, None, external=True))
        given.append(tracing.turn_span(RUN, None))
        with tracing.step("wakeup.add", {}) as step:
            given.append(step)
        given.append(tracing.outgoing())
    return given


# --- the API: loaded at the first call, or absent ------------------------------------------------


@pytest.mark.parametrize("first", ["fire", "turn", "step", "caller", "outgoing"])
def test_the_first_call_of_any_entry_point_loads_the_api(
    monkeypatch: pytest.MonkeyPatch, exporter: InMemorySpanExporter, first: str
) -> None:
    monkeypatch.setattr(tracing, "_trace", tracing._UNLOADED)
    if first == "fire":
        spans = tracing.fire_spans("hourly", SLOT, None, external=False)
        assert spans is not None
        spans.done(COMPLETED)
        assert names(exporter) == ["claim", "routine.fire"]
    elif first == "turn":
        turn = tracing.turn_span(WAKEUP, None)
        turn.ended(TurnResult(Outcome.COMPLETED, 5))
        assert names(exporter) == ["wakeup.turn"]
    elif first == "step":
        with tracing.step("wakeup.add", {}) as span:
            assert span is not None
        assert names(exporter) == ["wakeup.add"]
    elif first == "caller":
        with tracing.caller([TRACEPARENT], []):
            assert tracing._trace is trace
            assert f"{trace.get_current_span().get_span_context().trace_id:032x}" == TRACE
    else:
        caller = trace.SpanContext(int(TRACE, 16), int(CALLER, 16), True, trace.TraceFlags(1))
        with trace.use_span(trace.NonRecordingSpan(caller)):
            assert tracing.outgoing() == {"traceparent": TRACEPARENT.decode()}
    assert tracing._trace is trace
    assert tracing.load() is True


def test_the_api_loaded_afresh_traces_under_the_provider_set(
    monkeypatch: pytest.MonkeyPatch, exporter: InMemorySpanExporter
) -> None:
    monkeypatch.setattr(tracing, "_trace", tracing._UNLOADED)
    monkeypatch.setattr(tracing, "_untraced_providers", ())
    monkeypatch.setattr(tracing, "_provider", None)
    assert tracing.load() is True
    assert tracing.load() is True  # once loaded, loaded
    given = use_every_call()
    assert given[0] is not None
    assert given[1] is not tracing.UNTRACED
    # The no-op provider is known again: nothing is traced under it.
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", trace.NoOpTracerProvider())
    assert tracing.fire_spans("hourly", SLOT, None, external=False) is None


def test_without_the_api_every_entry_point_does_nothing(
    monkeypatch: pytest.MonkeyPatch, exporter: InMemorySpanExporter
) -> None:
    monkeypatch.setattr(tracing, "_trace", tracing._UNLOADED)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if the extra were absent
    assert tracing.load() is False
    assert tracing.load() is False  # asked once
    assert use_every_call() == [None, tracing.UNTRACED, None, None, tracing.UNTRACED, None, {}]
    assert exporter.get_finished_spans() == ()


# --- when tracing is on: the provider, looked up once ------------------------------------------


def test_with_no_provider_set_the_api_is_not_asked_for_one(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[object] = []

    def get_tracer_provider() -> object:
        asked.append(None)
        return trace.ProxyTracerProvider()

    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    monkeypatch.setattr(trace, "get_tracer_provider", get_tracer_provider)
    assert tracing.fire_spans("hourly", SLOT, None, external=False) is None
    assert tracing.turn_span(WAKEUP, None) is tracing.UNTRACED
    assert asked == []


def test_a_provider_named_in_the_environment_is_asked_for(
    monkeypatch: pytest.MonkeyPatch, provider: TracerProvider
) -> None:
    # The API loads a provider named in the environment at its first call; here the stand-in
    # for that call hands over the SDK's.
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    monkeypatch.setenv("OTEL_PYTHON_TRACER_PROVIDER", "sdk_tracer_provider")
    assert tracing._named_in_environment() is True
    monkeypatch.delenv("OTEL_PYTHON_TRACER_PROVIDER")
    assert tracing._named_in_environment() is True  # read once: set before a process starts
    assert tracing.fire_spans("hourly", SLOT, None, external=False) is not None


def test_no_provider_named_in_the_environment_is_read_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert tracing._named_in_environment() is False
    monkeypatch.setenv("OTEL_PYTHON_TRACER_PROVIDER", "sdk_tracer_provider")
    assert tracing._named_in_environment() is False


def test_an_api_that_keeps_its_provider_elsewhere_is_asked_for_it(
    monkeypatch: pytest.MonkeyPatch, exporter: InMemorySpanExporter
) -> None:
    class Elsewhere:
        """The API, but its global provider under another name (another version of it)."""

        def __getattr__(self, name: str) -> Any:
            if name == "_TRACER_PROVIDER":
                raise AttributeError(name)
            return getattr(trace, name)

    monkeypatch.setattr(tracing, "_trace", Elsewhere())
    spans = tracing.fire_spans("hourly", SLOT, None, external=False)
    assert spans is not None
    spans.done(COMPLETED)
    assert names(exporter) == ["claim", "routine.fire"]


def test_the_tracer_is_looked_up_once_per_provider_named_and_versioned(
    monkeypatch: pytest.MonkeyPatch, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    looked_up: list[tuple[Any, ...]] = []
    get_tracer = provider.get_tracer

    def counting(*args: Any, **kwargs: Any) -> Any:
        looked_up.append(args)
        return get_tracer(*args, **kwargs)

    monkeypatch.setattr(provider, "get_tracer", counting)
    for _ in range(3):
        spans = tracing.fire_spans("hourly", SLOT, None, external=False)
        assert spans is not None
        spans.done(COMPLETED)
    assert looked_up == [("trio_routines", trio_routines.__version__)]
    scopes = {span.instrumentation_scope for span in exporter.get_finished_spans()}
    assert {(scope.name, scope.version) for scope in scopes} == {  # type: ignore[union-attr]
        ("trio_routines", trio_routines.__version__)
    }


def test_under_the_no_op_provider_nothing_is_traced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", trace.NoOpTracerProvider())
    assert tracing.fire_spans("hourly", SLOT, None, external=False) is None
    assert tracing.turn_span(WAKEUP, None) is tracing.UNTRACED
    assert tracing.fire_spans("hourly", SLOT, None, external=True) is None


# --- the spans ---------------------------------------------------------------------------------


def test_an_external_fire_carries_its_routine_slot_and_replica_under_a_remote_parent(
    exporter: InMemorySpanExporter,
) -> None:
    with tracing.caller([TRACEPARENT], [b"congo=t61rcWkgMzE"]):
        spans = tracing.fire_spans("hourly", SLOT, "r-1", external=True)
    assert spans is not None
    spans.done(COMPLETED)
    fire = next(span for span in exporter.get_finished_spans() if span.name == "routine.fire")
    assert dict(fire.attributes or {}) == {
        "trio_routines.routine": "hourly",
        "trio_routines.slot": "2026-07-07T11:00:00.000Z",
        "trio_routines.replica": "r-1",
        "trio_routines.outcome": "completed",
    }
    assert fire.parent is not None
    assert fire.parent.is_remote is True
    assert f"{fire.parent.span_id:016x}" == CALLER
    assert fire.parent.trace_state.to_header() == "congo=t61rcWkgMzE"


def test_a_caller_context_is_current_only_inside_its_block(provider: TracerProvider) -> None:
    before = trace.get_current_span()
    with tracing.caller([TRACEPARENT], []):
        inside = trace.get_current_span().get_span_context()
        assert inside.is_remote is True
        assert f"{inside.span_id:016x}" == CALLER
    assert trace.get_current_span() is before
    assert not trace.get_current_span().get_span_context().is_valid


def test_a_cron_fires_children_leave_out_the_context_it_started_in(
    provider: TracerProvider,
) -> None:
    token = context.attach(baggage.set_baggage("tenant", "host"))
    try:
        cron = tracing.fire_spans("hourly", SLOT, None, external=False)
        external = tracing.fire_spans("hourly", SLOT, None, external=True)
    finally:
        context.detach(token)
    assert cron is not None
    assert external is not None
    assert baggage.get_all(cron.context) == {}
    assert baggage.get_all(external.context) == {"tenant": "host"}  # the caller's, kept
    for spans in (cron, external):
        assert trace.get_current_span(spans.context) is spans._fire
        spans.done(COMPLETED)


def test_spans_end_once_whatever_follows(exporter: InMemorySpanExporter) -> None:
    spans = tracing.fire_spans("hourly", SLOT, None, external=False)
    assert spans is not None
    spans.settling()
    spans.raised(KeyboardInterrupt())
    assert spans.done(COMPLETED) is COMPLETED
    spans.raised(ValueError("later"))
    assert sorted(names(exporter)) == ["claim", "routine.fire", "settle"]
    for span in exporter.get_finished_spans():
        # Not an Exception: no exception event; its type names it, as it says nothing.
        assert span.events == ()
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "KeyboardInterrupt"


def test_an_exception_is_recorded_with_its_type_and_message(
    exporter: InMemorySpanExporter,
) -> None:
    spans = tracing.fire_spans("hourly", SLOT, None, external=False)
    assert spans is not None
    spans.raised(ValueError())
    for span in exporter.get_finished_spans():
        assert span.status.description == "ValueError"
        (event,) = span.events
        assert event.name == "exception"
        assert event.attributes is not None
        assert event.attributes["exception.type"] == "ValueError"


def fail_inside(turn: tracing.TurnSpan) -> None:
    with turn:
        assert trace.get_current_span().is_recording()
        raise LookupError("the session is gone")


@pytest.mark.parametrize("why", [WAKEUP, RUN])
def test_an_exception_leaving_a_turn_ends_its_span_in_error(
    exporter: InMemorySpanExporter, why: FireContext
) -> None:
    before = trace.get_current_span()
    with tracing.caller([TRACEPARENT], []):
        turn = tracing.turn_span(why, None)
        with pytest.raises(LookupError):
            fail_inside(turn)
    assert trace.get_current_span() is before
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "the session is gone"
    (event,) = span.events
    assert event.attributes is not None
    assert event.attributes["exception.message"] == "the session is gone"


def test_an_untraced_cron_fires_turn_stays_untraced(provider: TracerProvider) -> None:
    # Its fire had no spans (tracing was off when it started): no stray root for its turn.
    why = FireContext("routine", "routine:hourly", routine="hourly", slot=SLOT)
    with tracing.caller([TRACEPARENT], []):
        assert tracing.turn_span(why, None) is tracing.UNTRACED


def test_a_step_is_current_for_its_block_and_ends_with_it(
    exporter: InMemorySpanExporter,
) -> None:
    before = trace.get_current_span()
    with tracing.step("wakeup.add", {"trio_routines.session": "chat:42"}) as span:
        assert trace.get_current_span() is span
        span.set_attribute("trio_routines.wakeup", "w-1")
    assert trace.get_current_span() is before
    with pytest.raises(LookupError), tracing.step("wakeup.add", {}):
        raise LookupError("refused")
    assert trace.get_current_span() is before
    done, refused = exporter.get_finished_spans()
    assert done.status.status_code is StatusCode.UNSET
    assert dict(done.attributes or {}) == {
        "trio_routines.session": "chat:42",
        "trio_routines.wakeup": "w-1",
    }
    assert refused.status.status_code is StatusCode.ERROR
    assert refused.status.description == "refused"
    (event,) = refused.events
    assert event.attributes is not None
    assert event.attributes["exception.type"] == "LookupError"
