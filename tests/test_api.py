"""The public API is chosen, not leaked: this pins what ``import trio_routines`` offers."""

from __future__ import annotations

import types

import trio_routines
import trio_routines.testing

PUBLIC = {
    "Agent", "ClaimResult", "ClaimStatus", "Completed", "DirectoryStore", "Event", "Failed",
    "Fire", "FireContext", "FireResult", "InvalidAgent", "InvalidCron", "InvalidRoutine",
    "InvalidWakeup", "LoadResult", "NotOnGrid", "NotYetDue", "Outcome", "Routine",
    "RoutineFailure", "SESSION_BUSY", "Scheduler", "StateFault", "Statistics", "Stopping",
    "Store", "TextDelta", "TrioRoutinesError", "TurnResult", "UnknownRoutine", "UnsafeName",
    "Wakeup", "WakeupRequest", "cron_error", "current_fire", "load_routines", "next_run",
    "open_store", "parse_delay", "serve", "serve_routines",
}  # fmt: skip


def test_the_public_names() -> None:
    exported = {
        name
        for name, value in vars(trio_routines).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
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
        "Behaviour", "Busy", "Complete", "Fail", "Hang", "MemoryStore", "Raise",
        "ScriptedAgent", "Turn", "WallClock",
    }  # fmt: skip
    assert isinstance(trio_routines.testing.MemoryStore(), trio_routines.Store)
