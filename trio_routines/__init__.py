"""trio_routines: cron routines and self-scheduled wake-ups for Trio agents.

Every cron slot is claimed in a state store before it runs, so it fires at most once.
"""

from __future__ import annotations

import typing

from ._lazy import lazy_names as _lazy_names

if typing.TYPE_CHECKING:  # imported on first use (below): `import trio_routines` stays cheap
    from .agent import SESSION_BUSY as SESSION_BUSY
    from .agent import Agent as Agent
    from .agent import Completed as Completed
    from .agent import Event as Event
    from .agent import Failed as Failed
    from .agent import TextDelta as TextDelta
    from .agent import Usage as Usage
    from .context import FireContext as FireContext
    from .context import current_fire as current_fire
    from .cron import cron_error as cron_error
    from .cron import next_run as next_run
    from .errors import AgentUnavailable as AgentUnavailable
    from .errors import InvalidAgent as InvalidAgent
    from .errors import InvalidCron as InvalidCron
    from .errors import InvalidOption as InvalidOption
    from .errors import InvalidRoutine as InvalidRoutine
    from .errors import InvalidWakeup as InvalidWakeup
    from .errors import StateFault as StateFault
    from .errors import TrioRoutinesError as TrioRoutinesError
    from .errors import Unconfirmed as Unconfirmed
    from .errors import UnsafeName as UnsafeName
    from .hosting import serve as serve
    from .records import ClaimResult as ClaimResult
    from .records import ClaimStatus as ClaimStatus
    from .records import Fire as Fire
    from .records import Gap as Gap
    from .records import GapReason as GapReason
    from .records import Origin as Origin
    from .records import OriginKind as OriginKind
    from .records import Outcome as Outcome
    from .records import Wakeup as Wakeup
    from .routinedir import LoadResult as LoadResult
    from .routinedir import RoutineFailure as RoutineFailure
    from .routinedir import load_routines as load_routines
    from .routines import Routine as Routine
    from .scheduler import FireResult as FireResult
    from .scheduler import NotOnGrid as NotOnGrid
    from .scheduler import NotYetDue as NotYetDue
    from .scheduler import Scheduler as Scheduler
    from .scheduler import Statistics as Statistics
    from .scheduler import Stopping as Stopping
    from .scheduler import UnknownRoutine as UnknownRoutine
    from .scheduler import serve_routines as serve_routines
    from .store import ArmedRecords as ArmedRecords
    from .store import GapRecords as GapRecords
    from .store import Store as Store
    from .stores import open_store as open_store
    from .stores.directory import DirectoryStore as DirectoryStore
    from .turns import TurnResult as TurnResult
    from .wakelimits import WakeLimits as WakeLimits
    from .wakelimits import WakeTurns as WakeTurns
    from .wakeups import WakeupRequest as WakeupRequest
    from .wakeups import parse_delay as parse_delay

# Each public name, and the module it comes from: imported on first use (see _lazy.py).
_LAZY = {
    "SESSION_BUSY": ".agent",
    "Agent": ".agent",
    "Completed": ".agent",
    "Event": ".agent",
    "Failed": ".agent",
    "TextDelta": ".agent",
    "Usage": ".agent",
    "FireContext": ".context",
    "current_fire": ".context",
    "cron_error": ".cron",
    "next_run": ".cron",
    "AgentUnavailable": ".errors",
    "InvalidAgent": ".errors",
    "InvalidCron": ".errors",
    "InvalidOption": ".errors",
    "InvalidRoutine": ".errors",
    "InvalidWakeup": ".errors",
    "StateFault": ".errors",
    "TrioRoutinesError": ".errors",
    "Unconfirmed": ".errors",
    "UnsafeName": ".errors",
    "serve": ".hosting",
    "ClaimResult": ".records",
    "ClaimStatus": ".records",
    "Fire": ".records",
    "Gap": ".records",
    "GapReason": ".records",
    "Origin": ".records",
    "OriginKind": ".records",
    "Outcome": ".records",
    "Wakeup": ".records",
    "LoadResult": ".routinedir",
    "Routine": ".routines",
    "RoutineFailure": ".routinedir",
    "load_routines": ".routinedir",
    "FireResult": ".scheduler",
    "NotOnGrid": ".scheduler",
    "NotYetDue": ".scheduler",
    "Scheduler": ".scheduler",
    "Statistics": ".scheduler",
    "Stopping": ".scheduler",
    "UnknownRoutine": ".scheduler",
    "serve_routines": ".scheduler",
    "ArmedRecords": ".store",
    "GapRecords": ".store",
    "Store": ".store",
    "open_store": ".stores",
    "DirectoryStore": ".stores.directory",
    "TurnResult": ".turns",
    "WakeLimits": ".wakelimits",
    "WakeTurns": ".wakelimits",
    "WakeupRequest": ".wakeups",
    "parse_delay": ".wakeups",
}


__all__ = sorted(_LAZY)  # what `from trio_routines import *` gives (each loaded then)


__getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())


__version__ = "0.2.0.dev0"
