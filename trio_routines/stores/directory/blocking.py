"""The state directory's claims, blocking: for a thread, or a process without Trio; and the
claims of a routine read back (:func:`read_claims`).

The same files as the store's async calls write (claimfiles.py), but each call on its own:
no batch, no group commit, no writer process; a claim or settle is made durable by its own
flush (``syncfs`` of its file) before it returns.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from ...claims import claim_names, newest_first, parse_claim
from ...errors import StateFault
from ...records import ClaimResult, Fire, Outcome
from ...usage import Usage
from ..safefile import Refused, at, describe, read_file
from .claimbatch import CLAIM_LIMIT
from .claimfiles import ClaimFiles
from .settlefiles import SettleFiles, settle_warning

log = logging.getLogger("trio_routines")


class BlockingClaims:
    """Claims, settles and reads of the state directory at ``root``, in the calling thread."""

    def __init__(self, root: Path, files: ClaimFiles, syncfs: Callable[[int], None] | None) -> None:
        self.root = root
        self._files = files
        self._settles = SettleFiles(files)
        self._syncfs = syncfs

    def claim(
        self, routine: str, slot: datetime, fired_at: datetime, *, replica: str | None = None
    ) -> ClaimResult:
        """The store's ``claim``: taken only once the claim is durable."""
        result, pending = self._files.create(routine, slot, fired_at, replica)
        if pending is None:
            return result
        assert self._syncfs is not None
        directory = self._files.claim_dir(routine)
        try:
            at(directory, lambda: self._syncfs(pending.fd))  # type: ignore[misc]
        except OSError as exc:
            self._files.unclaim_after(routine, slot)
            raise self._files.not_durable(routine, slot, exc) from None
        finally:
            os.close(pending.fd)
        self._files.prune_later(routine, pending.prune_later)
        return result

    def settle(
        self,
        routine: str,
        slot: datetime,
        outcome: Outcome,
        ms: int | None,
        if_unsettled: bool = False,
        error: str | None = None,
        output: str | None = None,
        usage: Usage | None = None,
    ) -> bool:
        """The store's ``settle``: False when a fault was logged."""
        written, pending = self._settles.write_outcome(
            routine, slot, outcome, ms, if_unsettled, error, output, usage
        )
        if pending is None:
            return written
        assert self._syncfs is not None
        directory = self._files.claim_dir(routine)
        try:
            at(directory, lambda: self._syncfs(pending.fd))  # type: ignore[misc]
        except OSError as exc:
            settle_warning(routine, slot, outcome, exc)
            return False
        finally:
            os.close(pending.fd)
        return True

    def latest_fire(self, routine: str) -> Fire | None:
        """The store's ``latest_fire``."""
        try:
            for fire in read_claims(self._files, routine, newest_only=True):
                return fire
        except OSError as exc:
            raise StateFault(
                f"the newest claim of {routine!r} is unreadable: {describe(exc)} — fix the "
                "permissions or the disk"
            ) from None
        return None

    def history(self, routine: str) -> list[Fire]:
        """The store's ``history``."""
        try:
            return list(read_claims(self._files, routine, limit=self._files.keep))
        except OSError as exc:
            raise StateFault(
                f"the fired-slot claims for {routine!r} are unreadable (state: {self.root}): "
                f"{describe(exc)}"
            ) from None


def read_claims(
    files: ClaimFiles, routine: str, *, newest_only: bool = False, limit: int | None = None
) -> list[Fire]:
    """The claims of ``routine`` oldest first (only the newest readable one with
    ``newest_only``; the newest ``limit`` with one: claims a hand or an older process left
    beyond what the store keeps, until the next claim prunes them, are not all read); a
    damaged one is read leniently, with one warning naming it."""
    where = files.claim_dir(routine)
    try:
        directory = files.open_claims(routine)
    except FileNotFoundError:
        return []
    try:
        entries = at(where, lambda: os.listdir(directory))
        fires = []
        names = newest_first(entries) if newest_only else claim_names(entries)[-(limit or 0) :]
        for name in names:
            path = where / name
            try:
                raw = read_file(directory, name, path, CLAIM_LIMIT)
            except FileNotFoundError:
                continue  # pruned meanwhile
            except Refused as exc:
                log.warning("unreadable claim: %s (its slot stays taken; read as unsettled)", exc)
                raw = b""
            fires.append(parse_claim(name, raw.decode("utf-8", errors="replace"), str(path)))
            if newest_only:
                break
        return fires
    finally:
        os.close(directory)
