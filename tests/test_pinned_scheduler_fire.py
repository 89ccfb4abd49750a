"""The fire path pinned whole (issue 11): what each claimed or refused slot returns, logs and
counts, and the settle's retries -- log lines compared entire, store calls by argument.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import attrs
import pytest
import trio
from scheduler_rig import HOURLY, T0, Recording, at, lines, rig

from trio_routines import Outcome, Routine, StateFault
from trio_routines.logs import FireFields
from trio_routines.records import ClaimResult, ClaimStatus
from trio_routines.scheduler import FireResult, NotYetDue
from trio_routines.scheduler.state import busy_reason
from trio_routines.testing import Busy, Complete, Fail, MemoryStore, WallClock


@pytest.fixture(autouse=True)
def _capture(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_routines")


# -- what each refused or claimed slot returns, logs and counts ------------------------------


async def test_every_kind_of_fire_result_names_its_routine_and_slot(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler, agent, _, _ = rig()
    caplog.handler.addFilter(FireFields())
    agent.script(Complete(duration=2), Busy())
    done = await scheduler.fire("hourly", at(9))
    duplicate = await scheduler.fire("hourly", at(9))
    stale = await scheduler.fire("hourly", at(8))
    busy = await scheduler.fire("hourly", at(10))
    await scheduler.pause("hourly")
    paused = [await scheduler.fire("hourly", at(10)) for _ in range(2)]
    assert done == FireResult("hourly", at(9), True, outcome=Outcome.COMPLETED, ms=2000)
    assert duplicate == FireResult("hourly", at(9), False, reason="duplicate")
    assert stale == FireResult("hourly", at(8), False, reason="stale")
    said = "the session already has a turn in flight"  # the agent's own words, after ours
    assert busy == FireResult(
        "hourly", at(10), True, reason=busy_reason("hourly", said), outcome=Outcome.SKIPPED, ms=0
    )
    assert busy.reason == (
        'the agent answered busy for "hourly" — this occurrence is skipped, the next fires per '
        f"cron ({said})"
    )
    assert paused == [FireResult("hourly", at(10), False, reason="paused")] * 2
    assert scheduler.statistics().outcomes == {
        "completed": 1,
        "duplicate": 1,
        "stale": 1,
        "skipped": 1,
        "paused": 2,
    }
    assert scheduler.metrics.refused == {
        ("hourly", "duplicate"): 1,
        ("hourly", "stale"): 1,
        ("hourly", "paused"): 2,
    }
    refused = [r for r in caplog.records if "skipping" in r.getMessage()]
    assert [(r.routine, r.slot) for r in refused] == [("hourly", at(9)), ("hourly", at(8))]  # type: ignore[attr-defined]
    assert [m for _, m in lines(caplog) if "paused —" in m] == [
        "hourly: paused — slot 2026-07-07T10:00:00.000Z is not claimed"
    ] * 2
    # The turn's lines carry how late it began: 90 minutes for 09:00, 32 for 10:00.
    firing = [r for r in caplog.records if "firing" in r.getMessage()]
    assert [r.late_ms for r in firing] == [5_400_000, 1_802_000]  # type: ignore[attr-defined]
    # The last success is stamped when the turn ended, on the wall clock, and so is the
    # settle's end in the result (not compared: see FireResult.settled_at).
    assert scheduler.metrics.last_success == {"hourly": T0 + timedelta(seconds=2)}
    assert done.settled_at == T0 + timedelta(seconds=2)
    assert busy.settled_at is not None
    assert [duplicate.settled_at, stale.settled_at, paused[0].settled_at] == [None] * 3
    assert attrs.evolve(done, settled_at=None) == done


async def test_start_fire_of_a_paused_routine_answers_paused(autojump_clock: Any) -> None:
    scheduler, agent, _, _ = rig(external_clock=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await scheduler.pause("hourly")
        claim = await scheduler.start_fire("hourly", at(10))
        scheduler.stop(0)
    assert claim == ClaimResult(ClaimStatus.PAUSED)
    assert agent.turns == []


async def test_a_clock_that_goes_back_during_the_paused_read_says_how_long_to_wait(
    autojump_clock: Any,
) -> None:
    wall = WallClock(T0)

    class Jumpy(Recording):
        async def paused(self) -> frozenset[str]:
            wall.jump(timedelta(minutes=-45))  # 09:45: the 10:00 slot lies ahead again
            return await super().paused()

    scheduler, agent, _, _ = rig(store=Jumpy())
    scheduler.now = wall
    with pytest.raises(NotYetDue) as caught:
        await scheduler.fire("hourly", at(10))
    assert str(caught.value) == (
        "slot 2026-07-07T10:00:00.000Z of 'hourly' has not arrived yet — "
        "a slot never fires before its instant"
    )
    assert caught.value.wait == 900.0
    assert agent.turns == []


# -- the settle and its retries --------------------------------------------------------------


async def test_a_settle_retried_says_at_which_attempt_it_was_recorded(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler, _, store, _ = rig()
    store.fail("settle", StateFault("locked"), times=1)
    await scheduler.fire("hourly", at(9))
    assert lines(caplog)[-1] == (
        logging.INFO,
        "hourly: the completed outcome of slot 2026-07-07T09:00:00.000Z recorded at attempt 2",
    )
    assert [f.outcome for f in await store.history("hourly")] == [Outcome.COMPLETED]


async def test_a_settle_given_up_is_logged_whole_and_counted_per_loss(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # 7.75 s of grace: the fifth wait would end exactly at the limit, which is still within it.
    scheduler, _, store, _ = rig(default_grace=7.75)
    store.fail("settle", StateFault("down"))
    await scheduler.fire("hourly", at(9))
    await scheduler.fire("hourly", at(10))
    errors = [m for level, m in lines(caplog) if level == logging.ERROR]
    assert errors == [
        f"hourly: the completed outcome of slot 2026-07-07T{hour}:00:00.000Z is lost after 6 "
        "attempts — the claim stays unsettled and the next boot records it as interrupted"
        for hour in ("09", "10")
    ]
    assert scheduler.statistics().settle_failures == {"hourly": 2}
    assert scheduler.metrics.settle_failures == {"hourly": 2}


async def test_a_stop_bounds_the_settles_retries_by_its_grace_and_margin(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler, agent, store, _ = rig(external_clock=True)
    agent.default = Complete(duration=1)
    store.fail("settle", StateFault("down"))
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await scheduler.start_fire("hourly", at(10))
        await trio.sleep(0.5)
        scheduler.stop(1)  # grace until 1.5 s, store calls until 3.5 s
    # attempts at 1, 1.25, 1.75 and 2.75 s; waiting 4 s more would pass 3.5 s
    (error,) = [m for level, m in lines(caplog) if level == logging.ERROR]
    assert "is lost after 4 attempts" in error


async def settle_hung_then_stopped(grace: float) -> None:
    """A fire of 10:00 whose one-second turn ended and whose settle the store never answers,
    stopped with ``grace`` half a second later."""
    scheduler, agent, store, _ = rig(external_clock=True)
    agent.default = Complete(duration=1)
    store.hang("settle")
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await scheduler.start_fire("hourly", at(10))
        await trio.sleep(1.5)  # the turn ended; its settle waits for the store
        scheduler.stop(grace)


async def test_a_settle_a_stop_ended_says_so_rather_than_blame_the_store(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # A second Ctrl-C (a stop of no grace) ends the turn and then its settle: the store was
    # not the one that failed to answer.
    await settle_hung_then_stopped(grace=0)
    assert [m for level, m in lines(caplog) if level >= logging.WARNING] == [
        "hourly: could not record the completed outcome of slot 2026-07-07T10:00:00.000Z: "
        "the stop ended it before the store answered",
        "hourly: the completed outcome of slot 2026-07-07T10:00:00.000Z is not recorded "
        "after 1 attempts, the stop ending the last — if that write never lands, the claim "
        "stays unsettled and the next boot records it as interrupted",
    ]


async def test_a_settle_its_store_timeout_cut_before_the_stops_bound_blames_the_store(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Store calls are bounded at 5 s: the settle begun at 1 s is cut at 6 s, within the stop's
    # grace (1.5 s + 4 s) and its margin (2 s more): the store did not answer, not the stop.
    await settle_hung_then_stopped(grace=4)
    assert next(m for level, m in lines(caplog) if level == logging.WARNING) == (
        "hourly: could not record the completed outcome of slot 2026-07-07T10:00:00.000Z: "
        "the store did not answer in time"
    )


async def test_a_settle_the_store_never_answers_is_logged_per_attempt(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler, _, store, _ = rig(default_grace=0.1)
    store.hang("settle")
    await scheduler.fire("hourly", at(9))
    assert [m for level, m in lines(caplog) if level == logging.WARNING] == [
        "hourly: could not record the completed outcome of slot 2026-07-07T09:00:00.000Z: "
        "the store did not answer in time"
    ]
    # Not "lost": a write the store has not answered may still land (a stalled disk).
    assert [m for level, m in lines(caplog) if level == logging.ERROR] == [
        "hourly: the completed outcome of slot 2026-07-07T09:00:00.000Z is not recorded "
        "after 1 attempts, the store not answering the last — if that write never lands, "
        "the claim stays unsettled and the next boot records it as interrupted"
    ]


async def test_a_settle_refused_after_one_the_store_never_answered_is_lost(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The last attempt decides the words: one the store answered with a failure wrote nothing.
    class SlowThenDown(MemoryStore):
        calls = 0

        async def settle(self, *args: Any, **kwargs: Any) -> bool:
            self.calls += 1
            if self.calls == 1:
                await trio.sleep_forever()
            return False

    scheduler, _, _, _ = rig(store=SlowThenDown(), default_grace=20)
    await scheduler.fire("hourly", at(9))
    assert [m for level, m in lines(caplog) if level == logging.ERROR] == [
        "hourly: the completed outcome of slot 2026-07-07T09:00:00.000Z is lost after 7 "
        "attempts — the claim stays unsettled and the next boot records it as interrupted"
    ]


async def test_a_first_settle_cut_by_its_deadline_is_retried_and_the_fire_goes_on(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The first attempt is bounded by the fire's own scope: its deadline must end only that
    # attempt, never the retries after it or the fire's result.
    class SlowOnce(MemoryStore):
        calls = 0

        async def settle(self, *args: Any, **kwargs: Any) -> bool:
            self.calls += 1
            if self.calls == 1:
                await trio.sleep_forever()
            return await super().settle(*args, **kwargs)

    store = SlowOnce()
    scheduler, _, _, _ = rig(store=store)
    result = await scheduler.fire("hourly", at(9))
    assert result == FireResult("hourly", at(9), True, outcome=Outcome.COMPLETED, ms=0)
    assert [m for level, m in lines(caplog) if level >= logging.INFO][-2:] == [
        "hourly: could not record the completed outcome of slot 2026-07-07T09:00:00.000Z: "
        "the store did not answer in time",
        "hourly: the completed outcome of slot 2026-07-07T09:00:00.000Z recorded at attempt 2",
    ]
    assert [f.outcome for f in await store.history("hourly")] == [Outcome.COMPLETED]
    assert scheduler.statistics().outcomes == {"completed": 1}
    await scheduler.fire("hourly", at(10))  # settled at once: its deadline is dropped with it
    assert not scheduler._parts.calls.deadlines._open


class _SlowFirst(MemoryStore):
    """A store whose first ``slow`` settles never answer (each is cut by its deadline)."""

    def __init__(self, slow: int) -> None:
        super().__init__()
        self.slow = slow
        self.settles = 0

    async def settle(self, *args: Any, **kwargs: Any) -> bool:
        self.settles += 1
        if self.settles <= self.slow:
            await trio.sleep_forever()
        return await super().settle(*args, **kwargs)


async def test_a_retry_cut_by_its_deadline_is_logged_whole_and_retried_again(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = _SlowFirst(slow=2)
    scheduler, _, _, _ = rig(store=store, default_grace=30)
    await scheduler.fire("hourly", at(9))
    cut = (
        "hourly: could not record the completed outcome of slot 2026-07-07T09:00:00.000Z: "
        "the store did not answer in time"
    )
    assert [m for level, m in lines(caplog) if level >= logging.INFO][-3:] == [
        cut,
        cut,
        "hourly: the completed outcome of slot 2026-07-07T09:00:00.000Z recorded at attempt 3",
    ]
    assert [f.outcome for f in await store.history("hourly")] == [Outcome.COMPLETED]


async def test_a_first_settle_cut_inside_a_stores_own_nursery_is_retried_as_well(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # A store may wait in a nursery of its own: the deadline's Cancelled then comes grouped.
    class Nursed(_SlowFirst):
        async def settle(self, *args: Any, **kwargs: Any) -> bool:
            if self.settles == 0:
                self.settles += 1
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(trio.sleep_forever)
            return await MemoryStore.settle(self, *args, **kwargs)

    store = Nursed(slow=0)
    scheduler, _, _, _ = rig(store=store)
    result = await scheduler.fire("hourly", at(9))
    assert result == FireResult("hourly", at(9), True, outcome=Outcome.COMPLETED, ms=0)
    assert [m for level, m in lines(caplog) if level >= logging.INFO][-1] == (
        "hourly: the completed outcome of slot 2026-07-07T09:00:00.000Z recorded at attempt 2"
    )


async def test_a_retried_settle_writes_the_turns_duration_and_failure(
    autojump_clock: Any,
) -> None:
    store = _SlowFirst(slow=1)
    scheduler, agent, _, _ = rig(store=store)
    agent.script(Fail("the tool broke", duration=2))
    await scheduler.fire("hourly", at(9))
    (fire,) = await store.history("hourly")
    assert (fire.outcome, fire.ms, fire.error) == (Outcome.FAILED, 2000, "the tool broke")
    store.fail("settle", StateFault("locked"), times=1)  # a retry after a refused settle, too
    agent.script(Fail("again", duration=3))
    await scheduler.fire("hourly", at(10))
    fire = (await store.history("hourly"))[-1]
    assert (fire.slot, fire.outcome, fire.ms, fire.error) == (
        at(10),
        Outcome.FAILED,
        3000,
        "again",
    )


async def test_a_retried_settle_overwrites_the_interrupted_another_replica_wrote_meanwhile(
    autojump_clock: Any,
) -> None:
    # The first settle fails just as another replica's boot records the claim interrupted;
    # the retry still writes the real outcome over it.
    class Raced(MemoryStore):
        raced = False

        async def settle(
            self, routine: str, slot: Any, outcome: Outcome, *a: Any, **k: Any
        ) -> bool:
            if not self.raced:
                self.raced = True
                await super().settle(
                    routine, slot, Outcome.INTERRUPTED, None, if_unsettled=True, error="boot"
                )
                return False
            return await super().settle(routine, slot, outcome, *a, **k)

    store = Raced()
    scheduler, _, _, _ = rig(store=store)
    await scheduler.fire("hourly", at(9))
    assert [f.outcome for f in await store.history("hourly")] == [Outcome.COMPLETED]


async def test_a_replica_booting_while_another_is_mid_turn_leaves_its_claim_alone(
    autojump_clock: Any,
) -> None:
    # Replica B boots while A is mid-turn: A holds the claim, so B leaves it open (running,
    # not interrupted); A's real outcome is the one recorded.
    store = MemoryStore()
    first, agent, _, _ = rig(external_clock=True, store=store)
    second, _, _, _ = rig(external_clock=True, store=store)
    agent.default = Complete(duration=10)
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        await first.start_fire("hourly", at(10))
        await nursery.start(second.run)
        (open_claim,) = await store.history("hourly")
        assert (open_claim.outcome, open_claim.replica) == (None, first.replica)
        assert await store.claims_alive([("hourly", at(10))]) == [True]
        await trio.sleep(11)
        first.stop(0)
        second.stop(0)
    (fire,) = await store.history("hourly")
    assert (fire.outcome, fire.ms, fire.error) == (Outcome.COMPLETED, 10_000, None)


async def test_a_paused_read_the_store_never_answers_fails_the_fire_naming_it(
    autojump_clock: Any,
) -> None:
    scheduler, agent, store, _ = rig()
    store.hang("paused")
    with pytest.raises(StateFault) as caught:
        await scheduler.fire("hourly", at(9))
    assert str(caught.value) == (
        "could not claim slot 2026-07-07T09:00:00.000Z of 'hourly': the paused routines are "
        "unreadable: the store did not answer within 5s (or before the stop's grace ran out)"
    )
    assert agent.turns == []


async def test_a_fire_whose_shared_paused_read_was_cancelled_reads_again(
    autojump_clock: Any,
) -> None:
    gate = trio.Event()

    class FirstReadStalls(Recording):
        reads = 0

        async def paused(self) -> frozenset[str]:
            self.reads += 1
            if self.reads == 2:  # the wake loop's first poll, after the boot's read
                await gate.wait()
            return await super().paused()

    store = FirstReadStalls()
    scheduler, agent, _, _ = rig(store=store, external_clock=True, poll_interval=30)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await store.set_paused("hourly", True)
        await trio.sleep(31)  # the poll's read is under way, stalled
        result: list[FireResult] = []

        async def fire() -> None:
            result.append(await scheduler.fire("hourly", at(10)))

        nursery.start_soon(fire)  # waits for the poll's read
        await trio.sleep(1)
        scheduler.stop(10)  # cancels the poll, and its read with it
    assert result == [FireResult("hourly", at(10), False, reason="paused")]
    assert agent.turns == []


async def test_fires_sharing_a_paused_read_that_failed_both_fail(autojump_clock: Any) -> None:
    daily = Routine(name="daily", prompt="d", cron="0 9 * * *")
    scheduler, agent, store, _ = rig(HOURLY, daily, external_clock=True)
    failures: list[str] = []

    async def fire(name: str) -> None:
        with pytest.raises(StateFault) as caught:
            await scheduler.fire(name, at(9))
        failures.append(str(caught.value))

    async with trio.open_nursery() as outer:
        # Running (so joined): the two fires reach their paused read together.
        await outer.start(scheduler.run)
        store.fail("paused", StateFault("unreadable"), times=1)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(fire, "hourly")
            nursery.start_soon(fire, "daily")
        scheduler.stop(0)
    assert sorted(failures) == [
        f"could not claim slot 2026-07-07T09:00:00.000Z of '{name}': unreadable"
        for name in ("daily", "hourly")
    ]
    assert agent.turns == []


async def test_fires_in_flight_together_are_counted_together_until_each_settles(
    autojump_clock: Any,
) -> None:
    daily = Routine(name="daily", prompt="d", cron="0 9 * * *")
    scheduler, agent, _, _ = rig(HOURLY, daily, external_clock=True)
    agent.script(Complete(duration=10), Complete(duration=20))
    drained: list[float] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        start = trio.current_time()
        await scheduler.start_fire("hourly", at(10))
        await scheduler.start_fire("daily", at(9))
        assert scheduler.statistics().in_flight == 2
        await trio.sleep(15)  # the first turn has settled, the second runs on
        assert scheduler.statistics().in_flight == 1
        scheduler.stop(60)
        await scheduler.wait_drained()  # waits for the second turn, not only the first
        drained.append(trio.current_time() - start)
    assert drained == [20.0]
    assert scheduler.statistics().in_flight == 0


async def test_a_poll_cancelled_while_it_waits_on_a_fires_paused_read_leaves_at_once(
    autojump_clock: Any,
) -> None:
    """The stop cancels the wake loop's poll, parked on the paused read a fire started: the
    loops end at once, the fire still gets the read's answer, and the poll's task (gone by
    then) is not woken when the read ends."""
    gate = trio.Event()

    class SlowRead(Recording):
        async def paused(self) -> frozenset[str]:
            if trio.current_time() > 1:  # the boot's read answers at once
                await gate.wait()
            return await super().paused()

    scheduler, agent, _, _ = rig(store=SlowRead(), external_clock=True, poll_interval=30)
    result: list[FireResult] = []
    ended: list[float] = []

    async def serve(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await scheduler.run(task_status=task_status)
        ended.append(trio.current_time())

    async def fire() -> None:
        result.append(await scheduler.fire("hourly", at(10)))

    start = trio.current_time()
    with trio.fail_after(600):
        async with trio.open_nursery() as nursery:
            await nursery.start(serve)
            await trio.sleep(29)
            nursery.start_soon(fire)  # its paused read stalls
            await trio.sleep(2)  # the poll at 30 s waits on that read
            scheduler.stop(10)  # cancels the poll
            await trio.sleep(2)
            gate.set()  # the read ends at 33 s, within its 5 s bound
    assert [t - start for t in ended] == [31.0]
    assert result == [FireResult("hourly", at(10), True, outcome=Outcome.COMPLETED, ms=0)]
    assert len(agent.turns) == 1
