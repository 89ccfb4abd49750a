"""Pinned: ``serve`` and its signal watch, to the stop each signal makes and the line it logs.

Written for the mutation run of hosting.py (docs/mutation.md). The suite's tests stop ``serve``
with one signal and an explicit grace, over HTTP on loopback without a token; here each signal
of a series is read (the grace, then at once, the same for a third), the scheduler's own
grace is the default, the signals are the caller's, and the HTTP surface is bound where asked
with the token asked for.

A signal the code under test failed to watch must not end the test run: SIGTERM gets a Python
handler of the test's own while it runs, so such a signal is only noted, and the test fails on
its bound instead.
"""

from __future__ import annotations

import http.client
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Iterator
from functools import partial
from typing import Any, cast

import pytest
import trio
import trio.testing

from trio_routines import Routine, Scheduler, serve
from trio_routines.hosting import Answering, watch_signals
from trio_routines.testing import MemoryStore, ScriptedAgent

TOKEN = "pinned-token"


class StopRecorder:
    """Stands for the scheduler in :func:`watch_signals`: each ``stop`` it is asked for."""

    def __init__(self, booted_after: int = 0) -> None:
        self.stops: list[float | None] = []
        self._booted_after = booted_after  # how many stops before its boot completed

    @property
    def booted(self) -> bool:
        return len(self.stops) >= self._booted_after

    def stop(self, grace: float | None = None) -> None:
        self.stops.append(grace)


async def signals_of(*signums: int) -> AsyncIterator[int]:
    for signum in signums:
        yield signum


async def watched(
    caplog: pytest.LogCaptureFixture, grace: float, *signums: int
) -> tuple[list[float | None], list[tuple[int, str]]]:
    # Never booted, as the scheduler of a command that fires without running (cli/output.py):
    # its signals are no boot's.
    recorder = StopRecorder(booted_after=len(signums) + 1)
    with caplog.at_level(logging.INFO, logger="trio_routines"):
        await watch_signals(signals_of(*signums), cast(Scheduler, recorder), grace)
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "trio_routines"]
    return recorder.stops, lines


async def test_the_first_signal_gives_the_grace_and_every_later_one_stops_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stops, lines = await watched(caplog, 0.5, signal.SIGTERM, signal.SIGINT, signal.SIGTERM)
    assert stops == [0.5, 0.0, 0.0]
    assert lines == [
        (logging.INFO, "SIGTERM received — stopping; in-flight turns get 0.5s to finish"),
        (logging.WARNING, "SIGINT received — stopping now"),
        (logging.WARNING, "SIGTERM received — stopping now"),
    ]


async def test_a_grace_of_one_second_is_a_grace_and_of_none_stops_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stops, lines = await watched(caplog, 1, signal.SIGINT)
    assert stops == [1]
    assert lines == [(logging.INFO, "SIGINT received — stopping; in-flight turns get 1s to finish")]
    caplog.clear()
    stops, lines = await watched(caplog, 0, signal.SIGTERM, signal.SIGINT)
    assert stops == [0, 0.0]
    assert lines == [
        (logging.WARNING, "SIGTERM received — stopping now"),
        (logging.WARNING, "SIGINT received — stopping now"),
    ]


@pytest.fixture
def sigterm_noted() -> Iterator[list[int]]:
    """SIGTERMs that reached a handler of the test's own, not ``serve``'s receiver."""
    noted: list[int] = []

    def note(signum: int, frame: object) -> None:
        noted.append(signum)

    previous = signal.signal(signal.SIGTERM, note)
    try:
        yield noted
    finally:
        signal.signal(signal.SIGTERM, previous)


def scheduler(**options: Any) -> Scheduler:
    return Scheduler(
        agent=ScriptedAgent(),
        store=MemoryStore(),
        routines=[Routine(name="adhoc", prompt="p")],
        external_clock=True,
        **options,
    )


async def test_without_a_grace_a_signal_gives_the_schedulers_own(
    caplog: pytest.LogCaptureFixture, sigterm_noted: list[int]
) -> None:
    served = scheduler(default_grace=2.5)
    with caplog.at_level(logging.INFO, logger="trio_routines"), trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(serve, served, signals=[signal.SIGTERM]))
            os.kill(os.getpid(), signal.SIGTERM)
    assert served.stopping
    assert sigterm_noted == []  # serve's receiver had it, not the handler around it
    assert "SIGTERM received — stopping; in-flight turns get 2.5s to finish" in caplog.messages


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(port: int, path: str, headers: dict[str, str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


async def test_http_is_served_where_asked_and_with_the_token_asked_for() -> None:
    wanted = free_port()
    served = scheduler()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            # Every interface: allowed only because there is a token.
            start = partial(serve, served, http=("0.0.0.0", wanted), token=TOKEN, signals=())
            port = await nursery.start(start)
            assert port == wanted
            without = await trio.to_thread.run_sync(get, port, "/routines", {})
            bearer = {"Authorization": f"Bearer {TOKEN}"}
            with_token = await trio.to_thread.run_sync(get, port, "/routines", bearer)
            served.stop()
    assert (without, with_token) == (401, 200)


async def test_a_signal_before_the_boot_completed_says_so_and_one_after_it_does_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The boot completes after the first stop (as a stop that lands during its last step
    # lets it): only that one is said to come during the boot.
    recorder = StopRecorder(booted_after=1)
    with caplog.at_level(logging.INFO, logger="trio_routines"):
        signals = signals_of(signal.SIGTERM, signal.SIGINT)
        await watch_signals(signals, cast(Scheduler, recorder), 2, during_boot=True)
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "trio_routines"]
    assert recorder.stops == [2, 0.0]
    assert lines == [
        (logging.INFO, "SIGTERM received during the boot — stopping before anything is armed"),
        (logging.WARNING, "SIGINT received — stopping now"),
    ]


def test_only_a_sole_error_is_taken_out_of_its_groups() -> None:
    from trio_routines.hosting import _sole

    error = ValueError("boot")
    assert _sole(ExceptionGroup("", [ExceptionGroup("", [error])])) is error
    assert _sole(ExceptionGroup("", [error, KeyError("x")])) is None
    # A cancel or an interrupt is no error of the run's: it stays as it came.
    assert _sole(BaseExceptionGroup("", [KeyboardInterrupt()])) is None


async def test_a_second_signal_cuts_the_http_surface_short_and_the_first_does_not() -> None:
    # Once the scheduler had drained, serve waited for the HTTP surface's graceful end (a
    # client still reading: up to the grace and 2 s more), and a second Ctrl-C did nothing.
    answering = Answering()
    ended: list[str] = []

    async def surface(*, task_status: trio.TaskStatus[int]) -> None:
        task_status.started(1)
        try:
            await trio.sleep_forever()  # a client that never finishes reading
        finally:
            ended.append("surface")

    first, second = trio.open_memory_channel[int](2)
    recorder = StopRecorder()
    async with trio.open_nursery() as nursery:
        assert await nursery.start(answering.serve, surface) == 1
        nursery.start_soon(watch_signals, second, cast(Scheduler, recorder), 2, False, answering)
        await first.send(signal.SIGTERM)
        await trio.testing.wait_all_tasks_blocked()
        assert ended == []  # the first signal stops the scheduler, and lets the answers go out
        await first.send(signal.SIGINT)
        with trio.fail_after(5):
            await answering.ended()
        nursery.cancel_scope.cancel()
    assert (ended, recorder.stops) == (["surface"], [2, 0.0])
    # A surface started after the cut ends at once, its start reported (no port).
    assert await _started_after_a_cut(answering) is None


async def _started_after_a_cut(answering: Answering) -> object:
    async def never(*, task_status: trio.TaskStatus[int]) -> None:
        raise AssertionError("a surface started after the cut")

    async with trio.open_nursery() as nursery:
        return await nursery.start(answering.serve, never)


async def test_the_signal_watch_is_started_for_the_boot_with_the_surfaces_to_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The wiring of start_watched: the watch runs from the boot's start (a signal then gives
    # the boot up) and holds the surfaces a second signal cuts short.
    from trio_routines import hosting

    watched: list[tuple[Any, ...]] = []

    async def watch(*args: Any) -> None:
        watched.append(args)

    monkeypatch.setattr(hosting, "watch_signals", watch)
    scheduler = Scheduler(agent=ScriptedAgent(), store=MemoryStore())
    answering = Answering()
    signals = cast(AsyncIterator[int], object())
    async with trio.open_nursery() as nursery:
        assert await hosting.start_watched(nursery, scheduler, signals, 7.5, answering)
        await trio.testing.wait_all_tasks_blocked()
        scheduler.stop()
    assert watched == [(signals, scheduler, 7.5, True, answering)]
