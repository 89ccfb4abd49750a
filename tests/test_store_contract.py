"""The store contract (trio_routines.store), run over every store backend."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

from trio_routines import wakelimits
from trio_routines.errors import InvalidWakeup, UnsafeName
from trio_routines.gaps import KEEP_GAPS
from trio_routines.output import OUTPUT_MAX, stored_output
from trio_routines.records import ClaimStatus, Gap, GapReason, Origin, OriginKind, Outcome
from trio_routines.store import GapRecords, Store
from trio_routines.stores import DirectoryStore, open_store
from trio_routines.wakeups import MAX_PENDING_PER_SESSION, WakeupRequest

T0 = datetime(2026, 7, 7, 10, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


async def test_first_claim_is_taken_and_unsettled(store: Store) -> None:
    result = await store.claim("daily", T0, T0 + timedelta(seconds=3))
    assert result.status is ClaimStatus.TAKEN
    fire = await store.latest_fire("daily")
    assert fire is not None
    assert (fire.slot, fire.fired_at, fire.outcome, fire.ms) == (
        T0,
        T0 + timedelta(seconds=3),
        None,
        None,
    )
    assert await store.history("daily") == [fire]


async def test_same_slot_twice_is_a_duplicate(store: Store) -> None:
    first = await store.claim("daily", T0, T0)
    assert (first.status, first.newest) == (ClaimStatus.TAKEN, "2026-07-07T10-00-00-000Z")
    again = await store.claim("daily", T0, T0 + HOUR)
    assert (again.status, again.newest) == (ClaimStatus.DUPLICATE, "2026-07-07T10-00-00-000Z")
    (fire,) = await store.history("daily")
    assert fire.fired_at == T0  # the loser wrote nothing


async def test_older_slot_is_stale_and_writes_nothing(store: Store) -> None:
    await store.claim("daily", T0 + 2 * HOUR, T0)
    result = await store.claim("daily", T0 + HOUR, T0)
    assert result.status is ClaimStatus.STALE
    assert result.newest == "2026-07-07T12-00-00-000Z"
    assert [f.slot for f in await store.history("daily")] == [T0 + 2 * HOUR]


async def test_stale_wins_over_duplicate(store: Store) -> None:
    await store.claim("daily", T0, T0)
    await store.claim("daily", T0 + HOUR, T0)
    result = await store.claim("daily", T0, T0)
    assert result.status is ClaimStatus.STALE


async def test_later_slot_is_taken_after_an_earlier_one(store: Store) -> None:
    await store.claim("daily", T0, T0)
    result = await store.claim("daily", T0 + HOUR, T0 + HOUR)
    assert result.taken
    assert [f.slot for f in await store.history("daily")] == [T0, T0 + HOUR]


async def test_routines_do_not_share_claims(store: Store) -> None:
    await store.claim("a", T0 + HOUR, T0)
    assert (await store.claim("b", T0, T0)).taken
    assert await store.latest_fire("c") is None
    assert await store.history("c") == []


async def test_slots_are_kept_to_the_millisecond(store: Store) -> None:
    slot = T0 + timedelta(microseconds=123456)
    await store.claim("daily", slot, slot)
    (fire,) = await store.history("daily")
    assert fire.slot == T0 + timedelta(milliseconds=123)
    assert (await store.claim("daily", T0 + timedelta(microseconds=123999), T0)).status is (
        ClaimStatus.DUPLICATE
    )


async def test_settle_keeps_the_stamp(store: Store) -> None:
    await store.claim("daily", T0, T0 + timedelta(minutes=5))
    assert await store.settle("daily", T0, Outcome.COMPLETED, 4210) is True
    fire = await store.latest_fire("daily")
    assert fire is not None
    assert (fire.fired_at, fire.outcome, fire.ms) == (
        T0 + timedelta(minutes=5),
        Outcome.COMPLETED,
        4210,
    )


async def test_resettle_without_duration_drops_it(store: Store) -> None:
    await store.claim("daily", T0, T0)
    await store.settle("daily", T0, Outcome.COMPLETED, 123456789)
    await store.settle("daily", T0, Outcome.INTERRUPTED)
    fire = await store.latest_fire("daily")
    assert fire is not None
    assert (fire.outcome, fire.ms) == (Outcome.INTERRUPTED, None)


async def test_settle_stores_the_reason_as_one_visible_line(store: Store) -> None:
    await store.claim("daily", T0, T0)
    reason = "exit status 2:\nAPI key\x1b[31m expired"
    await store.settle("daily", T0, Outcome.FAILED, 12, error=reason)
    fire = await store.latest_fire("daily")
    assert fire is not None
    assert (fire.outcome, fire.ms, fire.error) == (
        Outcome.FAILED,
        12,
        "exit status 2: API key\\x1b[31m expired",
    )
    assert await store.history("daily") == [fire]


async def test_a_long_reason_is_cut_at_one_kib(store: Store) -> None:
    await store.claim("daily", T0, T0)
    await store.settle("daily", T0, Outcome.FAILED, 1, error="é" * 5000)
    fire = await store.latest_fire("daily")
    assert fire is not None
    assert fire.error is not None
    assert fire.error.endswith("…")
    assert fire.error.startswith("éé")
    assert 1000 < len(fire.error.encode()) <= 1024


async def test_a_settle_without_a_reason_leaves_none(store: Store) -> None:
    await store.claim("daily", T0, T0)
    await store.settle("daily", T0, Outcome.FAILED, 1, error="boom")
    await store.settle("daily", T0, Outcome.COMPLETED, 2)
    fire = await store.latest_fire("daily")
    assert fire is not None
    assert (fire.outcome, fire.error) == (Outcome.COMPLETED, None)
    await store.settle("daily", T0, Outcome.INTERRUPTED, error="late", if_unsettled=True)
    assert await store.latest_fire("daily") == fire  # settled already: nothing written


async def test_settle_keeps_the_output_given_and_history_reads_it_back(store: Store) -> None:
    await store.claim("daily", T0, T0)
    said = "Done.\n\x1b[31m<script>alert(1)</script>\r\n每日 ✓"
    await store.settle("daily", T0, Outcome.COMPLETED, 5, output=said)
    (fire,) = await store.history("daily")
    assert (fire.outcome, fire.ms, fire.error, fire.output) == (Outcome.COMPLETED, 5, None, said)


async def test_no_output_is_kept_unless_given(store: Store) -> None:
    await store.claim("daily", T0, T0)
    await store.settle("daily", T0, Outcome.FAILED, 5, error="boom")
    (fire,) = await store.history("daily")
    assert fire.output is None
    await store.claim("daily", T0 + HOUR, T0 + HOUR)
    await store.settle("daily", T0 + HOUR, Outcome.COMPLETED, 5, output="first")
    await store.settle("daily", T0 + HOUR, Outcome.COMPLETED, 6)  # a settle replaces it all
    assert [f.output for f in await store.history("daily")] == [None, None]


async def test_an_oversized_or_unstorable_output_is_cut_never_refused(store: Store) -> None:
    await store.claim("daily", T0, T0)
    said = "\x00\udcff" + "é" * 40_000 + "\x1b" * 20_000 + "the end"  # over 64 KiB
    assert await store.settle("daily", T0, Outcome.COMPLETED, 5, output=said)
    (fire,) = await store.history("daily")
    assert fire.output is not None
    assert fire.output == stored_output(said)
    assert fire.output.endswith("\x1b" * 20_000 + "the end")
    assert len(fire.output.encode()) <= OUTPUT_MAX
    assert "\x00" not in fire.output


async def test_if_unsettled_keeps_the_first_output(store: Store) -> None:
    await store.claim("daily", T0, T0)
    await store.settle("daily", T0, Outcome.INTERRUPTED, output="late", if_unsettled=True)
    await store.settle("daily", T0, Outcome.COMPLETED, 1, output="again", if_unsettled=True)
    (fire,) = await store.history("daily")
    assert (fire.outcome, fire.output) == (Outcome.INTERRUPTED, "late")


async def test_settle_of_a_missing_claim_creates_nothing(store: Store) -> None:
    assert await store.settle("daily", T0, Outcome.COMPLETED, 5) is True  # nothing to retry
    assert await store.history("daily") == []
    assert await store.latest_fire("daily") is None


@pytest.mark.parametrize("keep", [1, 3])
async def test_retention_keeps_the_newest(store_factory: Callable[..., Store], keep: int) -> None:
    store = store_factory(keep=keep)
    for hour in range(6):
        assert (await store.claim("daily", T0 + hour * HOUR, T0)).taken
    history = await store.history("daily")
    assert [f.slot for f in history] == [T0 + h * HOUR for h in range(6 - keep, 6)]
    # the stale gate still works for slots whose claims were pruned
    assert (await store.claim("daily", T0, T0)).status is ClaimStatus.STALE


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a\\b", "a\x00b", "a\udcffb"])
async def test_unsafe_names_are_refused_everywhere(store: Store, name: str) -> None:
    with pytest.raises(UnsafeName):
        await store.claim(name, T0, T0)
    with pytest.raises(UnsafeName):
        await store.latest_fire(name)
    with pytest.raises(UnsafeName):
        await store.history(name)
    with pytest.raises(UnsafeName):
        await store.settle(name, T0, Outcome.COMPLETED)


@pytest.mark.parametrize("name", ["每日简报", "my report", "...", "a.b", "-x"])
async def test_every_other_name_is_legal(store: Store, name: str) -> None:
    assert (await store.claim(name, T0, T0)).taken
    assert len(await store.history(name)) == 1


# -- wake-ups ---------------------------------------------------------------------------------


def one_shot(session: str = "s1", delay: timedelta = HOUR, prompt: str = "check") -> WakeupRequest:
    return WakeupRequest(session=session, prompt=prompt, fire_at=T0 + delay)


# Text some store cannot hold (PostgreSQL text has no NUL; a lone surrogate is what an
# undecodable byte of a command-line argument becomes) gets the same answer from every store.
IMPOSSIBLE = ["a\x00b", "a\udcffb"]


@pytest.mark.parametrize("text", IMPOSSIBLE)
async def test_an_impossible_id_or_session_is_not_found_and_removes_nothing(
    store: Store, text: str
) -> None:
    added = await store.add_wakeup(one_shot(), T0)
    assert not await store.remove_wakeup(text)
    assert not await store.remove_wakeup(text, "s1")
    assert not await store.remove_wakeup(added.id, text)
    assert await store.list_wakeups() == [added]


@pytest.mark.parametrize("field", ["session", "prompt", "tz"])
@pytest.mark.parametrize("text", IMPOSSIBLE)
async def test_impossible_wakeup_text_is_refused_and_stores_nothing(
    store: Store, field: str, text: str
) -> None:
    fields = {"session": "s1", "prompt": "p", "cron": "0 9 * * *", "tz": "UTC", field: text}
    with pytest.raises(InvalidWakeup, match=f"the {field} must be text without NUL"):
        await store.add_wakeup(WakeupRequest(**fields), T0)
    assert await store.list_wakeups() == []


async def test_added_wakeup_is_listed(store: Store) -> None:
    added = await store.add_wakeup(one_shot(), T0)
    assert added.fire_at == T0 + HOUR
    assert added.session == "s1"
    assert await store.list_wakeups() == [added]


ORIGINS = [
    Origin(kind=OriginKind.ROUTINE, routine="digest", slot=T0 - HOUR, depth=1),
    Origin(kind=OriginKind.ROUTINE, routine="café report", depth=1),  # an on-demand run
    Origin(kind=OriginKind.WAKEUP, parent="4f9c-parent", depth=7),
    Origin(kind=OriginKind.HTTP),
    Origin(kind=OriginKind.CLI),
    Origin(kind=OriginKind.API),
]


@pytest.mark.parametrize("origin", ORIGINS, ids=lambda o: f"{o.kind.value}-{o.depth}")
async def test_origin_is_stored_and_read_back(store: Store, origin: Origin) -> None:
    request = attrs.evolve(one_shot(), origin=origin)
    added = await store.add_wakeup(request, T0)
    assert added.origin == origin
    assert await store.list_wakeups() == [added]
    assert await store.take_due_wakeup(T0 + HOUR) == added


async def test_a_wakeup_without_origin_reads_as_unknown(store: Store) -> None:
    added = await store.add_wakeup(one_shot(), T0)
    assert added.origin is None
    (listed,) = await store.list_wakeups()
    assert listed.origin is None


async def test_origin_is_kept_across_occurrences_and_deferrals(store: Store) -> None:
    origin = Origin(kind=OriginKind.WAKEUP, parent="p", depth=2)
    recurring = WakeupRequest(session="s1", prompt="d", cron="0 9 * * *", origin=origin)
    added = await store.add_wakeup(recurring, T0)
    once = await store.add_wakeup(attrs.evolve(one_shot(), origin=Origin(kind="cli")), T0)
    later = datetime(2026, 7, 9, 12, 0, tzinfo=UTC)
    assert await store.take_due_wakeup(later) == added
    taken = await store.take_due_wakeup(later)
    assert taken == once
    assert await store.defer_wakeup(taken, later + HOUR)
    pending = {w.id: w.origin for w in await store.list_wakeups()}
    assert pending == {added.id: origin, once.id: Origin(kind=OriginKind.CLI)}
    advanced = await store.take_due_wakeup(datetime(2026, 7, 10, 12, 0, tzinfo=UTC))
    assert advanced is not None
    assert advanced.origin == origin


async def test_too_soon_is_refused_and_nothing_stored(store: Store) -> None:
    with pytest.raises(InvalidWakeup, match="too soon"):
        await store.add_wakeup(one_shot(delay=timedelta(seconds=59)), T0)
    assert await store.list_wakeups() == []
    await store.add_wakeup(one_shot(delay=timedelta(seconds=60)), T0)


async def test_twenty_first_pending_wakeup_of_a_session_is_refused(store: Store) -> None:
    ids = [(await store.add_wakeup(one_shot(), T0)).id for _ in range(20)]
    await store.add_wakeup(one_shot(session="other"), T0)
    with pytest.raises(InvalidWakeup, match=r"too many pending wake-ups") as caught:
        await store.add_wakeup(one_shot(), T0)
    assert all(i in str(caught.value) for i in ids)
    assert len(await store.list_wakeups()) == 21


async def test_take_takes_the_first_due_in_stored_order(store: Store) -> None:
    later = await store.add_wakeup(one_shot(delay=2 * HOUR), T0)
    sooner = await store.add_wakeup(one_shot(delay=HOUR), T0)
    future = await store.add_wakeup(one_shot(delay=5 * HOUR), T0)
    now = T0 + 3 * HOUR
    assert await store.take_due_wakeup(now) == later
    assert await store.take_due_wakeup(now) == sooner
    assert await store.take_due_wakeup(now) is None
    assert await store.list_wakeups() == [future]


async def test_recurring_is_derived_and_advanced_in_place(store: Store) -> None:
    request = WakeupRequest(session="s1", prompt="digest", cron="0 9 * * *", fire_at=T0)
    added = await store.add_wakeup(request, T0)
    assert added.fire_at == datetime(2026, 7, 8, 9, 0, tzinfo=UTC)  # caller fire_at ignored
    other = await store.add_wakeup(one_shot(delay=30 * HOUR), T0)
    now = datetime(2026, 7, 10, 12, 0, tzinfo=UTC)  # several occurrences missed
    taken = await store.take_due_wakeup(now)
    assert taken == added  # as it was, with the occurrence that came due
    pending = await store.list_wakeups()
    assert [w.id for w in pending] == [added.id, other.id]
    assert pending[0].fire_at == datetime(2026, 7, 11, 9, 0, tzinfo=UTC)
    assert await store.remove_wakeup(added.id, "s1")


@pytest.mark.parametrize(
    ("cron", "message"),
    [("* * * * *", "too frequent"), ("nope", "invalid cron"), ("0 0 30 2 *", "never fires")],
)
async def test_recurring_guardrails(store: Store, cron: str, message: str) -> None:
    with pytest.raises(InvalidWakeup, match=message):
        await store.add_wakeup(WakeupRequest(session="s", prompt="p", cron=cron), T0)
    assert await store.list_wakeups() == []


async def test_defer_counts_attempts_up_to_the_ceiling(store: Store) -> None:
    added = await store.add_wakeup(one_shot(), T0)
    taken = await store.take_due_wakeup(T0 + HOUR)
    assert taken == added
    assert await store.defer_wakeup(taken, T0 + 2 * HOUR)
    (deferred,) = await store.list_wakeups()
    assert (deferred.id, deferred.attempts, deferred.fire_at) == (added.id, 1, T0 + 2 * HOUR)
    taken = await store.take_due_wakeup(T0 + 3 * HOUR)
    assert taken is not None
    import attrs

    assert not await store.defer_wakeup(attrs.evolve(taken, attempts=120), T0 + 4 * HOUR)
    assert await store.list_wakeups() == []


async def test_a_deferral_never_takes_a_session_past_its_cap(store: Store) -> None:
    first = await store.add_wakeup(one_shot(), T0)
    for _ in range(MAX_PENDING_PER_SESSION - 1):
        await store.add_wakeup(one_shot(delay=2 * HOUR), T0)
    other = await store.add_wakeup(one_shot(session="s2"), T0)
    taken = await store.take_due_wakeup(T0 + HOUR)
    assert taken == first
    # While its turn ran (busy), the session filled the place it left.
    await store.add_wakeup(one_shot(delay=3 * HOUR), T0)
    assert not await store.defer_wakeup(taken, T0 + 2 * HOUR)
    pending = await store.list_wakeups()
    assert sum(w.session == "s1" for w in pending) == MAX_PENDING_PER_SESSION
    assert first.id not in {w.id for w in pending}
    # Below the cap, and for another session, a deferral re-queues as before.
    assert await store.remove_wakeup(pending[0].id, "s1")
    assert await store.defer_wakeup(taken, T0 + 2 * HOUR)
    taken = await store.take_due_wakeup(T0 + HOUR)
    assert taken == other
    assert await store.defer_wakeup(taken, T0 + 2 * HOUR)
    pending = await store.list_wakeups()
    assert sum(w.session == "s1" for w in pending) == MAX_PENDING_PER_SESSION
    assert [(w.id, w.attempts) for w in pending[-2:]] == [(first.id, 1), (other.id, 1)]


async def test_the_store_keeps_at_most_its_room_of_pending_wake_ups(
    store_factory: Callable[..., Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every session's count, and their text's bytes in all (sessions, prompts, crons, zones),
    # whoever asks; a take, a cancel, a recurring one's next occurrence and a second replica
    # each keep the count.
    monkeypatch.setattr(wakelimits, "MAX_PENDING", 4)
    monkeypatch.setattr(wakelimits, "MAX_PENDING_TEXT", 40)
    one, two = store_factory(), store_factory()
    first = await one.add_wakeup(one_shot(session="a", prompt="x" * 5), T0)  # 1 + 5
    recurring = await two.add_wakeup(  # 1 + 5 + 10 + 3
        WakeupRequest(session="b", prompt="y" * 5, cron="0 12 * * *", tz="UTC"), T0
    )
    await one.add_wakeup(one_shot(session="é", prompt="z" * 5, delay=3 * HOUR), T0)  # 2 + 5
    with pytest.raises(InvalidWakeup) as info:  # 32 + 1 + 10 bytes (of 5 characters)
        await two.add_wakeup(one_shot(session="d", prompt="é" * 5), T0)
    assert str(info.value) == (
        "the pending wake-ups' text fills the store's room (0 MiB in all: their sessions, "
        "prompts and schedules) — this wake-up of 11 bytes cannot be added until some fire or "
        "are cancelled."
    )
    fourth = await two.add_wakeup(one_shot(session="d", prompt="w" * 7), T0)  # 40: room
    with pytest.raises(InvalidWakeup) as info:
        await one.add_wakeup(one_shot(session="e", prompt="v"), T0)
    assert str(info.value) == (
        "the store holds 4 pending wake-ups, the most it keeps — none can be added until some "
        "fire or are cancelled."
    )
    assert len(await one.list_wakeups()) == 4
    # The recurring one taken comes back as its next occurrence: still four.
    assert await one.take_due_wakeup(T0 + 2 * HOUR + timedelta(minutes=1)) == first
    assert await one.remove_wakeup(fourth.id, "d")
    assert (await two.take_due_wakeup(T0 + 3 * HOUR)).id == recurring.id  # type: ignore[union-attr]
    assert len(await two.list_wakeups()) == 2
    with pytest.raises(InvalidWakeup, match="fills the store's room"):  # 19 + 7 + 15 bytes
        await two.add_wakeup(one_shot(session="e", prompt="v" * 14), T0)  # (not characters)
    await two.add_wakeup(one_shot(session="e", prompt="v" * 13), T0)  # 40: full
    with pytest.raises(InvalidWakeup, match="fills the store's room"):
        await one.add_wakeup(one_shot(session="f", prompt="u"), T0)
    # A store opened anew counts what it finds.
    again = store_factory()
    with pytest.raises(InvalidWakeup, match="fills the store's room"):
        await again.add_wakeup(one_shot(session="f", prompt="u"), T0)
    assert len(await again.list_wakeups()) == 3


async def test_replicas_share_the_wakeups_their_order_and_each_take(
    store_factory: Callable[..., Store],
) -> None:
    # Two store objects on one state: two replicas, each with what it read so far.
    one, two = store_factory(), store_factory()
    first = await one.add_wakeup(one_shot(delay=2 * HOUR), T0)
    recurring = await two.add_wakeup(WakeupRequest(session="s2", prompt="d", cron="0 12 * * *"), T0)
    third = await one.add_wakeup(one_shot(delay=HOUR, session="s3"), T0)
    assert [w.id for w in await two.list_wakeups()] == [first.id, recurring.id, third.id]
    now = T0 + 3 * HOUR
    assert await two.take_due_wakeup(now) == first  # first due in stored order
    taken = await one.take_due_wakeup(now)  # not first again: two took it
    assert taken is not None
    assert taken.id == recurring.id
    assert await two.take_due_wakeup(now) == third
    assert await one.take_due_wakeup(now) is None
    # The recurring one was advanced in place; a deferral re-queues at the end.
    assert await two.defer_wakeup(first, now + HOUR)
    pending = await one.list_wakeups()
    assert [(w.id, w.attempts) for w in pending] == [(recurring.id, None), (first.id, 1)]
    assert await one.remove_wakeup(first.id, "s1")
    assert not await two.remove_wakeup(first.id, "s1")  # gone for every replica
    assert [w.id for w in await two.list_wakeups()] == [recurring.id]


async def test_remove_is_scoped_to_the_session(store: Store) -> None:
    added = await store.add_wakeup(one_shot(), T0)
    assert not await store.remove_wakeup(added.id, "someone-else")
    assert await store.remove_wakeup(added.id, "s1")
    assert not await store.remove_wakeup(added.id, "s1")
    again = await store.add_wakeup(one_shot(), T0)
    assert await store.remove_wakeup(again.id)  # no session: the operator's unscoped removal
    assert await store.list_wakeups() == []


async def test_a_plain_settle_writes_over_the_outcome_before_it(store: Store) -> None:
    await store.claim("daily", T0, T0)
    await store.settle("daily", T0, Outcome.INTERRUPTED, error="stopped")
    assert await store.settle("daily", T0, Outcome.COMPLETED, 12)
    (fire,) = await store.history("daily")
    assert (fire.outcome, fire.ms, fire.error) == (Outcome.COMPLETED, 12, None)


async def test_settle_if_unsettled_never_overwrites_an_outcome(store: Store) -> None:
    await store.claim("daily", T0, T0)
    await store.claim("daily", T0 + HOUR, T0)
    await store.settle("daily", T0 + HOUR, Outcome.COMPLETED, 12)
    assert await store.settle("daily", T0 + HOUR, Outcome.INTERRUPTED, if_unsettled=True)
    assert await store.settle("daily", T0, Outcome.INTERRUPTED, if_unsettled=True)
    fires = await store.history("daily")
    assert [(f.outcome, f.ms) for f in fires] == [
        (Outcome.INTERRUPTED, None),
        (Outcome.COMPLETED, 12),
    ]


async def test_every_store_is_an_async_context_manager_that_closes(
    store_factory: Callable[..., Store],
) -> None:
    built = store_factory()
    closed: list[bool] = []
    real_aclose = built.aclose

    async def recording_aclose() -> None:
        closed.append(True)
        await real_aclose()

    built.aclose = recording_aclose  # type: ignore[method-assign]

    async def use() -> None:
        async with built as entered:
            assert entered is built
            assert (await entered.claim("daily", T0, T0)).status is ClaimStatus.TAKEN
            assert closed == []
            raise KeyError("the host failed")

    with pytest.raises(KeyError):  # leaving by an error closes too
        await use()
    assert closed == [True]


async def test_open_store_is_usable_with_async_with(tmp_path: Path) -> None:
    async with open_store(tmp_path / "state") as store:
        assert isinstance(store, DirectoryStore)
        assert (await store.claim("daily", T0, T0)).status is ClaimStatus.TAKEN
    async with open_store(tmp_path / "state") as again:
        assert [f.slot for f in await again.history("daily")] == [T0]


# -- pause ---------------------------------------------------------------------------------------


async def test_pause_and_resume_are_idempotent_and_seen_by_a_second_handle(
    store: Store, store_factory: Callable[..., Store]
) -> None:
    assert await store.paused() == frozenset()
    await store.set_paused("daily", True)
    await store.set_paused("daily", True)
    await store.set_paused("每日 report", True)
    assert await store.paused() == {"daily", "每日 report"}
    other = store_factory()  # another scheduler on the same store
    try:
        assert await other.paused() == {"daily", "每日 report"}
        await other.set_paused("daily", False)
        await other.set_paused("daily", False)
        await other.set_paused("never-paused", False)
    finally:
        await other.aclose()
    assert await store.paused() == {"每日 report"}


async def test_pause_refuses_an_unsafe_name(store: Store) -> None:
    with pytest.raises(UnsafeName):
        await store.set_paused("../x", True)
    assert await store.paused() == frozenset()


async def test_a_paused_routine_keeps_its_claims(store: Store) -> None:
    await store.claim("daily", T0, T0)
    await store.set_paused("daily", True)
    assert (await store.claim("daily", T0 + HOUR, T0)).status is ClaimStatus.TAKEN  # the
    # store keeps no policy: the scheduler checks paused() before it claims
    await store.set_paused("daily", False)
    assert len(await store.history("daily")) == 2


async def test_a_resume_keeps_its_instant_for_the_next_boot(store: Store) -> None:
    assert await store.resumed_at("daily") is None
    await store.set_paused("daily", True, T0)
    assert await store.resumed_at("daily") is None
    await store.set_paused("daily", False, T0 + timedelta(milliseconds=1500, microseconds=7))
    assert await store.resumed_at("daily") == T0 + timedelta(milliseconds=1500)
    assert await store.paused() == frozenset()  # kept, and resumed
    await store.set_paused("daily", True, T0 + HOUR)
    await store.set_paused("daily", False, T0 + 2 * HOUR)
    await store.set_paused("daily", False)  # no instant given: the last one stays
    assert await store.resumed_at("daily") == T0 + 2 * HOUR
    assert await store.paused() == frozenset()
    assert await store.resumed_at("other") is None


async def test_a_pause_keeps_when_it_began_until_its_resume(store: Store) -> None:
    # For the next boot: the slots before it were missed, not paused.
    assert await store.paused_since("daily") is None  # type: ignore[attr-defined]
    await store.set_paused("daily", True, T0 + timedelta(milliseconds=1500, microseconds=7))
    await store.set_paused("daily", True, T0 + HOUR)  # paused already: its first instant stays
    assert await store.paused_since("daily") == T0 + timedelta(milliseconds=1500)  # type: ignore[attr-defined]
    await store.set_paused("daily", False, T0 + 2 * HOUR)
    assert await store.paused_since("daily") is None  # type: ignore[attr-defined]
    await store.set_paused("daily", True, T0 + 3 * HOUR)  # a new pause: its own instant
    assert await store.paused_since("daily") == T0 + 3 * HOUR  # type: ignore[attr-defined]
    assert await store.paused_since("other") is None  # type: ignore[attr-defined]


async def test_a_resume_keeps_when_the_pause_it_ended_began(store: Store) -> None:
    # For a boot after a pause and its resume while no scheduler ran: the slots before that
    # pause were missed, not paused.
    kept: Any = store
    assert await kept.resumed_pause_since("daily") is None
    await store.set_paused("daily", True, T0 + timedelta(milliseconds=1500, microseconds=7))
    assert await kept.resumed_pause_since("daily") is None  # paused, not yet resumed
    await store.set_paused("daily", False, T0 + HOUR)
    assert await kept.resumed_pause_since("daily") == T0 + timedelta(milliseconds=1500)
    await store.set_paused("daily", False, T0 + 2 * HOUR)  # not paused: nothing changes
    await store.set_paused("daily", True, T0 + 3 * HOUR)
    assert await kept.resumed_pause_since("daily") == T0 + timedelta(milliseconds=1500)
    await store.set_paused("daily", False)  # no instant given: neither is kept
    assert await kept.resumed_pause_since("daily") == T0 + timedelta(milliseconds=1500)
    assert await store.resumed_at("daily") == T0 + HOUR
    await store.set_paused("daily", True, T0 + 4 * HOUR)
    await store.set_paused("daily", False, T0 + 5 * HOUR)  # the latest resume's pause
    assert await kept.resumed_pause_since("daily") == T0 + 4 * HOUR
    # Paused with no instant: the resume keeps what the pause kept (PostgreSQL: the server's
    # instant; elsewhere none), not an earlier pause's.
    for name in ("daily", "other"):
        await store.set_paused(name, True)
        began = await kept.paused_since(name)
        await store.set_paused(name, False, T0 + 6 * HOUR)
        assert await kept.resumed_pause_since(name) == began
    assert began is None or began > T0 + 6 * HOUR  # (the server's clock is ahead of T0)
    assert await kept.resumed_pause_since("never") is None
    with pytest.raises(UnsafeName):
        await kept.resumed_pause_since("../x")


async def test_a_resume_of_a_routine_that_is_not_paused_keeps_no_instant(store: Store) -> None:
    # Its instant would hold back, on a replica late to them, slots that no pause held.
    await store.set_paused("daily", False, T0)
    assert await store.resumed_at("daily") is None
    await store.set_paused("daily", True)
    await store.set_paused("daily", False, T0 + HOUR)
    await store.set_paused("daily", False, T0 + 2 * HOUR)  # resumed already: nothing
    assert await store.resumed_at("daily") == T0 + HOUR
    assert await store.paused() == frozenset()


async def test_the_paused_read_brings_the_resumes_made_since_the_instant_asked(
    store: Store,
) -> None:
    # A replica that reads less than a second after a slot learns of a pause resumed since
    # the slot, which held it on the replicas that read in time: one read, both answers.
    kept: Any = store
    assert await kept.paused_with_resumes(T0) == (frozenset(), {})
    for name, resumed in (
        ("early", T0 - timedelta(milliseconds=1)),
        ("at", T0),
        ("late", T0 + HOUR),
    ):
        await store.set_paused(name, True, T0 - HOUR)
        await store.set_paused(name, False, resumed + timedelta(microseconds=7))
    await store.set_paused("still", True, T0)
    await store.set_paused("never-paused", False, T0 + HOUR)  # not paused: no resume kept
    names, resumed = await kept.paused_with_resumes(T0)
    assert names == frozenset({"still"})
    began = T0 - HOUR  # when the pause each resume ended began
    assert resumed == {"at": (T0, began), "late": (T0 + HOUR, began)}
    assert await kept.paused_with_resumes(T0 + HOUR + timedelta(milliseconds=1)) == (
        frozenset({"still"}),
        {},
    )
    await store.set_paused("at", True, T0 + 2 * HOUR)  # paused again: its resume stays kept
    names, resumed = await kept.paused_with_resumes(T0 + HOUR)
    assert (names, resumed) == (frozenset({"still", "at"}), {"late": (T0 + HOUR, began)})
    await store.set_paused("unknown", True)  # its pause's start not kept: None
    await store.set_paused("unknown", False, T0 + 2 * HOUR)
    assert (await kept.paused_with_resumes(T0 + 2 * HOUR))[1]["unknown"][0] == T0 + 2 * HOUR


# --- gaps (the optional GapRecords part: every store of ours keeps them) -------------------

MINUTE = timedelta(minutes=1)


def _gap(first: int, last: int, reason: str = "down") -> Gap:
    return Gap(T0 + first * MINUTE, T0 + last * MINUTE, last - first + 1, GapReason(reason))


async def test_gaps_are_recorded_and_read_back_oldest_first(store: Store) -> None:
    assert isinstance(store, GapRecords)
    assert await store.gaps("r") == []
    assert await store.record_gap("r", _gap(1, 3, "caught-up"))
    assert await store.record_gap("r", _gap(5, 5, "overlap"))
    assert await store.gaps("r") == [_gap(1, 3, "caught-up"), _gap(5, 5, "overlap")]
    assert await store.gaps("other") == []
    estimated = Gap(T0 + 10 * MINUTE, T0 + 9000 * MINUTE, 8991, GapReason.LATE, estimated=True)
    assert await store.record_gap("r", estimated)
    assert (await store.gaps("r"))[-1] == estimated


async def test_a_gap_already_accounted_for_writes_nothing(store: Store) -> None:
    assert isinstance(store, GapRecords)
    await store.record_gap("r", _gap(1, 3))
    assert not await store.record_gap("r", _gap(2, 3))  # another replica recorded it
    assert not await store.record_gap("r", _gap(0, 0, "paused"))
    assert await store.gaps("r") == [_gap(1, 3)]


async def test_a_longer_count_of_the_newest_gap_replaces_it(store: Store) -> None:
    # Two replicas counted one run of missed slots, the second from a view read before the
    # first had written its count: each slot is in one record.
    assert isinstance(store, GapRecords)
    await store.record_gap("r", _gap(1, 3, "caught-up"))
    assert await store.record_gap("r", _gap(1, 5, "caught-up"))
    assert await store.gaps("r") == [_gap(1, 5, "caught-up")]


async def test_a_gap_extends_the_newest_one_of_its_reason_that_ends_where_it_says(
    store: Store,
) -> None:
    assert isinstance(store, GapRecords)
    await store.record_gap("r", _gap(1, 1, "paused"))
    assert await store.record_gap("r", _gap(2, 2, "paused"), extends=T0 + MINUTE)
    assert await store.record_gap("r", _gap(3, 4, "paused"), extends=T0 + 2 * MINUTE)
    assert await store.gaps("r") == [_gap(1, 4, "paused")]
    # Another reason, or an end elsewhere: a gap of its own.
    assert await store.record_gap("r", _gap(5, 5, "overlap"), extends=T0 + 4 * MINUTE)
    assert await store.record_gap("r", _gap(7, 7, "overlap"), extends=T0 + 6 * MINUTE)
    assert await store.gaps("r") == [
        _gap(1, 4, "paused"),
        _gap(5, 5, "overlap"),
        _gap(7, 7, "overlap"),
    ]


async def test_gaps_never_decide_a_claim(store: Store) -> None:
    assert isinstance(store, GapRecords)
    await store.claim("r", T0, T0)
    await store.record_gap("r", _gap(1, 100, "paused"))
    # A slot inside a gap, or before its end, is no stale claim: only claims decide.
    assert (await store.claim("r", T0 + 50 * MINUTE, T0)).status is ClaimStatus.TAKEN
    assert (await store.claim("r", T0 + 50 * MINUTE, T0)).status is ClaimStatus.DUPLICATE
    assert (await store.claim("r", T0 + 10 * MINUTE, T0)).status is ClaimStatus.STALE
    assert [f.slot for f in await store.history("r")] == [T0, T0 + 50 * MINUTE]


async def test_the_oldest_gaps_are_dropped_beyond_the_retention(store: Store) -> None:
    assert isinstance(store, GapRecords)
    for n in range(KEEP_GAPS + 3):
        await store.record_gap("r", _gap(2 * n, 2 * n))
    kept = await store.gaps("r")
    assert len(kept) == KEEP_GAPS
    assert kept[0] == _gap(6, 6)
    assert kept[-1] == _gap(2 * (KEEP_GAPS + 2), 2 * (KEEP_GAPS + 2))


async def test_gaps_of_an_unsafe_name_are_refused(store: Store) -> None:
    assert isinstance(store, GapRecords)
    with pytest.raises(UnsafeName):
        await store.record_gap("../x", _gap(1, 1))
    with pytest.raises(UnsafeName):
        await store.gaps("a/b")
