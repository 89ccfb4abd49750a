"""A claimed slot's result, built on every fire (see :mod:`trio_routines.slots`)."""

from __future__ import annotations

from datetime import datetime

from ..records import Outcome
from ..slots import setters
from .state import FireResult

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
