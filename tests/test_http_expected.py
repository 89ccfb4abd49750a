"""``trio_routines.http.expected``: the timelines' slots, remembered between renders, are
always those a fresh search finds, however the span and the clock move."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from trio_routines.cron import next_run
from trio_routines.cron.recent import newest_slots
from trio_routines.http.expected import COUNT, ExpectedSlots
from trio_routines.routines import Routine

NOW = datetime(2026, 11, 30, 12, 0, 30, tzinfo=UTC)
CRONS = ["* * * * *", "*/7 * * * *", "* 0-5 * * *", "0 9 * * 1-5", "0 0 30 2 *"]


@given(
    cron=st.sampled_from(CRONS),
    # Each render: how far now moves (seconds; back too) and the start (minutes before now).
    renders=st.lists(
        st.tuples(st.integers(min_value=-600, max_value=3 * 86400), st.integers(0, 2 * 24 * 60)),
        min_size=1,
        max_size=8,
    ),
)
def test_remembered_slots_are_what_a_fresh_search_finds(
    cron: str, renders: list[tuple[int, int]]
) -> None:
    routine = Routine(name="r", prompt="p", cron=cron)
    expected = ExpectedSlots()
    now = NOW
    for moved, back in renders:
        now += timedelta(seconds=moved)
        start = now - timedelta(minutes=back)
        fresh = newest_slots(lambda t: next_run(cron, None, t, "r"), start, now, COUNT)
        assert expected.slots(routine, start, now) == tuple(fresh)


def test_forgotten_routines_are_dropped_and_on_demand_ones_have_no_slots() -> None:
    calls = []

    def fire_after(routine: Routine, after: datetime) -> datetime | None:
        calls.append(routine.name)
        assert routine.cron is not None
        return next_run(routine.cron, routine.tz, after, routine.name)

    expected = ExpectedSlots(fire_after)
    kept, gone = (Routine(name=n, prompt="p", cron="* * * * *") for n in ("kept", "gone"))
    assert expected.slots(Routine(name="adhoc", prompt="p"), NOW - timedelta(hours=1), NOW) == ()
    for routine in (kept, gone):
        expected.slots(routine, NOW - timedelta(hours=1), NOW)
    expected.keep_only([kept])
    calls.clear()
    expected.slots(kept, NOW - timedelta(hours=1), NOW)
    assert calls == []  # remembered
    expected.slots(gone, NOW - timedelta(hours=1), NOW)
    assert set(calls) == {"gone"}  # searched again
