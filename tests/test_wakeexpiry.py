"""Expiring recurring wake-ups (wakelimits.py): ``until``, the default lifetime, removal when
due (logged, never fired), on every store, under virtual time, over HTTP and the command line."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
import trio.testing
from test_http import assert_error, serving
from wakeupstate import entry, state

from trio_routines.errors import InvalidWakeup
from trio_routines.instants import LAST_INSTANT, format_iso
from trio_routines.records import Wakeup
from trio_routines.routines import Routine
from trio_routines.scheduler import Scheduler
from trio_routines.store import Store
from trio_routines.stores import DirectoryStore
from trio_routines.testing import MemoryStore, ScriptedAgent, WallClock
from trio_routines.wakelimits import DEFAULT_LIFETIME, EXPIRY_GRACE, WakeLimits, expired
from trio_routines.wakeups import WakeupRequest, plan_add, take_first_due

T0 = datetime(2026, 7, 7, 10, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
MS = timedelta(milliseconds=1)


def hourly(until: datetime | None = None, **kw: object) -> WakeupRequest:
    return WakeupRequest(session="s", prompt="p", cron="0 * * * *", until=until, **kw)  # type: ignore[arg-type]


# --- the rules ---------------------------------------------------------------------------------


def test_a_recurring_wake_up_gets_the_default_lifetime() -> None:
    assert plan_add([], hourly(), T0).until == T0 + DEFAULT_LIFETIME
    assert timedelta(days=30) == DEFAULT_LIFETIME
    short = hourly(limits=WakeLimits(lifetime=timedelta(hours=5)))
    assert plan_add([], short, T0).until == T0 + timedelta(hours=5)
    one_shot = WakeupRequest(session="s", prompt="p", fire_at=T0 + HOUR)
    assert plan_add([], one_shot, T0).until is None


def test_until_is_kept_up_to_the_lifetime_and_no_further() -> None:
    assert plan_add([], hourly(T0 + DEFAULT_LIFETIME), T0).until == T0 + DEFAULT_LIFETIME
    with pytest.raises(InvalidWakeup, match=r"too far off .* at most 30 days \(until 2026-08-06"):
        plan_add([], hourly(T0 + DEFAULT_LIFETIME + MS), T0)
    with pytest.raises(InvalidWakeup, match="at most 12 hours"):
        plan_add([], hourly(T0 + DEFAULT_LIFETIME, limits=WakeLimits(lifetime=12 * HOUR)), T0)


def test_until_before_the_first_occurrence_or_on_a_one_shot_is_refused() -> None:
    assert plan_add([], hourly(T0 + HOUR), T0).until == T0 + HOUR  # exactly the first
    with pytest.raises(InvalidWakeup, match="comes before the first occurrence"):
        plan_add([], hourly(T0 + HOUR - MS), T0)
    once = WakeupRequest(session="s", prompt="p", fire_at=T0 + HOUR, until=T0 + 2 * HOUR)
    with pytest.raises(InvalidWakeup, match="until goes with a recurring wake-up"):
        plan_add([], once, T0)


def _recurring(until: datetime | None, fire_at: datetime = T0, wakeup_id: str = "r") -> Wakeup:
    return Wakeup(
        id=wakeup_id, session="s", prompt="p", fire_at=fire_at, cron="0 * * * *", until=until
    )


def test_the_occurrence_at_until_fires_and_the_entry_then_leaves(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "trio_routines")
    rest, taken = take_first_due([_recurring(T0 + HOUR)], T0)
    assert taken is not None
    assert [w.fire_at for w in rest] == [T0 + HOUR]  # advanced: T0 + 1 h is not after until
    rest, taken = take_first_due(rest, T0 + HOUR)
    assert taken is not None
    assert taken.fire_at == T0 + HOUR
    assert rest == []  # the next (T0 + 2 h) would be after until
    assert any("last occurrence before its until" in r.getMessage() for r in caplog.records)


def test_an_entry_past_its_until_is_removed_unfired_and_the_next_due_is_taken(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "trio_routines")
    advanced_by_another = _recurring(T0 - HOUR, fire_at=T0)  # an older reader advanced it
    one_shot = Wakeup(id="o", session="s", prompt="p", fire_at=T0)
    rest, taken = take_first_due([advanced_by_another, one_shot], T0)
    assert taken == one_shot
    assert rest == []
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert line == (
        "wake-up r of session 's' (cron '0 * * * *') expired at 2026-07-07T09:00:00.000Z: "
        "removed, not fired"
    )
    # Alone, it leaves with nothing taken: the list is shorter.
    assert take_first_due([advanced_by_another], T0) == ([], None)


def test_the_last_occurrence_taken_late_fires_within_the_grace_only() -> None:
    until = T0
    within = take_first_due([_recurring(until, fire_at=T0)], T0 + EXPIRY_GRACE)
    assert within[1] is not None
    late = take_first_due([_recurring(until, fire_at=T0)], T0 + EXPIRY_GRACE + MS)
    assert late == ([], None)
    forever = take_first_due([_recurring(None, fire_at=T0)], T0 + 400 * 24 * HOUR)
    assert forever[1] is not None  # stored before expiry: no until, never expires


def test_an_until_is_weighed_by_the_rate() -> None:
    from trio_routines.records import Origin, OriginKind

    by_turn = Origin(kind=OriginKind.WAKEUP, parent="w", depth=1)
    pending = [_recurring(T0 + 2 * HOUR, fire_at=T0 + HOUR, wakeup_id=f"r{i}") for i in range(3)]
    late = WakeupRequest(
        session="s", prompt="p", fire_at=T0 + 3 * HOUR + 30 * 60 * MS * 1000,
        origin=by_turn, limits=WakeLimits(rate=3),
    )  # fmt: skip
    plan_add(pending, late, T0)  # the recurring ones end at T0 + 2 h: nothing in its hour
    with pytest.raises(InvalidWakeup, match="rate limit"):
        plan_add([_recurring(None, T0 + HOUR, f"r{i}") for i in range(3)], late, T0)


def test_an_until_at_the_calendars_end_never_expires_and_the_rest_are_taken() -> None:
    # Stored by hand (a journal line, a row set to 'infinity'): its expiry fell past the
    # calendar, which stopped every wake-up of every session.
    forever = _recurring(LAST_INSTANT, fire_at=T0 + HOUR, wakeup_id="forever")
    assert not expired(forever, T0 + 2 * HOUR)
    one_shot = Wakeup(id="once", session="t", prompt="p", fire_at=T0)
    assert take_first_due([forever, one_shot], T0)[1] == one_shot
    rest, taken = take_first_due([forever], T0 + 2 * HOUR)
    assert taken == forever  # it fires, and goes on
    assert [w.fire_at for w in rest] == [T0 + 3 * HOUR]


def test_a_turns_wake_up_near_the_calendars_end_is_weighed_by_the_rate() -> None:
    from trio_routines.records import Origin, OriginKind

    by_turn = Origin(kind=OriginKind.WAKEUP, parent="w", depth=1)
    end = datetime(9999, 12, 31, 23, 50, tzinfo=UTC)

    def asked(at: datetime) -> WakeupRequest:
        limits = WakeLimits(rate=1)
        return WakeupRequest(session="s", prompt="p", fire_at=at, origin=by_turn, limits=limits)

    first = plan_add([], asked(end), T0)  # its hour runs past the calendar: no OverflowError
    assert first.fire_at == end
    with pytest.raises(InvalidWakeup, match="rate limit"):
        plan_add([first], asked(LAST_INSTANT), T0)
    with pytest.raises(InvalidWakeup, match="rate limit"):
        plan_add([first], asked(end - HOUR + MS), T0)
    plan_add([first], asked(end - HOUR), T0)  # an hour before: the next window


# --- every store -------------------------------------------------------------------------------


async def test_every_store_keeps_until_and_removes_the_entry_after_it(
    store: Store, store_factory: Callable[..., Store]
) -> None:
    added = await store.add_wakeup(hourly(T0 + 2 * HOUR), T0)
    assert added.until == T0 + 2 * HOUR
    other = store_factory()  # another replica reads it back
    assert [w.until for w in await other.list_wakeups()] == [T0 + 2 * HOUR]
    await other.aclose()
    for hours in (1, 2):
        taken = await store.take_due_wakeup(T0 + hours * HOUR)
        assert taken is not None
        assert taken.fire_at == T0 + hours * HOUR
    assert await store.list_wakeups() == []


async def test_every_store_removes_an_expired_entry_unfired(store: Store) -> None:
    await store.add_wakeup(hourly(T0 + HOUR), T0)
    late = T0 + HOUR + EXPIRY_GRACE + MS  # no scheduler ran since before its last occurrence
    assert await store.take_due_wakeup(late) is None
    assert await store.list_wakeups() == []


async def test_every_store_walks_past_expired_entries_to_the_next_due(store: Store) -> None:
    # Two expired entries stand before a due one-shot in stored order: one take drops both
    # (never fired) and takes the one-shot, on every store.
    for _ in range(2):
        await store.add_wakeup(hourly(T0 + HOUR), T0)
    late = T0 + HOUR + EXPIRY_GRACE + MS
    one_shot = await store.add_wakeup(WakeupRequest(session="t", prompt="p", fire_at=late - MS), T0)
    taken = await store.take_due_wakeup(late)
    assert taken is not None
    assert taken.id == one_shot.id
    assert await store.list_wakeups() == []


async def test_the_state_directory_takes_past_a_stored_until_at_the_calendars_end(
    tmp_path: Path,
) -> None:
    forever = {**entry("forever", at=T0), "cron": "0 * * * *", "until": format_iso(LAST_INSTANT)}
    state(tmp_path, [forever, entry("once", session="t", at=T0)])
    store = DirectoryStore(tmp_path)
    try:
        taken = [await store.take_due_wakeup(T0) for _ in range(3)]
        assert [w.id if w else None for w in taken] == ["forever", "once", None]
        assert [(w.id, w.fire_at) for w in await store.list_wakeups()] == [("forever", T0 + HOUR)]
    finally:
        await store.aclose()


# --- end to end --------------------------------------------------------------------------------


async def test_a_recurring_wake_up_fires_until_its_until_then_is_gone(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "trio_routines")
    wall = WallClock(T0 + timedelta(minutes=30))
    agent = ScriptedAgent(wall=wall)
    store = MemoryStore()
    scheduler = Scheduler(
        agent=agent,
        store=store,
        routines=[Routine(name="daily", prompt="p", cron="0 9 * * *")],
        now=wall,
        poll_interval=30,
    )
    added = await scheduler.add_wakeup(
        "chat", "hourly check", cron="0 * * * *", until=T0 + 3 * HOUR
    )
    assert added.until == T0 + 3 * HOUR
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(6 * 3600)
        scheduler.stop()
    fired = [t for t in agent.turns if t.session == "chat"]
    assert len(fired) == 3  # 11:00, 12:00, 13:00, and no more
    assert await store.list_wakeups() == []
    assert any(f"wake-up {added.id}" in r.getMessage() for r in caplog.records)


async def test_a_naive_until_is_refused(autojump_clock: trio.testing.MockClock) -> None:
    scheduler = Scheduler(agent=ScriptedAgent(), store=MemoryStore(), now=WallClock(T0))
    with pytest.raises(InvalidWakeup, match="aware instant"):
        await scheduler.add_wakeup("s", "p", cron="0 * * * *", until=datetime(2026, 7, 8))


BAD_UNTIL = [
    ({"cron": "0 * * * *", "until": "tomorrow"}, '"until" must be an ISO 8601 instant'),
    ({"cron": "0 * * * *", "until": "2026-07-08T10:00:00"}, '"until" must be an ISO 8601'),
    ({"cron": "0 * * * *", "until": 1783000000}, '"until" must be a non-empty string'),
    ({"cron": "0 * * * *", "until": ""}, '"until" must be a non-empty string'),
    ({"in": "2h", "until": "2099-01-01T00:00:00Z"}, '"until" goes with "cron" only'),
    ({"cron": "0 * * * *", "until": "2099-01-01T00:00:00Z"}, "until is too far off"),
    ({"cron": "0 * * * *", "until": "2020-01-01T00:00:00Z"}, "before the first occurrence"),
]


async def test_post_wakeups_until_bad_input_is_one_line_and_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with serving() as server:
        with caplog.at_level(logging.DEBUG):
            for extra, expected in BAD_UNTIL:
                body = {"session": "chat:1", "prompt": "p", **extra}
                reply = await server.call("POST", "/wakeups", body)
                assert expected in assert_error(reply, 400), (extra, reply.raw)
        assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
        assert await server.store.list_wakeups() == []
        until = format_iso(datetime.now(UTC) + timedelta(days=2))
        body = {"session": "chat:1", "prompt": "p", "cron": "0 * * * *", "until": until}
        added = await server.call("POST", "/wakeups", body)
        assert added.status == 201
        assert added.json["wakeup"]["until"] == until
        assert f", until {until} for session" in added.json["reply"]
        listed = await server.call("GET", "/wakeups?session=chat:1")
        assert [w["until"] for w in listed.json] == [until]


@pytest.mark.slow
def test_wake_until_on_the_command_line_is_stored_and_listed(env: object) -> None:
    from procs import Env

    assert isinstance(env, Env)
    until = format_iso(datetime.now(UTC).replace(second=17, microsecond=0) + timedelta(days=3))
    result = env.cli(
        "wake", "--session", "s", "--cron", "0 * * * *", "--until", until, "--prompt", "p",
        "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["until"] == until
    listed = env.cli("list")
    shown = until.removesuffix(".000Z") + "Z"  # to the second, as the listing shows instants
    assert f"cron 0 * * * *, until {shown}" in listed.stdout, listed.stdout
    refused = env.cli("wake", "--session", "s", "--in", "2h", "--until", until, "--prompt", "p")
    assert refused.returncode == 2
    assert "--until goes with --cron" in refused.stderr
