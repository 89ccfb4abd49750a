"""Claim files' batches, pinned: what one worker-thread call of claims or settles does.

A batch opens ``<root>/schedule/claims`` once (making it, for claims) and writes every item
through that descriptor: no item opens the state directory by its path again, so one that can
no longer be opened that way (its path's permissions changed meanwhile) fails none of them.
A settle in a batch never waits for a claim's lock that another settle holds, even a lock that
would come free at once: it is answered :class:`Contended` and writes nothing (the store then
waits for it in a thread of its own). A claim whose descriptor fails to close once it is
durable is taken all the same.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from oserrors import FailingOS, fail

from trio_routines.instants import slot_name
from trio_routines.records import ClaimResult, ClaimStatus, Outcome
from trio_routines.stores import safefile
from trio_routines.stores.directory import DirectoryStore, claimfiles
from trio_routines.stores.directory.claimbatch import ClaimItem, Contended, SettleItem
from trio_routines.stores.directory.claimfiles import ClaimFiles
from trio_routines.stores.directory.settlefiles import SettleFiles

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
NAME = slot_name(T0)
ROUTINES = ("daily", "weekly")


def claims(root: Path, routine: str = "daily") -> Path:
    return root / "schedule" / "claims" / routine


def files_of(root: Path) -> ClaimFiles:
    return ClaimFiles(root, keep=1, lock_timeout=20.0, syncfs=None)


def root_reopens_refused(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """Every open of the state directory by its path after the first fails (EACCES)."""
    opened = 0

    def reopened(path: Any, *args: Any, **kw: Any) -> bool:
        nonlocal opened
        if path != root:
            return False
        opened += 1
        return opened > 1

    fail(monkeypatch, safefile, "open", errno.EACCES, reopened)


@pytest.mark.parametrize("made", [False, True], ids=["new", "existing"])
def test_a_batch_writes_every_item_through_the_claims_directory_it_opened_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made: bool
) -> None:
    if made:
        for routine in ROUTINES:
            claims(tmp_path, routine).mkdir(parents=True)
    files = files_of(tmp_path)
    root_reopens_refused(monkeypatch, tmp_path)
    taken: list[ClaimItem] = [(routine, T0, T0, None) for routine in ROUTINES]
    claimed, held = files.create_each(taken)
    assert [answer.unwrap() for answer in claimed] == [
        (ClaimResult(ClaimStatus.TAKEN, NAME), None)
    ] * 2
    assert held == {}  # durable already: no syncfs
    root_reopens_refused(monkeypatch, tmp_path)  # counted afresh: the settles' batch
    settled: list[SettleItem] = [
        (routine, T0, Outcome.COMPLETED, 1, False, None, None, None) for routine in ROUTINES
    ]
    written, held = SettleFiles(files).write_each(settled)
    assert [answer.unwrap() for answer in written] == [(True, None)] * 2
    assert held == {}
    monkeypatch.undo()
    store = DirectoryStore(tmp_path, syncfs=None, writer_process=False)
    for routine in ROUTINES:
        (fire,) = store.history_sync(routine)
        assert (fire.slot, fire.outcome) == (T0, Outcome.COMPLETED)


class FreedAtFirstWait:
    """safefile's ``time``, whose first sleep lets another settle's lock go."""

    def __init__(self, holder: int) -> None:
        self.holder = holder

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        fcntl.flock(self.holder, fcntl.LOCK_UN)


def test_a_batchs_settle_of_a_locked_claim_is_contended_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = files_of(tmp_path)
    files.create("daily", T0, T0)
    path = claims(tmp_path) / NAME
    stamp = path.read_bytes()
    holder = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)  # another settle of it, in another process
        # Were the batch to wait for the lock at all, it would get it: it comes free then.
        monkeypatch.setattr(safefile, "time", FreedAtFirstWait(holder))
        item: SettleItem = ("daily", T0, Outcome.COMPLETED, 1, False, None, None, None)
        (answer,), held = SettleFiles(files).write_each([item])
    finally:
        os.close(holder)
    assert isinstance(answer.error, Contended)
    assert held == {}
    assert path.read_bytes() == stamp  # not settled by the batch: the store settles it apart


class LateCloseError(FailingOS):
    """``os`` whose close of a regular file closes it, then reports a late write error."""

    def __init__(self) -> None:
        super().__init__()
        self.failed: list[int] = []

    def close(self, fd: int) -> None:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        os.close(fd)
        if regular:  # the claim's own descriptor, not its directory's
            self.failed.append(fd)
            raise OSError(errno.EIO, os.strerror(errno.EIO))


def test_a_claim_whose_close_fails_once_durable_is_still_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path, syncfs=None, writer_process=False)
    proxy = LateCloseError()
    monkeypatch.setattr(claimfiles, "os", proxy)
    result = store.claim_sync("daily", T0, T0)
    assert (result.status, result.newest) == (ClaimStatus.TAKEN, NAME)
    assert len(proxy.failed) == 1
    (fire,) = store.history_sync("daily")
    assert (fire.slot, fire.outcome) == (T0, None)
