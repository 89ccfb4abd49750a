"""Gaps in the state directory: one small JSON file per routine.

    <root>/schedule/gaps/<routine>    a JSON array of gaps, oldest first (converter.py's shape)
    <root>/schedule/gaps.lock         ours: serializes gap writers across processes

Outside ``schedule/claims/``, so the original scheduler (and any reader of the 0.22 layout)
never sees them: it reads claims only. A change reads the routine's file, applies
:func:`trio_routines.gaps.add_gap` and writes the result to a temp file (fsynced) renamed into
place (the directory fsynced), all under an exclusive ``flock`` of ``gaps.lock`` taken with a
bound, so two processes never lose each other's gap. A ``store`` gap is written only when the
routine's claims directory holds no claim from its first slot to its last. Files are opened as
every state file is (safefile.py); a file that is not ours (a link, a FIFO, too large, not JSON)
reads as no gaps with a warning, and an entry that is not a gap is left out. The next write
keeps such a file aside first, as ``<routine>.corrupt-<instant>-<hex>`` (a hard link to the
entry itself: a link's target is never touched), so that what could still be read of it by
hand is not written over.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from ...claims import claim_names
from ...converter import dumps, gap_from_json, gap_to_json, loads
from ...errors import StateFault
from ...gaps import add_gap
from ...instants import slot_name
from ...names import check_name
from ...records import Gap, GapReason
from ..safefile import (
    Refused,
    describe,
    fsync,
    link_aside,
    lock_within,
    open_dirs,
    open_lock_file,
    read_file,
    replace_file,
)

log = logging.getLogger("trio_routines")

#: A gaps file is a few hundred records of some 120 bytes: anything larger is not ours.
MAX_GAPS_BYTES = 256 * 1024
LOCK_SECONDS = 10.0

#: What was last said of each damaged gaps file, by its path: a read of the same damage does
#: not say it again (a command reads a routine's gaps more than once), a read of a different
#: damage does, and a clean read forgets the file.
_said: dict[str, list[str]] = {}


def gaps_sync(root: Path, routine: str) -> list[Gap]:
    """The recorded gaps of ``routine``, oldest first."""
    name = check_name(routine)
    where = root / "schedule" / "gaps"
    try:
        directory = open_dirs(root, ("schedule", "gaps"))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StateFault(f"the gaps of {routine!r} are unreadable: {describe(exc)}") from None
    try:
        return _read(directory, name, where / name)
    except OSError as exc:
        raise StateFault(f"the gaps of {routine!r} are unreadable: {describe(exc)}") from None
    finally:
        os.close(directory)


def _read(directory: int, name: str, path: Path) -> list[Gap]:
    return _read_whole(directory, name, path)[0]


def _read_whole(directory: int, name: str, path: Path) -> tuple[list[Gap], bool]:
    """The gaps, and whether the file held anything else (damage: not all of it was read)."""
    damage: list[str] = []
    gaps = _parse(directory, name, path, damage)
    if not damage:
        _said.pop(str(path), None)
    elif _said.get(str(path)) != damage:
        _said[str(path)] = damage
        for line in damage:
            log.warning("%s", line)
    return gaps, bool(damage)


def _parse(directory: int, name: str, path: Path, damage: list[str]) -> list[Gap]:
    """The gaps that can be read; what could not, added to ``damage`` in words."""
    try:
        data = read_file(directory, name, path, MAX_GAPS_BYTES)
    except FileNotFoundError:
        return []
    except Refused as exc:
        damage.append(f"ignoring the gaps in {path}: {exc}")
        return []
    try:
        raw = loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raw = None
    if not isinstance(raw, list):
        damage.append(f"ignoring the gaps in {path}: not a JSON array of gaps")
        return []
    gaps = []
    for entry in raw:
        try:
            gaps.append(gap_from_json(entry))
        except (TypeError, ValueError) as exc:
            damage.append(f"ignoring a gap in {path} that cannot be read: {exc}")
    gaps.sort(key=lambda gap: gap.last)
    return gaps


def _keep_aside(directory: int, name: str, where: Path) -> None:
    """Link the damaged gaps file ``name`` aside (the entry itself, a link as a link), before
    a write replaces it: readers, who take no lock, see it or the new file, never neither."""
    log.warning(
        "kept the damaged gaps file %s as %s", where / name, link_aside(directory, name, where)
    )


def record_gap_sync(root: Path, routine: str, gap: Gap, extends: datetime | None) -> bool:
    """Add ``gap`` to ``routine``'s gaps (see :func:`add_gap`); durable when it returns True."""
    name = check_name(routine)
    where = root / "schedule" / "gaps"
    what = f"could not record a gap of {routine!r}"
    try:
        with locked_schedule(root, "gaps.lock", what, LOCK_SECONDS):
            if gap.reason is GapReason.STORE and _claimed_within(root, name, gap):
                return False
            directory = open_dirs(root, ("schedule", "gaps"), create=True)
            try:
                gaps, damaged = _read_whole(directory, name, where / name)
                changed = add_gap(gaps, gap, extends)
                if changed is None:
                    return False
                if damaged:
                    _keep_aside(directory, name, where)
                _replace(directory, name, where, dumps([gap_to_json(g) for g in changed]))
                return True
            finally:
                os.close(directory)
    except StateFault:
        raise  # the lock's, which says what and where already
    except OSError as exc:
        raise StateFault(f"could not record a gap of {routine!r}: {describe(exc)}") from None


def _claimed_within(root: Path, name: str, gap: Gap) -> bool:
    """Whether a claim of ``name`` exists from ``gap``'s first slot to its last (an entry of
    its claims directory named as a slot: whatever it holds, it is a claim)."""
    try:
        directory = open_dirs(root, ("schedule", "claims", name))
    except FileNotFoundError:
        return False
    try:
        entries = os.listdir(directory)
    finally:
        os.close(directory)
    first, last = slot_name(gap.first), slot_name(gap.last)
    return any(first <= entry <= last for entry in claim_names(entries))


@contextmanager
def locked_schedule(root: Path, lock: str, what: str, seconds: float) -> Iterator[int]:
    """The opened ``schedule`` directory, while the ``flock`` of ``schedule/<lock>`` is held:
    had within ``seconds``, else a :class:`StateFault` saying ``what`` and that the lock
    stayed locked. ``OSError`` when the directory or the lock file cannot be opened."""
    schedule = open_dirs(root, ("schedule",), create=True)
    try:
        path = root / "schedule" / lock
        fd = open_lock(schedule, path)
        try:
            if not lock_within(fd, seconds):
                raise StateFault(f"{what}: {path} stayed locked for {seconds:g} s")
            yield schedule
        finally:
            os.close(fd)  # releases the flock
    finally:
        os.close(schedule)


def open_lock(schedule: int, path: Path) -> int:
    """The lock file, created if missing (:func:`open_lock_file`)."""
    return open_lock_file(schedule, path.name, path)


def _replace(directory: int, name: str, where: Path, text: str) -> None:
    replace_file(directory, name, where, text.encode("utf-8", errors="surrogatepass"), ".gaps-")
    fsync(directory, where)
