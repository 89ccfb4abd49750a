"""The state directory store: claims as files, wake-ups as one JSON file.

Layout (byte-compatible with the original scheduler's 0.22 state, so either can read the
other's)::

    <root>/schedule/claims/<routine>/<slot name>   one file per claimed slot
    <root>/schedule/wakeups.json                   pending wake-ups
    <root>/schedule/wakeups.lock                   ours: serializes wake-up writers

Theory of operation. A claim is decided by the filesystem: ``O_CREAT|O_EXCL`` lets exactly
one creator win, across threads and processes. Before a taken claim is reported, its stamp,
the file and the directory entry are fsynced, so a power loss cannot forget that the slot was
decided and let it run twice (the original never fsyncs). Settling rewrites the same file in
place -- never through a rename, which could resurrect a file pruning just removed.

``wakeups.json`` is rewritten whole: temp file, fsync, rename, fsync of the directory, all
under an exclusive ``flock`` on a separate lock file (the rename replaces the inode, so the
JSON file itself cannot carry the lock). Two processes can therefore add, take and cancel
wake-ups without losing each other's updates. When a load finds something it cannot use
(corrupt JSON, a non-array, malformed entries), the next write first keeps the original bytes
beside the file as ``wakeups.json.corrupt-<instant>``: nothing stored is silently lost.

Every blocking call runs in a worker thread bounded by the store's own capacity limiter.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import stat
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import trio

from ..claims import KEEP_CLAIMS, claim_names, is_stale, names_to_prune, parse_claim
from ..converter import claim_text, dumps, wakeup_from_json, wakeup_to_json
from ..errors import StateFault
from ..instants import slot_name
from ..names import check_name
from ..records import ClaimResult, ClaimStatus, Fire, Outcome, Wakeup
from ..store import Lifetime
from ..wakeups import WakeupRequest, check_stored, plan_add, plan_defer, remove, take_first_due

log = logging.getLogger("trio_routines")
T = TypeVar("T")
RACY_NS = 2_000_000_000  # a file changed this recently may change again unseen by its times


def describe(exc: OSError) -> str:
    """``EISDIR: Is a directory: <path>`` -- the errno name first, as operators grep for it."""
    code = errno.errorcode.get(exc.errno or 0, "") if exc.errno else ""
    text = exc.strerror or str(exc)
    where = f": {exc.filename}" if exc.filename else ""
    return f"{code}: {text}{where}" if code else f"{text}{where}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _ensure_dir(path: Path) -> None:
    """``mkdir -p`` that fsyncs the parent of every directory it creates."""
    if path.is_dir():
        return
    missing = []
    probe = path
    while not probe.exists() and not probe.is_symlink():
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            pass
        _fsync_dir(directory.parent)
    if not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written (a single call may write fewer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _lock_within(fd: int, seconds: float) -> bool:
    """An exclusive ``flock`` with a bound: a holder that hangs must not hang a shielded fire.

    False when ``seconds`` passed without the lock; other failures raise ``OSError``.
    """
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)


def _write_synced(path: Path, data: bytes, mode: int) -> None:
    """Create (``O_EXCL``) or replace (``O_TRUNC``) ``path`` with ``data``, fsynced."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | mode | os.O_CLOEXEC, 0o644)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_text(path: Path) -> str:
    with path.open("rb") as handle:
        return handle.read().decode("utf-8", errors="replace")


class DirectoryStore(Lifetime):
    """Claims and wake-ups in a state directory (see the module doc for the layout)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        keep: int = KEEP_CLAIMS,
        limiter: trio.CapacityLimiter | None = None,
        lock_timeout: float = 10.0,
    ) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.root = Path(root)
        self.keep = keep
        self.lock_timeout = lock_timeout
        self._schedule = self.root / "schedule"
        self._claims = self._schedule / "claims"
        self._wakeups = self._schedule / "wakeups.json"
        self._lock = self._schedule / "wakeups.lock"
        self._limiter = limiter or trio.CapacityLimiter(16)
        # (key, entries, damaged bytes, whether the key can be trusted): see _load
        self._parsed: (
            tuple[tuple[int, int, int, int], tuple[Wakeup, ...], bytes | None, bool] | None
        ) = None

    def __repr__(self) -> str:
        return f"DirectoryStore({str(self.root)!r})"

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    # -- claims ---------------------------------------------------------------------------

    def claim_dir(self, routine: str) -> Path:
        """The directory holding ``routine``'s claims (its name checked first)."""
        return self._claims / check_name(routine)

    def _list(self, directory: Path) -> list[str]:
        try:
            return claim_names(os.listdir(directory))
        except FileNotFoundError:
            return []

    async def claim(self, routine: str, slot: datetime, fired_at: datetime) -> ClaimResult:
        return await self._run(self.claim_sync, routine, slot, fired_at)

    def claim_sync(self, routine: str, slot: datetime, fired_at: datetime) -> ClaimResult:
        """:meth:`claim`, blocking: for a thread, or a process without Trio."""
        directory = self.claim_dir(routine)
        wanted = slot_name(slot)
        try:
            _ensure_dir(directory)
            taken = self._list(directory)
        except OSError as exc:
            raise StateFault(
                f"claims of {routine!r} are unusable in {directory}: {describe(exc)}"
            ) from None
        newest = is_stale(taken, wanted)
        if newest is not None:
            return ClaimResult(ClaimStatus.STALE, newest)
        path = directory / wanted
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            return ClaimResult(ClaimStatus.DUPLICATE, wanted)
        except OSError as exc:
            raise StateFault(
                f"could not claim slot {wanted} of {routine!r}: {describe(exc)}"
            ) from None
        try:
            try:
                _write_all(fd, claim_text(fired_at).encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            _fsync_dir(directory)
        except OSError as exc:
            self._unclaim(routine, path)
            raise StateFault(f"could not stamp the claim {path}: {describe(exc)}") from None
        self._prune(directory, taken)
        return ClaimResult(ClaimStatus.TAKEN, wanted)

    def _unclaim(self, routine: str, path: Path) -> None:
        # A claim that is not durable must not stand: removing it costs a retry, not the slot.
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning(
                "%s: could not remove the unstamped claim %s — that slot is now taken but "
                "will never run: %s",
                routine,
                path.name,
                describe(exc),
            )

    def _prune(self, directory: Path, taken: list[str]) -> None:
        for name in names_to_prune(taken, self.keep):
            try:
                (directory / name).unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.warning("could not prune fired-slot claims in %s: %s", directory, describe(exc))
                return

    async def settle(
        self,
        routine: str,
        slot: datetime,
        outcome: Outcome,
        ms: int | None = None,
        *,
        if_unsettled: bool = False,
        error: str | None = None,
    ) -> bool:
        return await self._run(self.settle_sync, routine, slot, outcome, ms, if_unsettled, error)

    def settle_sync(
        self,
        routine: str,
        slot: datetime,
        outcome: Outcome,
        ms: int | None,
        if_unsettled: bool = False,
        error: str | None = None,
    ) -> bool:
        """The store's ``settle``, in the calling thread: False when a fault was logged."""
        name = slot_name(slot)
        path = self.claim_dir(routine) / name
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return True  # pruned while the turn ran: its outcome goes with it
        except OSError as exc:
            log.warning(
                "%s: could not open the claim for slot %s to settle it: %s",
                routine,
                name,
                describe(exc),
            )
            return False
        try:
            # Settles of one claim take turns (the lock goes with the descriptor), so the
            # read-check-write of ``if_unsettled`` is one step against every other settle.
            if not _lock_within(fd, self.lock_timeout):
                raise TimeoutError(errno.ETIMEDOUT, "another settle holds the claim", str(path))
            chunks = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
            fire = parse_claim(name, b"".join(chunks).decode("utf-8", errors="replace"), str(path))
            if if_unsettled and fire.outcome is not None:
                os.close(fd)
                return True
            rounded = None if ms is None else round(ms)
            data = claim_text(fire.fired_at, outcome, rounded, error).encode()
            # Write over the stamp, then cut what is left: a write that fails (ENOSPC, EIO)
            # leaves the stamp readable, where truncating first would have erased it.
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
            os.fsync(fd)
            os.close(fd)
            return True
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.close(fd)
            log.warning(
                "%s: could not record the %s outcome of slot %s: %s",
                routine,
                outcome.value,
                name,
                describe(exc),
            )
            return False

    async def latest_fire(self, routine: str) -> Fire | None:
        return await self._run(self.latest_fire_sync, routine)

    def latest_fire_sync(self, routine: str) -> Fire | None:
        """:meth:`latest_fire`, blocking: for a thread, or a process without Trio."""
        directory = self.claim_dir(routine)
        try:
            names = self._list(directory)
            for name in reversed(names):
                path = directory / name
                try:
                    return parse_claim(name, _read_text(path), str(path))
                except FileNotFoundError:
                    continue
        except OSError as exc:
            raise StateFault(
                f"the newest claim of {routine!r} is unreadable — fix permissions/disk and "
                f"restart: {describe(exc)}"
            ) from None
        return None

    async def history(self, routine: str) -> list[Fire]:
        return await self._run(self.history_sync, routine)

    def history_sync(self, routine: str) -> list[Fire]:
        """:meth:`history`, blocking: for a thread, or a process without Trio."""
        directory = self.claim_dir(routine)
        fires = []
        try:
            for name in self._list(directory):
                path = directory / name
                try:
                    fires.append(parse_claim(name, _read_text(path), str(path)))
                except FileNotFoundError:
                    continue
        except OSError as exc:
            raise StateFault(
                f"the fired-slot claims for {routine!r} are unreadable (state: {self.root}): "
                f"{describe(exc)}"
            ) from None
        return fires

    # -- wake-ups -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            _ensure_dir(self._schedule)
            fd = os.open(self._lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StateFault(
                f"cannot lock the wake-up store {self._lock}: {describe(exc)}"
            ) from None
        try:
            self._acquire(fd)
            yield
        finally:
            os.close(fd)  # closing the last descriptor releases the lock

    def _acquire(self, fd: int) -> None:
        try:
            locked = _lock_within(fd, self.lock_timeout)
        except OSError as exc:
            raise StateFault(
                f"cannot lock the wake-up store {self._lock}: {describe(exc)}"
            ) from None
        if not locked:
            raise StateFault(
                f"the wake-up store {self._lock} stayed locked for "
                f"{self.lock_timeout:g}s — another process holds it"
            )

    def _load(self, *, cached: bool = False) -> tuple[list[Wakeup], bytes | None]:
        """The valid entries, and the raw bytes when something in them could not be used.

        With ``cached``, a parse kept from an earlier read may answer, keyed on the file's
        inode, size and times, so that a lock-free poll of 10,000 pending wake-ups costs one
        fstat. File times can be as coarse as a clock tick and inode numbers are reused, so the
        key is trusted only for a file last changed well before it was read (the "racily
        clean" rule): any later change then shows in the times. Writers never use the cache.
        """
        try:
            with self._wakeups.open("rb") as handle:
                info = os.fstat(handle.fileno())
                key = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
                kept = self._parsed
                if cached and kept is not None and kept[0] == key and kept[3]:
                    return list(kept[1]), kept[2]
                read_at = time.time_ns()
                raw = handle.read()
        except FileNotFoundError:
            return [], None
        except OSError as exc:
            raise StateFault(
                f"schedule state {self._wakeups} is unreadable — fix permissions/disk and "
                f"restart: {describe(exc)}"
            ) from None
        entries, damaged = self._parse(raw)
        settled = max(info.st_mtime_ns, info.st_ctime_ns) < read_at - RACY_NS
        self._parsed = (key, tuple(entries), damaged, settled)
        return entries, damaged

    def _parse(self, raw: bytes) -> tuple[list[Wakeup], bytes | None]:
        try:
            data = json.loads(raw.decode("utf-8"))
        except ValueError as exc:
            log.warning("corrupt state file %s — ignoring: %s", self._wakeups, exc)
            return [], raw
        if not isinstance(data, list):
            log.warning(
                "wakeups store is not an array — ignoring it: %s",
                raw[:80].decode("utf-8", "replace"),
            )
            return [], raw
        entries, damaged = [], False
        for item in data:
            try:
                wakeup = check_stored(wakeup_from_json(item))
            except (ValueError, TypeError):
                log.warning("dropping a malformed wake-up entry: %s", dumps(item))
                damaged = True
                continue
            entries.append(wakeup)
        return entries, (raw if damaged else None)

    def _save(self, entries: list[Wakeup], damaged: bytes | None) -> None:
        tmp = self._wakeups.with_name(self._wakeups.name + ".tmp")
        try:
            if damaged is not None:
                self._keep_aside(damaged)
            data = dumps([wakeup_to_json(w) for w in entries]).encode()
            _write_synced(tmp, data, os.O_TRUNC)
            os.replace(tmp, self._wakeups)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise StateFault(
                f"could not write the wake-up store {self._wakeups}: {describe(exc)}"
            ) from None
        try:
            _fsync_dir(self._schedule)
        except OSError as exc:
            # The new list is in place and every reader sees it: failing the call now would
            # tell the caller a change did not happen when it did (a taken wake-up would then
            # never fire). Only its durability against a power loss is in doubt.
            log.warning(
                "wrote the wake-up store %s but could not fsync its directory: %s",
                self._wakeups,
                describe(exc),
            )

    def _keep_aside(self, raw: bytes) -> None:
        stamp = slot_name(datetime.now(UTC))
        aside = self._wakeups.with_name(f"{self._wakeups.name}.corrupt-{stamp}")
        _write_synced(aside, raw, os.O_EXCL)
        log.warning("kept the unusable wake-up store's original content as %s", aside)

    def _mutate(self, change: Callable[[list[Wakeup]], tuple[list[Wakeup] | None, T]]) -> T:
        with self._locked():
            entries, damaged = self._load()
            updated, result = change(entries)
            if updated is not None:
                self._save(updated, damaged)
            return result

    async def add_wakeup(self, request: WakeupRequest, now: datetime) -> Wakeup:
        def change(entries: list[Wakeup]) -> tuple[list[Wakeup] | None, Wakeup]:
            wakeup = plan_add(entries, request, now)
            return [*entries, wakeup], wakeup

        return await self._run(self._mutate, change)

    async def take_due_wakeup(self, now: datetime) -> Wakeup | None:
        return await self._run(self._take_due, now)

    def _take_due(self, now: datetime) -> Wakeup | None:
        entries, _ = self._load(cached=True)
        if all(w.fire_at > now for w in entries):
            return None  # the common poll: nothing due, no lock, no write

        def change(entries: list[Wakeup]) -> tuple[list[Wakeup] | None, Wakeup | None]:
            rest, wakeup = take_first_due(entries, now)
            return (rest if wakeup is not None else None), wakeup

        return self._mutate(change)

    async def defer_wakeup(self, wakeup: Wakeup, fire_at: datetime) -> bool:
        deferred = plan_defer(wakeup, fire_at)
        if deferred is None:
            return False

        def change(entries: list[Wakeup]) -> tuple[list[Wakeup] | None, bool]:
            return [*entries, deferred], True

        return await self._run(self._mutate, change)

    async def remove_wakeup(self, wakeup_id: str, session: str | None = None) -> bool:
        def change(entries: list[Wakeup]) -> tuple[list[Wakeup] | None, bool]:
            kept, removed = remove(entries, wakeup_id, session)
            return (kept if removed else None), removed

        return await self._run(self._mutate, change)

    async def list_wakeups(self) -> list[Wakeup]:
        entries, _ = await self._run(partial(self._load, cached=True))
        return entries

    async def ready(self) -> None:
        # Abandoned on cancel: a hung file system must not hold the caller past its deadline.
        await trio.to_thread.run_sync(self._ready, limiter=self._limiter, abandon_on_cancel=True)

    def _ready(self) -> None:
        # The claims directory, or the nearest parent that will hold it once the first claim
        # creates it: a directory we may write in.
        for path in (self._claims, self._schedule, self.root, self.root.parent):
            try:
                info = os.stat(path)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise StateFault(
                    f"the state directory {path} is unusable: {describe(exc)}"
                ) from None
            if stat.S_ISDIR(info.st_mode) and os.access(path, os.W_OK | os.X_OK):
                return
            raise StateFault(f"the state directory {path} is not a writable directory")
        raise StateFault(f"the state directory {self.root} cannot be created")

    # Pause files live in their own module, which builds on this one's helpers.
    async def set_paused(self, routine: str, paused: bool) -> None:
        from .dirpause import set_paused_sync

        await self._run(set_paused_sync, self._schedule, routine, paused)

    async def paused(self) -> frozenset[str]:
        from .dirpause import paused_sync

        return await self._run(paused_sync, self._schedule)

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()
