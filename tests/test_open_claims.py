"""Every open claim whose holder is gone is recorded interrupted, not only the newest:
``Store.open_claims`` over every store, the boot and the watch under virtual time, and a
state directory left by dead processes under a real ``serve``."""

from __future__ import annotations

import collections
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trio
import trio.testing
from procs import Env, wait_for
from scheduler_rig import at, rig

from trio_routines import Outcome, Routine
from trio_routines.errors import StateFault
from trio_routines.instants import format_iso, slot_name
from trio_routines.replicas import ReplicaInfo, claim_key
from trio_routines.scheduler import openclaims
from trio_routines.scheduler.openclaims import BOOT_BUDGET, OPEN_INTERRUPTED, WATCH_BUDGET, found_by
from trio_routines.store import Store
from trio_routines.testing import MemoryStore

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


async def _seed(store: Store) -> set[tuple[str, datetime]]:
    """Claims of "a" and "b": open or settled, naming a replica or not. The open ones that
    name one, which ``open_claims`` must find."""
    for i in range(6):
        await store.claim("a", T0 + i * MINUTE, T0 + i * MINUTE, replica="gone")
    for i in (0, 2, 5):
        await store.settle("a", T0 + i * MINUTE, Outcome.COMPLETED, 1)
    await store.claim("b", T0, T0)  # names no replica: an older version's, never reported
    await store.claim("b", T0 + MINUTE, T0 + MINUTE, replica="gone")
    await store.claim("c", T0, T0, replica="gone")  # not one of the routines asked about
    return {("a", T0 + i * MINUTE) for i in (1, 3, 4)} | {("b", T0 + MINUTE)}


async def test_open_claims_naming_a_replica_are_found(store: Store) -> None:
    expected = await _seed(store)
    found = await store.open_claims(["a", "b"], 10_000)  # type: ignore[attr-defined]
    assert {(name, fire.slot) for name, fire in found} == expected
    assert all(fire.outcome is None and fire.replica == "gone" for _, fire in found)


async def test_open_claims_are_found_a_bounded_piece_per_call_and_all_in_the_end(
    store: Store,
) -> None:
    expected = await _seed(store)
    seen: set[tuple[str, datetime]] = set()
    for _ in range(60):
        found = await store.open_claims(["a", "b"], 1)  # type: ignore[attr-defined]
        assert len(found) <= 1
        seen |= {(name, fire.slot) for name, fire in found}
    assert seen == expected
    # Settled since: no longer found, however many times the store is asked.
    for name, slot in expected:
        await store.settle(name, slot, Outcome.INTERRUPTED, None, if_unsettled=True)
    for _ in range(60):
        assert await store.open_claims(["a", "b"], 1) == []  # type: ignore[attr-defined]


async def test_a_claim_found_open_is_found_again_on_a_later_pass_until_settled(
    store: Store,
) -> None:
    await store.claim("a", T0, T0, replica="gone")
    await store.claim("a", T0 + MINUTE, T0 + MINUTE, replica="gone")
    await store.settle("a", T0 + MINUTE, Outcome.COMPLETED, 1)
    passes = 0
    for _ in range(20):
        found = await store.open_claims(["a"], 1)  # type: ignore[attr-defined]
        passes += [(n, f.slot) for n, f in found] == [("a", T0)]
    assert passes >= 2  # a held claim is looked at again, pass after pass


def _fires(store: MemoryStore, name: str) -> list[tuple[datetime, Outcome | None, str | None]]:
    return [(f.slot, f.outcome, f.error) for f in store.claims[name].values()]


async def test_a_started_scheduler_records_older_open_claims_of_dead_holders_and_leaves_held_ones(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    routine = Routine(name="hourly", prompt="p", cron="0 * * * *")
    for hour in (7, 8, 9):  # 07:00 and 08:00 left open: a read-only disk, a dead writer
        await store.claim("hourly", at(hour), at(hour), replica="old")
    await store.settle("hourly", at(9), Outcome.COMPLETED, 5)
    live = await store.join(ReplicaInfo("live", "1", "h", 1, T0, T0))
    assert await live.take([claim_key("hourly", at(8))]) == [True]  # running there, still
    scheduler, _, _, _ = rig(routine, store=store, wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.testing.wait_all_tasks_blocked()  # looked for once the loops run
        scheduler.stop()
    assert _fires(store, "hourly")[:3] == [
        (at(7), Outcome.INTERRUPTED, found_by(OPEN_INTERRUPTED, scheduler.replica)),
        (at(8), None, None),
        (at(9), Outcome.COMPLETED, None),
    ]
    # Counted as this replica's record of an interrupted fire; the one held elsewhere is not.
    # Behind a newer completed claim, it is no failure in a row: the streak stays 0.
    assert scheduler.metrics.fires["hourly", "interrupted"] == 1
    assert scheduler.metrics.failing["hourly"] == 0
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [
        "hourly: the fire of slot 2026-07-07T07:00:00.000Z claimed at "
        "2026-07-07T07:00:00.000Z by replica old never finished and its holder is gone; "
        "recorded as interrupted"
    ]


async def test_an_open_claim_naming_this_replica_is_not_said_to_have_a_holder_gone(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Its own turn, whose settle the store never took, read "its holder is gone": this very
    # replica, alive, was named as a dead one.
    store = MemoryStore()
    routine = Routine(name="hourly", prompt="p", cron="0 * * * *")
    scheduler, _, _, _ = rig(routine, store=store, wakeups=False)
    for hour in (7, 8):
        await store.claim("hourly", at(hour), at(hour), replica=scheduler.replica)
    await store.settle("hourly", at(8), Outcome.COMPLETED, 5)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.testing.wait_all_tasks_blocked()  # looked for once the loops run
        scheduler.stop()
    assert _fires(store, "hourly")[0] == (
        at(7),
        Outcome.INTERRUPTED,
        found_by(OPEN_INTERRUPTED, scheduler.replica),
    )
    warned = [r.getMessage() for r in caplog.records if "never finished" in r.getMessage()]
    assert warned == [
        "hourly: the fire of slot 2026-07-07T07:00:00.000Z claimed at "
        f"2026-07-07T07:00:00.000Z by replica {scheduler.replica} never finished and this "
        "replica holds no turn of it (its outcome was never recorded, or an earlier process "
        "under this id made it); recorded as interrupted"
    ]


async def test_the_watch_records_an_open_claim_whose_holder_died_since_the_boot(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    routine = Routine(name="daily", prompt="p", cron="0 9 * * *")
    await store.claim("daily", at(8), at(8), replica="other")  # another replica's turn
    await store.claim("daily", at(9), at(9), replica="other")  # later slots went on
    await store.settle("daily", at(9), Outcome.COMPLETED, 5)
    other = await store.join(ReplicaInfo("other", "1", "h", 1, T0, T0))
    assert await other.take([claim_key("daily", at(8))]) == [True]
    scheduler, _, _, _ = rig(routine, store=store, wakeups=False, poll_interval=30)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(120)
        assert store.claims["daily"][slot_name(at(8))].outcome is None  # held: left to it
        await other.release([claim_key("daily", at(8))])  # its holder is gone now
        await trio.sleep(120)
        scheduler.stop()
    assert store.claims["daily"][slot_name(at(8))].outcome is Outcome.INTERRUPTED


@pytest.mark.slow
def test_serve_records_the_older_open_claims_dead_processes_left_in_a_state_directory(
    env: Env,
) -> None:
    # As a SIGKILLed writer child or a read-only remount leaves them: claims that name their
    # replica, no outcome, no hold, and later slots of the routine settled above them.
    env.routine("minutely", cron="* * * * *")
    claims = env.state / "schedule" / "claims" / "minutely"
    claims.mkdir(parents=True)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    left = [now - timedelta(minutes=m) for m in (30, 20, 10)]
    for slot in left:
        record = {"firedAt": format_iso(slot), "replica": "dead-host:1"}
        (claims / slot_name(slot)).write_text(json.dumps(record))
    newest = now - timedelta(minutes=5)
    record = {"firedAt": format_iso(newest), "outcome": "completed", "ms": 3}
    (claims / slot_name(newest)).write_text(json.dumps(record))
    serve = env.start("serve", "--agent", "echo")

    def recorded() -> bool:
        outcomes = [json.loads((claims / slot_name(s)).read_text()).get("outcome") for s in left]
        return outcomes == ["interrupted"] * 3

    try:
        wait_for(recorded, 30, "the older open claims to be recorded interrupted")
    finally:
        serve.terminate()
        serve.wait(30)


class SettledMeanwhile(MemoryStore):
    """Its holder settles each claim asked about, and leaves, between the listing of the open
    claims and the check of their holds: a replica's stop, as seen by another's watch."""

    async def claims_alive(self, claims: Any) -> list[bool]:
        for routine, slot in claims:
            await self.settle(routine, slot, Outcome.INTERRUPTED, 7, error="interrupted by stop")
        return await super().claims_alive(claims)


async def test_a_claim_its_holder_settled_before_leaving_is_not_called_dead(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = SettledMeanwhile()
    routine = Routine(name="hourly", prompt="p", cron="0 * * * *")
    await store.claim("hourly", at(7), at(7), replica="stopping")  # its turn, being settled
    await store.claim("hourly", at(8), at(8), replica="other")  # the newest: the boot's
    await MemoryStore.settle(store, "hourly", at(8), Outcome.COMPLETED, 5)
    scheduler, _, _, _ = rig(routine, store=store, wakeups=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.testing.wait_all_tasks_blocked()
        scheduler.stop()
    assert _fires(store, "hourly")[0] == (at(7), Outcome.INTERRUPTED, "interrupted by stop")
    assert not [r for r in caplog.records if "never finished" in r.getMessage()]


@pytest.mark.parametrize(
    ("fault", "level", "said"),
    [
        (
            StateFault("disk on fire"),
            logging.WARNING,
            "the open claims of a could not be checked (tried again later): disk on fire",
        ),
        (
            RuntimeError("a bug"),
            logging.ERROR,
            "the open claims of a could not be checked: RuntimeError: a bug",
        ),
    ],
)
async def test_a_claim_whose_routine_cannot_be_read_again_waits_for_the_next_watch(
    autojump_clock: Any,
    caplog: pytest.LogCaptureFixture,
    fault: Exception,
    level: int,
    said: str,
) -> None:
    store = MemoryStore()
    routines = [Routine(name=name, prompt="p", cron="0 * * * *") for name in ("a", "b", "c")]
    for name in ("a", "b", "c"):
        await store.claim(name, at(7), at(7), replica="gone")
        await store.claim(name, at(8), at(8), replica="other")  # the newest: the boot's
        await store.settle(name, at(8), Outcome.COMPLETED, 5)
    store.fail("history", fault, times=1, routine="a")
    scheduler, _, _, _ = rig(*routines, store=store, wakeups=False, poll_interval=30)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.testing.wait_all_tasks_blocked()
        assert _fires(store, "a")[0] == (at(7), None, None)  # not recorded blind
        for name in ("b", "c"):  # the others are, in the same pass
            assert _fires(store, name)[0] == (
                at(7),
                Outcome.INTERRUPTED,
                found_by(OPEN_INTERRUPTED, scheduler.replica),
            )
        await trio.sleep(120)  # a watch later, the history is read: recorded
        scheduler.stop()
    assert _fires(store, "a")[0] == (
        at(7),
        Outcome.INTERRUPTED,
        found_by(OPEN_INTERRUPTED, scheduler.replica),
    )
    assert [
        (r.levelno, r.getMessage()) for r in caplog.records if "could not" in r.getMessage()
    ] == [(level, said)]


class RefusesInterrupted(MemoryStore):
    """A store that will not record the outcome of "hourly"'s slots before 08:00 (a claim
    file it refuses, a read-only disk): each settle of one is counted, by slot, and answers
    False, its fault logged (with ``raises``, raises it: a store's bug)."""

    def __init__(self, raises: Exception | None = None) -> None:
        super().__init__()
        self.asked: collections.Counter[datetime] = collections.Counter()
        self.raises = raises

    async def settle(self, routine: str, slot: datetime, *args: Any, **kwargs: Any) -> bool:
        if routine != "hourly" or slot >= at(8):
            return await super().settle(routine, slot, *args, **kwargs)
        self.asked[slot] += 1
        if self.raises is not None:
            raise self.raises
        logging.getLogger("trio_routines").warning("hourly: the claim is refused")
        return False


async def _refused_claims(store: RefusesInterrupted, *slots: datetime) -> None:
    for slot in slots:
        await store.claim("hourly", slot, slot, replica="gone")
    await store.claim("hourly", at(8), at(8), replica="other")  # the newest: the boot's
    await MemoryStore.settle(store, "hourly", at(8), Outcome.COMPLETED, 5)


async def test_a_dead_claim_the_store_will_not_record_is_said_so_once_and_tried_hourly(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Said "recorded as interrupted" when nothing was, again at every watch.
    store = RefusesInterrupted()
    await _refused_claims(store, at(7))
    scheduler, _, _, _ = rig(HOURLY_ROUTINE, store=store, wakeups=False, poll_interval=30)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(30 * 60)  # thirty watches: one try
        assert store.asked == {at(7): 1}
        await trio.sleep(start + 3600 - trio.current_time() + 90)  # an hour on: tried again
        assert store.asked == {at(7): 2}
        scheduler.stop()
    line = (
        "hourly: the fire of slot 2026-07-07T07:00:00.000Z claimed at 2026-07-07T07:00:00.000Z "
        "by replica gone never finished and its holder is gone; not recorded as interrupted "
        "(the store's line says why; tried again in an hour)"
    )
    refused = "hourly: the claim is refused"
    assert [m for m in caplog.messages if "07:00" in m or "refused" in m] == [refused, line] * 2
    assert _fires(store, "hourly")[0] == (at(7), None, None)


@pytest.mark.parametrize("slots", [(at(7),), (at(6), at(7))], ids=["within", "beyond"])
async def test_the_claims_left_for_an_hour_are_bounded(
    autojump_clock: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    slots: tuple[datetime, ...],
) -> None:
    monkeypatch.setattr(openclaims, "UNRECORDED_KEPT", 1)
    store = RefusesInterrupted()
    await _refused_claims(store, *slots)
    scheduler, _, _, _ = rig(HOURLY_ROUTINE, store=store, wakeups=False, poll_interval=30)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(10 * 60)
        scheduler.stop()
    if len(slots) == 1:  # remembered: left for the hour
        assert store.asked == {at(7): 1}
    else:  # one more than the bound: each forgets the other, and both are tried each watch
        assert min(store.asked.values()) > 5
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_store_that_raises_recording_a_dead_claim_is_not_said_to_have_recorded_it(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = RefusesInterrupted(raises=RuntimeError("a store's bug"))
    await _refused_claims(store, at(7))
    scheduler, _, _, _ = rig(HOURLY_ROUTINE, store=store, wakeups=False, poll_interval=30)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(5 * 60)
        scheduler.stop()
    assert store.asked == {at(7): 1}  # left for an hour, as a refused one is
    assert [m for m in caplog.messages if "07:00" in m] == [
        "hourly: slot 2026-07-07T07:00:00.000Z could not be recorded interrupted: "
        "RuntimeError: a store's bug",
        "hourly: the fire of slot 2026-07-07T07:00:00.000Z claimed at 2026-07-07T07:00:00.000Z "
        "by replica gone never finished and its holder is gone; not recorded as interrupted "
        "(the store's line says why; tried again in an hour)",
    ]
    assert scheduler.metrics.fires["hourly", "interrupted"] == 0


def _older_open_claim_store(store: MemoryStore) -> MemoryStore:
    """``store`` with "hourly"'s 07:00 left open by a dead replica; 08:00, the newest, settled."""

    async def seed() -> None:
        await store.claim("hourly", at(7), at(7), replica="gone")
        await store.claim("hourly", at(8), at(8), replica="other")
        await MemoryStore.settle(store, "hourly", at(8), Outcome.COMPLETED, 5)

    trio.run(seed)
    return store


HOURLY_ROUTINE = Routine(name="hourly", prompt="p", cron="0 * * * *")


async def _boot_and_watch(store: MemoryStore, watches: int = 1) -> None:
    scheduler, _, _, _ = rig(HOURLY_ROUTINE, store=store, wakeups=False, poll_interval=30)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(60 * watches)
        scheduler.stop()


class WithoutOpenClaims(MemoryStore):
    """A store written before open claims could be listed: it has no ``open_claims``."""

    def __getattribute__(self, name: str) -> Any:
        if name == "open_claims":
            raise AttributeError(name)
        return super().__getattribute__(name)


def test_a_store_that_cannot_list_open_claims_is_not_asked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = _older_open_claim_store(WithoutOpenClaims())
    trio.run(_boot_and_watch, store, clock=trio.testing.MockClock(autojump_threshold=0))
    assert _fires(store, "hourly")[0] == (at(7), None, None)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


class Budgets(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []

    async def open_claims(self, routines: Any, budget: int) -> Any:
        self.asked.append(budget)
        return await super().open_claims(routines, budget)


async def test_a_boot_and_each_watch_ask_for_their_own_budget(autojump_clock: Any) -> None:
    store = Budgets()
    await _boot_and_watch(store, watches=2)
    assert store.asked[0] == BOOT_BUDGET
    assert set(store.asked[1:]) == {WATCH_BUDGET}


class SlowToList(MemoryStore):
    """Its open claims are listed only once ``listed`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.listed = trio.Event()

    async def open_claims(self, routines: Any, budget: int) -> Any:
        await self.listed.wait()
        return await super().open_claims(routines, budget)


async def test_the_older_open_claims_are_looked_for_after_the_boot_not_in_it(
    autojump_clock: Any,
) -> None:
    # Housekeeping: up to BOOT_BUDGET claim reads that no slot's decision needs. The
    # scheduler is ready, with no time passed, while the store is still listing them, and
    # the claim it finds is recorded without waiting for a watch.
    store = SlowToList()
    await store.claim("hourly", at(7), at(7), replica="gone")
    await store.claim("hourly", at(8), at(8), replica="other")
    await MemoryStore.settle(store, "hourly", at(8), Outcome.COMPLETED, 5)
    scheduler, _, _, _ = rig(HOURLY_ROUTINE, store=store, wakeups=False, poll_interval=300)
    async with trio.open_nursery() as nursery:
        started = trio.current_time()
        await nursery.start(scheduler.run)
        assert trio.current_time() == started
        await trio.testing.wait_all_tasks_blocked()
        assert _fires(store, "hourly")[0] == (at(7), None, None)
        store.listed.set()
        await trio.testing.wait_all_tasks_blocked()
        assert trio.current_time() == started
        assert _fires(store, "hourly")[0] == (
            at(7),
            Outcome.INTERRUPTED,
            found_by(OPEN_INTERRUPTED, scheduler.replica),
        )
        scheduler.stop()


class Faulty(MemoryStore):
    def __init__(self, where: str, fault: Exception) -> None:
        super().__init__()
        self.where, self.fault = where, fault

    async def open_claims(self, routines: Any, budget: int) -> Any:
        if self.where == "open_claims":
            raise self.fault
        return await super().open_claims(routines, budget)

    async def claims_alive(self, claims: Any) -> list[bool]:
        if self.where == "claims_alive":
            return []  # an answer for no claim, asked about one
        return await super().claims_alive(claims)

    async def settle(self, routine: str, slot: datetime, *args: Any, **kwargs: Any) -> bool:
        if self.where == "settle" and str(kwargs.get("error")).startswith(OPEN_INTERRUPTED):
            raise self.fault
        return await super().settle(routine, slot, *args, **kwargs)


@pytest.mark.parametrize(
    ("where", "fault", "level", "said"),
    [
        (
            "open_claims",
            StateFault("disk on fire"),
            logging.WARNING,
            "the open claims could not be checked (tried again later): disk on fire",
        ),
        (
            "open_claims",
            RuntimeError("a bug"),
            logging.ERROR,
            "the open claims could not be checked: RuntimeError: a bug",
        ),
        (
            "claims_alive",
            RuntimeError("unused"),
            logging.ERROR,
            "the open claims could not be checked: ValueError: "
            "zip() argument 2 is shorter than argument 1",
        ),
        (
            "settle",
            RuntimeError("a bug"),
            logging.WARNING,
            "hourly: slot 2026-07-07T07:00:00.000Z could not be recorded interrupted: "
            "RuntimeError: a bug",
        ),
    ],
)
def test_a_store_that_fails_the_housekeeping_is_logged_and_never_ends_the_scheduler(
    caplog: pytest.LogCaptureFixture, where: str, fault: Exception, level: int, said: str
) -> None:
    store = _older_open_claim_store(Faulty(where, fault))
    trio.run(_boot_and_watch, store, clock=trio.testing.MockClock(autojump_threshold=0))
    assert _fires(store, "hourly")[0] == (at(7), None, None)  # nothing recorded blind
    logged = [(r.levelno, r.getMessage()) for r in caplog.records if "could not" in r.getMessage()]
    assert logged[0] == (level, said)


class SettledAfterTheReread(MemoryStore):
    """The dead-looking claim's holder settles it just after our second read of it."""

    async def history(self, routine: str) -> Any:
        fires = await super().history(routine)
        await MemoryStore.settle(self, routine, at(7), Outcome.COMPLETED, 9)
        return fires


def test_a_holders_outcome_is_never_overwritten() -> None:
    store = _older_open_claim_store(SettledAfterTheReread())
    trio.run(_boot_and_watch, store, clock=trio.testing.MockClock(autojump_threshold=0))
    assert _fires(store, "hourly")[0] == (at(7), Outcome.COMPLETED, None)
