"""Log records as the command line writes them to stderr: one line per record, always.

Text: ``2026-11-30T08:00:00.012Z INFO  digest slot=2026-11-30T08:00Z replica=web-1 completed
(1200ms)``: the instant, the level padded to 5, and, on every line about a fire, the routine,
the slot and the replica firing it before the message. JSON lines: ``{"ts", "level",
"message", "host", "pid"}`` and, about a fire, ``routine``, ``slot``, ``replica``, and on its
outcome line ``outcome``, ``ms``, ``late_ms``, ``error``. A record of an unexpected error
(``log.exception``) says the exception and where it was raised at the end of its line, and a
JSON line carries its whole traceback as ``exception``.

Where do a record's routine and slot come from? The runtime sets a
:class:`~trio_routines.context.FireContext` around every turn (a context variable), and
:class:`FireFields` reads it for each record, so no log call in the layers between has to pass
them along; a call outside a turn passes them as ``extra``. :func:`log_fields` adds fields for
a stretch of code (the fire path adds ``late_ms``), and the turn's outcome line carries its own.

A host that logs through its own handlers gets the same fields on them: add a
:class:`FireFields` filter to the handler and give it a :class:`TextFormatter`, a
:class:`JsonFormatter`, a :class:`JournalFormatter`, or its own format in a
:class:`FireFormatter` (or read ``record.routine`` and ``record.slot`` in a formatter of its
own). :func:`configure_logging` does that for stderr, as
the command line does; under systemd (``$JOURNAL_STREAM`` naming stderr) it writes the journal
format, which leaves the time stamp to the journal.

Either way a message is folded onto one line (failure text from a model or a provider may hold
newlines, U+2028 or U+0085, which many readers take for line breaks) and, in text, control
characters are shown as ``\\xNN`` so that nothing in a message can forge a record of its own or
move a terminal's cursor.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import traceback
from collections.abc import Mapping
from contextlib import AbstractContextManager
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .context import current_fire
from .instants import format_iso
from .text import one_line as one_line
from .text import safe_json, visible

log = logging.getLogger("trio_routines")

_LEVEL_NAMES = {"WARNING": "WARN", "CRITICAL": "FATAL"}
# The structured fields a record may carry, in the order a JSON line shows them.
FIELDS = ("routine", "slot", "replica", "outcome", "ms", "late_ms", "error")
_fields: ContextVar[Mapping[str, Any] | None] = ContextVar("trio_routines_log_fields", default=None)


def log_fields(**fields: Any) -> AbstractContextManager[None]:
    """Every record logged in this task inside the block carries ``fields`` (as ``extra``)."""
    return _LogFields(fields)


class _LogFields:
    # A class rather than a generator: every fire enters one (see ``scheduler/state.py``).
    __slots__ = ("_fields", "_token")

    def __init__(self, fields: dict[str, Any]) -> None:
        self._fields = fields
        self._token: Token[Mapping[str, Any] | None] | None = None

    def __enter__(self) -> None:
        outer = _fields.get()
        self._token = _fields.set({**outer, **self._fields} if outer else self._fields)

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _fields.reset(self._token)
            self._token = None


class FireFields(logging.Filter):
    """Give each record the routine and slot of the turn it is logged in, and the fields of
    :func:`log_fields`; what a record was given as ``extra`` wins."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Add the fields to ``record``; every record passes."""
        fire = current_fire()
        found: dict[str, Any] = dict(_fields.get() or {})
        if fire is not None:
            if fire.routine is not None:
                found.setdefault("routine", fire.routine)
            if fire.slot is not None:
                found.setdefault("slot", fire.slot)
            if fire.replica is not None:
                found.setdefault("replica", fire.replica)
        for key, value in found.items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def _short(slot: datetime) -> str:
    """``2026-11-30T09:00Z``: the slot without the seconds and milliseconds it lacks."""
    full = format_iso(slot)
    if full.endswith(":00.000Z"):
        return full[:16] + "Z"
    if full.endswith(".000Z"):
        return full[:19] + "Z"
    return full


def _stamp(record: logging.LogRecord) -> str:
    return format_iso(datetime.fromtimestamp(record.created, UTC))


def _level_name(record: logging.LogRecord) -> str:
    return _LEVEL_NAMES.get(record.levelname, record.levelname)


class TextFormatter(logging.Formatter):
    """``<instant> INFO  digest slot=<slot> completed (12ms)``: one line per record."""

    def format(self, record: logging.LogRecord) -> str:
        """``record`` as one line of text."""
        return f"{_stamp(record)} {_level_name(record):<5} {_text(record)}{_raised(record)}"


class JournalFormatter(logging.Formatter):
    """``<6>INFO  digest slot=<slot> completed (12ms)``: the text line for systemd's journal.

    The journal stamps every line itself, so the line carries no instant of ours; its
    ``<N>`` prefix (the syslog priority, which journald reads from a service's stderr by
    default) makes ``journalctl -p warning`` and the colours work.
    """

    def format(self, record: logging.LogRecord) -> str:
        """``record`` as one line of text, led by its syslog priority."""
        priority = _PRIORITIES.get(_level_name(record), 6)
        return f"<{priority}>{_level_name(record):<5} {_text(record)}{_raised(record)}"


_PRIORITIES = {"DEBUG": 7, "INFO": 6, "WARN": 4, "ERROR": 3, "FATAL": 2}


def _raised(record: logging.LogRecord) -> str:
    """The exception a record carries (``log.exception``), on its line: `` — ValueError: why
    (at module.py:12 in f)``, where it was raised; nothing when it carries none."""
    info = record.exc_info
    if not info or info[1] is None:
        return ""
    exc = info[1]
    frames = traceback.extract_tb(exc.__traceback__)
    said = f": {exc}" if str(exc) else ""
    if frames:
        said += f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})"
    return " — " + visible(one_line(f"{type(exc).__name__}{said}"))


def _message(record: logging.LogRecord) -> str:
    """The record's message on one line: the whitespace of its format folded, and each text
    it was given for a ``%s`` shown as :func:`visible` shows it (a routine ``a\\nb`` as
    ``a\\x0ab``, not as ``a b``, which another routine may be called); a ``%r`` shows its
    text's own escapes."""
    args, msg = record.args, str(record.msg)
    if isinstance(args, tuple) and args:
        kinds = [m.group(1) for m in _CONVERSION.finditer(msg) if m.group(1) != "%"]
        if len(kinds) == len(args):  # (a ``*`` width takes one more: then as logging does)
            shown = tuple(
                visible(arg) if kind == "s" and isinstance(arg, str) else arg
                for arg, kind in zip(args, kinds, strict=True)
            )
            return one_line(msg % shown)
    return one_line(record.getMessage())


#: A ``%`` conversion of a log format, its type letter captured (``%%`` too: no argument).
_CONVERSION = re.compile(r"%(?:\([^)]*\))?[#0 +\-]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?([a-zA-Z%])")


def _text(record: logging.LogRecord) -> str:
    """The message, led by the routine and slot of a fire, as one visible line."""
    message = _message(record)
    routine = getattr(record, "routine", None)
    slot = getattr(record, "slot", None)
    if isinstance(routine, str) and isinstance(slot, datetime):
        # The routine leads the line once, followed by its slot, whatever the message says:
        # its name is taken off a message it leads as a word ("digest: …", "digest completed"),
        # not off one that merely begins with its letters ("could not …" of routine "c").
        name = one_line(visible(routine))  # as the message shows it
        after = message[len(name) :]
        led = message.startswith(name) and after[:1] in ("", ":", " ")
        rest = after.lstrip(":").lstrip() if led else message
        replica = getattr(record, "replica", None)
        who = f" replica={one_line(visible(replica))}" if isinstance(replica, str) else ""
        message = one_line(f"{name} slot={_short(slot)}{who} {rest}")
    return visible(message)


class FireFormatter(logging.Formatter):
    """A host's own format (``logging.Formatter``'s ``fmt``, ``datefmt``, ``style``) with the
    fire's fields leading the message: ``%(message)s`` reads ``digest slot=<slot>
    replica=<id> completed (12ms)`` on every line about a fire, one visible line always.

    For a host that keeps its log format and wants the slot in it; the handler needs the
    :class:`FireFields` filter (or records that carry ``routine`` and ``slot``).
    """

    def formatMessage(self, record: logging.LogRecord) -> str:
        """The format applied with the message as :class:`TextFormatter` writes it."""
        plain = record.message
        record.message = _text(record)
        try:
            return super().formatMessage(record)
        finally:
            record.message = plain


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``{"ts", "level", "message", "host", "pid", ...}``."""

    def __init__(self) -> None:
        super().__init__()
        self.host = socket.gethostname()

    def format(self, record: logging.LogRecord) -> str:
        """``record`` as one line of JSON."""
        entry: dict[str, Any] = {
            "ts": _stamp(record),
            "level": _level_name(record),
            "message": one_line(record.getMessage()),
        }
        for key in FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                entry[key] = format_iso(value) if isinstance(value, datetime) else value
        entry["host"] = self.host
        entry["pid"] = record.process if record.process is not None else os.getpid()
        if record.exc_info and record.exc_info[1] is not None:  # (one line: JSON escapes breaks)
            entry["exception"] = "".join(traceback.format_exception(record.exc_info[1]))
        return safe_json(entry)


def journal_stream(environ: Mapping[str, str] | None = None, stream: Any = None) -> bool:
    """Whether ``stream`` (stderr) is connected to systemd's journal: ``$JOURNAL_STREAM``
    names its device and inode (systemd sets it for a service whose output goes there; a
    child whose stderr was redirected elsewhere inherits the variable, hence the comparison)."""
    value = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "")
    device, sep, inode = value.partition(":")
    if not sep:
        return False
    try:
        status = os.fstat((sys.stderr if stream is None else stream).fileno())
        return (status.st_dev, status.st_ino) == (int(device), int(inode))
    except (OSError, ValueError, AttributeError):  # no descriptor (a test's capture), bad value
        return False


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`configure_logging` puts on the logger, knowing its format's name."""

    def __init__(self, format_name: str) -> None:
        super().__init__(sys.stderr)
        self.format_name = format_name


def configured_format() -> str | None:
    """The format of the handler :func:`configure_logging` put on the ``trio_routines``
    logger (``text``, ``json`` or ``journal``); None when there is none of ours there."""
    for handler in log.handlers:
        if isinstance(handler, _Stderr):
            return handler.format_name
    return None


def configure_logging(log_format: str | None, level: str) -> None:
    """Send the ``trio_routines`` logger to stderr in ``log_format``: ``text``, ``json`` or
    ``journal`` (:class:`JournalFormatter`); None picks ``journal`` when stderr is the
    journal's stream (:func:`journal_stream`), else ``text``. The logger's handlers are
    replaced by that one, and its records no longer propagate to the root logger. Any other
    format is a ValueError, and so is a level that is none of logging's names."""
    if log_format is None:
        log_format = "journal" if journal_stream() else "text"
    formatters: dict[str, type[logging.Formatter]] = {
        "text": TextFormatter,
        "json": JsonFormatter,
        "journal": JournalFormatter,
    }
    if log_format not in formatters:
        raise ValueError(f"log_format must be text, json, journal or None, not {log_format!r}")
    numeric = logging.getLevelName(level.upper()) if isinstance(level, str) else None
    if not isinstance(numeric, int):  # checked before the handlers are replaced
        raise ValueError(f"level must be a name of logging's levels (debug, info…), not {level!r}")
    handler = _Stderr(log_format)
    handler.addFilter(FireFields())
    handler.setFormatter(formatters[log_format]())
    log.handlers[:] = [handler]
    log.setLevel(numeric)
    log.propagate = False
