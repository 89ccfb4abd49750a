"""Newest-claim reads in the PostgreSQL store: concurrent ``latest_fire`` calls share one query
per batch, and each caller gets what it would have read alone."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import pytest
import trio
import trio.testing
from pg import T0, admin, fresh_schema, require_server, with_app_name
from procs import wait_for
from psycopg import sql

from trio_routines import Completed, Routine, Scheduler, StateFault
from trio_routines.records import Fire, Gap, GapReason, Outcome
from trio_routines.scheduler.boot import BOOT_INTERRUPTED
from trio_routines.scheduler.openclaims import found_by
from trio_routines.stores.postgres import PostgresStore
from trio_routines.stores.postgres.reads import BATCH, READERS

MINUTE = timedelta(minutes=1)


@pytest.fixture
def url() -> str:
    return require_server()


@pytest.fixture
def schema(url: str) -> Iterator[str]:
    with fresh_schema() as name:
        yield name


def claims(schema: str) -> sql.Identifier:
    return sql.Identifier(schema, "trio_routines_claims")


def seed(schema: str, n: int) -> list[str]:
    """``n`` routines: every tenth without claims, the others with one to five claims whose
    newest is unsettled, completed (with or without a duration, a negative one), failed with
    a reason (one over 1 KiB), or carries an outcome no version writes."""
    names = [f"r{i:04d}" for i in range(n)]
    rows = []
    for i, name in enumerate(names):
        if i % 10 == 0:
            continue
        count = i % 5 + 1
        for k in range(count):
            slot = T0 + (i % 13 + k) * MINUTE
            outcome, ms, error = "completed", k, None
            if k == count - 1:
                outcome, ms, error = [
                    (None, None, None),
                    ("completed", i, None),
                    ("completed", None, None),
                    ("failed", 3, f"boom {i}"),
                    ("exploded", 7, None),
                    ("completed", -5, None),
                    ("failed", 1, "x" * 2000),
                ][i % 7]
            rows.append((name, slot, slot + timedelta(seconds=i % 3), outcome, ms, error))
    with admin() as conn, conn.cursor() as cursor:
        cursor.executemany(
            sql.SQL(
                "INSERT INTO {} (routine, slot, fired_at, outcome, ms, error) "
                "VALUES (%s, %s, %s, %s, %s, %s)"
            ).format(claims(schema)),
            rows,
        )
    return names


@pytest.fixture
async def store(url: str, schema: str) -> AsyncIterator[PostgresStore]:
    store = PostgresStore(with_app_name(url, f"app_{schema}"), schema=schema, timeout=30)
    await store.latest_fire("warm-up")  # the tables exist
    yield store
    await store.aclose()


@pytest.mark.slow
async def test_a_herd_of_reads_is_a_few_queries_and_each_reads_as_alone(
    store: PostgresStore,
    schema: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = seed(schema, 1000)
    asked = [*names, *names[:20]]  # some routines asked twice at once
    answers: dict[int, Fire | None] = {}

    async def ask(index: int, name: str) -> None:
        answers[index] = await store.latest_fire(name)

    calls = 0
    run = store._conns.run

    async def counted(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        return await run(*args)

    monkeypatch.setattr(store._conns, "run", counted)  # every call to the server
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        async with trio.open_nursery() as nursery:
            for index, name in enumerate(asked):
                nursery.start_soon(ask, index, name)
    # One at a time, 1,020 queries; here one per full batch.
    assert calls == -(-len(asked) // BATCH)
    monkeypatch.undo()
    herd = [answers[index] for index in range(len(asked))]
    herd_warnings = [r.getMessage() for r in caplog.records]

    # Every answer is its routine's newest claim...
    with admin() as conn:
        rows = conn.execute(
            sql.SQL("SELECT routine, max(slot) FROM {} GROUP BY routine").format(claims(schema))
        ).fetchall()
    newest = dict(rows)
    assert [None if fire is None else fire.slot for fire in herd] == [
        newest.get(name) for name in asked
    ]
    # ...read as each routine's own call reads it (every kind of row is among the first 140),
    # and as its history does, with the same warnings about odd rows, each naming its routine
    # and slot (a routine asked twice in one batch is read once, in two batches twice).
    sample = names[:140]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        alone = [await store.latest_fire(name) for name in sample]
    assert herd[: len(sample)] == alone
    assert herd[len(names) :] == alone[: len(asked) - len(names)]
    about_sample = {m for m in herd_warnings if m.split("/")[0].split()[-1] in sample}
    assert any("r0004/" in m and "outcome this version does not know" in m for m in about_sample)
    assert about_sample == {r.getMessage() for r in caplog.records}
    for name, fire in zip(sample, alone, strict=True):
        history = await store.history(name)
        assert fire == (history[-1] if history else None)

    by_name = dict(zip(sample, alone, strict=True))
    assert by_name["r0000"] is None
    assert by_name["r0007"] == Fire(T0 + 9 * MINUTE, T0 + 9 * MINUTE + timedelta(seconds=1))
    fire = by_name["r0001"]
    assert fire is not None
    assert (fire.outcome, fire.ms) == (Outcome.COMPLETED, 1)
    fire = by_name["r0004"]
    assert fire is not None
    assert (fire.outcome, fire.unknown_outcome, fire.ms) == (None, '"exploded"', 7)
    assert not fire.is_open  # an outcome this version does not know: settled, left as it is
    fire = by_name["r0006"]
    assert fire is not None
    assert fire.outcome is Outcome.FAILED
    assert fire.error is not None
    assert len(fire.error.encode()) <= 1024


async def test_readers_cancelled_with_their_queries_in_flight_strand_no_one(
    store: PostgresStore, schema: str
) -> None:
    names = seed(schema, 200)
    readers, queued = names[:READERS], names[READERS:]  # read alone / read together
    scopes = {name: trio.CancelScope() for name in names}
    answers: dict[str, Fire | None] = {}
    app = f"app_{schema}"

    async def ask(name: str) -> None:
        with scopes[name]:
            answers[name] = await store.latest_fire(name)

    def parked(count: int) -> bool:
        with admin() as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                "AND wait_event_type = 'Lock'",
                (app,),
            ).fetchone()
        return row is not None and row[0] >= count

    async def parked_at_least(count: int, what: str) -> None:
        await trio.to_thread.run_sync(lambda: wait_for(lambda: parked(count), 30, what))

    with trio.fail_after(60), admin() as blocker:  # a stranded caller would wait for ever
        # Every read waits behind this lock until the transaction ends.
        blocker.execute("BEGIN")
        blocker.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(claims(schema)))
        async with trio.open_nursery() as nursery:
            for name in [*readers, *queued]:  # in this order: READERS readers, then a queue
                nursery.start_soon(ask, name)
                await trio.testing.wait_all_tasks_blocked()
            await parked_at_least(READERS, "every reader's query parked")
            scopes[readers[0]].cancel()  # its place goes to the queue's first, who reads all
            await parked_at_least(READERS + 1, "the queue's read parked")
            scopes[queued[-1]].cancel()  # gives up while its routine is being read
            for name in [*readers[1:], queued[0]]:  # every reader goes at once
                scopes[name].cancel()
            await parked_at_least(READERS + 2, "the next readers parked")
            assert answers == {}
            blocker.execute("COMMIT")
    expected = {name: (await store.history(name) or [None])[-1] for name in queued[1:-1]}
    assert answers == expected


@pytest.mark.slow
async def test_a_boot_of_many_routines_reads_every_newest_claim(
    store: PostgresStore, schema: str
) -> None:
    names = seed(schema, 300)
    # Unsettled: no outcome. One this version does not know was settled by someone: left.
    unsettled = [name for i, name in enumerate(names) if i % 10 and i % 7 == 0]
    unknown = [name for i, name in enumerate(names) if i % 10 and i % 7 == 4]

    class Agent:
        async def invoke(self, session: str, text: str) -> AsyncIterator[Any]:
            yield Completed()

    scheduler = Scheduler(
        agent=Agent(),
        store=store,
        # Yearly: nothing is due at boot, nothing catches up.
        routines=[Routine(name=name, prompt="p", cron="0 0 1 1 *") for name in names],
        now=lambda: T0 + timedelta(days=1),
        wakeups=False,
    )
    reads, settles = store._newest.reads, store._batches.settles.batches
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        scheduler.stop(0)
    # Every routine's newest claim, then the interrupted ones' again (their records checked):
    # batched too, the first read back perhaps alone (it leads a batch as the others come).
    read_back = store._newest.reads - reads - -(-len(names) // BATCH)
    assert 1 <= read_back <= 2
    assert store._batches.settles.batches - settles == 1  # every open claim interrupted, together
    newest = {name: (await store.history(name) or [None])[-1] for name in names}
    # Each unsettled newest claim was recorded interrupted, and only those.
    interrupted = found_by(BOOT_INTERRUPTED, scheduler.replica)
    for name in names:
        fire = newest[name]
        if name in unsettled:
            assert fire is not None
            assert (fire.outcome, fire.error) == (Outcome.INTERRUPTED, interrupted)
        elif name in unknown:
            assert fire is not None
            assert (fire.outcome, fire.unknown_outcome, fire.ms) == (None, '"exploded"', 7)
        else:
            assert fire is None or fire.error != interrupted
    # The last success of each routine whose newest claim completed, seeded from its read;
    # every other routine has the series too (gaps.py: alerts that cannot be blind).
    completed = {
        name: fire.fired_at + timedelta(milliseconds=fire.ms or 0)
        for name, fire in newest.items()
        if fire is not None and fire.outcome is Outcome.COMPLETED
    }
    seeded = scheduler.metrics.last_success
    assert {name: seeded[name] for name in completed} == completed
    assert seeded.keys() == set(names)


async def test_a_batch_that_fails_gives_each_caller_its_own_error(url: str) -> None:
    refused = PostgresStore("postgresql://postgres@127.0.0.1:1/test", timeout=5)
    errors: dict[str, str] = {}

    async def ask(store: PostgresStore, name: str) -> None:
        with pytest.raises(StateFault) as caught:
            await store.latest_fire(name)
        errors[name] = str(caught.value)

    async with trio.open_nursery() as nursery:
        for name in ("a", "b", "c"):
            nursery.start_soon(ask, refused, name)
    assert refused._newest.reads == 1
    for name in ("a", "b", "c"):
        assert errors[name].startswith(f"the newest claim of {name!r} is unreadable in ")
        assert "Connection refused" in errors[name]
    await refused.aclose()

    errors.clear()
    closed = PostgresStore(url)
    await closed.aclose()
    async with trio.open_nursery() as nursery:
        for name in ("a", "b"):
            nursery.start_soon(ask, closed, name)
    assert errors == dict.fromkeys("ab", f"the PostgreSQL store {closed.where} is closed")


@pytest.mark.slow
async def test_a_boot_reads_the_resumes_of_its_catch_ups_together(
    store: PostgresStore, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    names = seed(schema, 300)
    now = T0 + timedelta(days=1, minutes=30)
    resumed = [name for i, name in enumerate(names) if i % 3 == 0]
    for name in resumed:  # after every slot it missed: no catch-up
        await store.set_paused(name, True)
        await store.set_paused(name, False, now - timedelta(minutes=10))
    answers: dict[str, object] = {}

    async def ask(name: str) -> None:
        answers[name] = await store.resumed_at(name)

    async with trio.open_nursery() as nursery:
        for name in names:
            nursery.start_soon(ask, name)
    assert answers == {name: await store.resumed_at(name) for name in names}
    assert answers == {
        name: now - timedelta(minutes=10) if name in resumed else None for name in names
    }

    class Agent:
        async def invoke(self, session: str, text: str) -> AsyncIterator[Any]:
            yield Completed()

    scheduler = Scheduler(
        agent=Agent(),
        store=store,
        routines=[Routine(name=name, prompt="p", cron="0 * * * *") for name in names],
        now=lambda: now,
        wakeups=False,
    )
    reads = store._resumes.reads
    with caplog.at_level(logging.INFO, logger="trio_routines"):
        async with trio.open_nursery() as nursery:
            await nursery.start(scheduler.run)
            scheduler.stop(0)
    assert store._resumes.reads - reads == 1  # the resumes of every catch-up, in one query
    catching_up = {
        m.split(":")[0]
        for m in (r.getMessage() for r in caplog.records)
        if m.endswith("catching up a missed run")
    }
    # Every routine with a claim catches up, but for those resumed since.
    assert catching_up == {name for i, name in enumerate(names) if i % 10 and i % 3}


async def test_the_gaps_of_many_routines_asked_at_once_are_read_in_few_queries(
    store: PostgresStore, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A boot after downtime asks for the gaps of every routine that catches up at once: a
    # query each, 10,000 at once, outlived the store's deadline and failed the boot.
    names = [f"g{i:04d}" for i in range(BATCH + 300)]
    for i, name in enumerate(names[:40]):
        for k in range(i % 3 + 1):  # one to three gaps, written newest last
            first = T0 + (10 * k + i % 7) * MINUTE
            gap = Gap(first, first + 2 * MINUTE, 3, GapReason.DOWN)
            assert await store.record_gap(name, gap)
    table = sql.Identifier(schema, "trio_routines_gaps")
    insert = sql.SQL(
        "INSERT INTO {} (routine, first_slot, last_slot, count, reason, estimated) "
        "VALUES (%s, %s, %s, %s, %s, false)"
    ).format(table)
    late = names[-1]  # its gaps written newest first: read back oldest first all the same
    with admin() as conn:
        conn.execute(insert, (names[1], T0 + 500 * MINUTE, T0 + 500 * MINUTE, 1, "a newer reason"))
        for k in (2, 1, 0):
            first = T0 + 100 * k * MINUTE
            conn.execute(insert, (late, first, first + MINUTE, 2, "down"))
    expected = {}
    for i, name in enumerate(names):
        firsts = [T0 + (10 * k + i % 7) * MINUTE for k in range(i % 3 + 1)] if i < 40 else []
        expected[name] = [Gap(f, f + 2 * MINUTE, 3, GapReason.DOWN) for f in firsts]
    firsts = [T0 + 100 * k * MINUTE for k in range(3)]
    expected[late] = [Gap(f, f + MINUTE, 2, GapReason.DOWN) for f in firsts]
    answers: list[tuple[str, list[Gap]]] = []

    async def ask(name: str) -> None:
        answers.append((name, await store.gaps(name)))

    reads = store._gap_reads.reads
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        async with trio.open_nursery() as nursery:
            for name in [names[2], names[2], *names]:  # asked thrice, in the first batch
                nursery.start_soon(ask, name)
    assert store._gap_reads.reads - reads <= -(-len(names) // BATCH) + READERS
    assert store._gap_reads.reads - reads < len(names) // 10
    assert sorted(name for name, _ in answers) == sorted([names[2], names[2], *names])
    assert all(gaps == expected[name] for name, gaps in answers)
    thrice = [gaps for name, gaps in answers if name == names[2]]
    assert thrice[0] == expected[names[2]] != []
    assert len({id(gaps) for gaps in thrice}) == 3  # each caller its own list
    (warning,) = [r.getMessage() for r in caplog.records]  # that row, and only its routine's
    assert warning.startswith(f"ignoring a gap of {names[1]!r} that cannot be read: ")
