"""Routine files pinned exactly: each refusal's text, the loader's skipping, its size limit."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import trio

from trio_routines import routinedir
from trio_routines.errors import InvalidRoutine
from trio_routines.routinedir import MAX_ROUTINE_FILE_BYTES, RoutineFailure, load_routines
from trio_routines.routines import Routine, parse_routine_text


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
        Routine(name="r", prompt="p", timeout="5")  # type: ignore[arg-type]
    assert str(raised.value) == '"timeout" must be a number of seconds, not str'


def test_skipped_entries_do_not_end_the_listing(tmp_path: Path) -> None:
    for entry in (".hidden.md", "a.txt", "b.md"):  # sorted in this order
        (tmp_path / entry).write_text("---\n---\nprompt\n")
    result = load_routines(tmp_path)
    assert [r.name for r in result.routines] == ["b"]
    assert result.failures == ()


def test_an_unsafe_name_is_reported_even_for_a_directory(tmp_path: Path) -> None:
    (tmp_path / "a\\b.md").mkdir()
    (tmp_path / "sub.md").mkdir()  # a directory with a fine name is skipped silently
    result = load_routines(tmp_path)
    assert result.routines == ()
    assert result.failures == (
        RoutineFailure(
            file=str(tmp_path / "a\\b.md"),
            reason='"a\\\\b" cannot be a routine name (no path separators, "." or "..")',
        ),
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
    with trio.fail_after(30):
        with pytest.raises(InvalidRoutine) as raised:
            await trio.to_thread.run_sync(
                routinedir._read_capped, str(fifo), abandon_on_cancel=True
            )
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
