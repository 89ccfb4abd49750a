"""Pins ``scheduler/wakecalls.py``: the wake-up calls' own checks and their exact replies, what
a request carries to the store, the rate limit's read (a turn's request only), and each
call's fault when the store does not answer or refuses; and the answers
``scheduler/membership.py`` gives the same API (the replicas, whose newest claims live, a
lost presence replaced).

The part is driven on its own, over the memory store, under virtual time."""

from __future__ import annotations

import logging
import os
import socket
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Any

import pytest
import trio
from scheduler_rig import NO_ANSWER, part_rig

from trio_routines import __version__
from trio_routines.context import FireContext, firing
from trio_routines.errors import InvalidWakeup, StateFault
from trio_routines.instants import FIRST_INSTANT
from trio_routines.records import Fire, Outcome
from trio_routines.replicas import ReplicaInfo, claim_key
from trio_routines.scheduler.grace import Grace
from trio_routines.scheduler.membership import Membership
from trio_routines.scheduler.wakecalls import WakeupCalls
from trio_routines.testing import MemoryStore
from trio_routines.testing.memberships import MemoryPresence
from trio_routines.wakelimits import DEFAULT_LIMITS, WakeLimits
from trio_routines.wakeuptexts import bad_delay_reply

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)


class Counting(MemoryStore):
    """The memory store, counting the reads of the rate limit's turns."""

    def __init__(self) -> None:
        super().__init__()
        self.turn_reads = 0

    async def wake_turns(self, session: str, since: datetime) -> list[datetime]:
        self.turn_reads += 1
        return await super().wake_turns(session, since)


def calls_of(store: MemoryStore) -> WakeupCalls:
    runtime, calls, _ = part_rig(store, now=T0)
    return WakeupCalls(store, runtime, calls, DEFAULT_LIMITS)


class _NoOffset(tzinfo):
    """A zone that knows no offset: ``datetime`` reads its instants as naive."""

    def utcoffset(self, dt: datetime | None) -> None:
        return None

    def dst(self, dt: datetime | None) -> None:
        return None


@pytest.mark.parametrize(
    ("options", "reply"),
    [
        ({}, "give exactly one of delay, fire_at (once) or cron (recurring)."),
        (
            {"delay": 90, "cron": "0 9 * * *"},
            "give exactly one of delay, fire_at (once) or cron (recurring).",
        ),
        ({"delay": 0}, bad_delay_reply(0)),
        ({"delay": -5}, bad_delay_reply(-5)),
        ({"delay": "soon"}, bad_delay_reply("soon")),
        ({"delay": timedelta(0)}, bad_delay_reply(timedelta(0))),
        ({"delay": 1}, "too soon — the minimum wake delay is 60s."),  # the store's guardrail
        ({"delay": 1e300}, "the delay is too far in the future."),
        ({"delay": 90, "tz": "Europe/Berlin"}, "tz goes with cron only."),
        (
            {"delay": 90, "until": datetime(2026, 7, 8)},
            "until must be an aware instant (with its zone).",
        ),
        (
            {"cron": "0 9 * * *", "until": datetime(2026, 7, 8)},
            "until must be an aware instant (with its zone).",
        ),
        ({"fire_at": datetime(2026, 7, 8)}, "fire_at must be an aware instant (with its zone)."),
        ({"fire_at": "2026-07-08T09:00Z"}, "fire_at must be an aware instant (with its zone)."),
        (
            {"cron": "0 9 * * *", "until": date(2026, 7, 8)},
            "until must be an aware instant (with its zone).",
        ),
        (
            {"fire_at": datetime(2026, 7, 8, tzinfo=_NoOffset())},
            "fire_at must be an aware instant (with its zone).",
        ),
    ],
)
async def test_a_bad_request_is_refused_with_its_reply_and_adds_nothing(
    autojump_clock: Any, options: dict[str, Any], reply: str
) -> None:
    store = MemoryStore()
    with pytest.raises(InvalidWakeup) as refused:
        await calls_of(store).add("chat:1", "p", **options)
    assert str(refused.value) == reply
    assert store.wakeups == []


@pytest.mark.parametrize(
    ("session", "prompt", "options", "reply"),
    [
        ("a", 5, {"delay": "5m"}, "the prompt must be text, not int."),
        (5, "p", {"delay": "5m"}, "the session must be text, not int."),
        ("a", b"p", {"delay": "5m"}, "the prompt must be text, not bytes."),
        ("a", "p", {"cron": 900}, "the cron must be text, not int."),
        ("a", "p", {"cron": "0 9 * * *", "tz": 1}, "the tz must be text, not int."),
    ],
)
async def test_what_is_no_text_is_refused_as_a_bad_request(
    autojump_clock: Any, session: Any, prompt: Any, options: dict[str, Any], reply: str
) -> None:
    store = MemoryStore()
    with pytest.raises(InvalidWakeup) as refused:
        await calls_of(store).add(session, prompt, **options)
    assert str(refused.value) == reply
    assert store.wakeups == []


async def test_a_delay_may_be_a_timedelta_seconds_or_text(autojump_clock: Any) -> None:
    calls = calls_of(MemoryStore())
    for delay in (timedelta(minutes=5), 300, 300.0, "5m"):
        added = await calls.add("chat:1", "p", delay=delay)
        assert added.fire_at == T0 + timedelta(minutes=5)


async def test_a_recurring_wakeup_keeps_its_zone(autojump_clock: Any) -> None:
    added = await calls_of(MemoryStore()).add("chat:1", "p", cron="0 9 * * *", tz="Asia/Kolkata")
    assert (added.cron, added.tz) == ("0 9 * * *", "Asia/Kolkata")
    assert added.fire_at == datetime(2026, 7, 8, 3, 30, tzinfo=UTC)  # 09:00 in Kolkata


async def test_only_a_turns_request_reads_the_sessions_recent_turns(autojump_clock: Any) -> None:
    store = Counting()
    calls = calls_of(store)
    await calls.add("chat:1", "p", delay=90)  # the embedding API: no rate limit
    assert store.turn_reads == 0
    turn = FireContext("wakeup", "chat:1", wakeup="w0")
    with firing(turn):
        await calls.add("chat:1", "p", delay=120)
    assert store.turn_reads == 1


async def test_listing_is_the_sessions_own_or_everyones(autojump_clock: Any) -> None:
    calls = calls_of(MemoryStore())
    mine = await calls.add("chat:1", "p", delay=90)
    theirs = await calls.add("chat:2", "p", delay=90)
    assert await calls.pending("chat:1") == [mine]
    assert await calls.pending("chat:2") == [theirs]
    assert await calls.pending(None) == [mine, theirs]
    assert await calls.remove(mine.id, "chat:2") is False  # another session's
    assert await calls.remove(mine.id, "chat:1") is True
    assert await calls.pending(None) == [theirs]


@pytest.mark.parametrize(
    ("operation", "call", "what"),
    [
        (
            "add_wakeup",
            lambda calls: calls.add("chat:1", "p", delay=90),
            "the wake-up was not added",
        ),
        ("list_wakeups", lambda calls: calls.pending(None), "the wake-ups are unreadable"),
        (
            "remove_wakeup",
            lambda calls: calls.remove("w1", "chat:1"),
            "the wake-up was not removed",
        ),
    ],
)
async def test_a_call_the_store_never_answers_fails_at_its_bound_naming_itself(
    autojump_clock: Any, operation: str, call: Any, what: str
) -> None:
    store = MemoryStore()
    store.hang(operation)
    started = trio.current_time()
    with pytest.raises(StateFault) as fault:
        await call(calls_of(store))
    assert str(fault.value) == f"{what}: {NO_ANSWER}"
    assert trio.current_time() - started == 5.0


async def test_the_room_of_a_turn_due_in_the_calendars_first_hour_is_weighed() -> None:
    # A wake-up stored due in year 1 (a row set to '-infinity'), taken: its rate's read
    # overflowed, the loop restarted, and the wake-up was gone unfired.
    store = MemoryStore()
    first = FIRST_INSTANT + timedelta(minutes=30)
    assert await calls_of(store).room_at("chat:1", first) is None
    await store.note_wake_turn("chat:1", first - timedelta(minutes=10))
    limited = WakeupCalls(store, *part_rig(store, now=T0)[:2], WakeLimits(rate=1))
    assert await limited.room_at("chat:1", first) == first + timedelta(minutes=50)


async def test_a_rate_the_store_never_gives_lets_the_turn_run_saying_so(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    store.hang("wake_turns")
    started = trio.current_time()
    assert await calls_of(store).room_at("chat:1", T0) is None  # room: the turn runs
    assert trio.current_time() - started == 5.0
    [record] = caplog.records
    assert record.getMessage() == (
        "the rate of 'chat:1' was not checked (its turn runs): the session's recent wake-up "
        f"turns are unreadable: {NO_ANSWER}"
    )


async def test_a_wakeup_turn_the_store_does_not_record_is_one_warning(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    calls = calls_of(store)
    store.fail("note_wake_turn", StateFault("disk full"), times=1)
    await calls.note_turn("chat:1", T0)
    store.hang("note_wake_turn")
    await calls.note_turn("chat:1", T0)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "a wake-up turn of 'chat:1' went unrecorded (rate limit): disk full"),
        (
            logging.WARNING,
            "a wake-up turn of 'chat:1' went unrecorded (rate limit): "
            f"the wake-up turn was not recorded: {NO_ANSWER}",
        ),
    ]
    store.hangs.clear()
    await calls.note_turn("chat:1", T0)
    assert await store.wake_turns("chat:1", T0 - timedelta(hours=1)) == [T0]


# -- the membership's answers to the embedding API (scheduler/membership.py) ----------------


def membership_of(store: MemoryStore, replica: str = "r1") -> Membership:
    runtime, calls, _ = part_rig(store, now=T0, replica=replica)
    return Membership(store, runtime, calls, Grace())


class NoMembers(MemoryStore):
    """A store that keeps no members (None: not a part it implements)."""

    replicas = None  # type: ignore[assignment]


async def test_the_replicas_are_the_stores_or_else_this_one_while_joined(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    membership = membership_of(store)
    other = membership_of(store, "r2")
    async with membership.present(), other.present():
        assert [info.id for info in await membership.replicas()] == ["r1", "r2"]
    alone = membership_of(NoMembers())
    assert await alone.replicas() == []
    async with alone.present():
        assert [info.id for info in await alone.replicas()] == ["r1"]


async def test_the_replicas_the_store_never_gives_fail_at_the_bound(autojump_clock: Any) -> None:
    store = MemoryStore()
    store.hang("replicas")
    with pytest.raises(StateFault) as fault:
        await membership_of(store).replicas()
    assert str(fault.value) == f"the replicas are unreadable: {NO_ANSWER}"


async def test_each_newest_claim_says_whether_a_live_replica_holds_it(autojump_clock: Any) -> None:
    store = MemoryStore()
    membership = membership_of(store)
    await store.claim("settled", T0, T0, replica="r2")
    await store.settle("settled", T0, Outcome.COMPLETED, 5)
    await store.claim("running", T0, T0, replica="r2")
    await store.claim("dead", T0, T0, replica="gone")
    other = await store.join(ReplicaInfo("r2", "1", "h", 1, T0, T0))
    assert await other.take([claim_key("settled", T0), claim_key("running", T0)]) == [True, True]
    found = await membership.newest_claims(["settled", "running", "dead", "never"])
    assert {name: (fire and fire.slot, alive) for name, (fire, alive) in found.items()} == {
        "settled": (T0, False),  # settled: nobody runs it, whatever is held
        "running": (T0, True),
        "dead": (T0, False),
        "never": (None, False),
    }


class CancelsAfterJoin(MemoryStore):
    """Cancels ``scope`` once a join is made: a stop that comes while the old one is left."""

    scope: trio.CancelScope | None = None

    async def join(self, info: ReplicaInfo) -> MemoryPresence:
        presence = await super().join(info)
        if self.scope is not None:
            self.scope.cancel()
        return presence


async def test_a_lost_presence_is_replaced_and_the_old_one_left_whole_even_by_a_stop(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    left: list[MemoryPresence] = []
    leave = MemoryPresence._leave

    async def recorded(presence: MemoryPresence) -> None:
        await leave(presence)
        left.append(presence)  # reached only if the leave was not cut short

    monkeypatch.setattr(MemoryPresence, "_leave", recorded)
    store = CancelsAfterJoin()
    membership = membership_of(store)
    async with membership.present():
        old = membership.current()
        assert isinstance(old, MemoryPresence)
        old.lose()
        with trio.CancelScope() as scope:
            store.scope = scope
            await membership.rejoin()
        assert left == [old]
        new = membership.current()
        assert new is not old
        assert store.members["r1"] is new
    assert left == [old, new]


class Unshared(MemoryStore):
    """A store written for one process: no members, no joins, no holds of claims to ask."""

    def __getattribute__(self, name: str) -> Any:
        if name in ("join", "replicas", "claims_alive"):
            raise AttributeError(name)
        return super().__getattribute__(name)


async def test_a_store_for_one_process_gives_a_local_presence_naming_this_process(
    autojump_clock: Any,
) -> None:
    membership = membership_of(Unshared())
    with pytest.raises(StateFault) as fault:
        membership.current()
    assert str(fault.value) == "replica r1 has not joined its store"
    assert await membership.replicas() == []
    async with membership.present():
        assert await membership.replicas() == [
            ReplicaInfo("r1", __version__, socket.gethostname(), os.getpid(), T0, T0)
        ]
        held = [claim_key("mine", T0)]
        assert await membership.current().take(held) == [True]
        alive = await membership.claims_alive(
            [("mine", Fire(T0, T0, replica="r1")), ("theirs", Fire(T0, T0, replica="r2"))]
        )
        assert alive == [True, False]  # nobody else to ask: only our own holds


async def test_a_claim_naming_us_that_we_do_not_hold_is_an_earlier_process_s_and_dead(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    membership = membership_of(store)
    async with membership.present():
        other = await store.join(ReplicaInfo("r2", "1", "h", 1, T0, T0))
        assert await other.take([claim_key("theirs", T0)]) == [True]
        claims = [
            ("ours", Fire(T0, T0, replica="r1")),  # r1 is alive (we are), but never held it
            ("theirs", Fire(T0, T0, replica="r2")),
            ("gone", Fire(T0, T0, replica="r3")),
        ]
        assert await membership.claims_alive(claims) == [False, True, False]
        store.hang("claims_alive")
        with pytest.raises(StateFault) as fault:
            await membership.claims_alive(claims)
        assert str(fault.value) == f"the holds of the open claims are unreadable: {NO_ANSWER}"


async def test_a_join_the_store_never_answers_fails_at_the_bound(autojump_clock: Any) -> None:
    store = MemoryStore()
    store.hang("join")
    with pytest.raises(StateFault) as fault:
        async with membership_of(store).present():
            pass
    assert str(fault.value) == f"could not join the store as replica r1: {NO_ANSWER}"
