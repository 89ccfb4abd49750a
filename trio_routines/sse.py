"""A pure, incremental reader of ``text/event-stream`` (server-sent events).

Fed decoded text in arbitrary pieces, it returns the events completed so far as
``(type, data)`` pairs, per the event-stream format: lines end in CRLF, LF or CR; ``event:``
names the type (``message`` when absent); ``data:`` lines are joined with newlines; a line
starting with a colon is a comment; ``id:`` and ``retry:`` mean nothing to a single POST and
are ignored; a blank line ends an event. No IO here: the HTTP agent owns the socket.

Theory of operation. Only the new piece is searched for line breaks; the unfinished line is
kept as a list of pieces and joined once, when its break arrives, so a long line fed in small
pieces costs time linear in its length (re-joining and re-splitting it per piece would not).
A CR ends a line at once; when it is the last character of a piece, a LF opening the next
piece is its other half and is skipped. A line longer than ``max_line`` characters raises
:class:`LineTooLong`, however it was split.
"""

from __future__ import annotations

import re

__all__ = ["MAX_LINE", "EventStreamParser", "LineTooLong"]

MAX_LINE = 1 << 18  # characters of one line held at most
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class LineTooLong(ValueError):
    """Raised by :meth:`EventStreamParser.feed` and ``close`` for a line over ``max_line``.

    The stream cannot be read on: the HTTP agent fails the turn with a one-line reason.
    """


class EventStreamParser:
    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.max_line = max_line
        self._pieces: list[str] = []  # the unfinished line
        self._held = 0  # characters in ``_pieces``
        self._after_cr = False  # the last piece ended in CR: a LF next is its other half
        self._type = ""
        self._data: list[str] = []

    def feed(self, text: str) -> list[tuple[str, str]]:
        """The events that ``text`` (appended to what came before) completes."""
        if not text:
            return []
        if self._after_cr:
            self._after_cr = False
            if text[0] == "\n":
                text = text[1:]
        events = []
        start = 0
        for found in _LINE_BREAK.finditer(text):
            event = self._line(self._take(text[start : found.start()]))
            if event is not None:
                events.append(event)
            start = found.end()
            self._after_cr = start == len(text) and found.group() == "\r"
        rest = text[start:]
        if rest:
            self._check(self._held + len(rest))
            self._pieces.append(rest)
            self._held += len(rest)
        return events

    def close(self) -> list[tuple[str, str]]:
        """At the end of the stream: an event left without its blank line still counts.

        (The format would drop it; a server that ends on ``event: failed`` and closes deserves
        to be heard.)
        """
        events = []
        if self._pieces:
            event = self._line(self._take(""))
            if event is not None:
                events.append(event)
        if self._type or self._data:
            events.append(self._dispatch())
        return events

    def _take(self, end: str) -> str:
        """The unfinished line completed by ``end``; nothing is left unfinished."""
        self._check(self._held + len(end))
        line = "".join(self._pieces) + end if self._pieces else end
        self._pieces = []
        self._held = 0
        return line

    def _check(self, length: int) -> None:
        if length > self.max_line:
            raise LineTooLong(f"a line longer than {self.max_line} characters")

    def _line(self, line: str) -> tuple[str, str] | None:
        if not line:
            if self._type or self._data:
                return self._dispatch()
            return None
        if line.startswith(":"):
            return None
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._type = value
        elif field == "data":
            self._data.append(value)
        return None

    def _dispatch(self) -> tuple[str, str]:
        event = (self._type or "message", "\n".join(self._data))
        self._type = ""
        self._data = []
        return event
