"""Routine names: the one rule that keeps a name inside the claims directory.

A name is a single path segment: not empty, not ``.`` or ``..``, and free of ``/``, ``\\`` and
NUL; it is Unicode text (a file name of undecodable bytes reads as lone surrogates, which no
PostgreSQL text can hold); and it neither begins nor ends with white space or an invisible
character (`` .md`` would be a routine whose name every listing shows blank, ``daily .md`` or
``daily`` and a zero-width space one that reads as ``daily``).
Nothing else is restricted, so ``每日简报`` and ``my report`` are legal names.
"""

from __future__ import annotations

import json
import unicodedata

from .errors import UnsafeName

_FORBIDDEN = ("/", "\\", "\x00")


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a routine name, or ``None`` when it can."""
    if not isinstance(name, str):
        return f"a routine name must be a string, not {type(name).__name__}"
    if name in ("", ".", ".."):
        return f'{json.dumps(name)} cannot be a routine name (no path separators, "." or "..")'
    if any(ch in name for ch in _FORBIDDEN):
        return f'{json.dumps(name)} cannot be a routine name (no path separators, "." or "..")'
    if not is_unicode(name):
        return f"{json.dumps(name)} cannot be a routine name (it is not valid Unicode text)"
    if _unseen(name[0]) or _unseen(name[-1]):
        return (
            f"{json.dumps(name)} cannot be a routine name (it begins or ends with white space "
            "or an invisible character)"
        )
    return None


def _unseen(ch: str) -> bool:
    """Whether ``ch`` shows as nothing at a name's edge: white space, a format character
    (a zero-width space or joiner, a byte-order mark) or a control character."""
    return ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf", "Zs", "Zl", "Zp")


def is_unicode(text: str) -> bool:
    """Whether ``text`` is encodable as UTF-8: no lone surrogate (``\\udcff`` from a byte that
    did not decode), so that every store can hold it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_name(name: str) -> str:
    """Return ``name`` unchanged, or raise :class:`UnsafeName` with a one-line reason."""
    problem = name_problem(name)
    if problem is not None:
        raise UnsafeName(problem)
    return name


#: What a routine's session is called before its name: ``routine:<name>``.
ROUTINE_SESSION = "routine:"


def routine_session(name: str) -> str:
    """Routine ``name``'s session: every fire of it continues this one agent session."""
    return ROUTINE_SESSION + name


def session_routine(session: str) -> str | None:
    """The name of the routine whose session ``session`` is, or None for another session."""
    return session[len(ROUTINE_SESSION) :] if session.startswith(ROUTINE_SESSION) else None
