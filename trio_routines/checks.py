"""The checks of options given in code (a store's, an agent's, the scheduler's): a number of
seconds a wait can be bounded with, a count, each else one line naming the option
(:class:`~trio_routines.errors.InvalidOption`), never a failure later, at first use, in
another library's words."""

from __future__ import annotations

import contextlib
import decimal
import math
import numbers

from .errors import InvalidOption


def as_seconds(value: object) -> float:
    """``value`` as a float if it is a number (not a switch), else NaN: a number too large for
    a float, or a signalling NaN, is no more a bound than NaN."""
    if isinstance(value, numbers.Real | decimal.Decimal) and not isinstance(value, bool):
        with contextlib.suppress(OverflowError, ValueError):
            return float(value)
    return math.nan


def checked_seconds(option: str, value: float, *, zero: bool, endless: bool = False) -> float:
    """``value`` if it is a finite number of seconds (``zero``: 0 allowed; ``endless``:
    infinity too, for an option where it means "never"), else a one-line
    :class:`InvalidOption`: a NaN deadline, say, would leave store calls without a bound, and
    ``True`` (a switch taken for a number) or ``"30"`` is no number of seconds; a
    :class:`~decimal.Decimal` is (a configuration read exactly, say)."""
    seconds = as_seconds(value)
    if endless and seconds == math.inf:
        return seconds
    if not (math.isfinite(seconds) and (seconds > 0 or (zero and seconds == 0))):
        wanted = "0 or more" if zero else "more than 0"
        kind = "a number of seconds (or infinity)" if endless else "a finite number of seconds"
        raise InvalidOption(f"{option} must be {kind}, {wanted}: {value!r}")
    return seconds


def checked_count(option: str, value: int, *, least: int) -> int:
    """``value`` if it is a whole number (not a switch) of ``least`` or more, else a one-line
    :class:`InvalidOption`."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise InvalidOption(f"{option} must be a whole number, at least {least}: {value!r:.80}")
    if value < least:
        raise InvalidOption(f"{option} must be at least {least}")
    return int(value)
