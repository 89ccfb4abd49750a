"""Budgets: how much a routine's turns, or a session's wake-up turns, may spend in a rolling
window, in tokens or in money.

A budget is written ``<amount> <unit>/<window>``: ``200k tokens/day``, ``5 USD/week``,
``1.5M tokens/hour``. The amount is a positive number, with ``k``, ``M`` or ``G`` for tokens;
the unit ``tokens`` (in and out together) or a currency code (1 to 10 letters, any case, read
in capitals as a reported currency is; a unit that reads as ``tokens`` mistyped or cut short,
``tokns`` or ``tok``, is refused: a budget in a currency no agent reports would never hold);
the window ``hour``, ``day`` or ``week``, a rolling one ending now. Several are written as a list,
comma-separated (``budget: 200k tokens/day, 5 USD/week``); each holds on its own.

The rule: a turn starts only while what was spent in each budget's window is below its
amount. The check is made before the turn, against the store's ledger
(:mod:`trio_routines.ledger`), which every replica shares; a turn's own spending is only
known when it ends, so a budget can be passed by the turns in flight when it was reached: at
most one per replica per routine (a routine's turns never overlap) or per session.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta

import attrs

from .errors import InvalidOption, InvalidRoutine
from .ledger import Spent
from .text import quoted
from .usage import cost_text, tokens_text

__all__ = ["WINDOWS", "Budget", "parse_budgets"]

#: The windows a budget may name, and their length (the longest is the ledger's span).
WINDOWS = {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(days=7)}
_WINDOW_TEXT = {"hour": "1 h", "day": "24 h", "week": "7 days"}
_SCALE = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}
_BUDGET = re.compile(
    r"(?P<amount>\d+(?:\.\d+)?)\s*(?P<scale>[kKmMgG]?)\s+(?P<unit>[A-Za-z]{1,10})\s*/\s*"
    r"(?P<window>[A-Za-z]+)"
)
_EXAMPLE = "like 200k tokens/day or 5 USD/week"
MAX_AMOUNT = 1e15


@attrs.frozen
class Budget:
    """At most ``amount`` of ``unit`` (``"tokens"``, or a currency code) per rolling
    ``window`` (``"hour"``, ``"day"`` or ``"week"``)."""

    amount: float
    unit: str
    window: str

    def __attrs_post_init__(self) -> None:
        if self.window not in WINDOWS:
            raise InvalidOption(f"a budget's window is hour, day or week, not {self.window!r}")
        if not 0 < self.amount <= MAX_AMOUNT:
            raise InvalidOption(f"a budget's amount must be above 0, not {self.amount!r}")
        if self.unit != "tokens" and (
            not re.fullmatch(r"[A-Z]{1,10}", self.unit) or misspelt(self.unit)
        ):
            raise InvalidOption(f"a budget's unit is tokens or a currency code, not {self.unit!r}")

    @property
    def length(self) -> timedelta:
        """How far back the window reaches."""
        return WINDOWS[self.window]

    @property
    def tokens(self) -> bool:
        """Whether it counts tokens (else money in :attr:`unit`)."""
        return self.unit == "tokens"

    def used(self, spent: Spent) -> float:
        """What ``spent`` counts against this budget."""
        return spent.tokens if self.tokens else spent.cost(self.unit)

    def allows(self, spent: Spent) -> bool:
        """Whether a turn may start after ``spent`` in the window: below the amount."""
        return self.used(spent) < self.amount

    def __str__(self) -> str:
        """``200k tokens/day``: as written, normalised."""
        if self.tokens:
            return f"{tokens_text(round(self.amount))} tokens/{self.window}"
        return f"{cost_text(self.amount, self.unit)}/{self.window}"

    def over_text(self, spent: Spent) -> str:
        """``over budget (210k of 200k tokens in the last 24 h)``: why a turn did not start."""
        used = self.used(spent)
        if self.tokens:
            what = f"{tokens_text(round(used))} of {tokens_text(round(self.amount))} tokens"
        else:
            number = cost_text(used, self.unit).rsplit(" ", 1)[0]
            what = f"{number} of {cost_text(self.amount, self.unit)}"
        return f"over budget ({what} in the last {_WINDOW_TEXT[self.window]})"


def parse_budget(text: str) -> Budget:
    """One budget (see the module doc); :class:`InvalidOption` with a one-line reason."""
    shown = " ".join(text.split())
    match = _BUDGET.fullmatch(text.strip())
    if match is None:
        raise InvalidOption(f"a budget is written {_EXAMPLE}, not {quoted(shown)}")
    unit, scale = match["unit"], match["scale"].lower()
    window = match["window"].lower()
    if window not in WINDOWS:
        raise InvalidOption(
            f"a budget's window is hour, day or week, not {quoted(match['window'])}"
        )
    if unit.lower() in ("token", "tokens"):
        unit = "tokens"
    elif misspelt(unit):
        raise InvalidOption(f"a budget's unit is tokens or a currency code, not {quoted(unit)}")
    elif scale:
        raise InvalidOption(f"k, M and G scale tokens, not money: {quoted(shown)}")
    else:
        unit = unit.upper()  # as a reported currency is read (usage.py)
    amount = float(match["amount"]) * _SCALE[scale]
    if amount <= 0:
        raise InvalidOption(f"a budget's amount must be above 0, not {quoted(shown)}")
    if amount > MAX_AMOUNT:
        raise InvalidOption(
            f"a budget's amount must be at most {MAX_AMOUNT:g}, not {quoted(shown)}"
        )
    return Budget(amount, unit, window)


def misspelt(unit: str) -> bool:
    """Whether ``unit`` (any case) reads as ``tokens``, mistyped or cut short (``TOKENS``,
    ``tokns``, ``tok``, ``tkns``): taken for a currency, no agent would report it, and its
    budget would never hold. (The unit ``tokens`` itself is its caller's to tell apart.)"""
    word = unit.lower()
    return word in _SHORT_FOR_TOKENS or _near(word, "tokens")


#: How ``tokens`` is cut short (a code of three letters otherwise, like TON, is a currency).
_SHORT_FOR_TOKENS = frozenset({"tok", "toks", "tkn", "tkns", "tks"})


def _near(word: str, target: str) -> bool:
    """Whether ``word`` is at most two edits (a letter added, left out or changed) from
    ``target``: a misspelling, which must not become a currency no agent reports."""
    previous = list(range(len(target) + 1))
    for i, letter in enumerate(word, 1):
        row = [i]
        for j, wanted in enumerate(target, 1):
            row.append(min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (letter != wanted)))
        previous = row
    return previous[-1] <= 2


def parse_budgets(text: str) -> tuple[Budget, ...]:
    """A comma-separated list of budgets; no two of one unit and window."""
    budgets = tuple(parse_budget(part) for part in text.split(","))
    seen = set()
    for budget in budgets:
        key = (budget.unit, budget.window)
        if key in seen:
            raise InvalidOption(f"two budgets of {budget.unit} per {budget.window}: keep one")
        seen.add(key)
    return budgets


_NOT_BUDGETS = (
    "budgets must be text ('200k tokens/day, 5 USD/week') or a sequence of Budget, not {}"
)


def checked_budgets(value: str | Sequence[Budget] | None) -> tuple[Budget, ...]:
    """Budgets as given to the :class:`~trio_routines.Scheduler`: text (:func:`parse_budgets`),
    a sequence of :class:`Budget`, or None for none."""
    if value is None:
        return ()
    if isinstance(value, str):
        return parse_budgets(value)
    try:
        budgets = tuple(value)
    except TypeError:
        raise InvalidOption(_NOT_BUDGETS.format(type(value).__name__)) from None
    for budget in budgets:
        if not isinstance(budget, Budget):
            raise InvalidOption(_NOT_BUDGETS.format(f"{type(budget).__name__} in a sequence"))
    return budgets


def budgets_text(budgets: Sequence[Budget]) -> str:
    """``200k tokens/day, 5 USD/week``."""
    return ", ".join(str(budget) for budget in budgets)


def routine_budgets(value: object) -> tuple[Budget, ...]:
    """A routine's ``budgets`` field checked (:func:`checked_budgets`), refused as the routine's.

    Raises :class:`~trio_routines.errors.InvalidRoutine` naming the ``budget`` key.
    """
    try:
        return checked_budgets(value)  # type: ignore[arg-type]
    except InvalidOption as exc:
        raise InvalidRoutine(f'"budget": {exc}') from None


def parse_routine_budgets(text: str) -> tuple[Budget, ...]:
    """A routine file's ``budget:`` value parsed (:func:`parse_budgets`), refused as the routine's.

    Raises :class:`~trio_routines.errors.InvalidRoutine` naming the ``budget`` key.
    """
    try:
        return parse_budgets(text)
    except InvalidOption as exc:
        raise InvalidRoutine(f'"budget": {exc}') from None
