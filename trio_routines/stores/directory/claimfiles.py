"""Claim files: the synchronous half of the state directory store (see store.py).

Each call runs in a worker thread. A claim is written unnamed and then linked in under its
slot's name, which decides the slot as ``O_CREAT|O_EXCL`` would, and no reader ever sees it
half made; it is not fsynced when a group-commit flush will follow (the caller then owns the
returned :class:`Pending` descriptor and must flush or undo); without ``syncfs`` the file
and its directory are fsynced here, once it is named. Every file is opened through
safefile.py: an entry that is not a regular file is never opened or written, and reads as a
claim without stamp or outcome, with one warning naming it.

:class:`ClaimFiles` owns the claim files' calls (create, prune) and the options they share;
an outcome written into a claim is settlefiles.py's, reading them back blocking.py's
(:func:`~.blocking.read_claims`), and the values a batch of them carries to and from the
writer process are in :mod:`.claimbatch`.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ...claims import SPARE_CLAIM, claim_gate, is_stale
from ...converter import claim_text
from ...errors import StateFault
from ...instants import format_iso, slot_name
from ...names import check_name
from ...records import ClaimResult, ClaimStatus, claim_result
from ..answers import each
from ..durable import Descriptors, hand_in, opened
from ..safefile import (
    Where,
    Within,
    at,
    create_whole,
    describe,
    fsync,
    lock_within,
    open_dir,
    open_dirs,
)
from .claimbatch import (
    Batched,
    ClaimItem,
    ClaimWrite,
    Pending,
    V,
    Written,
)
from .leftovers import Leftovers
from .spares import Spares

log = logging.getLogger("trio_routines")

#: A claim being written under a temp name, where files cannot be made unnamed (safefile.py):
#: not a slot's name, so every reader of claims steps over one a crash left behind, and the
#: next claim taken in its directory removes it once it is stale (leftovers.py).
NEW_CLAIM = ".new-claim-"
#: Seconds before a claim asks again for its routine's directory that another process is
#: deciding a slot in (doubling up to 5 ms): a decision takes tens of microseconds.
DECIDING = 0.0001
LOCKED = "its routine's claims stayed locked by another process (a stalled disk?)"


class ClaimFiles:
    """The claim files under ``<root>/schedule/claims``."""

    def __init__(self, root: Path, keep: int, lock_timeout: float, syncfs: object | None) -> None:
        self.root = root
        self.keep = keep
        self.lock_timeout = lock_timeout
        self._claims = root / "schedule" / "claims"
        self.syncfs = syncfs  # only whether there is one matters here
        self._leftovers = Leftovers(NEW_CLAIM)
        self.spares = Spares(NEW_CLAIM)

    def claim_dir(self, routine: str) -> Path:
        return self._claims / check_name(routine)

    def claim_place(self, routine: str) -> Within:
        """:meth:`claim_dir` for a write's messages: joined only if one names it."""
        return Within(self._claims, check_name(routine))

    def open_claims(
        self,
        routine: str,
        *,
        create: bool = False,
        claims: int | None = None,
        where: Where | None = None,
    ) -> int:
        """The routine's claim directory; through ``claims`` (from :meth:`claims_dir`) if given,
        with ``where``, the caller's :meth:`claim_dir` of it (named in the messages)."""
        if claims is None:
            return open_dirs(self.root, ("schedule", "claims", check_name(routine)), create=create)
        assert where is not None, (
            "a claim directory opened through its parent is named by its caller"
        )
        return open_dir(claims, where.name, where, create=create)

    @contextlib.contextmanager
    def claims_dir(self, *, create: bool = False) -> Iterator[int | None]:
        """``<root>/schedule/claims``, opened once for a batch of calls (fewer opens, and fewer
        hand-offs of the interpreter lock, per call); None if it cannot be opened now: then
        each call opens its own way and reports its own error."""
        try:
            claims: int | None = open_dirs(self.root, ("schedule", "claims"), create=create)
        except OSError:
            claims = None
        try:
            yield claims
        finally:
            if claims is not None:
                os.close(claims)

    def create_each(self, items: Sequence[ClaimItem]) -> Batched[ClaimResult]:
        """:meth:`create` for every item of a batch (see :meth:`each_in_batch`)."""
        return self.each_in_batch(
            lambda item, claims: self.create(*item, claims=claims), items, create=True
        )

    def each_in_batch(
        self,
        write: Callable[[Any, int | None], tuple[V, Pending | None]],
        items: Sequence[Any],
        *,
        create: bool,
    ) -> Batched[V]:
        """``write`` for every item, in turn, in one worker-thread call, through the claims
        directory opened once: each item's value and what to prune once flushed (None: nothing
        awaits a flush), and the descriptors one flush of them all goes through (the caller
        owns them)."""
        held: Descriptors = {}

        def one(item: Any) -> Written[V]:
            value, pending = write(item, claims)
            if pending is None:
                return value, None
            hand_in(held, pending.device, pending.fd, pending.ticket)
            return value, pending.prune_later

        with self.claims_dir(create=create) as claims:
            return each(one, items), held

    def not_durable(self, routine: str, slot: datetime, exc: OSError) -> StateFault:
        path = self.claim_dir(routine) / slot_name(slot)
        return StateFault(f"could not make the claim {path} durable: {describe(exc)}")

    def create(
        self,
        routine: str,
        slot: datetime,
        fired_at: datetime,
        replica: str | None = None,
        *,
        claims: int | None = None,
    ) -> ClaimWrite:
        """Decide the slot and write the claim; durable already unless a flush is pending."""
        where = self.claim_place(routine)
        wanted = slot_name(slot)
        try:
            directory = self.open_claims(routine, create=True, claims=claims, where=where)
        except OSError as exc:
            raise self.unusable(routine, where, exc) from None
        ticket = opened()
        handed_over = False
        try:
            # The listing, the decision and the naming as one step among processes: between
            # another replica's listing and its naming of an older slot, ours of a newer one
            # would leave the older taken after the newer (a stale slot run).
            try:
                locked = lock_within(directory, self.lock_timeout, first=DECIDING)
            except OSError as exc:  # a file system without flock (ENOLCK)
                raise self.unusable(routine, where, exc) from None
            if not locked:
                raise self.not_claimed(routine, slot, TimeoutError(LOCKED))
            try:
                try:
                    entries = at(where, lambda: os.listdir(directory))
                except OSError as exc:
                    raise self.unusable(routine, where, exc) from None
                if spare := SPARE_CLAIM in entries:  # a file made ahead (spares.py)
                    entries.remove(SPARE_CLAIM)
                newest, prune, foreign = claim_gate(entries, self.keep)
                if newest == wanted:  # (another replica's, as a rule: every slot, but one)
                    return ClaimResult(ClaimStatus.DUPLICATE, wanted), None
                stale = is_stale(newest, wanted)
                if stale is not None:
                    return ClaimResult(ClaimStatus.STALE, stale), None
                path = where / wanted
                # Made whole: written where no claim's name reaches it (the spare, or a new
                # file), then named in one step, so that no replica reads a claim half made
                # (one that names no replica yet) and takes it for dead: its maker needs no
                # hold of its own for it (safefile.py). Named at once, before any fsync: the
                # slot is decided right after the listing, as ``O_EXCL`` did, and a replica
                # that loses it flushes nothing.
                data = claim_text(fired_at, replica=replica).encode()
                try:
                    fd = self.spares.take(directory, where, wanted, data) if spare else None
                    if fd is None:
                        fd = create_whole(directory, where, wanted, data, NEW_CLAIM)
                except FileExistsError:  # a claim, or anything else squatting on its name
                    return ClaimResult(ClaimStatus.DUPLICATE, wanted), None
                except OSError as exc:
                    raise self.not_claimed(routine, slot, exc) from None
            finally:
                with contextlib.suppress(OSError):
                    fcntl.flock(directory, fcntl.LOCK_UN)
            try:
                if self.syncfs is None:
                    fsync(fd, path)
                    fsync(directory, where)
            except OSError as exc:
                self.unclaim(routine, directory, wanted, path)
                raise self.unstamped(path, exc) from None
            finally:
                with contextlib.suppress(OSError):
                    os.close(fd)
            # Older claims may go before the new one is durable, but never the newest: if the
            # flush fails (or the power does), it still holds the stale gate.
            later = [name for name in prune if name == newest]
            self.prune(directory, where, [name for name in prune if name not in later])
            if foreign:  # never on the hot path, claims only: our leftovers may be among them
                self._leftovers.remove(directory, where, foreign)
            taken_result = claim_result(ClaimStatus.TAKEN, wanted)  # one per claim: see slots.py
            if self.syncfs is None:
                self.prune(directory, where, later)
                return taken_result, None
            pending = Pending(os.fstat(directory).st_dev, directory, ticket, later)
            handed_over = True
            return taken_result, pending
        finally:
            if not handed_over:
                os.close(directory)

    def unstamped(self, path: Where, exc: OSError) -> StateFault:
        return StateFault(f"could not stamp the claim {path}: {describe(exc)}")

    def not_claimed(self, routine: str, slot: datetime, exc: OSError) -> StateFault:
        return StateFault(
            f"could not claim slot {format_iso(slot)} of {routine!r}: {describe(exc)}"
        )

    def unusable(self, routine: str, where: Where, exc: OSError) -> StateFault:
        return StateFault(f"claims of {routine!r} are unusable in {where}: {describe(exc)}")

    def unclaim(self, routine: str, directory: int, name: str, path: Where) -> None:
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

    def unclaim_after(self, routine: str, slot: datetime) -> None:
        name = slot_name(slot)
        path = self.claim_dir(routine) / name
        try:
            directory = self.open_claims(routine)
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
            self.unclaim(routine, directory, name, path)
        finally:
            os.close(directory)

    def prune(self, directory: int, where: Where, names: Sequence[str]) -> None:
        for name in names:
            try:
                at(where / name, lambda name=name: os.unlink(name, dir_fd=directory))  # type: ignore[misc]
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.warning("could not prune fired-slot claims in %s: %s", where, describe(exc))
                return

    def prune_later(self, routine: str, names: Sequence[str]) -> None:
        if not names:
            return
        where = self.claim_dir(routine)
        try:
            directory = self.open_claims(routine)
        except OSError as exc:
            log.warning("could not prune fired-slot claims in %s: %s", where, describe(exc))
            return
        try:
            self.prune(directory, where, names)
        finally:
            os.close(directory)
