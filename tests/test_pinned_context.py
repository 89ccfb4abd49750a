"""Pinned: a turn's FireContext, each refusal's exact text, its depth, its idempotency key at the
edges of what a header carries as it is, and entering and leaving :func:`firing`.

Written for the mutation run of context.py (docs/mutation.md); tests/test_context.py covers the
runtime setting the context around each kind of turn.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from trio_routines.context import FireContext, current_fire, firing, key_part
from trio_routines.records import Origin, OriginKind

SLOT = datetime(2026, 7, 7, 9, tzinfo=UTC)
NAIVE = datetime(2026, 7, 7, 9)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"kind": "cron", "routine": "r"}, "kind must be one of routine, wakeup, run, not 'cron'"),
        ({"kind": "routine", "routine": "r"}, "a slot is given exactly for a routine's cron fire"),
        (
            {"kind": "wakeup", "wakeup": "w", "slot": SLOT},
            "a slot is given exactly for a routine's cron fire",
        ),
        ({"kind": "wakeup"}, "a wake-up id is given exactly for a wake-up's turn"),
        (
            {"kind": "routine", "routine": "r", "slot": SLOT, "wakeup": "w"},
            "a wake-up id is given exactly for a wake-up's turn",
        ),
        ({"kind": "routine", "slot": SLOT}, "a routine turn names its routine"),
        ({"kind": "run"}, "a run turn names its routine"),
        ({"kind": "routine", "routine": "r", "slot": NAIVE}, "the slot must be an aware datetime"),
        (
            {"kind": "routine", "routine": "r", "slot": SLOT, "origin": Origin(kind="api")},
            "an origin is given only for a wake-up's turn",
        ),
    ],
)
def test_each_refusal_says_exactly_why(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        FireContext(session="s", **arguments)


def test_each_kind_takes_what_it_names() -> None:
    cron = FireContext("routine", "s", routine="r", slot=SLOT)
    assert (cron.kind, cron.routine, cron.slot, cron.wakeup, cron.origin) == (
        "routine",
        "r",
        SLOT,
        None,
        None,
    )
    run = FireContext("run", "s", routine="r")
    assert (run.routine, run.slot, run.wakeup) == ("r", None, None)
    # A wake-up's turn needs no routine, and may name one (a routine's wake-up).
    assert FireContext("wakeup", "s", wakeup="w").routine is None
    assert FireContext("wakeup", "s", wakeup="w", routine="r").routine == "r"


def test_the_depth_is_the_origins_and_zero_without_one() -> None:
    parent = Origin(kind=OriginKind.WAKEUP, parent="p", depth=3)
    assert FireContext("wakeup", "s", wakeup="w", origin=parent).depth == 3
    assert FireContext("wakeup", "s", wakeup="w", origin=Origin(kind="http")).depth == 0
    assert FireContext("wakeup", "s", wakeup="w").depth == 0
    assert FireContext("run", "s", routine="r").depth == 0


def test_only_a_cron_fire_has_an_idempotency_key() -> None:
    assert FireContext("run", "s", routine="r").idempotency_key is None
    assert FireContext("wakeup", "s", wakeup="w", routine="r").idempotency_key is None
    key = FireContext("routine", "s", routine="r", slot=SLOT).idempotency_key
    assert key == "r/2026-07-07T09-00-00-000Z"


@pytest.mark.parametrize(
    ("name", "part"),
    [
        ("!~", "!~"),  # the first and the last visible ASCII characters: as they are
        (" ", "%20"),  # just below "!"
        ("\x7f", "%7F"),  # just above "~"
        ("%", "%25"),
        ("a%b", "a%25b"),
        ("\x00", "%00"),
        ("é", "%C3%A9"),
        ("\udcff", "%ED%B3%BF"),  # a lone surrogate (a file name's undecodable byte): its bytes
        ("", ""),
    ],
)
def test_a_key_part_encodes_each_character_outside_visible_ascii_and_the_percent(
    name: str, part: str
) -> None:
    assert key_part(name) == part


def test_firing_sets_the_context_for_its_block_only() -> None:
    why = FireContext("run", "s", routine="r")
    block = firing(why)
    assert current_fire() is None  # made, not yet entered
    with block as entered:
        assert entered is None
        assert current_fire() is why
    assert current_fire() is None


def test_leaving_twice_or_without_entering_changes_nothing() -> None:
    outer = FireContext("run", "outer", routine="r")
    inner = FireContext("run", "inner", routine="r")
    with firing(outer):
        never_entered = firing(inner)
        never_entered.__exit__(None, None, None)
        assert current_fire() is outer
        block = firing(inner)
        block.__enter__()
        assert current_fire() is inner
        block.__exit__(None, None, None)
        assert current_fire() is outer
        block.__exit__(None, None, None)  # its token was used: not reset a second time
        assert current_fire() is outer
    assert current_fire() is None


def test_a_block_can_be_entered_again_after_it_is_left() -> None:
    why = FireContext("run", "s", routine="r")
    block = firing(why)
    for _ in range(2):
        with block:
            assert current_fire() is why
        assert current_fire() is None
