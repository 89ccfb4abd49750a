"""The PostgreSQL store: claims and wake-ups as rows, shared by replicas on many machines.

Theory of operation. The layers are: :mod:`.schema` (tables and migrations),
:mod:`.conn` (the pool, and every call bounded on our side whatever the network does),
:mod:`.claims` (claims and settles decided a batch per transaction), :mod:`..batch` (group
commit: the calls that arrive while a batch is in flight form the next one; :mod:`.batches`
gathers the store's), :mod:`.reads`
(claims read back; a boot's newest claims and resumes a query per batch, queued as the state
directory's newest claims are, by :mod:`..newest`), :mod:`.wakeups` (wake-up rows) and
:mod:`.store`, the :class:`~trio_routines.store.Store` itself. Batching is invisible to
callers: each ``claim``, ``settle``, ``latest_fire`` or ``resumed_at`` gets its own answer, as
if the calls had come one by one.

Claims follow the same pure rules as the state directory: a slot older than the newest claim
is stale, an existing one a duplicate, otherwise it is taken and the oldest claims beyond the
retention are pruned. Every claim of one routine, from any process on any machine, is decided
under that routine's advisory lock, and is durable once the commit returns.

Wake-ups are rows in stored order, taken without waiting on each other (see :mod:`.wakeups`).

Faults. Every psycopg error, and every call that outlives our deadline, becomes a one-line
:class:`~trio_routines.errors.StateFault` (a settle logs it instead). A connection lost in
the middle of a claim leaves its result unknown: the caller gets a StateFault and so never
fires, yet the commit may have reached the server -- then the slot is burned (claimed, never
run, recorded as interrupted). That keeps "at most once" at the price of a missed slot.

The package needs psycopg (the ``postgres`` extra): ``trio_routines.stores`` imports it only
when a ``postgresql://`` state is opened.
"""

from .schema import CLAIM_LOCK as CLAIM_LOCK
from .schema import SCHEMA_VERSION as SCHEMA_VERSION
from .store import PostgresStore as PostgresStore
