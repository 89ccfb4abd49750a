"""A stop during the boot: the boot is given up at once, not after its store calls.

Each store call of a boot may take the store timeout (30 s), and a boot makes several in a
row; a stop (``Scheduler.stop``, a SIGTERM or SIGINT to ``serve``) that came meanwhile used to
wait for all of them. Here the boot's store never answers: under virtual time the scheduler's
``run`` returns at the stop's instant; with real signals, ``trio_routines.serve`` returns; and a
``serve`` process whose first read of the claims waits on a PostgreSQL lock ends at once with
the status of any SIGTERM stop, and leaves its store as it found it.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio
from pg import schema_url, server_url, with_app_name
from procs import Env, stop, wait_for
from psycopg import sql
from scheduler_rig import Recording, at, one_shot, rig
from test_postgres import _waiting_on_lock

from trio_routines import Routine, Scheduler, serve
from trio_routines.errors import StateFault
from trio_routines.hosting import start_watched
from trio_routines.records import Fire
from trio_routines.testing import Hang, MemoryStore, ScriptedAgent


async def test_a_stop_during_the_boot_gives_it_up_at_the_stops_instant(autojump_clock: Any) -> None:
    store = Recording()
    await store.claim("hourly", at(8), at(8))  # left open by a process that died mid-turn
    store.hang("latest_fire")  # the boot's first read never answers (bound: 5 s)
    scheduler, agent, _, _ = rig(store=store, wakeups=False)
    start = trio.current_time()

    async def stop_soon() -> None:
        await trio.sleep(1)
        scheduler.stop()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop_soon)
        assert await nursery.start(scheduler.run) is scheduler
        assert trio.current_time() == start + 1  # not the read's bound, nor the stop's
    assert trio.current_time() == start + 1  # run() returned too, having left the store
    assert scheduler.booted is False
    assert scheduler.statistics().armed == ()
    assert agent.turns == []
    store.hangs.clear()
    [fire] = await store.history("hourly")  # untouched: the next boot reconciles it
    assert (fire.outcome, store.calls) == (None, [])
    assert await store.replicas() == []


class StalledBoot(MemoryStore):
    """A store whose newest-claim reads never answer; ``reading`` is set once one began."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = trio.Event()

    async def latest_fire(self, routine: str) -> Fire | None:
        self.reading.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")


@pytest.fixture
def sigterm_noted() -> Iterator[list[int]]:
    """SIGTERMs that reached a handler of the test's own, not ``serve``'s receiver: a signal
    the code under test failed to watch fails the test instead of ending the run."""
    noted: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: noted.append(signum))
    try:
        yield noted
    finally:
        signal.signal(signal.SIGTERM, previous)


async def test_serve_returns_on_a_signal_during_the_boot_serving_nothing(
    caplog: pytest.LogCaptureFixture, sigterm_noted: list[int]
) -> None:
    store = StalledBoot()
    hourly = Routine(name="hourly", prompt="p", cron="0 * * * *")
    # The boot's read is bounded at a minute: only the signal can end it within the test's bound.
    scheduler = Scheduler(agent=ScriptedAgent(), store=store, routines=[hourly], store_timeout=60)
    ports: list[int | None] = []

    async def served() -> None:
        async with trio.open_nursery() as nursery:
            start = partial(serve, scheduler, http=("127.0.0.1", 0), signals=[signal.SIGTERM])
            ports.append(await nursery.start(start))

    with caplog.at_level(logging.INFO, logger="trio_routines"), trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(served)
            await store.reading.wait()
            os.kill(os.getpid(), signal.SIGTERM)
    assert ports == [None]  # no HTTP surface was started
    assert scheduler.stopping
    assert scheduler.statistics().armed == ()
    assert sigterm_noted == []
    assert "SIGTERM received during the boot — stopping before anything is armed" in (
        caplog.messages
    )


async def signals_of(*signums: int) -> AsyncIterator[int]:
    for signum in signums:
        yield signum


async def test_a_signal_already_waiting_stops_the_boot_once_begun_never_before_it() -> None:
    """As ``serve``'s receiver holds a SIGTERM that came while it read the routines: the
    stop reaches a boot begun (a scheduler stopped before ``run`` refuses to run at all)."""
    hourly = Routine(name="hourly", prompt="p", cron="0 * * * *")
    for _ in range(20):  # Trio runs the tasks ready at once in an order of its own: each order
        scheduler = Scheduler(agent=ScriptedAgent(), store=MemoryStore(), routines=[hourly])
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                assert not await start_watched(nursery, scheduler, signals_of(signal.SIGTERM), 1)
        assert scheduler.stopping
        assert scheduler.statistics().armed == ()


# -- the command line's serve, its boot held by a PostgreSQL lock --------------------------------

SLOT = datetime(2026, 7, 6, 9, tzinfo=UTC)


def _seed_open_claim(url: str) -> None:
    """The tables, and a claim of ``daily`` left open as by a process that died mid-turn."""
    from trio_routines.stores.postgres import PostgresStore

    async def seed() -> None:
        store = PostgresStore(url)
        try:
            assert (await store.claim("daily", SLOT, SLOT)).taken
        finally:
            await store.aclose()

    trio.run(seed)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_during_the_boot_ends_serve_at_once_and_changes_nothing(
    tmp_path: Path, signum: signal.Signals
) -> None:
    name = signal.Signals(signum).name
    with schema_url() as url:
        app = f"boot_{uuid.uuid4().hex[:12]}"
        env = Env(tmp_path)
        env.state = with_app_name(url, app)  # type: ignore[assignment]
        env.routine("daily", cron="0 9 * * *", catchup="none")
        _seed_open_claim(url)
        schema = url.rpartition("%3D")[2]
        try:
            with psycopg.connect(server_url(), connect_timeout=10) as blocker:
                claims = sql.Identifier(schema, "trio_routines_claims")
                blocker.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(claims))
                proc = env.start("serve", "--agent", "echo")
                # Provably inside the boot: its read of the newest claims waits on our lock.
                wait_for(lambda: _waiting_on_lock(app), 30, "the boot's read of the claims")
                proc.send_signal(signum)
                try:
                    # Well within one store call's bound (30 s), the lock still held.
                    code = proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    raise AssertionError(f"serve did not stop on {name} during its boot") from None
                blocker.rollback()
            log = env.log()
            assert code == 0, log
            assert f"{name} received during the boot — stopping before anything is armed" in log
            assert log.rstrip().endswith("stopped during the boot: nothing was armed or fired")
            assert "Traceback" not in log
            assert " ERROR " not in log
            assert "unreadable" not in log
            # Nothing was written: the open claim is still open, and the next boot settles it.
            later = env.serve("echo", log="again.log")
            assert stop(later) == 0
            assert "claimed at" in env.log("again.log")
            [claim] = [e for e in env.history("daily") if "slot" in e]
            assert claim["outcome"] == "interrupted"
        finally:
            for started in env.procs:
                if started.poll() is None:
                    started.kill()
                    started.wait()


async def test_a_boot_that_completes_says_so_before_its_run_is_reported_started(
    autojump_clock: Any,
) -> None:
    scheduler, _, _, _ = rig(wakeups=False)
    assert scheduler.booted is False
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        assert scheduler.booted
        scheduler.stop(0)
    assert scheduler.booted  # a stop after the boot does not take it back


async def test_a_stop_that_lands_past_the_boots_last_cancel_point_gives_it_up(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stop can come when no await of the boot is left to cancel it (here: while it arms
    # its routines, which awaits nothing); the boot then ends all the same, and is given up.
    scheduler, agent, _, _ = rig(wakeups=False)
    arming = scheduler._parts.arming
    arm = arming.arm

    def arm_and_stop(name: str, due: Any) -> None:
        scheduler.stop()
        arm(name, due)

    monkeypatch.setattr(arming, "arm", arm_and_stop)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
    assert scheduler.booted is False  # what serve tells its log and its HTTP surface by
    assert agent.turns == []


async def test_a_hosts_calls_after_the_run_are_bounded_by_the_store_timeout_not_the_stop(
    autojump_clock: Any,
) -> None:
    # A stop bounds the store calls of the run's drain. Once the run is over, a host's own
    # call (a list of wake-ups as it shuts down, say) answers however long after the stop
    # it comes, and one the store never answers is cut at the store's timeout.
    scheduler, _, store, _ = rig()
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        scheduler.stop(0)
    await trio.sleep(60)  # far past the stop's grace and its margin
    added = await scheduler.add_wakeup("s", "later", delay="1h")
    assert [w.id for w in await scheduler.list_wakeups("s")] == [added.id]
    store.hang("list_wakeups")
    began = trio.current_time()
    with pytest.raises(StateFault, match="did not answer within 5s"):
        await scheduler.list_wakeups("s")
    assert trio.current_time() - began == 5.0


async def test_a_hosts_calls_after_a_stop_of_a_scheduler_never_run_are_not_cut(
    autojump_clock: Any,
) -> None:
    scheduler, _, _, _ = rig()
    scheduler.stop(0)
    await trio.sleep(60)
    added = await scheduler.add_wakeup("s", "later", delay="1h")
    assert [w.id for w in await scheduler.list_wakeups("s")] == [added.id]


@pytest.mark.parametrize("call", ["fire", "run_now"])
async def test_a_stop_bounds_the_settle_of_a_one_shot_still_in_flight(
    autojump_clock: Any, call: str
) -> None:
    # No run, so the stop comes first (the command line's second Ctrl-C); the one-shot's
    # store calls after it are its drain's, bounded by the stop, not a host's.
    hourly = Routine(name="a", prompt="p", cron="0 * * * *", timeout=7200)
    scheduler, agent, store, _ = rig(hourly, external_clock=True, store_timeout=60)
    agent.script(Hang(), session=hourly.session)
    ended: list[float] = []

    async def turn() -> None:
        await one_shot(scheduler, call, "a", at(10))
        ended.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(turn)
        await trio.sleep(5)
        assert len(agent.turns) == 1
        store.hang("settle")
        stopped = trio.current_time()
        scheduler.stop(0)  # at once
    assert ended[0] - stopped <= 2.0  # the stop's margin, not the store's 60 s


@pytest.mark.parametrize(
    ("timeout", "said"),
    [
        (0.5, "within 0.5s"),
        (2.25, "within 2.25s"),
        (59.5, "within 59.5s"),
        (60, "within 1m"),  # a minute and more: as durations are said elsewhere
        (90, "within 1m 30s"),
    ],
)
async def test_a_store_timeout_is_said_as_given_never_rounded_away(
    autojump_clock: Any, timeout: float, said: str
) -> None:
    store = MemoryStore()
    scheduler = Scheduler(agent=ScriptedAgent(), store=store, store_timeout=timeout)
    store.hang("list_wakeups")
    with pytest.raises(StateFault) as refused:
        await scheduler.list_wakeups("s")
    assert f"the store did not answer {said} (or before" in str(refused.value)
