from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from trio_routines.store import Store
from trio_routines.stores.directory import DirectoryStore
from trio_routines.testing import MemoryStore

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile(
    "ci",
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ci" if os.environ.get("CI") else "default")

STORE_KINDS = ["memory", "directory"]


@pytest.fixture(params=STORE_KINDS)
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Store]:
    """Builds stores of one kind; every store built in one test shares the same state."""
    kind = request.param
    shared: dict[str, MemoryStore] = {}

    def build(**kwargs: object) -> Store:
        if kind == "memory":
            # One in-memory state per test, whatever the options.
            existing = shared.get("store")
            if existing is None:
                existing = shared["store"] = MemoryStore(**kwargs)  # type: ignore[arg-type]
            return existing
        return DirectoryStore(tmp_path / "state", **kwargs)  # type: ignore[arg-type]

    return build


@pytest.fixture
async def store(store_factory: Callable[..., Store]) -> AsyncIterator[Store]:
    built = store_factory()
    yield built
    await built.aclose()
