"""The state directory's small files written under a lock (gaps, first armed, wake-up turns,
usage) when their lock stays held: a fault that says once what could not be done and which
lock stayed locked.

The lock is held from a descriptor of this process's own, which conflicts with the writer's
as another process's would.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest

from trio_routines.agent import Usage
from trio_routines.errors import StateFault
from trio_routines.records import Gap, GapReason
from trio_routines.stores.directory import armed, gaps, ledgerfile, waketurns

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)

WRITERS: dict[str, tuple[ModuleType, str, str, Callable[[Path], object]]] = {
    "gap": (
        gaps,
        "gaps.lock",
        "could not record a gap of 'r'",
        lambda root: gaps.record_gap_sync(root, "r", Gap(T0, T0, 1, GapReason.PAUSED), None),
    ),
    "first armed": (
        armed,
        "gaps.lock",
        "could not keep when the routines were first armed",
        lambda root: armed.first_armed_sync(root, ["r"], T0),
    ),
    "wake-up turn": (
        waketurns,
        "wake-turns.lock",
        "could not record a wake-up turn",
        lambda root: waketurns.note_wake_turn_sync(root, "s", T0),
    ),
    "usage": (
        ledgerfile,
        "usage.lock",
        "could not record the usage of routine 'r'",
        lambda root: ledgerfile.record_usage_sync(
            root, "routine", "r", T0, Usage(input_tokens=1, output_tokens=1)
        ),
    ),
}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_lock_that_stays_held_is_one_fault_naming_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    module, lock_name, what, write = WRITERS[writer]
    lock = tmp_path / "schedule" / lock_name
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    monkeypatch.setattr(module, "LOCK_SECONDS", 0.05)
    held = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(StateFault) as caught:
            write(tmp_path)
    finally:
        os.close(held)
    assert str(caught.value) == f"{what}: {lock} stayed locked for 0.05 s"
    write(tmp_path)  # released: works again
