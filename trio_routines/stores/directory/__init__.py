"""The state directory store: claims as files, wake-ups as an append-only journal.

The store (store.py) is made of parts that each own their state and are handed what they
need: the claim and settle write path, by threads or the writer process (writes.py,
writer/), the blocking calls (blocking.py), the wake-up calls (wakeups.py over
wakeuplog.py), the pause, gap and first-armed records (records.py over pause.py and
pausestate.py, gaps.py and armed.py) and the replicas' membership (members.py over holds.py
and openscan.py). The files of claims are claimfiles.py's; everything below the root is
opened through ``stores/safefile.py``.
"""

from typing import TYPE_CHECKING

from ..._lazy import lazy_names as _lazy_names

if TYPE_CHECKING:  # imported on first use: the writer process, started as a module of this
    # package, needs none of the store
    from ..safefile import describe as describe
    from .store import DirectoryStore as DirectoryStore

__all__ = ["DirectoryStore", "describe"]
__getattr__, __dir__ = _lazy_names(
    __name__, {"DirectoryStore": ".store", "describe": "..safefile"}, globals()
)
