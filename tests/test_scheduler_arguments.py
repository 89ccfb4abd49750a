"""What a :class:`~trio_routines.Scheduler` is built with, checked as it is made, and a stop
checked before it changes anything: a wrong argument is a one-line error naming it, never a
scheduler that spins, never fires, or spends every slot on turns that cannot run."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import trio
import trio.testing
from scheduler_rig import HOURLY, rig

from trio_routines import Scheduler, Stopping
from trio_routines.errors import InvalidAgent, InvalidOption, InvalidRoutine
from trio_routines.testing import MemoryStore, ScriptedAgent


def made(**options: Any) -> Scheduler:
    options.setdefault("agent", ScriptedAgent())
    options.setdefault("store", MemoryStore())
    return Scheduler(**options)


class AnAgent:
    async def invoke(self, *_: Any, **__: Any) -> Any:
        raise AssertionError("never run here")


@pytest.mark.parametrize(
    ("agent", "said"),
    [
        (AnAgent, "agent must be an agent object, not a class: AnAgent() builds one"),
        (
            AnAgent(),  # ``async def`` without ``yield``: a coroutine, no events
            "agent's invoke must yield its events (an async generator: async def with yield), "
            "not return them: <",
        ),
        (object(), "agent has no invoke method: <object object at "),
        ("cmd:cat", "agent has no invoke method: 'cmd:cat'"),  # a spec: agent_from_spec reads it
    ],
)
def test_an_agent_that_cannot_run_a_turn_is_refused(agent: Any, said: str) -> None:
    with pytest.raises(InvalidAgent) as refused:
        made(agent=agent)
    assert str(refused.value).startswith(said)


@pytest.mark.parametrize("clock", [None, datetime(2026, 7, 7, tzinfo=UTC)])
def test_a_clock_that_is_no_function_is_refused(clock: Any) -> None:
    with pytest.raises(InvalidOption) as refused:
        made(now=clock)
    assert str(refused.value) == (
        f"now must be a clock, a function giving aware datetimes: {clock!r:.80}"
    )


@pytest.mark.parametrize("store", [".state", None, object()])
def test_a_store_that_cannot_claim_is_refused(store: Any) -> None:
    with pytest.raises(InvalidOption) as refused:
        made(store=store)
    assert str(refused.value) == (
        "store must be a store (DirectoryStore, PostgresStore, open_store(...), or one keeping "
        f"the contract of trio_routines.store): {store!r}"
    )


def test_one_routine_given_for_routines_is_refused_saying_how() -> None:
    with pytest.raises(InvalidRoutine) as refused:
        made(routines=HOURLY)
    assert str(refused.value) == (
        f"routines must be a collection of Routine objects (routines=[...]): {HOURLY!r:.100}"
    )


@pytest.mark.parametrize(
    ("routines", "said"),
    [
        ("hourly", "routines must be a collection of Routine objects (routines=[...]): 'hourly'"),
        (["hourly"], "routines must be Routine objects: 'hourly'"),
        ([HOURLY, {"name": "x"}], "routines must be Routine objects: {'name': 'x'}"),
        ([HOURLY, HOURLY], "two routines are named 'hourly'"),
    ],
)
def test_routines_that_are_no_routines_are_refused(routines: Any, said: str) -> None:
    with pytest.raises(InvalidRoutine) as refused:
        made(routines=routines)
    assert str(refused.value) == said


def test_wake_limits_that_are_none_are_refused() -> None:
    with pytest.raises(InvalidOption) as refused:
        made(wake_limits=None)
    assert str(refused.value) == "wake_limits must be a WakeLimits: None"


@pytest.mark.parametrize("option", ["max_wait", "jump_threshold"])
@pytest.mark.parametrize("value", [0, -1, math.nan, -math.inf, "60", True])
def test_the_timers_options_are_seconds_more_than_0(option: str, value: Any) -> None:
    # max_wait=0 read the wall clock in a busy loop, NaN never fired; a jump threshold of -1
    # took every tick for a jump.
    with pytest.raises(InvalidOption) as refused:
        made(**{option: value})
    assert str(refused.value) == (
        f"{option} must be a number of seconds (or infinity), more than 0: {value!r}"
    )


def test_the_timers_options_are_kept_as_floats_infinity_meaning_never() -> None:
    scheduler = made(max_wait=Decimal("30"), jump_threshold=2)
    assert (scheduler.max_wait, type(scheduler.max_wait)) == (30.0, float)
    assert (scheduler.jump_threshold, type(scheduler.jump_threshold)) == (2.0, float)
    endless = made(max_wait=math.inf, jump_threshold=Decimal("Infinity"))
    assert (endless.max_wait, endless.jump_threshold) == (math.inf, math.inf)


def test_the_clock_and_wake_up_switches_are_readable_as_given() -> None:
    # A host reads them back (to say how its scheduler runs): each as given, its default else.
    given = made(external_clock=True, wakeups=False)
    assert (given.external_clock, given.wakeups) == (True, False)
    default = made()
    assert (default.external_clock, default.wakeups) == (False, True)


async def test_a_poll_interval_given_as_a_decimal_polls(autojump_clock: Any) -> None:
    # It was checked, then handed on unconverted: the wake loop died at every poll.
    scheduler, agent, _, _ = rig(poll_interval=Decimal("60"))
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await scheduler.add_wakeup("s", "later", delay=60)
        await trio.sleep(200)
        scheduler.stop()
    assert [turn.session for turn in agent.turns] == ["s"]


@pytest.mark.parametrize(
    "grace",
    # a float cannot hold 10**400 (OverflowError), nor a signaling NaN (ValueError)
    ["5", timedelta(seconds=5), math.nan, None.__class__, 10**400, Decimal("sNaN")],
    ids=["text", "timedelta", "nan", "class", "huge", "snan"],
)
async def test_a_stop_with_a_grace_that_is_no_number_changes_nothing(
    autojump_clock: Any, grace: Any
) -> None:
    scheduler, _, _, _ = rig()
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        with pytest.raises(InvalidOption) as refused:
            scheduler.stop(grace)
        assert str(refused.value) == f"a stop's grace must be a number of seconds: {grace!r:.100}"
        assert scheduler.stopping is False
        assert scheduler.booted is True
        scheduler.stop(Decimal("1"))  # a number of seconds: this one stops it
    assert scheduler.stopping is True


async def test_a_stop_from_another_thread_changes_nothing_and_says_how(
    autojump_clock: Any,
) -> None:
    scheduler, _, _, _ = rig()
    raised: list[BaseException] = []

    def elsewhere() -> None:
        try:
            scheduler.stop()
        except BaseException as exc:
            raised.append(exc)

    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.to_thread.run_sync(elsewhere)
        assert scheduler.stopping is False
        await trio.to_thread.run_sync(trio.from_thread.run_sync, scheduler.stop)
    (error,) = raised
    assert (type(error), str(error)) == (
        RuntimeError,
        "stop() is called in the scheduler's Trio thread; from another thread: "
        "trio.from_thread.run_sync(scheduler.stop)",
    )
    assert scheduler.stopping is True
    with pytest.raises(Stopping):
        await scheduler.run()
