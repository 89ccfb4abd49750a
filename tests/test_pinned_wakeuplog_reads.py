"""The state directory's wake-up store (wakeuplog.py), pinned: what a poll answers and reads,
what a refused journal is warned about and becomes, which lines are damage, when a generation is
rewritten, and what a take-over writes and says."""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest
from wakeupstate import ASIDE_JOURNAL, EIO, unreadable, unwritable

from trio_routines.converter import dumps, wakeup_to_json
from trio_routines.errors import StateFault
from trio_routines.records import Wakeup
from trio_routines.stores.abandon import Handoff
from trio_routines.stores.directory import wakeuplog
from trio_routines.stores.directory.wakeupindex import Op, add_op, del_op, set_op
from trio_routines.stores.directory.wakeupjournal import header, line
from trio_routines.stores.directory.wakeuplog import WakeupLog

T0 = datetime(2026, 7, 7, 9, tzinfo=UTC)


def entry(wakeup_id: str, prompt: str = "p") -> Wakeup:
    return Wakeup(id=wakeup_id, session="s", prompt=prompt, fire_at=T0)


def eio(*_: object, **__: object) -> None:
    raise OSError(errno.EIO, os.strerror(errno.EIO))


def change(store: WakeupLog, *ops: Op) -> None:
    store.change(Handoff(), lambda index: (list(ops), None))


def ids(store: WakeupLog) -> list[str]:
    return [w.id for w in store.index]


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records]


# -- a poll --------------------------------------------------------------------------------------


def test_a_poll_answers_whether_a_take_over_waits_and_forgets_a_journal_gone(
    tmp_path: Path,
) -> None:
    store = WakeupLog(tmp_path, 1.0)
    change(store, add_op(entry("a"), 1))
    assert store.refresh() is True
    assert ids(store) == ["a"]
    schedule = tmp_path / "schedule"
    (schedule / "wakeups.json").write_text("[]")
    assert store.refresh() is False  # the take-over needs the lock
    (schedule / "wakeups.json").unlink()
    store.path.unlink()
    assert store.refresh() is True
    assert ids(store) == []
    change(store, add_op(entry("b"), 1))
    for name in os.listdir(schedule):
        (schedule / name).unlink()
    schedule.rmdir()
    assert store.refresh() is True
    assert ids(store) == []


def test_a_schedule_that_cannot_be_opened_is_a_fault_naming_the_journal(tmp_path: Path) -> None:
    (tmp_path / "schedule").write_text("")
    store = WakeupLog(tmp_path, 1.0)
    with pytest.raises(StateFault) as raised:
        store.refresh()
    assert str(raised.value) == unreadable(
        store.path, f"ENOTDIR: Not a directory: {tmp_path / 'schedule'}"
    )


@pytest.mark.parametrize("writing", [False, True], ids=["poll", "change"])
def test_a_journal_that_cannot_be_opened_is_a_fault_naming_it(
    tmp_path: Path, writing: bool
) -> None:
    store = WakeupLog(tmp_path, 1.0)
    change(store, add_op(entry("a"), 1))
    store.journal.open = eio  # type: ignore[method-assign]
    call = (lambda: change(store, del_op("a"))) if writing else store.refresh
    with pytest.raises(StateFault) as raised:
        call()
    assert str(raised.value) == (unwritable if writing else unreadable)(store.path, EIO)


def test_a_new_generation_that_cannot_be_opened_again_is_a_fault_naming_it(
    tmp_path: Path,
) -> None:
    store = WakeupLog(tmp_path, 1.0)
    real_write = store.journal.write_generation

    def write_then_fail_opens(directory: int, data: bytes) -> None:
        real_write(directory, data)
        store.journal.open = eio  # type: ignore[method-assign]

    store.journal.write_generation = write_then_fail_opens  # type: ignore[method-assign]
    with pytest.raises(StateFault) as raised:
        change(store, add_op(entry("a"), 1))
    assert str(raised.value) == unwritable(store.path, EIO)


def test_a_writer_never_reads_back_a_generation_it_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, journal_reads: list[tuple[int, int]]
) -> None:
    monkeypatch.setattr(wakeuplog, "SLACK", 0)
    store = WakeupLog(tmp_path, 1.0)
    change(store, add_op(entry("a"), 1))  # the first generation, then a line
    assert store.refresh()
    change(store, del_op("a"))  # three lines for no wake-up: a new generation
    assert store.path.read_bytes().count(b"\n") == 1
    assert store.refresh()
    change(store, add_op(entry("b"), 2))
    assert journal_reads == []


def test_a_journal_rewritten_in_place_is_read_again_whole_by_its_header(tmp_path: Path) -> None:
    """A generation is told by its header, not only by the file's inode or size."""
    store = WakeupLog(tmp_path, 1.0)
    change(store, add_op(entry("a"), 1))
    reader = WakeupLog(tmp_path, 1.0)
    assert reader.refresh()
    with store.path.open("r+b") as handle:  # same inode, longer: only the header tells
        handle.write(header() + line(add_op(entry("b"), 1)) + line(add_op(entry("c"), 2)))
    assert reader.refresh()
    assert ids(reader) == ["b", "c"]


# -- refused journals ----------------------------------------------------------------------------


def test_a_refused_journal_is_warned_about_once_per_refusal_and_holds_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = WakeupLog(tmp_path, 1.0)
    change(store, add_op(entry("a"), 1))
    reader = WakeupLog(tmp_path, 1.0)
    assert reader.refresh()
    assert ids(reader) == ["a"]
    store.path.unlink()
    os.mkfifo(store.path)
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert reader.refresh() is True
        assert ids(reader) == []
        assert reader.refresh() is True  # the same refusal: not warned again
        store.path.unlink()
        store.path.symlink_to(tmp_path / "elsewhere")
        assert reader.refresh() is True
    assert messages(caplog) == [
        f"unusable wake-up store: {store.path} is a FIFO, not a regular file — refused; "
        "remove it — ignoring it",
        f"unusable wake-up store: {store.path} is a symbolic link, not a regular file — refused; "
        "remove it — ignoring it",
    ]


def test_a_refused_journal_planted_again_after_it_was_gone_is_warned_about_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The warning is kept from repeating at every poll, not from telling of a second file.
    reader = WakeupLog(tmp_path, 1.0)
    (tmp_path / "schedule").mkdir()
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        os.mkfifo(reader.path)
        assert reader.refresh() is True
        reader.path.unlink()
        assert reader.refresh() is True  # no journal at all: nothing to say
        os.mkfifo(reader.path)
        assert reader.refresh() is True
        assert reader.refresh() is True  # the same refusal again: not repeated
        shutil.rmtree(tmp_path / "schedule")
        assert reader.refresh() is True  # no schedule directory either
        (tmp_path / "schedule").mkdir()
        os.mkfifo(reader.path)
        assert reader.refresh() is True
    fifo = (
        f"unusable wake-up store: {reader.path} is a FIFO, not a regular file — refused; "
        "remove it — ignoring it"
    )
    assert messages(caplog) == [fifo, fifo, fifo]


def test_a_refused_journal_found_by_a_writer_is_kept_aside_and_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    schedule = tmp_path / "schedule"
    schedule.mkdir()
    store = WakeupLog(tmp_path, 1.0)
    os.mkfifo(store.path)
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        change(store, add_op(entry("a"), 1))
    (kept,) = messages(caplog)  # one line: nobody is told to remove what was moved aside
    assert re.fullmatch(
        re.escape(
            f"unusable wake-up store: {store.path} is a FIFO, not a regular file — refused "
            f"— kept aside as {schedule}/"
        )
        + ASIDE_JOURNAL
        + re.escape("; a new journal is started"),
        kept,
    )
    (aside,) = schedule.glob("wakeups.journal.corrupt-*")
    assert aside.name in kept
    assert stat.S_ISFIFO(aside.lstat().st_mode)
    assert store.path.read_bytes().endswith(b"\n" + line(add_op(entry("a"), 1)))
    assert store.path.read_bytes().count(b"\n") == 2  # a header, then the change
    assert ids(store) == ["a"]


def test_a_refused_journal_gone_before_it_is_kept_aside_is_said_so_and_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    schedule = tmp_path / "schedule"
    schedule.mkdir()
    store = WakeupLog(tmp_path, 1.0)
    os.mkfifo(store.path)
    monkeypatch.setattr(store.journal, "keep_aside", lambda directory: None)  # removed meanwhile
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        change(store, add_op(entry("a"), 1))
    assert messages(caplog) == [
        f"unusable wake-up store: {store.path} is a FIFO, not a regular file — refused — gone "
        "before it could be kept aside; a new journal is started"
    ]
    assert ids(store) == ["a"]


def test_a_refused_journal_that_cannot_be_kept_aside_is_a_fault_naming_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "schedule").mkdir()
    store = WakeupLog(tmp_path, 1.0)
    os.mkfifo(store.path)
    store.journal.keep_aside = eio  # type: ignore[method-assign]
    with pytest.raises(StateFault) as raised:
        change(store, add_op(entry("a"), 1))
    assert str(raised.value) == (
        f"could not keep the unusable wake-up journal {store.path} aside: {EIO}"
    )
    assert stat.S_ISFIFO(store.path.lstat().st_mode)  # left as found


def test_a_journal_that_is_a_directory_is_moved_aside_whole_and_a_journal_made(
    tmp_path: Path,
) -> None:
    # A directory cannot be linked aside (EPERM): no wake-up could be written until an
    # operator moved it. It holds nothing of ours: it is moved aside, kept as found.
    (tmp_path / "schedule").mkdir()
    store = WakeupLog(tmp_path, 1.0)
    store.path.mkdir()
    (store.path / "kept").write_text("x")
    change(store, add_op(entry("a"), 1))
    (aside,) = [p for p in store.path.parent.iterdir() if p.name.startswith("wakeups.journal.")]
    assert aside.name.startswith("wakeups.journal.corrupt-")
    assert (aside / "kept").read_text() == "x"  # kept as found
    assert store.path.is_file()
    assert ids(store) == ["a"]


# -- damage --------------------------------------------------------------------------------------


def damaged(path: Path, at: int, reason: str, shown: str) -> str:
    return (
        f"damaged wake-up journal line at byte {at} of {path} — skipped (kept aside at the "
        f"next compaction): {reason}: {shown}"
    )


def test_only_a_first_line_is_a_header_and_one_is_not_needed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "schedule").mkdir()
    store = WakeupLog(tmp_path, 1.0)
    gen = b'{"op":"gen","id":"0123"}\n'
    store.path.write_bytes(line(add_op(entry("a"), 1)) + gen + line(add_op(entry("b"), 2)))
    at = len(line(add_op(entry("a"), 1)))
    assert store.refresh()
    assert ids(store) == ["a", "b"]
    assert messages(caplog) == [
        damaged(store.path, at, "unknown journal entry 'gen'", gen[:-1].decode())
    ]


def test_a_first_line_that_is_no_object_is_damage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "schedule").mkdir()
    store = WakeupLog(tmp_path, 1.0)
    store.path.write_bytes(b'["gen"]\n' + line(add_op(entry("a"), 1)))
    assert store.refresh()
    assert ids(store) == ["a"]
    assert messages(caplog) == [
        damaged(store.path, 0, "a journal entry must be an object", '["gen"]')
    ]


def test_a_line_that_is_not_utf8_is_shown_by_its_first_200_bytes_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "schedule").mkdir()
    store = WakeupLog(tmp_path, 1.0)
    first = header()
    store.path.write_bytes(first + b"\xff" + b"x" * 300 + b"\n")
    assert store.refresh()
    reason = "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"
    assert messages(caplog) == [damaged(store.path, len(first), reason, "\ufffd" + "x" * 199)]


def test_damage_that_cannot_be_kept_aside_leaves_the_change_made_and_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = WakeupLog(tmp_path, 1.0)
    change(store, add_op(entry("a"), 1))
    with store.path.open("ab") as handle:
        handle.write(b"{}\n")
    store.journal.keep_aside = eio  # type: ignore[method-assign]
    caplog.clear()
    change(store, add_op(entry("b"), 2))
    assert messages(caplog)[1:] == [
        f"could not compact the wake-up journal {store.path}: could not keep the unusable "
        f"wake-up journal {store.path} aside: {EIO}"
    ]
    assert store.path.read_bytes().endswith(b"{}\n" + line(add_op(entry("b"), 2)))
    assert ids(store) == ["a", "b"]


# -- generations ---------------------------------------------------------------------------------


def generations(store: WakeupLog, *changes: Op) -> list[bool]:
    """For each change made, whether it ended with a new generation (a new header)."""
    rewritten = []
    for op in changes:
        before = store.path.read_bytes().split(b"\n")[0]
        change(store, op)
        rewritten.append(store.path.read_bytes().split(b"\n")[0] != before)
    return rewritten


def test_a_generation_is_rewritten_once_its_lines_pass_twice_the_pending_plus_the_slack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wakeuplog, "SLACK", 1)
    store = WakeupLog(tmp_path, 1.0)
    change(store, add_op(entry("a"), 1))  # a header and a line: two
    sets = [set_op(entry("a", str(k))) for k in range(6)]
    # two pending: at most five lines
    assert generations(store, add_op(entry("b"), 2), *sets) == [
        *[False, False, False, True],  # the sixth line makes a header and two
        *[False, False, True],
    ]
    # Another process counts what it read, the header included: three lines, then its own.
    other = WakeupLog(tmp_path, 1.0)
    assert other.refresh()
    assert generations(other, *sets[:3]) == [False, False, True]


def test_a_take_over_names_its_count_and_numbers_the_wakeups_after_the_pending(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = WakeupLog(tmp_path, 1.0)
    change(store, add_op(entry("a"), 1))
    taken = [entry("b"), entry("a"), entry("c"), entry("b", "again")]
    legacy = tmp_path / "schedule" / "wakeups.json"
    legacy.write_text(dumps([wakeup_to_json(w) for w in taken]))
    with caplog.at_level(logging.INFO, logger="trio_routines"):
        store.take_over()
    assert messages(caplog) == [f"took over 2 wake-ups from {legacy}"]
    assert store.path.read_bytes().endswith(
        line(add_op(entry("b"), 2)) + line(add_op(entry("c"), 3))
    )
    assert not legacy.exists()


def test_a_take_over_compacts_a_damaged_journal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = WakeupLog(tmp_path, 1.0)
    change(store, add_op(entry("a"), 1))
    with store.path.open("ab") as handle:
        handle.write(b"{}\n")
    (tmp_path / "schedule" / "wakeups.json").write_text("[]")
    store.take_over()
    assert len(list((tmp_path / "schedule").glob("wakeups.journal.corrupt-*"))) == 1
    assert store.path.read_bytes().count(b"\n") == 2  # a header and "a"
    assert b"{}" not in store.path.read_bytes()
