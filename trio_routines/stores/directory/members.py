"""The replicas of a state directory, the store's side: joining, whether open claims are
alive, the members, and the open claims a reconcile looks for.

The holds themselves are holds.py's, the bounded walk over the claims openscan.py's; this
part owns what the store keeps of them (this process's presence once joined, the walk), and
runs each blocking call in a worker thread under the store's capacity limiter, left to
itself when its caller is cancelled (abandon.py): a join given up closes what it opened, and
a walk given up is waited for by the next one (they share the walk's state).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import trio

from ...claims import parse_claim
from ...errors import StateFault
from ...instants import slot_name
from ...records import Fire
from ...replicas import ReplicaInfo, claim_key, replica_key, session_key
from ..abandon import run_abandoning
from ..safefile import Refused, describe, read_file
from .claimbatch import CLAIM_LIMIT
from .claimfiles import ClaimFiles
from .holds import DirectoryPresence, keys_alive, read_replicas
from .openscan import OpenScan

T = TypeVar("T")


class DirectoryMembers:
    """The replicas of the state directory at ``root`` (see :class:`.directory.DirectoryStore`)."""

    def __init__(
        self,
        root: Path,
        files: ClaimFiles,
        limiter: trio.CapacityLimiter,
        begun: dict[object, float] | None = None,
    ) -> None:
        """``begun``: the store's thread calls under way (its ``ready``)."""
        self.root = root
        self._begun = begun
        self._claims = root / "schedule" / "claims"
        self._limiter = limiter
        self._files = files
        self._open_scan = OpenScan(files)
        self._open_scanning = trio.Lock()  # one walk at a time (openscan.py)
        self._open_scanned: trio.Event | None = None  # set once the last walk's thread ended
        self._presence: DirectoryPresence | None = None  # this process's, once joined

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await run_abandoning(fn, *args, limiter=self._limiter, **kwargs)

    async def join(self, info: ReplicaInfo) -> DirectoryPresence:
        """Become a member of the store as ``info.id`` (see :mod:`trio_routines.replicas`)."""
        presence = DirectoryPresence(info, self.root, self._limiter, self._begun)
        try:
            # Given up (a stalled disk), the thread lets go of the holds it took: else this
            # replica would look alive, its id in use, until the process ends.
            await self._run(presence.open, late=lambda _: presence.close_sync())
        except OSError as exc:
            raise StateFault(f"could not join {self.root}: {describe(exc)}") from None
        self._presence = presence
        return presence

    async def claims_alive(self, claims: Sequence[tuple[str, datetime]]) -> list[bool]:
        """For each ``(routine, slot)``, whether it is an open claim whose replica (the one it
        names) is alive now, or one being made, whose own hold is held (holds.py)."""
        own = self._presence if self._presence is not None and self._presence.fds else None
        try:
            return await self._run(self._claims_alive, own, list(claims))
        except StateFault:
            raise  # holds.py's, which says what and where already
        except OSError as exc:
            raise StateFault(f"the holds of {self.root} are unreadable: {describe(exc)}") from None

    async def sessions_held(self, sessions: Sequence[str]) -> list[bool]:
        """For each session, whether some process holds its hold now (holds.py): a turn of it
        runs there. Our own holds are answered from memory."""
        own = self._presence if self._presence is not None and self._presence.fds else None
        keys = [session_key(session) for session in sessions]
        try:
            return await self._run(keys_alive, self.root, own, keys)
        except StateFault:
            raise
        except OSError as exc:
            raise StateFault(f"the holds of {self.root} are unreadable: {describe(exc)}") from None

    def _claims_alive(
        self, own: DirectoryPresence | None, claims: list[tuple[str, datetime]]
    ) -> list[bool]:
        names = [self._holder(routine, slot) for routine, slot in claims]
        alive = [False] * len(claims)
        # A claim that names no replica may be one an earlier version's replica is making
        # (its file made, then written, under a hold of the claim's own, which a reader that
        # is not a member sees): alive while that hold is held. Once it is free the claim is
        # read again, for its maker wrote it before letting go. (This version makes a claim
        # whole: it names its replica from the first, claimfiles.py.)
        unnamed = [i for i, name in enumerate(names) if name is None]
        if unnamed:
            making = keys_alive(self.root, own, [claim_key(*claims[i]) for i in unnamed])
            for i, held in zip(unnamed, making, strict=True):
                if held:
                    alive[i] = True
                else:
                    names[i] = self._holder(*claims[i])
        keys = sorted({replica_key(name) for name in names if name is not None})
        live = dict(zip(keys, keys_alive(self.root, own, keys), strict=True))
        return [
            made or (name is not None and live[replica_key(name)])
            for made, name in zip(alive, names, strict=True)
        ]

    def _holder(self, routine: str, slot: datetime) -> str | None:
        """The replica an open claim names; None when the slot has no open claim that names
        one (none at all, settled, unreadable, being made, or made before claims named their
        replica)."""
        name, where = slot_name(slot), self._files.claim_dir(routine)
        try:
            directory = self._files.open_claims(routine)
        except FileNotFoundError:
            return None
        try:
            raw = read_file(directory, name, where / name, CLAIM_LIMIT)
        except (FileNotFoundError, Refused):
            return None
        except OSError as exc:
            raise StateFault(f"a claim of {routine!r} is unreadable: {describe(exc)}") from None
        finally:
            os.close(directory)
        fire = parse_claim(name, raw.decode("utf-8", errors="replace"), str(where / name))
        return fire.replica if fire.is_open else None

    async def open_claims(self, routines: Sequence[str], budget: int) -> list[tuple[str, Fire]]:
        """Open claims of ``routines`` that name their replica, a bounded walk at a time:
        at most ``budget`` directories listed and claims read per call (openscan.py)."""
        async with self._open_scanning:
            if self._open_scanned is not None:
                await self._open_scanned.wait()  # a walk given up still runs: not side by side
            ended = self._open_scanned = trio.Event()
            try:
                return await self._run(self._open_scan.step, list(routines), budget, ended=ended)
            except OSError as exc:
                raise StateFault(
                    f"the open claims in {self._claims} are unreadable: {describe(exc)}"
                ) from None

    async def replicas(self) -> list[ReplicaInfo]:
        """Every member that joined (and was not forgotten), each marked alive or not."""
        try:
            return await self._run(read_replicas, self.root, self._presence)
        except StateFault:
            raise  # holds.py's, which says what and where already
        except OSError as exc:
            why = describe(exc)
            raise StateFault(f"the replicas of {self.root} are unreadable: {why}") from None
