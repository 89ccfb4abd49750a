"""How the command line shows values (``trio_routines.cli.table``), pinned at its edges: the
aligned columns, the short instants, the durations at each unit's change, the strip of outcomes
and its ASCII stand-in, the schedule's words."""

from __future__ import annotations

import io
import sys
from datetime import UTC, datetime, timedelta

import pytest

from trio_routines.cli import table as t
from trio_routines.cron import resolve_hashed
from trio_routines.records import Fire, Outcome, Wakeup
from trio_routines.routines import Routine

SLOT = datetime(2026, 11, 30, 9, tzinfo=UTC)


def fire(outcome: Outcome | None, error: str | None = None) -> Fire:
    return Fire(slot=SLOT, fired_at=SLOT, outcome=outcome, error=error)


def test_columns_align_on_the_widest_cell_and_the_last_is_left_ragged() -> None:
    lines = t.table(["A", "BB", "C"], [["xxx", "y", "a long last cell"], ["1", "2", ""]])
    assert lines == ["A    BB  C", "xxx  y   a long last cell", "1    2"]
    # Cells are shown as one visible line; the headers are the command's own.
    assert t.table(["K", "V"], [["a\x1b[2J", "b\nc"]]) == ["K         V", "a\\x1b[2J  b c"]
    assert t.table(["ONLY"], [["x"], ["y "]]) == ["ONLY", "x", "y"]
    # A name is shown so that no other name shows alike: its line break escaped, its spaces
    # kept, beside free text whose whitespace reads as one space.
    assert t.table(["N", "T"], [[t.Name("a\n  b\\"), "b\n  c"]]) == [
        "N           T",
        "a\\x0a  b\\\\  b c",
    ]


def test_a_short_instant_drops_only_the_zero_seconds_and_milliseconds() -> None:
    assert t.short_instant(SLOT) == "2026-11-30T09:00Z"
    assert t.short_instant(SLOT + timedelta(seconds=5)) == "2026-11-30T09:00:05Z"
    assert t.short_instant(SLOT + timedelta(milliseconds=250)) == "2026-11-30T09:00:00.250Z"
    assert t.short_instant(SLOT + timedelta(seconds=5, milliseconds=1)) == (
        "2026-11-30T09:00:05.001Z"
    )


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (None, "-"),
        (0, "0ms"),
        (0.4, "0ms"),
        (340, "340ms"),
        (999, "999ms"),
        (999.4, "999ms"),
        (999.6, "1.0s"),  # the unit is chosen by what is shown
        (9_949, "9.9s"),
        (9_960, "10s"),
        (59_400, "59s"),
        (59_600, "1m00s"),
        (-340, "-340ms"),
        (1000, "1.0s"),
        (1234, "1.2s"),
        (9900, "9.9s"),
        (10_000, "10s"),
        (42_400, "42s"),
        (60_000, "1m00s"),
        (245_000, "4m05s"),
        (3_599_000, "59m59s"),
        (3_600_000, "1h00m"),
        (7_380_000, "2h03m"),
        (86_399_000, "23h59m"),
        (86_400_000, "1d00h"),
        (90_000_000, "1d01h"),
        ((3 * 86400 + 4 * 3600 + 30 * 60) * 1000, "3d04h"),
        (-7_380_000, "-2h03m"),
    ],
)
def test_a_duration_changes_unit_at_each_boundary(ms: float | None, text: str) -> None:
    assert t.duration(ms) == text


def test_an_outcome_and_its_reason() -> None:
    assert t.outcome_word(fire(None)) == "unreported"
    assert t.outcome_word(fire(Outcome.COMPLETED)) == "completed"
    assert t.reason(fire(Outcome.FAILED, "exit status 2")) == "exit status 2"
    assert t.reason(fire(Outcome.SKIPPED)) == (
        "its session was busy: another turn of it was still running"
    )
    assert t.reason(fire(Outcome.SKIPPED, "over budget")) == "over budget"
    assert t.reason(fire(Outcome.FAILED)) == ""
    assert t.reason(fire(Outcome.COMPLETED)) == ""


class _Out:
    def __init__(self, encoding: str | None) -> None:
        self.encoding = encoding


def test_unicode_out_is_stdout_taking_utf8(monkeypatch: pytest.MonkeyPatch) -> None:
    for encoding, fancy in [
        ("UTF-8", True),
        ("utf8", True),
        ("utf-8-sig", True),
        ("ascii", False),
        ("latin-1", False),
        ("utf-16", False),
        (None, False),
    ]:
        monkeypatch.setattr(sys, "stdout", _Out(encoding))
        assert t.unicode_out() is fancy, encoding
    monkeypatch.setattr(sys, "stdout", object())
    assert t.unicode_out() is False


def test_the_strip_shows_the_last_outcomes_oldest_left(monkeypatch: pytest.MonkeyPatch) -> None:
    fires = [fire(Outcome.FAILED)] * 3 + [
        fire(Outcome.COMPLETED),
        fire(Outcome.SKIPPED),
        fire(Outcome.INTERRUPTED),
        fire(None),
    ] * 2
    assert t.strip(fires, fancy=True) == "✗✗" + "✓·⊘?" * 2  # the last 10 of 11
    assert t.strip(fires, fancy=False) == "xx" + "+.!?" * 2
    assert t.strip(fires, 3, fancy=False) == ".!?"
    assert t.strip([], fancy=True) == "-"
    assert t.strip([], fancy=False) == "-"
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BytesIO(), encoding="ascii"))
    assert t.strip(fires[-2:]) == "!?"
    assert t.legend() == "+ completed, x failed, . skipped, ! interrupted"
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BytesIO(), encoding="utf-8"))
    assert t.strip(fires[-2:]) == "⊘?"
    assert t.legend() == "✓ completed, ✗ failed, · skipped, ⊘ interrupted"
    assert t.legend(fancy=False) == "+ completed, x failed, . skipped, ! interrupted"
    assert t.legend(fancy=True) == "✓ completed, ✗ failed, · skipped, ⊘ interrupted"


def test_left_is_the_time_until_an_instant() -> None:
    assert t.left(None, SLOT) == "-"
    assert t.left(SLOT + timedelta(seconds=90), SLOT) == "1m30s"
    assert t.left(SLOT - timedelta(seconds=5), SLOT) == "-5.0s"
    assert t.left(SLOT + timedelta(milliseconds=999), SLOT) == "999ms"


def test_the_schedule_reads_as_its_kind_cron_zone_window_and_end() -> None:
    assert t.schedule(Routine(name="daily", prompt="p")) == "on demand"
    now = Wakeup(id="w1", session="s", prompt="p", fire_at=SLOT)
    assert t.schedule(now) == "one-shot"
    assert t.schedule(Routine(name="daily", prompt="p", cron="0 9 * * *")) == "cron 0 9 * * *"
    routine = Routine(name="daily", prompt="p", cron="0 9 * * *", tz="Europe/Berlin", catchup=7200)
    assert t.schedule(routine) == "cron 0 9 * * * Europe/Berlin, catchup 2h"
    assert t.schedule(Routine(name="d", prompt="p", cron="0 9 * * *", catchup=0)) == (
        "cron 0 9 * * *, catchup none"
    )
    hashed = Routine(name="daily", prompt="p", cron="H 9 * * *")
    assert t.schedule(hashed) == f"cron H 9 * * * (= {resolve_hashed('H 9 * * *', 'daily')})"
    assert t.shown_cron(hashed) == f"H 9 * * * (= {hashed.resolved_cron})"
    assert t.shown_cron(Routine(name="d", prompt="p", cron="0 9 * * *")) == "0 9 * * *"
    recurring = Wakeup(
        id="w2",
        session="s",
        prompt="p",
        fire_at=SLOT,
        cron="0 9 * * *",
        tz="UTC",
        until=SLOT + timedelta(days=30),
    )
    assert t.schedule(recurring) == "cron 0 9 * * * UTC, until 2026-12-30T09:00Z"
    endless = Wakeup(id="w3", session="s", prompt="p", fire_at=SLOT, cron="0 9 * * *")
    assert t.schedule(endless) == "cron 0 9 * * *"


def test_an_open_claim_a_live_replica_runs_is_running_and_any_other_unreported() -> None:
    running, crashed, settled = (
        Fire(SLOT + timedelta(hours=h), SLOT + timedelta(hours=h), outcome)
        for h, outcome in ((1, None), (2, None), (3, Outcome.COMPLETED))
    )
    live = {running.slot, settled.slot}  # a settled claim is its outcome whatever is held
    assert t.strip([running, crashed, settled], fancy=True, running=live) == "▸?✓"
    assert t.strip([running, crashed, settled], fancy=False, running=live) == ">?+"
    assert t.strip([running], fancy=False) == "?"  # nothing said to run
    assert [t.outcome_word(f, live) for f in (running, crashed, settled)] == [
        "running",
        "unreported",
        "completed",
    ]
    assert t.outcome_word(running) == "unreported"


def test_wide_and_combining_characters_keep_the_columns_in_line() -> None:
    # A routine named "café ☕" pushed every column after it one to the right.
    lines = t.aligned(
        [
            ["NAME", "NEXT", "LAST"],
            ["café ☕", "09:00", "ok"],
            ["每日简报", "10:00", "ok"],
            ["cafe\u0301", "11:00", "ok"],  # decomposed: four columns, as the one beside it
            ["daily", "12:00", "ok"],
        ]
    )
    assert lines == [
        "NAME      NEXT   LAST",
        "café ☕   09:00  ok",
        "每日简报  10:00  ok",
        "cafe\u0301      11:00  ok",
        "daily     12:00  ok",
    ]
    assert [t.columns(text) for text in ("", "abc", "☕", "每日", "e\u0301", "\u00e9")] == [
        0,
        3,
        2,
        4,
        1,
        1,
    ]
