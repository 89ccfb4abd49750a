"""The usage ledger: what each routine's and each session's turns spent, by the minute.

Budgets (:mod:`trio_routines.budgets`) are rolling windows over it, shared by every replica
because every store keeps it: a routine's turns are recorded under ``("routine", name)``, a
wake-up's under ``("session", session)``. One entry per minute and currency holds the sums of
that minute (:func:`add_entry` adds to it), so a ledger holds at most one entry per minute of
:data:`LEDGER_SPAN`, the longest budget window, per currency: what is older is dropped at each
write, since no budget can count it.

Why not the claims: a store keeps a routine's newest 512 claims, which for a routine firing
every minute is under nine hours -- a day's budget read from them would count a third of the
day. The claims keep each turn's usage for history; the ledger keeps the sums budgets need.

A window counts whole minutes: an entry counts for the window ``since`` when its minute ends
after ``since`` (so a turn is counted for up to a minute longer than its window, never less).
An entry stamped ahead of the window's end counts too (a replica whose clock runs ahead spent
it), but not beyond :data:`AHEAD` past the end of the longest window from ``since``: an
entry at ``infinity`` or a year ahead (a row edited by hand, a clock that wrong) would hold a
budget spent until the clock caught up with it, and counts as none.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

import attrs

from .agent import Usage
from .instants import format_iso, parse_iso, shifted, truncate_ms
from .names import check_name, routine_session
from .records import Fire
from .usage import DEFAULT_CURRENCY, MAX_COST, MAX_TOKENS, checked, cost_text, tokens_text

if TYPE_CHECKING:
    from .store import UsageRecords

__all__ = ["LEDGER_SPAN", "Entry", "Kind", "Spent", "add_entry", "spent_since"]

#: The longest budget window, and so how long the ledger keeps anything.
LEDGER_SPAN = timedelta(days=7)
#: How far ahead of the longest window's end an entry may be stamped and still count.
AHEAD = LEDGER_SPAN
MINUTE = timedelta(minutes=1)
Kind = Literal["routine", "session"]
KINDS: tuple[Kind, ...] = ("routine", "session")


@attrs.frozen
class Entry:
    """One minute's sums for one currency (``""``: tokens reported with no cost)."""

    minute: datetime
    currency: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0


@attrs.frozen
class Spent:
    """What was spent in a window: tokens in and out, and the cost per currency."""

    input_tokens: int = 0
    output_tokens: int = 0
    costs: tuple[tuple[str, float], ...] = ()  # (currency, cost), by currency

    @property
    def tokens(self) -> int:
        """Tokens in and out together."""
        return self.input_tokens + self.output_tokens

    def cost(self, currency: str) -> float:
        """The cost spent in ``currency`` (0 for none)."""
        return dict(self.costs).get(currency, 0.0)


def added(one: Spent, other: Spent) -> Spent:
    """``one`` and ``other`` together: tokens to tokens, costs within each currency."""
    costs = dict(one.costs)
    for currency, cost in other.costs:
        costs[currency] = costs.get(currency, 0.0) + cost
    return Spent(
        one.input_tokens + other.input_tokens,
        one.output_tokens + other.output_tokens,
        tuple(sorted(costs.items())),
    )


async def budget_spent(ledger: UsageRecords, kind: str, name: str, since: datetime) -> Spent:
    """What a budget of routine or session ``name`` counts from ``since`` on: a session's
    wake-up turns; a routine's turns and the wake-up turns its session ran (what its turns
    scheduled, the operator's too), so that a turn cannot step around its routine's budget
    through a wake-up."""
    spent = await ledger.usage_since(kind, name, since)
    if kind != "routine":
        return spent
    return added(spent, await ledger.usage_since("session", routine_session(name), since))


def minute_of(at: datetime) -> datetime:
    """The minute ``at`` falls in."""
    return truncate_ms(at).replace(second=0, microsecond=0)


def add_entry(entries: Iterable[Entry], at: datetime, usage: Usage) -> list[Entry]:
    """``entries`` with ``usage`` spent at ``at`` added to its minute's entry, and every entry
    older than :data:`LEDGER_SPAN` before ``at`` dropped; by minute and currency."""
    usage, _ = checked(usage)
    minute = minute_of(at)
    currency = usage.currency or ("" if usage.cost is None else DEFAULT_CURRENCY)
    oldest = shifted(minute, -LEDGER_SPAN)
    kept: dict[tuple[datetime, str], Entry] = {
        (e.minute, e.currency): e for e in entries if e.minute >= oldest
    }
    found = kept.get((minute, currency), Entry(minute, currency))
    # A minute holds at most what one event may (usage.py's bounds, far past any budget): a
    # sum past them would read back as damage, and the minute's spending would be lost.
    kept[(minute, currency)] = Entry(
        minute,
        currency,
        min(found.input_tokens + (usage.input_tokens or 0), MAX_TOKENS),
        min(found.output_tokens + (usage.output_tokens or 0), MAX_TOKENS),
        min(found.cost + (usage.cost or 0.0), MAX_COST),
    )
    return sorted(kept.values(), key=lambda e: (e.minute, e.currency))


def counted_minutes(since: datetime) -> tuple[datetime, datetime]:
    """The minutes an entry counts in for the window from ``since`` on (see the module doc):
    after the first (a minute ends a minute after it starts), up to the second; held at the
    calendar's ends. Every store's reads count by it."""
    return shifted(since, -MINUTE), shifted(since, LEDGER_SPAN + AHEAD)


def spent_since(entries: Iterable[Entry], since: datetime) -> Spent:
    """What ``entries`` spent in the window from ``since`` on (see the module doc)."""
    input_tokens = output_tokens = 0
    costs: dict[str, float] = {}
    earliest, latest = counted_minutes(since)
    for entry in entries:
        if not earliest < entry.minute <= latest:
            continue
        input_tokens += entry.input_tokens
        output_tokens += entry.output_tokens
        if entry.currency:
            costs[entry.currency] = costs.get(entry.currency, 0.0) + entry.cost
    return Spent(input_tokens, output_tokens, tuple(sorted(costs.items())))


def entry_to_json(entry: Entry) -> list[Any]:
    """``[minute, currency, in, out, cost]``: how a state directory's ledger file keeps one."""
    return [
        format_iso(entry.minute),
        entry.currency,
        entry.input_tokens,
        entry.output_tokens,
        entry.cost,
    ]


def entry_from_json(raw: Any) -> Entry | None:
    """An entry from its stored shape; None when it is not one (hostile or damaged)."""
    if not isinstance(raw, list) or len(raw) != 5:
        return None
    at, currency, tokens_in, tokens_out, cost = raw
    minute = parse_iso(at) if isinstance(at, str) else None
    if minute is None or not isinstance(currency, str):
        return None
    usage, problems = checked(Usage(tokens_in, tokens_out, cost, currency or None))
    if problems or (currency and usage.currency != currency):
        return None
    return Entry(
        minute_of(minute),
        currency,
        usage.input_tokens or 0,
        usage.output_tokens or 0,
        usage.cost or 0.0,
    )


def check_key(kind: str, name: str) -> Kind:
    """``kind`` checked (``routine`` or ``session``), and ``name`` as that kind's: a routine's
    checked name (:func:`~trio_routines.names.check_name`), a session non-empty text."""
    if kind == "routine":
        check_name(name)
        return "routine"
    if kind == "session":
        if not isinstance(name, str) or not name:
            raise ValueError("a session must be non-empty text")
        return "session"
    raise ValueError(f"a usage ledger is a routine's or a session's, not {kind!r}")


def fires_spent(fires: Iterable[Fire], since: datetime) -> Spent:
    """What the claimed turns among ``fires`` fired from ``since`` on spent (their usage, as
    the claims keep it). Shown only for a store that keeps no ledger: the claims kept may
    hold less than the window (see the module doc)."""
    entries: list[Entry] = []
    for fire in fires:
        if fire.usage is not None and fire.fired_at >= since:
            usage = fire.usage
            entries.append(
                Entry(
                    minute_of(fire.fired_at),
                    usage.currency or "",
                    usage.input_tokens or 0,
                    usage.output_tokens or 0,
                    usage.cost or 0.0,
                )
            )
    return spent_since(entries, since - MINUTE)


def describe_spent(spent: Spent) -> str:
    """``12.3k in, 4k out, 0.52 USD``; ``""`` when nothing was spent."""
    parts = []
    if spent.input_tokens:
        parts.append(f"{tokens_text(spent.input_tokens)} in")
    if spent.output_tokens:
        parts.append(f"{tokens_text(spent.output_tokens)} out")
    parts += [cost_text(cost, currency) for currency, cost in spent.costs if cost]
    return ", ".join(parts)


def spent_to_json(spent: Spent) -> dict[str, Any]:
    """``{"inputTokens", "outputTokens", "costs": {currency: cost}}``."""
    return {
        "inputTokens": spent.input_tokens,
        "outputTokens": spent.output_tokens,
        "costs": dict(spent.costs),
    }


def spent_from_json(raw: Any) -> Spent | None:
    """A :class:`Spent` from :func:`spent_to_json`'s shape; None when it is not one."""
    if not isinstance(raw, dict):
        return None
    tokens_in, tokens_out = raw.get("inputTokens"), raw.get("outputTokens")
    costs = raw.get("costs")
    if not isinstance(costs, dict):
        return None
    if type(tokens_in) is not int or type(tokens_out) is not int or min(tokens_in, tokens_out) < 0:
        return None
    kept = []
    for currency, cost in costs.items():
        one, problems = checked(Usage(cost=cost, currency=currency))
        if problems or one.cost is None or one.currency != currency:
            return None
        kept.append((currency, one.cost))
    return Spent(tokens_in, tokens_out, tuple(sorted(kept)))
