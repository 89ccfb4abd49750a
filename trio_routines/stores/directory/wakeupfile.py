"""``schedule/wakeups.json``: the pending wake-ups of a state directory.

The file is one JSON array, rewritten whole: a temp file under an unpredictable name
(``O_EXCL``), fsync, rename over ``wakeups.json`` (both relative to the opened ``schedule``
directory, so no link in the path is followed), fsync of the directory. Writers take an
exclusive ``flock`` on ``wakeups.lock`` first (the rename replaces the inode, so the JSON file
itself cannot carry the lock), so two processes can add, take and cancel wake-ups without
losing each other's updates.

Damage is reported and kept, never fatal and never silently dropped: when a load finds
something it cannot use -- not JSON (nesting too deep included), not an array, malformed
entries, or a ``wakeups.json`` that is a link, a FIFO, a device or larger than
:data:`MAX_BYTES` -- it warns, goes on with the usable entries, and the next write first keeps
the original entry aside as ``wakeups.json.corrupt-<instant>`` (a hard link of the entry
itself: a link's target is never touched, a FIFO is never opened).

Lock-free reads (the wake loop's poll, ``list``) may answer from a parse kept from an earlier
read, keyed on the file's inode, size and times. File times can be as coarse as a clock tick
and inode numbers are reused, so the key is trusted only for a file last changed well before it
was read (the "racily clean" rule): any later change then shows in the times.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from ...converter import dumps, loads, wakeup_from_json, wakeup_to_json
from ...errors import StateFault
from ...instants import slot_name
from ...records import Wakeup
from ...wakeups import check_stored
from ..safefile import (
    Refused,
    at,
    create_file,
    describe,
    fsync,
    lock_within,
    open_dirs,
    open_file,
    read_fd,
    replace_file,
)

log = logging.getLogger("trio_routines")

WAKEUPS = "wakeups.json"
LOCK = "wakeups.lock"
TEMP_PREFIX = "wakeups.json.tmp-"
#: 10,000 pending wake-ups with 1 KiB prompts fit with room to spare; more is refused.
MAX_BYTES = 16 * 1024 * 1024
RACY_NS = 2_000_000_000  # a file changed this recently may change again unseen by its times

Key = tuple[int, int, int, int]

# The lock files this process holds through a WakeupFile, by (device, inode): a writer that
# times out can then say truthfully whether the holder is this process (another store object
# on the same directory) or another one.
_held: set[tuple[int, int]] = set()
_held_guard = threading.Lock()


class TooLarge(StateFault):
    """Raised when a write would make ``wakeups.json`` larger than :data:`MAX_BYTES`."""


class WakeupFile:
    """Load, lock and rewrite ``<root>/schedule/wakeups.json``."""

    def __init__(self, root: Path, lock_timeout: float) -> None:
        self.root = root
        self.lock_timeout = lock_timeout
        self.schedule = root / "schedule"
        self.path = self.schedule / WAKEUPS
        self.lock_path = self.schedule / LOCK
        # (key, entries, damaged, whether the key can be trusted): see load
        self._parsed: tuple[Key, tuple[Wakeup, ...], bool, bool] | None = None
        self._refused: str | None = None  # the last refusal warned about (polls repeat it)

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
            try:
                return open_file(directory, LOCK, self.lock_path, os.O_RDWR, 1 << 20)
            except FileNotFoundError:
                pass
            try:
                return create_file(directory, LOCK, self.lock_path)
            except FileExistsError:  # created meanwhile by another writer
                return open_file(directory, LOCK, self.lock_path, os.O_RDWR, 1 << 20)
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

    def load(
        self, directory: int | None = None, *, cached: bool = False
    ) -> tuple[list[Wakeup], bool]:
        """The valid entries, and whether something stored could not be used.

        With ``cached``, a parse kept from an earlier read may answer (see the module doc).
        Writers pass the ``schedule`` directory they hold locked and never use the cache.
        """
        try:
            fd = self._open(directory)
        except FileNotFoundError:
            return [], False
        except Refused as exc:
            if str(exc) != self._refused:
                self._refused = str(exc)
                log.warning("unusable wake-up store: %s — ignoring it", describe(exc))
            return [], True
        except OSError as exc:
            raise self._unreadable(exc) from None
        try:
            info = os.fstat(fd)
            key = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
            kept = self._parsed
            if cached and kept is not None and kept[0] == key and kept[3]:
                return list(kept[1]), kept[2]
            read_at = time.time_ns()
            raw = read_fd(fd, self.path, MAX_BYTES)
        except Refused as exc:  # grew past the bound while read
            log.warning("unusable wake-up store: %s — ignoring it", describe(exc))
            return [], True
        except OSError as exc:
            raise self._unreadable(exc) from None
        finally:
            os.close(fd)
        self._refused = None
        entries, damaged = self._parse(raw)
        settled = max(info.st_mtime_ns, info.st_ctime_ns) < read_at - RACY_NS
        self._parsed = (key, tuple(entries), damaged, settled)
        return entries, damaged

    def _open(self, directory: int | None) -> int:
        if directory is not None:
            return open_file(directory, WAKEUPS, self.path, os.O_RDONLY, MAX_BYTES)
        try:
            directory = open_dirs(self.root, ("schedule",))
        except FileNotFoundError:
            raise
        except OSError as exc:  # a refused schedule directory is a fault, not a damaged file
            raise self._unreadable(exc) from None
        try:
            return open_file(directory, WAKEUPS, self.path, os.O_RDONLY, MAX_BYTES)
        finally:
            os.close(directory)

    def _unreadable(self, exc: OSError) -> StateFault:
        return StateFault(
            f"schedule state {self.path} is unreadable — fix permissions/disk and "
            f"restart: {describe(exc)}"
        )

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

    def save(self, directory: int, entries: list[Wakeup], damaged: bool) -> None:
        """Replace the file with ``entries``; keep a damaged original aside first."""
        data = dumps([wakeup_to_json(w) for w in entries]).encode()
        if len(data) > MAX_BYTES:
            raise TooLarge(
                f"the wake-up store {self.path} would grow past {MAX_BYTES >> 20} MiB — "
                "refused; cancel pending wake-ups first"
            )
        try:
            if damaged:
                self._keep_aside(directory)
            replace_file(directory, WAKEUPS, self.schedule, data, TEMP_PREFIX)
        except OSError as exc:
            raise StateFault(
                f"could not write the wake-up store {self.path}: {describe(exc)}"
            ) from None
        try:
            fsync(directory, self.schedule)
        except OSError as exc:
            # The new list is in place and every reader sees it: failing the call now would
            # tell the caller a change did not happen when it did (a taken wake-up would then
            # never fire). Only its durability against a power loss is in doubt.
            log.warning(
                "wrote the wake-up store %s but could not fsync its directory: %s",
                self.path,
                describe(exc),
            )

    def _keep_aside(self, directory: int) -> None:
        aside = f"{WAKEUPS}.corrupt-{slot_name(datetime.now(UTC))}"
        try:
            at(
                self.schedule / aside,
                lambda: os.link(
                    WAKEUPS,
                    aside,
                    src_dir_fd=directory,
                    dst_dir_fd=directory,
                    follow_symlinks=False,
                ),
            )
        except FileNotFoundError:
            return  # gone meanwhile: nothing left to keep
        log.warning(
            "kept the unusable wake-up store's original content as %s", self.schedule / aside
        )
