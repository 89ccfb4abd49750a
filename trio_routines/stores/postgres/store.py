"""The PostgreSQL store itself: the store contract over the layers this package's doc names."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from ...checks import checked_count, checked_seconds
from ...claims import KEEP_CLAIMS
from ...errors import InvalidOption, StateFault
from ...instants import truncate_ms
from ...ledger import Spent, check_key
from ...names import check_name
from ...output import stored_output
from ...presence import Presence
from ...records import ClaimResult, Fire, Gap, Outcome, Wakeup
from ...replicas import ReplicaInfo
from ...store import Lifetime
from ...text import error_text
from ...usage import Usage
from ...wakeups import WakeupRequest
from ..newest import BatchedReads
from .alive import claims_alive, replica_rows, sessions_held
from .batches import Batches
from .call import Call
from .claims import (
    HoldsWanted,
)
from .conn import Connections
from .gaps import first_armed, gaps_of, record_gap
from .holds import PostgresPresence
from .ledger import record_usage, usage_since
from .pauses import (
    paused,
    paused_since,
    paused_with_resumes,
    resumed_pause_since,
    set_paused,
)
from .reads import BATCH, READERS, history, newest_fires, open_claims, read_batch, resumes
from .repair import repair
from .schema import CLAIM_LOCK as CLAIM_LOCK
from .schema import SCHEMA_VERSION as SCHEMA_VERSION
from .schema import Migrate, Schema
from .wakeups import PostgresWakeups

log = logging.getLogger("trio_routines")

Conn = psycopg.Connection[Any]


class PostgresStore(Lifetime):
    """Claims and wake-ups in a PostgreSQL database (see :mod:`trio_routines.stores.postgres`).

    ``schema`` names a PostgreSQL schema to keep the tables in (created if missing); without
    it the connection's ``search_path`` decides, so ``?options=-csearch_path%3Dmine`` works
    for a schema ``mine`` that exists (a URL's schema is not created: the calls say so).
    :func:`~trio_routines.open_store` (and so the command line) reads a URL's
    ``?schema=mine`` as this ``schema``.
    ``timeout`` bounds every call: waiting for a connection and the server's work, plus one
    second of our own (see :mod:`.conn`). ``migrate`` says whether the first call may
    create or upgrade the tables (``"always"``, ``"create"`` an empty database's only,
    ``"never"``: see :mod:`.schema`).
    """

    def __init__(
        self,
        url: str,
        *,
        keep: int = KEEP_CLAIMS,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = 5.0,
        migrate: Migrate = "always",
    ) -> None:
        self.keep = checked_count("keep", keep, least=1)
        min_size = checked_count("min_size", min_size, least=0)
        max_size = checked_count("max_size", max_size, least=1)
        if max_size < min_size:
            raise InvalidOption(f"max_size ({max_size}) must be at least min_size ({min_size})")
        timeout = checked_seconds("timeout", timeout, zero=False)
        self.schema = schema
        self.timeout = timeout
        self._tables = Schema(schema, migrate)
        self._conns = Connections(
            url, self._tables, min_size=min_size, max_size=max_size, timeout=timeout
        )
        self.url = url
        self._batches = Batches(self._conns, self._tables, keep)
        self._newest: BatchedReads[Fire | None] = self._reads(
            newest_fires, "the newest claim of {routine} is unreadable"
        )
        self._resumes: BatchedReads[datetime | None] = self._reads(
            resumes, "the resume of {routine} is unreadable"
        )
        self._gap_reads: BatchedReads[list[Gap]] = self._reads(
            gaps_of, "the gaps of {routine} are unreadable"
        )
        self._open_after: tuple[str, datetime] | None = None  # see open_claims
        self._wakeups = PostgresWakeups(self._conns, self._tables)

    def _reads(self, read: Any, unreadable: str) -> BatchedReads[Any]:
        batch = functools.partial(read_batch, self._conns, self._tables, read, unreadable)
        return BatchedReads(batch, readers=READERS, batch=BATCH)

    def __repr__(self) -> str:
        schema = f", schema={self.schema!r}" if self.schema else ""
        return f"PostgresStore({self._conns.server!r}{schema})"

    @property
    def where(self) -> str:
        """The server and database, as messages and the status page show them (no password)."""
        return self._conns.where

    # -- claims ---------------------------------------------------------------------------

    #: A claim is held by the replica it names, and takes its session's hold in its own
    #: transaction (``holds=`` of :meth:`claim`).
    claims_take_holds = True
    claims_live_with_replica = True

    async def claim(
        self,
        routine: str,
        slot: datetime,
        fired_at: datetime,
        *,
        replica: str | None = None,
        holds: HoldsWanted | None = None,
    ) -> ClaimResult:
        """Decide ``slot`` (the store contract); with ``holds`` (the holder's key, the keys of
        its session), take them in the same transaction: the result's ``holds`` says which
        were. The claim itself is held by its ``replica`` (see :meth:`claims_alive`)."""
        check_name(routine)
        return await self._batches.claims.submit(
            (routine, truncate_ms(slot), truncate_ms(fired_at), replica, holds)
        )

    async def settle(
        self,
        routine: str,
        slot: datetime,
        outcome: Outcome,
        ms: int | None = None,
        *,
        if_unsettled: bool = False,
        error: str | None = None,
        output: str | None = None,
        usage: Usage | None = None,
    ) -> bool:
        check_name(routine)
        rounded = None if ms is None else round(ms)
        reason = (error_text(error) or None) if error is not None else None
        kept = None if output is None else stored_output(output)  # no NUL: text refuses it
        try:
            await self._batches.settles.submit(
                (routine, truncate_ms(slot), outcome, rounded, if_unsettled, reason, kept, usage)
            )
        except StateFault as exc:
            log.warning("%s", exc)
            return False
        return True

    async def latest_fire(self, routine: str) -> Fire | None:
        check_name(routine)
        return await self._newest.read(routine)  # one query with concurrent calls (a boot's)

    async def history(self, routine: str) -> list[Fire]:
        check_name(routine)
        what = f"the fired-slot claims of {routine!r} are unreadable"
        return await self._conns.run(
            what, history, self._tables, self._conns.where, routine, self.keep
        )

    # -- pause ----------------------------------------------------------------------------

    async def set_paused(self, routine: str, paused: bool, at: datetime | None = None) -> None:
        check_name(routine)
        what = f"could not {'pause' if paused else 'resume'} {routine!r}"
        unsure = f"{'pausing' if paused else 'resuming'} {routine!r} is not confirmed"
        asked = time.monotonic()  # a resume's wait for a connection counts toward its landing
        await self._conns.run(
            what, set_paused, self._tables, routine, paused, at, asked, unsure=unsure
        )

    async def paused_since(self, routine: str) -> datetime | None:
        """When ``routine``'s pause began (its row's ``paused_at``); None when not paused."""
        check_name(routine)
        what = f"the pause of {routine!r} is unreadable"
        return await self._conns.run(what, paused_since, self._tables, routine)

    async def resumed_at(self, routine: str) -> datetime | None:
        check_name(routine)
        return await self._resumes.read(routine)  # one query with concurrent calls (a boot's)

    async def resumed_pause_since(self, routine: str) -> datetime | None:
        """When the pause ``routine``'s latest resume ended began (its resume row's
        ``paused_at``); None when not known."""
        check_name(routine)
        what = f"the resume of {routine!r} is unreadable"
        return await self._conns.run(what, resumed_pause_since, self._tables, routine)

    async def paused(self) -> frozenset[str]:
        return await self._conns.run("the paused routines are unreadable", paused, self._tables)

    async def paused_with_resumes(
        self, since: datetime
    ) -> tuple[frozenset[str], dict[str, tuple[datetime, datetime | None]]]:
        """The paused routines, and those resumed at ``since`` or later, each with its latest
        resume's instant and when the pause it ended began: one query, one snapshot."""
        what = "the paused routines are unreadable"
        return await self._conns.run(what, paused_with_resumes, self._tables, since)

    # -- gaps -----------------------------------------------------------------------------

    async def record_gap(self, routine: str, gap: Gap, *, extends: datetime | None = None) -> bool:
        """Add ``gap`` to ``routine``\'s gaps (the store contract); False when already there."""
        check_name(routine)
        what = f"could not record a gap of {routine!r}"
        return await self._conns.run(
            what, lambda conn, _call: record_gap(conn, self._tables, routine, gap, extends)
        )

    async def gaps(self, routine: str) -> list[Gap]:
        """The retained gaps of ``routine``, oldest first."""
        check_name(routine)
        return await self._gap_reads.read(routine)  # one query with concurrent calls (a boot's)

    async def record_usage(self, kind: str, name: str, at: datetime, usage: Usage) -> None:
        """Add ``usage``, spent at ``at``, to the ledger of a routine or a session."""
        checked = check_key(kind, name)
        what = f"could not record the usage of {kind} {name!r}"
        await self._conns.run(
            what, lambda conn, _call: record_usage(conn, self._tables, checked, name, at, usage)
        )

    async def usage_since(self, kind: str, name: str, since: datetime) -> Spent:
        """What the turns of a routine or a session spent from ``since`` on (the ledger)."""
        checked = check_key(kind, name)
        what = f"the usage of {kind} {name!r} is unreadable"
        return await self._conns.run(
            what, lambda conn, _call: usage_since(conn, self._tables, checked, name, since)
        )

    async def first_armed(self, routines: Sequence[str], at: datetime) -> dict[str, datetime]:
        """When each of ``routines`` was first armed; ``at`` for those named the first time."""
        names = [check_name(routine) for routine in routines]
        what = "when the routines were first armed cannot be read or kept"
        when = truncate_ms(at)
        return await self._conns.run(
            what, lambda conn, _call: first_armed(conn, self._tables, names, when)
        )

    # -- wake-ups (see wakeups.py) -----------------------------------------------------

    async def note_wake_turn(self, session: str, at: datetime) -> None:
        """Record a wake-up turn of ``session`` at ``at``, for the rate limit."""
        await self._wakeups.note_turn(session, truncate_ms(at))

    async def wake_turns(self, session: str, since: datetime) -> list[datetime]:
        """The recorded wake-up turns of ``session`` after ``since``, oldest first."""
        return await self._wakeups.turns(session, since)

    async def add_wakeup(self, request: WakeupRequest, now: datetime) -> Wakeup:
        return await self._wakeups.add(request, now)

    async def take_due_wakeup(self, now: datetime) -> Wakeup | None:
        return await self._wakeups.take_due(now)

    async def defer_wakeup(self, wakeup: Wakeup, fire_at: datetime) -> bool:
        return await self._wakeups.defer(wakeup, fire_at)

    async def remove_wakeup(self, wakeup_id: str, session: str | None = None) -> bool:
        return await self._wakeups.remove(wakeup_id, session)

    async def list_wakeups(self) -> list[Wakeup]:
        return await self._wakeups.pending()

    async def count_wakeups(self) -> int:
        """How many wake-ups are pending: a count of the rows, none of them read (a malformed
        one, which a listing skips, is counted too)."""
        return await self._wakeups.count()

    async def ready(self) -> None:
        await self._conns.run("the database does not answer", _select_one)

    async def schema_versions(self) -> tuple[int, int]:
        """The schema version the first call found, and the version now (migrated as the
        store's ``migrate`` allows: see :mod:`.schema`). Raises StateFault."""
        what = "could not read the schema version"
        now: int = await self._conns.run(what, _version, self._tables)
        found = self._tables.found
        return (now if found is None else found), now

    async def repair_schema(self) -> list[tuple[str, bool]]:
        """Re-create the tables, columns and indexes of this version's schema the database
        lacks (see :mod:`.repair`): each missing one, and whether it was re-created. Raises
        StateFault."""
        what = "could not repair the schema"
        return await self._conns.run(what, lambda conn, _call: repair(conn, self._tables))

    # -- replicas (see replicas.py and holds.py) ----------------------------------------

    async def join(self, info: ReplicaInfo) -> Presence:
        """Become a member of the store as ``info.id`` (see :mod:`trio_routines.replicas`)."""
        # The first call connects and migrates: either may fail (a lock on the schema table).
        await self._conns.run("could not open the state", _select_one)
        presence = PostgresPresence(info, self._conns, self._tables)
        await presence.connect()
        return presence

    async def claims_alive(self, claims: Sequence[tuple[str, datetime]]) -> list[bool]:
        """For each ``(routine, slot)``, whether its claim is open and the replica it names is
        alive now (holds its id's lock): a replica holds its claims until it settles them or
        dies, so a live replica's open claim is its turn -- except one it made in an earlier
        life under the same id, which only it can tell (the scheduler asks it, not us)."""
        what = "could not read the holds"
        return await self._conns.run(what, claims_alive, self._tables, list(claims))

    async def sessions_held(self, sessions: Sequence[str]) -> list[bool]:
        """For each session, whether a live replica holds its hold now (a turn of it)."""
        what = "could not read the holds"
        return await self._conns.run(what, sessions_held, self._tables, list(sessions))

    async def open_claims(self, routines: Sequence[str], budget: int) -> list[tuple[str, Fire]]:
        """Open claims of ``routines`` that name their replica, at most ``budget`` per call,
        going on after the last one returned and starting over once all were returned."""
        for routine in routines:
            check_name(routine)
        what = "the open claims are unreadable"
        names = list(routines)
        args = (self._tables, self._conns.where, names, self._open_after, budget)
        found: list[tuple[str, Fire]] = await self._conns.run(what, open_claims, *args)
        self._open_after = (found[-1][0], found[-1][1].slot) if len(found) == budget else None
        return found

    async def replicas(self) -> list[ReplicaInfo]:
        """Every member that joined (and was not forgotten), each marked alive or not."""
        return await self._conns.run("could not read the replicas", replica_rows, self._tables)

    async def aclose(self) -> None:
        await self._conns.aclose()


def _select_one(conn: Conn, _call: Call) -> None:
    conn.execute("SELECT 1")


def _version(conn: Conn, _call: Call, schema: Schema) -> int:
    return schema.version(conn)
