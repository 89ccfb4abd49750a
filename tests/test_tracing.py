"""Tracing with OpenTelemetry: the spans of fires and turns (virtual time), the caller's
context in through the HTTP surface and out to the agents (a real server on loopback, a real
agent server, a real ``cmd:`` command), and nothing at all when tracing is off.

The SDK's in-memory exporter records the spans. The API lets a process set its global provider
once; like OpenTelemetry's own tests (``reset_trace_globals`` in its test utilities), the
``spans`` fixture puts ours in place for one test and restores the unset global afterwards, so
every other test of the worker runs untraced, as a host with no provider does.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pytest
import trio
from agent_server import AgentServer, reply
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from test_http import Server, serving

from trio_routines import Outcome, Routine, Scheduler, tracing
from trio_routines.agent_http import HttpAgent
from trio_routines.agents import CommandAgent
from trio_routines.context import FireContext, firing
from trio_routines.errors import StateFault
from trio_routines.http import serve_http
from trio_routines.testing import Fail, Hang, MemoryStore, ScriptedAgent, WallClock

T0 = datetime(2026, 7, 7, 10, 59, 30, tzinfo=UTC)
SLOT = datetime(2026, 7, 7, 11, 0, tzinfo=UTC)
HOURLY = Routine(name="hourly", prompt="Check the queue.", cron="0 * * * *")
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{CALLER}-01"


@pytest.fixture(scope="session")
def recorder() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.fixture
def spans(
    recorder: tuple[TracerProvider, InMemorySpanExporter], monkeypatch: pytest.MonkeyPatch
) -> Iterator[InMemorySpanExporter]:
    provider, exporter = recorder
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    exporter.clear()
    yield exporter
    exporter.clear()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def one(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    (span,) = named(exporter, name)
    return span


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def scheduler(agent: Any, *routines: Routine, wall: WallClock | None = None) -> Scheduler:
    return Scheduler(
        agent=agent, store=MemoryStore(), routines=routines or (HOURLY,), now=wall or WallClock(T0)
    )


# --- the fire path, under virtual time ----------------------------------------------------------


async def test_a_cron_fire_is_a_root_with_claim_turn_and_settle(
    autojump_clock: Any, spans: InMemorySpanExporter
) -> None:
    wall = WallClock(T0)
    agent = ScriptedAgent(wall=wall)
    runtime = scheduler(agent, wall=wall)
    host = trace.get_tracer("host")
    async with trio.open_nursery() as nursery:
        # A scheduler started under a host's span does not make every fire that span's child.
        with host.start_as_current_span("host start-up"):
            await nursery.start(runtime.run)
        await trio.sleep(40)
        runtime.stop(1)
    fire = one(spans, "routine.fire")
    claim, turn, settle = one(spans, "claim"), one(spans, "turn"), one(spans, "settle")
    assert fire.parent is None  # a root: the clock caused it
    assert dict(fire.attributes or {}) == {
        "trio_routines.routine": "hourly",
        "trio_routines.slot": "2026-07-07T11:00:00.000Z",
        "trio_routines.replica": runtime.replica,
        "trio_routines.outcome": "completed",
    }
    assert fire.status.status_code is StatusCode.UNSET
    for child in (claim, turn, settle):
        assert parent_of(child) == fire.context.span_id
        assert child.context.trace_id == fire.context.trace_id
    assert dict(claim.attributes or {}) == {"trio_routines.claim": "taken"}
    assert turn.attributes is not None
    assert turn.attributes["trio_routines.session"] == "routine:hourly"
    assert turn.attributes["trio_routines.outcome"] == "completed"
    # In order, one after the other, inside the fire.
    assert fire.start_time is not None
    assert fire.end_time is not None
    assert claim.end_time is not None
    assert turn.end_time is not None
    assert fire.start_time <= claim.start_time <= claim.end_time <= turn.start_time  # type: ignore[operator]
    assert turn.end_time <= settle.start_time  # type: ignore[operator]
    assert settle.end_time <= fire.end_time  # type: ignore[operator]
    (turned,) = agent.turns
    assert turned.fire is not None
    assert turned.fire.slot == SLOT


@pytest.mark.parametrize(
    ("behaviour", "outcome", "reason"),
    [(Fail("the model is down"), "failed", "the model is down"), (Hang(), "interrupted", None)],
)
async def test_a_failed_or_interrupted_fire_is_an_error_with_its_reason(
    autojump_clock: Any,
    spans: InMemorySpanExporter,
    behaviour: Any,
    outcome: str,
    reason: str | None,
) -> None:
    wall = WallClock(T0)
    agent = ScriptedAgent(wall=wall)
    agent.script(behaviour)
    runtime = scheduler(agent, wall=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run)
        await trio.sleep(40)
        runtime.stop(1)
    reason = reason or "interrupted by stop"
    for span in (one(spans, "routine.fire"), one(spans, "turn")):
        assert span.attributes is not None
        assert span.attributes["trio_routines.outcome"] == outcome
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == reason


async def test_an_external_fire_is_the_callers_child_and_refusals_say_why(
    autojump_clock: Any, spans: InMemorySpanExporter
) -> None:
    runtime = scheduler(ScriptedAgent(), wall=WallClock(datetime(2026, 7, 7, 11, 0, 5, tzinfo=UTC)))
    host = trace.get_tracer("host")
    with host.start_as_current_span("request") as request:
        assert (await runtime.fire("hourly", SLOT)).outcome is Outcome.COMPLETED
        assert (await runtime.fire("hourly", SLOT)).reason == "duplicate"
    first, second = named(spans, "routine.fire")
    for fire in (first, second):
        assert parent_of(fire) == request.get_span_context().span_id
    assert second.attributes is not None
    assert second.attributes["trio_routines.outcome"] == "duplicate"
    assert second.status.status_code is StatusCode.UNSET
    assert len(named(spans, "turn")) == 1  # a duplicate runs no turn
    duplicate = [c for c in named(spans, "claim") if parent_of(c) == second.context.span_id]
    assert duplicate[0].attributes == {"trio_routines.claim": "duplicate"}


async def test_a_fire_that_cannot_claim_ends_its_spans_in_error(
    autojump_clock: Any, spans: InMemorySpanExporter
) -> None:
    runtime = scheduler(ScriptedAgent(), wall=WallClock(datetime(2026, 7, 7, 11, 0, 5, tzinfo=UTC)))
    assert isinstance(runtime.store, MemoryStore)
    runtime.store.fail("claim", StateFault("the disk is gone"))
    with pytest.raises(StateFault):
        await runtime.fire("hourly", SLOT)
    fire, claim = one(spans, "routine.fire"), one(spans, "claim")
    for span in (fire, claim):
        assert span.status.status_code is StatusCode.ERROR
        assert "the disk is gone" in (span.status.description or "")
    assert [e.name for e in fire.events] == ["exception"]


async def test_a_wakeup_turn_is_a_root_with_its_id_and_session(
    autojump_clock: Any, spans: InMemorySpanExporter
) -> None:
    wall = WallClock(T0)
    runtime = scheduler(ScriptedAgent(wall=wall), wall=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run)
        wakeup = await runtime.add_wakeup("chat:42", "check the build", delay=60)
        await trio.sleep(120)
        runtime.stop(1)
    turn = one(spans, "wakeup.turn")
    assert turn.parent is None
    assert dict(turn.attributes or {}) == {
        "trio_routines.session": "chat:42",
        "trio_routines.wakeup": wakeup.id,
        "trio_routines.replica": runtime.replica,
        "trio_routines.outcome": "completed",
    }


async def test_with_no_provider_nothing_is_traced_and_nothing_goes_out(
    autojump_clock: Any, recorder: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    exporter = recorder[1]
    exporter.clear()
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    runtime = scheduler(ScriptedAgent(), wall=WallClock(datetime(2026, 7, 7, 11, 0, 5, tzinfo=UTC)))
    assert tracing.fire_spans("hourly", SLOT, None, external=False) is None
    assert tracing.fire_spans("hourly", SLOT, None, external=True) is None  # no caller's context
    assert (await runtime.fire("hourly", SLOT)).outcome is Outcome.COMPLETED
    assert exporter.get_finished_spans() == ()
    with firing(FireContext("run", "routine:hourly", routine="hourly")):
        assert "traceparent" not in HttpAgent("http://127.0.0.1:9/turn").headers(None)
        assert "TRACEPARENT" not in CommandAgent("true").environment("routine:hourly")


@pytest.mark.slow
def test_without_the_extra_nothing_imports_it_and_a_fire_runs() -> None:
    script = """
import sys
sys.modules["opentelemetry"] = None  # as if the extra were not installed
from datetime import UTC, datetime
import trio
from trio_routines import Routine, Scheduler, tracing
from trio_routines.agents import CommandAgent
from trio_routines.testing import MemoryStore, ScriptedAgent, WallClock

async def main():
    wall = WallClock(datetime(2026, 7, 7, 11, 0, 5, tzinfo=UTC))
    runtime = Scheduler(agent=ScriptedAgent(), store=MemoryStore(),
                        routines=[Routine(name="hourly", prompt="p", cron="0 * * * *")], now=wall)
    result = await runtime.fire("hourly", datetime(2026, 7, 7, 11, 0, tzinfo=UTC))
    print(result.outcome.value, tracing.load(), tracing.outgoing(),
          "TRACEPARENT" in CommandAgent("true").environment("s"))

trio.run(main)
"""
    found = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert found.stdout.split() == ["completed", "False", "{}", "False"]
    # With the extra installed, importing the package does not import it either.
    plain = "import sys, trio_routines.http, trio_routines.agents\n"
    plain += "print('opentelemetry' in sys.modules)"
    found = subprocess.run(
        [sys.executable, "-c", plain], capture_output=True, text=True, timeout=60, check=True
    )
    assert found.stdout.strip() == "False"


# --- in and out, on loopback ------------------------------------------------------------------


async def test_traceparent_in_on_post_fire_is_the_parent_and_goes_out_to_the_http_agent(
    spans: InMemorySpanExporter,
) -> None:
    routine = Routine(name="adhoc", prompt="go")
    async with trio.open_nursery() as nursery:
        agent_server = await nursery.start(AgentServer(reply(200, '{"ok": true}')).run)
        runtime = Scheduler(
            agent=HttpAgent(agent_server.url()),
            store=MemoryStore(),
            routines=[routine],
            external_clock=True,
        )
        await nursery.start(runtime.run)
        port = await nursery.start(partial(serve_http, runtime, "127.0.0.1", 0))
        server = Server(port, runtime, ScriptedAgent(), runtime.store)
        answer = await server.call(
            "POST",
            "/fire",
            {"name": "adhoc", "slot": "2026-07-07T09:00:00.000Z", "wait": True},
            headers={"traceparent": TRACEPARENT, "tracestate": "congo=t61rcWkgMzE"},
        )
        runtime.stop(grace=0)
        nursery.cancel_scope.cancel()
    assert answer.status == 200, answer.raw
    assert answer.json["outcome"] == "completed"
    fire, turn = one(spans, "routine.fire"), one(spans, "turn")
    assert f"{fire.context.trace_id:032x}" == TRACE
    assert f"{parent_of(fire):016x}" == CALLER
    (request,) = agent_server.requests
    assert request.headers["traceparent"] == f"00-{TRACE}-{turn.context.span_id:016x}-01"
    assert request.headers["tracestate"] == "congo=t61rcWkgMzE"


@pytest.mark.parametrize(
    "header",
    [
        f"00-{TRACE.upper()}-{CALLER}-01",
        f"00-{TRACE}-{'0' * 16}-01",
        "00-SECRET-ish\x7fgarbage",
        f"ff-{TRACE}-{CALLER}-01",
    ],
)
async def test_a_malformed_traceparent_is_ignored_never_an_error_never_logged(
    spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture, header: str
) -> None:
    caplog.set_level(logging.DEBUG)
    async with serving() as server:
        answer = await server.call(
            "POST",
            "/fire",
            {"name": "adhoc", "slot": "2026-07-07T09:00:00.000Z", "wait": True},
            headers={"traceparent": header, "tracestate": "congo=t61rcWkgMzE"},
        )
    assert answer.status == 200, answer.raw
    fire = one(spans, "routine.fire")
    assert fire.parent is None  # a trace of its own
    assert f"{fire.context.trace_id:032x}" != TRACE
    assert header not in caplog.text
    assert "congo" not in caplog.text


async def test_post_run_and_post_wakeups_are_the_callers_children(
    spans: InMemorySpanExporter,
) -> None:
    async with serving() as server:
        ran = await server.call(
            "POST", "/run", {"name": "adhoc"}, headers={"traceparent": TRACEPARENT}
        )
        added = await server.call(
            "POST",
            "/wakeups",
            {"session": "chat:42", "prompt": "p", "in": "30m"},
            headers={"traceparent": TRACEPARENT},
        )
    assert ran.status == 200, ran.raw
    assert added.status == 201, added.raw
    run, add = one(spans, "routine.run"), one(spans, "wakeup.add")
    for span in (run, add):
        assert f"{span.context.trace_id:032x}" == TRACE
        assert f"{parent_of(span):016x}" == CALLER
    assert run.attributes is not None
    assert run.attributes["trio_routines.routine"] == "adhoc"
    assert dict(add.attributes or {}) == {
        "trio_routines.session": "chat:42",
        "trio_routines.wakeup": added.json["wakeup"]["id"],
    }


# --- a cmd: agent --------------------------------------------------------------------------------


ECHO_CONTEXT = CommandAgent('printf "%s|%s" "$TRACEPARENT" "$TRACESTATE"')


async def test_a_cmd_agent_gets_the_turns_context_in_its_environment(
    spans: InMemorySpanExporter,
) -> None:
    runtime = scheduler(ECHO_CONTEXT, Routine(name="adhoc", prompt="go"))
    caller = tracing.caller([TRACEPARENT.encode()], [b"rojo=00f067aa0ba902b7"])
    seen: list[str] = []
    with caller:
        result = await runtime.run_now("adhoc", on_text=seen.append)
    assert result.outcome is Outcome.COMPLETED, result.failed
    run = one(spans, "routine.run")
    assert "".join(seen) == f"00-{TRACE}-{run.context.span_id:016x}-01|rojo=00f067aa0ba902b7"


async def test_a_callers_context_goes_through_even_when_tracing_is_off(
    recorder: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    runtime = scheduler(ECHO_CONTEXT, Routine(name="adhoc", prompt="go"))
    seen: list[str] = []
    with tracing.caller([TRACEPARENT.encode()], []):
        result = await runtime.run_now("adhoc", on_text=seen.append)
    assert result.outcome is Outcome.COMPLETED, result.failed
    assert "".join(seen) == f"{TRACEPARENT}|"  # unchanged: no span of ours in between
    assert recorder[1].get_finished_spans() == ()


def test_the_spans_are_named_in_the_docs() -> None:
    # The span names and attributes a dashboard is built on are written down.
    from pathlib import Path

    design = (Path(__file__).parents[1] / "docs" / "design.md").read_text()
    for name in ("routine.fire", "claim", "turn", "settle", "wakeup.turn", "routine.run"):
        assert f"`{name}`" in design
    for key in (tracing.ROUTINE, tracing.SLOT, tracing.OUTCOME, tracing.REPLICA, tracing.WAKEUP):
        assert f"`{key}`" in design
