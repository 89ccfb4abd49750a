"""The schema a PostgreSQL ``search_path`` names first, read as the server reads it: the
store makes its tables there, or nowhere (see ``schema.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg

from ...errors import StateFault


def check_first_named(conn: psycopg.Connection[Any], where: str) -> None:
    """Refuse to make the tables in a schema of the ``search_path`` after the first one it
    names, which does not exist (``mine,public`` with no ``mine``): they would go into
    ``public``, and a store meant to be apart from the others share it."""
    row = conn.execute(
        "SELECT current_schema(), current_setting('search_path'), current_user"
    ).fetchone()
    if row is None or row[0] is None:
        return
    current, path, user = str(row[0]), str(row[1]), str(row[2])
    meant: list[str] = []
    for name, quoted in _path_entries(path):
        if name == "$user":
            meant.append(user)
            continue
        meant.append(_identifier(name, quoted))
        break  # the first schema it names: the tables' place, or none
    if meant and current not in meant:
        raise StateFault(
            f"the PostgreSQL state {where} would keep its tables in {current!r}: the first "
            f"schema its search_path names ({meant[-1][:64]!r}) does not exist, or this "
            "role may not use it — create it first (CREATE SCHEMA, or GRANT USAGE), then "
            "run `python -m trio_routines migrate`"
        )


def _path_entries(path: str) -> Iterator[tuple[str, bool]]:
    """The names of a ``search_path`` setting, in order, each with whether it was quoted
    (``"My,Schema"`` is one name, kept as written; ``""`` in it is one ``"``)."""
    name, quoted, inside = "", False, False
    index = 0
    while index < len(path):
        char = path[index]
        if inside:
            if char == '"' and path[index + 1 : index + 2] == '"':
                name += '"'
                index += 1
            elif char == '"':
                inside = False
            else:
                name += char
        elif char == '"':
            inside = quoted = True
        elif char == ",":
            yield (name if quoted else name.strip()), quoted
            name, quoted = "", False
        elif quoted and char.isspace():
            pass  # spaces around a quoted name
        else:
            name += char
        index += 1
    if name or quoted:
        yield (name if quoted else name.strip()), quoted


def _identifier(name: str, quoted: bool) -> str:
    """``name`` as the server reads it: unquoted, its ASCII letters lowered (only those);
    either way, cut to 63 bytes on a character's boundary."""
    if not quoted:
        name = "".join(char.lower() if "A" <= char <= "Z" else char for char in name)
    return name.encode("utf-8")[:63].decode("utf-8", errors="ignore")
