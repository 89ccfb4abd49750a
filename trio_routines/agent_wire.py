"""The HTTP agent's pure core (see :mod:`.agent_http`): the body of a turn's POST, what an
answer's status and content type mean, the reasons kept from a server's words (its token
masked before they are cut), and an answer's text read as deltas, usage and an outcome event.

Usage (what the turn spent, :mod:`trio_routines.usage`'s wire shape ``{"input_tokens",
"output_tokens", "cost", "currency"}``) comes in a ``usage`` event of an event stream (its
data that JSON object; several add up), or in the ``usage`` member of a JSON reply (a 2xx
``application/json`` or ``…+json`` body that is an object). A usage that cannot be read is a
warning; the turn goes on as if it had not been sent.

No IO here: the shell in :mod:`.agent_http` posts, reads and decodes, and calls these.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from .agent import SESSION_BUSY, Failed, TextDelta, Usage
from .context import FireContext
from .instants import format_iso
from .logs import one_line
from .sse import EventStreamParser, LineTooLong
from .tickets import make_ticket
from .usage import from_wire

REASON_LIMIT = 300  # characters of a failure reason kept
BUSY_STATUSES = frozenset({409, 423})


def request_body(session: str, prompt: str, fire: FireContext | None) -> dict[str, Any]:
    """The JSON body of one turn's POST."""
    body: dict[str, Any] = {"session": session, "prompt": prompt}
    if fire is None:
        return body
    if fire.kind == "routine":
        assert fire.slot is not None
        body["routine"] = fire.routine
        body["slot"] = format_iso(fire.slot)
    elif fire.kind == "wakeup":
        body["wakeup"] = fire.wakeup
    else:
        body["run"] = True
        body["routine"] = fire.routine
    body["turn"] = make_ticket(fire)
    return body


@attrs.frozen
class Answer:
    """How to read an answer, decided from its status and content type alone."""

    kind: str  # "events", "text", "busy", "failed", "redirect"
    reason: str = ""


def classify(status: int, content_type: str) -> Answer:
    """What an answer with ``status`` and ``content_type`` means for the turn."""
    if status in BUSY_STATUSES:
        return Answer("busy", f"the agent answered {status} (busy)")
    if status in (307, 308):
        return Answer("redirect")
    if not 200 <= status < 300:
        return Answer("failed", f"the agent answered {status}")
    media = content_type.partition(";")[0].strip().lower()
    return Answer("events" if media == "text/event-stream" else "text")


def first_line(
    body: bytes, limit: int = REASON_LIMIT, secret: str | None = None, *, cut: bool = False
) -> str:
    """The first non-blank line of ``body``, ``secret`` masked, at most ``limit`` characters.

    ``cut``: ``body`` is the beginning of a longer one (see :func:`masked`).
    """
    text = masked(body.decode("utf-8", errors="replace"), secret, cut=cut)
    for line in text.splitlines():
        if line.strip():
            return reason_of(line, limit=limit)
    return ""


def coding_of(values: list[str], secret: str | None = None) -> str:
    """The content codings an answer declares besides ``identity`` ("" for none), one line."""
    codings = (value.strip().lower() for value in values)
    return reason_of(", ".join(c for c in codings if c and c != "identity"), secret)


def masked(text: str, secret: str | None, *, cut: bool = False) -> str:
    """``text`` with every ``secret`` in it as ``***``.

    With ``cut`` (``text`` was cut from something longer), an end that begins the secret is
    masked too: the rest of it was behind the cut.
    """
    if not secret:
        return text
    text = text.replace(secret, "***")
    if cut:
        for size in range(min(len(secret) - 1, len(text)), 0, -1):
            if text.endswith(secret[:size]):
                return text[:-size] + "***"
    return text


def reason_of(text: str, secret: str | None = None, limit: int = REASON_LIMIT) -> str:
    """A reason to keep: ``secret`` masked first, then one line of at most ``limit`` characters.

    In that order: cut first, a secret straddling the cut would leave its beginning behind.
    """
    text = one_line(masked(text, secret))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_json(content_type: str) -> bool:
    """Whether an answer's content type is JSON (``application/json``, ``…+json``)."""
    media = content_type.partition(";")[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def parse_usage(data: str) -> tuple[Usage | None, str | None]:
    """A usage event's data (JSON text): the event, or why there is none."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None, "its usage is not JSON"
    return from_wire(value)


def reply_usage(body: str) -> tuple[Usage | None, str | None]:
    """The usage in a JSON reply's ``usage`` member: the event, or why there is none (a body
    that is no JSON object, or has no such member, has none and says nothing)."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None, None
    if not isinstance(value, dict) or "usage" not in value:
        return None, None
    return from_wire(value["usage"])


class Reader:
    """Turns decoded answer text into deltas and usage; remembers an event stream's outcome
    event, and keeps a JSON reply's text (``keep``) to read its usage from at the end."""

    def __init__(self, parser: EventStreamParser | None, *, keep: bool = False) -> None:
        self.parser = parser
        self.outcome: Failed | None = None
        self.overlong = False  # a line passed the parser's cap: the stream is unreadable
        self.problems: list[str] = []  # usage that could not be read: each one a warning
        self.kept: list[str] | None = [] if keep else None

    def feed(self, piece: str, final: bool = False) -> list[TextDelta | Usage]:
        if self.parser is None:
            if self.kept is not None and piece:
                self.kept.append(piece)
            return [TextDelta(piece)] if piece else []
        try:
            found = self.parser.feed(piece) + (self.parser.close() if final else [])
        except LineTooLong:
            self.overlong = True
            self.outcome = Failed(
                "the agent's event stream sent a line longer than "
                f"{self.parser.max_line} characters — stopped reading"
            )
            return []
        deltas: list[TextDelta | Usage] = []
        for kind, data in found:
            self.outcome = _event(kind, data) or self.outcome  # the last one wins
            if kind == "message" and data:
                deltas.append(TextDelta(data))
            elif kind == "usage":
                usage, problem = parse_usage(data)
                if usage is not None:
                    deltas.append(usage)
                if problem is not None:
                    self.problems.append(problem)
        return deltas

    def reply_usage(self) -> Usage | None:
        """The usage of a JSON reply kept whole (None: none, or not kept)."""
        if self.kept is None:
            return None
        usage, problem = reply_usage("".join(self.kept))
        if problem is not None:
            self.problems.append(problem)
        return usage


def _event(kind: str, data: str) -> Failed | None:
    """A stream's outcome event, its data still raw (bounded by the parser's line cap)."""
    if kind == "failed":
        return Failed(data)
    if kind == "busy":
        return Failed(data, SESSION_BUSY)
    return None


def event_outcome(event: Failed, secret: str | None) -> Failed:
    """A stream's outcome event as a reason to keep: the secret masked, then cut."""
    if event.busy:
        return Failed(reason_of(event.details, secret) or "the agent's session is busy", event.code)
    return Failed(reason_of(event.details, secret) or "the agent reported a failure", event.code)
