"""Claims and settles in PostgreSQL, decided a batch at a time, in one round trip each.

A batch of claims (distinct routines) is one transaction sent as one pipeline: first the
advisory lock of every routine, taken in ascending key order so that two batches sharing
routines can never deadlock, then one statement that reads each routine's newest claim,
inserts the wanted slots that are not stale with ``INSERT ... ON CONFLICT DO NOTHING ...
RETURNING`` (what comes back is taken, what does not is a duplicate), and prunes beyond the
retention, then the commit. The lock makes each routine's decisions one at a time across
every process; the decision reads the newest claim in its own statement, after the lock was
granted, so it sees what the previous holder committed (READ COMMITTED).

A claim is durable when the commit returns (``synchronous_commit`` is on). If the caller gave
up while the batch was on its way (our deadline passed: the network stalled), the server may
still have committed it. Nobody will run those slots, and none may be claimed again: when
the answer arrives after all, the thread records each such taken claim as ``interrupted`` at
once, so the history says what happened instead of showing a claim forever in flight (if the
answer never arrives, the next boot's reconcile does the same).

A batch of settles is one ``UPDATE ... FROM`` statement: one commit. A batch travels as one
JSON parameter (see :func:`_json`).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

import psycopg

from ...instants import format_iso, slot_name
from ...records import ClaimResult, ClaimStatus, Outcome
from ...usage import Usage
from .alive import LOCKS as _HELD_LOCKS
from .call import Call
from .schema import CLAIM_LOCK, Schema

log = logging.getLogger("trio_routines")

# routine, slot, fired_at, replica (distinct routines)
ClaimItem = tuple[str, datetime, datetime, str | None, "HoldsWanted | None"]
#: The holds a claim takes in its own transaction (see :func:`claim_batch`): the holder's key
#: and the keys to hold (its session's; the claim itself names its replica).
HoldsWanted = tuple[int, tuple[int, ...]]
# routine, slot, outcome, ms, if_unsettled, error, output
# routine, slot, outcome, ms, if_unsettled, error, output, usage
SettleItem = tuple[str, datetime, Outcome, int | None, bool, str | None, str | None, Usage | None]

# DISTINCT: two routines whose keys collide share one lock. The subquery's order is the
# order in which the aggregate evaluates the lock calls.
_LOCKS = """SELECT count(pg_advisory_xact_lock(hashtext(%s), k)) FROM (
    SELECT DISTINCT hashtext(e->>0) AS k FROM jsonb_array_elements(%s::jsonb) AS e ORDER BY k
    ) AS keys"""

# The statement's snapshot does not hold its own insertions: ``newest`` is the newest claim
# before this batch, and the delete keeps the keep-1 newest old claims next to the new one.
_DECIDE = """WITH wanted AS (
        SELECT w.routine, w.slot, w.fired_at, w.replica,
            (SELECT max(c.slot) FROM {claims} AS c WHERE c.routine = w.routine) AS newest
        FROM (SELECT e->>0 AS routine, (e->>1)::timestamptz AS slot,
            (e->>2)::timestamptz AS fired_at, e->>3 AS replica
            FROM jsonb_array_elements(%(batch)s::jsonb) AS e
        ) AS w
    ), taken AS (
        INSERT INTO {claims} (routine, slot, fired_at, replica)
        SELECT routine, slot, fired_at, replica FROM wanted
        WHERE newest IS NULL OR slot >= newest
        ON CONFLICT DO NOTHING
        RETURNING routine
    ), pruned AS (
        DELETE FROM {claims} AS c USING taken AS t WHERE c.routine = t.routine AND %(prune)s
    )
    SELECT w.routine, w.newest, t.routine IS NOT NULL FROM wanted AS w
        LEFT JOIN taken AS t USING (routine)"""
_PRUNE_ALL = "TRUE"
_PRUNE_OLDER = """c.slot < (SELECT k.slot FROM {claims} AS k WHERE k.routine = t.routine
    ORDER BY k.slot DESC OFFSET %(offset)s LIMIT 1)"""

_SETTLE = """UPDATE {claims} AS c
    SET outcome = u.outcome, ms = u.ms, error = u.error, output = u.output,
        tokens_in = u.tokens_in, tokens_out = u.tokens_out, cost = u.cost, currency = u.currency
    FROM (SELECT e->>0 AS routine, (e->>1)::timestamptz AS slot, e->>2 AS outcome,
        (e->>3)::bigint AS ms, (e->>4)::boolean AS only_unsettled, e->>5 AS error,
        e->>6 AS output, (e->>7)::bigint AS tokens_in, (e->>8)::bigint AS tokens_out,
        (e->>9)::double precision AS cost, e->>10 AS currency
        FROM jsonb_array_elements(%s::jsonb) AS e) AS u
    WHERE c.routine = u.routine AND c.slot = u.slot
        AND (NOT u.only_unsettled OR c.outcome IS NULL)"""
# Unsettled: no outcome at all. One this version does not know (a newer version's word, a row
# edited by hand) was settled by someone: a boot's ``interrupted`` never writes over it.


class Waiter(Protocol):
    @property
    def gave_up(self) -> bool:
        """Whether the caller stopped waiting for this item's answer."""
        ...


def _json(rows: list[list[Any]]) -> str:
    # One JSON parameter instead of arrays: psycopg dumps a list item by item in Python, which
    # for a herd of 10,000 costs more than the server's whole transaction.
    return json.dumps(rows, ensure_ascii=False, separators=(",", ":"))


# The holds of the batch, taken in the claim's transaction before its decision (see holds.py,
# whose take locks its rows in the keys' order as this does): what comes back is the keys
# refused. A let-go of ours on its way is sent before (Holds.enter_claiming): a row of ours
# taken over here would be deleted by it, under the new turn.
_HOLDS = f"""WITH held AS MATERIALIZED ({_HELD_LOCKS}),
    wanted AS (SELECT (e->>0)::bigint AS k, (e->>1)::bigint AS holder
        FROM jsonb_array_elements(%s::jsonb) AS e),
    taken AS (
        INSERT INTO {{holds}} AS h (key, holder) SELECT k, holder FROM wanted ORDER BY k
        ON CONFLICT (key) DO UPDATE SET holder = EXCLUDED.holder
            WHERE NOT EXISTS (SELECT 1 FROM held
                WHERE held.hi = h.holder >> 32 AND held.lo = h.holder & 4294967295)
        RETURNING h.key)
    SELECT k FROM wanted WHERE k NOT IN (SELECT key FROM taken)"""
# The holders among those given whose replica lock nobody holds: a replica whose connection
# the server ended, still claiming before it heard (its holds would be dead on arrival).
_GONE = f"""WITH held AS MATERIALIZED ({_HELD_LOCKS})
    SELECT t.k FROM unnest(%s::bigint[]) AS t (k) WHERE NOT EXISTS (SELECT 1 FROM held
        WHERE held.hi = t.k >> 32 AND held.lo = t.k & 4294967295)"""


class HolderGone(Exception):
    """The claims' holder holds its replica lock no more (see :func:`claim_batch`)."""


_UNHOLD = "DELETE FROM {holds} AS h USING jsonb_array_elements(%s::jsonb) AS e " + (
    "WHERE h.key = (e->>0)::bigint AND h.holder = (e->>1)::bigint"
)


def claim_batch(
    conn: psycopg.Connection[Any],
    call: Call,
    schema: Schema,
    keep: int,
    items: list[ClaimItem],
    waiters: Sequence[Waiter],
) -> tuple[list[ClaimResult], list[bool]]:
    """Decide every item in one transaction: the results in the items' order, and which taken
    claims were settled interrupted here because their caller had given up meanwhile.

    An item with holds (its session's) takes them in the same transaction, whatever its
    decision: a claim is held by the replica it names (see :mod:`.holds`), so the claim
    needs no hold of its own. Each result says which of its holds were taken
    (``ClaimResult.holds``); the holds of a claim not taken are the caller's to let go."""
    batch = _json(
        [
            [routine, slot.isoformat(), fired.isoformat(), replica]
            for routine, slot, fired, replica, _ in items
        ]
    )
    wanted_holds = [[key, holds[0]] for *_, holds in items if holds is not None for key in holds[1]]
    holders = sorted({holds[0] for *_, holds in items if holds is not None})
    prune = _PRUNE_ALL if keep == 1 else _PRUNE_OLDER
    decide = schema.sql(_DECIDE.replace("%(prune)s", prune))
    with conn.pipeline():
        with conn.transaction():
            # A claim that takes holds is made only while its holder's replica lock is held:
            # one made after the server ended that connection (before this replica heard of
            # it, up to a second) would start a turn beside another replica's of its session.
            if holders and conn.execute(_GONE, (holders,)).fetchall():
                raise HolderGone
            conn.execute(_LOCKS, (CLAIM_LOCK, batch))
            if wanted_holds:
                refusals = conn.execute(schema.sql(_HOLDS), (_json(wanted_holds),))
            cursor = conn.execute(decide, {"batch": batch, "offset": keep - 2})
        rows = {routine: (newest, taken) for routine, newest, taken in cursor.fetchall()}
    refused = {key for (key,) in refusals.fetchall()} if wanted_holds else set()
    results = []
    for routine, slot, _, _, holds in items:
        newest, taken = rows[routine]
        held = None if holds is None else tuple(key not in refused for key in holds[1])
        if taken:
            results.append(ClaimResult(ClaimStatus.TAKEN, slot_name(slot), held))
        elif newest is not None and slot < newest:
            results.append(ClaimResult(ClaimStatus.STALE, slot_name(newest), held))
        else:
            results.append(ClaimResult(ClaimStatus.DUPLICATE, slot_name(slot), held))
    gone = [call.abandoned.is_set() or waiter.gave_up for waiter in waiters]
    late = [result.taken and no for result, no in zip(results, gone, strict=True)]
    _given_up(conn, schema, items, results, gone)
    # Should the whole call's caller give up before the answer is handed over, the rest too.
    call.undo = functools.partial(
        _given_up, schema=schema, items=items, results=results, gone=[not no for no in gone]
    )
    call.undo_of = f"the claims and holds of {len(items)} slot(s)"
    return results, late


def _given_up(
    conn: psycopg.Connection[Any],
    schema: Schema,
    items: list[ClaimItem],
    results: list[ClaimResult],
    gone: list[bool],
) -> None:
    """The claims taken for callers that gave up (``gone``), settled interrupted (nobody runs
    them), and the holds taken for them let go (nobody else would)."""
    late = [
        item for item, result, no in zip(items, results, gone, strict=True) if no and result.taken
    ]
    if late:
        taken_too_late(conn, schema, late)
    orphans = [
        [key, item[4][0]]
        for item, result, no in zip(items, results, gone, strict=True)
        if no and item[4] is not None and result.holds is not None
        for key, ok in zip(item[4][1], result.holds, strict=True)
        if ok
    ]
    if orphans:
        conn.execute(schema.sql(_UNHOLD), (_json(orphans),))


def taken_too_late(conn: psycopg.Connection[Any], schema: Schema, late: list[ClaimItem]) -> None:
    """Settle interrupted the claims taken for callers that had given up: nobody runs them."""
    for routine, slot, *_ in late:
        log.warning(
            "%s: slot %s was claimed after the call had given up (a stalled connection, or a "
            "stop); it will not run and is recorded as interrupted",
            routine,
            format_iso(slot),
        )
    settles: list[SettleItem] = [
        (routine, slot, Outcome.INTERRUPTED, None, True, None, None, None)
        for routine, slot, *_ in late
    ]
    settle_batch(conn, Call(), schema, settles)


def settle_batch(
    conn: psycopg.Connection[Any], call: Call, schema: Schema, items: list[SettleItem]
) -> None:
    """Write every outcome in one statement (one commit); items are distinct slots."""
    conn.execute(
        schema.sql(_SETTLE),
        (
            _json(
                [
                    [
                        routine,
                        slot.isoformat(),
                        outcome.value,
                        ms,
                        only,
                        error,
                        output,
                        *_usage_columns(usage),
                    ]
                    for routine, slot, outcome, ms, only, error, output, usage in items
                ]
            ),
        ),
    )


def _usage_columns(usage: Usage | None) -> list[Any]:
    """A settle's usage as the columns ``tokens_in, tokens_out, cost, currency``."""
    if usage is None:
        return [None, None, None, None]
    return [usage.input_tokens, usage.output_tokens, usage.cost, usage.currency]
