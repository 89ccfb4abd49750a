"""``trio_routines.serve``: the scheduler, the HTTP surface and the signals, together.

Real signals (sent to this very process while the receiver is open), a real hypercorn server on
loopback, the real clock.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import sys
import threading
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
import trio

from trio_routines import Routine, Scheduler, hosting, serve, tickets
from trio_routines.errors import InvalidOption, StateFault
from trio_routines.http import InsecureBind
from trio_routines.records import Outcome
from trio_routines.scheduler import DEFAULT_GRACE
from trio_routines.testing import Complete, Hang, MemoryStore, ScriptedAgent

ROUTINES = [Routine(name="adhoc", prompt="p")]
SLOT = "2026-07-07T10:00:00.000Z"


async def call(
    port: int, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    def go() -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        try:
            data = None if body is None else json.dumps(body).encode()
            sent = {"Content-Type": "application/json", **(headers or {})}
            conn.request(method, path, body=data, headers=sent)
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    return await trio.to_thread.run_sync(go)


def scheduler_with(agent: ScriptedAgent, store: MemoryStore) -> Scheduler:
    return Scheduler(agent=agent, store=store, routines=ROUTINES, external_clock=True)


async def test_sigterm_stops_with_the_grace_and_the_turn_is_settled() -> None:
    agent, store = ScriptedAgent(Hang()), MemoryStore()
    scheduler = scheduler_with(agent, store)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(partial(serve, scheduler, http=("127.0.0.1", 0), grace=0.5))
            assert isinstance(port, int)
            status, body = await call(port, "POST", "/fire", {"name": "adhoc", "slot": SLOT})
            assert (status, body["claimed"]) == (202, True)
            while not agent.turns:  # noqa: ASYNC110 -- the agent offers no event
                await trio.sleep(0.01)
            os.kill(os.getpid(), signal.SIGTERM)
        # serve returned: the hanging turn was interrupted after the grace, and settled.
    [fire] = await store.history("adhoc")
    assert fire.outcome is Outcome.INTERRUPTED
    assert scheduler.stopping


@pytest.mark.slow
async def test_a_second_signal_stops_at_once() -> None:
    agent, store = ScriptedAgent(Hang()), MemoryStore()
    scheduler = scheduler_with(agent, store)
    with trio.fail_after(30):  # the grace is an hour: only the second signal can end it
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(serve, scheduler, grace=3600, signals=[signal.SIGINT]))
            nursery.start_soon(scheduler.fire, "adhoc", datetime.now(UTC) - timedelta(minutes=1))
            while not agent.turns:  # noqa: ASYNC110 -- the agent offers no event
                await trio.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)
            await trio.sleep(0.05)
            assert scheduler.stopping
            assert (await store.history("adhoc"))[0].outcome is None  # still in its grace
            os.kill(os.getpid(), signal.SIGINT)
    [fire] = await store.history("adhoc")
    assert fire.outcome is Outcome.INTERRUPTED


@pytest.mark.parametrize(
    ("path", "body"),
    [("/run", {"name": "adhoc"}), ("/fire", {"name": "adhoc", "slot": SLOT, "wait": True})],
)
async def test_a_request_that_waited_for_its_turn_is_answered_when_a_stop_comes_meanwhile(
    path: str, body: dict[str, Any]
) -> None:
    # The turn completed in its grace, and the client got no answer: the HTTP server was
    # ended with the rest of serve's nursery the moment the scheduler had drained.
    agent, store = ScriptedAgent(Complete(duration=0.5, reply="done")), MemoryStore()
    scheduler = scheduler_with(agent, store)
    answers: list[tuple[int, Any]] = []
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(partial(serve, scheduler, http=("127.0.0.1", 0)))

            async def ask() -> None:
                answers.append(await call(port, "POST", path, body))

            nursery.start_soon(ask)
            while not agent.turns:  # noqa: ASYNC110 -- the agent offers no event
                await trio.sleep(0.01)
            scheduler.stop()  # the default grace: the turn ends well within it
    ((status, answer),) = answers
    assert status == 200, answer
    assert answer["outcome"] == "completed"


async def test_the_host_stopping_the_scheduler_ends_serve_and_without_signals() -> None:
    scheduler = scheduler_with(ScriptedAgent(), MemoryStore())
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(partial(serve, scheduler, signals=()))
            assert port is None
            scheduler.stop()


async def test_an_open_bind_without_a_token_starts_nothing() -> None:
    store = MemoryStore()
    scheduler = scheduler_with(ScriptedAgent(), store)
    with pytest.raises(InsecureBind):
        await serve(scheduler, http=("0.0.0.0", 0))
    assert not scheduler.stopping
    assert scheduler.statistics().in_flight == 0


async def test_serving_http_without_its_extra_starts_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trio_routines.http import NoServer, serving

    real = serving.importlib.util.find_spec
    monkeypatch.setattr(
        serving.importlib.util,
        "find_spec",
        lambda name, *args: None if name == "hypercorn" else real(name, *args),
    )
    store = MemoryStore()
    scheduler = scheduler_with(ScriptedAgent(), store)
    with pytest.raises(NoServer, match=r'^the HTTP surface needs hypercorn: pip install "trio'):
        await serve(scheduler, http=("127.0.0.1", 0))
    assert not scheduler.stopping
    assert scheduler.booted is False


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"grace": float("nan")}, "a stop's grace must be a number of seconds: nan"),
        ({"grace": "10"}, "a stop's grace must be a number of seconds: '10'"),
        ({"http": "127.0.0.1:0"}, "http must be a (host, port) pair"),
        ({"http": ("127.0.0.1",)}, "http must be a (host, port) pair"),
        ({"http": ("127.0.0.1", 65536)}, "a port from 0 to 65535: ('127.0.0.1', 65536)"),
        ({"http": ("127.0.0.1", -1)}, "http must be a (host, port) pair"),
        ({"http": ("127.0.0.1", True)}, "http must be a (host, port) pair"),
        ({"http": ("127.0.0.1", "80")}, "http must be a (host, port) pair"),
        ({"http": (b"127.0.0.1", 80)}, "http must be a (host, port) pair"),
        ({"signals": 2}, "signals must be signal numbers a process can catch"),
        ({"signals": (999,)}, "signals must be signal numbers a process can catch"),
        ({"signals": "2"}, "signals must be signal numbers a process can catch"),
        ({"signals": (signal.SIGTERM, signal.SIGKILL)}, "a process can catch, like"),
        ({"signals": (None,)}, "or () for none: (None,)"),
    ],
)
async def test_a_bad_grace_or_address_is_refused_before_anything_starts(
    options: dict[str, Any], error: str
) -> None:
    # Not at the first signal, after the scheduler ran: then in the host's nursery.
    store = MemoryStore()
    scheduler = scheduler_with(ScriptedAgent(), store)
    with trio.fail_after(10), pytest.raises(InvalidOption) as refused:
        await serve(scheduler, **{"signals": (), **options})
    assert error in str(refused.value)
    assert "\n" not in str(refused.value)
    assert not scheduler.stopping
    assert scheduler.statistics().in_flight == 0


async def test_signals_that_are_none_are_refused_in_these_words() -> None:
    scheduler = scheduler_with(ScriptedAgent(), MemoryStore())
    with pytest.raises(InvalidOption) as refused:
        await serve(scheduler, signals=2)  # type: ignore[arg-type]
    assert str(refused.value) == (
        "signals must be signal numbers a process can catch, like (signal.SIGINT, "
        "signal.SIGTERM), or () for none: 2"
    )


def test_signals_outside_the_main_thread_are_refused_before_anything_starts() -> None:
    store = MemoryStore()
    scheduler = scheduler_with(ScriptedAgent(), store)
    raised: list[BaseException] = []

    def elsewhere() -> None:
        try:
            trio.run(serve, scheduler)  # the default signals
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(30)
    (error,) = raised
    assert isinstance(error, InvalidOption)
    assert str(error) == (
        "signals are caught in the main thread only: serve in another thread with signals=()"
    )
    assert not scheduler.stopping


async def test_a_taken_address_fails_at_once_before_the_boot_touches_the_store() -> None:
    # Booted first, the scheduler claimed the catch-up of an hour-old slot and started its
    # turn, which the failed bind then cut short: that slot was lost.
    store = MemoryStore()
    hourly = Routine(name="hourly", prompt="p", cron="0 * * * *")
    now = datetime.now(UTC)
    await store.claim(
        "hourly", now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=2), now
    )
    scheduler = Scheduler(agent=ScriptedAgent(), store=store, routines=[hourly])
    with trio.socket.socket() as taken:
        await taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError, match="Address already in use") as refused:  # bare
            await serve(scheduler, http=("127.0.0.1", taken.getsockname()[1]), signals=())
    assert type(refused.value) is not BaseExceptionGroup
    assert len(await store.history("hourly")) == 1  # nothing claimed: the old claim alone
    assert store.members == {}  # never joined
    assert scheduler.booted is False


async def test_a_boot_that_fails_comes_out_of_serve_as_run_raises_it() -> None:
    # Not inside the nurseries' exception groups: except StateFault catches it, as around
    # scheduler.run().
    store = MemoryStore()
    store.fail("latest_fire", StateFault("disk on fire"))
    hourly = Routine(name="hourly", prompt="p", cron="0 * * * *")
    scheduler = Scheduler(agent=ScriptedAgent(), store=store, routines=[hourly])
    with pytest.raises(StateFault, match="disk on fire"):
        await serve(scheduler, signals=())


@pytest.mark.slow
def test_one_default_grace_for_the_library_and_the_command_line() -> None:
    from trio_routines.cli.parser import build_parser

    scheduler = scheduler_with(ScriptedAgent(), MemoryStore())
    assert scheduler.default_grace == DEFAULT_GRACE == 10.0
    for command in (["serve"], ["run", "x"], ["fire", "x", "--slot", SLOT]):
        args = build_parser().parse_args(command)
        assert args.grace == DEFAULT_GRACE, command


async def test_serve_with_a_token_honours_the_tickets_another_process_made_with_it() -> None:
    # An embedded replica: its turns' tickets are signed with a key made from its token, as
    # every other replica given the token signs theirs.
    token = "a-hosts-token-shared-by-its-replicas"
    made = await trio.run_process(
        [
            sys.executable,
            "-c",
            "import sys; from trio_routines.context import FireContext; "
            "from trio_routines.tickets import make_ticket, share_key; share_key(sys.argv[1]); "
            "print(make_ticket(FireContext('wakeup', 'chat:9', wakeup='w-1')))",
            token,
        ],
        capture_stdout=True,
    )
    ticket = made.stdout.decode().strip()
    kept = tickets._key
    store = MemoryStore()
    scheduler = scheduler_with(ScriptedAgent(), store)
    try:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                port = await nursery.start(
                    partial(serve, scheduler, http=("127.0.0.1", 0), token=token, signals=())
                )
                body = {"name": "schedule_wakeup", "arguments": {"prompt": "p", "in": "1h"}}
                status, answer = await call(
                    port, "POST", "/tools/call", body, {"Authorization": f"Ticket {ticket}"}
                )
                scheduler.stop()
    finally:
        tickets._key = kept
    assert status == 200, answer
    (added,) = await store.list_wakeups()
    assert added.session == "chat:9"
    assert added.origin is not None
    assert (added.origin.kind, added.origin.parent, added.origin.depth) == ("wakeup", "w-1", 1)


def test_every_port_of_the_range_is_an_address() -> None:
    assert hosting._address(("127.0.0.1", 0)) == ("127.0.0.1", 0)
    assert hosting._address(["::1", 65535]) == ("::1", 65535)
