"""The usage ledger in PostgreSQL (:mod:`trio_routines.ledger`): a row per key, minute and
currency in ``trio_routines_usage``.

A record is one statement: it adds the usage to its minute's row (an upsert that adds, so
concurrent records of one key never lose each other's) and deletes the key's rows older than
:data:`~trio_routines.ledger.LEDGER_SPAN`, which no budget can count. A read sums the rows of
the window by currency, through the primary key ``(kind, name, minute, currency)``.

Older than the span before the record's minute *and* before the server's clock: replicas
share the server, not a clock. One replica whose clock runs a day ahead would otherwise
delete the last day of every other replica's spending from the longest window (a year
ahead: all of it), and the budgets would let that much through again. A replica whose clock
is behind deletes less, which only keeps a row a little longer.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from ...agent import Usage
from ...instants import shifted
from ...ledger import LEDGER_SPAN, Kind, Spent, counted_minutes, minute_of
from ...usage import DEFAULT_CURRENCY, MAX_COST, MAX_TOKENS, checked, checked_currency
from .schema import Schema

Conn = psycopg.Connection[Any]

# What a minute's row holds, as a record adds to it: a value no record writes (edited by hand:
# negative, NaN, infinite) counts as none, not as the bound (NaN sorts above every number).
_KEPT = "(CASE WHEN u.{column} BETWEEN 0 AND %({most})s THEN u.{column} ELSE 0 END)"

_RECORD = (
    """WITH pruned AS (
        DELETE FROM {usage} WHERE kind = %(kind)s AND name = %(name)s
            AND minute < least(%(oldest)s, now() - %(span)s)
    )
    INSERT INTO {usage} AS u (kind, name, minute, currency, tokens_in, tokens_out, cost)
    VALUES (%(kind)s, %(name)s, %(minute)s, %(currency)s, %(in)s, %(out)s, %(cost)s)
    ON CONFLICT (kind, name, minute, currency) DO UPDATE SET
        tokens_in = least("""
    + _KEPT.format(column="tokens_in", most="most_tokens")
    + """
            + EXCLUDED.tokens_in, %(most_tokens)s),
        tokens_out = least("""
    + _KEPT.format(column="tokens_out", most="most_tokens")
    + """
            + EXCLUDED.tokens_out, %(most_tokens)s),
        cost = least("""
    + _KEPT.format(column="cost", most="most_cost")
    + """
            + EXCLUDED.cost, %(most_cost)s)"""
)

# A row no record makes (edited by hand: negative, NaN, infinite, past a minute's bound) is
# left out, as the state directory's ledger leaves out an entry it cannot read: in
# PostgreSQL NaN sorts above every number, so the bounds leave it out too.
_SPENT = """SELECT currency, sum(tokens_in), sum(tokens_out), sum(cost) FROM {usage}
    WHERE kind = %s AND name = %s AND minute > %s AND minute <= %s
        AND tokens_in BETWEEN 0 AND %s AND tokens_out BETWEEN 0 AND %s AND cost BETWEEN 0 AND %s
    GROUP BY currency"""


def record_usage(
    conn: Conn, schema: Schema, kind: Kind, name: str, at: datetime, usage: Usage
) -> None:
    usage, _ = checked(usage)
    minute = minute_of(at)
    currency = usage.currency or ("" if usage.cost is None else DEFAULT_CURRENCY)
    conn.execute(
        schema.sql(_RECORD),
        {
            "kind": kind,
            "name": name,
            "oldest": shifted(minute, -LEDGER_SPAN),
            "span": LEDGER_SPAN,
            "minute": minute,
            "currency": currency,
            "in": usage.input_tokens or 0,
            "out": usage.output_tokens or 0,
            "cost": usage.cost or 0.0,
            # A minute holds at most what one event may, as the state directory's ledger.
            "most_tokens": MAX_TOKENS,
            "most_cost": MAX_COST,
        },
    )


def usage_since(conn: Conn, schema: Schema, kind: Kind, name: str, since: datetime) -> Spent:
    # The minutes that count, as every store counts them (ledger.counted_minutes).
    bounds = (MAX_TOKENS, MAX_TOKENS, MAX_COST)
    window = counted_minutes(since)
    rows = conn.execute(schema.sql(_SPENT), (kind, name, *window, *bounds)).fetchall()
    # A currency no record writes (edited by hand) is left out with its row.
    rows = [row for row in rows if row[0] == "" or checked_currency(row[0]) == row[0]]
    tokens_in = sum(int(row[1] or 0) for row in rows)
    tokens_out = sum(int(row[2] or 0) for row in rows)
    costs = tuple(sorted((row[0], float(row[3] or 0.0)) for row in rows if row[0]))
    return Spent(tokens_in, tokens_out, costs)
