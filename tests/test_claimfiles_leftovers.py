"""Temp names a claim left behind in its routine's directory are removed once stale, safely.

A claim the kernel cannot make unnamed is written under ``.new-claim-<16 hex>`` and linked;
a crash or a failed unlink leaves that name behind. The next claim taken in the directory
removes it once its ``lstat`` mtime is older than the bound, and touches nothing else: not a
fresh one (another replica may be about to link it), not a foreign name, not a directory,
never a link's target. Files are aged with ``os.utime``.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from oserrors import fail, named, prefixed

from trio_routines.instants import slot_name
from trio_routines.stores import safefile
from trio_routines.stores.directory import DirectoryStore, claimfiles, leftovers

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
HOUR = timedelta(hours=1)
TEMP = f"{claimfiles.NEW_CLAIM}0123456789abcdef"
STALE = leftovers.STALE_AFTER


def claims(root: Path) -> Path:
    path = root / "schedule" / "claims" / "daily"
    path.mkdir(parents=True, exist_ok=True)
    return path


def age(path: Path, seconds: float) -> None:
    """Make ``path`` itself (never a link's target) last modified ``seconds`` ago."""
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def store(root: Path) -> DirectoryStore:
    return DirectoryStore(root, syncfs=None, writer_process=False)


def test_a_stale_temp_name_is_removed_by_the_next_claim_taken(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    where = claims(tmp_path)
    (where / TEMP).write_text('{"firedAt":"2026-07-07T09:00:00.000Z"}')
    age(where / TEMP, STALE + 5)
    with caplog.at_level(logging.INFO, logger="trio_routines"):
        assert store(tmp_path).claim_sync("daily", T0, T0).taken
    assert os.listdir(where) == [slot_name(T0)]
    assert [r.getMessage() for r in caplog.records] == [
        f"removed {where / TEMP}, a temp file left behind"
    ]


@pytest.mark.parametrize("seconds", [0, STALE - 5])
def test_a_temp_name_not_yet_stale_is_left_alone(tmp_path: Path, seconds: float) -> None:
    # Another replica may have made it a moment ago and be about to link it.
    where = claims(tmp_path)
    (where / TEMP).write_text("{}")
    age(where / TEMP, seconds)
    assert store(tmp_path).claim_sync("daily", T0, T0).taken
    assert sorted(os.listdir(where)) == [TEMP, slot_name(T0)]


def test_the_temp_name_a_failed_unlink_left_is_removed_once_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = claims(tmp_path)
    monkeypatch.setattr(safefile, "_UNNAMED", 0)  # claims are made under temp names
    failing = fail(monkeypatch, safefile, "unlink", errno.EIO, prefixed(claimfiles.NEW_CLAIM))
    state = store(tmp_path)
    assert state.claim_sync("daily", T0, T0).taken
    assert failing.hits == ["unlink"]
    (temp,) = set(os.listdir(where)) - {slot_name(T0)}
    monkeypatch.setattr(safefile, "os", os)
    assert state.claim_sync("daily", T0 + HOUR, T0 + HOUR).taken
    assert temp in os.listdir(where)  # fresh: left alone
    age(where / temp, STALE + 1)
    assert state.claim_sync("daily", T0 + 2 * HOUR, T0 + 2 * HOUR).taken
    assert temp not in os.listdir(where)
    # only the second name went: the claim it was linked to stays
    assert [fire.slot for fire in state.history_sync("daily")] == [T0, T0 + HOUR, T0 + 2 * HOUR]


@pytest.mark.parametrize(
    "name",
    [
        ".new-claim-notes",
        ".new-claim-0123456789ABCDEF",  # not ours: ours are lowercase
        ".new-claim-0123456789abcdef0",  # one digit too many
        ".new-claim-",
        "new-claim-0123456789abcdef",
        ".DS_Store",
    ],
)
def test_a_foreign_name_is_left_alone_however_old(tmp_path: Path, name: str) -> None:
    where = claims(tmp_path)
    (where / name).write_text("theirs")
    age(where / name, 10 * STALE)
    assert store(tmp_path).claim_sync("daily", T0, T0).taken
    assert sorted(os.listdir(where)) == sorted([name, slot_name(T0)])
    assert (where / name).read_text() == "theirs"


def test_a_stale_link_with_our_name_is_removed_and_its_target_never_touched(
    tmp_path: Path,
) -> None:
    where = claims(tmp_path)
    outside = tmp_path / "outside"
    outside.write_text("precious")
    os.symlink(outside, where / TEMP)
    age(where / TEMP, STALE + 5)
    before = os.stat(outside)
    assert store(tmp_path).claim_sync("daily", T0, T0).taken
    assert os.listdir(where) == [slot_name(T0)]
    assert outside.read_text() == "precious"
    after = os.stat(outside)
    assert (after.st_mtime_ns, after.st_nlink) == (before.st_mtime_ns, before.st_nlink)


def test_a_fresh_link_with_our_name_is_judged_by_its_own_age_not_its_targets(
    tmp_path: Path,
) -> None:
    where = claims(tmp_path)
    outside = tmp_path / "outside"
    outside.write_text("precious")
    age(outside, 10 * STALE)  # an old target behind a link made just now: not stale
    os.symlink(outside, where / TEMP)
    assert store(tmp_path).claim_sync("daily", T0, T0).taken
    assert sorted(os.listdir(where)) == [TEMP, slot_name(T0)]
    assert outside.read_text() == "precious"


def test_a_directory_with_our_name_is_left_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    where = claims(tmp_path)
    (where / TEMP).mkdir()
    (where / TEMP / "inside").write_text("theirs")
    age(where / TEMP, 10 * STALE)
    assert store(tmp_path).claim_sync("daily", T0, T0).taken
    assert sorted(os.listdir(where)) == [TEMP, slot_name(T0)]
    assert (where / TEMP / "inside").read_text() == "theirs"
    assert warnings(caplog) == []


@pytest.mark.parametrize(
    ("call", "code", "said"),
    [
        ("unlink", errno.EPERM, "EPERM: Operation not permitted"),  # it cannot be removed
        ("stat", errno.EACCES, "EACCES: Permission denied"),  # it cannot be looked at
    ],
)
def test_a_temp_name_left_for_a_fault_warns_once_naming_it_and_the_claims_go_on(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    call: str,
    code: int,
    said: str,
) -> None:
    where = claims(tmp_path)
    (where / TEMP).write_text("{}")
    age(where / TEMP, STALE + 5)
    fail(monkeypatch, leftovers, call, code, named(TEMP))
    state = store(tmp_path)
    assert state.claim_sync("daily", T0, T0).taken
    assert state.claim_sync("daily", T0 + HOUR, T0 + HOUR).taken  # tried again, said once
    assert warnings(caplog) == [
        f"could not remove {where / TEMP}, a temp file left behind: {said}: {where / TEMP}"
    ]
    assert sorted(os.listdir(where)) == [TEMP, slot_name(T0), slot_name(T0 + HOUR)]


def test_a_temp_name_removed_by_another_first_is_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = claims(tmp_path)
    (where / TEMP).write_text("{}")
    age(where / TEMP, STALE + 5)
    fail(monkeypatch, leftovers, "unlink", errno.ENOENT, named(TEMP))
    assert store(tmp_path).claim_sync("daily", T0, T0).taken
    assert warnings(caplog) == []


def test_claims_only_look_for_no_leftovers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The hot path: a directory of claims only is never searched for temp names.
    state = store(tmp_path)
    assert state.claim_sync("daily", T0, T0).taken
    looked: list[object] = []
    monkeypatch.setattr(leftovers.Leftovers, "remove", lambda *args: looked.append(args))
    assert state.claim_sync("daily", T0 + HOUR, T0 + HOUR).taken
    assert looked == []
    (claims(tmp_path) / ".DS_Store").write_text("")
    assert state.claim_sync("daily", T0 + 2 * HOUR, T0 + 2 * HOUR).taken
    assert len(looked) == 1


async def test_a_claim_written_in_a_batch_before_its_flush_removes_them_too(
    tmp_path: Path,
) -> None:
    where = claims(tmp_path)
    (where / TEMP).write_text("{}")
    age(where / TEMP, STALE + 5)
    flushed: list[int] = []
    state = DirectoryStore(tmp_path, syncfs=flushed.append, writer_process=False)
    try:
        assert (await state.claim("daily", T0, T0)).taken
    finally:
        await state.aclose()
    assert len(flushed) == 1
    assert os.listdir(where) == [slot_name(T0)]
