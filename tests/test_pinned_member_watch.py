"""Pins ``scheduler/members.py``: the sweep of a member found dead (only its open newest
claims, those whose holds are free, each settled ``interrupted`` with one warning, never over
an outcome its holder wrote meanwhile), the watch's warning when the store does not answer,
and a lost presence joined again (a warning per failed try, then one line).

Under virtual time, one scheduler (external clock) and members joined straight to the
memory store."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from scheduler_rig import NO_ANSWER, T0, at, one_shot, rig

from trio_routines import Outcome, Routine, Scheduler
from trio_routines.errors import StateFault
from trio_routines.instants import format_iso
from trio_routines.presence import IdInUse
from trio_routines.records import Wakeup
from trio_routines.replicas import ReplicaInfo, claim_key, replica_key, session_key
from trio_routines.scheduler.members import SWEPT_INTERRUPTED
from trio_routines.scheduler.openclaims import OPEN_INTERRUPTED, found_by
from trio_routines.testing import Hang, MemoryPresence, MemoryStore, ScriptedAgent
from trio_routines.wakeups import WakeupRequest

ROUTINES = [Routine(name=name, prompt="p", cron="0 * * * *") for name in "abcd"]


def warned(caplog: pytest.LogCaptureFixture, part: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and part in r.getMessage()
    ]


def watched(store: MemoryStore) -> tuple[Scheduler, ScriptedAgent]:
    """A scheduler of ``ROUTINES`` on ``store`` (external clock) whose watch looks every 30 s."""
    scheduler, agent, _, _ = rig(*ROUTINES, external_clock=True, store=store, poll_interval=30)
    return scheduler, agent


async def member(store: MemoryStore, replica: str) -> MemoryPresence:
    presence = await store.join(ReplicaInfo(replica, "1", "h", 1, T0, T0))
    assert isinstance(presence, MemoryPresence)
    return presence


async def swept_once(store: MemoryStore, scheduler: Scheduler, name: str) -> None:
    """Run ``scheduler`` (a :func:`watched` one) through one watch, while member r2, holding
    an open claim of ``name`` at 9:00 made after the boot's first look, dies."""
    doomed = await member(store, "r2")
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.testing.wait_all_tasks_blocked()  # the first look for open claims is done
        await store.claim(name, at(9), at(9), replica="r2")
        doomed.vanish()
        await trio.sleep(31)  # one watch
        scheduler.stop(0)


async def test_a_dead_members_free_open_claims_are_swept_and_no_others(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    doomed, live = await member(store, "r2"), await member(store, "r3")
    scheduler, _ = watched(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.testing.wait_all_tasks_blocked()  # the first look for open claims is done
        # Made after the boot and that look, which would otherwise find them first.
        for name in "abd":
            await store.claim(name, at(9), at(9), replica="r2")
        await store.settle("d", at(9), Outcome.COMPLETED, 5)  # settled: nothing to sweep
        await store.claim("c", at(9), at(9), replica="r3")  # a live member's: not swept
        assert await live.take([claim_key("a", at(9))]) == [True]  # held: running elsewhere
        doomed.vanish()
        await trio.sleep(31)  # one watch
        scheduler.stop(0)
    outcomes = {
        name: (fire.outcome, fire.error) for name in "abcd" for fire in await store.history(name)
    }
    assert outcomes == {
        "a": (None, None),
        "b": (
            Outcome.INTERRUPTED,
            found_by(SWEPT_INTERRUPTED, scheduler.replica),
        ),  # after "a", left: the sweep goes on
        "c": (
            Outcome.INTERRUPTED,
            found_by(OPEN_INTERRUPTED, scheduler.replica),
        ),  # the walk's, not the sweep's
        "d": (Outcome.COMPLETED, None),
    }
    # Each one recorded here is counted here, by whichever path recorded it; no other. The
    # sweep's (a newest claim) is in the streak, read from the history holding it; the walk's
    # (it may lie behind newer claims) is not.
    counted = {key: n for key, n in scheduler.metrics.fires.items() if n}
    assert counted == {("b", "interrupted"): 1, ("c", "interrupted"): 1}
    assert {name: scheduler.metrics.failing.get(name) for name in "bc"} == {"b": 1, "c": None}
    # A cron routine's series made from the slot recorded, as a boot makes them.
    assert {name: scheduler.metrics.last_success.get(name) for name in "bc"} == {
        "b": at(9),
        "c": None,
    }
    assert warned(caplog, "that replica stopped") == [
        f"b: the fire of slot {format_iso(at(9))} claimed at {format_iso(at(9))} by replica r2 "
        "never finished — that replica stopped mid-turn; recorded as interrupted"
    ]


class RefusesSettles(MemoryStore):
    """A store that records no outcome (a read-only disk): each settle answers False."""

    async def settle(self, *args: Any, **kwargs: Any) -> bool:
        return False


async def test_a_dead_members_claim_the_store_will_not_record_is_not_said_recorded(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = RefusesSettles()
    scheduler, _ = watched(store)
    await swept_once(store, scheduler, "b")
    assert warned(caplog, "that replica stopped") == [
        f"b: the fire of slot {format_iso(at(9))} claimed at {format_iso(at(9))} by replica r2 "
        "never finished — that replica stopped mid-turn; not recorded as interrupted (the "
        "store's line says why; left open)"
    ]
    assert [(f.outcome, f.error) for f in await store.history("b")] == [(None, None)]


class RemovedMeanwhile(MemoryStore):
    """The routines are updated (``b`` removed) just as the sweep asks whether a claim lives."""

    scheduler: Scheduler

    async def claims_alive(self, claims: Any) -> list[bool]:
        self.scheduler.update_routines([r for r in ROUTINES if r.name != "b"])
        return await super().claims_alive(claims)


async def test_a_routine_removed_while_the_sweep_reads_is_swept_and_not_armed(
    autojump_clock: Any,
) -> None:
    store = RemovedMeanwhile()
    scheduler, _ = watched(store)
    store.scheduler = scheduler
    await swept_once(store, scheduler, "b")
    ((fire_outcome, error),) = [(f.outcome, f.error) for f in await store.history("b")]
    assert (fire_outcome, error) == (
        Outcome.INTERRUPTED,
        found_by(SWEPT_INTERRUPTED, scheduler.replica),
    )
    assert "b" not in scheduler.metrics.last_success  # no longer loaded: no series made


class SettledMeanwhile(MemoryStore):
    """The holder settles its claim just as the sweep asks whether it lives."""

    async def claims_alive(self, claims: Any) -> list[bool]:
        for routine, slot in claims:
            await self.settle(routine, slot, Outcome.COMPLETED, 7)
        return await super().claims_alive(claims)


async def test_the_sweep_never_overwrites_an_outcome_written_meanwhile(
    autojump_clock: Any,
) -> None:
    store = SettledMeanwhile()
    scheduler, _ = watched(store)
    await swept_once(store, scheduler, "a")
    (fire,) = await store.history("a")
    assert (fire.outcome, fire.ms) == (Outcome.COMPLETED, 7)


async def test_a_watch_the_store_does_not_answer_is_a_warning_and_the_next_one_goes_on(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    scheduler, _, _, _ = rig(external_clock=True, store=store, poll_interval=30)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        store.fail("beat", StateFault("disk full"), times=1)
        await trio.sleep(61)
        assert store.members[scheduler.replica].info.last_seen > T0  # the second watch beat
        scheduler.stop(0)
    assert warned(caplog, "the watch") == [
        f"replica {scheduler.replica}: the store did not answer the watch: disk full"
    ]


async def test_a_watch_beat_the_store_never_answers_is_given_up_at_its_bound_and_said(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # It passed silently to the sweep: a store that never answers looked like one that did.
    store = MemoryStore()
    scheduler, _, _, _ = rig(external_clock=True, store=store, poll_interval=30)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        store.hang("beat")
        await trio.sleep(30 + 5 + 1)  # the look at 30 s, given up 5 s later (store_timeout)
        store.hangs.discard("beat")
        assert warned(caplog, "the watch") == [
            f"replica {scheduler.replica}: the store did not answer the watch: the replica's "
            "record was not refreshed: the store did not answer within 5s (or before the "
            "stop's grace ran out)"
        ]
        scheduler.stop(0)


async def test_a_lost_presence_tries_to_join_again_each_interval_until_the_store_takes_it(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_routines")
    store = MemoryStore()
    scheduler, _, _, _ = rig(external_clock=True, store=store, poll_interval=30)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        (first,) = await store.replicas()
        lost = store.members[scheduler.replica]
        assert isinstance(lost, MemoryPresence)
        store.fail("join", StateFault("connection refused"), times=2)
        lost.lose()
        await trio.sleep(100)
        assert store.members[scheduler.replica] is not lost
        # The same replica, up since it first joined: its record said it started again.
        (again,) = await store.replicas()
        assert again.started == first.started
        assert again.last_seen > first.last_seen
        scheduler.stop(0)
    replica = scheduler.replica
    assert warned(caplog, "could not join") == 2 * [
        f"replica {replica} could not join its store again: connection refused"
    ]
    assert [r.getMessage() for r in caplog.records if "joined its store" in r.getMessage()] == [
        f"replica {replica} joined its store again"
    ]


class CountedReads(MemoryStore):
    """Counts the newest-claim reads: a sweep reads every routine's."""

    def __init__(self) -> None:
        super().__init__()
        self.newest_reads = 0

    async def latest_fire(self, routine: str) -> Any:
        self.newest_reads += 1
        return await super().latest_fire(routine)


async def test_each_dead_member_is_swept_once_and_one_dead_at_the_boot_never(
    autojump_clock: Any,
) -> None:
    store = CountedReads()
    early, first, second = [await member(store, name) for name in ("r0", "r2", "r3")]
    early.vanish()  # dead before the boot, which reconciled what it left
    scheduler, _ = watched(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        booted = store.newest_reads
        await trio.sleep(61)  # two watches: nobody died since the boot
        assert store.newest_reads == booted
        first.vanish()
        await trio.sleep(30)  # the next watch sweeps it
        assert store.newest_reads == booted + len(ROUTINES)
        second.vanish()
        await trio.sleep(90)  # one sweep for it; none again for the first
        scheduler.stop(0)
    assert store.newest_reads == booted + 2 * len(ROUTINES)


class ListsEveryoneDead(MemoryStore):
    """Once ``stale``, a stale view of the members: every one, the reader too, not alive."""

    stale = False

    async def replicas(self) -> list[ReplicaInfo]:
        members = await super().replicas()
        return [attrs.evolve(m, alive=False) for m in members] if self.stale else members


async def test_a_store_listing_this_replica_dead_never_makes_it_sweep_its_own_claims(
    autojump_clock: Any,
) -> None:
    store = ListsEveryoneDead()
    await member(store, "r2")
    scheduler, _ = watched(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.testing.wait_all_tasks_blocked()
        await store.claim("a", at(9), at(9), replica=scheduler.replica)  # ours, its hold free
        await store.claim("b", at(9), at(9), replica="r2")
        store.stale = True  # r2 is listed dead, and so are we
        await trio.sleep(31)
        scheduler.stop(0)
    # Ours is an open claim no turn of ours holds: the walk's, never taken for a dead one's.
    assert [(f.outcome, f.error) for n in "ab" for f in await store.history(n)] == [
        (Outcome.INTERRUPTED, found_by(OPEN_INTERRUPTED, scheduler.replica)),
        (Outcome.INTERRUPTED, found_by(SWEPT_INTERRUPTED, scheduler.replica)),
    ]


async def test_a_replicas_read_that_stalls_is_a_warning_and_the_next_watch_sweeps(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    doomed = await member(store, "r2")
    scheduler, _ = watched(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.testing.wait_all_tasks_blocked()
        await store.claim("a", at(9), at(9), replica="r2")
        store.hang("replicas")
        doomed.vanish()
        await trio.sleep(36)  # one watch, cut at the store calls' bound
        assert [(f.outcome, f.error) for f in await store.history("a")] == [(None, None)]
        store.hangs.discard("replicas")
        await trio.sleep(30)
        scheduler.stop(0)
    assert [(f.outcome, f.error) for f in await store.history("a")] == [
        (Outcome.INTERRUPTED, found_by(SWEPT_INTERRUPTED, scheduler.replica))
    ]
    assert warned(caplog, "the watch") == [
        f"replica {scheduler.replica}: the store did not answer the watch: the replicas are "
        f"unreadable: {NO_ANSWER}"
    ]


class NoReplicas(MemoryStore):
    """A store that keeps no members' list (one written before replicas were listed)."""

    def __getattribute__(self, name: str) -> Any:
        if name == "replicas":
            raise AttributeError(name)
        return super().__getattribute__(name)


async def test_a_store_without_a_members_list_is_never_swept_and_the_watch_goes_on(
    autojump_clock: Any,
) -> None:
    store = NoReplicas()
    doomed = await member(store, "r2")
    scheduler, _ = watched(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.testing.wait_all_tasks_blocked()
        await store.claim("a", at(9), at(9), replica="r2")
        doomed.vanish()
        await trio.sleep(61)
        assert store.members[scheduler.replica].info.last_seen > T0  # it beats all the same
        scheduler.stop(0)
    # No sweep: the walk for open claims settles it, in its own words.
    assert [(f.outcome, f.error) for f in await store.history("a")] == [
        (Outcome.INTERRUPTED, found_by(OPEN_INTERRUPTED, scheduler.replica))
    ]


async def test_the_watch_beats_with_the_turns_in_flight_and_goes_on_after_a_rejoin(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    doomed = await member(store, "r2")
    scheduler, agent = watched(store)
    agent.script(Hang())
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await scheduler.start_fire("a", at(10))  # its turn hangs
        await trio.sleep(31)
        assert store.members[scheduler.replica].info.in_flight == 1
        lost = store.members[scheduler.replica]
        assert isinstance(lost, MemoryPresence)
        lost.lose()  # the turn is ended; the watch joins again
        await trio.sleep(31)
        assert store.members[scheduler.replica] is not lost
        await store.claim("b", at(9), at(9), replica="r2")
        doomed.vanish()
        await trio.sleep(31)  # the watch goes on: it sweeps
        scheduler.stop(0)
    assert [(f.outcome, f.error) for f in await store.history("b")] == [
        (Outcome.INTERRUPTED, found_by(SWEPT_INTERRUPTED, scheduler.replica))
    ]


@pytest.mark.parametrize(
    ("how", "why"),
    [("fails", "unreadable"), ("stalls", f"the replicas are unreadable: {NO_ANSWER}")],
)
async def test_the_boots_unreadable_members_are_a_debug_line_and_the_boot_goes_on(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture, how: str, why: str
) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_routines")
    store = MemoryStore()
    if how == "fails":
        store.fail("replicas", StateFault("unreadable"), times=1)
    else:
        store.hang("replicas")  # answered by the store calls' bound
    scheduler, _ = watched(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        store.hangs.discard("replicas")
        scheduler.stop(0)
    assert [r.getMessage() for r in caplog.records if "replicas could not" in r.getMessage()] == [
        f"the replicas could not be read at the boot: {why}"
    ]


async def lose_then_refuse(store: MemoryStore, scheduler: Scheduler, error: StateFault) -> None:
    """``scheduler``'s presence is lost, and the watch's first try to join again (after its
    30 s) fails with ``error``."""
    lost = store.members[scheduler.replica]
    assert isinstance(lost, MemoryPresence)
    store.fail("join", error, times=1)
    lost.lose()
    await trio.sleep(31)


async def test_a_fire_while_the_presence_is_lost_fails_before_its_claim(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    scheduler, agent = watched(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await lose_then_refuse(store, scheduler, StateFault("connection refused"))
        with pytest.raises(StateFault) as raised:
            await scheduler.start_fire("a", at(10))
        scheduler.stop(0)
    assert str(raised.value) == (
        f"could not claim slot 2026-07-07T10:00:00.000Z of 'a': replica {scheduler.replica} "
        "lost its hold on the memory store"
    )
    assert await store.history("a") == []  # nothing burned
    assert agent.turns == []


async def test_a_join_again_refused_for_its_own_id_says_whose_it_may_be(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The server had not yet let go of the replica's earlier connection: "give each replica
    # its own --replica" sent operators looking for a twin that did not exist.
    store = MemoryStore()
    scheduler, _ = watched(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await lose_then_refuse(store, scheduler, IdInUse("replica id in use"))
        scheduler.stop(0)
    assert (
        f"replica {scheduler.replica} could not join its store again yet: its id is still held "
        "there, by its own earlier connection until the server lets that go (or by another "
        "replica given the same --replica)"
    ) in [record.getMessage() for record in caplog.records]


class ClaimAnsweredLate(MemoryStore):
    """A store whose claims wait for ``answer`` (a commit under way when the presence goes)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = trio.Event()
        self.answer = trio.Event()

    async def claim(self, *args: Any, **kwargs: Any) -> Any:
        self.asked.set()
        await self.answer.wait()
        return await super().claim(*args, **kwargs)


async def lose_while_claiming(
    store: ClaimAnsweredLate,
    scheduler: Scheduler,
    wait: float,
    meanwhile: Callable[[], None] = lambda: None,
    after: Callable[[], None] = lambda: None,
) -> None:
    """Run ``scheduler`` and fire ``a`` at 10:00; while its claim is on its way, lose the
    presence, wait ``wait`` s, call ``meanwhile``, let the claim answer, and once the fire
    ended call ``after`` (before the stop, whose leave drops every hold)."""
    fired = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)

        async def fire() -> None:
            await scheduler.fire("a", at(10))
            fired.set()

        nursery.start_soon(fire)
        await store.asked.wait()
        lost = store.members[scheduler.replica]
        assert isinstance(lost, MemoryPresence)
        lost.lose()
        await trio.sleep(wait)
        meanwhile()
        store.answer.set()
        await fired.wait()
        after()
        scheduler.stop(0)


async def test_a_claim_answered_after_the_presence_was_lost_runs_no_turn(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The loss ended the turns in flight, and this one was not yet: started now, it would run
    # while another replica may take its session (the store no longer vouches for our holds).
    store = ClaimAnsweredLate()
    scheduler, agent = watched(store)
    await lose_while_claiming(store, scheduler, 1)  # the watch ended the turns: none yet
    assert agent.turns == []
    (fire,) = await store.history("a")
    assert (fire.outcome, fire.ms, fire.error) == (
        Outcome.INTERRUPTED,
        0,  # no turn ran
        "interrupted: this replica lost its hold on the store before the turn began: not run",
    )
    assert (
        "a: interrupted: this replica lost its hold on the store before the turn began: not run"
        in warned(caplog, "before the turn began")
    )


async def test_a_hold_granted_to_a_lost_presence_is_let_go_by_the_replicas_next(
    autojump_clock: Any,
) -> None:
    # The claim committed after the replica joined again, its session's hold naming this
    # replica: left, every replica would take the session for busy while this one lives.
    store = ClaimAnsweredLate()
    scheduler, _, _, _ = rig(
        *ROUTINES, external_clock=True, store=store, poll_interval=30, store_timeout=60
    )
    key = session_key(ROUTINES[0].session)

    def late_commit() -> None:
        rejoined = store.members[scheduler.replica]  # joined again after the watch's 30 s
        store.holds[key] = rejoined  # what the late commit wrote, naming this replica

    def let_go() -> None:
        assert key not in store.holds

    await lose_while_claiming(store, scheduler, 31, late_commit, let_go)


@pytest.mark.parametrize("call", ["fire", "run_now"])
async def test_a_one_shot_turn_is_ended_when_its_presence_is_lost(
    autojump_clock: Any, call: str
) -> None:
    # No run, so no member watch (the command line's fire and run): a guard of the one-shot
    # ends its turn all the same, as another replica may now take its session.
    store = MemoryStore()
    bounded = Routine(name="a", prompt="p", cron="0 * * * *", timeout=7200)  # else: failed
    scheduler, agent, _, _ = rig(bounded, external_clock=True, store=store, poll_interval=30)
    agent.script(Hang(), session=bounded.session)
    results: list[Any] = []

    async def turn() -> None:
        results.append(await one_shot(scheduler, call, "a", at(10)))

    await guarded_one_shot(turn, agent, store, scheduler)
    (result,) = results
    assert (result.outcome, result.failed) == (
        Outcome.INTERRUPTED,
        "interrupted: this replica lost its hold on the store, so the turn was ended",
    )


async def guarded_one_shot(
    turn: Any, agent: ScriptedAgent, store: MemoryStore, scheduler: Scheduler
) -> None:
    """``turn`` under way; once the agent runs it, the presence is lost."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(turn)
        while not agent.turns:  # noqa: ASYNC110 -- the agent offers no event
            await trio.sleep(1)
        presence = store.members[scheduler.replica]
        assert isinstance(presence, MemoryPresence)
        presence.lose()


async def test_a_lost_holds_release_with_no_presence_joined_now_never_raises(
    autojump_clock: Any,
) -> None:
    from trio_routines.scheduler.holds import Holds
    from trio_routines.sessions import SessionGate

    store = MemoryStore()
    presence = await member(store, "r1")
    joined = [presence]

    def current() -> MemoryPresence:
        if not joined:
            raise StateFault("replica r1 has not joined its store")
        return joined[0]

    hold = await Holds(SessionGate(ScriptedAgent()), current).enter("s")
    presence.lose()
    joined.clear()  # the last block left: nothing joined
    hold.release()  # never raises
    assert store.holds == {}


async def test_a_one_shots_guard_beats_while_its_turn_runs_and_says_when_the_store_is_silent(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from trio_routines.testing import Complete

    store = MemoryStore()
    scheduler, agent, _, wall = rig(*ROUTINES, external_clock=True, store=store)
    agent.script(Complete(duration=95), session=ROUTINES[0].session)
    seen: list[tuple[Any, int]] = []

    async def look() -> None:
        await trio.sleep(0.5)  # joined, the turn under way
        presence = store.members[scheduler.replica]
        seen.append((presence.info.last_seen, presence.info.in_flight))  # the look at once
        store.fail("beat", StateFault("disk busy"), times=1)  # the next beat, at 30 s
        for _ in range(3):
            await trio.sleep(30)
            seen.append((presence.info.last_seen, presence.info.in_flight))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(look)
        result = await scheduler.fire("a", at(10))
    assert result.outcome is Outcome.COMPLETED
    # A look at once and every 30 s after, each telling the turn in flight; the one at 30 s
    # refused (the record of the look before stands).
    assert [in_flight for _, in_flight in seen] == [1, 1, 1, 1]
    assert [when - wall.start for when, _ in seen] == [
        timedelta(0),
        timedelta(0),
        timedelta(seconds=60),
        timedelta(seconds=90),
    ]
    assert warned(caplog, "did not answer") == [
        f"replica {scheduler.replica}: the store did not answer: disk busy"
    ]


class Hinting(MemoryPresence):
    """A presence whose store hints at a loss at every look (a connection that keeps being
    readable): the guard must not look more than once a second."""

    beats = 0

    async def stirred(self) -> None:
        await trio.lowlevel.checkpoint()

    async def _beat(self, in_flight: int, now: Any) -> None:
        self.beats += 1
        await super()._beat(in_flight, now)


async def test_a_one_shots_guard_looks_at_most_once_a_second_however_often_hinted(
    autojump_clock: Any,
) -> None:
    from trio_routines.testing import Complete

    class HintingStore(MemoryStore):
        joined: Hinting

        async def join(self, info: ReplicaInfo) -> MemoryPresence:
            presence = Hinting(self, info)
            assert await presence.take([replica_key(info.id)]) == [True]
            self.members[info.id] = self.joined = presence
            return presence

    store = HintingStore()
    scheduler, agent, _, _ = rig(*ROUTINES, external_clock=True, store=store)
    agent.script(Complete(duration=10), session=ROUTINES[0].session)
    result = await scheduler.fire("a", at(10))
    assert result.outcome is Outcome.COMPLETED
    assert 9 <= store.joined.beats <= 11  # one a second through the turn's 10 s


@pytest.mark.parametrize("call", ["fire", "run_now"])
async def test_a_one_shots_guard_outlives_its_callers_cancel_while_the_turn_runs(
    autojump_clock: Any, call: str
) -> None:
    # The turn is shielded and runs on when its caller is cancelled: so must its guard, or a
    # loss of the presence then would never end it.
    store = MemoryStore()
    bounded = Routine(name="a", prompt="p", cron="0 * * * *", timeout=7200)
    scheduler, agent, _, _ = rig(bounded, external_clock=True, store=store, poll_interval=30)
    agent.script(Hang(), session=bounded.session)
    ended: list[float] = []

    async def turn() -> None:
        with trio.move_on_after(1):  # the caller gives up, the turn goes on
            await one_shot(scheduler, call, "a", at(10))
        ended.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(turn)
        await trio.sleep(5)
        assert len(agent.turns) == 1
        presence = store.members[scheduler.replica]
        assert isinstance(presence, MemoryPresence)
        presence.lose()
    assert ended[0] < 10  # ended at the loss, not at the routine's timeout (7200 s)


class AnsweredLate(MemoryStore):
    """A store one of whose calls, once, waits for ``answer`` (the presence goes meanwhile)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = trio.Event()
        self.answer = trio.Event()

    async def late(self) -> None:
        """The wait, the first time it is asked."""
        if not self.answer.is_set():
            self.asked.set()
            await self.answer.wait()


class TakeAnsweredLate(AnsweredLate):
    """Its take of a due wake-up waits, before the session is held."""

    async def take_due_wakeup(self, now: Any) -> Any:
        await self.late()
        return await super().take_due_wakeup(now)


class TurnNotedLate(AnsweredLate):
    """Its record of a wake-up turn waits, once the session was held."""

    async def note_wake_turn(self, session: str, at: Any) -> None:
        await self.late()
        await super().note_wake_turn(session, at)


async def lose_during_a_wake_up(
    store: AnsweredLate, run_on: float = 0
) -> tuple[Wakeup, ScriptedAgent]:
    """Run a scheduler on ``store`` with one wake-up due; once the store was asked, lose the
    presence, let it answer; five seconds on, the wake-up is back, not run. The scheduler
    then runs ``run_on`` seconds more. Returns the wake-up and the agent."""
    scheduler, agent, _, wall = rig(store=store, poll_interval=30)
    added = await store.add_wakeup(
        WakeupRequest(session="chat", prompt="p", fire_at=wall() + timedelta(seconds=61)), wall()
    )
    wall.jump(timedelta(seconds=120))
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await store.asked.wait()
        lost = store.members[scheduler.replica]
        assert isinstance(lost, MemoryPresence)
        lost.lose()
        store.answer.set()
        await trio.sleep(5)
        assert agent.turns == []
        assert [w.id for w in await store.list_wakeups()] == [added.id]
        await trio.sleep(run_on)
        scheduler.stop(0)
    return added, agent


async def test_a_wake_up_taken_as_the_presence_was_lost_is_put_back_not_dropped(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Its turn never began (another replica may hold its session now): it was removed as
    # though it had run, and lost for good.
    added, _ = await lose_during_a_wake_up(TakeAnsweredLate())
    said = warned(caplog, "put back")
    assert said == [f"wake {added.id[:8]}: not run: put back, tried again at the next poll"]


async def test_a_put_back_wake_up_counts_once_toward_the_rate_when_it_runs(
    autojump_clock: Any,
) -> None:
    # Its turn was recorded for the rate limit, then its hold was lost before the turn began:
    # put back and run later, it was recorded a second time (one turn, two in the window).
    store = TurnNotedLate()
    _, agent = await lose_during_a_wake_up(store, run_on=300)
    assert len(agent.turns) == 1
    assert len(await store.wake_turns("chat", T0)) == 1


async def test_a_wake_up_whose_hold_was_lost_before_its_turn_began_is_put_back(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    added, _ = await lose_during_a_wake_up(TurnNotedLate())  # the session held, then lost
    assert warned(caplog, "before the turn began") == [
        f"wake {added.id[:8]}: interrupted: this replica lost its hold on the store before the "
        "turn began: not run"
    ]
    assert warned(caplog, "put back") == [
        f"wake {added.id[:8]}: not run: put back, tried again at the next poll"
    ]
