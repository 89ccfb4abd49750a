"""A fire's result: a claimed slot's, built on every fire (see :mod:`trio_routines.slots`),
and a refused slot's, logged and counted."""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime

from ..instants import format_iso, slot_of
from ..metrics import Metrics
from ..records import ClaimResult, ClaimStatus, Outcome
from ..slots import setters
from .state import FireResult, log

_new = object.__new__
_FIRE_RESULT = setters(
    FireResult, "name", "slot", "claimed", "reason", "outcome", "ms", "failed", "settled_at"
)


def settled_result(
    name: str,
    slot: datetime,
    outcome: Outcome,
    ms: int,
    *,
    reason: str | None,
    failed: str | None,
    settled_at: datetime,
) -> FireResult:
    """``FireResult(name, slot, claimed=True, ...)`` of a claimed slot just settled, its fields
    set through their slots: every claimed fire returns one."""
    result: FireResult = _new(FireResult)
    set_name, set_slot, set_claimed, set_reason, set_outcome, set_ms, set_failed, set_at = (
        _FIRE_RESULT
    )
    set_name(result, name)
    set_slot(result, slot)
    set_claimed(result, True)
    set_reason(result, reason)
    set_outcome(result, outcome)
    set_ms(result, ms)
    set_failed(result, failed)
    set_at(result, settled_at)
    return result


def refused_result(
    name: str,
    slot: datetime,
    claim: ClaimResult,
    replica: str,
    outcomes: Counter[str],
    metrics: Metrics,
    *,
    external: bool,
) -> FireResult:
    """Log and count a slot not claimed: paused, a duplicate, or stale. A loop's paused slot
    is at DEBUG (its gap's line says it); a caller's (``external``) at INFO."""
    if claim.status is ClaimStatus.PAUSED:
        (log.info if external else log.debug)(
            "%s: paused — slot %s is not claimed", name, format_iso(slot)
        )
        reason = "paused"
    elif claim.status is ClaimStatus.DUPLICATE:
        # Normal with replicas (every one but the winner sees it, every slot): DEBUG, and
        # nothing formatted unless it is shown.
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s: skipping — slot %s is already claimed — a duplicate delivery, or "
                "another scheduler has it",
                name,
                format_iso(slot),
                extra={"routine": name, "slot": slot, "replica": replica},
            )
        reason = "duplicate"
    else:
        newest = slot_of(claim.newest or "")  # a claim's name: shown as every instant is
        log.warning(
            "%s: skipping — slot %s is stale: %s was already claimed, so this instant is skipped",
            name,
            format_iso(slot),
            claim.newest if newest is None else format_iso(newest),
            extra={"routine": name, "slot": slot, "replica": replica},
        )
        reason = "stale"
    outcomes[reason] += 1
    metrics.refuse(name, reason)
    return FireResult(name, slot, claimed=False, reason=reason)
