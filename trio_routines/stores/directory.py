"""The state directory store: claims as files, wake-ups as one JSON file.

Layout (byte-compatible with the original scheduler's 0.22 state, so either can read the
other's)::

    <root>/schedule/claims/<routine>/<slot name>   one file per claimed slot
    <root>/schedule/wakeups.json                   pending wake-ups (see wakeupfile.py)
    <root>/schedule/wakeups.lock                   ours: serializes wake-up writers

Theory of operation. A claim is decided by the filesystem: ``O_CREAT|O_EXCL`` lets exactly
one creator win, across threads and processes. Before a taken claim is reported, the file and
its directory entry are durable, so a power loss cannot forget that the slot was decided and
let it run twice (the original never fsyncs). Durability is shared: the claim is written
without an fsync, then waits for a group commit (groupcommit.py), one ``syncfs`` covering
every claim and settle written while the previous one ran. A claim whose flush fails is
removed again and reported as a state fault: a retry, never a burned slot, and never a turn.
Settling rewrites the same file in place -- never through a rename, which could resurrect a
file pruning just removed.

Nothing below the root is trusted (safefile.py): no link is followed, no open can block, no
read is unbounded. A claim entry that is not a regular file (a link, a FIFO, a device, a
directory) or is too large is never opened or written; its name still holds its slot (the
stale and duplicate gates count names), and reading it warns once and reads it as a claim
without stamp or outcome, as a torn write reads.

Every blocking call runs in a worker thread bounded by the store's own capacity limiter.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import trio

from ..claims import KEEP_CLAIMS, claim_names, is_stale, names_to_prune, parse_claim
from ..converter import claim_text
from ..errors import InvalidWakeup, StateFault
from ..instants import slot_name
from ..names import check_name
from ..records import ClaimResult, ClaimStatus, Fire, Outcome, Wakeup
from ..store import Lifetime
from ..wakeups import WakeupRequest, plan_add, plan_defer, remove, take_first_due
from .groupcommit import SYNCFS, GroupCommit
from .safefile import (
    Refused,
    at,
    create_file,
    describe,
    fsync,
    lock_within,
    open_dirs,
    open_file,
    read_fd,
    read_file,
    write_all,
)
from .wakeupfile import TooLarge, WakeupFile

__all__ = ["CLAIM_LIMIT", "DirectoryStore", "describe"]

log = logging.getLogger("trio_routines")
T = TypeVar("T")
#: A claim holds ``{"firedAt":…,"outcome":…,"ms":…,"error":…}``; its reason is at most 1 KiB
#: of text (``text.error_text``), so a few KiB at most. More is not a claim.
CLAIM_LIMIT = 16384


class _Pending(NamedTuple):
    """A write awaiting its flush: a directory descriptor on its file system, and more."""

    device: int
    fd: int
    prune_later: list[str]


class DirectoryStore(Lifetime):
    """Claims and wake-ups in a state directory (see the module doc for the layout)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        keep: int = KEEP_CLAIMS,
        limiter: trio.CapacityLimiter | None = None,
        lock_timeout: float = 10.0,
        syncfs: Callable[[int], None] | None = SYNCFS,
    ) -> None:
        """``syncfs``: the flush behind group commit; None keeps per-file fsyncs instead."""
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.root = Path(root)
        self.keep = keep
        self.lock_timeout = lock_timeout
        self._claims = self.root / "schedule" / "claims"
        self._syncfs = syncfs
        self._commit = GroupCommit(syncfs) if syncfs is not None else None
        self._wakeups = WakeupFile(self.root, lock_timeout)
        self._limiter = limiter or trio.CapacityLimiter(16)

    def __repr__(self) -> str:
        return f"DirectoryStore({str(self.root)!r})"

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    @property
    def flushes(self) -> int:
        """How many group-commit flushes ran (0 without ``syncfs``)."""
        return self._commit.flushes if self._commit is not None else 0

    # -- claims ---------------------------------------------------------------------------

    def claim_dir(self, routine: str) -> Path:
        """The directory holding ``routine``'s claims (its name checked first)."""
        return self._claims / check_name(routine)

    def _open_claims(self, routine: str, *, create: bool = False) -> int:
        return open_dirs(self.root, ("schedule", "claims", check_name(routine)), create=create)

    async def claim(self, routine: str, slot: datetime, fired_at: datetime) -> ClaimResult:
        result, pending = await self._run(self._create, routine, slot, fired_at)
        if pending is None:
            return result
        assert self._commit is not None
        try:
            await self._commit.durable(pending.device, pending.fd)
        except OSError as exc:
            await self._run(self._unclaim_after, routine, slot)
            raise self._not_durable(routine, slot, exc) from None
        if pending.prune_later:
            await self._run(self._prune_later, routine, pending.prune_later)
        return result

    def claim_sync(self, routine: str, slot: datetime, fired_at: datetime) -> ClaimResult:
        """:meth:`claim`, blocking: for a thread, or a process without Trio."""
        result, pending = self._create(routine, slot, fired_at)
        if pending is None:
            return result
        assert self._syncfs is not None
        try:
            at(self.claim_dir(routine), lambda: self._syncfs(pending.fd))  # type: ignore[misc]
        except OSError as exc:
            self._unclaim_after(routine, slot)
            raise self._not_durable(routine, slot, exc) from None
        finally:
            os.close(pending.fd)
        self._prune_later(routine, pending.prune_later)
        return result

    def _not_durable(self, routine: str, slot: datetime, exc: OSError) -> StateFault:
        path = self.claim_dir(routine) / slot_name(slot)
        return StateFault(f"could not make the claim {path} durable: {describe(exc)}")

    def _create(
        self, routine: str, slot: datetime, fired_at: datetime
    ) -> tuple[ClaimResult, _Pending | None]:
        """Decide the slot and write the claim; durable already unless a flush is pending."""
        where = self.claim_dir(routine)
        wanted = slot_name(slot)
        try:
            directory = self._open_claims(routine, create=True)
        except OSError as exc:
            raise self._unusable(routine, where, exc) from None
        handed_over = False
        try:
            try:
                taken = claim_names(at(where, lambda: os.listdir(directory)))
            except OSError as exc:
                raise self._unusable(routine, where, exc) from None
            newest = is_stale(taken, wanted)
            if newest is not None:
                return ClaimResult(ClaimStatus.STALE, newest), None
            path = where / wanted
            try:
                fd = create_file(directory, wanted, path)
            except FileExistsError:  # a claim, or anything else squatting on its name
                return ClaimResult(ClaimStatus.DUPLICATE, wanted), None
            except OSError as exc:
                raise StateFault(
                    f"could not claim slot {wanted} of {routine!r}: {describe(exc)}"
                ) from None
            try:
                try:
                    write_all(fd, claim_text(fired_at).encode(), path)
                    if self._syncfs is None:
                        fsync(fd, path)
                finally:
                    os.close(fd)
                if self._syncfs is None:
                    fsync(directory, where)
            except OSError as exc:
                self._unclaim(routine, directory, wanted, path)
                raise StateFault(f"could not stamp the claim {path}: {describe(exc)}") from None
            prune = names_to_prune(taken, self.keep)
            # Older claims may go before the new one is durable, but never the newest: if the
            # flush fails (or the power does), it still holds the stale gate.
            later = [name for name in prune if taken and name == taken[-1]]
            self._prune(directory, where, [name for name in prune if name not in later])
            taken_result = ClaimResult(ClaimStatus.TAKEN, wanted)
            if self._syncfs is None:
                self._prune(directory, where, later)
                return taken_result, None
            pending = _Pending(os.fstat(directory).st_dev, directory, later)
            handed_over = True
            return taken_result, pending
        finally:
            if not handed_over:
                os.close(directory)

    def _unusable(self, routine: str, where: Path, exc: OSError) -> StateFault:
        return StateFault(f"claims of {routine!r} are unusable in {where}: {describe(exc)}")

    def _unclaim(self, routine: str, directory: int, name: str, path: Path) -> None:
        # A claim that is not durable must not stand: removing it costs a retry, not the slot.
        try:
            at(path, lambda: os.unlink(name, dir_fd=directory))
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning(
                "%s: could not remove the unstamped claim %s — that slot is now taken but "
                "will never run: %s",
                routine,
                name,
                describe(exc),
            )

    def _unclaim_after(self, routine: str, slot: datetime) -> None:
        name = slot_name(slot)
        path = self.claim_dir(routine) / name
        try:
            directory = self._open_claims(routine)
        except OSError as exc:
            log.warning(
                "%s: could not remove the claim %s that is not durable — that slot is now "
                "taken but will never run: %s",
                routine,
                name,
                describe(exc),
            )
            return
        try:
            self._unclaim(routine, directory, name, path)
        finally:
            os.close(directory)

    def _prune(self, directory: int, where: Path, names: list[str]) -> None:
        for name in names:
            try:
                at(where / name, lambda name=name: os.unlink(name, dir_fd=directory))  # type: ignore[misc]
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.warning("could not prune fired-slot claims in %s: %s", where, describe(exc))
                return

    def _prune_later(self, routine: str, names: list[str]) -> None:
        if not names:
            return
        where = self.claim_dir(routine)
        try:
            directory = self._open_claims(routine)
        except OSError as exc:
            log.warning("could not prune fired-slot claims in %s: %s", where, describe(exc))
            return
        try:
            self._prune(directory, where, names)
        finally:
            os.close(directory)

    # -- settles --------------------------------------------------------------------------

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
        written, pending = await self._run(
            self._write_outcome, routine, slot, outcome, ms, if_unsettled, error
        )
        if pending is None:
            return written
        assert self._commit is not None
        try:
            await self._commit.durable(pending.device, pending.fd)
        except OSError as exc:
            self._settle_warning(routine, slot, outcome, exc)
            return False
        return True

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
        written, pending = self._write_outcome(routine, slot, outcome, ms, if_unsettled, error)
        if pending is None:
            return written
        assert self._syncfs is not None
        try:
            at(self.claim_dir(routine), lambda: self._syncfs(pending.fd))  # type: ignore[misc]
        except OSError as exc:
            self._settle_warning(routine, slot, outcome, exc)
            return False
        finally:
            os.close(pending.fd)
        return True

    def _settle_warning(self, routine: str, slot: datetime, outcome: Outcome, exc: OSError) -> None:
        log.warning(
            "%s: could not record the %s outcome of slot %s: %s",
            routine,
            outcome.value,
            slot_name(slot),
            describe(exc),
        )

    def _write_outcome(
        self,
        routine: str,
        slot: datetime,
        outcome: Outcome,
        ms: int | None,
        if_unsettled: bool,
        error: str | None,
    ) -> tuple[bool, _Pending | None]:
        """Write the outcome into the claim: (False if a fault was logged, what is to flush)."""
        name = slot_name(slot)
        where = self.claim_dir(routine)
        path = where / name
        try:
            directory = self._open_claims(routine)
            try:
                fd = open_file(directory, name, path, os.O_RDWR, CLAIM_LIMIT)
            except BaseException:
                os.close(directory)
                raise
        except FileNotFoundError:
            return True, None  # pruned while the turn ran: its outcome goes with it
        except OSError as exc:
            log.warning(
                "%s: could not open the claim for slot %s to settle it: %s",
                routine,
                name,
                describe(exc),
            )
            return False, None
        handed_over = False
        try:
            # Settles of one claim take turns (the lock goes with the descriptor), so the
            # read-check-write of ``if_unsettled`` is one step against every other settle.
            if not lock_within(fd, self.lock_timeout):
                raise TimeoutError(errno.ETIMEDOUT, "another settle holds the claim", str(path))
            text = read_fd(fd, path, CLAIM_LIMIT).decode("utf-8", errors="replace")
            fire = parse_claim(name, text, str(path))
            if if_unsettled and fire.outcome is not None:
                return True, None
            rounded = None if ms is None else round(ms)
            data = claim_text(fire.fired_at, outcome, rounded, error).encode()
            # Write over the stamp, then cut what is left: a write that fails (ENOSPC, EIO)
            # leaves the stamp readable, where truncating first would have erased it.
            at(path, lambda: os.pwrite(fd, data, 0))
            at(path, lambda: os.ftruncate(fd, len(data)))
            if self._syncfs is None:
                fsync(fd, path)
                return True, None
            pending = _Pending(os.fstat(directory).st_dev, directory, [])
            handed_over = True
            return True, pending
        except OSError as exc:
            self._settle_warning(routine, slot, outcome, exc)
            return False, None
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
            if not handed_over:
                os.close(directory)

    # -- reading claims -------------------------------------------------------------------

    async def latest_fire(self, routine: str) -> Fire | None:
        return await self._run(self.latest_fire_sync, routine)

    def latest_fire_sync(self, routine: str) -> Fire | None:
        """:meth:`latest_fire`, blocking: for a thread, or a process without Trio."""
        try:
            for fire in self._read_claims(routine, newest_only=True):
                return fire
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
        try:
            return list(self._read_claims(routine))
        except OSError as exc:
            raise StateFault(
                f"the fired-slot claims for {routine!r} are unreadable (state: {self.root}): "
                f"{describe(exc)}"
            ) from None

    def _read_claims(self, routine: str, *, newest_only: bool = False) -> list[Fire]:
        """Claims oldest first (only the newest readable one with ``newest_only``)."""
        where = self.claim_dir(routine)
        try:
            directory = self._open_claims(routine)
        except FileNotFoundError:
            return []
        try:
            names = claim_names(at(where, lambda: os.listdir(directory)))
            fires = []
            for name in reversed(names) if newest_only else names:
                path = where / name
                try:
                    raw = read_file(directory, name, path, CLAIM_LIMIT)
                except FileNotFoundError:
                    continue  # pruned meanwhile
                except Refused as exc:
                    log.warning(
                        "unreadable claim: %s (its slot stays taken; read as unsettled)", exc
                    )
                    raw = b""
                fires.append(parse_claim(name, raw.decode("utf-8", errors="replace"), str(path)))
                if newest_only:
                    break
            return fires
        finally:
            os.close(directory)

    # -- wake-ups -------------------------------------------------------------------------

    def _mutate(self, change: Callable[[list[Wakeup]], tuple[list[Wakeup] | None, T]]) -> T:
        with self._wakeups.locked() as directory:
            entries, damaged = self._wakeups.load(directory)
            updated, result = change(entries)
            if updated is not None:
                self._wakeups.save(directory, updated, damaged)
            return result

    async def add_wakeup(self, request: WakeupRequest, now: datetime) -> Wakeup:
        def change(entries: list[Wakeup]) -> tuple[list[Wakeup] | None, Wakeup]:
            wakeup = plan_add(entries, request, now)
            return [*entries, wakeup], wakeup

        try:
            return await self._run(self._mutate, change)
        except TooLarge as exc:
            raise InvalidWakeup(str(exc)) from None

    async def take_due_wakeup(self, now: datetime) -> Wakeup | None:
        return await self._run(self._take_due, now)

    def _take_due(self, now: datetime) -> Wakeup | None:
        entries, _ = self._wakeups.load(cached=True)
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
        entries, _ = await self._run(lambda: self._wakeups.load(cached=True))
        return entries

    async def ready(self) -> None:
        # Abandoned on cancel: a hung file system must not hold the caller past its deadline.
        await trio.to_thread.run_sync(self._ready, limiter=self._limiter, abandon_on_cancel=True)

    def _ready(self) -> None:
        # The claims directory, or the nearest parent that will hold it once the first claim
        # creates it: a directory we may write in.
        for path in (self._claims, self._claims.parent, self.root, self.root.parent):
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

    # Pause files live in their own module, which builds on safefile.py.
    async def set_paused(self, routine: str, paused: bool) -> None:
        from .dirpause import set_paused_sync

        await self._run(set_paused_sync, self.root, routine, paused)

    async def paused(self) -> frozenset[str]:
        from .dirpause import paused_sync

        return await self._run(paused_sync, self.root)

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()
