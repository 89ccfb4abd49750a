"""Pinned: the escaping helper's edges, to the character.

Written for the mutation run of text.py (docs/mutation.md). The suite's tests clip only on a
character boundary and never at the limit itself, write JSON only in ASCII and on one line, and
leave the paragraph separator out of a turn's output.
"""

from __future__ import annotations

import json

from trio_routines.text import clipped, error_text, name_shown, safe_json, shown, visible_lines


def test_a_text_of_exactly_the_limit_is_kept_whole() -> None:
    assert clipped("abcde", 5) == "abcde"
    assert clipped("abcdef", 5) == "ab…"
    assert clipped("é" * 4, 8) == "é" * 4  # 8 bytes in 4 characters


def test_a_cut_inside_a_character_drops_that_character_and_nothing_more() -> None:
    # 20 bytes of "é" cut at 5: two whole characters and half of the third, which goes.
    assert clipped("é" * 10, 8) == "éé…"
    assert clipped("a✓✓", 6) == "a…"  # "✓" is 3 bytes: 3 kept of "a✓" would split it
    assert clipped("🙂🙂", 7) == "🙂…"


def test_a_limit_of_three_bytes_leaves_room_for_the_ellipsis_alone() -> None:
    assert clipped("abcd", 3) == "…"
    # Under the ellipsis's own 3 bytes, the cut text alone: never more than the limit.
    assert [clipped("abcd", n) for n in (2, 1, 0, -1)] == ["ab", "a", "", ""]
    assert clipped("éa", 1) == ""  # half a character is none
    assert clipped("abcd", 4) == "abcd"
    assert clipped("abcde", 4) == "a…"


def test_a_stored_reason_cut_at_the_limit_stays_within_it() -> None:
    reason = "x" * 1021 + "€€"  # 1027 bytes: the cut at 1021 leaves the "€"s out
    assert error_text(reason) == "x" * 1021 + "…"
    assert error_text("x" * 1024) == "x" * 1024


def test_json_keeps_non_ascii_as_it_is_and_indents_when_asked() -> None:
    value = {"routine": "日報 café", "n": [1, 2]}
    assert safe_json(value) == '{"routine": "日報 café", "n": [1, 2]}'
    assert safe_json(value, indent=2) == (
        '{\n  "routine": "日報 café",\n  "n": [\n    1,\n    2\n  ]\n}'
    )
    assert json.loads(safe_json(value, indent=2)) == value


def test_json_escapes_what_a_terminal_or_a_line_splitter_would_obey() -> None:
    text = safe_json("a\u2028b\u2029c\x85d\x7fe\x1bf")
    assert text == '"a\\u2028b\\u2029c\\u0085d\\u007fe\\u001bf"'
    assert json.loads(text) == "a\u2028b\u2029c\x85d\x7fe\x1bf"


def test_the_line_and_paragraph_separators_of_an_output_are_both_shown() -> None:
    assert visible_lines("a\u2028b\u2029c\n\td") == "a\\u2028b\\u2029c\n\td"
    assert visible_lines("\u2029\u2029") == "\\u2029\\u2029"


def test_a_name_is_shown_so_that_no_two_names_show_alike() -> None:
    names = ["a b", "a  b", "a\nb", "a\\x0ab", "a\\\\x0ab", "a\tb", "a\u2028b", "a\x1b[2Jb"]
    shown = [name_shown(name) for name in names]
    assert shown == [
        "a b",
        "a  b",
        "a\\x0ab",
        "a\\\\x0ab",
        "a\\\\\\\\x0ab",
        "a\\x09b",
        "a\\u2028b",
        "a\\x1b[2Jb",
    ]
    assert len(set(shown)) == len(names)


def test_shown_trims_spaces_alone_never_the_text_itself() -> None:
    assert shown("  XaX  ") == "XaX"
    assert shown("X a\nX") == "X a X"
