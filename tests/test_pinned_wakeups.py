"""Wake-up rules pinned exactly: every model-facing text whole, every field of what is planned.

The guardrail texts are what the agent's ``wake`` tool answers, so a changed word is a changed
interface; these tests are also what mutation testing runs against ``wakeups``.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta

import attrs
import pytest

from trio_routines.errors import InvalidWakeup
from trio_routines.records import Origin, OriginKind, Wakeup
from trio_routines.text import cut
from trio_routines.wakelimits import (
    MAX_PENDING,
    MAX_PENDING_TEXT,
    WakeLimits,
    check_room,
    text_bytes,
)
from trio_routines.wakeups import (
    MAX_ATTEMPTS,
    MAX_PENDING_PER_SESSION,
    WakeupRequest,
    check_stored,
    defer_dropped,
    plan_add,
    plan_defer,
    remove,
    take_first_due,
)
from trio_routines.wakeuptexts import bad_delay_reply, envelope, stored_reply

NOW = datetime(2026, 7, 7, 10, 0, tzinfo=UTC)
LATER = NOW + timedelta(hours=1)


def refused(request: WakeupRequest, pending: list[Wakeup] | None = None) -> str:
    with pytest.raises(InvalidWakeup) as raised:
        plan_add(pending or [], request, NOW)
    return str(raised.value)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"session": "", "prompt": "p", "fire_at": LATER},
            "a wake-up needs a session to resume (none was given).",
        ),
        (
            {"session": "s", "prompt": "", "fire_at": LATER},
            "a wake-up needs a prompt: what should the woken turn do?",
        ),
        (
            {"session": " \t\n", "prompt": "p", "fire_at": LATER},
            "a wake-up needs a session to resume (none was given).",
        ),
        (
            {"session": "s", "prompt": "  \n ", "fire_at": LATER},
            "a wake-up needs a prompt: what should the woken turn do?",
        ),
        ({"session": "s", "prompt": "p"}, "a one-shot wake needs its fire time (`in`)."),
        (
            {"session": "s", "prompt": "p", "fire_at": NOW + timedelta(seconds=59)},
            "too soon — the minimum wake delay is 60s.",
        ),
        (
            {"session": "s", "prompt": "p", "cron": "0 0 30 2 *"},
            "this cron never fires (or fires only once) — use `in` for a one-shot.",
        ),
    ],
)
def test_each_refusal_says_exactly_why(fields: dict[str, object], message: str) -> None:
    assert refused(WakeupRequest(**fields)) == message  # type: ignore[arg-type]


def test_a_bad_zone_is_refused_for_a_recurring_wake_up() -> None:
    message = refused(WakeupRequest(session="s", prompt="p", cron="0 9 * * *", tz="Mars/Base"))
    assert message.startswith("invalid cron/tz: ")
    assert "Mars/Base" in message


def test_a_minute_ahead_is_enough() -> None:
    request = WakeupRequest(session="s", prompt="p", fire_at=NOW + timedelta(seconds=60))
    assert plan_add([], request, NOW).fire_at == NOW + timedelta(seconds=60)


def test_a_one_shot_with_a_zone_is_refused_not_half_taken() -> None:
    # Built by a store's own caller: its zone was dropped without a word.
    request = WakeupRequest(session="s", prompt="p", fire_at=LATER, tz="Europe/Berlin")
    with pytest.raises(InvalidWakeup) as refused:
        plan_add([], request, NOW)
    assert str(refused.value) == "tz goes with cron only."


def test_a_planned_one_shot() -> None:
    request = WakeupRequest(session="s", prompt="p", fire_at=LATER)
    wakeup = plan_add([], request, NOW)
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", wakeup.id)
    assert (wakeup.session, wakeup.prompt, wakeup.fire_at, wakeup.cron, wakeup.tz) == (
        "s",
        "p",
        LATER,
        None,
        None,  # a zone means nothing to a one-shot
    )
    assert plan_add([], request, NOW, new_id="given").id == "given"


def test_a_planned_recurring_wake_up_keeps_its_zone() -> None:
    request = WakeupRequest(session="s", prompt="p", cron="0 9 * * *", tz="Europe/Berlin")
    wakeup = plan_add([], request, NOW)
    assert (wakeup.fire_at, wakeup.cron, wakeup.tz) == (
        datetime(2026, 7, 8, 7, tzinfo=UTC),  # 09:00 in Berlin's summer
        "0 9 * * *",
        "Europe/Berlin",
    )


def test_the_cap_message_describes_each_pending_wake_up() -> None:
    pending = [
        Wakeup(id=f"w{i}", session="s", prompt="x" * 60, fire_at=LATER) for i in range(18)
    ] + [
        Wakeup(id="long", session="s", prompt="y" * 61, fire_at=LATER),
        Wakeup(id="rec", session="s", prompt="z", fire_at=LATER, cron="0 9 * * *"),
        Wakeup(id="other", session="t", prompt="o", fire_at=LATER),
    ]
    message = refused(WakeupRequest(session="s", prompt="p", fire_at=LATER), pending)
    head = (
        "too many pending wake-ups for this session (20) — wait for some to fire, or "
        "cancel one. Pending: "
    )
    assert message.startswith(head)
    described = message[len(head) :].split("; ")
    assert described[0] == f"w0 at 2026-07-07T11:00:00.000Z: {'x' * 60}"
    assert described[18] == f"long at 2026-07-07T11:00:00.000Z: {'y' * 60}…"
    assert described[19] == 'rec (recurring "0 9 * * *") at 2026-07-07T11:00:00.000Z: z'
    assert len(described) == 20  # the other session's wake-up is not listed
    # A long cron (stored by an earlier version, up to 64 KiB) is cut as a quoted value is.
    long = ",".join(["0"] * 30_000) + " 9 * * *"
    pending[19] = attrs.evolve(pending[19], cron=long)
    message = refused(WakeupRequest(session="s", prompt="p", fire_at=LATER), pending)
    described = message[len(head) :].split("; ")
    assert described[19] == (
        f'rec (recurring "{long[:40]}… (60007 characters)") at 2026-07-07T11:00:00.000Z: z'
    )


def test_the_cap_message_without_prompts_lists_the_same_wake_ups() -> None:
    pending = [
        Wakeup(id="one", session="s", prompt="secret one", fire_at=LATER),
        Wakeup(id="rec", session="s", prompt="secret two", fire_at=LATER, cron="0 9 * * *"),
    ] + [Wakeup(id=f"w{i}", session="s", prompt="secret", fire_at=LATER) for i in range(18)]
    with pytest.raises(InvalidWakeup) as raised:
        plan_add(pending, WakeupRequest(session="s", prompt="p", fire_at=LATER), NOW)
    head = (
        "too many pending wake-ups for this session (20) — wait for some to fire, or "
        "cancel one. Pending: "
    )
    public = raised.value.public
    assert public.startswith(head)
    described = public[len(head) :].split("; ")
    assert described[:2] == [
        "one at 2026-07-07T11:00:00.000Z",
        'rec (recurring "0 9 * * *") at 2026-07-07T11:00:00.000Z',
    ]
    assert len(described) == 20
    assert "secret" not in public
    assert "secret one" in str(raised.value)  # the model of the session reads its own


def test_a_refusal_that_quotes_no_prompt_is_its_own_public_text() -> None:
    with pytest.raises(InvalidWakeup) as raised:
        plan_add([], WakeupRequest(session="s", prompt="p", fire_at=NOW), NOW)
    assert raised.value.public == str(raised.value) == "too soon — the minimum wake delay is 60s."


def test_a_stored_entry_with_a_bad_zone_is_refused() -> None:
    stored = Wakeup(id="a", session="s", prompt="p", fire_at=NOW, cron="0 9 * * *", tz="Mars/B")
    with pytest.raises(ValueError, match=r"^invalid cron/tz: .*Mars/B"):
        check_stored(stored)
    fine = Wakeup(id="a", session="s", prompt="p", fire_at=NOW, cron="0 9 * * *", tz="UTC")
    assert check_stored(fine) is fine


def test_texts_of_a_recurring_wake_up_with_its_zone() -> None:
    wakeup = Wakeup(
        id="abc", session="s", prompt="look", fire_at=NOW, cron="0 9 * * *", tz="Europe/Berlin"
    )
    assert envelope(wakeup) == (
        '[wake-up abc fired — YOUR recurring self-scheduled turn (cron "0 9 * * *" '
        'Europe/Berlin), not a user message; unwake({ id: "abc" }) stops it] look'
    )
    # Added by an operator: said so to the agent, the surface named, no unwake of the agent's.
    for kind, by in ((OriginKind.CLI, "the command line"), (OriginKind.HTTP, "HTTP")):
        theirs = attrs.evolve(wakeup, origin=Origin(kind=kind))
        assert envelope(theirs) == (
            '[wake-up abc fired — a recurring turn (cron "0 9 * * *" Europe/Berlin) an operator '
            f"scheduled for you ({by}), not a user message] look"
        )
        once = attrs.evolve(theirs, cron=None, tz=None)
        assert envelope(once) == (
            f"[wake-up abc fired — a turn an operator scheduled for you ({by}), not a user "
            "message] look"
        )
    for origin in (
        Origin(kind=OriginKind.API),
        Origin(kind=OriginKind.ROUTINE, routine="daily", depth=1),
        Origin(kind=OriginKind.MODEL, depth=1),
    ):
        ours = attrs.evolve(wakeup, origin=origin, cron=None, tz=None)
        assert envelope(ours).startswith("[wake-up abc fired — YOUR self-scheduled turn")
    # For the operator who added it over HTTP: when, for whom, and the call that cancels it.
    ended = attrs.evolve(wakeup, session="chat/é 1", until=NOW + timedelta(days=3))
    assert stored_reply(ended) == (
        'OK — wake-up abc cron "0 9 * * *" Europe/Berlin, first at 2026-07-07T10:00:00.000Z, '
        'until 2026-07-10T10:00:00.000Z for session "chat/\\u00e9 1"; cancel with '
        "DELETE /wakeups/abc?session=chat%2F%C3%A9%201"
    )
    plain = attrs.evolve(wakeup, tz=None)  # no zone: none said
    assert stored_reply(plain) == (
        'OK — wake-up abc cron "0 9 * * *", first at 2026-07-07T10:00:00.000Z for session "s"; '
        "cancel with DELETE /wakeups/abc?session=s"
    )


def test_the_bad_delay_reply_whole() -> None:
    expected = (
        'couldn\'t parse "in" ({}) — use a unit like "30m" / "2h" / "1d", or a number of '
        'seconds (a bare number as text like "120" is rejected).'
    )
    assert bad_delay_reply("ñ120") == expected.format('"ñ120"')
    assert bad_delay_reply(b"x") == expected.format("\"b'x'\"")
    assert bad_delay_reply(10**400) == f'"in" ({cut("1" + "0" * 400)}) is too far in the future.'
    ahead = (
        '"in" ({}) is no delay ahead — a one-shot wakes at least 60s from now: give a positive '
        'number of seconds, or a unit like "30m" / "2h" / "1d".'
    )
    numbers = [(-100, "-100"), (0, "0"), (-0.5, "-0.5"), (float("nan"), "NaN")]
    numbers += [(float("-inf"), "-Infinity"), (-(10**400), "-1" + "0" * 400)]
    for number, given in numbers:
        assert bad_delay_reply(number) == ahead.format(cut(given)), number
    assert bad_delay_reply(True).startswith("couldn't parse")  # no number, whatever Python says
    assert bad_delay_reply(float("inf")) == '"in" (Infinity) is too far in the future.'


def test_the_first_due_entry_in_stored_order_is_taken() -> None:
    future = Wakeup(id="f", session="s", prompt="p", fire_at=LATER)
    due = Wakeup(id="d", session="s", prompt="p", fire_at=NOW)
    rest, taken = take_first_due([future, due], NOW)
    assert taken == due
    assert rest == [future]


def test_a_taken_recurring_entry_advances_in_its_zone_and_forgets_its_attempts() -> None:
    wakeup = Wakeup(
        id="r",
        session="s",
        prompt="p",
        fire_at=NOW,
        cron="0 9 * * *",
        tz="Europe/Berlin",
        attempts=3,
    )
    (advanced,), taken = take_first_due([wakeup], NOW)
    assert taken == wakeup
    assert advanced.fire_at == datetime(2026, 7, 8, 7, tzinfo=UTC)
    assert advanced.attempts is None


def test_an_id_or_session_no_store_can_hold_matches_nothing() -> None:
    # Such entries cannot come from a store; built in memory, they show the guard is first.
    odd_id = Wakeup(id="a\x00", session="s", prompt="p", fire_at=NOW)
    odd_session = Wakeup(id="b", session="s\x00", prompt="p", fire_at=NOW)
    pending = [odd_id, odd_session]
    assert remove(pending, "a\x00") == (pending, False)
    assert remove(pending, "b", "s\x00") == (pending, False)
    assert remove(pending, "b") == ([odd_id], True)


# -- H fields: a wake-up's session and id pick its instants ----------------------------------

HASHED = "H H * * *"  # for session "s" and id "w1": 02:54 every day


def test_a_hashed_recurring_wake_up_is_planned_from_its_session_and_id() -> None:
    request = WakeupRequest(session="s", prompt="p", cron=HASHED)
    wakeup = plan_add([], request, NOW, new_id="w1")
    assert wakeup.fire_at == datetime(2026, 7, 8, 2, 54, tzinfo=UTC)
    assert plan_add([], request, NOW, new_id="w2").fire_at != wakeup.fire_at


def test_a_stored_hashed_wake_up_is_valid_and_advances_on_its_own_instants() -> None:
    stored = Wakeup(id="w1", session="s", prompt="p", fire_at=NOW, cron=HASHED)
    assert check_stored(stored) is stored
    (advanced,), _ = take_first_due([stored], NOW)
    assert advanced.fire_at == datetime(2026, 7, 8, 2, 54, tzinfo=UTC)


def test_a_prompt_or_session_longer_than_an_http_body_takes_is_refused_from_every_caller() -> None:
    # The tool and the API took 50 MiB prompts, kept in the journal and in every index.
    request = WakeupRequest(session="s", prompt="p" * 65_536, fire_at=LATER)
    assert plan_add([], request, NOW).prompt == request.prompt
    too_long = WakeupRequest(session="s", prompt="p" * 65_537, fire_at=LATER)
    assert refused(too_long) == "the prompt is too long: at most 65,536 characters, not 65,537."
    assert plan_add([], WakeupRequest(session="s" * 512, prompt="p", fire_at=LATER), NOW)
    long_session = WakeupRequest(session="s" * 513, prompt="p", fire_at=LATER)
    assert refused(long_session) == "the session is too long: at most 512 characters, not 513."


def test_a_cron_or_time_zone_longer_than_any_real_one_is_refused_before_it_is_parsed() -> None:
    # A valid cron can be long (every minute listed: 170 characters), never a kilobyte: a list
    # of that length repeating one minute parses, and would be kept whole in every index and
    # listing, and take the store's room.
    every = ",".join(map(str, range(0, 60, 10))) + " " + ",".join(map(str, range(24)))
    every += " " + ",".join(map(str, range(1, 32))) + " " + ",".join(map(str, range(1, 13)))
    every += " MON,TUE,WED,THU,FRI,SAT,SUN"  # each field named one by one: 217 characters
    assert plan_add([], WakeupRequest(session="s", prompt="p", cron=every), NOW).cron == every
    cron = ",".join(["0"] * 508) + "  * * * *"  # (two spaces: 1,024 characters)
    assert plan_add([], WakeupRequest(session="s", prompt="p", cron=cron), NOW).cron == cron
    request = WakeupRequest(session="s", prompt="p", cron=cron + " ")
    assert refused(request) == "the cron is too long: at most 1,024 characters, not 1,025."
    zone = WakeupRequest(session="s", prompt="p", cron="0 * * * *", tz="Z" * 257)
    assert refused(zone) == "the tz is too long: at most 256 characters, not 257."
    # An entry stored before (by an earlier version, up to a prompt's length) is still read.
    long = ",".join(["0"] * 1000) + " * * * *"
    stored = Wakeup(id="w1", session="s", prompt="p", fire_at=NOW, cron=long, tz="UTC")
    assert check_stored(stored) is stored


@pytest.mark.parametrize(
    ("field", "most"),
    [("id", 128), ("session", 512), ("prompt", 65_536), ("cron", 65_536), ("tz", 65_536)],
)
def test_a_stored_entry_longer_than_any_add_makes_is_malformed(field: str, most: int) -> None:
    # Edited by hand: refused as a cron that no longer parses is (each store drops it, logged),
    # at one character past the bound; at the bound, kept.
    fields = {"id": "w1", "session": "s", "prompt": "p", "cron": None, "tz": None}
    at_bound = Wakeup(**{**fields, field: "x" * most}, fire_at=NOW)  # type: ignore[arg-type]
    over = Wakeup(**{**fields, field: "x" * (most + 1)}, fire_at=NOW)  # type: ignore[arg-type]
    if field == "cron":  # at the bound, a cron that parses is not this test's case
        with pytest.raises(ValueError, match=r"^invalid cron/tz: "):
            check_stored(at_bound)
    else:
        assert check_stored(at_bound) is at_bound
    with pytest.raises(ValueError, match=r"^the \w+ is too long: ") as raised:
        check_stored(over)
    assert str(raised.value) == (
        f"the {field} is too long: at most {most:,} characters, not {most + 1:,}."
    )


@pytest.mark.parametrize("field", ["id", "session", "prompt", "cron", "tz"])
@pytest.mark.parametrize("bad", [chr(0xD800), chr(0xDCFF), "\x00"], ids=["high", "low", "nul"])
def test_a_stored_entry_with_text_no_store_holds_is_malformed(field: str, bad: str) -> None:
    # A journal line's JSON can name a lone surrogate (or a NUL) that no add lets in: kept, it
    # would fail the line that removes it, at every take, and every wake-up behind it.
    fields = {"id": "w1", "session": "s", "prompt": "p", "cron": None, "tz": None}
    entry = Wakeup(**{**fields, field: f"a{bad}"}, fire_at=NOW)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^the \w+ is not storable text") as raised:
        check_stored(entry)
    assert str(raised.value) == f"the {field} is not storable text (a NUL, or not valid Unicode)"
    fine = Wakeup(**{**fields, field: "a\U0001f600"}, fire_at=NOW)  # type: ignore[arg-type]
    if field not in ("cron", "tz"):  # (an emoji is no cron nor zone)
        assert check_stored(fine) is fine


def test_a_busy_one_shot_is_dropped_past_its_last_retry_and_says_which_limit_dropped_it() -> None:
    # The 120th deferral is kept, the 121st is not: the log names the retries, not the cap.
    kept = Wakeup(id="w1", session="s", prompt="p", fire_at=NOW, attempts=MAX_ATTEMPTS - 1)
    deferred = plan_defer([], kept, LATER)
    assert deferred is not None
    assert deferred.attempts == MAX_ATTEMPTS
    assert plan_defer([], deferred, LATER) is None
    assert (
        defer_dropped(deferred)
        == "dropped after too many retries (its session busy, or at its rate limit)"
    )
    assert defer_dropped(kept) == (  # not its retries: its session's cap dropped it
        f"dropped: it could not wait, its session already has {MAX_PENDING_PER_SESSION} "
        "pending wake-ups (the most it may have)"
    )
    assert defer_dropped(attrs.evolve(kept, attempts=None)) == defer_dropped(kept)


def test_a_recurring_wake_up_whose_next_occurrence_passes_its_until_ends_with_a_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    until = NOW + timedelta(minutes=30)
    last = Wakeup(id="w1", session="s%d", prompt="p", fire_at=NOW, cron="0 * * * *", until=until)
    with caplog.at_level(logging.INFO, logger="trio_routines"):
        rest, taken = take_first_due([last], NOW)
    assert (rest, taken) == ([], last)
    assert [r.getMessage() for r in caplog.records] == [
        "wake-up w1 of session 's%d': its last occurrence before its until "
        "(2026-07-07T10:30:00.000Z) fires now; it is removed"
    ]


def test_an_add_deeper_than_the_chain_limit_is_refused() -> None:
    deep = Origin(kind=OriginKind.WAKEUP, depth=6, parent="w0")
    request = WakeupRequest(
        session="s", prompt="p", fire_at=LATER, origin=deep, limits=WakeLimits(depth=5)
    )
    assert refused(request).startswith(
        "chain-depth limit — this wake-up would be number 6 in a chain of wake-ups"
    )
    at_limit = attrs.evolve(request, origin=attrs.evolve(deep, depth=5))
    assert plan_add([], at_limit, NOW).origin == at_limit.origin


def test_the_stores_room_is_said_with_its_real_bounds() -> None:
    # Up to the bounds is room; past either, the refusal names it as it is.
    one = Wakeup(id="w", session="é", prompt=".", fire_at=LATER, cron="0 9 * * *", tz="UTC")
    assert text_bytes(one) == 2 + 1 + 9 + 3  # its text, in UTF-8; its id and its instant not
    assert text_bytes(attrs.evolve(one, cron=None, tz=None)) == 3
    check_room((MAX_PENDING - 1, 0), one)
    check_room((0, MAX_PENDING_TEXT - 15), one)  # exactly full
    with pytest.raises(InvalidWakeup) as info:
        check_room((0, MAX_PENDING_TEXT - 14), one)
    assert str(info.value) == (
        "the pending wake-ups' text fills the store's room (32 MiB in all: their sessions, "
        "prompts and schedules) — this wake-up of 15 bytes cannot be added until some fire or "
        "are cancelled."
    )
    with pytest.raises(InvalidWakeup) as info:
        check_room((MAX_PENDING, 0), one)
    assert str(info.value) == (
        "the store holds 100,000 pending wake-ups, the most it keeps — none can be added until "
        "some fire or are cancelled."
    )
