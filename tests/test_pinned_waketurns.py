"""Pinned: each session's recent wake-up turns in the state directory's ``wake-turns.json``
(stores/directory/waketurns.py), called directly.

Written for the mutation run of that module (docs/mutation.md): the path each warning and
fault names, which sessions' damaged turns are warned about, a session whose newest turn left
the window, and a session that is not valid Unicode kept as it is.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from oserrors import fail_directory_fsyncs

from trio_routines.errors import StateFault
from trio_routines.stores.directory.waketurns import note_wake_turn_sync, wake_turns_sync
from trio_routines.wakelimits import RATE_WINDOW

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
STAMP = "2026-07-07T10:00:00.000Z"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "state" / "schedule").mkdir(parents=True)
    return tmp_path / "state"


def turns_file(root: Path) -> Path:
    return root / "schedule" / "wake-turns.json"


def test_a_turns_file_that_is_not_json_is_named_and_replaced(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = turns_file(root)
    path.write_text("[[[[")
    warning = f"ignoring {path}: not a JSON object of sessions and their turns"
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert wake_turns_sync(root, "s", T0 - MINUTE) == []
        assert caplog.messages == [warning]
        note_wake_turn_sync(root, "s", T0)
        assert caplog.messages == [warning, warning]
    assert wake_turns_sync(root, "s", T0 - MINUTE) == [T0]


def test_a_turns_file_that_is_a_link_is_refused_naming_it(
    root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = turns_file(root)
    (tmp_path / "elsewhere").write_text(json.dumps({"s": [STAMP]}))
    path.symlink_to(tmp_path / "elsewhere")
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert wake_turns_sync(root, "s", T0 - MINUTE) == []
    assert caplog.messages == [
        f"ignoring {path}: {path} is a symbolic link, not a regular file — refused; remove it"
    ]


def test_only_the_sessions_with_damaged_turns_are_warned_about(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = turns_file(root)
    path.write_text(json.dumps({"s": [STAMP], "t": 3, "u": ["yesterday", STAMP]}))
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert wake_turns_sync(root, "s", T0 - MINUTE) == [T0]
    assert caplog.messages == [
        f"ignoring damaged turns of session 't' in {path}",
        f"ignoring damaged turns of session 'u' in {path}",
    ]
    assert wake_turns_sync(root, "u", T0 - MINUTE) == [T0]


def test_a_session_whose_newest_turn_is_an_hour_old_is_dropped(root: Path) -> None:
    note_wake_turn_sync(root, "a", T0)
    note_wake_turn_sync(root, "b", T0 + RATE_WINDOW - MINUTE)
    assert wake_turns_sync(root, "a", T0 - MINUTE) == [T0]
    note_wake_turn_sync(root, "b", T0 + RATE_WINDOW)
    assert wake_turns_sync(root, "a", T0 - MINUTE) == []
    assert list(json.loads(turns_file(root).read_text())) == ["b"]


def test_a_session_that_is_not_valid_unicode_is_kept_as_it_is(root: Path) -> None:
    session = "chat:\udc80"  # a lone surrogate, as an undecodable byte reads in Python
    note_wake_turn_sync(root, session, T0)
    note_wake_turn_sync(root, session, T0 + MINUTE)
    assert wake_turns_sync(root, session, T0 - MINUTE) == [T0, T0 + MINUTE]


def test_a_turns_file_that_cannot_be_read_is_a_fault_naming_it(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = turns_file(root)
    path.write_text(json.dumps({"s": [STAMP]}))

    def read(_fd: int, _n: int) -> bytes:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "read", read)
    with pytest.raises(StateFault) as caught:
        wake_turns_sync(root, "s", T0 - MINUTE)
    assert str(caught.value) == (
        f"the recent wake-up turns in {path} are unreadable: EIO: I/O error: {path}"
    )


def test_a_turns_file_that_cannot_be_flushed_is_a_fault_naming_it(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_directory_fsyncs(monkeypatch)
    with pytest.raises(StateFault) as caught:
        note_wake_turn_sync(root, "s", T0)
    assert str(caught.value) == (
        f"a wake-up turn could not be recorded in {turns_file(root)}:"
        f" EIO: I/O error: {root / 'schedule'}"
    )
