"""Claims of one routine made at once by several processes on one state directory: a slot is
taken only if no later slot's claim was named before it, whatever the interleaving.

The listing of a routine's claims, the decision and the naming of the new claim are one step
among processes (a ``flock`` of the routine's claim directory): between one process's listing
and its naming of an older slot, another's naming of a newer one left the older taken after
the newer, a stale slot run. Each claimant here opens the directory itself, as a process
does: a ``flock`` is the open file description's, so two of them in one process contend as
two processes do, and the interleaving can be set up exactly.
"""

from __future__ import annotations

import fcntl
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from oserrors import locked_elsewhere

from trio_routines.errors import StateFault
from trio_routines.instants import slot_name
from trio_routines.records import ClaimStatus
from trio_routines.stores.directory import DirectoryStore

BASE = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_claim_whose_routine_another_process_keeps_locked_is_refused_at_the_bound(
    tmp_path: Path,
) -> None:
    store = DirectoryStore(tmp_path, lock_timeout=0.05)
    assert store.claim_sync("r", BASE, BASE).taken  # its directory exists
    later = BASE + timedelta(minutes=1)
    with locked_elsewhere(store.claim_dir("r")):  # another process deciding, and stalled
        with pytest.raises(StateFault) as refused:
            store.claim_sync("r", later, later)
        assert str(refused.value) == (
            "could not claim slot 2026-01-01T00:01:00.000Z of 'r': its routine's claims stayed "
            "locked by another process (a stalled disk?)"
        )
        assert sorted(os.listdir(store.claim_dir("r"))) == [slot_name(BASE)]
    assert store.claim_sync("r", later, later).taken  # let go of: claimed at once


def test_a_newer_slot_waits_while_another_claimant_decides_an_older_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two claimants of one routine, each with a directory opened of its own (as two processes
    # have): the first stops between its listing and its naming of 09:01 while the second
    # claims 09:02. The second must wait, so that 09:01 is not named after 09:02.
    import threading

    from trio_routines.stores.directory import claimfiles

    listed, go = threading.Event(), threading.Event()
    gate = claimfiles.claim_gate

    def stopping(entries: list[str], keep: int) -> object:
        decided = gate(entries, keep)
        if threading.current_thread().name == "older":
            listed.set()
            go.wait(30)
        return decided

    named: list[str] = []  # the claims in the order they were named
    make = claimfiles.create_whole

    def naming(*args: Any) -> int:
        fd = make(*args)
        named.append(args[2])
        return fd

    first, second = DirectoryStore(tmp_path), DirectoryStore(tmp_path)
    assert first.claim_sync("r", BASE, BASE).taken
    monkeypatch.setattr(claimfiles, "claim_gate", stopping)
    monkeypatch.setattr(claimfiles, "create_whole", naming)
    older, newer = BASE + timedelta(minutes=1), BASE + timedelta(minutes=2)
    results: dict[str, ClaimStatus] = {}

    def claim(store: DirectoryStore, slot: datetime) -> None:
        results[threading.current_thread().name] = store.claim_sync("r", slot, slot).status

    threads = [
        threading.Thread(target=claim, args=(first, older), name="older"),
        threading.Thread(target=claim, args=(second, newer), name="newer"),
    ]
    threads[0].start()
    assert listed.wait(30)
    threads[1].start()
    threads[1].join(0.5)  # without the lock it is done by now, 09:02 named first
    go.set()
    for thread in threads:
        thread.join(30)
    assert results == {"older": ClaimStatus.TAKEN, "newer": ClaimStatus.TAKEN}
    assert named == [slot_name(older), slot_name(newer)]


def test_a_file_system_without_locks_is_one_state_fault_and_nothing_claimed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from trio_routines.stores.directory import claimfiles

    store = DirectoryStore(tmp_path)
    assert store.claim_sync("r", BASE, BASE).taken

    def no_locks(fd: int, seconds: float, *, first: float) -> bool:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(claimfiles, "lock_within", no_locks)
    later = BASE + timedelta(minutes=1)
    with pytest.raises(StateFault) as refused:
        store.claim_sync("r", later, later)
    assert str(refused.value) == (
        f"claims of 'r' are unusable in {store.claim_dir('r')}: ENOLCK: No locks available"
    )
    assert os.listdir(store.claim_dir("r")) == [slot_name(BASE)]


def test_the_lock_is_let_go_before_the_claim_waits_for_its_flush(tmp_path: Path) -> None:
    # With group commit the claim directory's descriptor goes on to the flush, open for as
    # long as it takes: the lock must not go with it, or every other claimant of the routine
    # (another replica, the next batch) would wait for that flush.
    from trio_routines.stores.directory.claimfiles import ClaimFiles

    files = ClaimFiles(tmp_path, 7, 1.0, syncfs=object())  # a flush pending after each claim
    result, pending = files.create("r", BASE, BASE)
    assert result.taken
    assert pending is not None
    other = os.open(files.claim_dir("r"), os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free, though the flush waits
    finally:
        os.close(other)
        os.close(pending.fd)
