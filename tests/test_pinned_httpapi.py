"""The API handlers' answers, pinned whole (http/api.py, http/wakeupapi.py).

The HTTP tests (``test_http`` and its siblings, over a real server on a loopback port) sample
each answer: a status, a word of the message, a key of the body. Here each handler is called
directly, as the application calls it once every gate has passed, on a scheduler whose wall
clock is virtual (``scheduler_rig``): every refusal's line, every body, every log line a fault
writes is compared whole, including the edges the real clock cannot hold (a slot exactly at
the retry horizon, a store that never answers within the readiness deadline).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable
from datetime import datetime, timedelta
from typing import Any

import pytest
import trio
from scheduler_rig import T0, rig

from trio_routines import Routine, Scheduler
from trio_routines.agent import Completed, Event, TextDelta
from trio_routines.cron import next_run
from trio_routines.errors import StateFault, Unconfirmed
from trio_routines.http import api, wakeupapi
from trio_routines.http.api import MAX_REPLY
from trio_routines.http.paging import Page
from trio_routines.http.wire import Refusal, Response
from trio_routines.instants import format_iso
from trio_routines.replicas import ReplicaInfo, session_key
from trio_routines.routines import catchup_text
from trio_routines.testing import Busy, Hang, MemoryStore, ScriptedAgent
from trio_routines.wakelimits import WakeLimits

ADHOC = Routine(name="adhoc", prompt="go")
DAILY = Routine(name="daily", prompt="go", cron="0 9 * * *", tz="Europe/Berlin")
PLAIN = Routine(name="plain", prompt="go", cron="0 9 * * *")  # no zone: UTC
HASHED = Routine(name="hashed", prompt="go", cron="H 9 * * *")  # its minute from its name
STOPPING_FIRES = "the scheduler is stopping; no new fires are accepted"
STOPPING_TURNS = "the scheduler is stopping; no new turns are accepted"
EIO = StateFault("EIO: disk on fire")


async def refused(call: Awaitable[Response]) -> tuple[int, str, tuple[tuple[str, str], ...]]:
    """The refusal ``call`` raises: its status, its one line, its headers."""
    with pytest.raises(Refusal) as caught:
        await call
    answer = caught.value.response
    return answer.status, answer.body["error"], tuple(answer.headers)


def errors(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "trio_routines.http"]


def iso(moment: datetime) -> str:
    return format_iso(moment)


async def started(scheduler: Scheduler, nursery: trio.Nursery) -> None:
    await nursery.start(scheduler.run)


def adhoc_answering(behaviour: Any) -> Scheduler:
    """A scheduler of ``ADHOC`` (external clock) whose agent answers its turns with
    ``behaviour``."""
    agent = ScriptedAgent()
    agent.script(behaviour, session="routine:adhoc")
    return Scheduler(agent=agent, store=MemoryStore(), routines=[ADHOC], external_clock=True)


# -- POST /fire ----------------------------------------------------------------------------------


async def test_fire_refusals_whole(autojump_clock: Any) -> None:
    scheduler, agent, *_ = rig(ADHOC, DAILY, PLAIN, HASHED, external_clock=True)
    async with trio.open_nursery() as nursery:
        await started(scheduler, nursery)
        fire = api.fire
        assert await refused(fire(scheduler, {})) == (
            400,
            '"name" must be a non-empty string, e.g. "daily"',
            (),
        )
        off = T0.replace(minute=45)
        assert await refused(fire(scheduler, {"name": "daily", "slot": iso(off)})) == (
            400,
            f'slot {iso(off)} is not on the cron grid of "daily" ("0 9 * * *" Europe/Berlin)',
            (),
        )
        assert await refused(fire(scheduler, {"name": "plain", "slot": iso(off)})) == (
            400,
            f'slot {iso(off)} is not on the cron grid of "plain" ("0 9 * * *")',
            (),
        )
        assert await refused(fire(scheduler, {"name": "hashed", "slot": iso(off)})) == (
            400,
            f'slot {iso(off)} is not on the cron grid of "hashed" ("H 9 * * *" = "36 9 * * *")',
            (),
        )
        # A slot up to five minutes ahead is a clock a little ahead of ours: retry then.
        for ahead, retry in ((300.0, "300"), (0.5, "1"), (299.2, "300")):
            slot = T0 + timedelta(seconds=ahead)
            assert await refused(fire(scheduler, {"name": "adhoc", "slot": iso(slot)})) == (
                503,
                f"slot {iso(slot)} of 'adhoc' has not arrived yet — "
                "a slot never fires before its instant",
                (("retry-after", retry),),
            )
        further = T0 + timedelta(seconds=300.001)
        assert await refused(fire(scheduler, {"name": "adhoc", "slot": iso(further)})) == (
            400,
            f"slot {iso(further)} of 'adhoc' has not arrived yet — "
            "a slot never fires before its instant",
            (),
        )
        assert agent.turns == []
        scheduler.stop(grace=0)


@pytest.mark.parametrize("count", [0, 1, 20, 21, 23])
async def test_an_unknown_name_lists_at_most_twenty_names_and_counts_the_rest(
    autojump_clock: Any, count: int
) -> None:
    names = [f"r{i:02}" for i in range(count)]
    scheduler = Scheduler(
        agent=ScriptedAgent(),
        store=MemoryStore(),
        routines=[Routine(name=n, prompt="p") for n in names],
        external_clock=True,
    )
    listed = ", ".join(f'"{n}"' for n in names[:20]) or "(none)"
    more = f" and {count - 20} more" if count > 20 else ""
    for call in (api.fire(scheduler, {"name": "nope"}), api.run(scheduler, {"name": "nope"})):
        assert await refused(call) == (
            404,
            f'no routine named "nope" (this deployment has: {listed}{more})',
            (),
        )


async def test_a_fire_of_a_stopping_scheduler_is_503_whole(autojump_clock: Any) -> None:
    scheduler, *_ = rig(ADHOC, external_clock=True)
    async with trio.open_nursery() as nursery:
        await started(scheduler, nursery)
        scheduler.stop(grace=0)
    for wait in (False, True):
        body = {"name": "adhoc", "slot": iso(T0), "wait": wait}
        assert await refused(api.fire(scheduler, body)) == (
            503,
            STOPPING_FIRES,
            (("retry-after", "5"),),
        )


class Overflowing(Scheduler):
    """A scheduler whose fire overflows datetime's range."""

    async def fire(self, name: str, slot: datetime) -> Any:
        raise OverflowError("date value out of range")

    async def start_fire(self, name: str, slot: datetime) -> Any:
        raise OverflowError("date value out of range")


async def test_a_fire_that_overflows_is_400_naming_the_slot() -> None:
    scheduler = Overflowing(
        agent=ScriptedAgent(), store=MemoryStore(), routines=[ADHOC], external_clock=True
    )
    for wait in (False, True):
        body = {"name": "adhoc", "slot": iso(T0), "wait": wait}
        assert await refused(api.fire(scheduler, body)) == (
            400,
            f"slot {iso(T0)} is out of range",
            (),
        )


async def test_a_claim_fault_is_logged_with_the_routine_and_the_slot(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    store.faults["claim"] = EIO
    scheduler, *_ = rig(ADHOC, store=store, external_clock=True)
    async with trio.open_nursery() as nursery:
        await started(scheduler, nursery)
        caplog.clear()
        assert await refused(api.fire(scheduler, {"name": "adhoc", "slot": iso(T0)})) == (
            503,
            'the claim state of "adhoc" is unavailable; nothing was claimed — retry',
            (("retry-after", "5"),),
        )
        assert (logging.ERROR, f"POST /fire adhoc at {iso(T0)}: EIO: disk on fire") in errors(
            caplog
        )
        scheduler.stop(grace=0)


# -- POST /run -----------------------------------------------------------------------------------


class Streaming(ScriptedAgent):
    """An agent whose reply arrives in the given pieces."""

    def __init__(self, *pieces: str) -> None:
        super().__init__()
        self.pieces = pieces

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        await trio.lowlevel.checkpoint()
        for piece in self.pieces:
            yield TextDelta(piece)
        yield Completed()


async def ran(agent: ScriptedAgent) -> dict[str, Any]:
    scheduler = Scheduler(agent=agent, store=MemoryStore(), routines=[ADHOC], external_clock=True)
    async with trio.open_nursery() as nursery:
        await started(scheduler, nursery)
        answer = await api.run(scheduler, {"name": "adhoc"})
        scheduler.stop(grace=0)
    assert answer.status == 200
    body: dict[str, Any] = answer.body
    assert body.pop("ms") == 0
    assert body.pop("outcome") == "completed"
    assert {k: body.pop(k) for k in ("name", "session", "ran")} == {
        "name": "adhoc",
        "session": "routine:adhoc",
        "ran": True,
    }
    return body


@pytest.mark.parametrize(
    ("pieces", "reply", "truncated"),
    [
        # Joined as they came.
        (["ab", "cd", "e"], "abcde", False),
        # Exactly the bound is kept whole, and is not cut.
        (["a" * MAX_REPLY], "a" * MAX_REPLY, False),
        (["a" * (MAX_REPLY - 2), "bc"], "a" * (MAX_REPLY - 2) + "bc", False),
        # The room is what is left of the bound, not the size of the last piece.
        (["a", "bcd"], "abcd", False),
        (["a" * (MAX_REPLY - 10), "b" * 20, "c"], "a" * (MAX_REPLY - 10) + "b" * 10, True),
        # Cut inside a character: the character is dropped, not an error.
        (["a" + "é" * MAX_REPLY], "a" + "é" * ((MAX_REPLY - 1) // 2), True),
        # A lone surrogate (what a careless agent may send) counts three bytes, not an error.
        (["\ud800"], "\ud800", False),
        (["a" * (MAX_REPLY - 2), "\ud800"], "a" * (MAX_REPLY - 2), True),
    ],
)
async def test_run_keeps_the_reply_up_to_the_bound_in_bytes(
    autojump_clock: Any, pieces: list[str], reply: str, truncated: bool
) -> None:
    assert await ran(Streaming(*pieces)) == {"reply": reply, "truncated": truncated}


async def test_run_refusals_and_a_busy_session_whole(autojump_clock: Any) -> None:
    scheduler = adhoc_answering(Hang())
    async with trio.open_nursery() as nursery:
        await started(scheduler, nursery)
        assert await refused(api.run(scheduler, {})) == (
            400,
            '"name" must be a non-empty string, e.g. "daily"',
            (),
        )
        first = await api.run(scheduler, {"name": "adhoc", "wait": False})
        assert (first.status, first.body) == (
            202,
            {"name": "adhoc", "session": "routine:adhoc", "started": True},
        )
        busy = (
            'another turn in the session of "adhoc" is still running (its last, a run or a wake-up)'
        )
        now = await api.run(scheduler, {"name": "adhoc", "wait": False})
        assert (now.status, now.body) == (
            200,
            {"name": "adhoc", "session": "routine:adhoc", "ran": False, "reason": busy},
        )
        waited = await api.run(scheduler, {"name": "adhoc"})
        assert (waited.status, waited.body) == (
            200,
            {"name": "adhoc", "session": "routine:adhoc", "ran": False, "reason": busy, "ms": 0},
        )
        scheduler.stop(grace=0)
    for wait in (False, True):
        body = {"name": "adhoc", "wait": wait}
        assert await refused(api.run(scheduler, body)) == (
            503,
            STOPPING_TURNS,
            (("retry-after", "5"),),
        )


async def test_a_run_the_agent_says_busy_answers_with_the_agents_words(autojump_clock: Any) -> None:
    # It said "another turn in the session … is still running" alone, where none of ours ran.
    scheduler = adhoc_answering(Busy())
    async with trio.open_nursery() as nursery:
        await started(scheduler, nursery)
        waited = await api.run(scheduler, {"name": "adhoc"})
        scheduler.stop(grace=0)
    assert waited.status == 200
    assert waited.body == {
        "name": "adhoc",
        "session": "routine:adhoc",
        "ran": False,
        "reason": 'the agent answered busy for "adhoc" (the session already has a turn in flight)',
        "ms": 0,
    }


# -- GET /readyz ---------------------------------------------------------------------------------


async def test_readyz_refusals_and_their_log_lines_whole(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    scheduler, *_ = rig(ADHOC, store=store, external_clock=True)
    async with trio.open_nursery() as nursery:
        await started(scheduler, nursery)
        caplog.clear()
        store.fail("ready", StateFault("disk on fire"))
        problem = "the state store is unavailable: disk on fire"
        assert await refused(api.readyz(scheduler)) == (503, problem, (("retry-after", "5"),))
        del store.faults["ready"]
        store.hang("ready")
        before = trio.current_time()
        slow = "the state store did not answer within 2s"
        assert await refused(api.readyz(scheduler)) == (503, slow, (("retry-after", "5"),))
        assert trio.current_time() - before == pytest.approx(2.0)
        assert errors(caplog) == [
            (logging.WARNING, f"GET /readyz: {problem}"),
            (logging.WARNING, f"GET /readyz: {slow}"),
        ]
        store.hangs.discard("ready")
        scheduler.stop(grace=0)
        caplog.clear()
        assert await refused(api.readyz(scheduler)) == (
            503,
            "the scheduler is stopping",
            (("retry-after", "5"),),
        )
        assert errors(caplog) == []


async def test_before_its_run_a_scheduler_is_not_ready_and_starts_nothing_in_the_background(
    autojump_clock: Any,
) -> None:
    """Mounted in a host before ``run`` (or while it boots): not ready, and a fire or a run that
    would go on in the running scheduler says it is not running, not that it is stopping."""
    store = MemoryStore()
    scheduler, agent, *_ = rig(ADHOC, store=store, external_clock=True)
    not_yet = "the scheduler is not running yet: its boot has not completed"
    assert await refused(api.readyz(scheduler)) == (503, not_yet, (("retry-after", "5"),))
    fire = {"name": "adhoc", "slot": iso(T0), "wait": False}
    assert await refused(api.fire(scheduler, fire)) == (
        503,
        "the scheduler is not running",
        (("retry-after", "5"),),
    )
    assert await refused(api.run(scheduler, {"name": "adhoc", "wait": False})) == (
        503,
        "the scheduler is not running; no turn can be started in it",
        (("retry-after", "5"),),
    )
    assert (agent.turns, await store.history("adhoc")) == ([], [])
    async with trio.open_nursery() as nursery:
        await started(scheduler, nursery)
        assert (await api.readyz(scheduler)).status == 200
        scheduler.stop(grace=0)


# -- GET /routines, history, replicas, pause -----------------------------------------------------


async def test_routines_not_armed_here_count_the_next_instant_in_their_zone(
    autojump_clock: Any,
) -> None:
    caught_up = Routine(name="late", prompt="go", cron="0 * * * *", catchup=600.0)
    scheduler, *_ = rig(ADHOC, DAILY, PLAIN, caught_up, external_clock=True)
    answer = await api.routines(scheduler)
    assert answer.status == 200
    listing = {entry.pop("name"): entry for entry in answer.body}
    nothing = {"inputTokens": 0, "outputTokens": 0, "costs": {}}
    common = {"paused": False, "last": None, "running": False, "spent24h": nothing}
    assert listing == {
        "adhoc": {"cron": None, "tz": None, "next": None} | common,
        "daily": {"cron": "0 9 * * *", "tz": "Europe/Berlin", "next": "2026-07-08T07:00:00.000Z"}
        | common,
        "plain": {"cron": "0 9 * * *", "tz": None, "next": "2026-07-08T09:00:00.000Z"} | common,
        "late": {
            "cron": "0 * * * *",
            "tz": None,
            "next": "2026-07-07T11:00:00.000Z",
            "catchup": catchup_text(600.0),
        }
        | common,
    }
    assert catchup_text(600.0) == "10m"
    assert next_run("0 9 * * *", "Europe/Berlin", T0) == datetime.fromisoformat(
        "2026-07-08T07:00:00+00:00"
    )


async def test_routines_show_a_turn_running_without_a_claim_and_a_claim_held(
    autojump_clock: Any,
) -> None:
    agent = ScriptedAgent(Hang())
    scheduler = Scheduler(
        agent=agent, store=MemoryStore(), routines=[ADHOC, PLAIN], external_clock=True
    )
    async with trio.open_nursery() as nursery:
        await started(scheduler, nursery)
        assert (await api.run(scheduler, {"name": "adhoc", "wait": False})).status == 202
        slot = T0.replace(day=6, hour=9, minute=0)
        fired = await api.fire(scheduler, {"name": "plain", "slot": iso(slot)})
        assert fired.status == 202
        await trio.testing.wait_all_tasks_blocked()
        listing = {entry["name"]: entry for entry in (await api.routines(scheduler)).body}
        # A turn of its session runs, though no claim of it is open (POST /run claims nothing).
        assert (listing["adhoc"]["running"], listing["adhoc"]["last"]) == (True, None)
        # Its newest claim is open and held: running, on the claim as well.
        last = listing["plain"]["last"]
        assert (listing["plain"]["running"], last["slot"], last["running"]) == (
            True,
            iso(slot),
            True,
        )
        history = (await api.history(scheduler, "plain")).body
        assert [(h["slot"], h["running"]) for h in history] == [(iso(slot), True)]
        scheduler.stop(grace=0)


async def test_routines_show_a_turn_of_their_session_on_another_replica(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Another replica runs a turn of the session (a run, a wake-up, or a fire whose newest
    # claim is settled since): no claim of ours says so, its session's hold does.
    store = MemoryStore()
    scheduler = Scheduler(
        agent=ScriptedAgent(), store=store, routines=[ADHOC, PLAIN], external_clock=True
    )
    other = await store.join(ReplicaInfo("other", "0.1.0", "host", 7, T0, T0))
    async with trio.open_nursery() as nursery:
        await started(scheduler, nursery)
        assert await other.take([session_key(ADHOC.session)]) == [True]
        listing = {entry["name"]: entry for entry in (await api.routines(scheduler)).body}
        assert (listing["adhoc"]["running"], listing["plain"]["running"]) == (True, False)
        await other.release([session_key(ADHOC.session)])
        listing = {entry["name"]: entry for entry in (await api.routines(scheduler)).body}
        assert (listing["adhoc"]["running"], listing["plain"]["running"]) == (False, False)
        # Unreadable, they are said so, as the other reads of the listing.
        store.faults["sessions_held"] = EIO
        caplog.clear()
        assert await refused(api.routines(scheduler)) == (
            503,
            "the sessions' holds are unreadable right now",
            (("retry-after", "5"),),
        )
        assert errors(caplog) == [(logging.ERROR, "GET /routines: EIO: disk on fire")]
        del store.faults["sessions_held"]
        store.hang("sessions_held")  # a store that never answers: within its deadline
        before = trio.current_time()
        caplog.clear()
        status, said, _ = await refused(api.routines(scheduler))
        assert (status, said) == (503, "the sessions' holds are unreadable right now")
        assert trio.current_time() - before == scheduler.store_timeout
        ((level, line),) = errors(caplog)
        assert (level, line.startswith("GET /routines: the sessions' holds are unreadable")) == (
            logging.ERROR,
            True,
        )
        scheduler.stop(grace=0)


class WithoutSessionsHeld(MemoryStore):
    """A store of an earlier contract: no ``sessions_held`` to ask."""

    def __getattribute__(self, name: str) -> Any:
        if name == "sessions_held":
            raise AttributeError(name)
        return super().__getattribute__(name)


async def test_routines_of_a_store_without_the_holds_read_say_what_runs_here(
    autojump_clock: Any,
) -> None:
    store = WithoutSessionsHeld()
    assert not hasattr(store, "sessions_held")
    scheduler = Scheduler(
        agent=ScriptedAgent(Hang()), store=store, routines=[ADHOC, PLAIN], external_clock=True
    )
    async with trio.open_nursery() as nursery:
        await started(scheduler, nursery)
        assert await scheduler.sessions_running([ADHOC.session, PLAIN.session]) == frozenset()
        assert (await api.run(scheduler, {"name": "adhoc", "wait": False})).status == 202
        await trio.testing.wait_all_tasks_blocked()
        listing = {entry["name"]: entry for entry in (await api.routines(scheduler)).body}
        assert (listing["adhoc"]["running"], listing["plain"]["running"]) == (True, False)
        assert await scheduler.sessions_running([]) == frozenset()
        scheduler.stop(grace=0)


class Reloading(MemoryStore):
    """A store during whose read of the newest claims the routines are reloaded."""

    scheduler: Scheduler | None = None

    async def latest_fire(self, routine: str) -> Any:
        if self.scheduler is not None:
            self.scheduler.update_routines([Routine(name="b", prompt="p")])
            self.scheduler = None
        return await super().latest_fire(routine)


async def test_a_routine_removed_while_the_claims_are_read_is_left_out_not_the_rest(
    autojump_clock: Any,
) -> None:
    store = Reloading()
    scheduler = Scheduler(
        agent=ScriptedAgent(),
        store=store,
        routines=[Routine(name="a", prompt="p"), Routine(name="b", prompt="p")],
        external_clock=True,
    )
    store.scheduler = scheduler
    answer = await api.routines(scheduler)
    assert [entry["name"] for entry in answer.body] == ["b"]


class NoReplicas(MemoryStore):
    async def replicas(self) -> Any:
        raise EIO


async def test_read_faults_are_503_with_their_log_lines_whole(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = NoReplicas()
    for operation in ("latest_fire", "history", "list_wakeups", "remove_wakeup", "add_wakeup"):
        store.faults[operation] = EIO
    scheduler, *_ = rig(ADHOC, store=store, external_clock=True)
    retry = (("retry-after", "5"),)
    caplog.clear()
    assert await refused(api.routines(scheduler)) == (
        503,
        "the routines' claims are unreadable right now",
        retry,
    )
    assert await refused(api.history(scheduler, "adhoc")) == (
        503,
        'the history of "adhoc" is unreadable right now',
        retry,
    )
    assert await refused(api.replicas(scheduler)) == (
        503,
        "the replicas are unreadable right now",
        retry,
    )
    assert await refused(wakeupapi.wakeups(scheduler, None, Page(), "")) == (
        503,
        "the wake-up state is unreadable right now",
        retry,
    )
    assert await refused(wakeupapi.unwake(scheduler, "w" * 70, "s")) == (
        503,
        "the wake-up state is unavailable; nothing was removed",
        retry,
    )
    wake = {"session": "s", "prompt": "p", "in": "2h"}
    assert await refused(wakeupapi.wake(scheduler, wake, "")) == (
        503,
        "the wake-up state is unavailable; nothing was added",
        retry,
    )
    assert errors(caplog) == [
        (logging.ERROR, "GET /routines: EIO: disk on fire"),
        (logging.ERROR, "GET /routines/adhoc/history: EIO: disk on fire"),
        (logging.ERROR, "GET /replicas: EIO: disk on fire"),
        (logging.ERROR, "GET /wakeups: EIO: disk on fire"),
        (logging.ERROR, f"DELETE /wakeups/{'w' * 64}: EIO: disk on fire"),
        (logging.ERROR, "POST /wakeups: EIO: disk on fire"),
    ]
    # The claims read, the paused routines not: that read's own words, in the log too.
    del store.faults["latest_fire"]
    store.faults["paused"] = EIO
    caplog.clear()
    assert await refused(api.routines(scheduler)) == (
        503,
        "the paused routines are unreadable right now",
        retry,
    )
    assert errors(caplog) == [(logging.ERROR, "GET /routines: EIO: disk on fire")]


async def test_reads_and_wakeup_changes_the_store_leaves_unanswered_are_503_at_its_timeout(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    scheduler, *_ = rig(ADHOC, store=store, external_clock=True)  # store_timeout=5
    added = await wakeupapi.wake(scheduler, WAKE | {"in": "2h"}, "")
    wid = added.body["wakeup"]["id"]
    for operation in ("history", "list_wakeups", "remove_wakeup", "add_wakeup"):
        store.hang(operation)
    retry = (("retry-after", "5"),)
    not_confirmed = (
        "the wake-up state did not answer within 5s; the {} is not confirmed — try again"
    )
    caplog.clear()
    before = trio.current_time()
    with trio.fail_after(60):  # a handler without the deadline would wait for ever
        assert await refused(api.history(scheduler, "adhoc")) == (
            503,
            'the history of "adhoc" is unreadable right now',
            retry,
        )
        assert trio.current_time() - before == pytest.approx(5.0)
        assert await refused(wakeupapi.wakeups(scheduler, "chat:1", Page(), "")) == (
            503,
            "the wake-up state is unreadable right now",
            retry,
        )
        assert trio.current_time() - before == pytest.approx(10.0)
        assert await refused(wakeupapi.unwake(scheduler, wid, "chat:1")) == (
            503,
            not_confirmed.format("cancellation"),
            retry,
        )
        assert await refused(wakeupapi.wake(scheduler, WAKE | {"in": "3h"}, "")) == (
            503,
            not_confirmed.format("wake-up").replace(
                "try again", "list the session's wake-ups before adding it again"
            ),
            retry,
        )
        assert trio.current_time() - before == pytest.approx(20.0)
    slow = "the store did not answer within 5s"
    assert errors(caplog) == [
        (logging.ERROR, f"GET /routines/adhoc/history: {slow}"),
        (logging.ERROR, f"GET /wakeups: {slow}"),
        (logging.ERROR, f"DELETE /wakeups/{wid}: {slow}"),
        (logging.ERROR, f"POST /wakeups: {slow}"),
    ]
    assert [w.id for w in store.wakeups] == [wid]


def was_paused(store: MemoryStore, paused: bool) -> None:
    """``adhoc`` paused in ``store``, or not."""
    if paused:
        store.paused_routines.add("adhoc")
    else:
        store.paused_routines.discard("adhoc")


async def test_a_pause_or_resume_fault_is_logged_naming_which(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    store.fail("set_paused", EIO)
    scheduler, *_ = rig(ADHOC, store=store, external_clock=True)
    caplog.clear()
    for paused in (True, False):
        was_paused(store, not paused)  # each writes only a change
        assert await refused(api.pause(scheduler, "adhoc", paused=paused)) == (
            503,
            'could not change "adhoc" right now',
            (("retry-after", "5"),),
        )
    assert errors(caplog) == [
        (logging.ERROR, "POST /routines/adhoc/pause: EIO: disk on fire"),
        (logging.ERROR, "POST /routines/adhoc/resume: EIO: disk on fire"),
    ]


async def test_a_change_the_store_cannot_confirm_is_503_saying_it_may_be_made(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The store's own word (its commit was sent, its answer lost): not "nothing was added".
    unsure = Unconfirmed("could not add a wake-up in db: not confirmed: the commit was sent")
    store = MemoryStore()
    store.paused_routines.add("adhoc")
    scheduler, *_ = rig(ADHOC, store=store, external_clock=True)
    for operation in ("add_wakeup", "remove_wakeup", "set_paused"):
        store.fail(operation, unsure)
    retry = (("retry-after", "5"),)
    caplog.clear()
    assert await refused(wakeupapi.wake(scheduler, WAKE | {"in": "2h"}, "")) == (
        503,
        "the wake-up state did not confirm the wake-up: it may be made — list the session's "
        "wake-ups before adding it again",
        retry,
    )
    assert await refused(wakeupapi.unwake(scheduler, "w1", "chat:1")) == (
        503,
        "the wake-up state did not confirm the cancellation: it may be made — try again",
        retry,
    )
    for paused in (True, False):
        was_paused(store, not paused)  # each writes only a change
        assert await refused(api.pause(scheduler, "adhoc", paused=paused)) == (
            503,
            'the change of "adhoc" is not confirmed: it may be made — try again',
            retry,
        )
    assert [message for _, message in errors(caplog)] == [
        f"{route}: {unsure}"
        for route in (
            "POST /wakeups",
            "DELETE /wakeups/w1",
            "POST /routines/adhoc/pause",
            "POST /routines/adhoc/resume",
        )
    ]


# -- wake-ups ------------------------------------------------------------------------------------

WAKE = {"session": "chat:1", "prompt": "p"}
NO_PROMPT = '"prompt" must be a non-empty string, e.g. "check the build"'
ONE_OF = 'give exactly one of "in" (a delay such as "30m") or "cron"'


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"prompt": "p", "in": "2h"}, '"session" must be a non-empty string, e.g. "chat:42"'),
        ({"session": "s", "in": "2h"}, NO_PROMPT),
        (WAKE | {"session": "s" * 513}, '"session" is longer than 512 characters'),
        (WAKE | {"cron": 5}, '"cron" must be a non-empty string, e.g. "0 9 * * 1-5"'),
        (WAKE, ONE_OF),
        (WAKE | {"in": "2h", "cron": "0 9 * * *"}, ONE_OF),
        (WAKE | {"in": "2h", "tz": "UTC"}, '"tz" goes with "cron" only'),
        (WAKE | {"in": 1e300}, '"in" is too far in the future'),
        (
            WAKE | {"in": "soon"},
            'couldn\'t parse "in" ("soon") — use a unit like "30m" / "2h" / "1d", or a number '
            'of seconds (a bare number as text like "120" is rejected).',
        ),
        (
            WAKE | {"in": "2h", "until": "2026-07-31T18:00:00Z"},
            '"until" goes with "cron" only',
        ),
        (
            WAKE | {"cron": "0 9 * * *", "until": "tomorrow"},
            '"until" must be an ISO 8601 instant with its zone, such as "2026-07-31T18:00:00Z"',
        ),
    ],
)  # fmt: skip
async def test_wake_refusals_whole(autojump_clock: Any, body: dict[str, Any], message: str) -> None:
    scheduler, _, store, _ = rig(ADHOC, external_clock=True)
    assert await refused(wakeupapi.wake(scheduler, body, "")) == (400, message, ())
    assert store.wakeups == []


async def test_wake_applies_the_schedulers_limits(autojump_clock: Any) -> None:
    limits = WakeLimits(lifetime=timedelta(days=2))
    scheduler, _, store, _ = rig(ADHOC, external_clock=True, wake_limits=limits)
    added = await wakeupapi.wake(scheduler, WAKE | {"cron": "0 9 * * *"}, "")
    assert (added.status, added.body["wakeup"]["until"]) == (201, iso(T0 + timedelta(days=2)))
    too_far = iso(T0 + timedelta(days=3))
    late = WAKE | {"cron": "0 9 * * *", "until": too_far}
    assert await refused(wakeupapi.wake(scheduler, late, "")) == (
        400,
        "until is too far off — a recurring wake-up lives at most 2 days "
        f"(until {iso(T0 + timedelta(days=2))} at the latest).",
        (),
    )
    assert [w.until for w in store.wakeups] == [T0 + timedelta(days=2)]


async def test_unwake_answers_whole(autojump_clock: Any) -> None:
    scheduler, _, store, _ = rig(ADHOC, external_clock=True)
    added = await wakeupapi.wake(scheduler, WAKE | {"in": "2h"}, "")
    wid = added.body["wakeup"]["id"]
    assert await refused(wakeupapi.unwake(scheduler, wid, "another")) == (
        404,
        f"no pending wake-up {wid} for this session "
        "(already fired, cancelled, or another session's)",
        (),
    )
    removed = await wakeupapi.unwake(scheduler, wid, "chat:1")
    assert (removed.status, removed.body) == (
        200,
        {"removed": True, "reply": f"OK — wake-up {wid} cancelled."},
    )
    assert store.wakeups == []
