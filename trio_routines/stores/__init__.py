"""Store backends: the state directory (default) and, as an extra, PostgreSQL."""

from __future__ import annotations

import os
from typing import Literal

from ..store import Store
from .directory import DirectoryStore as DirectoryStore


def is_postgres_url(state: str) -> bool:
    return state.startswith(("postgresql://", "postgres://"))


MIGRATES = ("always", "create", "never")


def check_migrate(migrate: object) -> None:
    """Refuse a ``migrate`` that is none of :data:`MIGRATES` (ValueError), rather than read it
    as one of them."""
    if migrate not in MIGRATES:
        raise ValueError(f"migrate must be always, create or never, not {migrate!r}")


def open_store(
    state: str | os.PathLike[str], *, migrate: Literal["always", "create", "never"] = "always"
) -> Store:
    """The store a ``--state`` value names: a ``postgresql://`` URL, or a directory path.

    Use it as ``async with open_store(state) as store:``, which closes the store on the way
    out; or call ``await store.aclose()`` yourself. ``migrate`` says whether a PostgreSQL
    store may create or upgrade its tables (see ``PostgresStore``); a state directory has no
    schema. Any other ``migrate`` is a ValueError, for either kind of state.
    """
    check_migrate(migrate)
    text = os.fspath(state)
    if is_postgres_url(text):
        from .postgres import PostgresStore  # the optional extra: imported only when asked

        return PostgresStore(text, migrate=migrate)
    return DirectoryStore(text)
