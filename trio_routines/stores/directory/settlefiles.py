"""Settles of claim files: a turn's outcome written into its claim, in a worker thread or the
writer process, as the claims themselves are (claimfiles.py, whose places, options and
batches these use).

A settle reads the claim, checks it, and writes the outcome over it in place, holding the
claim's own lock so that two settles of one claim take turns; it is not fsynced when a
group-commit flush will follow (the caller then owns the returned descriptor).

A claim whose text is no claim record (edited by hand, damaged) is read as unsettled, and the
next boot settles it ``interrupted``. Its text is kept first, durably, as
``schedule/damaged-claims/<routine>/<slot>.<instant>-<hex>`` (a WARN names both): nothing
stored is written over unseen. Beside the claims it would be a foreign name, which sends
every claim of its routine down the gate's slower path. If it cannot be kept, the settle
fails (a WARN) and the claim is left as it is.

A claim settled with an outcome this version does not know (a newer version's word, an edit)
is settled: the boot's ``interrupted`` leaves it as it is. A turn's own settle over one (its
claim edited while it ran) keeps its text first, as above.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from ...claims import read_claim
from ...converter import claim_text
from ...instants import format_iso, slot_name
from ...records import Outcome
from ...usage import Usage
from ..durable import opened
from ..safefile import (
    Shared,
    at,
    create_whole,
    describe,
    fsync,
    lock_within,
    open_dirs,
    open_file,
    read_fd,
)
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
        format_iso(slot),
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
                format_iso(slot),
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
            found = read_fd(fd, path, CLAIM_LIMIT)
            text = found.decode("utf-8", errors="replace")
            fire, whole = read_claim(name, text, str(path))
            if if_unsettled and not fire.is_open:  # settled, maybe by a newer version
                return True, None
            if (not whole and text.strip()) or fire.unknown_outcome is not None:
                try:
                    keep_damaged(self._files.root, routine, name, path, found)
                except OSError as exc:
                    log.warning(
                        "%s: could not record the %s outcome of slot %s: its claim holds no "
                        "claim record of this version's, which could not be kept first (%s) — "
                        "left as it is",
                        routine,
                        outcome.value,
                        format_iso(slot),
                        describe(exc),
                    )
                    return False, None
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


def keep_damaged(root: Path, routine: str, name: str, path: object, data: bytes) -> None:
    """Keep ``data``, the text of claim ``name`` of ``routine`` that holds no claim record,
    as a new file of ``schedule/damaged-claims/<routine>/``, durably, before it is written
    over (see the module doc); an OSError when it cannot be kept."""
    folder = ("schedule", "damaged-claims", routine)
    where = root.joinpath(*folder)
    aside = f"{name}.{slot_name(datetime.now(UTC))}-{secrets.token_hex(2)}"
    directory = open_dirs(root, folder, create=True)
    try:
        fd = create_whole(directory, where, aside, data, ".damaged-")
        try:
            fsync(fd, where / aside)
        finally:
            os.close(fd)
        fsync(directory, where)
    finally:
        os.close(directory)
    log.warning(
        "claim %s held no claim record of this version's; kept as %s before its outcome is "
        "written over it",
        path,
        where / aside,
    )
