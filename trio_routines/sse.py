"""A pure, incremental reader of ``text/event-stream`` (server-sent events).

Fed decoded text in arbitrary pieces, it returns the events completed so far as
``(type, data)`` pairs, per the event-stream format: lines end in CRLF, LF or CR (a CR at the
very end of a piece may be the first half of a CRLF, so it waits for the next piece); ``event:``
names the type (``message`` when absent); ``data:`` lines are joined with newlines; a line
starting with a colon is a comment; ``id:`` and ``retry:`` mean nothing to a single POST and
are ignored; a blank line ends an event. No IO here: the HTTP agent owns the socket.
"""

from __future__ import annotations

import re

__all__ = ["EventStreamParser"]

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class EventStreamParser:
    def __init__(self) -> None:
        self._rest = ""
        self._type = ""
        self._data: list[str] = []

    def feed(self, text: str) -> list[tuple[str, str]]:
        """The events that ``text`` (appended to what came before) completes."""
        text = self._rest + text
        held = ""
        if text.endswith("\r"):
            text, held = text[:-1], "\r"
        *lines, rest = _LINE_BREAK.split(text)
        self._rest = rest + held
        events = []
        for line in lines:
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def close(self) -> list[tuple[str, str]]:
        """At the end of the stream: an event left without its blank line still counts.

        (The format would drop it; a server that ends on ``event: failed`` and closes deserves
        to be heard.)
        """
        events = self.feed("\n") if self._rest else []
        if self._type or self._data:
            events.append(self._dispatch())
        return events

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
