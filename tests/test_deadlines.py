"""The store calls' deadlines, kept by one watch task instead of one Trio timer each."""

from __future__ import annotations

import gc
import math
import sys
import weakref
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from trio.testing import MockClock

from trio_routines import InvalidOption, Outcome, Routine, Scheduler
from trio_routines.records import ClaimResult
from trio_routines.scheduler.deadlines import PRUNE_SLACK, StoreDeadlines
from trio_routines.scheduler.fire import CLAIMED_TOO_LATE
from trio_routines.testing import MemoryStore, ScriptedAgent, WallClock


async def _cut_at(deadlines: StoreDeadlines, deadline: float) -> float:
    """Trio's time at which a call noted with ``deadline`` is cut short."""
    with trio.fail_after(3600):  # a deadline that nobody keeps fails the test, never hangs it
        with trio.CancelScope() as scope:
            deadlines.note(scope, deadline)
            try:
                await trio.sleep_forever()
            finally:
                deadlines.forget(scope)
    assert scope.cancelled_caught
    return trio.current_time()


async def test_without_the_watch_a_deadline_goes_to_trio_and_forget_takes_it_back(
    autojump_clock: Any,
) -> None:
    deadlines = StoreDeadlines()
    start = trio.current_time()
    assert await _cut_at(deadlines, start + 7) == start + 7
    with trio.CancelScope() as scope:
        deadlines.note(scope, start + 30)
        assert scope.deadline == start + 30
        deadlines.forget(scope)
        assert scope.deadline == math.inf  # the scope goes on (a fire's turn) without it
        await trio.sleep(60)
    assert not scope.cancelled_caught


async def test_the_watch_cuts_each_call_at_its_own_deadline(autojump_clock: Any) -> None:
    deadlines = StoreDeadlines()
    cut: dict[str, float] = {}

    async def call(name: str, after: float) -> None:
        cut[name] = await _cut_at(deadlines, start + after) - start

    async with trio.open_nursery() as nursery:
        await nursery.start(deadlines.watch)
        start = trio.current_time()
        nursery.start_soon(call, "late", 30.0)
        await trio.sleep(1)
        nursery.start_soon(call, "early", 5.0)  # earlier than the watch's next look
        await trio.sleep(1)
        nursery.start_soon(call, "middle", 12.0)
        await trio.sleep(40)
        nursery.cancel_scope.cancel()
    assert cut == {"early": 5.0, "middle": 12.0, "late": 30.0}


async def test_the_watch_leaves_a_finished_call_alone(autojump_clock: Any) -> None:
    deadlines = StoreDeadlines()
    async with trio.open_nursery() as nursery:
        await nursery.start(deadlines.watch)
        with trio.CancelScope() as scope:
            deadlines.note(scope, trio.current_time() + 5)
            await trio.sleep(1)
            deadlines.forget(scope)
            await trio.sleep(20)  # past the forgotten deadline
        nursery.cancel_scope.cancel()
    assert not scope.cancelled_caught
    assert scope.deadline == math.inf


async def test_pull_in_brings_every_open_deadline_forward(autojump_clock: Any) -> None:
    deadlines = StoreDeadlines()
    cut: list[float] = []

    async def call() -> None:
        cut.append(await _cut_at(deadlines, start + 30) - start)

    async with trio.open_nursery() as nursery:
        await nursery.start(deadlines.watch)
        start = trio.current_time()
        nursery.start_soon(call)
        await trio.sleep(1)
        deadlines.pull_in(start + 3)
        deadlines.pull_in(start + 20)  # a later bound never pushes one back
        await trio.sleep(40)
        nursery.cancel_scope.cancel()
    assert cut == [3.0]
    # Without the watch, the pulled-in bound goes to Trio directly.
    unwatched = StoreDeadlines()
    scope = trio.CancelScope()
    unwatched.note(scope, trio.current_time() + 30)
    unwatched.pull_in(trio.current_time() + 2)
    assert scope.deadline == trio.current_time() + 2


async def test_calls_still_open_when_the_watch_ends_keep_their_deadlines(
    autojump_clock: Any,
) -> None:
    deadlines = StoreDeadlines()
    start = trio.current_time()
    async with trio.open_nursery() as outer, trio.open_nursery() as watching:
        await watching.start(deadlines.watch)

        async def call() -> None:
            assert await _cut_at(deadlines, start + 10) == start + 10

        outer.start_soon(call)
        await trio.sleep(2)
        watching.cancel_scope.cancel()  # the loops ended; a settle is still under way


# -- the fire path -----------------------------------------------------------------------------

T0 = datetime(2026, 7, 7, 10, 30, tzinfo=UTC)
HOURLY = Routine(name="hourly", prompt="p", cron="0 * * * *")


class ClaimPastItsDeadline(MemoryStore):
    """A claim taken, but answered only after its deadline passed (shielded from the cut)."""

    async def claim(self, routine: str, slot: datetime, fired_at: datetime) -> ClaimResult:
        result = await super().claim(routine, slot, fired_at)
        with trio.CancelScope(shield=True):
            await trio.sleep(31)
        return result


async def test_a_claim_answered_after_its_deadline_never_runs_and_is_settled_interrupted(
    autojump_clock: Any,
) -> None:
    """A patient store (a write in a thread cannot be called back) answers after its
    caller's deadline: a claim confirmed after its caller gave up must not start a turn --
    during a stop that turn would start long after the signal. It is recorded interrupted."""
    wall = WallClock(T0)
    store = ClaimPastItsDeadline()
    agent = ScriptedAgent(wall=wall)
    scheduler = Scheduler(agent=agent, store=store, routines=[HOURLY], now=wall)
    slot = datetime(2026, 7, 7, 10, 0, tzinfo=UTC)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)  # the watch runs: it cuts the scope at 30 s
        result = await scheduler.fire("hourly", slot)
        scheduler.stop(0)
    assert result.claimed
    assert result.outcome is Outcome.INTERRUPTED
    assert result.failed == CLAIMED_TOO_LATE
    assert result.settled_at == T0 + timedelta(seconds=31)  # the answer came; then settled
    assert agent.turns == []
    assert [(f.slot, f.outcome, f.error) for f in await store.history("hourly")] == [
        (slot, Outcome.INTERRUPTED, CLAIMED_TOO_LATE)
    ]


async def test_many_ended_calls_leave_a_bounded_heap(autojump_clock: Any) -> None:
    deadlines = StoreDeadlines()
    async with trio.open_nursery() as nursery:
        await nursery.start(deadlines.watch)
        start = trio.current_time()
        for _ in range(1000):  # each ends long before its deadline
            scope = trio.CancelScope()
            deadlines.note(scope, start + 30)
            deadlines.forget(scope)
        assert await _cut_at(deadlines, start + 5) == start + 5  # an earlier one wakes the watch
        assert len(deadlines._heap) <= 64
        nursery.cancel_scope.cancel()


async def test_a_herd_of_calls_leaves_no_room_behind_once_all_have_ended(
    autojump_clock: Any,
) -> None:
    # A dictionary keeps the room of its largest size: the open calls' table is made anew
    # once the last call of a herd ends, so a sleeping scheduler holds no table sized for it.
    deadlines = StoreDeadlines()
    empty = sys.getsizeof({})
    async with trio.open_nursery() as nursery:
        await nursery.start(deadlines.watch)
        start = trio.current_time()
        scopes = [trio.CancelScope() for _ in range(1000)]
        for scope in scopes:
            deadlines.note(scope, start + 30)
        assert sys.getsizeof(deadlines._open) > empty
        for scope in scopes[:-1]:
            deadlines.forget(scope)
        assert list(deadlines._open) == [scopes[-1]]  # one still open: the table stays
        deadlines.forget(scopes[-1])
        assert deadlines._open == {}
        assert sys.getsizeof(deadlines._open) == empty
        for scope in scopes[:2]:  # a cut empties it too, and the next note is kept as before
            deadlines.note(scope, start + 1)
        await trio.sleep(2)
        assert all(scope.cancel_called for scope in scopes[:2])
        assert sys.getsizeof(deadlines._open) == empty
        deadlines.note(scopes[2], start + 30)
        assert deadlines._open == {scopes[2]: start + 30}
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("option", "value", "wanted"),
    [
        ("store_timeout", math.nan, "more than 0"),
        ("store_timeout", math.inf, "more than 0"),
        ("store_timeout", 0.0, "more than 0"),
        ("store_timeout", -1.0, "more than 0"),
        ("default_grace", math.nan, "0 or more"),
        ("default_grace", -0.5, "0 or more"),
    ],
)
def test_an_option_without_a_bound_is_refused_in_one_line(
    option: str, value: float, wanted: str
) -> None:
    with pytest.raises(InvalidOption) as refused:
        Scheduler(agent=ScriptedAgent(), store=MemoryStore(), **{option: value})
    assert str(refused.value) == (
        f"{option} must be a finite number of seconds, {wanted}: {value!r}"
    )
    # Zero grace is a stop that interrupts at once: allowed.
    assert Scheduler(agent=ScriptedAgent(), store=MemoryStore(), default_grace=0).default_grace == 0


async def test_an_ended_call_leaves_no_scope_behind_while_the_watch_waits(
    autojump_clock: Any,
) -> None:
    """A burst's ended calls are freed at once, not held until their deadlines pass: 20,000
    scopes kept 30 s after a 10,000-routine burst were memory and collector work."""
    deadlines = StoreDeadlines()
    ended: list[weakref.ref[trio.CancelScope]] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(deadlines.watch)
        opened = []
        for _ in range(1000):  # all open at once, as when 1,000 routines are due together
            scope = trio.CancelScope()
            deadlines.note(scope, trio.current_time() + 30)
            opened.append(scope)
        await trio.sleep(0.5)  # the watch looks: each is open, the first deadline 30 s away
        for scope in opened:
            deadlines.forget(scope)
            ended.append(weakref.ref(scope))
        del opened, scope
        await trio.sleep(1)  # the watch still waits for a deadline 29 s away
        gc.collect()
        alive = sum(ref() is not None for ref in ended)
        assert alive <= PRUNE_SLACK
        nursery.cancel_scope.cancel()


async def test_ended_calls_are_pruned_as_they_end_while_others_stay_open_and_are_cut(
    autojump_clock: Any,
) -> None:
    """At most the open calls plus PRUNE_SLACK ended ones are held; a prune keeps every open
    call's deadline."""
    deadlines = StoreDeadlines()
    cut: list[float] = []

    async def call() -> None:
        cut.append(await _cut_at(deadlines, start + 30) - start)

    async with trio.open_nursery() as nursery:
        await nursery.start(deadlines.watch)
        start = trio.current_time()
        for _ in range(100):
            nursery.start_soon(call)
        await trio.sleep(1)
        ended = []
        for _ in range(200):  # more than the open calls plus the slack, not twice as many
            scope = trio.CancelScope()
            deadlines.note(scope, start + 20)
            deadlines.forget(scope)
            ended.append(weakref.ref(scope))
        del scope
        gc.collect()
        assert sum(ref() is not None for ref in ended) <= 100 + PRUNE_SLACK
        await trio.sleep(40)
        nursery.cancel_scope.cancel()
    assert cut == [30.0] * 100


async def test_a_look_that_cuts_many_calls_prunes_and_still_cuts_the_next_ones(
    autojump_clock: Any,
) -> None:
    deadlines = StoreDeadlines()
    cut: list[float] = []

    async def call() -> None:
        cut.append(await _cut_at(deadlines, start + 15) - start)

    async with trio.open_nursery() as nursery:
        await nursery.start(deadlines.watch)
        start = trio.current_time()
        for _ in range(100):  # calls whose scopes are cut at 5 s
            deadlines.note(trio.CancelScope(), start + 5)
        for _ in range(50):
            nursery.start_soon(call)
        await trio.sleep(1)
        ended = []
        for _ in range(150):  # within the bound while 150 calls are open; past it for 50
            scope = trio.CancelScope()
            deadlines.note(scope, start + 30)
            deadlines.forget(scope)
            ended.append(weakref.ref(scope))
        del scope
        await trio.sleep(5)  # the look at 5 s cuts 100 calls: 50 stay open
        gc.collect()
        assert sum(ref() is not None for ref in ended) == 0
        await trio.sleep(40)
        nursery.cancel_scope.cancel()
    assert cut == [15.0] * 50


# Each step: ("note", seconds from now), ("forget", which open call), ("pull_in", seconds from
# now) or ("pass", seconds); the watch may start late, so some notes come before it.
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("note"), st.integers(0, 40)),
        st.tuples(st.just("forget"), st.integers(0, 50)),
        st.tuples(st.just("pull_in"), st.integers(0, 40)),
        st.tuples(st.just("pass"), st.integers(0, 15)),
        st.tuples(st.just("watch"), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(steps=_steps)
def test_every_open_call_is_cut_exactly_at_its_deadline_and_no_ended_one_ever(
    steps: list[tuple[str, int]],
) -> None:
    """Whatever the order of the deadlines (most in order, some earlier than one before them,
    some pulled in by a stop), each open call is cut once its deadline has come and not
    before, with or without the watch, and an ended call is never cut."""
    clock = MockClock()

    async def main() -> None:
        deadlines = StoreDeadlines()
        due: dict[trio.CancelScope, float] = {}  # open calls and their deadlines, as promised
        ended: dict[trio.CancelScope, bool] = {}  # ended calls: whether cut before they ended
        async with trio.open_nursery() as nursery:
            for step, value in steps:
                now = trio.current_time()
                if step == "note":
                    scope = trio.CancelScope()
                    deadlines.note(scope, now + value)
                    due[scope] = now + value
                elif step == "forget" and due:
                    scope = list(due)[value % len(due)]
                    cut = scope.cancel_called
                    deadlines.forget(scope)
                    del due[scope]
                    ended[scope] = cut
                elif step == "pull_in":
                    deadlines.pull_in(now + value)
                    due = {scope: min(at, now + value) for scope, at in due.items()}
                elif step == "pass":
                    clock.jump(value)
                elif step == "watch" and not deadlines._watching:
                    await nursery.start(deadlines.watch)
                await trio.testing.wait_all_tasks_blocked()
                now = trio.current_time()
                for scope, at in due.items():
                    # Without the watch, Trio keeps the deadline: it is the scope's own.
                    cut = scope.cancel_called or scope.deadline <= now
                    assert cut == (at <= now), (at, now)
                assert all(scope.cancel_called == cut for scope, cut in ended.items())
                assert all(scope.deadline == math.inf for scope in ended)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=clock)


async def test_deadlines_in_order_cost_no_heap_entry_and_one_out_of_order_costs_one(
    autojump_clock: Any,
) -> None:
    """A note whose deadline is no earlier than every open one before it is kept by the
    order of the open calls alone; the heap holds only those out of order. Once no call is
    open, the order starts afresh."""
    deadlines = StoreDeadlines()
    async with trio.open_nursery() as nursery:
        await nursery.start(deadlines.watch)
        start = trio.current_time()
        first = trio.CancelScope()
        deadlines.note(first, start + 40)
        deadlines.forget(first)  # none open, none out of order: the order starts afresh here too
        scopes = [trio.CancelScope() for _ in range(100)]
        for i, scope in enumerate(scopes):
            deadlines.note(scope, start + 30 + i // 10)  # equal ones too
        assert deadlines._heap == []
        early = trio.CancelScope()
        deadlines.note(early, start + 10)
        assert [entry[2] for entry in deadlines._heap] == [early]
        for scope in [*scopes, early]:
            deadlines.forget(scope)
        assert deadlines._heap == []
        again = trio.CancelScope()
        deadlines.note(again, start + 5)  # earlier than any before, but none is open
        assert deadlines._heap == []
        await trio.sleep(6)
        assert again.cancel_called
        deadlines.forget(again)
        nursery.cancel_scope.cancel()


async def test_a_prune_keeps_the_open_calls_out_of_order(autojump_clock: Any) -> None:
    """Ended calls out of order make the heap rebuild itself; the open ones out of order stay
    in it and are cut at their own deadlines, not at a later call's."""
    deadlines = StoreDeadlines()
    cut: dict[str, float] = {}

    async def call(name: str, after: float) -> None:
        cut[name] = await _cut_at(deadlines, start + after) - start

    async with trio.open_nursery() as nursery:
        await nursery.start(deadlines.watch)
        start = trio.current_time()
        nursery.start_soon(call, "late", 30.0)
        await trio.sleep(1)
        nursery.start_soon(call, "early", 10.0)  # out of order: in the heap
        await trio.sleep(1)
        for _ in range(4 * PRUNE_SLACK):  # ended, out of order: rebuilds along the way
            scope = trio.CancelScope()
            deadlines.note(scope, start + 5)
            deadlines.forget(scope)
        assert len(deadlines._heap) <= 1 + PRUNE_SLACK
        await trio.sleep(40)
        nursery.cancel_scope.cancel()
    assert cut == {"early": 10.0, "late": 30.0}


async def test_a_call_noted_again_while_open_takes_its_new_deadline_and_keeps_the_rest(
    autojump_clock: Any,
) -> None:
    deadlines = StoreDeadlines()
    first, second = trio.CancelScope(), trio.CancelScope()
    async with trio.open_nursery() as nursery:
        await nursery.start(deadlines.watch)
        start = trio.current_time()
        deadlines.note(first, start + 10)
        deadlines.note(second, start + 20)
        deadlines.note(first, start + 30)  # later than the second now
        await trio.sleep(25)
        assert (first.cancel_called, second.cancel_called) == (False, True)
        await trio.sleep(10)
        assert first.cancel_called
        nursery.cancel_scope.cancel()


async def test_a_watch_begun_again_keeps_the_heap_bounded(autojump_clock: Any) -> None:
    # What a watch that ended leaves behind sets no bound for the next one: ended calls out of
    # order are rebuilt away as before.
    deadlines = StoreDeadlines()
    held = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        await nursery.start(deadlines.watch)
        deadlines.note(held, trio.current_time() + 60)
        for _ in range(4 * PRUNE_SLACK):  # out of order, ended: rebuilt along the way
            scope = trio.CancelScope()
            deadlines.note(scope, trio.current_time() + 5)
            deadlines.forget(scope)
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        await nursery.start(deadlines.watch)  # ``held`` is still open: the order goes on
        for _ in range(4 * PRUNE_SLACK):
            scope = trio.CancelScope()
            deadlines.note(scope, trio.current_time() + 5)
            deadlines.forget(scope)
        assert len(deadlines._heap) <= 1 + PRUNE_SLACK
        await trio.sleep(61)
        assert held.cancel_called
        nursery.cancel_scope.cancel()
