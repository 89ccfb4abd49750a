"""Pinned: the HTTP agent's pure core, to the character, at the edges its suite does not reach.

Written for the mutation run of agent_wire.py (docs/mutation.md). The suite drives the HTTP
agent over a real server with answers a server usually gives (200, 4xx, 5xx; plain JSON; a
token at the end of a reason cut short; one reply in one piece); here the first status past
2xx, JSON types by suffix, a reason of exactly the limit, a body that is no UTF-8, a secret's
beginning at each length, the codings' line, outcome events without words and a JSON reply that
arrives in pieces.
"""

from __future__ import annotations

import json

from trio_routines.agent import SESSION_BUSY, Failed, TextDelta, Usage
from trio_routines.agent_wire import (
    REASON_LIMIT,
    Answer,
    Reader,
    classify,
    coding_of,
    event_outcome,
    first_line,
    is_json,
    masked,
    reason_of,
)

SECRET = "tok-abcdef"


def test_only_2xx_is_read_and_300_fails() -> None:
    assert classify(299, "text/plain") == Answer("text")
    assert classify(300, "text/plain") == Answer("failed", "the agent answered 300")
    assert classify(301, "text/event-stream") == Answer("failed", "the agent answered 301")


def test_json_is_application_json_or_an_application_type_ending_in_json() -> None:
    assert is_json("Application/JSON; charset=utf-8")
    assert is_json("application/problem+json")
    assert is_json(" application/vnd.x+json ; q=1")
    assert not is_json("application/xml")
    assert not is_json("text/x+json")
    assert not is_json("text/json")


def test_a_reason_of_exactly_the_limit_is_kept_whole() -> None:
    assert reason_of("x" * REASON_LIMIT) == "x" * REASON_LIMIT
    assert reason_of("x" * (REASON_LIMIT + 1)) == "x" * (REASON_LIMIT - 1) + "…"


def test_the_first_line_of_a_body_that_is_no_utf8_keeps_its_other_characters() -> None:
    assert first_line(b"\n  \nbad \xff byte\nnext") == "bad \ufffd byte"
    assert first_line("naïve".encode()) == "naïve"
    assert first_line(b"\n \r\n\t\n") == ""


def test_a_whole_body_ending_in_a_secrets_beginning_keeps_that_end() -> None:
    # Only a body cut short may have lost the rest of the secret behind the cut.
    assert first_line(b"error: tok-ab", secret=SECRET) == "error: tok-ab"
    assert first_line(b"error: tok-ab", secret=SECRET, cut=True) == "error: ***"


def test_a_cut_masks_a_secrets_beginning_of_every_length() -> None:
    for size in range(1, len(SECRET)):
        text = "reason " + SECRET[:size]
        assert masked(text, SECRET, cut=True) == "reason ***", size
    assert masked("reason " + SECRET, SECRET, cut=True) == "reason ***"


def test_a_secret_masked_whole_is_not_masked_again_at_the_cut() -> None:
    # A secret that ends in asterisks: once masked, the text ends with "***" and may end with
    # the whole secret again; the character before it was never part of it.
    assert masked("aa***", "a***", cut=True) == "a***"


def test_the_codings_line_names_each_coding_but_identity_with_the_secret_masked() -> None:
    assert coding_of([" GZip ", "identity", "", "br"]) == "gzip, br"
    assert coding_of(["identity"]) == ""
    assert coding_of(["gzip", SECRET], SECRET) == "gzip, ***"


def test_an_outcome_event_without_words_gets_a_reason_and_keeps_its_code() -> None:
    assert event_outcome(Failed("", SESSION_BUSY), None) == Failed(
        "the agent's session is busy", SESSION_BUSY
    )
    assert event_outcome(Failed(" \n "), None) == Failed("the agent reported a failure")
    assert event_outcome(Failed("", "other"), None) == Failed(
        "the agent reported a failure", "other"
    )
    assert event_outcome(Failed(f"bad {SECRET}", "other"), SECRET) == Failed("bad ***", "other")


def test_a_json_reply_in_pieces_is_read_whole_for_its_usage() -> None:
    body = json.dumps({"text": "hi", "usage": {"input_tokens": 3, "output_tokens": 4}})
    reader = Reader(None, keep=True)
    pieces = [body[:10], body[10:25], "", body[25:]]
    assert [d for piece in pieces for d in reader.feed(piece)] == [
        TextDelta(p) for p in pieces if p
    ]
    assert reader.reply_usage() == Usage(3, 4)
    assert reader.problems == []


def test_a_json_reply_whose_usage_cannot_be_read_is_one_problem() -> None:
    reader = Reader(None, keep=True)
    reader.feed(json.dumps({"usage": [1, 2]}))
    assert reader.reply_usage() is None
    assert reader.problems == ["usage must be a JSON object, got list"]


def test_a_reader_keeps_no_reply_unless_asked() -> None:
    reader = Reader(None)
    assert reader.feed(json.dumps({"usage": {"input_tokens": 3}})) != []
    assert reader.reply_usage() is None
    assert reader.problems == []
