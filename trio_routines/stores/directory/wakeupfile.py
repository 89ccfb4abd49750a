"""``schedule/wakeups.lock`` and ``schedule/wakeups.json``: the writers' lock, and the file an
earlier version kept its pending wake-ups in.

Writers of the wake-up store take an exclusive ``flock`` on ``wakeups.lock`` (an earlier
version takes the same lock, so a process of each can share a directory without losing each
other's updates). The pending wake-ups themselves live in ``wakeups.journal``
(wakeupjournal.py); ``wakeups.json`` -- one JSON array, the layout of an earlier version -- is
only ever read, to take it over (wakeuplog.py), and then moved aside.

Damage is reported and kept, never fatal and never silently dropped: when a ``wakeups.json``
holds something that cannot be used -- not JSON (nesting too deep included), not an array,
malformed entries, or a link, a FIFO, a device or larger than :data:`MAX_BYTES` (the most an
earlier version wrote) -- it warns, the usable entries are taken over, and the entry as found
is moved aside as ``wakeups.json.corrupt-<instant>`` (a rename of the entry itself: a link's
target is never touched, a FIFO is never opened). A usable one is moved aside as
``wakeups.json.imported-<instant>``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from ...converter import dumps, loads, wakeup_from_json
from ...errors import StateFault
from ...instants import slot_name
from ...records import Wakeup
from ...wakeups import check_stored
from ..safefile import (
    Refused,
    at,
    describe,
    fsync,
    lock_within,
    open_dirs,
    open_file,
    open_lock_file,
    read_fd,
)

log = logging.getLogger("trio_routines")

WAKEUPS = "wakeups.json"
LOCK = "wakeups.lock"
#: The most an earlier version wrote to ``wakeups.json``; a larger one is refused unread.
MAX_BYTES = 16 * 1024 * 1024

# The lock files this process holds through a WakeupFile, by (device, inode): a writer that
# times out can then say truthfully whether the holder is this process (another store object
# on the same directory) or another one.
_held: set[tuple[int, int]] = set()
_held_guard = threading.Lock()


class WakeupFile:
    """The lock of ``<root>/schedule``'s wake-up store, and its ``wakeups.json``."""

    def __init__(self, root: Path, lock_timeout: float) -> None:
        self.root = root
        self.lock_timeout = lock_timeout
        self.schedule = root / "schedule"
        self.path = self.schedule / WAKEUPS
        self.lock_path = self.schedule / LOCK

    @contextlib.contextmanager
    def locked(self) -> Iterator[int]:
        """Hold the writers' lock; yields the opened ``schedule`` directory."""
        try:
            directory = open_dirs(self.root, ("schedule",), create=True)
        except OSError as exc:
            raise StateFault(
                f"cannot lock the wake-up store {self.lock_path}: {describe(exc)}"
            ) from None
        try:
            fd = self._open_lock(directory)
            try:
                identity = self._acquire(fd)
                with _held_guard:
                    _held.add(identity)
                try:
                    yield directory
                finally:
                    with _held_guard:
                        _held.discard(identity)
            finally:
                os.close(fd)  # closing the last descriptor releases the lock
        finally:
            os.close(directory)

    def _open_lock(self, directory: int) -> int:
        try:
            return open_lock_file(directory, LOCK, self.lock_path)
        except OSError as exc:
            raise StateFault(
                f"cannot lock the wake-up store {self.lock_path}: {describe(exc)}"
            ) from None

    def _acquire(self, fd: int) -> tuple[int, int]:
        """Lock ``fd``; the lock file's (device, inode)."""
        try:
            info = os.fstat(fd)
            locked = lock_within(fd, self.lock_timeout)
        except OSError as exc:
            raise StateFault(
                f"cannot lock the wake-up store {self.lock_path}: {describe(exc)}"
            ) from None
        identity = (info.st_dev, info.st_ino)
        if not locked:
            with _held_guard:
                ours = identity in _held
            holder = (
                "another store object of this process on the same directory holds it"
                if ours
                else "another process holds it"
            )
            raise StateFault(
                f"the wake-up store {self.lock_path} stayed locked for "
                f"{self.lock_timeout:g}s — {holder}"
            )
        return identity

    def present(self, directory: int) -> bool:
        """Whether anything (of any kind) is at ``wakeups.json``."""
        try:
            at(self.path, lambda: os.lstat(WAKEUPS, dir_fd=directory))
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise self.unreadable(exc) from None
        return True

    def load(self, directory: int) -> tuple[list[Wakeup], bool]:
        """The valid entries of ``wakeups.json``, and whether something in it could not be used."""
        try:
            fd = self._open(directory)
        except FileNotFoundError:
            return [], False
        except Refused as exc:
            log.warning("unusable wake-up store: %s — ignoring it", describe(exc))
            return [], True
        except OSError as exc:
            raise self.unreadable(exc) from None
        try:
            raw = read_fd(fd, self.path, MAX_BYTES)
        except Refused as exc:  # grew past the bound while read
            log.warning("unusable wake-up store: %s — ignoring it", describe(exc))
            return [], True
        except OSError as exc:
            raise self.unreadable(exc) from None
        finally:
            os.close(fd)
        return self._parse(raw)

    def _open(self, directory: int) -> int:
        return open_file(directory, WAKEUPS, self.path, os.O_RDONLY, MAX_BYTES)

    def unreadable(self, exc: OSError) -> StateFault:
        return unreadable_state(self.path, exc)

    def _parse(self, raw: bytes) -> tuple[list[Wakeup], bool]:
        try:
            data = loads(raw.decode("utf-8"))
        except ValueError as exc:  # not UTF-8, not JSON, or nested too deeply
            log.warning("corrupt state file %s — ignoring: %s", self.path, exc)
            return [], True
        if not isinstance(data, list):
            log.warning(
                "wakeups store is not an array — ignoring it: %s",
                raw[:80].decode("utf-8", "replace"),
            )
            return [], True
        entries, damaged = [], False
        for item in data:
            try:
                wakeup = check_stored(wakeup_from_json(item))
            except (ValueError, TypeError):
                log.warning("dropping a malformed wake-up entry: %s", dumps(item)[:200])
                damaged = True
                continue
            entries.append(wakeup)
        return entries, damaged

    def retire(self, directory: int, damaged: bool) -> None:
        """Move ``wakeups.json`` aside (its entries are taken over), durably."""
        kind = "corrupt" if damaged else "imported"
        aside = f"{WAKEUPS}.{kind}-{slot_name(datetime.now(UTC))}-{secrets.token_hex(2)}"
        try:
            at(
                self.schedule / aside,
                lambda: os.rename(WAKEUPS, aside, src_dir_fd=directory, dst_dir_fd=directory),
            )
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StateFault(
                f"could not move the taken-over wake-up store {self.path} aside: {describe(exc)}"
            ) from None
        try:
            fsync(directory, self.schedule)
        except OSError as exc:  # moved: only its durability against a power loss is in doubt
            log.warning(
                "moved %s aside but could not fsync its directory: %s", self.path, describe(exc)
            )
        if damaged:
            log.warning(
                "kept the unusable wake-up store's original content as %s", self.schedule / aside
            )


def unreadable_state(path: Path, exc: OSError) -> StateFault:
    """The fault of a wake-up state file (``wakeups.json``, the journal) that cannot be read."""
    return StateFault(
        f"schedule state {path} is unreadable: {describe(exc)} — fix the permissions or the disk"
    )


def unwritable_state(path: Path, exc: OSError) -> StateFault:
    """The fault of a wake-up journal that cannot be opened to be written."""
    return StateFault(
        f"schedule state {path} cannot be opened for writing: {describe(exc)} — fix the "
        "permissions or the disk"
    )
