"""The pure wake-up rules and their model-facing texts (reference section 5)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs
import pytest

from trio_routines.converter import wakeup_from_json, wakeup_to_json
from trio_routines.cron import parse_cron
from trio_routines.errors import InvalidCron, InvalidWakeup
from trio_routines.records import Wakeup
from trio_routines.wakeups import (
    WakeupRequest,
    defer_dropped,
    parse_delay,
    plan_add,
    plan_defer,
)
from trio_routines.wakeuptexts import (
    bad_delay_reply,
    envelope,
    removed_reply,
    stored_reply,
)

NOW = datetime(2026, 7, 7, 10, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("30m", 1800),
        ("2h", 7200),
        ("1d", 86400),
        ("90s", 90),
        (120, 120),
        ("1.5h", 5400),
        (" 10 M ", 600),
        ("10\u00a0m", 600),  # a no-break space is white space
        (0.5, 0.5),
    ],
)
def test_delays_that_parse(value: object, seconds: float) -> None:
    assert parse_delay(value) == seconds


@pytest.mark.parametrize(
    "value",
    [
        *("120", "soon", -5, 0, "0m", "-1h", True, None, float("nan"), float("inf"), 10**400),
        *("٣m", "３０m", "1.٥h"),  # other scripts' digits: refused, as every other value does
    ],
)
def test_delays_that_do_not(value: object) -> None:
    assert parse_delay(value) is None


def test_over_long_numbers_are_refused_without_a_traceback() -> None:
    digits = "9" * 5000  # past int()'s 4,300-digit limit
    assert parse_delay(f"{digits}m") is None  # overflows to infinity: not a delay
    assert parse_delay(f"1.{digits}m") == 120.0  # 1.999… rounds to 2 minutes
    # A routine file's cron meets the parser at any length; a wake-up's is refused by its
    # length first (at most 1,024 characters).
    with pytest.raises(InvalidCron, match=r'^minute field: "9{8}'):
        parse_cron(f"{digits} 9 * * *")
    with pytest.raises(InvalidCron, match=r"^minute field: step"):
        parse_cron(f"*/{digits} 9 * * *")
    with pytest.raises(InvalidWakeup, match=r"^the cron is too long: at most 1,024 characters"):
        plan_add([], WakeupRequest(session="s", prompt="p", cron=f"{digits} 9 * * *"), NOW)
    with pytest.raises(InvalidWakeup, match=r'^invalid cron/tz: minute field: "9{8}'):
        plan_add([], WakeupRequest(session="s", prompt="p", cron=f"{digits[:1000]} 9 * * *"), NOW)


def test_one_shot_needs_a_time_and_a_minute() -> None:
    with pytest.raises(InvalidWakeup, match="needs its fire time"):
        plan_add([], WakeupRequest(session="s", prompt="p"), NOW)
    with pytest.raises(InvalidWakeup, match="too soon"):
        plan_add([], WakeupRequest(session="s", prompt="p", fire_at=NOW), NOW)
    added = plan_add(
        [], WakeupRequest(session="s", prompt="p", fire_at=NOW + timedelta(minutes=1)), NOW
    )
    assert added.fire_at == NOW + timedelta(minutes=1)


def test_no_session_no_wakeup() -> None:
    with pytest.raises(InvalidWakeup, match="needs a session to resume"):
        plan_add([], WakeupRequest(session="", prompt="p", fire_at=NOW + timedelta(hours=1)), NOW)


def test_recurring_first_pair_heuristic() -> None:
    ok = plan_add([], WakeupRequest(session="s", prompt="p", cron="*/10 * * * *"), NOW)
    assert ok.fire_at == NOW + timedelta(minutes=10)
    with pytest.raises(InvalidWakeup, match="too frequent"):
        plan_add([], WakeupRequest(session="s", prompt="p", cron="*/9 * * * *"), NOW)


@pytest.mark.parametrize(
    ("cron", "tz", "now", "closest"),
    [
        # the first pair is a day apart, the tight pair comes later (issue 11)
        ("58-59 18 * * *", None, datetime(2026, 7, 7, 18, 58, tzinfo=UTC), "1 minute"),
        ("0,5 9 * * MON", None, NOW, "5 minutes"),
        # across midnight: 23:55 one day, 00:00 the next
        ("0,55 0,23 * * *", None, NOW, "5 minutes"),
        ("55 23 * * 1", None, NOW, None),  # once a week: fine
        ("0,55 0,23 * * SUN,MON", None, NOW, "5 minutes"),  # Sunday 23:55, Monday 00:00
        ("0,55 0,23 * * MON,WED", None, NOW, None),  # no two adjacent days: 55 minutes
        ("0 0 L,1 * *", None, NOW, None),
        ("0 0,23 L * *", None, NOW, None),
        # Berlin springs forward on 2027-03-28: 02:05 fires at 03:00, then 03:05
        ("5 2,3 * * *", "Europe/Berlin", datetime(2026, 11, 1, tzinfo=UTC), "5 minutes"),
        ("0 2,3 * * *", "Europe/Berlin", datetime(2026, 11, 1, tzinfo=UTC), None),
        ("*/10 * * * *", "Europe/Berlin", NOW, None),
        ("*/30 * * * *", "Australia/Lord_Howe", NOW, None),
    ],
)
def test_recurring_gap_is_the_smallest_over_every_occurrence(
    cron: str, tz: str | None, now: datetime, closest: str | None
) -> None:
    request = WakeupRequest(session="s", prompt="p", cron=cron, tz=tz)
    if closest is None:
        assert plan_add([], request, now).cron == cron
    else:
        with pytest.raises(InvalidWakeup) as caught:
            plan_add([], request, now)
        assert str(caught.value) == (
            "too frequent — a recurring wake must fire at most every 10 minutes "
            f"(this cron fires {closest} apart at its closest)."
        )


def test_the_cap_message_lists_every_pending_wakeup() -> None:
    pending = [
        Wakeup(id=f"id{i}", session="s", prompt="x" * 70, fire_at=NOW + timedelta(hours=1))
        for i in range(20)
    ]
    with pytest.raises(InvalidWakeup) as caught:
        plan_add(
            pending, WakeupRequest(session="s", prompt="p", fire_at=NOW + timedelta(hours=2)), NOW
        )
    message = str(caught.value)
    assert message.startswith("too many pending wake-ups for this session (20)")
    assert "id0 at 2026-07-07T11:00:00.000Z: " + "x" * 60 + "…" in message
    assert message.count("; ") == 19


def test_deferral_ceiling() -> None:
    wakeup = Wakeup(id="a", session="s", prompt="p", fire_at=NOW, attempts=119)
    later = NOW + timedelta(seconds=30)
    deferred = plan_defer([], wakeup, later)
    assert deferred is not None
    assert (deferred.attempts, deferred.fire_at) == (120, later)
    assert plan_defer([], deferred, later) is None


def test_a_deferral_is_dropped_when_its_session_is_at_the_cap() -> None:
    wakeup = Wakeup(id="a", session="s", prompt="p", fire_at=NOW)
    later = NOW + timedelta(seconds=30)

    def pending(session: str, count: int) -> list[Wakeup]:
        return [
            Wakeup(id=f"{session}{i}", session=session, prompt="p", fire_at=later)
            for i in range(count)
        ]

    assert plan_defer(pending("s", 20), wakeup, later) is None
    assert defer_dropped(wakeup) == (
        "dropped: it could not wait, its session already has 20 pending wake-ups "
        "(the most it may have)"
    )
    for kept in (pending("s", 19), pending("t", 40)):
        deferred = plan_defer(kept, wakeup, later)
        assert deferred is not None
        assert deferred.attempts == 1
    assert defer_dropped(attrs.evolve(wakeup, attempts=120)) == (
        "dropped after too many retries (its session busy, or at its rate limit)"
    )


def test_texts() -> None:
    one = Wakeup(id="abc", session="s", prompt="look", fire_at=NOW)
    assert envelope(one) == (
        "[wake-up abc fired — YOUR self-scheduled turn, not a user message] look"
    )
    assert stored_reply(one) == (
        'OK — wake-up abc at 2026-07-07T10:00:00.000Z for session "s"; cancel with '
        "DELETE /wakeups/abc?session=s"
    )
    rec = Wakeup(id="abc", session="s", prompt="look", fire_at=NOW, cron="0 9 * * *")
    assert envelope(rec) == (
        '[wake-up abc fired — YOUR recurring self-scheduled turn (cron "0 9 * * *"), not a user '
        'message; unwake({ id: "abc" }) stops it] look'
    )
    assert removed_reply("abc", True) == "OK — wake-up abc cancelled."
    assert removed_reply("abc", False) == (
        "no pending wake-up abc for this session (already fired, cancelled, or another session's)"
    )
    assert bad_delay_reply("120").startswith('couldn\'t parse "in" ("120")')


def test_stored_shape_is_strict() -> None:
    wakeup = Wakeup(id="a", session="s", prompt="p", fire_at=NOW, cron="0 9 * * *", tz="UTC")
    raw = wakeup_to_json(wakeup)
    assert raw == {
        "id": "a",
        "session": "s",
        "prompt": "p",
        "fireAt": "2026-07-07T10:00:00.000Z",
        "cron": "0 9 * * *",
        "tz": "UTC",
    }
    assert wakeup_from_json(raw) == wakeup
    for bad in (
        {**raw, "id": 1},
        {**raw, "fireAt": "tomorrow"},
        {**raw, "attempts": "3"},
        {**raw, "fireAt": "2026-07-07T10:00:00"},
        [raw],
        {"id": "a"},
    ):
        with pytest.raises((ValueError, TypeError)):
            wakeup_from_json(bad)


def test_wakeup_validators() -> None:
    with pytest.raises(ValueError, match="id"):
        Wakeup(id="", session="s", prompt="p", fire_at=NOW)
    with pytest.raises(ValueError, match="attempts"):
        Wakeup(id="a", session="s", prompt="p", fire_at=NOW, attempts=-1)
    with pytest.raises(ValueError, match="naive"):
        Wakeup(id="a", session="s", prompt="p", fire_at=datetime(2026, 1, 1))
