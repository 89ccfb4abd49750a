"""Log records made by hand, as the runtime's loggers make them, for the log tests."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from trio_routines.logs import FireFields

SLOT = datetime(2026, 11, 30, 9, tzinfo=UTC)
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"  # a line's instant, as the formatters write it


def record(
    message: str, *args: object, level: int = logging.INFO, **extra: object
) -> logging.LogRecord:
    """A ``trio_routines`` record of ``message``, given ``extra``, passed through FireFields."""
    made = logging.LogRecord("trio_routines", level, __file__, 1, message, args, None)
    for key, value in extra.items():
        setattr(made, key, value)
    FireFields().filter(made)
    return made
