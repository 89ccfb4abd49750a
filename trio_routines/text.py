"""Text from outside, made safe to show: the one place that escapes it.

A routine's file name, a session, a wake-up's prompt, a model's or a provider's failure text:
any of it may hold line breaks (which forge a log record of their own), escape sequences (which
move a terminal's cursor or recolour it) or megabytes. Every surface that writes such text to
a terminal, a log or the state store passes it through here.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

ERROR_LIMIT = 1024  # bytes of UTF-8: how much of a failure reason is stored
#: Characters of a value from outside that an error message quotes (:func:`quoted`).
QUOTE_LIMIT = 40

_WHITESPACE = re.compile(r"\s+")
#: Whitespace read as a space where text is shown: all but the breaks only some readers
#: take for line breaks (vertical tab, form feed, the information separators, U+0085,
#: U+2028, U+2029), which :func:`visible` shows escaped instead.
_PLAIN_WHITESPACE = re.compile("[^\\S\x0b\x0c\x1c-\x1f\x85\u2028\u2029]+")
#: What reorders the text shown around it (the bidirectional embeddings, overrides, isolates
#: and marks: a name can read as another), the line and paragraph separators, which some
#: terminals, editors and log viewers break a line at, and the lone surrogates (text read
#: from a JSON escape such as ``\\ud800``, or from bytes that did not decode), which no
#: UTF-8 output can carry.
_UNICODE_CONTROLS = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff"
_CONTROL = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_UNICODE_CONTROLS}]")
_CONTROL_BUT_LINES = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_UNICODE_CONTROLS}]")
# What json.dumps(ensure_ascii=False) leaves raw but a terminal or a line splitter obeys.
_RAW_IN_JSON = re.compile(f"[\\x7f-\\x9f{_UNICODE_CONTROLS}]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable_ascii(text: str) -> bool:
    """Whether every character of ``text`` is a visible ASCII one: no space, no control
    character, nothing beyond ASCII (what a header value or a request line carries as is)."""
    return all("!" <= char <= "~" for char in text)


def one_line(text: str) -> str:
    """Every run of whitespace (line breaks included) as one space, trimmed."""
    return _WHITESPACE.sub(" ", text).strip()


def visible(text: str) -> str:
    """Control characters (C0, DEL, C1) shown as ``\\xNN``, the bidirectional controls, the
    line and paragraph separators and the lone surrogates as ``\\uNNNN``; everything else as
    it is."""
    return _CONTROL.sub(_escaped, text)


def visible_lines(text: str) -> str:
    """Multi-line text (a turn's output) made safe to show: line breaks and tabs kept, every
    other control character (a carriage return, an escape sequence) shown as ``\\xNN``, and
    the bidirectional controls and the line and paragraph separators as ``\\uNNNN``."""
    return _CONTROL_BUT_LINES.sub(_escaped, text)


def name_shown(text: str) -> str:
    """A name (a routine's, a session, a wake-up's id, a replica's) as one visible line that
    no other name shows as: a backslash doubled, every control character escaped as by
    :func:`visible` (a line break as ``\\x0a``), its spaces as they are."""
    return visible(text.replace("\\", "\\\\"))


def safe_json(value: Any, *, indent: int | None = None) -> str:
    """JSON (non-ASCII kept) with every control character, bidirectional control and line
    separator escaped."""
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    return _RAW_IN_JSON.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def shown(text: str) -> str:
    """``text`` as one visible line: what a terminal or a log line may carry. Runs of spaces,
    tabs and newlines read as one space; a break only some readers obey (U+2028, U+0085, a
    vertical tab) is shown escaped, so that two sessions differing only in it stay apart."""
    return visible(_PLAIN_WHITESPACE.sub(" ", text).strip(" "))


def quoted(value: str) -> str:
    """``value``, from outside, as an error message quotes it: its ``repr`` (one line, its
    controls escaped), cut to :data:`QUOTE_LIMIT` characters with its length said, so that
    a hostile value cannot make the message itself huge."""
    if len(value) <= QUOTE_LIMIT:
        return repr(value)
    return f"{value[:QUOTE_LIMIT]!r}… ({len(value)} characters)"


def cut(text: str) -> str:
    """``text`` (already one line, quoted as its caller writes it) cut as :func:`quoted`
    cuts a value."""
    if len(text) <= QUOTE_LIMIT:
        return text
    return f"{text[:QUOTE_LIMIT]}… ({len(text)} characters)"


def clipped(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` bytes of UTF-8, on a character boundary, ``…`` added
    (when it fits: under 3 bytes, the cut text alone)."""
    data = text.encode()
    if len(data) <= limit:
        return text
    if limit < len(_ELLIPSIS):
        return data[: max(0, limit)].decode(errors="ignore")
    return data[: limit - len(_ELLIPSIS)].decode(errors="ignore") + "…"


_ELLIPSIS = "…".encode()


def error_text(text: str) -> str:
    """A failure reason as it is stored: one visible line of at most 1 KiB.

    Applying it twice changes nothing, so a stored reason read back is kept as it is.
    """
    return clipped(shown(text), ERROR_LIMIT)


def shell_word(text: str) -> str:
    """``text`` as one word a POSIX shell reads back as it is: single-quoted, or, when it holds
    a control character or a backslash, in bash's ``$'…'`` with them escaped (never a raw
    line break or escape sequence on the terminal)."""
    if name_shown(text) == text:
        return shlex.quote(text)
    return "$'" + name_shown(text).replace("'", "\\'") + "'"


def shell_name(name: str) -> str:
    """A routine's name as the last words of a printed command: :func:`shell_word`, after
    ``--`` when it begins with a dash (``resume -- -daily``), which the command would read as
    an option otherwise."""
    word = shell_word(name)
    return f"-- {word}" if name.startswith("-") else word


def shell_option(flag: str, value: str) -> str:
    """``flag value`` as printed in a command: ``flag=value`` when the value begins with a
    dash (``--session=-x``), which the command would read as an option otherwise."""
    word = shell_word(value)
    return f"{flag}={word}" if value.startswith("-") else f"{flag} {word}"
