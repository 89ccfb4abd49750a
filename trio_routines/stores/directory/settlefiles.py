"""Settles of claim files: a turn's outcome written into its claim, in a worker thread or the
writer process, as the claims themselves are (claimfiles.py, whose places, options and
batches these use).

A settle reads the claim, checks it, and writes the outcome over it in place, holding the
claim's own lock so that two settles of one claim take turns; it is not fsynced when a
group-commit flush will follow (the caller then owns the returned descriptor).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Sequence
from datetime import datetime

from ...claims import parse_claim
from ...converter import claim_text
from ...instants import slot_name
from ...records import Outcome
from ...usage import Usage
from ..durable import opened
from ..safefile import Shared, at, describe, fsync, lock_within, open_file, read_fd
from .claimbatch import CLAIM_LIMIT, Batched, Contended, Pending, SettleItem, SettleWrite
from .claimfiles import NEW_CLAIM, ClaimFiles
from .leftovers import remove_twins

log = logging.getLogger("trio_routines")


def settle_warning(routine: str, slot: datetime, outcome: Outcome, exc: OSError) -> None:
    """The one warning of an outcome not recorded."""
    log.warning(
        "%s: could not record the %s outcome of slot %s: %s",
        routine,
        outcome.value,
        slot_name(slot),
        describe(exc),
    )


class SettleFiles:
    """The outcomes written into :class:`~.claimfiles.ClaimFiles`' claims."""

    def __init__(self, files: ClaimFiles) -> None:
        self._files = files

    def write_each(self, items: Sequence[SettleItem]) -> Batched[bool]:
        """:meth:`write_outcome` for every item of a batch (see
        :meth:`~.claimfiles.ClaimFiles.each_in_batch`). A claim whose lock another settle
        holds is answered :class:`Contended`, not waited for: the one writer thread would hold
        up every claim."""
        return self._files.each_in_batch(
            lambda item, claims: self.write_outcome(*item, claims=claims, wait=False),
            items,
            create=False,
        )

    def write_outcome(
        self,
        routine: str,
        slot: datetime,
        outcome: Outcome,
        ms: int | None,
        if_unsettled: bool,
        error: str | None,
        output: str | None = None,
        usage: Usage | None = None,
        *,
        claims: int | None = None,
        wait: bool = True,
    ) -> SettleWrite:
        """Write the outcome into the claim: (False if a fault was logged, what is to flush).

        Without ``wait``, a claim whose lock another settle holds raises :class:`Contended` at
        once instead of waiting for it up to ``lock_timeout``.
        """
        name = slot_name(slot)
        where = self._files.claim_place(routine)
        path = where / name
        try:
            directory = self._files.open_claims(routine, claims=claims, where=where)
            ticket = opened()
            try:
                try:
                    fd = open_file(directory, name, path, os.O_RDWR, CLAIM_LIMIT, alone=True)
                except Shared:  # a temp name left beside it is no other file's: ours again
                    if not remove_twins(directory, name, NEW_CLAIM):
                        raise
                    fd = open_file(directory, name, path, os.O_RDWR, CLAIM_LIMIT, alone=True)
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
            if not lock_within(fd, self._files.lock_timeout if wait else 0):
                if not wait:
                    raise Contended(routine, slot)
                raise TimeoutError(errno.ETIMEDOUT, "another settle holds the claim", str(path))
            text = read_fd(fd, path, CLAIM_LIMIT).decode("utf-8", errors="replace")
            fire = parse_claim(name, text, str(path))
            if if_unsettled and fire.outcome is not None:
                return True, None
            rounded = None if ms is None else round(ms)
            data = claim_text(
                fire.fired_at, outcome, rounded, error, fire.replica, output, usage
            ).encode()
            # Write over the stamp, then cut what is left: a write that fails (ENOSPC, EIO)
            # leaves the stamp readable, where truncating first would have erased it.
            at(path, lambda: os.pwrite(fd, data, 0))
            at(path, lambda: os.ftruncate(fd, len(data)))
            if self._files.syncfs is None:
                fsync(fd, path)
                return True, None
            pending = Pending(os.fstat(directory).st_dev, directory, ticket, [])
            handed_over = True
            return True, pending
        except OSError as exc:
            settle_warning(routine, slot, outcome, exc)
            return False, None
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
            if not handed_over:
                os.close(directory)
