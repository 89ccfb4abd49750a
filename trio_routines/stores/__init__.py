"""Store backends: the state directory (default) and, as an extra, PostgreSQL."""

from __future__ import annotations

import os
import re
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal

from .._lazy import lazy_names as _lazy_names
from .credentials import shown_state
from .stateurl import split_schema

if TYPE_CHECKING:  # imported on first use: the writer process imports this package, and
    # needs none of the store (docs/design.md, "The writer process")
    from ..store import Store
    from .directory import DirectoryStore as DirectoryStore

__getattr__, __dir__ = _lazy_names(__name__, {"DirectoryStore": ".directory"}, globals())

_URL = re.compile(r"\s*[A-Za-z][A-Za-z0-9+.-]*://")  # a scheme, then "//" (RFC 3986)
_ALMOST = re.compile(r"(?i)\s*postgres(?:ql)?:")  # PostgreSQL's, a slash short or cased so


def is_postgres_url(state: str) -> bool:
    return state.startswith(("postgresql://", "postgres://"))


def state_problem(state: str) -> str | None:
    """Why ``state`` names no store, or None. A URL of another scheme (a mistyped
    ``postgresq://``, ``mysql://``) would otherwise be read as a directory path, and replicas
    meant to share a database would each keep a state of their own, every one firing every
    slot. A directory whose name starts so is still given as ``./name``. An empty or blank
    text (a variable that is not set) names nothing, not the working directory."""
    if not state.strip():
        return "the state is empty: name a directory (. for this one) or a postgresql:// URL"
    if "\x00" in state:  # no path nor URL holds one: each call would fail on it
        return "the state holds a NUL character: no directory or URL can"
    if is_postgres_url(state):
        try:
            split_schema(state)
        except ValueError as exc:
            return str(exc)
        return None
    if _URL.match(state) is None and _ALMOST.match(state) is None:
        return None
    return (
        f"{shown_state(state)} is a URL of no store (a PostgreSQL URL starts with "
        "postgresql:// or postgres://); for a directory of that name, write ./ before it"
    )


#: Seconds a resume may take to land before the instant it keeps is moved to when it landed:
#: it is stamped, then written (a slow disk, a lock another transaction holds), and a replica
#: that reads the stamp late must not take a slot the pause still held for one. Less, it
#: keeps the instant it was given, as the store contract says.
RESUME_LANDED_LATE = 0.2


def landed(at: datetime, took: float) -> datetime:
    """The instant a resume asked for at ``at`` keeps, having taken ``took`` seconds to land:
    ``at``, or as much later as it took past :data:`RESUME_LANDED_LATE`."""
    return at if took < RESUME_LANDED_LATE else at + timedelta(seconds=took)


MIGRATES = ("always", "create", "never")


def check_migrate(migrate: object) -> None:
    """Refuse a ``migrate`` that is none of :data:`MIGRATES` (ValueError), rather than read it
    as one of them."""
    if migrate not in MIGRATES:
        raise ValueError(f"migrate must be always, create or never, not {migrate!r}")


def open_store(
    state: str | os.PathLike[str], *, migrate: Literal["always", "create", "never"] = "always"
) -> Store:
    """The store a ``--state`` value names: a ``postgresql://`` URL (its ``?schema=NAME``,
    which libpq does not know, chooses the schema: :mod:`.stateurl`), or a directory path.

    Use it as ``async with open_store(state) as store:``, which closes the store on the way
    out; or call ``await store.aclose()`` yourself. ``migrate`` says whether a PostgreSQL
    store may create or upgrade its tables (see ``PostgresStore``); a state directory has no
    schema. Any other ``migrate`` is a ValueError, for either kind of state, and so is a URL
    of another scheme (see :func:`state_problem`).
    """
    check_migrate(migrate)
    text = os.fspath(state)
    if not isinstance(text, str):
        raise TypeError(f"the state must be text, a path or a postgresql:// URL, not {text!r}")
    problem = state_problem(text)
    if problem is not None:
        raise ValueError(problem)
    if is_postgres_url(text):
        from .postgres import PostgresStore  # the optional extra: imported only when asked

        url, schema = split_schema(text)
        return PostgresStore(url, schema=schema, migrate=migrate)
    from .directory import DirectoryStore

    return DirectoryStore(text)
