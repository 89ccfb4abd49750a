"""Whether a state directory can serve now (``DirectoryStore.ready``, behind ``/readyz``).

Two checks, since neither sees what the other does. A stat of the directory says whether it
is there and writable; it answers at once even while the disk stalls every write (a frozen
file system) or the writer process is stopped. So the store also keeps when each call under
way on the disk began -- a batch in a thread or in the writer process, a flush, a wake-up
call, a settle waiting for a claim's lock, counted until its thread returns even when its
caller gave up (abandon.py) -- and one that has waited too long makes it not ready.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from ...errors import StateFault
from ..safefile import describe


def stalled_for(now: float, begun: Iterable[float | None]) -> float | None:
    """How long the oldest of the calls ``begun`` (Trio times; None: none under way) has
    waited at ``now``, if one is under way."""
    times = [at for at in begun if at is not None]
    return now - min(times) if times else None


def writable(root: Path) -> None:
    """Raise a StateFault unless ``root``'s claims directory, or the nearest parent that will
    hold it once the first claim creates it, is a directory we may write in (blocking)."""
    claims = root / "schedule" / "claims"
    for path in (claims, claims.parent, root, root.parent):
        try:
            info = os.stat(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StateFault(f"the state directory {path} is unusable: {describe(exc)}") from None
        if stat.S_ISDIR(info.st_mode) and os.access(path, os.W_OK | os.X_OK):
            return
        raise StateFault(f"the state directory {path} is not a writable directory")
    raise StateFault(f"the state directory {root} cannot be created")
