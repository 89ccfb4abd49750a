"""A PostgreSQL connection that stalls silently (a frozen TCP proxy between the store and the
server): every store call ends within our own bound, a claim as a StateFault, a settle as a
logged fault, and `fire` and `serve` end while the database still answers nothing."""

from __future__ import annotations

import logging
import signal
import subprocess
from collections.abc import Awaitable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import trio
from pg import T0, Proxy, admin, fresh_schema, require_server, with_app_name
from procs import Env, lines, wait_for
from psycopg import sql
from test_postgres import _waiting_on_lock

from trio_routines.errors import StateFault, Unconfirmed
from trio_routines.records import ClaimStatus, Outcome
from trio_routines.stores.postgres import CLAIM_LOCK, PostgresStore
from trio_routines.wakeups import WakeupRequest

pytestmark = pytest.mark.slow  # each stalled call waits for its bound, in real time


@pytest.fixture
def schema() -> Iterator[str]:
    require_server()
    with fresh_schema() as name:
        with admin() as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        yield name


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    running = Proxy(require_server())
    yield running
    running.close()


async def test_every_call_on_a_frozen_connection_ends_within_its_bound(
    schema: str, proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    store = PostgresStore(proxy.url, schema=schema, timeout=1)
    await store.latest_fire("r")  # pool open, schema in place
    proxy.freeze()
    with pytest.raises(StateFault, match=r"could not claim slot .* no answer within 2 s"):
        await store.claim("r", T0, T0)
    with pytest.raises(StateFault, match="unreadable"):
        await store.history("r")
    with pytest.raises(StateFault, match=r"^the newest claim of 'r' is unreadable in postgres"):
        await store.latest_fire("r")  # a batch read: each caller's own message
    with pytest.raises(StateFault, match="could not add a wake-up"):
        await store.add_wakeup(WakeupRequest(session="s", prompt="p", fire_at=T0), T0)
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        await store.settle("r", T0, Outcome.COMPLETED, 5)  # logged, never raised
    assert "r: could not record the completed outcome of slot" in caplog.text
    await store.aclose()
    assert not proxy.thawed_late, "a call waited for the stall to end"
    proxy.thaw()


async def test_a_claim_committed_after_its_caller_gave_up_is_recorded_interrupted(
    schema: str, proxy: Proxy
) -> None:
    routine = f"held-{schema}"  # held by a blocker: no other test claims it
    app = f"app_{schema}"
    store = PostgresStore(with_app_name(proxy.url, app), schema=schema, timeout=5)
    await store.latest_fire(routine)
    with admin() as blocker:
        # Park the claim on the routine's lock inside the server, its whole pipeline sent.
        blocker.execute(
            "SELECT pg_advisory_lock(hashtext(%s), hashtext(%s))", (CLAIM_LOCK, routine)
        )
        outcome: list[BaseException | ClaimStatus] = []

        async def claim() -> None:
            try:
                outcome.append((await store.claim(routine, T0, T0)).status)
            except StateFault as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(claim)
            await trio.to_thread.run_sync(
                lambda: wait_for(lambda: _waiting_on_lock(app), 30, "the claim on its lock")
            )
            proxy.hold()  # the server commits the claim; its answer is lost on the way
            blocker.execute("SELECT pg_advisory_unlock_all()")
    (fault,) = outcome
    assert isinstance(fault, StateFault), "the claim waited for the stall to end"
    assert "no answer within" in str(fault)
    proxy.release()  # the late answer reaches the abandoned thread

    def interrupted() -> bool:
        with admin() as conn:
            rows = conn.execute(
                sql.SQL("SELECT slot, outcome FROM {}").format(
                    sql.Identifier(schema, "trio_routines_claims")
                )
            ).fetchall()
        return rows == [(T0, "interrupted")]

    await trio.to_thread.run_sync(lambda: wait_for(interrupted, 30, "the late claim settled"))
    direct = PostgresStore(require_server(), schema=schema)
    # Never run, never claimable again: at most once.
    assert (await direct.claim(routine, T0, T0)).status is ClaimStatus.DUPLICATE
    await direct.aclose()
    await store.aclose()


async def test_a_wake_up_change_whose_commit_is_answered_late_is_not_confirmed_and_a_take_undone(
    schema: str, proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    store = PostgresStore(proxy.url, schema=schema, timeout=1)
    direct = PostgresStore(require_server(), schema=schema)
    await store.latest_fire("r")  # pool open, schema in place
    stalled = "the commit was sent, and no answer within 2 s — the server or the network is stalled"

    async def commit_held(change: Awaitable[object], what: str, then: str) -> None:
        proxy.hold_at_commit()
        with pytest.raises(Unconfirmed) as unsure:
            await change
        assert str(unsure.value) == f"{what} in {store.where}: {stalled}; {then}"
        with trio.fail_after(30):
            await trio.to_thread.run_sync(proxy.wait_held, abandon_on_cancel=True)
        proxy.release()  # the late answer reaches the thread whose caller gave up

    # An add: made after all, as the message warns.
    request = WakeupRequest(session="s", prompt="p", fire_at=T0)
    await commit_held(
        store.add_wakeup(request, T0 - timedelta(hours=1)),
        "adding a wake-up for session 's' is not confirmed",
        "it may be made: look before asking again",
    )
    (added,) = await direct.list_wakeups()
    assert (added.session, added.fire_at) == ("s", T0)
    # A take: taken for nobody, then put back by its thread once the answer came.
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        await commit_held(
            store.take_due_wakeup(T0),
            "taking a due wake-up is not confirmed",
            "one taken is put back once the answer comes",
        )

        def put_back() -> bool:
            return f"wake-up {added.id} of session 's' was taken after" in caplog.text

        await trio.to_thread.run_sync(lambda: wait_for(put_back, 30, "the take undone"))
    assert await direct.list_wakeups() == [added]
    taken = await direct.take_due_wakeup(T0)  # fires once, at the next poll
    assert taken is not None
    assert taken.id == added.id
    assert not proxy.thawed_late
    await store.aclose()
    await direct.aclose()


def _env(tmp_path: Path, proxy: Proxy, schema: str) -> Env:
    env = Env(tmp_path)
    env.state = f"{proxy.url}?options=-csearch_path%3D{schema}"  # type: ignore[assignment]
    return env


def test_fire_ends_when_the_connection_freezes_during_its_turn(
    tmp_path: Path, schema: str, proxy: Proxy
) -> None:
    env = _env(tmp_path, proxy, schema)
    env.routine("daily", cron="0 9 * * *")
    # The turn itself freezes the proxy: the settle that follows meets a silent socket.
    agent = f"cmd:kill -STOP {proxy.proc.pid}; echo ran >> {env.marker}"
    proxy._arm(signal.SIGCONT)  # the watchdog, as freeze() would
    result = env.cli("fire", "daily", "--slot", "2026-07-07T09:00:00Z", "--agent", agent)
    assert not proxy.thawed_late, "fire waited for the stall to end"
    proxy.thaw()
    assert lines(env.marker) == ["ran"]
    assert "daily: could not record the completed outcome of slot" in result.stderr
    assert "no answer within" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_stops_within_grace_while_the_connection_is_frozen(
    tmp_path: Path, schema: str, proxy: Proxy
) -> None:
    env = _env(tmp_path, proxy, schema)
    env.routine("daily", cron="0 9 * * *")
    proc = env.serve("echo", "--poll", "1", "--grace", "1")
    proxy.freeze()
    trio.run(trio.sleep, 2)  # a wake-up poll is now waiting on the frozen socket
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError("serve did not stop while the database was stalled") from None
    assert not proxy.thawed_late, "serve waited for the stall to end"
    proxy.thaw()
    assert code == 0
    log = env.log()
    # The poll waits on the frozen socket either in its shielded take (cut off at the stop's
    # bound, and logged) or in its refresh of the paused routines (cancelled at once): both
    # end within the grace.
    if "wake-up poll failed" in log:
        assert "could not take a due wake-up" in log
    assert "Traceback" not in log
