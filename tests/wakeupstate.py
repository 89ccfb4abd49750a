"""Helpers for the tests of the state directory's wake-up store: ``wakeups.journal`` (and
``wakeups.json``, the layout an earlier version wrote, which the store takes over)."""

from __future__ import annotations

import fcntl
import itertools
import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from trio_routines.converter import dumps, loads
from trio_routines.instants import format_iso
from trio_routines.stores import safefile
from trio_routines.wakeups import WakeupRequest

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
LATER = T0 + timedelta(hours=1)
EIO = "EIO: Input/output error"
HEX16 = "[0-9a-f]{16}"


def entry(id: str, prompt: str = "p", session: str = "s", at: datetime = LATER) -> dict[str, Any]:
    return {"id": id, "session": session, "prompt": prompt, "fireAt": format_iso(at)}


def request(prompt: str = "p") -> WakeupRequest:
    return WakeupRequest(session="s", prompt=prompt, fire_at=LATER)


def state(root: Path, content: bytes | list[dict[str, Any]] | None = None) -> Path:
    """``root/schedule`` holding ``content`` as wakeups.json (an array is written as JSON)."""
    schedule = root / "schedule"
    schedule.mkdir(parents=True, exist_ok=True)
    if content is not None:
        data = content if isinstance(content, bytes) else dumps(content).encode()
        (schedule / "wakeups.json").write_bytes(data)
    return schedule


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def ids(entries: list[Any]) -> list[str]:
    return [w.id for w in entries]


ASIDE = r"wakeups\.json\.corrupt-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z-[0-9a-f]{4}"
ASIDE_JOURNAL = r"wakeups\.journal\.corrupt-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z-[0-9a-f]{4}"
IMPORTED = "wakeups.json.imported-*"
IMPORTED_ASIDE = r"wakeups\.json\.imported-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z-[0-9a-f]{4}"


def unreadable(path: Path, detail: str) -> str:
    """The fault of a wake-up store file that cannot be read: ``detail`` is what failed."""
    return f"schedule state {path} is unreadable: {detail} — fix the permissions or the disk"


def unwritable(path: Path, detail: str) -> str:
    """The fault of a wake-up journal that cannot be opened to be written: ``detail`` is why."""
    return (
        f"schedule state {path} cannot be opened for writing: {detail} — fix the permissions "
        "or the disk"
    )


def hold_lock(schedule: Path) -> int:
    """Take the writers' lock as another process would (a lock on its own open file)."""
    fd = os.open(schedule / "wakeups.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def lock_waits_give_up_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read of a lock wait's clock is 10 s later than the last: a wait of 10 s gives up
    at its first retry, however loaded the machine (a caller's own bound on the wait's
    thread, twice the wait in real time, is never reached first)."""
    clock = itertools.count(0.0, 10.0)
    monkeypatch.setattr(
        safefile, "time", SimpleNamespace(monotonic=lambda: next(clock), sleep=lambda _s: None)
    )


def journal(root: Path) -> list[dict[str, Any]]:
    """The complete lines of ``root/schedule/wakeups.journal``, parsed (none if it is absent)."""
    path = root / "schedule" / "wakeups.journal"
    if not path.exists():
        return []
    data = path.read_bytes()
    return [loads(raw) for raw in data[: data.rfind(b"\n") + 1].decode().splitlines()]


def pending(root: Path) -> list[str]:
    """The ids pending in the journal, in stored order (replaying it as the store does)."""
    order: dict[str, int] = {}
    for op in journal(root):
        if op["op"] == "add":
            order[op["wakeup"]["id"]] = op["n"]
        elif op["op"] == "del":
            del order[op["id"]]
    return sorted(order, key=order.__getitem__)
