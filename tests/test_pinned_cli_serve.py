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
import os
import signal
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trio
from procs import wait_for

from trio_routines import Outcome
from trio_routines.cli import serve
from trio_routines.cli.output import CliError
from trio_routines.cli.parser import build_parser
from trio_routines.cli.serve import local_url
from trio_routines.errors import StateFault

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

    async def until_stopped(
        self,
        args: argparse.Namespace,
        caplog: pytest.LogCaptureFixture,
        started: str,
        signum: int = 15,
    ) -> list[tuple[int, str]]:
        """Serve with ``args`` until a line holding ``started`` is logged, then send
        ``signum`` and wait for the end: the lines logged by then."""
        with caplog.at_level(logging.INFO, logger="trio_routines"):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.run, args)
                await until_logged(caplog, started)
                seen = lines(caplog)
                await self.signals[0].send(signum)
        return seen


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "trio_routines"]


async def until_logged(caplog: pytest.LogCaptureFixture, text: str) -> None:
    # Polled: the records come from the scheduler's tasks and from its threads.
    with trio.fail_after(10):
        while not any(text in message for _, message in lines(caplog)):  # noqa: ASYNC110
            await trio.sleep(0.01)


def binds_spied(monkeypatch: pytest.MonkeyPatch) -> list[tuple[socket.socket, int]]:
    """Every listener ``serve`` binds for HTTP, with its port (read at once: serving takes the
    socket over)."""
    from trio_routines import http

    bound: list[tuple[socket.socket, int]] = []
    bind = http.bind_http

    def spied(host: str, port: int) -> socket.socket:
        listener = bind(host, port)
        bound.append((listener, listener.getsockname()[1]))
        return listener

    monkeypatch.setattr(http, "bind_http", spied)
    return bound


async def test_serve_says_which_armed_routines_are_paused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from trio_routines.stores import DirectoryStore

    routines = tmp_path / "routines"
    routine(routines, "yearly", "cron: 0 0 1 1 *\n")
    routine(routines, "held", "cron: 0 0 1 1 *\n")
    store = DirectoryStore(tmp_path / "state")
    await store.set_paused("held", True)
    await store.aclose()
    serving = Serving()
    started = await serving.until_stopped(args_for(tmp_path), caplog, "wake-ups: polling")
    assert serving.code == 0
    armed = sorted(message for _, message in started if message.startswith("armed "))
    assert armed == [
        f'armed held: cron "0 0 1 1 *" — next {NEXT_NEW_YEAR} (paused: not run until `resume`)',
        f'armed yearly: cron "0 0 1 1 *" — next {NEXT_NEW_YEAR}',
    ]


async def test_serve_says_an_armed_routines_next_slot_is_a_catch_up_due_now(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from trio_routines.stores import DirectoryStore

    routine(tmp_path / "routines", "yearly", "cron: 0 0 1 1 *\ncatchup: 800d\n")
    year = datetime.now(UTC).year
    store = DirectoryStore(tmp_path / "state")
    before = datetime(year - 1, 1, 1, tzinfo=UTC)  # last fired a year before this year's
    await store.claim("yearly", before, before)
    await store.settle("yearly", before, Outcome.COMPLETED, 5)
    await store.aclose()
    serving = Serving()
    started = await serving.until_stopped(args_for(tmp_path), caplog, "wake-ups: polling")
    assert serving.code == 0
    armed = [message for _, message in started if message.startswith("armed ")]
    assert armed == [
        f'armed yearly: cron "0 0 1 1 *" — next {year}-01-01T00:00:00.000Z (due already: it '
        "runs now)"  # a missed slot's catch-up (the boot's line says so)
    ]


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
    started = await serving.until_stopped(args, caplog, "wake-ups: polling")
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
    await serving.until_stopped(args, caplog, "wake-ups: off", signum=2)
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
    await serving.until_stopped(args, caplog, "wake-ups: polling")
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


async def test_an_address_taken_is_one_line_and_exit_one_with_no_state_touched(
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
            with (
                caplog.at_level(logging.INFO, logger="trio_routines"),
                pytest.raises(CliError) as caught,
            ):
                await Serving().run(args_for(tmp_path, "--http", f"{shown}:{port}"))
        finally:
            taken.close()
        assert (caught.value.code, str(caught.value)) == (
            1,
            f"cannot serve HTTP on {shown}:{port}: Address already in use",
        )
        assert lines(caplog) == []
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


async def test_http_without_its_server_package_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The runtime alone (`pip install .`): the package imports, hypercorn does not.
    from trio_routines.http import serving

    (tmp_path / "routines").mkdir()
    real = serving.importlib.util.find_spec
    monkeypatch.setattr(
        serving.importlib.util,
        "find_spec",
        lambda name, *args: None if name == "hypercorn" else real(name, *args),
    )
    with pytest.raises(CliError) as caught:  # main() says it in one line, as every error of ours
        await Serving().run(args_for(tmp_path, "--http", "127.0.0.1:0"))
    assert (caught.value.code, str(caught.value)) == (
        2,  # as a usage error: a restart would only repeat it
        'the HTTP surface needs hypercorn: pip install "trio-routines[http]"',
    )
    assert not (tmp_path / "state").exists()


async def test_serving_http_answers_on_the_address_bound_first_and_closes_it_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "routines").mkdir()
    bound = binds_spied(monkeypatch)
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


# -- what reaches the scheduler, the store and the HTTP surface -------------------------------


async def test_the_options_reach_the_scheduler_and_the_store_is_opened_to_migrate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    routine(tmp_path / "routines", "yearly", "cron: 0 0 1 1 *\n")
    made: list[dict[str, Any]] = []
    opened: list[tuple[str, dict[str, Any]]] = []
    real_scheduler, real_open = serve.Scheduler, serve.open_state

    def scheduler(**kwargs: Any) -> Any:
        made.append(kwargs)
        return real_scheduler(**kwargs)

    def open_state(state: str, **kwargs: Any) -> Any:
        opened.append((state, kwargs))
        return real_open(state, **kwargs)

    monkeypatch.setattr(serve, "Scheduler", scheduler)
    monkeypatch.setattr(serve, "open_state", open_state)
    args = args_for(
        tmp_path,
        "--external-clock",
        "--no-wakeups",
        "--poll",
        "3",
        "--wakeup-timeout",
        "600",
        "--grace",
        "4",
        "--replica",
        "r-1",
        "--session-budget",
        "5 USD/day",
        "--wake-rate",
        "6",
        "--wake-depth",
        "7",
        "--wake-lifetime",
        "8d",
    )
    serving = Serving()
    await serving.until_stopped(args, caplog, "wake-ups: off")
    assert opened == [(str(tmp_path / "state"), {"migrate": "always"})]
    (options,) = made
    assert type(options.pop("agent")).__name__ == "EchoAgent"
    assert type(options.pop("store")).__name__ == "DirectoryStore"
    assert [r.name for r in options.pop("routines")] == ["yearly"]
    limits = options.pop("wake_limits")
    assert (limits.rate, limits.depth, limits.lifetime) == (6, 7, timedelta(days=8))
    assert options == {
        "external_clock": True,
        "wakeups": False,
        "poll_interval": 3.0,
        "wakeup_timeout": 600.0,
        "default_grace": 4.0,
        "replica": "r-1",
        "session_budget": args.session_budget,
    }
    assert args.session_budget  # parsed: not the default of none
    assert serving.code == 0


async def test_the_token_reaches_the_bind_check_and_the_http_surface(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "routines").mkdir()
    from trio_routines import http

    checked: list[tuple[str, str | None, str]] = []
    served: list[dict[str, Any]] = []
    check_bind, serve_http = http.check_bind, http.serve_http

    def spied_check(host: str, token: str | None, name: str) -> None:
        checked.append((host, token, name))
        check_bind(host, token, name)

    async def spied_serve(*args: Any, **kwargs: Any) -> None:
        served.append(kwargs)
        await serve_http(*args, **kwargs)

    monkeypatch.setattr(http, "check_bind", spied_check)
    monkeypatch.setattr(http, "serve_http", spied_serve)
    monkeypatch.setenv("TRIO_ROUTINES_TOKEN", "s3cret")
    serving = Serving()
    with caplog.at_level(logging.INFO, logger="trio_routines"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serving.run, args_for(tmp_path, "--http", "127.0.0.1:0"))
            await until_logged(caplog, "wake-ups: polling")
            with trio.fail_after(10):
                while not served:  # noqa: ASYNC110 -- started in the serve's nursery
                    await trio.sleep(0.01)
            await serving.signals[0].send(15)
    assert checked == [("127.0.0.1", "s3cret", "TRIO_ROUTINES_TOKEN")]
    assert [(kw["token"], type(kw["sock"]).__name__) for kw in served] == [("s3cret", "socket")]


async def test_without_a_token_none_is_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "routines").mkdir()
    from trio_routines import http

    checked: list[tuple[str, str | None, str]] = []

    def refusing(host: str, token: str | None, name: str) -> None:
        checked.append((host, token, name))
        raise CliError("refused here")

    monkeypatch.setattr(http, "check_bind", refusing)
    monkeypatch.setenv("TRIO_ROUTINES_TOKEN", "")
    with pytest.raises(CliError):
        await Serving().run(args_for(tmp_path, "--http", "127.0.0.1:0"))
    assert checked == [("127.0.0.1", None, "TRIO_ROUTINES_TOKEN")]


async def test_the_listener_is_closed_when_the_store_cannot_be_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "routines").mkdir()
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "schedule").write_text("not a directory")  # the store's to find
    bound = binds_spied(monkeypatch)
    with pytest.raises(BaseExceptionGroup) as caught:
        await Serving().run(args_for(tmp_path, "--http", "127.0.0.1:0"))
    assert caught.group_contains(StateFault)
    ((listener, _),) = bound
    assert listener.fileno() == -1


async def test_serve_needs_an_agent_and_says_so_naming_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "routines").mkdir()
    monkeypatch.delenv("TRIO_ROUTINES_AGENT", raising=False)
    args = args_for(tmp_path)
    args.agent = None
    with pytest.raises(CliError) as caught:
        await Serving().run(args)
    assert str(caught.value).startswith("serve needs an agent: pass --agent ")
    assert not (tmp_path / "state").exists()


async def test_a_state_directory_of_another_user_is_refused_with_no_url_to_offer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "routines").mkdir()
    (tmp_path / "state").mkdir()
    me = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: me + 4242)
    with pytest.raises(CliError) as caught:
        await Serving().run(args_for(tmp_path))
    assert "run it as" in str(caught.value)
    assert "--url" not in str(caught.value)  # serve itself is the running service
    assert list((tmp_path / "state").iterdir()) == []


async def test_broken_files_are_said_once_not_also_logged_as_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    routine(tmp_path / "routines", "bad", "cron: 61 * * * *\n")
    with caplog.at_level(logging.WARNING, logger="trio_routines"), pytest.raises(CliError):
        await Serving().run(args_for(tmp_path))
    assert lines(caplog) == []


async def test_a_cron_that_never_comes_is_said_not_armed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # "armed leap: ... next (never)" came right after the boot's "not armed": one of them lied.
    routine(tmp_path / "routines", "leap", "cron: 0 0 30 2 *\n")
    serving = Serving()
    await serving.until_stopped(args_for(tmp_path, "--no-wakeups"), caplog, "wake-ups: off")
    said = [message for _, message in lines(caplog)]
    assert 'leap: cron "0 0 30 2 *" will never fire again — not armed' in said
    assert 'not armed leap: cron "0 0 30 2 *" — no next slot' in said
    assert not [line for line in said if line.startswith("armed leap")]
    assert "wake-ups: off" in said


# -- the process's own signals ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("signum", "name"), [(signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")]
)
async def test_a_stop_signal_to_the_process_stops_serve_and_sighup_reloads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, signum: int, name: str
) -> None:
    routines = tmp_path / "routines"
    routine(routines, "first", "cron: 0 0 1 1 *\n")
    code: list[int] = []

    async def run() -> None:
        code.append(await serve.cmd_serve(args_for(tmp_path)))

    with caplog.at_level(logging.INFO, logger="trio_routines"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await until_logged(caplog, "wake-ups: polling")
            routine(routines, "second", "cron: 0 0 1 1 *\n")
            os.kill(os.getpid(), signal.SIGHUP)
            await until_logged(caplog, "routines updated: added second")
            os.kill(os.getpid(), signum)
    assert code == [0]
    said = [message for _, message in lines(caplog)]
    assert f"SIGHUP received — reloading the routines from {routines}" in said
    assert any(message.startswith(f"{name} received — stopping") for message in said)
    assert said[-1] == "stopped"


async def test_a_stop_signal_during_the_boot_ends_serve_saying_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trio_routines.stores.directory import DirectoryStore

    reading = trio.Event()

    async def never(self: DirectoryStore, routine: str) -> None:
        reading.set()
        await trio.sleep_forever()

    monkeypatch.setattr(DirectoryStore, "latest_fire", never)  # the boot's read never answers
    routine(tmp_path / "routines", "yearly", "cron: 0 0 1 1 *\n")
    serving = Serving()
    with caplog.at_level(logging.INFO, logger="trio_routines"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serving.run, args_for(tmp_path))
            await reading.wait()
            await serving.signals[0].send(15)
    assert serving.code == 0
    logged = lines(caplog)
    assert not any(message.startswith("armed ") for _, message in logged)
    assert logged[-2:] == [
        (logging.INFO, "SIGTERM received during the boot — stopping before anything is armed"),
        (logging.INFO, "stopped during the boot: nothing was armed or fired"),
    ]


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8080"),
        ("0.0.0.0", "http://127.0.0.1:8080"),
        ("", "http://127.0.0.1:8080"),
        ("::", "http://[::1]:8080"),
        ("::1", "http://[::1]:8080"),
        ("10.1.2.3", "http://10.1.2.3:8080"),
        ("localhost", "http://localhost:8080"),
    ],
)
def test_a_command_reaches_the_surface_on_loopback_when_it_is_bound_to_every_address(
    host: str, url: str
) -> None:
    assert local_url(host, 8080) == url


@pytest.mark.parametrize("token", [None, "s3cret-token"])
async def test_a_cmd_agent_is_told_the_address_serve_answers_on(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    token: str | None,
) -> None:
    # Without a token, a warning says that its commands may act as the operator there.
    if token is None:
        monkeypatch.delenv("TRIO_ROUTINES_TOKEN", raising=False)
    else:
        monkeypatch.setenv("TRIO_ROUTINES_TOKEN", token)
    (tmp_path / "routines").mkdir()
    bound = binds_spied(monkeypatch)
    made: list[Any] = []
    build = serve.agent_arg

    def spied(args: argparse.Namespace, command: str) -> Any:
        made.append(build(args, command))
        return made[-1]

    monkeypatch.setattr(serve, "agent_arg", spied)
    serving = Serving()
    args = args_for(tmp_path, "--http", "127.0.0.1:0", "--agent", "cmd:true")
    await serving.until_stopped(args, caplog, "wake-ups: polling")
    ((_, port),) = bound
    (agent,) = made
    assert agent.scheduler_url == f"http://127.0.0.1:{port}"
    warned = [r.getMessage() for r in caplog.records if "operator" in r.getMessage()]
    assert warned == ([] if token else [serve.OPEN_TO_COMMANDS])
