"""Pinned: the usage ledgers in the state directory, a file per routine or session
(stores/directory/ledgerfile.py), called directly.

Written for the mutation run of that module (docs/mutation.md): each ledger's file name, the
path each warning and fault names, the count of unreadable entries, and a session that is
not valid Unicode kept as it is.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from oserrors import fail_directory_fsyncs

from trio_routines.agent import Usage
from trio_routines.errors import StateFault
from trio_routines.ledger import Spent
from trio_routines.stores.directory.ledgerfile import (
    file_name,
    record_usage_sync,
    spent_since_sync,
)

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
HOUR = timedelta(hours=1)
ENTRY = ["2026-07-07T10:00:00.000Z", "", 3, 4, None]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "state" / "schedule" / "usage").mkdir(parents=True)
    return tmp_path / "state"


def ledger(root: Path, kind: str = "routine", name: str = "r") -> Path:
    return root / "schedule" / "usage" / file_name(kind, name)  # type: ignore[arg-type]


def test_a_ledger_is_named_by_its_kind_and_forty_hex_digits_of_its_keys_digest(
    root: Path,
) -> None:
    digest = hashlib.sha256(b"r").hexdigest()[:40]
    assert file_name("routine", "r") == f"routine-{digest}"
    record_usage_sync(root, "routine", "r", T0, Usage(input_tokens=3, output_tokens=4))
    assert os.listdir(root / "schedule" / "usage") == [f"routine-{digest}"]


def test_a_session_that_is_not_valid_unicode_has_its_ledger(root: Path) -> None:
    session = "chat:\udc80"  # a lone surrogate, as an undecodable byte reads in Python
    record_usage_sync(root, "session", session, T0, Usage(input_tokens=3, output_tokens=4))
    assert spent_since_sync(root, "session", session, T0 - HOUR) == Spent(3, 4)
    assert spent_since_sync(root, "session", "chat:", T0 - HOUR) == Spent()


def test_a_ledger_that_is_not_json_is_named_kept_aside_and_replaced(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Replaced by the next write, what it held was gone: none of it kept.
    path = ledger(root)
    path.write_text("[[[[")
    warning = f"ignoring the usage ledger {path}: not a ledger"
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert spent_since_sync(root, "routine", "r", T0 - HOUR) == Spent()
        assert caplog.messages == [warning]
        record_usage_sync(root, "routine", "r", T0, Usage(input_tokens=3, output_tokens=4))
    (aside,) = [p for p in path.parent.iterdir() if p.name.startswith(f"{path.name}.corrupt-")]
    assert aside.read_text() == "[[[["
    assert caplog.messages == [
        warning,
        warning,
        f"kept the damaged usage ledger {path} as {aside}",
    ]
    assert spent_since_sync(root, "routine", "r", T0 - HOUR) == Spent(3, 4)
    # A ledger read whole is replaced without a copy; one with an unreadable entry is kept.
    caplog.clear()
    record_usage_sync(root, "routine", "r", T0, Usage(input_tokens=1))
    assert len(list(path.parent.glob(f"{path.name}.corrupt-*"))) == 1
    whole = json.loads(path.read_text())
    whole["entries"].append(["not", "an", "entry"])
    path.write_text(json.dumps(whole))
    record_usage_sync(root, "routine", "r", T0, Usage(input_tokens=1))
    assert len(list(path.parent.glob(f"{path.name}.corrupt-*"))) == 2
    assert spent_since_sync(root, "routine", "r", T0 - HOUR) == Spent(5, 4)


def test_a_ledger_that_is_a_link_is_refused_naming_it(
    root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = ledger(root)
    (tmp_path / "elsewhere").write_text(json.dumps({"kind": "routine", "name": "r"}))
    path.symlink_to(tmp_path / "elsewhere")
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert spent_since_sync(root, "routine", "r", T0 - HOUR) == Spent()
    assert caplog.messages == [
        f"ignoring the usage ledger {path}: {path} is a symbolic link, not a regular file"
        " — refused; remove it"
    ]


def test_a_ledger_under_another_keys_name_is_read_as_empty(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = ledger(root)
    path.write_text(json.dumps({"kind": "routine", "name": "other", "entries": [ENTRY]}))
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert spent_since_sync(root, "routine", "r", T0 - HOUR) == Spent()
    assert caplog.messages == [f"ignoring the usage ledger {path}: it is another routine's"]
    record_usage_sync(root, "routine", "r", T0, Usage(input_tokens=1))
    (aside,) = path.parent.glob(f"{path.name}.corrupt-*")  # what it held, kept
    assert json.loads(aside.read_text())["name"] == "other"


def test_a_link_in_place_of_a_ledger_is_kept_aside_as_a_link(root: Path, tmp_path: Path) -> None:
    path = ledger(root)
    (tmp_path / "elsewhere").write_text("theirs")
    path.symlink_to(tmp_path / "elsewhere")
    record_usage_sync(root, "routine", "r", T0, Usage(input_tokens=1))
    (aside,) = path.parent.glob(f"{path.name}.corrupt-*")
    assert aside.is_symlink()  # the entry itself: never written through
    assert (tmp_path / "elsewhere").read_text() == "theirs"
    assert not path.is_symlink()
    assert spent_since_sync(root, "routine", "r", T0 - HOUR) == Spent(1, 0)


def test_only_unreadable_entries_are_left_out_and_counted(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = ledger(root)
    path.write_text(json.dumps({"kind": "routine", "name": "r", "entries": [ENTRY, 1, [2]]}))
    good = ledger(root, name="good")
    good.write_text(json.dumps({"kind": "routine", "name": "good", "entries": [ENTRY]}))
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert spent_since_sync(root, "routine", "r", T0 - HOUR) == Spent(3, 4)
        assert spent_since_sync(root, "routine", "good", T0 - HOUR) == Spent(3, 4)
    assert caplog.messages == [f"ignoring 2 unreadable entries of {path}"]


def test_ledgers_that_cannot_be_opened_are_a_fault_naming_them(root: Path) -> None:
    where = root / "schedule" / "usage"
    where.rmdir()
    where.write_text("")
    with pytest.raises(StateFault) as caught:
        spent_since_sync(root, "routine", "r", T0 - HOUR)
    assert str(caught.value) == (
        f"the usage of routine 'r' is unreadable: ENOTDIR: Not a directory: {where}"
    )


def test_a_ledger_that_cannot_be_read_is_a_fault_naming_it(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = ledger(root)
    path.write_text(json.dumps({"kind": "routine", "name": "r", "entries": [ENTRY]}))

    def read(_fd: int, _n: int) -> bytes:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "read", read)
    with pytest.raises(StateFault) as caught:
        spent_since_sync(root, "routine", "r", T0 - HOUR)
    assert str(caught.value) == f"the usage of routine 'r' is unreadable: EIO: I/O error: {path}"


def test_a_ledger_that_cannot_be_flushed_is_a_fault_naming_its_directory(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_directory_fsyncs(monkeypatch)
    with pytest.raises(StateFault) as caught:
        record_usage_sync(root, "session", "s", T0, Usage(input_tokens=1))
    assert str(caught.value) == (
        f"could not record the usage of session 's': EIO: I/O error: {root / 'schedule' / 'usage'}"
    )
