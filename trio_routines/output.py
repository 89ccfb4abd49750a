"""A turn's output: the end of its reply, kept with its claim when the routine asks for it.

A routine file's ``output: 4KiB`` keeps the last that many bytes of each turn's reply text
(the agent's streamed ``TextDelta`` text; a ``cmd:`` agent's stdout) in the turn's claim, so
``history --output``, ``GET /routines/{name}/history`` and the status page can show what a run
said. It is off by default (``output: none``, or no key): a reply can hold private data, and
the state store is read by everyone who may run ``history``.

What is stored (:func:`stored_output`), the same in every store:

* at most the limit's bytes of UTF-8, the *end* of the reply (what a run concluded), cut on a
  character boundary, so the text is always valid UTF-8 and never longer than asked;
* a NUL or a lone surrogate (text no store can hold: PostgreSQL's ``text`` refuses both) as
  U+FFFD;
* every other character as it came, line breaks and escape sequences included: whoever shows
  it escapes it (:func:`trio_routines.text.visible_lines`). A record read back applies the
  same rule with :data:`OUTPUT_MAX`, so a hand-edited claim cannot carry more.

Nothing here can fail a settle: any text, of any size, becomes a storable string or None.
"""

from __future__ import annotations

import re

from .errors import InvalidRoutine
from .text import quoted

__all__ = [
    "OUTPUT_MAX",
    "Tail",
    "check_output_size",
    "output_size_text",
    "parse_output_size",
    "stored_output",
]

#: The most a routine may keep of one turn's reply, in bytes of UTF-8.
OUTPUT_MAX = 64 * 1024

_SIZE = re.compile(r"([0-9]{1,12}) ?(b|kib)?", re.IGNORECASE)
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def parse_output_size(value: str) -> int | None:
    """``none`` (None: keep nothing) or a size in bytes: ``512``, ``512B``, ``4KiB``.

    Raises :class:`~trio_routines.errors.InvalidRoutine` with a one-line reason for anything
    else: a unit other than ``B`` or ``KiB`` (``KB`` and ``MB`` are refused, not guessed), a
    fraction, a sign, zero, or more than :data:`OUTPUT_MAX`.
    """
    text = value.strip()
    if text.lower() == "none":
        return None
    match = _SIZE.fullmatch(text)
    if match is None:
        raise InvalidRoutine(
            f'"output" must be "none" or a size like 512, 4KiB or 64KiB, not {quoted(value)}'
        )
    size = int(match.group(1)) * (1024 if (match.group(2) or "").lower() == "kib" else 1)
    if size == 0:
        raise InvalidRoutine('"output" must be at least 1 byte (write "none" to keep nothing)')
    if size > OUTPUT_MAX:
        raise InvalidRoutine(
            f'"output" must be at most {OUTPUT_MAX // 1024}KiB, not {quoted(value)}'
        )
    return size


def check_output_size(_inst: object, _attr: object, value: int | None) -> None:
    """The :class:`~trio_routines.Routine` field's validator: None, or 1 to OUTPUT_MAX bytes."""
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= OUTPUT_MAX
    ):
        raise InvalidRoutine(f'"output" must be a number of bytes from 1 to {OUTPUT_MAX}, or None')


def output_size_text(size: int | None) -> str:
    """How a size reads back: ``none``, ``4KiB``, ``100B``."""
    if size is None:
        return "none"
    return f"{size // 1024}KiB" if size % 1024 == 0 else f"{size}B"


def stored_output(text: str, limit: int = OUTPUT_MAX) -> str | None:
    """``text`` as it is stored: its last ``limit`` bytes of UTF-8 on a character boundary,
    NUL and lone surrogates as U+FFFD; None for nothing. Applying it twice changes nothing."""
    text = _UNSTORABLE.sub("\ufffd", text)
    data = text.encode()
    if len(data) > limit:
        # The cut may fall inside a character: its remaining continuation bytes are dropped.
        text = data[len(data) - limit :].decode(errors="ignore")
    return text or None


class Tail:
    """The end of one turn's reply, as it streams: :meth:`add` each piece, :meth:`text` once.

    Memory stays near ``limit`` characters whatever the agent sends: a character is at least
    one byte, so the last ``limit`` characters always hold the last ``limit`` bytes.
    """

    __slots__ = ("_chunks", "_kept", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._chunks: list[str] = []
        self._kept = 0  # characters in _chunks

    def add(self, piece: str) -> None:
        if not isinstance(piece, str) or not piece:
            return  # an agent's odd event is no reason to fail its turn
        if len(piece) >= self.limit:
            self._chunks = [piece[-self.limit :]]
            self._kept = self.limit
            return
        self._chunks.append(piece)
        self._kept += len(piece)
        if self._kept > 2 * self.limit:  # amortized: joined only now and then
            joined = "".join(self._chunks)[-self.limit :]
            self._chunks = [joined]
            self._kept = len(joined)

    def text(self) -> str | None:
        """What is stored for this turn (:func:`stored_output`), or None."""
        return stored_output("".join(self._chunks), self.limit)
