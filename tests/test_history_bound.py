"""A routine's history reads at most the claims its store keeps: the newest ``keep``.

Claims beyond them (left by a hand, or by a process that keeps more, until the next claim
prunes them) are not all read: 480,000 rows put in by hand made every ``history`` of the
routine a statement cut off by the server, and its ``status`` unreadable, for good while it
was paused (nothing claimed, nothing pruned)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pg import pooled_schema, require_server

from trio_routines.records import Outcome
from trio_routines.store import Store
from trio_routines.stores.directory import DirectoryStore
from trio_routines.stores.postgres import PostgresStore

T0 = datetime(2026, 7, 7, 9, 0, tzinfo=UTC)


@pytest.fixture(params=["directory", "postgres"])
def kept(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[int], Store]]:
    """Stores of one state keeping ``keep`` claims each."""
    if request.param == "directory":
        yield lambda keep: DirectoryStore(tmp_path / "state", keep=keep)
        return
    url = require_server()
    with pooled_schema() as schema:
        yield lambda keep: PostgresStore(url, schema=schema, keep=keep)


async def test_a_history_reads_the_newest_claims_the_store_keeps(
    kept: Callable[[int], Store],
) -> None:
    wide = kept(6)  # a process that keeps more
    slots = [T0 + timedelta(minutes=i) for i in range(6)]
    for slot in slots:
        await wide.claim("r", slot, slot)
        await wide.settle("r", slot, Outcome.COMPLETED, 1)
    narrow = kept(2)
    try:
        assert [fire.slot for fire in await narrow.history("r")] == slots[-2:]  # oldest first
        assert [fire.slot for fire in await wide.history("r")] == slots
        assert [fire.outcome for fire in await narrow.history("r")] == [Outcome.COMPLETED] * 2
    finally:
        await narrow.aclose()
        await wide.aclose()
