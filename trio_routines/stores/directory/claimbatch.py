"""What the claim files' writes carry between their thread, the group commit and the writer
process: the items of a batch, the answers, a write awaiting its flush, the contention error.

Plain values only (the calls are :class:`.claimfiles.ClaimFiles`'): they cross the writer
process's pipe (:mod:`.writer`) as they are, so each is picklable.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple, TypeAlias, TypeVar

from ...instants import slot_name
from ...output import OUTPUT_MAX
from ...records import ClaimResult, Outcome
from ...usage import Usage
from ..answers import Answer
from ..durable import Descriptors

#: A claim holds ``{"firedAt":…,"outcome":…,"ms":…,"error":…,"replica":…,"output":…}``; its
#: reason is at most 1 KiB of text (``text.error_text``), its replica 128 characters, its
#: output 64 KiB of UTF-8 (``output.OUTPUT_MAX``), which JSON may write six bytes a byte
#: (``\u001b``): under 400 KiB. More is not a claim. A claim without output stays a few KiB,
#: within the 16 KiB that releases before output accept (docs/design.md).
CLAIM_LIMIT = 6 * OUTPUT_MAX + 16384


class Pending(NamedTuple):
    """A write awaiting its flush: a directory descriptor on its file system, and more."""

    device: int
    fd: int
    ticket: int  # durable.opened(), taken right after ``fd`` was opened
    prune_later: list[str]


V = TypeVar("V")
ClaimItem = tuple[str, datetime, datetime, str | None]  # routine, slot, fired_at, replica
ClaimWrite = tuple[ClaimResult, Pending | None]
# routine, slot, outcome, ms, if_unsettled, error, output, usage
SettleItem = tuple[str, datetime, Outcome, int | None, bool, str | None, str | None, Usage | None]
SettleWrite = tuple[bool, Pending | None]  # False: a fault was logged
# In a batch: a write's value, and what to prune once flushed (None: nothing awaits a flush).
Written: TypeAlias = tuple[V, list[str] | None]
Batched: TypeAlias = tuple[list[Answer[Written[V]]], Descriptors]


class Contended(Exception):
    """Another settle holds this claim's lock (a batch does not wait for it)."""

    def __init__(self, routine: str, slot: datetime) -> None:
        super().__init__(f"{routine}: the claim of slot {slot_name(slot)} is locked by a settle")
        self.routine = routine
        self.slot = slot

    def __reduce__(self) -> tuple[type[Contended], tuple[str, datetime]]:
        return Contended, (self.routine, self.slot)  # passed back by the writer process
