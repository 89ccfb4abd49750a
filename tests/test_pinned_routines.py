"""Routine files pinned exactly: each refusal's text, the loader's skipping, its size limit."""

from __future__ import annotations

import errno
import math
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_routines import routinedir
from trio_routines.errors import InvalidRoutine
from trio_routines.routinedir import MAX_ROUTINE_FILE_BYTES, RoutineFailure, load_routines
from trio_routines.routines import Routine, catchup_text, parse_catchup, parse_routine_text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (" \n", "the file is empty (a routine file starts with a '---' line)"),
        (
            "cron: 0 9 * * *\n---\np",
            "must start with a '---' frontmatter line (a routine without keys still writes "
            "'---' twice before its prompt)",
        ),
        ("---\ncron: 0 9 * * *\np", "the frontmatter has no closing '---' line"),
        ("---\ntimeout: 0\n---\np", "\"timeout\" must be above 0 and finite, not '0'"),
        (
            f"---\ntimeout: {'9' * 400}\n---\np",
            f"\"timeout\" must be above 0 and finite, not '{'9' * 40}'… (400 characters)",
        ),
    ],
)
def test_each_refusal_says_exactly_why(text: str, message: str) -> None:
    with pytest.raises(InvalidRoutine) as raised:
        parse_routine_text("r", text)
    assert str(raised.value) == message


def test_record_validators_say_exactly_why() -> None:
    with pytest.raises(InvalidRoutine) as raised:
        Routine(name="r", prompt=" \n ")
    assert str(raised.value) == "a routine's prompt must be a non-empty string"
    with pytest.raises(InvalidRoutine) as raised:
        Routine(name="r", prompt="p", timeout=[5])  # type: ignore[arg-type]
    assert str(raised.value) == '"timeout" must be a number of seconds, not list'
    with pytest.raises(InvalidRoutine) as raised:
        Routine(name="r", prompt="p", timeout="five")
    assert str(raised.value) == (
        "\"timeout\" must be seconds or a duration like 90s, 30m or 1.5h, not 'five'"
    )


def test_durations_and_sizes_in_code_read_as_a_routine_file_writes_them() -> None:
    # As ``budgets`` takes its text, and a wake-up its delay: the same words in code and file.
    made = Routine(
        name="r", prompt="p", cron="0 * * * *", timeout="30m", catchup="2h", output="4KiB"
    )
    assert (made.timeout, made.catchup, made.output) == (1800.0, 7200.0, 4096)
    assert Routine(name="r", prompt="p", timeout="90").timeout == 90.0  # bare: seconds, as a file
    spans = Routine(
        name="r", prompt="p", cron="0 * * * *", timeout=timedelta(seconds=1.5),
        catchup=timedelta(days=1), output="none",
    )  # fmt: skip
    assert (spans.timeout, spans.catchup, spans.output) == (1.5, 86400.0, None)
    assert Routine(name="r", prompt="p", cron="0 * * * *", catchup="none").catchup == 0.0
    assert made == parse_routine_text(
        "r", "---\ncron: 0 * * * *\ntimeout: 30m\ncatchup: 2h\noutput: 4KiB\n---\np\n"
    )
    for wrong, said in [
        ({"timeout": timedelta(0)}, '"timeout" must be a finite number of seconds above 0, '
         "not 0.0"),
        ({"catchup": timedelta(days=-1)}, '"catchup" must be a finite number of seconds, 0 or '
         "more, not -86400.0"),
        ({"output": "4MB"}, "\"output\" must be \"none\" or a size like 512, 4KiB or 64KiB, "
         "not '4MB'"),
        ({"output": timedelta(1)}, '"output" must be a number of bytes from 1 to 65536, or None'),
    ]:  # fmt: skip
        with pytest.raises(InvalidRoutine) as raised:
            Routine(name="r", prompt="p", cron="0 * * * *", **wrong)
        assert str(raised.value) == said


def test_skipped_entries_do_not_end_the_listing(tmp_path: Path) -> None:
    for entry in (".hidden.md", "a.txt", "b.md"):  # sorted in this order
        (tmp_path / entry).write_text("---\n---\nprompt\n")
    result = load_routines(tmp_path)
    assert [r.name for r in result.routines] == ["b"]
    assert result.failures == ()


def test_an_unsafe_name_is_reported_even_for_a_directory(tmp_path: Path) -> None:
    (tmp_path / "a\\b.md").mkdir()
    (tmp_path / "sub.md").mkdir()  # a fine name: the name is read first all the same
    result = load_routines(tmp_path)
    assert result.routines == ()
    assert result.failures == (
        RoutineFailure(
            file=str(tmp_path / "a\\b.md"),
            reason='"a\\\\b" cannot be a routine name (no path separators, "." or "..")',
        ),
        RoutineFailure(file=str(tmp_path / "sub.md"), reason="is a directory, not a routine file"),
    )


def test_a_file_of_exactly_the_limit_loads_whole(tmp_path: Path) -> None:
    head = "---\n---\n"
    prompt = "x" * (MAX_ROUTINE_FILE_BYTES - len(head) - 1) + "Z"
    (tmp_path / "big.md").write_text(head + prompt)
    assert (tmp_path / "big.md").stat().st_size == MAX_ROUTINE_FILE_BYTES
    (routine,) = load_routines(tmp_path).routines
    assert routine.prompt == prompt
    (tmp_path / "big.md").write_text(head + prompt + "!")
    (failure,) = load_routines(tmp_path).failures
    assert failure.reason == "is larger than 256 KiB, the limit for a routine file"


async def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    # The loader checks the type before opening; the open itself must not block either, should
    # a regular file become a FIFO in between.
    fifo = tmp_path / "r.md"
    os.mkfifo(fifo)
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    with trio.fail_after(30):
        with pytest.raises(InvalidRoutine) as raised:
            await trio.to_thread.run_sync(
                routinedir._read_capped,
                routinedir._Folder(folder, str(tmp_path)),
                "r.md",
                abandon_on_cancel=True,
            )
    os.close(folder)
    assert str(raised.value) == "is not a regular file"


def test_directory_errors_name_the_directory_and_the_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    afile = tmp_path / "file"
    afile.write_text("")
    with pytest.raises(InvalidRoutine) as raised:
        load_routines(afile / "sub")
    assert str(raised.value) == (
        f"{afile / 'sub'}: cannot read the routines directory: Not a directory"
    )

    def refuse(path: object) -> list[str]:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(routinedir.os, "listdir", refuse)  # root may list any directory
    with pytest.raises(InvalidRoutine) as raised:
        load_routines(tmp_path)
    assert str(raised.value) == (
        f"{tmp_path}: cannot list the routines directory: Permission denied"
    )


def test_h_fields_of_a_routine_hash_its_name() -> None:
    routine = Routine(name="report", prompt="p", cron="H 9 * * *")
    assert routine.cron == "H 9 * * *"


def test_loading_leaves_no_descriptor_open(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"r{i}.md").write_text("---\n---\nprompt\n")
    before = len(os.listdir("/proc/self/fd"))
    assert len(load_routines(tmp_path).routines) == 5
    assert len(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("none", 0.0), (" NONE ", 0.0), ("None", 0.0), ("90s", 90.0), ("30m", 1800.0), ("2h", 7200.0),
     ("1d", 86400.0), ("1.5h", 5400.0)],
)  # fmt: skip
def test_a_catchup_reads_as_seconds(text: str, seconds: float) -> None:
    assert parse_catchup(text) == seconds


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("soon", '"catchup" must be "none" or a duration like 30m, 2h or 1d, not \'soon\''),
        ("", '"catchup" must be "none" or a duration like 30m, 2h or 1d, not \'\''),
        ("1" * 400 + "d", '"catchup" must be finite, not \'' + "1" * 40 + "'… (401 characters)"),
    ],
)
def test_a_catchup_that_is_no_window_is_refused_saying_why(text: str, said: str) -> None:
    with pytest.raises(InvalidRoutine) as refused:
        parse_catchup(text)
    assert str(refused.value) == said


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("2 hours", '"catchup" must be "none" or a duration like 30m, 2h or 1d, not \'2 hours\''),
        ([2], '"catchup" must be a number of seconds, not list'),
        (True, '"catchup" must be a number of seconds, not bool'),
        (-1, '"catchup" must be a finite number of seconds, 0 or more, not -1'),
        (math.inf, '"catchup" must be a finite number of seconds, 0 or more, not inf'),
        (math.nan, '"catchup" must be a finite number of seconds, 0 or more, not nan'),
    ],
)
def test_a_routine_made_in_code_refuses_a_catchup_that_is_no_window(value: Any, said: str) -> None:
    with pytest.raises(InvalidRoutine) as refused:
        Routine(name="r", prompt="p", cron="0 * * * *", catchup=value)
    assert str(refused.value) == said
    assert Routine(name="r", prompt="p", cron="0 * * * *", catchup=0).catchup == 0


@pytest.mark.parametrize(
    ("catchup", "text"),
    [(None, "once, any age"), (0, "none"), (90, "90s"), (60, "1m"), (5400, "90m"),
     (7200, "2h"), (86400, "1d"), (172800, "2d"), (90000, "25h"), (1.5, "1.5s"),
     (1234567, "1234567s"), (1234567.25, "1234567.25s"), (86400 * 1234567, "1234567d"),
     (parse_catchup("99999999999999d"), "99999999999999d"), (30.0, "30s"), (0.001, "0.001s"),
     (0.00001, "0.00001s"), (parse_catchup("0.0000015s"), "0.0000015s")],
)  # fmt: skip
def test_a_catchup_window_reads_in_its_largest_whole_unit(catchup: float | None, text: str) -> None:
    assert catchup_text(catchup) == text
    if catchup:  # and reads back as it was: a server's listing is read by status --url
        assert parse_catchup(text) == catchup
