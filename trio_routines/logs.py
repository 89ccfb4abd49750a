"""Log records as the command line writes them to stderr: one line per record, always.

Text: ``INFO  daily completed (12ms)``, the level padded to 5. JSON lines:
``{"ts", "level", "message"}``. Either way a message is folded onto one line (failure text from
a model or a provider may hold newlines, U+2028 or U+0085, which many readers take for line
breaks) and, in text, control characters are shown as ``\\xNN`` so that nothing in a message
can forge a record of its own or move a terminal's cursor.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from .instants import format_iso
from .text import one_line as one_line
from .text import visible

log = logging.getLogger("trio_routines")

_LEVEL_NAMES = {"WARNING": "WARN", "CRITICAL": "FATAL"}


def _level_name(record: logging.LogRecord) -> str:
    return _LEVEL_NAMES.get(record.levelname, record.levelname)


class TextFormatter(logging.Formatter):
    """``INFO  daily completed (12ms)``: the level padded to 5, then the message on one line."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{_level_name(record):<5} {visible(one_line(record.getMessage()))}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``{"ts", "level", "message"}``, the message on one line."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = format_iso(datetime.fromtimestamp(record.created, UTC))
        message = one_line(record.getMessage())
        entry = {"ts": stamp, "level": _level_name(record), "message": message}
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(log_format: str, level: str) -> None:
    """Send the ``trio_routines`` logger to stderr in ``log_format`` (``text`` or ``json``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    log.handlers[:] = [handler]
    log.setLevel(level.upper())
    log.propagate = False
