"""Hostile input in ``schedule/armed.json`` (when each routine was first armed): whatever is
planted there is refused without blocking or following it, reads as nothing with a warning,
and is replaced by the next write."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
from test_hostile_state import DEEP, KINDS, Victim, plant

from trio_routines import StateFault
from trio_routines.stores.directory import DirectoryStore
from trio_routines.stores.directory.armed import MAX_ARMED_BYTES

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)


def armed_file(tmp_path: Path) -> Path:
    schedule = tmp_path / "state" / "schedule"
    schedule.mkdir(parents=True)
    return schedule / "armed.json"


@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "symlink"])
async def test_a_planted_armed_file_is_refused_then_replaced(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = armed_file(tmp_path)
    victim = Victim(tmp_path / "victim", b'{"r": "2020-01-01T00:00:00.000Z"}')
    plant(kind, path, victim.path)
    async with DirectoryStore(tmp_path / "state") as store:
        with trio.fail_after(5):  # a FIFO opened for reading would block for ever
            assert await store.first_armed(["r"], T0) == {"r": T0}
    assert KINDS[kind] in caplog.text
    assert victim.untouched()
    assert path.is_file()
    assert not path.is_symlink()
    assert json.loads(path.read_text()) == {"r": "2026-07-07T10:00:00.000Z"}


@pytest.mark.parametrize(
    ("content", "warning"),
    [
        (b"not json", "not a JSON object"),
        (b"[1, 2]", "not a JSON object"),
        (DEEP.encode(), "not a JSON object"),
        (b'{"r": 7, "../x": "2020-01-01T00:00:00.000Z", "s": "yesterday"}', "the entry of"),
        (b"\xff\xfe", "not a JSON object"),
    ],
)
async def test_garbage_in_the_armed_file_reads_as_nothing_and_is_replaced(
    tmp_path: Path, content: bytes, warning: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = armed_file(tmp_path)
    path.write_bytes(content)
    async with DirectoryStore(tmp_path / "state") as store:
        assert await store.first_armed(["r", "s"], T0) == {"r": T0, "s": T0}
        assert await store.first_armed(["r"], T0 + timedelta(hours=1)) == {"r": T0}
    assert warning in caplog.text
    assert set(json.loads(path.read_text())) == {"r", "s"}


async def test_good_entries_survive_beside_bad_ones(tmp_path: Path) -> None:
    path = armed_file(tmp_path)
    path.write_text('{"old": "2020-01-01T00:00:00.000Z", "bad": [1]}')
    async with DirectoryStore(tmp_path / "state") as store:
        armed = await store.first_armed(["old", "bad"], T0)
    assert armed == {"old": datetime(2020, 1, 1, tzinfo=UTC), "bad": T0}


async def test_an_armed_file_over_the_bound_is_refused_unread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = armed_file(tmp_path)
    with path.open("wb") as handle:
        handle.truncate(MAX_ARMED_BYTES + 1)  # sparse: no disk spent
    async with DirectoryStore(tmp_path / "state") as store:
        assert await store.first_armed(["r"], T0) == {"r": T0}
    assert "ignoring" in caplog.text


async def test_a_directory_in_its_place_is_a_fault(tmp_path: Path) -> None:
    path = armed_file(tmp_path)
    plant("directory", path)
    async with DirectoryStore(tmp_path / "state") as store:
        with pytest.raises(StateFault, match="first armed"):
            await store.first_armed(["r"], T0)  # the boot logs it and goes on (test_gaps_armed)
    assert path.is_dir()
