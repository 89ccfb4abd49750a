"""What turns spend: an agent's :class:`~trio_routines.agent.Usage` events, checked and added up.

The rule a turn's events follow: token counts add up; costs add up within one currency, the
first currency a turn reports (``USD`` when a cost names none); a cost in another currency
later in the same turn is dropped with a warning (a turn is charged in one currency). A field
that is not a valid value -- a count that is not a whole number from 0 to
:data:`MAX_TOKENS`, a cost that is not a finite number from 0 to :data:`MAX_COST`, a currency
that is not 1 to 10 ASCII letters -- is dropped with a one-line warning naming it; the rest of
the event counts, and the turn's outcome never depends on it.

Two JSON shapes. On the agent's wire (an HTTP agent's ``usage`` field and ``usage`` event, a
``cmd:`` agent's last line): ``{"input_tokens", "output_tokens", "cost", "currency"}``, the
names providers use. Stored and shown (claim files, the HTTP API, ``history --json``):
``{"inputTokens"?, "outputTokens"?, "cost"?, "currency"?}``, camel case as the other stored
keys; read leniently, a malformed one reads as no usage.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from .agent import Usage

__all__ = [
    "DEFAULT_CURRENCY",
    "MAX_COST",
    "MAX_TOKENS",
    "USAGE_LINE",
    "Tally",
    "Usage",
    "describe",
    "from_wire",
    "usage_from_json",
    "usage_to_json",
]

#: The currency of a cost reported without one.
DEFAULT_CURRENCY = "USD"
#: The largest token count one event may report (more is a bad value, not a count).
MAX_TOKENS = 10**15
#: The largest cost one event may report.
MAX_COST = 1e12
_CURRENCY = re.compile(r"[A-Za-z]{1,10}")
_WIRE_KEYS = ("input_tokens", "output_tokens", "cost", "currency")


def _tokens(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 0 <= value <= MAX_TOKENS:
        return value
    return None


def _cost(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        cost = float(value)
    except OverflowError:  # an integer past any float: no cost (JSON gives any length)
        return None
    return cost if math.isfinite(cost) and 0 <= cost <= MAX_COST else None


def checked_currency(value: object) -> str | None:
    """``value`` as a currency (1 to 10 letters, upper case), or None when it is not one."""
    if isinstance(value, str) and _CURRENCY.fullmatch(value):
        return value.upper()
    return None


def checked(event: Usage) -> tuple[Usage, list[str]]:
    """``event`` with its bad fields dropped, and a short text for each one dropped."""
    problems = []
    fields: dict[str, Any] = {}
    for name, check in (("input_tokens", _tokens), ("output_tokens", _tokens), ("cost", _cost)):
        raw = getattr(event, name)
        if raw is None:
            continue
        good = check(raw)
        if good is None:
            problems.append(f"{name} {_shown(raw)} is not a valid value")
        fields[name] = good
    raw_currency = event.currency
    currency = None
    if raw_currency is not None:
        currency = checked_currency(raw_currency)
        if currency is None:
            problems.append(f"currency {_shown(raw_currency)} is not 1 to 10 letters")
            if fields.get("cost") is not None:
                problems.append("its cost is dropped with it")
                fields["cost"] = None
    if fields.get("cost") is not None and currency is None and raw_currency is None:
        currency = DEFAULT_CURRENCY
    if fields.get("cost") is None:
        currency = None
    return Usage(currency=currency, **fields), problems


def _shown(value: object) -> str:
    if isinstance(value, int) and not -(10**40) < value < 10**40:
        return "<an integer of more than 40 digits>"  # (repr is refused past 4,300 of them)
    try:
        text = repr(value)
    except Exception:  # a py: agent's object whose repr raises
        return f"<{type(value).__name__}>"
    return text if len(text) <= 40 else text[:39] + "…"


class Tally:
    """A turn's usage so far: :meth:`add` each event (see the module doc for the rule)."""

    def __init__(self) -> None:
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.cost: float | None = None
        self.currency: str | None = None
        self.seen = False

    def add(self, event: Usage) -> list[str]:
        """Count ``event``; the problems found in it (each dropped field), for a warning."""
        usage, problems = checked(event)
        self.seen = True
        # A turn's total holds at most what one event may (far past any budget): a sum past it
        # would read back as a bad value, and the turn would count as having spent nothing.
        if usage.input_tokens is not None:
            self.input_tokens = min((self.input_tokens or 0) + usage.input_tokens, MAX_TOKENS)
        if usage.output_tokens is not None:
            self.output_tokens = min((self.output_tokens or 0) + usage.output_tokens, MAX_TOKENS)
        if usage.cost is not None:
            if self.currency is not None and usage.currency != self.currency:
                problems.append(
                    f"a cost in {usage.currency} after one in {self.currency} is dropped "
                    "(a turn is charged in one currency)"
                )
            else:
                self.currency = usage.currency
                self.cost = min((self.cost or 0.0) + usage.cost, MAX_COST)
        return problems

    def total(self) -> Usage | None:
        """What the turn spent, or None when nothing valid was reported."""
        if not self.seen:  # the common turn: its agent reports no usage
            return None
        usage = Usage(self.input_tokens, self.output_tokens, self.cost, self.currency)
        return None if usage == Usage() else usage


def from_wire(raw: object) -> tuple[Usage | None, str | None]:
    """A usage event from the agent's wire shape (module doc): the event, or why there is none.

    Values are not checked here (the turn's :class:`Tally` does, field by field); only the
    shape: an object, with at least one known key.
    """
    if not isinstance(raw, dict):
        return None, f"usage must be a JSON object, got {type(raw).__name__}"
    if not any(key in raw for key in _WIRE_KEYS):
        return None, "usage names none of " + ", ".join(_WIRE_KEYS)
    return Usage(*(raw.get(key) for key in _WIRE_KEYS)), None


def usage_to_json(usage: Usage) -> dict[str, Any]:
    """The stored shape: ``{"inputTokens"?, "outputTokens"?, "cost"?, "currency"?}``."""
    record: dict[str, Any] = {}
    if usage.input_tokens is not None:
        record["inputTokens"] = usage.input_tokens
    if usage.output_tokens is not None:
        record["outputTokens"] = usage.output_tokens
    if usage.cost is not None:
        record["cost"] = usage.cost
        record["currency"] = usage.currency or DEFAULT_CURRENCY
    return record


def usage_from_json(raw: object) -> Usage | None:
    """The stored shape read back; None when absent, empty or malformed (never raises)."""
    if not isinstance(raw, dict):
        return None
    usage, problems = checked(
        Usage(raw.get("inputTokens"), raw.get("outputTokens"), raw.get("cost"), raw.get("currency"))
    )
    if problems or usage == Usage():
        return None
    return usage


def stored_usage(value: Usage | None) -> Usage | None:
    """``value`` as a record keeps it: checked, an empty one as None (a converter for attrs)."""
    if value is None:
        return None
    if not isinstance(value, Usage):
        raise TypeError(f"usage must be a Usage or None, got {type(value).__name__}")
    usage, problems = checked(value)
    if problems:
        raise ValueError("usage: " + "; ".join(problems))
    return None if usage == Usage() else usage


def tokens_text(count: int) -> str:
    """``950``, ``12.3k``, ``4.5M``: a count as a person reads it."""
    for size, suffix in ((10**9, "G"), (10**6, "M"), (10**3, "k")):
        if count >= size:
            return f"{count / size:.1f}".removesuffix(".0") + suffix
    return str(count)


def cost_text(cost: float, currency: str | None) -> str:
    """``0.042 USD``: at most 4 significant decimals, never the exponent form."""
    text = f"{cost:.4f}".rstrip("0").rstrip(".") if cost < 1000 else f"{cost:.2f}"
    return f"{text} {currency or DEFAULT_CURRENCY}"


def describe(usage: Usage | None) -> str:
    """``1.2k in, 300 out, 0.04 USD``; ``""`` for no usage."""
    if usage is None:
        return ""
    parts = []
    if usage.input_tokens is not None:
        parts.append(f"{tokens_text(usage.input_tokens)} in")
    if usage.output_tokens is not None:
        parts.append(f"{tokens_text(usage.output_tokens)} out")
    if usage.cost is not None:
        parts.append(cost_text(usage.cost, usage.currency))
    return ", ".join(parts)


#: How a ``cmd:`` agent reports usage: its output's last line (a final line break allowed),
#: this marker and then the wire shape as JSON. That line is not part of the reply.
USAGE_LINE = "trio-routines-usage:"
#: The longest last line held back as a possible usage line (a longer one is output).
USAGE_LINE_LIMIT = 4096
#: How much of the output shown is kept, to find a usage line that did not begin its line.
_SHOWN_KEPT = 2 * USAGE_LINE_LIMIT


class UsageLine:
    """Splits a command's streamed output from a usage line at its end (:data:`USAGE_LINE`).

    :meth:`feed` returns what may be shown now: everything but a last line that is, or may
    still become, a usage line, held back until more output shows it was not the last.
    :meth:`close` ends the output: the held text (to show) and the usage it reported. The
    answer is the same however the output is cut into pieces: a piece starts a line only
    where the output before it ended one (a pipe's reads fall anywhere).
    """

    def __init__(self) -> None:
        self._held = ""  # a line start, or ""
        self._line_start = True  # whether the text after what was returned starts a line
        self._shown = ""  # the end of what was returned, to say why a usage line was not read

    def feed(self, piece: str) -> str:
        text = self._held + piece
        start = text.rfind("\n", 0, len(text) - 1) + 1
        if start or self._line_start:
            tail = text[start:]
            could_be = tail.startswith(USAGE_LINE) or USAGE_LINE.startswith(tail)
            if could_be and len(tail) <= USAGE_LINE_LIMIT:
                self._held = tail
                self._line_start = True
                self._shown = (self._shown + text[:start])[-_SHOWN_KEPT:]
                return text[:start]
        self._held = ""
        self._line_start = text.endswith("\n")
        self._shown = (self._shown + text)[-_SHOWN_KEPT:]
        return text

    def close_after(self, piece: str) -> tuple[str, Usage | None, str | None]:
        """:meth:`feed` the output's last ``piece``, then :meth:`close`: all that is left."""
        shown = self.feed(piece) if piece else ""
        rest, usage, problem = self.close()
        return shown + rest, usage, problem

    def close(self) -> tuple[str, Usage | None, str | None]:
        """The rest to show, the usage of a usage line, and why a usage line was unreadable."""
        held, self._held = self._held, ""
        if not held.startswith(USAGE_LINE):
            return held, None, self._unread(held)
        raw = held[len(USAGE_LINE) :].strip()
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            return "", None, f"the usage line is not JSON: {_shown(raw)}"
        usage, problem = from_wire(value)
        return "", usage, problem

    def _unread(self, held: str) -> str | None:
        """Why the output's last line, shown as reply, was not read as a usage line though it
        holds the marker (a reply with no line break at its end, then the usage line)."""
        shown = self._shown + held
        last = shown.removesuffix("\n").rpartition("\n")[2]
        if USAGE_LINE not in last:
            return None
        if last.startswith(USAGE_LINE):
            return f"the usage line is longer than {USAGE_LINE_LIMIT} characters"
        return (
            f"the last line holds {USAGE_LINE!r} after other text: the usage line must begin a "
            "line of its own (end the reply with a line break), and was left in the reply"
        )
