"""The :class:`~trio_routines.Scheduler`'s numeric options, checked as it is made: each a
number of seconds it can keep as a float and bound a wait with, or a one-line
:class:`~trio_routines.errors.InvalidOption` naming it."""

from __future__ import annotations

import contextlib
import decimal
import math
import numbers
from datetime import datetime

from ..errors import InvalidOption
from ..wakeups import POLL_RANGE


def checked_seconds(option: str, value: float, *, zero: bool) -> float:
    """``value`` if it is a finite number of seconds (``zero``: 0 allowed), else a one-line
    :class:`InvalidOption`: a NaN deadline, say, would leave store calls without a bound, and
    ``True`` (a switch taken for a number) or ``"30"`` is no number of seconds; a
    :class:`~decimal.Decimal` is (a configuration read exactly, say)."""
    seconds = math.nan
    if isinstance(value, numbers.Real | decimal.Decimal) and not isinstance(value, bool):
        # A number too large for a float, or a signalling NaN, is no more a bound than NaN.
        with contextlib.suppress(OverflowError, ValueError):
            seconds = float(value)
    if not (math.isfinite(seconds) and (seconds > 0 or (zero and seconds == 0))):
        wanted = "0 or more" if zero else "more than 0"
        raise InvalidOption(f"{option} must be a finite number of seconds, {wanted}: {value!r}")
    return seconds


def checked_poll(value: float) -> float:
    """``poll_interval`` if it is a number of seconds within :data:`POLL_RANGE`, else a
    one-line :class:`InvalidOption`."""
    seconds = checked_seconds("poll_interval", value, zero=False)
    low, high = POLL_RANGE
    if not low <= seconds <= high:
        raise InvalidOption(
            f"poll_interval must be between {low:g} and {high:g} seconds: {value!r}"
        )
    return seconds


def checked_now(value: object) -> None:
    """A reading of the scheduler's ``now`` clock: an aware :class:`~datetime.datetime`, else a
    one-line :class:`InvalidOption` (read once as :meth:`Scheduler.run` begins: a naive
    instant would fail later, deep in the boot's cron arithmetic, without naming the clock)."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidOption(
            f"now must be a clock of aware datetimes (with their zone, e.g. UTC); it read {value!r}"
        )
