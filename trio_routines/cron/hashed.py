"""``H``: hashed cron fields that spread a herd of jobs over the clock, stably.

``H 9 * * 1-5`` on a thousand routines would fire all of them at 09:00; with ``H`` each routine
gets its own minute of nine o'clock, the same on every replica and after every restart, because
it is derived from a hash of the routine's name (for a wake-up: its session and id), never
from randomness or the clock. :func:`resolve_hashed` rewrites the ``H`` forms into plain
numbers; everything else (validation, matching, the daylight-saving policy) works on the
resolved expression, so a resolved ``H`` is an ordinary fixed value: ``H 2 * * *`` is a
specific-time job.

The forms, in any field, alone or as items of a comma list:

* ``H``: one value of the field's range (minute 0-59, hour 0-23, day-of-month 1-28 so that
  every month has it, month 1-12, day-of-week 0-6);
* ``H(a-b)``: one value of ``a``-``b`` (names allowed: ``H(MON-FRI)``);
* ``H/n``: every ``n`` from an offset in ``0``-``n-1`` (``H/15`` in minutes is ``m-59/15``
  with ``m`` in 0-14); day-of-month runs 1-31 here, as ``*/n`` does;
* ``H(a-b)/n``: every ``n`` within ``a``-``b``, from an offset in ``a``-``a+n-1``.

The hash: ``N`` is the first 8 bytes of SHA-256 over the UTF-8 bytes of ``seed``, a NUL byte
and the field's name (``minute``, ``hour``, ``day-of-month``, ``month``, ``day-of-week``), read
as a big-endian unsigned integer. A value is ``first + N mod size`` (``size`` the number of
values it may take; for ``/n`` forms the offset is ``N mod min(n, size)``). Every ``H`` of one
field uses the same ``N``. The seed of a routine is its name; of a wake-up, its session, a NUL
character and its id.
"""

from __future__ import annotations

import hashlib

from trio_routines.cron.fields import FIELD_NAMES, PARSERS, _quote

__all__ = ["has_hashed", "hash_number", "resolve_hashed", "wakeup_seed"]

_DOM_H_LAST = 28  # H alone in day-of-month: a day every month has


def hash_number(seed: str, field: str) -> int:
    """``N`` for ``field`` of the expression seeded by ``seed`` (see the module doc)."""
    data = f"{seed}\0{field}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big")


def wakeup_seed(session: str, wakeup_id: str) -> str:
    """The seed of a wake-up's ``H`` fields: its session and its id."""
    return f"{session}\0{wakeup_id}"


def has_hashed(cron: str) -> bool:
    """Whether ``cron`` has an item starting with ``H`` (whatever its validity)."""
    if "H" not in cron and "h" not in cron:
        return False  # the common case, on every next_run of a routine: no split
    return any(item[:1] in ("H", "h") for field in cron.split() for item in field.split(","))


def _resolve_item(index: int, item: str, number: int) -> str:
    parser = PARSERS[index]
    weekday = FIELD_NAMES[index] == "day-of-week"
    base, slash, step_text = item.partition("/")
    if base.upper() == "H":
        first, last = parser.low, 6 if weekday else parser.high
        if FIELD_NAMES[index] == "day-of-month" and not slash:
            last = _DOM_H_LAST
    elif base[:2].upper() == "H(" and base.endswith(")") and "-" in base:
        low_text, _, high_text = base[2:-1].partition("-")
        first = parser.value(low_text, item)
        last = parser.value(high_text, item)
        if weekday and last == 0 and first > 0 and high_text.upper() == "SUN":
            last = 7
        if last < first:
            raise parser.fail(f"range {_quote(base)} runs backwards")
    else:
        raise parser.fail(f"{_quote(item)}: H takes the forms H, H(a-b), H/n and H(a-b)/n")
    size = last - first + 1
    if slash:
        step = parser.step(step_text)
        start = first + number % min(step, size)
        return f"{start}-{last}/{step}"
    return str(first + number % size)


def resolve_hashed(cron: str, seed: str) -> str:
    """``cron`` with every ``H`` form replaced by the numbers ``seed`` hashes to.

    An expression without ``H`` comes back unchanged (the very same text); one with ``H`` comes
    back with its fields joined by single spaces. A malformed ``H`` form raises
    :class:`InvalidCron` naming the field; anything else wrong is left for the parser to say.
    """
    if not has_hashed(cron):
        return cron
    fields = cron.split()
    if len(fields) != len(FIELD_NAMES):
        return cron  # a macro or a wrong field count: the parser says what is wrong
    resolved = []
    for index, text in enumerate(fields):
        items = text.split(",")
        if not any(item[:1] in ("H", "h") for item in items):
            resolved.append(text)
            continue
        number = hash_number(seed, FIELD_NAMES[index])
        resolved.append(
            ",".join(
                _resolve_item(index, item, number) if item[:1] in ("H", "h") else item
                for item in items
            )
        )
    return " ".join(resolved)
