"""Pinned: the stored shapes of claims, wake-ups, gaps and history, and each refusal's text.

Written for the mutation run of converter.py (docs/mutation.md). What it reads comes from state
files and servers, so a wrong type must be refused with a reason, never guessed.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from trio_routines.converter import (
    DuplicateKey,
    claim_text,
    dumps,
    fire_to_json,
    gap_from_json,
    gap_to_json,
    history_from_json,
    history_json,
    history_to_json,
    loads,
    loads_request,
    origin_from_json,
    origin_to_json,
    wakeup_from_json,
    wakeup_to_json,
)
from trio_routines.records import Fire, Gap, GapReason, Origin, OriginKind, Outcome, Wakeup
from trio_routines.usage import Usage

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
T1 = datetime(2026, 7, 8, 10, tzinfo=UTC)
ISO0, ISO1 = "2026-07-07T10:00:00.000Z", "2026-07-08T10:00:00.000Z"


def entry(**fields: Any) -> dict[str, Any]:
    return {"id": "w1", "session": "s", "prompt": "p", "fireAt": ISO0} | fields


def test_dumps_is_compact_and_keeps_non_ascii() -> None:
    assert dumps({"a": [1, "é"]}) == '{"a":[1,"é"]}'


def test_json_nested_too_deeply_is_damage_not_a_crash() -> None:
    assert loads('{"a": [1]}') == {"a": [1]}
    with pytest.raises(ValueError, match=r"^JSON nested too deeply to parse$"):
        loads("[" * 100_000)


def test_a_wake_up_round_trips_with_its_origin_and_its_end() -> None:
    origin = Origin(kind=OriginKind.ROUTINE, depth=1, routine="r", slot=T0)
    wakeup = Wakeup("w1", "s", "p", T0, cron="0 * * * *", tz="UTC", attempts=2, origin=origin)
    stored = wakeup_to_json(wakeup)
    assert stored == entry(
        cron="0 * * * *",
        tz="UTC",
        attempts=2,
        origin={"kind": "routine", "depth": 1, "routine": "r", "slot": ISO0},
    )
    assert wakeup_from_json(stored) == wakeup
    assert wakeup_from_json(entry(until=ISO1)) == Wakeup("w1", "s", "p", T0, until=T1)
    assert wakeup_from_json(entry()) == Wakeup("w1", "s", "p", T0)


def test_a_bad_origin_or_end_reads_as_none_and_keeps_the_wake_up() -> None:
    plain = Wakeup("w1", "s", "p", T0)
    assert wakeup_from_json(entry(origin={"kind": "nobody"}, until=7)) == plain
    assert wakeup_from_json(entry(origin="http", until="tomorrow")) == plain
    assert origin_from_json({"kind": "http", "depth": "1"}) is None
    assert origin_from_json({"kind": 3}) is None
    assert origin_from_json({"kind": "wakeup", "depth": 2, "parent": ""}) is None
    assert origin_from_json(None) is None
    assert origin_from_json({"kind": "http"}) == Origin(kind=OriginKind.HTTP)
    assert origin_to_json(Origin(kind=OriginKind.HTTP)) == {"kind": "http", "depth": 0}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (entry(id=1), "expected a string, got int"),
        (entry(attempts=True), "expected an integer, got bool"),
        (entry(attempts="2"), "expected an integer, got str"),
        (
            entry(fireAt="2026-07-07T10:00:00"),
            "expected an ISO instant with a zone, got '2026-07-07T10:00:00'",
        ),
        (entry(fireAt=1), "expected an ISO instant with a zone, got 1"),
        (
            {"session": "s", "prompt": 3, "fireAt": ISO0},
            "'id'; expected a string, got int",
        ),
    ],
)
def test_a_malformed_wake_up_says_each_reason(raw: Any, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        wakeup_from_json(raw)


def test_a_wake_up_entry_must_be_an_object() -> None:
    with pytest.raises(TypeError, match=r"^a wake-up entry must be an object$"):
        wakeup_from_json([entry()])


def test_a_claim_file_keeps_the_original_key_order_then_ours() -> None:
    usage = Usage(input_tokens=3, output_tokens=4)
    text = claim_text(T0, Outcome.FAILED, 5, "bo\nom", "r1", "done", usage)
    assert text == (
        f'{{"firedAt":"{ISO0}","outcome":"failed","ms":5,"error":"bo om","replica":"r1",'
        '"usage":{"inputTokens":3,"outputTokens":4},"output":"done"}'
    )
    # Without an outcome, only who claimed it: a duration, an error, usage or output wait for
    # the settle.
    assert (
        claim_text(T0, None, 5, "x", "r1", "out", usage) == f'{{"firedAt":"{ISO0}","replica":"r1"}}'
    )
    assert claim_text(T0, Outcome.COMPLETED, None, "", None, "", None) == (
        f'{{"firedAt":"{ISO0}","outcome":"completed"}}'
    )
    assert (
        claim_text(T0, Outcome.COMPLETED, 0)
        == f'{{"firedAt":"{ISO0}","outcome":"completed","ms":0}}'
    )


def test_a_gap_round_trips_and_says_what_is_wrong() -> None:
    exact = Gap(T0, T1, 2, GapReason.DOWN)
    assert gap_to_json(exact) == {"from": ISO0, "to": ISO1, "count": 2, "reason": "down"}
    guessed = Gap(T0, T1, 2, GapReason.LATE, estimated=True)
    assert gap_to_json(guessed)["estimated"] is True
    assert gap_from_json(gap_to_json(guessed)) == guessed
    assert gap_from_json(gap_to_json(exact)) == exact
    with pytest.raises(TypeError, match=r"^a gap must be an object$"):
        gap_from_json([])
    bad = gap_to_json(exact) | {"count": "2", "estimated": 1}
    both = "expected an integer, got str; expected true or false, got int"
    with pytest.raises(ValueError, match=f"^{re.escape(both)}$"):
        gap_from_json(bad)


def test_history_round_trips_with_its_gaps_and_running_claims() -> None:
    done = Fire(T0, T0, Outcome.FAILED, 5, "boom", "r1", "out", Usage(cost=0.5, currency="EUR"))
    open_claim = Fire(T1, T1)
    gap = Gap(T0, T1, 2, GapReason.OVERLAP)
    shown = history_to_json([done, gap, open_claim], running=[T1])
    assert shown == [
        {
            "slot": ISO0,
            "firedAt": ISO0,
            "outcome": "failed",
            "ms": 5,
            "error": "boom",
            "replica": "r1",
            "output": "out",
            "usage": {"cost": 0.5, "currency": "EUR"},
        },
        {"gap": {"from": ISO0, "to": ISO1, "count": 2, "reason": "overlap"}},
        {"slot": ISO1, "firedAt": ISO1, "running": True},
    ]
    assert history_from_json(shown) == ([done, open_claim], [gap], {T1})
    assert history_json(open_claim) == fire_to_json(open_claim) == {"slot": ISO1, "firedAt": ISO1}
    # Only `true` marks a running claim.
    assert history_from_json([{"slot": ISO1, "firedAt": ISO1, "running": 1}]) == (
        [open_claim],
        [],
        set(),
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"slot": ISO0}, "a history must be an array"),
        ([[ISO0]], "a history entry must be an object"),
        ([{"slot": ISO0, "firedAt": ISO0, "outcome": 1}], "a malformed fire in the history: "),
        (
            [{"slot": ISO0, "firedAt": ISO0, "outcome": "maybe"}],
            "a malformed fire in the history: ",
        ),
        ([{"gap": {"from": ISO0}}], "'to'; 'count'; 'reason'"),
    ],
)
def test_a_malformed_history_is_refused(raw: Any, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        history_from_json(raw)


def test_a_gap_that_is_not_an_object_is_a_malformed_history() -> None:
    # A server's answer is read by callers that take a ValueError as "not a history".
    with pytest.raises(ValueError, match=r"^a gap must be an object$"):
        history_from_json([{"gap": 5}])


def test_history_from_a_server_with_a_malformed_gap_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from trio_routines.cli import main
    from trio_routines.cli.client import Server

    async def answer(self: Server, path: str) -> Any:
        assert path == "/routines/daily/history"
        return [{"gap": [ISO0]}]

    monkeypatch.setattr(Server, "get", answer)
    url = "http://127.0.0.1:9"
    assert main(["history", "daily", "--url", url]) == 1
    assert capsys.readouterr().err == (
        f"error: {url}: the answer is not a history (a gap must be an object)\n"
    )


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('{"a": 1, "a": 2}', "a"),
        ('{"o": {"b": 1, "c": 2, "b": 1}}', "b"),
        ('[{"x": 1}, {"y": 1, "y": 2}]', "y"),
        ('{"x": 0, "y": 1, "z": 2, "y": 3}', "y"),  # the one named twice, not the first
    ],
)
def test_a_request_naming_a_key_twice_is_refused_naming_it(text: str, key: str) -> None:
    with pytest.raises(DuplicateKey) as twice:
        loads_request(text)
    assert twice.value.key == key
    assert str(twice.value) == key
    assert isinstance(twice.value, ValueError)


def test_a_request_naming_each_key_once_reads_as_json_does() -> None:
    text = '[{"x": 1}, {"x": 2, "o": {"x": [3]}}, {}]'
    assert loads_request(text) == [{"x": 1}, {"x": 2, "o": {"x": [3]}}, {}]
    with pytest.raises(ValueError, match=r"^JSON nested too deeply to parse$"):
        loads_request("[" * 100_000)
    with pytest.raises(ValueError, match="Expecting property name"):
        loads_request("{")


def test_an_integer_past_pythons_digits_reads_as_an_infinite_float_of_its_sign() -> None:
    # Valid JSON that json.loads refuses whole (over 4,300 digits): read again, each such
    # integer taken as infinite, which each field's check drops; the rest is read as it is.
    huge = "1" * 5000
    read = loads(f'{{"a": [{huge}, -{huge}, 7, -8], "b": "x"}}')
    assert read == {"a": [float("inf"), float("-inf"), 7, -8], "b": "x"}
    assert [type(value) for value in read["a"]] == [float, float, int, int]
    with pytest.raises(ValueError, match=r"^Expecting"):
        loads(f"[{huge},")  # damage, with it or without it, is damage still
    with pytest.raises(ValueError, match=r"^JSON nested too deeply to parse$"):
        loads(f"[{huge}, " + "[" * 100_000 + "]" * 100_000 + "]")
