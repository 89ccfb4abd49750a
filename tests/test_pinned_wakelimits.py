"""The wake-up limits' pure rules pinned whole (wakelimits.py): each refusal's text, the
window edges of ``occurrences``, the windows ``check_rate`` weighs, and the validation of
``WakeLimits`` (see docs/mutation.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs
import pytest

from trio_routines.cron import parse_cron
from trio_routines.errors import InvalidWakeup
from trio_routines.instants import format_iso
from trio_routines.records import Origin, OriginKind, Wakeup
from trio_routines.wakelimits import (
    WakeLimits,
    check_depth,
    check_rate,
    expired_line,
    occurrences,
    plan_until,
)

NOW = datetime(2026, 7, 7, 10, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
BY_TURN = Origin(kind=OriginKind.WAKEUP, parent="w0", depth=1)


def one_shot(at: datetime, origin: Origin | None = BY_TURN, wakeup_id: str = "new") -> Wakeup:
    return Wakeup(id=wakeup_id, session="s", prompt="p", fire_at=at, origin=origin)


def recurring(cron: str, first: datetime, **kw: object) -> Wakeup:
    return Wakeup(id="r", session="s", prompt="p", fire_at=first, cron=cron, **kw)  # type: ignore[arg-type]


def refusal(new: Wakeup, rate: int, recent: tuple[datetime, ...] = (), *pending: Wakeup) -> str:
    with pytest.raises(InvalidWakeup) as caught:
        check_rate(list(pending), new, recent, NOW, WakeLimits(rate=rate))
    return str(caught.value)


HEAD = (
    "rate limit — this session would have 2 wake-up turns within one hour (at most 1 in any "
    "rolling hour, counting the turns run in the last hour and the wake-ups pending)"
)


def test_a_turn_run_at_now_itself_leaves_the_hour_an_hour_later() -> None:
    assert refusal(one_shot(NOW + MINUTE), 1, (NOW,)) == (
        f"{HEAD}; it resets at 2026-07-07T11:00:00.000Z, when the turns run before then leave "
        "the hour. Or cancel a pending wake-up, or schedule this one later."
    )


def test_an_overdue_pending_wake_up_is_no_turn_run_so_waiting_frees_nothing() -> None:
    overdue = one_shot(NOW - MINUTE, origin=None, wakeup_id="late")
    assert refusal(one_shot(NOW + MINUTE), 1, (), overdue) == (
        f"{HEAD}; waiting does not make room: cancel a pending wake-up, or schedule this one later."
    )


def test_only_windows_holding_an_occurrence_of_the_new_wake_up_are_weighed() -> None:
    # Operators queued three wake-ups at 13:00 (never refused); with the one at 12:40 an hour
    # holds four, but none of the new wake-up's occurrences (12:00, 14:00) is in that hour.
    queued = [one_shot(NOW + timedelta(hours=2, minutes=40), None, "a")]
    queued += [one_shot(NOW + 3 * HOUR, None, f"b{i}") for i in range(3)]
    new = recurring("0 */2 * * *", NOW + 2 * HOUR, origin=BY_TURN)
    check_rate(queued, new, (), NOW, WakeLimits(rate=3))


def test_recurring_wake_ups_are_weighed_together_at_every_hour_of_the_week() -> None:
    # Added in the morning, each first due at 23:00: only the first two hours after it were
    # weighed against the others, and three of them ran 18 turns in that hour every night.
    evening = datetime(2026, 7, 7, 23, tzinfo=UTC)
    first = recurring("*/10 23 * * *", evening, origin=BY_TURN)
    second = attrs.evolve(first, id="r2")
    check_rate([first], second, (), NOW, WakeLimits(rate=12))  # 12 in that hour: allowed
    # One more, first due in the morning: its 23:00 occurrences make 18 that evening.
    third = recurring("*/10 9,23 * * *", datetime(2026, 7, 8, 9, tzinfo=UTC), origin=BY_TURN)
    with pytest.raises(InvalidWakeup, match=r"^rate limit — this session would have 18 "):
        check_rate([first, second], attrs.evolve(third, id="r3"), (), NOW, WakeLimits(rate=12))
    # A daily one meets two weekly ones on Monday night, six days after its first occurrence.
    monday = datetime(2026, 7, 13, 23, tzinfo=UTC)
    weekly = [
        attrs.evolve(recurring("*/10 23 * * MON", monday, origin=BY_TURN), id=f"w{i}")
        for i in range(2)
    ]
    daily = attrs.evolve(recurring("0 23 * * *", evening, origin=BY_TURN), id="d")
    with pytest.raises(InvalidWakeup, match=r"^rate limit — this session would have 13 "):
        check_rate(weekly, daily, (), NOW, WakeLimits(rate=12))


def test_the_chain_depth_refusal_whole() -> None:
    with pytest.raises(InvalidWakeup) as caught:
        check_depth(Origin(kind=OriginKind.WAKEUP, parent="w", depth=3), WakeLimits(depth=2))
    assert str(caught.value) == (
        "chain-depth limit — this wake-up would be number 3 in a chain of wake-ups, each set "
        "by the turn of the one before (at most 2). This limit does not reset with time: a "
        "wake-up set by a routine's turn or by the operator starts a new chain."
    )


def test_a_one_shot_occurs_from_start_inclusive_to_end_exclusive() -> None:
    shot = one_shot(NOW)
    assert list(occurrences(shot, NOW, NOW + MINUTE)) == [NOW]
    assert list(occurrences(shot, NOW - MINUTE, NOW)) == []


def test_a_recurring_wake_up_occurs_from_start_to_its_until_inclusive() -> None:
    every = recurring("* * * * *", NOW - 10 * MINUTE, until=NOW + 3 * MINUTE)
    # From a start on an occurrence: it is the first; the end is left out, the until is not.
    assert list(occurrences(every, NOW, NOW + 2 * MINUTE)) == [NOW, NOW + MINUTE]
    assert list(occurrences(every, NOW, NOW + HOUR)) == [NOW + MINUTE * i for i in range(4)]
    # A start between occurrences: the next one.
    assert list(occurrences(every, NOW + timedelta(seconds=30), NOW + 2 * MINUTE)) == [NOW + MINUTE]


def test_occurrences_follow_the_wake_ups_zone_and_hashed_fields() -> None:
    berlin = recurring("0 9 * * *", NOW + timedelta(hours=21), tz="Europe/Berlin")
    assert list(occurrences(berlin, NOW, NOW + timedelta(days=2))) == [
        datetime(2026, 7, 8, 7, tzinfo=UTC),
        datetime(2026, 7, 9, 7, tzinfo=UTC),
    ]
    for session, wakeup_id in [("chat-1", "a1"), ("chat-2", "b7"), ("x", "zz")]:
        hashed = Wakeup(id=wakeup_id, session=session, prompt="p", fire_at=NOW, cron="H H * * *")
        assert hashed.resolved_cron is not None
        schedule = parse_cron(hashed.resolved_cron, None)
        first = schedule.next_after(NOW)
        assert first is not None
        second = schedule.next_after(first)
        assert list(occurrences(hashed, NOW + MINUTE, first + timedelta(days=1, minutes=1))) == [
            first,
            second,
        ]


def test_an_expired_line_without_an_until_says_so() -> None:
    assert expired_line(one_shot(NOW)) == (
        "wake-up new of session 's' (cron None) expired at ?: removed, not fired"
    )


@pytest.mark.parametrize(
    ("lifetime", "shown"),
    [
        (timedelta(days=1), "1 day"),
        (timedelta(days=2), "2 days"),
        (timedelta(hours=36), "36 hours"),
        (timedelta(hours=1), "1 hour"),
        (timedelta(minutes=90), "1.5 hours"),
    ],
)
def test_an_until_too_far_off_names_the_lifetime(lifetime: timedelta, shown: str) -> None:
    with pytest.raises(InvalidWakeup) as caught:
        plan_until("0 * * * *", NOW + 3 * lifetime, NOW, NOW, WakeLimits(lifetime=lifetime))
    latest = (NOW + lifetime).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    assert str(caught.value) == (
        f"until is too far off — a recurring wake-up lives at most {shown} "
        f"(until {latest} at the latest)."
    )


def test_a_one_shot_with_an_until_is_refused_whole() -> None:
    with pytest.raises(InvalidWakeup) as caught:
        plan_until(None, NOW + HOUR, NOW, NOW, WakeLimits())
    assert str(caught.value) == "until goes with a recurring wake-up (cron) only."


def test_the_default_until_is_cut_to_the_second() -> None:
    now = NOW.replace(microsecond=654_321)
    limits = WakeLimits(lifetime=timedelta(days=1))
    assert plan_until("0 * * * *", None, now, now, limits) == NOW + timedelta(days=1)


def test_a_lifetime_of_exactly_an_hour_is_allowed_and_a_number_is_refused_whole() -> None:
    assert WakeLimits(lifetime=HOUR).lifetime == HOUR
    with pytest.raises(ValueError, match=r"^lifetime must") as caught:
        WakeLimits(lifetime=3600)  # type: ignore[arg-type]
    assert str(caught.value) == ("lifetime must be a timedelta of an hour to 36500 days, got 3600")
    assert WakeLimits(lifetime=timedelta(days=36_500)).lifetime.days == 36_500
    with pytest.raises(ValueError, match=r"^lifetime must"):
        WakeLimits(lifetime=timedelta(days=36_501))


def test_a_recurring_wake_up_first_due_past_its_lifetime_is_refused() -> None:
    # Stored, it would never fire, and hold one of its session's places until it expired.
    limits = WakeLimits(lifetime=timedelta(days=30))
    leap_day = datetime(2028, 2, 29, tzinfo=UTC)
    with pytest.raises(InvalidWakeup) as caught:
        plan_until("0 0 29 2 *", None, leap_day, NOW, limits)
    assert str(caught.value) == (
        f"its first occurrence (2028-02-29T00:00:00.000Z) comes after the longest a recurring "
        f"wake-up lives (30 days, until {format_iso(NOW + timedelta(days=30))}): it would "
        "never fire."
    )
    assert plan_until("0 0 29 2 *", None, NOW + timedelta(days=30), NOW, limits) == (
        NOW + timedelta(days=30)
    )
