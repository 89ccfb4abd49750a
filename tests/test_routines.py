from __future__ import annotations

import errno
import json
import math
import os
from typing import TYPE_CHECKING, Any

import attrs
import pytest

from trio_routines import routinedir
from trio_routines.errors import InvalidRoutine, TrioRoutinesError, UnsafeName
from trio_routines.routinedir import (
    MAX_ROUTINE_FILE_BYTES,
    LoadResult,
    RoutineFailure,
    find_routine,
    load_routines,
    passed_over,
)
from trio_routines.routines import Routine, parse_routine_text

if TYPE_CHECKING:
    from pathlib import Path

DAILY = "---\ncron: 0 9 * * 1-5\ntz: Europe/Berlin\n---\nSummarize yesterday's merges.\n"


def write(directory: Path, filename: str, text: str) -> Path:
    path = directory / filename
    path.write_text(text, encoding="utf-8")
    return path


def parse(text: str) -> Routine:
    return parse_routine_text("r", text)


def refused(text: str) -> str:
    with pytest.raises(InvalidRoutine) as info:
        parse(text)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- the record ---------------------------------------------------------------------------


def test_record_fields_and_session() -> None:
    routine = Routine(name="daily", prompt="hi", cron="0 9 * * *", tz="UTC", timeout=60)
    assert (routine.name, routine.prompt, routine.cron, routine.tz, routine.timeout) == (
        "daily",
        "hi",
        "0 9 * * *",
        "UTC",
        60,
    )
    assert routine.session == "routine:daily"
    on_demand = Routine(name="adhoc", prompt="hi")
    assert (on_demand.cron, on_demand.tz, on_demand.timeout) == (None, None, None)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        routine.name = "other"  # type: ignore[misc]


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a\\b", "a\x00b", "/abs"])
def test_record_refuses_unsafe_names(name: str) -> None:
    with pytest.raises(UnsafeName):
        Routine(name=name, prompt="hi")


@pytest.mark.parametrize(
    "name",
    [
        " ",
        "   ",
        "\t",
        "daily ",
        " daily",
        "\u3000",
        "daily\n",
        "\x1fdaily",
        "\u2028",
        "daily\u200b",
        "\ufeffdaily",
        "\u2060",
        "daily\x7f",
    ],
)
def test_record_refuses_a_name_that_begins_or_ends_with_white_space(name: str) -> None:
    # Shown blank, or as another routine's name, by every listing.
    with pytest.raises(UnsafeName) as info:
        Routine(name=name, prompt="hi")
    assert str(info.value) == (
        f"{json.dumps(name)} cannot be a routine name (it begins or ends with white space or "
        "an invisible character)"
    )


@pytest.mark.parametrize(
    "name", ["每日简报", "my report", "...", ".hidden", "a.b", "-x", "a\u200bb", "x\u3000y"]
)
def test_record_accepts_every_other_name(name: str) -> None:
    assert Routine(name=name, prompt="hi").session == f"routine:{name}"


@pytest.mark.parametrize("prompt", ["", "   ", "\n\t\n", None, 3])
def test_record_refuses_empty_prompt(prompt: object) -> None:
    with pytest.raises(InvalidRoutine, match="prompt"):
        Routine(name="r", prompt=prompt)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [0, 0.0, -1, -0.5, math.nan, math.inf, -math.inf])
def test_record_refuses_bad_timeout_values(timeout: float) -> None:
    with pytest.raises(InvalidRoutine, match="timeout"):
        Routine(name="r", prompt="hi", timeout=timeout)


@pytest.mark.parametrize("timeout", [True, "sixty", [60]])
def test_record_refuses_timeout_of_wrong_type(timeout: object) -> None:
    with pytest.raises(InvalidRoutine, match="timeout"):
        Routine(name="r", prompt="hi", timeout=timeout)  # type: ignore[arg-type]


def test_record_refuses_tz_without_cron() -> None:
    with pytest.raises(InvalidRoutine, match='"tz" means nothing without "cron"'):
        Routine(name="r", prompt="hi", tz="Europe/Berlin")


def test_record_refuses_catchup_without_cron_as_a_file_is_refused() -> None:
    with pytest.raises(InvalidRoutine, match=r'^"catchup" means nothing without "cron"$'):
        Routine(name="r", prompt="hi", catchup=3600)
    assert Routine(name="r", prompt="hi", cron="0 * * * *", catchup=0).catchup == 0


@pytest.mark.parametrize(
    ("cron", "tz"), [("not a cron", None), ("0 9 * * *", "Mars/Olympus"), ("61 * * * *", "UTC")]
)
def test_record_refuses_invalid_cron_or_tz(cron: str, tz: str | None) -> None:
    with pytest.raises(InvalidRoutine, match=r"^invalid cron/tz — .") as info:
        Routine(name="r", prompt="hi", cron=cron, tz=tz)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("field", "value"), [("cron", ""), ("cron", "  "), ("tz", ""), ("cron", 5)]
)
def test_record_refuses_empty_or_non_text_cron_and_tz(field: str, value: object) -> None:
    kwargs: dict[str, object] = {"cron": "0 9 * * *", field: value}
    with pytest.raises(InvalidRoutine, match=f'"{field}"'):
        Routine(name="r", prompt="hi", **kwargs)  # type: ignore[arg-type]


def test_errors_are_value_errors() -> None:
    for error in (InvalidRoutine, UnsafeName):
        assert issubclass(error, TrioRoutinesError)
        assert issubclass(error, ValueError)


# --- the parser ---------------------------------------------------------------------------


def test_parse_full_file() -> None:
    routine = parse_routine_text("daily", DAILY)
    assert routine == Routine(
        name="daily", cron="0 9 * * 1-5", tz="Europe/Berlin", prompt="Summarize yesterday's merges."
    )


def test_parse_on_demand_file_with_empty_block() -> None:
    assert parse("---\n---\nJust do it.") == Routine(name="r", prompt="Just do it.")


def test_parse_refuses_file_without_frontmatter() -> None:
    assert "must start with a '---' frontmatter line" in refused("Just do it.\n")
    assert "must start with a '---'" in refused("\n---\ncron: * * * * *\n---\nhi\n")
    assert "must start with a '---'" in refused("----\n---\nhi\n")
    assert "must start with a '---'" in refused("  ---\n---\nhi\n")


def test_parse_refuses_empty_file() -> None:
    assert "empty" in refused("")
    assert "empty" in refused("\ufeff \n\n")


def test_parse_refuses_missing_closing_line() -> None:
    assert "no closing '---'" in refused("---\ncron: 0 9 * * *\nhi there\n")
    assert "no closing '---'" in refused("---\n")
    # A fence must be the whole line.
    assert "no closing '---'" in refused("---\n--- \u200b\nhi\n")


def test_parse_fences_may_carry_trailing_whitespace() -> None:
    assert parse("---  \t\ncron: 0 9 * * *\n--- \nhi\n").cron == "0 9 * * *"


def test_parse_block_ends_at_first_closing_line() -> None:
    routine = parse("---\n---\nfirst\n---\nsecond\n")
    assert routine.prompt == "first\n---\nsecond"


def test_parse_ignores_blank_and_comment_lines() -> None:
    text = "---\n\n# the schedule\n   # indented comment\n\ncron: 0 9 * * *\n  \n---\nhi\n"
    assert parse(text).cron == "0 9 * * *"


def test_parse_keeps_hash_inside_values() -> None:
    # cron's "n#k" weekday form needs the '#': trailing comments are not a thing.
    assert parse("---\ncron: 0 9 * * 1#2\n---\nhi\n").cron == "0 9 * * 1#2"


def test_parse_trailing_comment_is_part_of_the_value() -> None:
    message = refused("---\ncron: 0 9 * * * # weekdays\n---\nhi\n")
    assert message.startswith("invalid cron/tz — ")
    assert message.endswith(
        "(the '#' in 'cron' is part of its value: a comment goes on a line of its own)"
    )


@pytest.mark.parametrize(
    ("frontmatter", "key"),
    [
        ("tz: UTC # here\ncron: 0 9 * * *", "tz"),
        ("timeout: 30m\t# long", "timeout"),
        ("cron: 0 9 * * *\ncatchup: 2h # a while", "catchup"),
    ],
)
def test_a_refused_value_with_a_comment_after_it_says_where_comments_go(
    frontmatter: str, key: str
) -> None:
    message = refused(f"---\n{frontmatter}\n---\nhi\n")
    assert message.endswith(
        f"(the '#' in '{key}' is part of its value: a comment goes on a line of its own)"
    )


def test_a_refused_value_without_a_comment_gets_no_word_of_one() -> None:
    message = refused("---\ncron: 0 9 * * 1#9\n---\nhi\n")
    assert "comment" not in message
    assert "comment" not in refused("---\ncron: 0 9 * * *\ntz: Nowhere#1\n---\nhi\n")


def test_parse_strips_whitespace_around_keys_and_values() -> None:
    routine = parse("---\n  cron  :   0 9 * * *  \ntz:UTC\n---\nhi\n")
    assert (routine.cron, routine.tz) == ("0 9 * * *", "UTC")


@pytest.mark.parametrize(
    "line", ["cron 0 9 * * *", "0 9 * * *", ": 0 9 * * *", "9cron: x", "cr on: x", "- cron: x"]
)
def test_parse_refuses_lines_that_are_not_key_value(line: str) -> None:
    message = refused(f"---\n{line}\n---\nhi\n")
    assert "line 2" in message
    assert "expected 'key: value'" in message


@pytest.mark.parametrize("key", ["prompt", "Cron", "name", "secrets", "time-out", "_x"])
def test_parse_refuses_unknown_keys(key: str) -> None:
    message = refused(f"---\ncron: 0 9 * * *\n{key}: x\n---\nhi\n")
    assert f"unknown key {key!r}" in message
    assert "line 3" in message
    assert "allowed keys: cron, tz, timeout" in message


def test_parse_refuses_duplicate_keys() -> None:
    message = refused("---\ncron: 0 9 * * *\n# again\ncron: 0 9 * * *\n---\nhi\n")
    assert "duplicate key 'cron'" in message
    assert "line 4" in message


@pytest.mark.parametrize("value", ["", "   ", '""', "''", '"  "'])
def test_parse_refuses_empty_values(value: str) -> None:
    assert "'tz' has an empty value" in refused(f"---\ncron: 0 9 * * *\ntz: {value}\n---\nhi\n")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('"Europe/Berlin"', "Europe/Berlin"),
        ("'Europe/Berlin'", "Europe/Berlin"),
        ("Europe/Berlin", "Europe/Berlin"),
    ],
)
def test_parse_removes_matching_quotes(value: str, expected: str) -> None:
    assert parse(f"---\ncron: 0 9 * * *\ntz: {value}\n---\nhi\n").tz == expected


def test_parse_quoted_value_is_verbatim() -> None:
    # No escapes and no second stripping: what is between the quotes is the value.
    assert parse("---\ncron: '0 9 * * 1#2'\n---\nhi\n").cron == "0 9 * * 1#2"
    message = refused('---\ncron: 0 9 * * *\ntz: " UTC"\n---\nhi\n')
    assert message.startswith("invalid cron/tz — ")


@pytest.mark.parametrize("value", ['"UTC', "UTC'", "'UTC\"", '"', "'"])
def test_parse_refuses_unmatched_quotes(value: str) -> None:
    message = refused(f"---\ncron: 0 9 * * *\ntz: {value}\n---\nhi\n")
    assert "line 3: unmatched quote" in message


@pytest.mark.parametrize(
    "value",
    [
        '"0 9 * * *"  # daily',
        "'0 9 * * *' #daily",
        '"0 9 * * *"\t# x',
        "'0 9 * * *'#x",
        '"0 9 * * *"  # the "daily" one',  # the first quote that ends it, not the last
        '""  # nothing',
    ],
)
def test_a_comment_after_a_quoted_value_is_named_as_such(value: str) -> None:
    # The quotes match: "unmatched quote" sent a reader looking at the wrong thing.
    message = refused(f"---\ncron: {value}\n---\nhi\n")
    assert message.startswith("line 2: a comment after the value in "), message
    assert message.endswith(" — a comment goes on a line of its own"), message
    # A quote that ends nothing, or text after it that is no comment, stays unmatched.
    for odd in ('"0 9 * * *" and more', '"0 9 * * *', "'#'x"):
        assert "line 2: unmatched quote" in refused(f"---\ncron: {odd}\n---\nhi\n")


def test_parse_accepts_bom_and_crlf() -> None:
    text = (
        "\ufeff---\r\ncron: 0 9 * * 1-5\r\ntz: Europe/Berlin\r\n---\r\n\r\nline one\r\nline two\r\n"
    )
    routine = parse(text)
    assert (routine.cron, routine.tz) == ("0 9 * * 1-5", "Europe/Berlin")
    assert routine.prompt == "line one\nline two"


def test_parse_bom_only_at_start() -> None:
    assert "expected 'key: value'" in refused("---\n\ufeffcron: 0 9 * * *\n---\nhi\n")


@pytest.mark.parametrize("body", ["", "\n", "\n\n   \n\t\n"])
def test_parse_refuses_empty_body(body: str) -> None:
    message = refused(f"---\ncron: 0 9 * * *\n---{body}")
    assert message == "the prompt (the text after the frontmatter) is empty"


def test_parse_body_keeps_inner_layout() -> None:
    body = "\n\n  indented first line\n\n- item\n    code\n\n\n"
    routine = parse(f"---\n---{chr(10)}{body}")
    assert routine.prompt == "  indented first line\n\n- item\n    code"


def test_parse_tz_without_cron_refused() -> None:
    assert refused("---\ntz: Europe/Berlin\n---\nhi\n") == '"tz" means nothing without "cron"'
    assert refused("---\ncatchup: 2h\n---\nhi\n") == '"catchup" means nothing without "cron"'


def test_parse_invalid_cron_refused() -> None:
    assert refused("---\ncron: not a cron\n---\nhi\n").startswith("invalid cron/tz — ")
    assert refused("---\ncron: 0 9 * * *\ntz: Mars/Olympus\n---\nhi\n").startswith(
        "invalid cron/tz — "
    )
    digits = "9" * 5000  # past int()'s 4,300-digit limit
    assert refused(f"---\ncron: 0 {digits} * * *\n---\nhi\n").startswith(
        'invalid cron/tz — hour field: "99999999'
    )


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("90", 90.0),
        ("90s", 90.0),
        ("30m", 1800.0),
        ("1.5h", 5400.0),
        ("0.5", 0.5),
        (".5m", 30.0),
        ("2.", 2.0),
        ("10 m", 600.0),
        ('"45m"', 2700.0),
        ("5\u00a0m", 300.0),  # a no-break space is white space, as it always was
    ],
)
def test_parse_timeout_forms(value: str, seconds: float) -> None:
    assert parse(f"---\ntimeout: {value}\n---\nhi\n").timeout == seconds


@pytest.mark.parametrize(
    "value",
    [
        "0",
        "0s",
        "0.0h",
        "-5",
        "+5",
        "5d",
        "5ms",
        "5M",
        "1e3",
        "nan",
        "inf",
        "five",
        "5 s m",
        "9" * 400,
        "9" * 5000,  # past int()'s 4,300-digit limit: parsed as a float, never as an int
        "٣m",  # other scripts' digits
        "３０s",
    ],
)
def test_parse_refuses_bad_timeouts(value: str) -> None:
    assert '"timeout"' in refused(f"---\ntimeout: {value}\n---\nhi\n")


def test_parse_refuses_unsafe_name() -> None:
    with pytest.raises(UnsafeName):
        parse_routine_text("..", "---\n---\nhi\n")


# --- the loader ---------------------------------------------------------------------------


def test_load_valid_file(tmp_path: Path) -> None:
    write(tmp_path, "daily.md", DAILY)
    result = load_routines(tmp_path)
    assert result.failures == ()
    [routine] = result.routines
    assert attrs.asdict(routine) == {
        "name": "daily",
        "prompt": "Summarize yesterday's merges.",
        "cron": "0 9 * * 1-5",
        "tz": "Europe/Berlin",
        "timeout": None,
        "catchup": None,
        "output": None,
        "budgets": (),
    }


def test_load_routine_without_cron(tmp_path: Path) -> None:
    write(tmp_path, "adhoc.md", "---\n---\nOn demand.\n")
    assert load_routines(str(tmp_path)) == LoadResult(
        routines=(Routine(name="adhoc", prompt="On demand."),)
    )


def test_load_refuses_tz_without_cron(tmp_path: Path) -> None:
    write(tmp_path, "zoned.md", "---\ntz: Europe/Berlin\n---\nhi\n")
    result = load_routines(tmp_path)
    assert result.routines == ()
    assert [str(f) for f in result.failures] == [
        f'{tmp_path / "zoned.md"}: "tz" means nothing without "cron"'
    ]


def test_load_isolates_invalid_cron(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "---\ncron: 0 9 * * *\n---\nA\n")
    write(tmp_path, "b.md", "---\ncron: 99 * * * *\n---\nB\n")
    write(tmp_path, "c.md", "---\n---\nC\n")
    result = load_routines(tmp_path)
    assert [r.name for r in result.routines] == ["a", "c"]
    [failure] = result.failures
    assert failure.file == str(tmp_path / "b.md")
    assert failure.reason.startswith("invalid cron/tz — ")
    assert str(failure).startswith(f"{tmp_path / 'b.md'}: invalid cron")


def test_load_label_uses_the_given_directory_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "routines").mkdir()
    write(tmp_path / "routines", "daily.md", "oops\n")
    monkeypatch.chdir(tmp_path)
    [failure] = load_routines("routines").failures
    assert failure.file == os.path.join("routines", "daily.md")
    assert str(failure).startswith("routines/daily.md: must start with a '---'")


def test_load_names(tmp_path: Path) -> None:
    write(tmp_path, "每日简报.md", "---\n---\nbrief\n")
    write(tmp_path, "my report.md", "---\n---\nreport\n")
    write(tmp_path, "...md", "---\n---\nescape\n")
    write(tmp_path, "..md", "---\n---\nescape\n")
    write(tmp_path, ".md", "---\n---\nescape\n")
    write(tmp_path, "back\\slash.md", "---\n---\nescape\n")
    write(tmp_path, " .md", "---\n---\nblank\n")
    write(tmp_path, "daily .md", "---\n---\nlookalike\n")
    result = load_routines(tmp_path)
    assert {r.name for r in result.routines} == {"每日简报", "my report"}
    reasons = {f.file.removeprefix(f"{tmp_path}{os.sep}"): f.reason for f in result.failures}
    assert set(reasons) == {"...md", "..md", ".md", "back\\slash.md", " .md", "daily .md"}
    assert all("cannot be a routine name" in reason for reason in reasons.values())


def test_load_refuses_names_that_read_alike(tmp_path: Path) -> None:
    # Both loaded, they looked the same in every listing, and on a case-insensitive file
    # system (APFS, NTFS) a state directory's claims of the two would be one.
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    for name in ("daily", "Daily", "DAILY", composed, decomposed, "report", "Reports"):
        write(tmp_path, f"{name}.md", "---\ncron: 0 9 * * *\n---\nhi\n")
    result = load_routines(tmp_path)
    assert [r.name for r in result.routines] == ["Reports", "report"]  # not alike
    reasons = {f.file.removeprefix(f"{tmp_path}{os.sep}"): f.reason for f in result.failures}
    tail = "(they differ only in letter case or in how a character is composed) — rename one"
    assert reasons == {
        "DAILY.md": f"its name reads as that of Daily.md, daily.md {tail}",
        "Daily.md": f"its name reads as that of DAILY.md, daily.md {tail}",
        "daily.md": f"its name reads as that of DAILY.md, Daily.md {tail}",
        f"{composed}.md": f"its name reads as that of {decomposed}.md (written cafe\\u0301) {tail}",
        f"{decomposed}.md": f"its name (written cafe\\u0301) reads as that of {composed}.md {tail}",
    }
    assert [f.file for f in result.failures] == sorted(f.file for f in result.failures)
    assert all(f.file.startswith(f"{tmp_path}{os.sep}") for f in result.failures)  # named whole


@pytest.mark.skipif(os.name != "posix", reason="needs byte file names")
def test_load_refuses_non_utf8_file_name(tmp_path: Path) -> None:
    with open(os.path.join(os.fsencode(tmp_path), b"caf\xe9.md"), "wb") as file:
        file.write(b"---\n---\nhi\n")
    result = load_routines(tmp_path)
    assert result.routines == ()
    [failure] = result.failures
    assert failure.reason == "the file name is not UTF-8"


def test_load_missing_directory(tmp_path: Path) -> None:
    assert load_routines(tmp_path / "routines") == LoadResult(routines=(), failures=())


def test_load_refuses_a_file_as_directory(tmp_path: Path) -> None:
    path = write(tmp_path, "routines", "not a directory")
    with pytest.raises(InvalidRoutine, match="not a directory") as info:
        load_routines(path)
    assert "\n" not in str(info.value)


def test_load_ignores_other_entries(tmp_path: Path) -> None:
    write(tmp_path, "notes.txt", "whatever")
    write(tmp_path, "upper.MD", "whatever")
    write(tmp_path, "daily.md.swp", "whatever")
    write(tmp_path, ".hidden.md", "broken")
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", "deep.md", "---\n---\nnested\n")
    write(tmp_path, ".hidden.toml", "whatever")
    (tmp_path / ".dir.md").mkdir()
    (tmp_path / "dangling.toml").symlink_to("missing")  # no directory either
    # Loaded from none; the files of other names are listed for ``check`` and ``serve``, and
    # the hidden ``.md`` ones, not the other hidden ones nor the subdirectories.
    assert load_routines(tmp_path) == LoadResult(
        others=(".hidden.md", "daily.md.swp", "dangling.toml", "notes.txt", "upper.MD")
    )


def test_a_directory_named_as_a_routine_file_is_refused(tmp_path: Path) -> None:
    # Named <name>.md, it is no subdirectory passed over: a file replaced by a directory would
    # otherwise remove its routine at the next reload without a word.
    (tmp_path / "x.md").mkdir()
    write(tmp_path / "x.md", "inner.md", "---\n---\nnested\n")
    write(tmp_path, "y.md", "---\n---\ny\n")
    result = load_routines(tmp_path)
    assert [r.name for r in result.routines] == ["y"]
    assert result.failures == (
        RoutineFailure(file=str(tmp_path / "x.md"), reason="is a directory, not a routine file"),
    )


def test_the_files_passed_over_are_said_quoted_escaped_and_counted_past_five() -> None:
    head = "passed over (a routine file is named <name>.md): "
    assert passed_over(("notes.txt",)) == head + '"notes.txt"'
    bytes_name = os.fsdecode(b"caf\xe9\n.txt")  # no UTF-8, with a line break
    assert passed_over((bytes_name, "a\\b.MD")) == head + '"caf\\\\xe9\\x0a.txt", "a\\\\b.MD"'
    assert passed_over(("x" * 70,)) == head + '"' + "x" * 64 + '"'
    five = tuple(f"f{n}.txt" for n in range(5))
    assert passed_over(five) == head + ", ".join(f'"{name}"' for name in five)
    shown = head + ", ".join(f'"{name}"' for name in five)
    assert passed_over((*five, "f5.txt")) == shown + " and 1 more"
    assert passed_over((*five, "f5.txt", "f6.txt")) == shown + " and 2 more"


def test_a_routines_directory_that_cannot_be_opened_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # chmod means nothing to root, which runs CI: inject the EACCES the kernel would give.
    real_open = os.open

    def denying_open(path: Any, flags: int, *args: int, **kwargs: Any) -> int:
        if flags & os.O_DIRECTORY:
            raise OSError(errno.EACCES, os.strerror(errno.EACCES), path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", denying_open)
    with pytest.raises(InvalidRoutine) as refused:
        load_routines(tmp_path)
    assert (
        str(refused.value) == f"{tmp_path}: cannot list the routines directory: Permission denied"
    )


def test_load_sorts_by_name(tmp_path: Path) -> None:
    for name in ["b", "a-b", "a", "C"]:
        write(tmp_path, f"{name}.md", "---\n---\nhi\n")
    assert [r.name for r in load_routines(tmp_path).routines] == ["C", "a", "a-b", "b"]


def test_load_every_failure_is_reported(tmp_path: Path) -> None:
    write(tmp_path, "one.md", "no frontmatter")
    write(tmp_path, "two.md", "---\nfoo: bar\n---\nhi\n")
    write(tmp_path, "three.md", "---\n---\n")
    result = load_routines(tmp_path)
    assert result.routines == ()
    assert [os.path.basename(f.file) for f in result.failures] == ["one.md", "three.md", "two.md"]


def test_load_refuses_non_utf8(tmp_path: Path) -> None:
    (tmp_path / "bin.md").write_bytes(b"---\n---\n\xff\xfe\x00binary")
    (tmp_path / "latin1.md").write_bytes("---\n---\ncafé\n".encode("latin-1"))
    write(tmp_path, "ok.md", "---\n---\ncafé\n")
    result = load_routines(tmp_path)
    assert [r.prompt for r in result.routines] == ["café"]
    assert [(os.path.basename(f.file), f.reason) for f in result.failures] == [
        ("bin.md", "not UTF-8 text"),
        ("latin1.md", "not UTF-8 text"),
    ]


def test_load_refuses_huge_file(tmp_path: Path) -> None:
    header = "---\n---\n"
    write(tmp_path, "huge.md", header + "x" * MAX_ROUTINE_FILE_BYTES)
    write(tmp_path, "limit.md", header + "x" * (MAX_ROUTINE_FILE_BYTES - len(header)))
    result = load_routines(tmp_path)
    assert [r.name for r in result.routines] == ["limit"]
    [failure] = result.failures
    assert failure.file.endswith("huge.md")
    assert "256 KiB" in failure.reason


def test_load_symlinks(tmp_path: Path) -> None:
    outside = write(tmp_path, "outside.md", "---\n---\nsecret\n")
    routines = tmp_path / "routines"
    routines.mkdir()
    write(routines, "real.md", "---\n---\nreal\n")
    (routines / "alias.md").symlink_to("real.md")
    (routines / "sub").mkdir()
    write(routines / "sub", "deep.txt", "---\n---\ndeep\n")
    (routines / "deep.md").symlink_to(routines / "sub" / "deep.txt")
    (routines / "escape.md").symlink_to(outside)
    (routines / "relative-escape.md").symlink_to("../outside.md")
    (routines / "dangling.md").symlink_to("missing.md")
    (routines / "dir.md").symlink_to("sub")
    result = load_routines(routines)
    assert [(r.name, r.prompt) for r in result.routines] == [
        ("alias", "real"),
        ("deep", "deep"),
        ("real", "real"),
    ]
    assert [(os.path.basename(f.file), f.reason) for f in result.failures] == [
        ("dangling.md", "is a broken symlink"),
        ("dir.md", "is a directory, not a routine file"),
        ("escape.md", f"is a symlink leading outside {routines}"),
        ("relative-escape.md", f"is a symlink leading outside {routines}"),
    ]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to name open files")
def test_a_file_swapped_for_a_symlink_after_its_check_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The swap lands between the check of the path and its open: the file opened is checked.
    outside = write(tmp_path, "outside.md", "---\n---\nsecret\n")
    routines = tmp_path / "routines"
    routines.mkdir()
    write(routines, "real.md", "---\n---\nreal\n")
    (routines / "swapped.md").symlink_to(outside)
    (routines / "alias.md").symlink_to("real.md")
    monkeypatch.setattr(routinedir.stat, "S_ISLNK", lambda _mode: False)  # the check passed
    result = load_routines(routines)
    assert [(r.name, r.prompt) for r in result.routines] == [("alias", "real"), ("real", "real")]
    assert [(os.path.basename(f.file), f.reason) for f in result.failures] == [
        ("swapped.md", f"is a symlink leading outside {routines}"),
    ]


def test_a_directory_link_switched_during_a_load_is_read_whole_from_where_it_led(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A release-style deploy: ``current -> releases/N``, switched while a load reads it.
    old, new = tmp_path / "old", tmp_path / "new"
    for release, prompt in ((old, "old"), (new, "new")):
        release.mkdir()
        write(release, "a.md", f"---\n---\n{prompt}\n")
        write(release, "b.md", f"---\n---\n{prompt}\n")
    current = tmp_path / "current"
    current.symlink_to(old)
    real_listdir = os.listdir

    def switching(path: Any) -> list[str]:
        entries = real_listdir(path)
        current.unlink()
        current.symlink_to(new)  # after the listing, before any file is read
        return entries

    monkeypatch.setattr(routinedir.os, "listdir", switching)
    result = load_routines(current)
    assert result.failures == ()
    assert [(r.name, r.prompt) for r in result.routines] == [("a", "old"), ("b", "old")]


def test_load_through_a_symlinked_directory(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    write(real, "daily.md", DAILY)
    (real / "alias.md").symlink_to(real / "daily.md")
    link = tmp_path / "link"
    link.symlink_to(real)
    result = load_routines(link)
    assert result.failures == ()
    assert [r.name for r in result.routines] == ["alias", "daily"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_load_refuses_fifo_without_hanging(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.md")
    [failure] = load_routines(tmp_path).failures
    assert failure.reason == "is not a regular file"


def test_load_reports_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # chmod 0 means nothing to root, which runs CI: inject the EACCES the kernel would give.
    write(tmp_path, "locked.md", DAILY)
    real_open = os.open

    def denying_open(path: str, flags: int, *args: int, **kwargs: Any) -> int:
        if os.path.basename(path) == "locked.md":
            raise OSError(errno.EACCES, os.strerror(errno.EACCES), path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", denying_open)
    [failure] = load_routines(tmp_path).failures
    assert failure.reason == "cannot be read: Permission denied"


def test_load_reports_os_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "daily.md", DAILY)
    write(tmp_path, "flaky.md", DAILY)
    real_open = os.open

    def failing_open(path: str, flags: int, *args: int, **kwargs: Any) -> int:
        if os.path.basename(path) == "flaky.md":
            raise OSError(errno.EIO, os.strerror(errno.EIO), path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", failing_open)
    result = load_routines(tmp_path)
    assert [r.name for r in result.routines] == ["daily"]
    [failure] = result.failures
    assert failure.reason == f"cannot be read: {os.strerror(errno.EIO)}"


def test_find_routine(tmp_path: Path) -> None:
    write(tmp_path, "daily.md", DAILY)
    write(tmp_path, "adhoc.md", "---\n---\nhi\n")
    result = load_routines(tmp_path)
    found = find_routine(result, "daily")
    assert found is not None
    assert found.cron == "0 9 * * 1-5"
    assert find_routine(result, "nope") is None
    assert find_routine(LoadResult(), "daily") is None


def test_failure_str_is_one_line() -> None:
    failure = RoutineFailure(file="routines/x.md", reason="not UTF-8 text")
    assert str(failure) == "routines/x.md: not UTF-8 text"


@pytest.mark.parametrize("value", ["٢h", "２h", "1.٥d"])
def test_parse_refuses_a_catchup_window_in_other_scripts_digits(value: str) -> None:
    assert '"catchup"' in refused(f"---\ncron: 0 9 * * *\ncatchup: {value}\n---\nhi\n")
