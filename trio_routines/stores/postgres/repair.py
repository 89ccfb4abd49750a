"""Repairing a PostgreSQL schema at this code's version: the ``migrate`` command's second half.

A migration runs the steps of the versions a database lacks, so a schema recorded at the
current version is left as it is, even when an operator's hand dropped an index, a column or
a table since (the version table still says the schema is whole). Every step of every
version is idempotent (``IF NOT EXISTS``), so running them all again re-creates what went
missing and touches nothing present: :func:`repair` does that, under the migrations' lock,
when something is missing, and names what it re-created. A table or column re-created is
empty: its rows are gone with what was dropped.

Only the objects the steps create are checked: the tables, the columns added to them after
their creation, and the indexes. A column a ``CREATE TABLE`` made (``claims.fired_at``) and
then dropped is named as missing but not re-created: it is ``NOT NULL`` with no default, which
no statement adds to a table with rows, and an index on it (dropped with it) cannot be made
without it: while one is missing nothing is re-created, and everything missing is named, to
be restored by hand. A database at a newer version than this code is left alone: the newer
code's schema is its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql

from .schema import DDL_LOCK, SCHEMA_VERSION, Schema, steps

_TABLE = re.compile(r"CREATE (?:UNLOGGED )?TABLE IF NOT EXISTS \{(\w+)\} \((.*)\)", re.DOTALL)
_INDEX = re.compile(r"CREATE INDEX IF NOT EXISTS \{(\w+)\} ON \{(\w+)\}")
_COLUMN = re.compile(r"ALTER TABLE \{(\w+)\} ADD COLUMN IF NOT EXISTS (\w+)")
#: A column of a ``CREATE TABLE``: each line's first word, but for the table's constraints.
_DECLARED = re.compile(r"^\s*(\w+)\s", re.MULTILINE)
_NOT_COLUMNS = {"PRIMARY", "UNIQUE", "CHECK", "CONSTRAINT", "FOREIGN"}


def _expected() -> Iterator[tuple[str, str, str | None, bool]]:
    """What the steps make: (table, index or None, column or None, re-creatable), in order."""
    for statement in steps(1, SCHEMA_VERSION):
        if table := _TABLE.match(statement):
            yield table[1], "", None, True
            for column in _DECLARED.findall(table[2]):
                if column not in _NOT_COLUMNS:
                    yield table[1], "", column, False
        elif index := _INDEX.match(statement):
            yield index[2], index[1], None, True
        elif column := _COLUMN.match(statement):
            yield column[1], "", column[2], True


def _relation(schema: Schema, key: str) -> str:
    """The name ``to_regclass`` takes for the table or index of ``key``, schema-qualified when
    the store has a schema of its own (an index lives in its table's schema)."""
    name = f"trio_routines_{key}"
    return (
        sql.Identifier(schema.schema, name) if schema.schema else sql.Identifier(name)
    ).as_string(None)


def missing(conn: psycopg.Connection[Any], schema: Schema) -> list[tuple[str, bool]]:
    """What the steps make and the database lacks: (its name, whether a step re-creates it)."""
    found: list[tuple[str, bool]] = []
    absent_tables: set[str] = set()
    for table, index, column, remade in _expected():
        shown = _relation(schema, table)
        if column is None and not index:
            row = conn.execute("SELECT to_regclass(%s) IS NULL", (shown,)).fetchone()
            if row and row[0]:
                absent_tables.add(table)
                found.append((f"table {shown}", remade))
        elif table in absent_tables:
            continue  # the table's re-creation brings its columns and its indexes back
        elif index:
            row = conn.execute(
                "SELECT to_regclass(%s) IS NULL", (_relation(schema, index),)
            ).fetchone()
            if row and row[0]:
                found.append((f"index {_relation(schema, index)}", remade))
        else:
            row = conn.execute(
                "SELECT NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = "
                "to_regclass(%s) AND attname = %s AND attnum > 0 AND NOT attisdropped)",
                (shown, column),
            ).fetchone()
            if row and row[0]:
                found.append((f"column {shown}.{column}", remade))
    return found


def repair(conn: psycopg.Connection[Any], schema: Schema) -> list[tuple[str, bool]]:
    """Re-create what the steps make and the database lacks, when it is at this code's
    version; what was missing (see :func:`missing`), nothing when whole or another version.
    Reads only, unless something is missing: a whole schema on a read-only database passes."""
    if schema.version(conn) != SCHEMA_VERSION or not missing(conn, schema):
        return []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s), 0)", (DDL_LOCK,))
        if schema.version(conn) != SCHEMA_VERSION:
            return []  # migrated meanwhile by newer code: its schema is its own
        gone = missing(conn, schema)  # again, under the lock: another may have repaired it
        if not all(remade for _, remade in gone):
            # A column a table was created with is gone, and an index on it went with it:
            # the steps would fail on it. Nothing is re-created; everything missing is named.
            return [(name, False) for name, _ in gone]
        for statement in steps(1, SCHEMA_VERSION):
            conn.execute(schema.sql(statement))
        return gone
