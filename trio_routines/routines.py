"""Routine files: one markdown file per routine, a strict frontmatter block, then the prompt.

A routine lives in ``<routines dir>/<name>.md``; the file's base name is the routine's name. The
file opens with a frontmatter block between two ``---`` lines, and everything after the closing
line is the prompt::

    ---
    cron: 0 9 * * 1-5
    tz: Europe/Berlin
    timeout: 30m
    ---
    Summarize yesterday's merged pull requests and post them with the chat tool.

The block is deliberately not YAML. It is a list of ``key: value`` lines with six allowed
keys (``cron``, ``tz``, ``timeout``, ``catchup``, ``output``, ``budget``), whole-line ``#``
comments and blank lines, and nothing else: no nesting, no escapes, no type guessing, so a
value means exactly what it looks like. A routine without ``cron`` runs on demand only, and
still needs the (empty) block, ``---`` twice, so that a stray first line of a prompt is never
taken for a key.

This module owns the record (:class:`Routine`, which validates itself) and the pure parser
of one file's text (:func:`parse_routine_text`); a value's own rules live with its concept
(the budgets in :mod:`trio_routines.budgets`, the output size in :mod:`trio_routines.output`).
Only :mod:`trio_routines.routinedir` touches the file system: it loads a directory and
isolates every broken file.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

import attrs

from .budgets import Budget, parse_routine_budgets, routine_budgets
from .cron import cron_error, resolve_hashed
from .errors import InvalidRoutine
from .names import check_name, routine_session
from .output import check_output_size, parse_output_size
from .text import quoted

__all__ = ["Routine", "catchup_text", "parse_catchup", "parse_routine_text"]

_FENCE = "---"
_KEYS = ("cron", "tz", "timeout", "catchup", "output", "budget")
_KEY_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)\s*:(.*)")
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([smh]?)")
_UNIT_SECONDS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_WINDOW = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([smhd]?)")
_QUOTES = ("'", '"')


# --- the record ---------------------------------------------------------------------------


def _check_name(_inst: Any, _attr: Any, value: str) -> None:
    check_name(value)


def _check_prompt(_inst: Any, _attr: Any, value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidRoutine("a routine's prompt must be a non-empty string")


def _check_optional_text(_inst: Any, attr: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise InvalidRoutine(f'"{attr.name}" must be a non-empty string when given')


def _check_timeout(_inst: Any, _attr: Any, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRoutine(f'"timeout" must be a number of seconds, not {type(value).__name__}')
    if not math.isfinite(value) or value <= 0:
        raise InvalidRoutine(f'"timeout" must be a finite number of seconds above 0, not {value}')


def _check_catchup(_inst: Any, _attr: Any, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRoutine(f'"catchup" must be a number of seconds, not {type(value).__name__}')
    if not math.isfinite(value) or value < 0:
        raise InvalidRoutine(
            f'"catchup" must be a finite number of seconds, 0 or more, not {value}'
        )


def _timeout_of(value: object) -> object:
    """A ``timeout`` given as a routine file writes it (``"30m"``) or as a ``timedelta``: its
    seconds. Anything else is left for the validator."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    return _parse_timeout(value) if isinstance(value, str) else value


def _catchup_of(value: object) -> object:
    """A ``catchup`` given as a routine file writes it (``"2h"``, ``"none"``) or as a
    ``timedelta``: its seconds. Anything else is left for the validator."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    return parse_catchup(value) if isinstance(value, str) else value


def _output_of(value: object) -> object:
    """An ``output`` given as a routine file writes it (``"4KiB"``, ``"none"``): its bytes."""
    return parse_output_size(value) if isinstance(value, str) else value


@attrs.frozen(kw_only=True)
class Routine:
    """A routine: a prompt fired into the agent's ``routine:<name>`` session.

    ``cron`` (evaluated in ``tz``, default UTC) arms it on the clock; without ``cron`` it runs
    only by name. ``timeout`` (seconds) bounds one turn: a longer turn is cancelled by the
    runtime. ``catchup`` (seconds) is the catch-up window: after downtime, a missed slot older
    than it is not fired but recorded as a ``late`` gap; ``0`` (``catchup: none``) catches up
    nothing; None (the default) catches up once whatever the age (:mod:`trio_routines.gaps`).
    ``output`` (bytes) keeps that much of the end of each turn's reply with its claim; None
    (the default) keeps none (:mod:`trio_routines.output`). ``budgets``: what its turns may
    spend per rolling window (:mod:`trio_routines.budgets`); a slot that would start over one
    is settled ``skipped`` with the reason, its turn not run.
    ``timeout`` and ``catchup`` also take a ``timedelta``, and each of the three its text as a
    routine file writes it (``"30m"``, ``"2h"``, ``"4KiB"``, ``"none"``), as ``budgets`` does.
    Construction validates everything: :class:`UnsafeName` for a name that could leave
    the claims directory, :class:`InvalidRoutine` for anything else.
    """

    name: str = attrs.field(validator=_check_name)
    prompt: str = attrs.field(validator=_check_prompt)
    cron: str | None = attrs.field(default=None, validator=_check_optional_text)
    tz: str | None = attrs.field(default=None, validator=_check_optional_text)
    timeout: float | None = attrs.field(
        default=None, converter=_timeout_of, validator=_check_timeout
    )
    catchup: float | None = attrs.field(
        default=None, converter=_catchup_of, validator=_check_catchup
    )
    output: int | None = attrs.field(
        default=None, converter=_output_of, validator=check_output_size
    )
    budgets: tuple[Budget, ...] = attrs.field(default=(), converter=routine_budgets)

    def __attrs_post_init__(self) -> None:
        # Cross-field rules; attrs runs this after every field validator has passed.
        if self.cron is None:
            if self.tz is not None:
                raise InvalidRoutine('"tz" means nothing without "cron"')
            if self.catchup is not None:  # as a routine file says it
                raise InvalidRoutine('"catchup" means nothing without "cron"')
            return
        problem = cron_error(self.cron, self.tz, seed=self.name)
        if problem is not None:
            raise InvalidRoutine(f"invalid cron/tz — {problem}")

    @property
    def resolved_cron(self) -> str | None:
        """``cron`` with its ``H`` fields resolved from the routine's name: what fires."""
        if self.cron is None:
            return None
        return resolve_hashed(self.cron, self.name)

    @property
    def session(self) -> str:
        """The agent session every fire of this routine continues."""
        return routine_session(self.name)


# --- the pure parser ----------------------------------------------------------------------


def parse_routine_text(name: str, text: str) -> Routine:
    """Parse the text of the routine file for routine ``name``.

    Raises :class:`InvalidRoutine` with a one-line reason that does not name the file (the
    loader adds it), or :class:`UnsafeName` when ``name`` itself is unusable. The rules:

    * An optional UTF-8 BOM is dropped and ``\\r\\n`` line endings read as ``\\n``.
    * The first line must be ``---`` (trailing whitespace allowed); a file without it is
      refused, even for an on-demand routine, which writes an empty block (``---`` twice).
      The block ends at the next line that is ``---``; without one the file is refused.
    * Inside the block, blank lines and lines whose first non-blank character is ``#`` are
      ignored. A ``#`` anywhere else is part of the value (cron's ``1#2`` needs it), so there
      are no trailing comments.
    * Every other line is ``key: value``. Keys are ``cron``, ``tz``, ``timeout`` and
      ``catchup``, each at most once; the value is stripped and must not be empty.
    * A value wrapped in matching ``'...'`` or ``"..."`` loses the quotes and is otherwise kept
      verbatim (no escapes). A value that starts or ends with a quote without a matching one at
      the other end is refused rather than guessed at.
    * ``timeout`` is a positive number of seconds, optionally with a unit: ``90``, ``90s``,
      ``30m``, ``1.5h``.
    * ``catchup`` is ``none`` or a duration of 0 or more, as ``timeout`` or in days (``2d``);
      it needs ``cron``.
    * ``output`` is ``none`` or a size from 1 byte to 64 KiB: ``512``, ``512B``, ``4KiB``.
    * ``budget`` is one budget or a comma-separated list: ``200k tokens/day, 5 USD/week``
      (:mod:`trio_routines.budgets`).
    * The prompt is the text after the closing line without leading blank lines and trailing
      whitespace; it must not be empty.
    """
    check_name(name)
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.replace("\r\n", "\n").split("\n")
    if not text.strip():
        raise InvalidRoutine("the file is empty (a routine file starts with a '---' line)")
    if lines[0].rstrip() != _FENCE:
        raise InvalidRoutine(
            "must start with a '---' frontmatter line (a routine without keys still writes "
            "'---' twice before its prompt)"
        )
    closing = next((i for i in range(1, len(lines)) if lines[i].rstrip() == _FENCE), None)
    if closing is None:
        raise InvalidRoutine("the frontmatter has no closing '---' line")

    fields = _parse_frontmatter(lines[1:closing])
    body_lines = lines[closing + 1 :]
    while body_lines and not body_lines[0].strip():
        del body_lines[0]
    prompt = "\n".join(body_lines).rstrip()
    if not prompt:
        raise InvalidRoutine("the prompt (the text after the frontmatter) is empty")

    timeout = fields.get("timeout")
    catchup, output = fields.get("catchup"), fields.get("output")
    budget = fields.get("budget")
    try:
        return Routine(
            name=name,
            prompt=prompt,
            cron=fields.get("cron"),
            tz=fields.get("tz"),
            timeout=None if timeout is None else _parse_timeout(timeout),
            catchup=None if catchup is None else parse_catchup(catchup),
            output=None if output is None else parse_output_size(output),
            budgets=() if budget is None else parse_routine_budgets(budget),
        )
    except InvalidRoutine as exc:
        # A '#' after a blank reads as a comment to a YAML eye; here it is part of the value.
        commented = [key for key, value in fields.items() if " #" in value or "\t#" in value]
        if not commented:
            raise
        raise InvalidRoutine(
            f"{exc} (the '#' in {quoted(commented[0])} is part of its value: a comment goes "
            "on a line of its own)"
        ) from None


def _parse_frontmatter(lines: list[str]) -> dict[str, str]:
    fields: dict[str, str] = {}
    for number, raw in enumerate(lines, start=2):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _KEY_LINE.fullmatch(line)
        if match is None:
            raise InvalidRoutine(f"line {number}: expected 'key: value', got {quoted(line)}")
        key, value = match.group(1), _unquote(number, match.group(2).strip())
        if key not in _KEYS:
            raise InvalidRoutine(
                f"line {number}: unknown key {quoted(key)} (allowed keys: {', '.join(_KEYS)})"
            )
        if key in fields:
            raise InvalidRoutine(f"line {number}: duplicate key {quoted(key)}")
        if not value.strip():
            raise InvalidRoutine(f"line {number}: {quoted(key)} has an empty value")
        fields[key] = value
    return fields


def _unquote(number: int, value: str) -> str:
    first, last = value[:1], value[-1:]
    if first not in _QUOTES and last not in _QUOTES:
        return value
    if len(value) >= 2 and first == last:
        return value[1:-1]
    if (
        first in _QUOTES
        and (end := value.find(first, 1)) > 0
        and value[end + 1 :].lstrip()[:1] == "#"
    ):
        # '"0 9 * * *"  # daily': matched quotes, and a comment after them, as YAML writes one
        raise InvalidRoutine(
            f"line {number}: a comment after the value in {quoted(value)} — a comment goes on "
            "a line of its own"
        )
    raise InvalidRoutine(f"line {number}: unmatched quote in {quoted(value)}")


def _parse_timeout(value: str) -> float:
    match = _DURATION.fullmatch(value.strip())
    if match is None:
        raise InvalidRoutine(
            f'"timeout" must be seconds or a duration like 90s, 30m or 1.5h, not {quoted(value)}'
        )
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidRoutine(f'"timeout" must be above 0 and finite, not {quoted(value)}')
    return seconds


def parse_catchup(value: str) -> float:
    """``none`` (0) or a duration (``90s``, ``30m``, ``2h``, ``1d``) in seconds."""
    text = value.strip()
    if text.lower() == "none":
        return 0.0
    match = _WINDOW.fullmatch(text)
    if match is None:
        raise InvalidRoutine(
            f'"catchup" must be "none" or a duration like 30m, 2h or 1d, not {quoted(value)}'
        )
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if not math.isfinite(seconds):
        raise InvalidRoutine(f'"catchup" must be finite, not {quoted(value)}')
    return seconds


def catchup_text(catchup: float | None) -> str:
    """How a catch-up window reads: ``once, any age`` (the default), ``none``, ``2h``, ``90s``."""
    if catchup is None:
        return "once, any age"
    if catchup == 0:
        return "none"
    # Every digit of it, never an exponent: a window read back from a file says what it said
    # (``99999999999999d``, ``1234567s``), whatever the float's rounding of its seconds.
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        count = round(catchup / size)
        if count >= 1 and float(count) * size == catchup:
            return f"{count}{unit}"
    if float(catchup).is_integer():
        return f"{int(catchup)}s"
    return f"{Decimal(repr(catchup)):f}s"  # (1e-05 reads 0.00001s: a file's words)
