"""Pinned: when each routine was first armed, in the state directory's ``armed.json``
(stores/directory/armed.py), called directly.

Written for the mutation run of that module (docs/mutation.md): the path each warning and
fault names, the entries read past a damaged one, and a read of routines all known that takes
no lock (held here from a descriptor of this process's own, which conflicts as another
process's would).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from oserrors import fail_directory_fsyncs

from trio_routines.errors import StateFault
from trio_routines.stores.directory.armed import first_armed_sync

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
EARLIER = T0 - timedelta(days=3)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "state" / "schedule").mkdir(parents=True)
    return tmp_path / "state"


def armed_file(root: Path) -> Path:
    return root / "schedule" / "armed.json"


def test_an_armed_file_that_is_not_json_is_named_on_each_read_and_replaced(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = armed_file(root)
    path.write_text("not json")
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert first_armed_sync(root, ["r"], T0) == {"r": T0}
    # Read once, then again under the lock before the write.
    warning = f"ignoring {path}: not a JSON object of routines and instants"
    assert caplog.messages == [warning, warning]
    assert json.loads(path.read_text()) == {"r": "2026-07-07T10:00:00.000Z"}


def test_an_armed_file_that_is_a_link_is_refused_naming_it(
    root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = armed_file(root)
    (tmp_path / "elsewhere").write_text("{}")
    path.symlink_to(tmp_path / "elsewhere")
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert first_armed_sync(root, ["r"], T0) == {"r": T0}
    warning = f"ignoring {path}: {path} is a symbolic link, not a regular file — refused; remove it"
    assert caplog.messages == [warning, warning]
    assert (tmp_path / "elsewhere").read_text() == "{}"


def test_entries_past_a_damaged_one_are_read(root: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = armed_file(root)
    stored = {"bad": "not an instant", "a/b": "2026-07-04T10:00:00.000Z"}
    path.write_text(json.dumps(stored | {"r": "2026-07-04T10:00:00.000Z"}))
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert first_armed_sync(root, ["r"], T0) == {"r": EARLIER}
    assert caplog.messages == [
        f"ignoring the entry of 'bad' in {path}: not a routine and an instant",
        f"ignoring the entry of 'a/b' in {path}: not a routine and an instant",
    ]


def test_routines_all_known_are_answered_without_the_lock(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert first_armed_sync(root, ["r"], EARLIER) == {"r": EARLIER}
    monkeypatch.setattr("trio_routines.stores.directory.armed.LOCK_SECONDS", 0.05)
    held = os.open(root / "schedule" / "gaps.lock", os.O_RDWR)
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert first_armed_sync(root, ["r"], T0) == {"r": EARLIER}
        with pytest.raises(StateFault, match="stayed locked"):
            first_armed_sync(root, ["r", "new"], T0)
    finally:
        os.close(held)


def test_an_armed_file_that_cannot_be_flushed_is_a_fault_naming_it(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_directory_fsyncs(monkeypatch)
    with pytest.raises(StateFault) as caught:
        first_armed_sync(root, ["r"], T0)
    schedule = root / "schedule"
    assert str(caught.value) == (
        f"when the routines were first armed cannot be read or kept in {schedule / 'armed.json'}:"
        f" EIO: I/O error: {schedule}"
    )
