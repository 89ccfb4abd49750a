"""The pure claim rules, and the tolerant claim parser (reference section 11, items 9-12)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_routines.claims import (
    arm_from,
    claim_gate,
    claim_names,
    claimed_through,
    is_stale,
    names_to_prune,
    newest_first,
    parse_claim,
    read_claim,
)
from trio_routines.converter import claim_text, dumps
from trio_routines.instants import format_iso, slot_name
from trio_routines.records import Fire, Outcome
from trio_routines.replicas import stored_replica

NAME = "2026-07-07T10-00-00-000Z"
SLOT = datetime(2026, 7, 7, 10, tzinfo=UTC)
STAMP = datetime(2026, 7, 7, 12, 30, tzinfo=UTC)


def test_stale_is_strictly_older_than_the_newest() -> None:
    newest = claim_names(["2026-07-07T09-00-00-000Z", NAME])[-1]
    assert is_stale(newest, "2026-07-07T08-00-00-000Z") == NAME
    assert is_stale(newest, "2026-07-07T09-00-00-000Z") == NAME  # stale wins over duplicate
    assert is_stale(newest, NAME) is None  # equal is a duplicate, decided by the create
    assert is_stale(None, NAME) is None


def test_pruning_keeps_the_newest() -> None:
    taken = [f"2026-07-07T0{h}-00-00-000Z" for h in range(5)]
    assert names_to_prune(taken, keep=3) == taken[:3]  # 5 + the new one, keep 3
    assert names_to_prune(taken, keep=1) == taken
    assert names_to_prune(taken, keep=512) == []
    with pytest.raises(ValueError, match="keep"):
        names_to_prune(taken, keep=0)


def test_claim_names_drop_foreign_entries_and_sort() -> None:
    entries = [NAME, ".DS_Store", "2026-07-07T09-00-00-000Z", NAME + ".tmp"]
    assert claim_names(entries) == ["2026-07-07T09-00-00-000Z", NAME]


# Claim names of a few days, and things that are no claim: foreign files, a temp file beside a
# claim, a name of the claim shape that is no instant (month 13), one that sorts after all.
_CLAIMS = st.builds(
    lambda day, minute: f"2026-07-{day:02d}T{minute // 60:02d}-{minute % 60:02d}-00-000Z",
    st.integers(1, 3),
    st.integers(0, 1439),
)
_FOREIGN = st.sampled_from(
    [".DS_Store", NAME + ".tmp", "2026-13-01T00-00-00-000Z", "zz", "", "2026-07-07"]
)


@given(
    entries=st.lists(st.one_of(_CLAIMS, _CLAIMS, _CLAIMS, _FOREIGN), unique=True, max_size=40),
    keep=st.integers(1, 45),
)
def test_the_claim_gate_is_the_rules_over_the_listing(entries: list[str], keep: int) -> None:
    # The gate a claim reads from its routine's directory, in whatever order it is listed:
    # the newest claim and what to prune, exactly as the rules give them over claim_names,
    # and every other name, as listed.
    taken = claim_names(entries)
    gate = (taken[-1] if taken else None, names_to_prune(taken, keep))
    foreign = [entry for entry in entries if entry not in taken]
    assert claim_gate(entries, keep) == (*gate, foreign)
    assert claim_gate(list(reversed(entries)), keep) == (*gate, foreign[::-1])


def test_the_claim_gate_in_the_steady_state() -> None:
    names = [f"2026-07-07T{h:02d}-00-00-000Z" for h in range(6)]
    listed = [names[3], names[0], names[5], names[1], names[4], names[2]]
    assert claim_gate(listed, keep=6) == (names[5], [names[0]], [])  # the oldest goes
    assert claim_gate(listed, keep=4) == (names[5], names[:3], [])
    assert claim_gate(listed, keep=7) == (names[5], [], [])
    # the newest too: the caller keeps it
    assert claim_gate(listed, keep=1) == (names[5], names, [])
    assert claim_gate([], keep=1) == (None, [], [])
    assert claim_gate([".DS_Store"], keep=1) == (None, [], [".DS_Store"])
    assert claim_gate([*listed, ".DS_Store"], keep=6) == (names[5], [names[0]], [".DS_Store"])
    with pytest.raises(ValueError, match="keep must be at least 1"):
        claim_gate(listed, keep=0)
    with pytest.raises(ValueError, match="keep must be at least 1"):
        claim_gate([".DS_Store"], keep=0)


def test_newest_first_skips_foreign_names_and_orders_the_rest() -> None:
    older = "2026-07-07T09-00-00-000Z"
    oldest = "2026-07-07T08-00-00-000Z"
    assert list(newest_first([older, NAME, ".DS_Store", oldest])) == [NAME, older, oldest]
    # A foreign name that sorts last (a stray temp file) is never taken for the newest.
    assert list(newest_first([older, NAME + ".tmp", NAME, "zz"])) == [NAME, older]
    assert list(newest_first([NAME])) == [NAME]
    assert list(newest_first([".DS_Store"])) == []
    assert list(newest_first([])) == []
    # A name of the claim shape that is no instant (month 13) sorts last and is skipped too.
    assert list(newest_first([older, NAME, "2026-13-01T00-00-00-000Z"])) == [NAME, older]


@given(
    st.datetimes(timezones=st.just(UTC)),
    st.none() | st.text(),
)
def test_a_claim_as_taken_is_its_record_as_json(fired_at: datetime, replica: str | None) -> None:
    # The claim's own text is built without its record: it must be what the record gives.
    record = {"firedAt": format_iso(fired_at)}
    if replica is not None:
        record["replica"] = replica
    assert claim_text(fired_at, replica=replica) == dumps(record)
    fire = parse_claim(NAME, claim_text(fired_at, replica=replica), "c")
    assert (fire.outcome, fire.replica) == (None, stored_replica(replica))


def test_claim_text_keeps_the_original_key_order() -> None:
    assert claim_text(STAMP) == '{"firedAt":"2026-07-07T12:30:00.000Z"}'
    assert claim_text(STAMP, Outcome.COMPLETED, 4210) == (
        '{"firedAt":"2026-07-07T12:30:00.000Z","outcome":"completed","ms":4210}'
    )
    assert claim_text(STAMP, Outcome.INTERRUPTED) == (
        '{"firedAt":"2026-07-07T12:30:00.000Z","outcome":"interrupted"}'
    )


def test_a_settled_claim_reads_back() -> None:
    fire = parse_claim(NAME, claim_text(STAMP, Outcome.FAILED, 12), "c")
    assert fire == Fire(slot=SLOT, fired_at=STAMP, outcome=Outcome.FAILED, ms=12)


def test_the_reason_comes_last_and_is_omitted_when_none() -> None:
    text = claim_text(STAMP, Outcome.FAILED, 12, "exit status 2:\nkey expired")
    assert text == (
        '{"firedAt":"2026-07-07T12:30:00.000Z","outcome":"failed","ms":12,'
        '"error":"exit status 2: key expired"}'
    )
    assert claim_text(STAMP, Outcome.FAILED, 12, None) == claim_text(STAMP, Outcome.FAILED, 12)
    fire = parse_claim(NAME, text, "c")
    assert fire.error == "exit status 2: key expired"
    # A reason without an outcome (hand-edited) is not a settled claim's reason.
    bare = parse_claim(NAME, '{"firedAt":"2026-07-07T12:30:00.000Z","error":"x"}', "c")
    assert (bare.outcome, bare.error) == (None, None)


def test_a_hand_edited_reason_is_made_safe_on_reading() -> None:
    text = '{"firedAt":"2026-07-07T12:30:00.000Z","outcome":"failed","error":"a\\u001b[2Jb"}'
    assert parse_claim(NAME, text, "c").error == "a\\x1b[2Jb"
    odd = '{"firedAt":"2026-07-07T12:30:00.000Z","outcome":"failed","error":7}'
    assert parse_claim(NAME, odd, "c").error is None


@pytest.mark.parametrize(
    ("ms", "read"),
    [("1e308", None), ("315537897600001", None), ("315537897600000", 315_537_897_600_000)],
)
def test_a_hand_edited_duration_past_the_calendar_s_span_reads_as_none(
    ms: str, read: int | None
) -> None:
    # 1e308 filled the TOOK column with hundreds of digits, and --json with the same.
    text = '{"firedAt":"2026-07-07T12:30:00.000Z","outcome":"failed","ms":' + ms + "}"
    fire = parse_claim(NAME, text, "c")
    assert (fire.outcome, fire.ms) == (Outcome.FAILED, read)


@pytest.mark.parametrize(
    "text", ['{"firedAt":"2026-07-0', "2026-07-07T10:00:00.000Z", "null", "12", "", "[]"]
)
def test_torn_and_older_formats_read_as_unsettled_quietly(
    text: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_routines")
    assert parse_claim(NAME, text, "c") == Fire(slot=SLOT, fired_at=SLOT)
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(caplog.records) == (1 if text else 0)  # a DEBUG line, except for an empty file


def test_non_numeric_ms_reads_as_absent_not_zero() -> None:
    text = '{"firedAt":"2026-07-07T12:30:00.000Z","outcome":"completed","ms":"12x45"}'
    fire = parse_claim(NAME, text, "c")
    assert (fire.outcome, fire.ms) == (Outcome.COMPLETED, None)


@pytest.mark.parametrize("stamp", ['"yesterday"', '""', "17", "null"])
def test_unreadable_stamp_falls_back_to_the_slot(
    stamp: str, caplog: pytest.LogCaptureFixture
) -> None:
    fire = parse_claim(NAME, f'{{"firedAt":{stamp},"outcome":"completed"}}', "c")
    assert (fire.fired_at, fire.outcome) == (SLOT, Outcome.COMPLETED)
    assert any("unreadable stamp" in r.getMessage() for r in caplog.records)


def test_an_unknown_outcome_reads_as_none_and_settled_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fire = parse_claim(NAME, '{"firedAt":"2026-07-07T12:30:00.000Z","outcome":"done"}', "c")
    assert (fire.fired_at, fire.outcome, fire.unknown_outcome) == (STAMP, None, '"done"')
    assert not fire.is_open
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert "outcome this version does not know" in record.getMessage()
    # No outcome at all (or null) is open: claimed, never settled.
    for text in ('{"firedAt":"2026-07-07T12:30:00.000Z"}', '{"firedAt":"x","outcome":null}'):
        fire = parse_claim(NAME, text, "c")
        assert (fire.outcome, fire.unknown_outcome, fire.is_open) == (None, None, True)
    assert parse_claim(NAME, '{"firedAt":"x","outcome":"failed"}', "c").is_open is False


@pytest.mark.parametrize(
    ("outcome", "shown"),
    [
        ("{}", "{}"),
        ('["completed"]', '["completed"]'),
        ('{"a": [1, {"b": null}]}', '{"a": [1, {"b": null}]}'),
        ("7", "7"),
        ("true", "true"),
        ('"' + "x" * 100 + '"', '"' + "x" * 63 + "…"),
        ('"' + "y" * 62 + '"', '"' + "y" * 62 + '"'),  # 64 characters: shown whole
        ('"' + "z" * 63 + '"', '"' + "z" * 63 + "…"),
    ],
)
def test_an_outcome_of_any_other_json_type_reads_as_unknown_with_a_warning(
    caplog: pytest.LogCaptureFixture, outcome: str, shown: str
) -> None:
    text = f'{{"firedAt":"2026-07-07T12:30:00.000Z","outcome":{outcome},"ms":5}}'
    fire = parse_claim(NAME, text, "c")
    assert (fire.fired_at, fire.outcome, fire.unknown_outcome, fire.ms) == (STAMP, None, shown, 5)
    (record,) = caplog.records
    assert record.getMessage() == (
        "claim c carries an outcome this version does not know — shown as none, never written "
        f"over: {shown}"
    )


def test_fire_validators_refuse_bad_values() -> None:
    with pytest.raises(ValueError, match="naive"):
        Fire(slot=datetime(2026, 1, 1), fired_at=STAMP)
    with pytest.raises(ValueError, match="ms"):
        Fire(slot=SLOT, fired_at=STAMP, ms=-1)
    with pytest.raises(TypeError, match="error"):
        Fire(slot=SLOT, fired_at=STAMP, error=7)  # type: ignore[arg-type]
    assert Fire(slot=SLOT, fired_at=STAMP, error=" \n ").error is None


def test_the_gate_prunes_every_claim_past_keep_when_a_directory_holds_more() -> None:
    names = [slot_name(datetime(2026, 7, 7, hour, tzinfo=UTC)) for hour in range(9, 13)]
    newest, prune, foreign = claim_gate(list(reversed(names)), keep=2)
    assert (newest, prune, foreign) == (names[-1], names[:3], [])  # keep lowered: three go
    assert claim_gate(names[:1], keep=2) == (names[0], [], [])
    assert claim_gate(names[:2], keep=2) == (names[1], names[:1], [])
    assert claim_gate(names[:3], keep=2) == (names[2], names[:2], [])
    with pytest.raises(ValueError, match=r"^keep must be at least 1$"):
        claim_gate(names, keep=0)


def test_a_claim_accounts_through_its_stamp_or_its_slot_whichever_is_later() -> None:
    later = datetime(2026, 7, 7, 11, tzinfo=UTC)
    early = datetime(2026, 7, 7, 9, tzinfo=UTC)
    assert claimed_through(Fire(slot=SLOT, fired_at=later)) == later  # fired late: its stamp
    assert claimed_through(Fire(slot=SLOT, fired_at=SLOT)) == SLOT
    assert claimed_through(Fire(slot=SLOT, fired_at=early)) == SLOT  # stamped by hand before
    now = datetime(2026, 7, 7, 8, tzinfo=UTC)
    assert arm_from(Fire(slot=SLOT, fired_at=early), now) == SLOT  # its slot lies ahead
    assert arm_from(Fire(slot=SLOT, fired_at=SLOT), later) == later  # behind: now
    assert arm_from(None, now) == now


@pytest.mark.parametrize(
    ("text", "held"),
    [
        ('{"firedAt":"2026-07-07T12:30:00.000Z"}', True),
        ('{"firedAt":"2026-07-07T12:30:00.000Z","outcome":"Cancelled","ms":3}', True),
        ("", False),
        ("\n", False),  # a spare's blank line, or a torn write
        ('{"firedAt":', False),
        ("[1, 2]", False),
    ],
)
def test_read_claim_says_whether_the_text_held_a_claim_record(text: str, held: bool) -> None:
    # A settle writing over text that held none keeps it first (settlefiles.py).
    fire, whole = read_claim(NAME, text, "c")
    assert whole is held
    assert fire.slot == SLOT
    if not held:
        assert fire == Fire(slot=SLOT, fired_at=SLOT)
