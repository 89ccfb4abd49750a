"""The public API is chosen, not leaked: this pins what ``import trio_routines`` offers."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

import trio_routines
import trio_routines.testing

PUBLIC = {
    "Agent", "AgentUnavailable", "ArmedRecords", "ClaimResult", "ClaimStatus", "Completed",
    "DirectoryStore", "Event", "Failed",
    "Fire", "FireContext", "FireResult", "Gap", "GapReason", "GapRecords", "InvalidAgent",
    "InvalidCron", "InvalidOption", "InvalidRoutine", "InvalidWakeup", "LoadResult", "NotOnGrid",
    "NotYetDue", "Origin", "OriginKind", "Outcome", "Routine",
    "RoutineFailure", "SESSION_BUSY", "Scheduler", "StateFault", "Statistics", "Stopping",
    "Store", "TextDelta", "TrioRoutinesError", "TurnResult", "Unconfirmed", "UnknownRoutine",
    "UnsafeName",
    "Usage", "WakeLimits", "WakeTurns", "Wakeup", "WakeupRequest", "cron_error", "current_fire",
    "load_routines", "next_run",
    "open_store", "parse_delay", "serve", "serve_routines",
}  # fmt: skip


def test_the_public_names() -> None:
    exported = {
        name
        for name in dir(trio_routines)  # its names are imported on first use (PEP 562)
        if not name.startswith("_")
        and not isinstance(getattr(trio_routines, name), types.ModuleType)
    }
    assert exported - {"annotations"} == PUBLIC


def test_every_error_is_ours_and_a_builtin() -> None:
    for name in PUBLIC:
        value = getattr(trio_routines, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, trio_routines.TrioRoutinesError)
            assert value.__doc__, f"{name} says who raises it"


def test_the_testing_fakes() -> None:
    assert set(trio_routines.testing.__all__) == {
        "Behaviour", "Busy", "Complete", "Fail", "Hang", "MemoryPresence", "MemoryStore",
        "Raise", "ScriptedAgent", "Turn", "WallClock",
    }  # fmt: skip
    assert isinstance(trio_routines.testing.MemoryStore(), trio_routines.Store)


def _api_docs() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(
        "api_docs", Path(__file__).resolve().parent.parent / "scripts" / "api_docs.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_public_name_has_a_docstring() -> None:
    assert _api_docs().missing_docstrings() == []


def test_signatures_name_only_types_the_page_documents() -> None:
    # A store's join returns the Presence protocol the page documents, not its own class;
    # an alias the page does not document is written out (``HoldsWanted``).
    page = _api_docs().generate()
    for internal in ("DirectoryPresence", "PostgresPresence", "HoldsWanted"):
        assert internal not in page
    assert "holds: 'tuple[int, tuple[int, ...]] | None' = None" in page
    assert "-> 'ASGIApp'" in page  # a callable's alias is kept: the page documents it


def test_docs_api_md_is_current() -> None:
    api_docs = _api_docs()
    assert api_docs.TARGET.read_text() == api_docs.generate(), (
        "docs/api.md is out of date: run python scripts/api_docs.py"
    )


def test_current_fire_is_public_and_documented() -> None:
    assert trio_routines.current_fire() is None  # outside a turn
    assert "current_fire" in _api_docs().generate()
    assert trio_routines.current_fire.__doc__
