"""Group commit in the PostgreSQL store: calls that arrive together share one transaction, and
decide exactly what they would have decided one by one."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import trio
from pg import T0, admin, fresh_schema, require_server, with_app_name
from procs import wait_for
from test_postgres import _waiting_on_lock

from trio_routines.errors import StateFault
from trio_routines.records import ClaimResult, ClaimStatus, Outcome
from trio_routines.stores.postgres import CLAIM_LOCK, PostgresStore

MINUTE = timedelta(minutes=1)


@pytest.fixture
def url() -> str:
    return require_server()


@pytest.fixture
def schema(url: str) -> Iterator[str]:
    with fresh_schema() as name:
        yield name


async def test_a_herd_of_claims_is_one_transaction_and_decided_as_one_by_one(
    url: str, schema: str
) -> None:
    store = PostgresStore(url, schema=schema)
    await store.claim("stale", T0 + MINUTE, T0)
    await store.claim("dup", T0, T0)
    before = store._batches.claims.batches
    results: dict[str, ClaimResult] = {}

    async def claim(routine: str) -> None:
        results[routine] = await store.claim(routine, T0, T0)

    async with trio.open_nursery() as nursery:
        for n in range(300):
            nursery.start_soon(claim, f"r{n}")
        nursery.start_soon(claim, "stale")
        nursery.start_soon(claim, "dup")
    # Without batching, 302 transactions; the first caller's yield lets the herd join it.
    assert store._batches.claims.batches - before <= 2
    assert all(results[f"r{n}"].taken for n in range(300))
    assert results["stale"] == ClaimResult(ClaimStatus.STALE, "2026-07-07T10-01-00-000Z")
    assert results["dup"].status is ClaimStatus.DUPLICATE
    assert [f.slot for f in await store.history("r299")] == [T0]
    await store.aclose()


async def test_claims_of_one_routine_in_a_herd_are_decided_in_arrival_order(
    url: str, schema: str
) -> None:
    store = PostgresStore(url, schema=schema, keep=2)
    order: list[tuple[int, ClaimStatus]] = []

    async def claim(minute: int) -> None:
        result = await store.claim("r", T0 + minute * MINUTE, T0)
        order.append((minute, result.status))

    async with trio.open_nursery() as nursery:
        for minute in (5, 3, 5, 6, 7, 8):  # arrival order within one scheduling round
            nursery.start_soon(claim, minute)
            await trio.lowlevel.checkpoint()
    assert sorted(order) == [
        (3, ClaimStatus.STALE),
        (5, ClaimStatus.DUPLICATE),
        (5, ClaimStatus.TAKEN),
        (6, ClaimStatus.TAKEN),
        (7, ClaimStatus.TAKEN),
        (8, ClaimStatus.TAKEN),
    ]
    # Pruned to the two newest, as one call at a time would have left it.
    assert [f.slot for f in await store.history("r")] == [T0 + 7 * MINUTE, T0 + 8 * MINUTE]
    await store.aclose()


async def test_a_herd_of_settles_is_one_statement(url: str, schema: str) -> None:
    store = PostgresStore(url, schema=schema)
    for n in range(200):
        await store.claim(f"r{n}", T0, T0)
    before = store._batches.settles.batches
    async with trio.open_nursery() as nursery:
        for n in range(200):
            nursery.start_soon(store.settle, f"r{n}", T0, Outcome.COMPLETED, n)
            await trio.lowlevel.checkpoint()  # arrival in this order
        nursery.start_soon(store.settle, "r0", T0, Outcome.FAILED, 1)  # the same slot: after
    # Without batching, 201 statements. How many batches the herd makes depends on how fast
    # the server answers while the settles trickle in (one per checkpoint, to fix their
    # order): a few on a loaded machine, a handful on an idle one -- never one per settle.
    assert store._batches.settles.batches - before <= 40
    fires = [await store.latest_fire(f"r{n}") for n in range(200)]
    assert [(f.outcome, f.ms) for f in fires if f is not None][1:] == [
        (Outcome.COMPLETED, n) for n in range(1, 200)
    ]
    first = fires[0]
    assert first is not None
    assert (first.outcome, first.ms) == (Outcome.FAILED, 1)  # arrival order kept
    await store.aclose()


async def test_a_caller_that_gives_up_while_its_batch_is_in_flight_leaves_no_open_claim(
    url: str, schema: str
) -> None:
    # Names of this test alone: the locks it holds are the database's, whatever the schema.
    q, r, s = (f"{name}-{schema}" for name in "qrs")
    app = f"app_{schema}"
    store = PostgresStore(with_app_name(url, app), schema=schema)
    await store.latest_fire(r)
    outcome: dict[str, object] = {}
    scopes = {name: trio.CancelScope() for name in (q, r, s)}
    decided = {name: trio.Event() for name in (q, r, s)}

    async def claim(routine: str) -> None:
        with scopes[routine]:
            outcome[routine] = (await store.claim(routine, T0, T0)).status
            decided[routine].set()

    def parked() -> None:
        wait_for(lambda: _waiting_on_lock(app), 30, "a batch on a routine's lock")

    with admin() as blocker:
        for routine in (q, r):
            blocker.execute(
                "SELECT pg_advisory_lock(hashtext(%s), hashtext(%s))", (CLAIM_LOCK, routine)
            )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(claim, q)  # a first batch, parked on q's lock
            await trio.to_thread.run_sync(parked)
            for routine in (r, s):  # the next batch, led by r
                nursery.start_soon(claim, routine)
                await trio.lowlevel.checkpoint()
            unlock = "SELECT pg_advisory_unlock(hashtext(%s), hashtext(%s))"
            blocker.execute(unlock, (CLAIM_LOCK, q))
            await decided[q].wait()
            await trio.to_thread.run_sync(parked)  # r and s on their way, parked on r's lock
            assert outcome == {q: ClaimStatus.TAKEN}
            scopes[s].cancel()  # s gives up while its claim is in flight
            await trio.sleep(0.1)
            blocker.execute(unlock, (CLAIM_LOCK, r))
    assert outcome == {q: ClaimStatus.TAKEN, r: ClaimStatus.TAKEN}
    (fire,) = await store.history(s)
    assert fire.outcome is Outcome.INTERRUPTED  # taken for nobody: never run, not in flight
    await store.aclose()


async def test_overlapping_herds_of_two_stores_never_deadlock(url: str, schema: str) -> None:
    # Each batch takes its routines' locks in one fixed order. Two stores' batches with the
    # same routines in opposite arrival orders, both parked on a lock in the middle: taken in
    # arrival order, each would hold half the other needs when it is released, and PostgreSQL
    # would abort one with "deadlock detected".
    app = f"app_{schema}"
    stores = [PostgresStore(with_app_name(url, app), schema=schema) for _ in range(2)]
    for store in stores:
        await store.latest_fire("warm")
    names = [f"r{n}-{schema}" for n in range(150)]  # the locks are the database's: ours
    middle = names[75]
    taken: list[str] = []
    faults: list[StateFault] = []

    async def claim(store: PostgresStore, routine: str) -> None:
        try:
            if (await store.claim(routine, T0, T0)).taken:
                taken.append(routine)
        except StateFault as exc:
            faults.append(exc)

    def parked(count: int) -> bool:
        with admin() as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                "AND wait_event_type = 'Lock'",
                (app,),
            ).fetchone()
        return row is not None and row[0] >= count

    with admin() as blocker:
        lock = "SELECT pg_advisory_lock(hashtext(%s), hashtext(%s))"
        blocker.execute(lock, (CLAIM_LOCK, middle))
        async with trio.open_nursery() as nursery:
            for forward, backward in zip(names, reversed(names), strict=True):
                nursery.start_soon(claim, stores[0], forward)
                nursery.start_soon(claim, stores[1], backward)
                await trio.lowlevel.checkpoint()  # each store's queue in its order
            await trio.to_thread.run_sync(
                lambda: wait_for(lambda: parked(2), 30, "both stores' batches parked")
            )
            blocker.execute("SELECT pg_advisory_unlock_all()")
    assert faults == []
    assert sorted(taken) == sorted(names)
    for store in stores:
        await store.aclose()
