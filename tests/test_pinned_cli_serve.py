"""Pins of ``serve`` run in this process (``trio_routines.cli.serve``; ``scripts/mutation.py
cliserve``): what it logs of the routines it arms, the agent, the state and the wake-ups; a
stop signal and a SIGHUP reaching the scheduler; the refusals before anything is touched (broken
routine files, no HTTP in this installation, an address taken); the listener closed at the end.

The signals are fed through channels instead of the process's signal handlers (the command's
processes are tested with real signals in ``test_cli.py`` and ``test_deploy.py``).
"""

from __future__ import annotations

import argparse
import logging
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import trio
from procs import wait_for

from trio_routines.cli import serve
from trio_routines.cli.output import CliError
from trio_routines.cli.parser import build_parser

NEXT_NEW_YEAR = f"{datetime.now(UTC).year + 1}-01-01T00:00:00.000Z"


def routine(directory: Path, name: str, front: str) -> None:
    directory.mkdir(exist_ok=True)
    (directory / f"{name}.md").write_text(f"---\n{front}---\nSay hello.\n", encoding="utf-8")


def args_for(tmp_path: Path, *extra: str) -> argparse.Namespace:
    parsed = build_parser().parse_args(
        [
            "serve",
            "--agent",
            "echo",
            "--state",
            str(tmp_path / "state"),
            "--routines",
            str(tmp_path / "routines"),
            *extra,
        ]
    )
    return parsed


class Serving:
    """``serve``'s start in a task, with channels for its signals and hangups."""

    def __init__(self) -> None:
        self.signals = trio.open_memory_channel[int](4)
        self.hangups = trio.open_memory_channel[int](4)
        self.code: int | None = None

    async def run(self, args: argparse.Namespace) -> None:
        signals: AsyncIterator[int] = self.signals[1]  # type: ignore[assignment]
        hangups: AsyncIterator[int] = self.hangups[1]  # type: ignore[assignment]
        self.code = await serve._start(args, signals, hangups)


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "trio_routines"]


async def until_logged(caplog: pytest.LogCaptureFixture, text: str) -> None:
    # Polled: the records come from the scheduler's tasks and from its threads.
    with trio.fail_after(10):
        while not any(text in message for _, message in lines(caplog)):  # noqa: ASYNC110
            await trio.sleep(0.01)


async def test_serve_logs_what_it_arms_and_stops_on_a_signal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    routines = tmp_path / "routines"
    routine(routines, "yearly", "cron: 0 0 1 1 *\n")
    routine(routines, "berlin", "cron: 0 1 1 1 *\ntz: Europe/Berlin\n")
    routine(routines, "hashed", "cron: H H 1 1 *\n")
    routine(routines, "asked", "")  # on demand
    routine(routines, "later", "")
    serving = Serving()
    args = args_for(tmp_path, "--poll", "7", "--wake-rate", "5", "--wake-depth", "off")
    with caplog.at_level(logging.INFO, logger="trio_routines"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serving.run, args)
            await until_logged(caplog, "wake-ups: polling")
            started = lines(caplog)
            await serving.signals[0].send(15)
    assert serving.code == 0
    state = tmp_path / "state"
    assert (logging.INFO, f"serving 5 routine(s) from {routines} — agent echo, state {state}") in (
        started
    )
    armed = [message for level, message in started if message.startswith("armed ")]
    hashed = next(message for message in armed if message.startswith("armed hashed:"))
    assert hashed.startswith('armed hashed: cron "H H 1 1 *" (= ')
    assert "— next " in hashed
    assert sorted(armed) == sorted(
        [
            f'armed yearly: cron "0 0 1 1 *" — next {NEXT_NEW_YEAR}',
            f'armed berlin: cron "0 1 1 1 *" Europe/Berlin — next {NEXT_NEW_YEAR}',
            hashed,
        ]
    )
    assert (logging.INFO, "on demand: asked, later") in started
    assert (
        logging.INFO,
        "wake-ups: polling every 7s; turns may schedule at most 5 an hour per session, "
        "chains any number deep",
    ) in started
    assert lines(caplog)[-1] == (logging.INFO, "stopped")
    assert [level for level, _ in lines(caplog)].count(logging.WARNING) == 0


async def test_serve_says_when_a_clock_outside_fires_and_when_wake_ups_are_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    routine(tmp_path / "routines", "yearly", "cron: 0 0 1 1 *\ntz: UTC\n")
    serving = Serving()
    args = args_for(tmp_path, "--external-clock", "--no-wakeups", "--wake-rate", "off")
    with caplog.at_level(logging.INFO, logger="trio_routines"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serving.run, args)
            await until_logged(caplog, "wake-ups: off")
            await serving.signals[0].send(2)
    said = [message for _, message in lines(caplog)]
    assert 'yearly: cron "0 0 1 1 *" UTC — fired by the external clock only' in said
    assert not any(message.startswith(("armed ", "on demand")) for message in said)
    assert serving.code == 0


async def test_serve_with_no_routines_warns_and_serves_wake_ups_with_any_rate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "routines").mkdir()
    serving = Serving()
    args = args_for(tmp_path, "--wake-rate", "off", "--wake-depth", "3")
    with caplog.at_level(logging.INFO, logger="trio_routines"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serving.run, args)
            await until_logged(caplog, "wake-ups: polling")
            await serving.signals[0].send(15)
    routines = tmp_path / "routines"
    said = lines(caplog)
    assert (
        logging.WARNING,
        f"no routines in {routines} — serving wake-ups only (add <name>.md files there)",
    ) in said
    assert (
        logging.INFO,
        "wake-ups: polling every 30s; turns may schedule any number an hour per session, "
        "chains at most 3 deep",
    ) in said
    assert (
        logging.INFO,
        f"serving 0 routine(s) from {routines} — agent echo, state {tmp_path / 'state'}",
    ) in said


async def test_a_sighup_reloads_the_routines_directory_into_the_running_scheduler(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    routines = tmp_path / "routines"
    routine(routines, "first", "cron: 0 0 1 1 *\n")
    serving = Serving()
    with caplog.at_level(logging.INFO, logger="trio_routines"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serving.run, args_for(tmp_path))
            await until_logged(caplog, "wake-ups: polling")
            routine(routines, "second", "cron: 0 0 1 1 *\n")
            await serving.hangups[0].send(1)
            await until_logged(caplog, "routines updated")
            await serving.hangups[0].send(1)
            await until_logged(caplog, "reload: no routine changed")
            await serving.signals[0].send(15)
    said = [message for _, message in lines(caplog)]
    assert said.count(f"SIGHUP received — reloading the routines from {routines}") == 2
    assert "routines updated: added second" in said
    assert serving.code == 0


async def test_broken_routine_files_refuse_the_start_and_touch_no_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    routines = tmp_path / "routines"
    routine(routines, "fine", "cron: 0 0 1 1 *\n")
    routine(routines, "bad", "cron: 61 * * * *\n")
    routine(routines, "worse", "cron: nonsense\n")
    with pytest.raises(CliError) as caught:
        await Serving().run(args_for(tmp_path))
    assert str(caught.value) == (
        f"serve refuses to start: 2 broken routine file(s) in {routines} "
        "(see `python -m trio_routines check`)"
    )
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 2
    assert any("bad.md" in line for line in errors)
    assert any("worse.md" in line for line in errors)
    assert not (tmp_path / "state").exists()


async def test_an_address_taken_is_one_logged_line_and_exit_one_with_no_state_touched(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "routines").mkdir()
    for family, host, shown in (
        (socket.AF_INET, "127.0.0.1", "127.0.0.1"),
        (socket.AF_INET6, "::1", "[::1]"),
    ):
        taken = socket.socket(family)
        taken.bind((host, 0))
        taken.listen()
        port = taken.getsockname()[1]
        try:
            caplog.clear()
            serving = Serving()
            with caplog.at_level(logging.INFO, logger="trio_routines"):
                await serving.run(args_for(tmp_path, "--http", f"{shown}:{port}"))
        finally:
            taken.close()
        assert serving.code == 1
        assert lines(caplog) == [
            (logging.ERROR, f"cannot serve HTTP on {shown}:{port}: Address already in use")
        ]
    assert not (tmp_path / "state").exists()


async def test_http_missing_from_the_installation_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "routines").mkdir()

    def missing(name: str) -> Any:
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(serve.importlib, "import_module", missing)
    with pytest.raises(CliError) as caught:
        await Serving().run(args_for(tmp_path, "--http", "127.0.0.1:0"))
    assert str(caught.value) == (
        "--http is not available in this installation: No module named 'trio_routines.http'"
    )
    assert not (tmp_path / "state").exists()


async def test_serving_http_answers_on_the_address_bound_first_and_closes_it_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "routines").mkdir()
    from trio_routines import http

    bound: list[tuple[socket.socket, int]] = []
    bind = http.bind_http

    def spied(host: str, port: int) -> socket.socket:
        listener = bind(host, port)
        bound.append((listener, listener.getsockname()[1]))
        return listener

    monkeypatch.setattr(http, "bind_http", spied)
    serving = Serving()
    with caplog.at_level(logging.INFO, logger="trio_routines"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serving.run, args_for(tmp_path, "--http", "127.0.0.1:0"))
            await until_logged(caplog, "wake-ups: polling")
            ((listener, port),) = bound

            def answers() -> bool:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                    conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                    return conn.recv(64).startswith(b"HTTP/1.1 ")

            assert await trio.to_thread.run_sync(wait_for, answers, 10, "an HTTP answer")
            await serving.signals[0].send(15)
    assert serving.code == 0
    assert listener.fileno() == -1
