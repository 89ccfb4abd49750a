"""Fakes for testing code that uses trio_routines, in the spirit of ``trio.testing``.

* :class:`MemoryStore` -- the store contract kept in memory, with fault injection;
* :class:`WallClock` -- a wall clock that advances with Trio's (mock) clock and can be made
  to jump forward or backward on its own, like an NTP step or a VM restore;
* :class:`ScriptedAgent` -- an agent whose turns complete, fail, report busy, hang or raise on
  cue, and which records every turn it was asked for;
* :class:`MemoryPresence` -- what :meth:`MemoryStore.join` returns: a replica of the store,
  whose process can be made to die (:meth:`~MemoryPresence.vanish`) or to lose its holds
  (:meth:`~MemoryPresence.lose`), for tests of replicas sharing one store.
"""

from .clock import WallClock as WallClock
from .memberships import MemoryPresence as MemoryPresence
from .memory import MemoryStore as MemoryStore
from .scripted import Behaviour as Behaviour
from .scripted import Busy as Busy
from .scripted import Complete as Complete
from .scripted import Fail as Fail
from .scripted import Hang as Hang
from .scripted import Raise as Raise
from .scripted import ScriptedAgent as ScriptedAgent
from .scripted import Turn as Turn

__all__ = [
    "Behaviour",
    "Busy",
    "Complete",
    "Fail",
    "Hang",
    "MemoryPresence",
    "MemoryStore",
    "Raise",
    "ScriptedAgent",
    "Turn",
    "WallClock",
]
