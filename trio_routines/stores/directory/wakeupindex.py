"""The pending wake-ups of a state directory, held in memory and changed by journal entries.

Each process keeps one :class:`WakeupIndex` per store and brings it up to date from
``wakeups.journal`` (wakeupjournal.py). The index answers what the rules of
:mod:`trio_routines.wakeups` ask about, without a pass over every entry:

* **stored order** is an order number (``n``) each entry gets when it is added and keeps when
  it is changed in place (a recurring entry advanced); the entries are held in that order;
* **by session**: a session's entries, for the per-session cap (:func:`plan_add`,
  :func:`plan_defer` are handed only the session's entries, as PostgreSQL hands them);
* **"anything due?"**: a heap on ``fire_at``. Entries found due move to a second heap on the
  order number, whose top is the first due entry in stored order (the one a take takes:
  first in order among those due, not the earliest ``fire_at``). Both heaps drop stale items
  lazily. A take asked with a ``now`` earlier than one asked before (clocks can step back)
  is answered by a pass in order instead, which is rare and still right.

The journal's entries are ``add`` (a new entry, with its order number), ``set`` (an entry
changed in place) and ``del``. An entry that does not fit what the index holds (an ``add`` of an
id already there, a ``set`` or ``del`` of one that is not) is damage: :meth:`apply` raises
``ValueError`` and changes nothing. A well-formed ``add`` or ``set`` of a wake-up this version
cannot use (a zone this machine does not know, a cron or a field a newer version wrote) is
no damage: it is kept as written (:meth:`apply` says why), never taken, listed or counted
here, written again into every new generation in its place, and removed by its id. So a
replica never loses an entry another one wrote, as PostgreSQL keeps such a row. Text no
add makes (a NUL, a lone surrogate, a field too long) is damage still. :meth:`inverse` gives
the entries that put back what a change did, for a writer whose caller gave up before the
change landed.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from ...converter import wakeup_from_json, wakeup_to_json
from ...records import Wakeup
from ...wakelimits import ROOM_FIELDS, text_bytes
from ...wakeups import check_storable, check_stored_text, stored_cron_problem

Op = dict[str, Any]


def add_op(wakeup: Wakeup, n: int) -> Op:
    return {"op": "add", "n": n, "wakeup": wakeup_to_json(wakeup)}


def set_op(wakeup: Wakeup) -> Op:
    return {"op": "set", "wakeup": wakeup_to_json(wakeup)}


def del_op(wakeup_id: str) -> Op:
    return {"op": "del", "id": wakeup_id}


class WakeupIndex:
    """Pending wake-ups in stored order, by id, by session and by ``fire_at``."""

    def __init__(self) -> None:
        self._entries: dict[str, Wakeup] = {}  # by id, in stored order
        self._order: dict[str, int] = {}  # id -> order number
        self._sessions: dict[str, dict[str, None]] = {}  # session -> its ids, in stored order
        self._times: list[tuple[datetime, int, str]] = []  # (fire_at, n, id), stale items too
        self._due: list[tuple[int, str]] = []  # (n, id) found due up to _mark
        self._mark: datetime | None = None
        self.next_n = 1
        self._text = 0  # the bytes (UTF-8) of the pending entries' text (text_bytes), in all
        #: Entries this version cannot use, as written: id -> (order number, the wake-up).
        self._kept: dict[str, tuple[int, dict[str, Any]]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Wakeup]:
        return iter(self._entries.values())

    def get(self, wakeup_id: str) -> Wakeup | None:
        return self._entries.get(wakeup_id)

    def adds_of(self, wakeups: Iterable[Wakeup]) -> list[Op]:
        """The changes that add ``wakeups`` after the pending ones: each id once, none that is
        pending already (taken over before a crash kept the old file from being moved aside)."""
        ops: list[Op] = []
        taken: set[str] = set()
        for wakeup in wakeups:
            if wakeup.id in self._entries or wakeup.id in self._kept or wakeup.id in taken:
                continue
            taken.add(wakeup.id)
            ops.append(add_op(wakeup, self.next_n + len(ops)))
        return ops

    def order_of(self, wakeup_id: str) -> int:
        return self._order[wakeup_id]

    def of_session(self, session: str) -> list[Wakeup]:
        """The session's entries, in stored order."""
        ids = self._sessions.get(session, {})
        return [self._entries[i] for i in ids]

    # -- changes -----------------------------------------------------------------------------

    def apply(self, op: Any) -> str | None:
        """Make one journal entry's change; ``ValueError`` (nothing changed) when it is damage.
        Returns which wake-up it adds or sets is kept unused, and why, when one is (None:
        used)."""
        if not isinstance(op, dict):
            raise ValueError("a journal entry must be an object")
        kind = op.get("op")
        if kind == "del":
            wakeup_id = op.get("id")
            if isinstance(wakeup_id, str) and self._kept.pop(wakeup_id, None) is not None:
                return None
            if not isinstance(wakeup_id, str) or wakeup_id not in self._entries:
                raise ValueError(f"del of a wake-up not pending: {wakeup_id!r}")
            self._drop(wakeup_id)
            return None
        if kind not in ("add", "set"):
            raise ValueError(f"unknown journal entry {kind!r}")
        raw = op.get("wakeup")
        wakeup_id, session = _named(raw)
        try:
            wakeup = wakeup_from_json(raw)
        except (ValueError, TypeError) as exc:  # a shape this version does not know
            unusable: str | None = str(exc)
        else:
            check_stored_text(wakeup)  # damage: text no add makes
            unusable = stored_cron_problem(wakeup)
        n = self._add_order(op, wakeup_id) if kind == "add" else self._set_order(wakeup_id, session)
        if unusable is not None:  # well-formed, but not usable by this version
            if wakeup_id in self._entries:
                self._drop(wakeup_id)
            self._kept[wakeup_id] = (n, op["wakeup"])
            self.next_n = max(self.next_n, n + 1)
            return (
                f"wake-up {wakeup_id} of session {session!r} cannot be used by this version "
                f"({unusable})"
            )
        self._kept.pop(wakeup_id, None)
        if wakeup_id in self._entries:
            self._text += text_bytes(wakeup) - text_bytes(self._entries[wakeup_id])
            self._entries[wakeup_id] = wakeup  # in place: keeps its stored order
            self._push(wakeup, n)
        else:
            self.insert(wakeup, n)
        return None

    def _add_order(self, op: Op, wakeup_id: str) -> int:
        """The order number an ``add`` gives ``wakeup_id``; ``ValueError`` when it is damage."""
        n = op.get("n")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"add of wake-up {wakeup_id!r} without a valid order number")
        if wakeup_id in self._entries or wakeup_id in self._kept:
            raise ValueError(f"add of a wake-up already pending: {wakeup_id!r}")
        return n

    def _set_order(self, wakeup_id: str, session: str) -> int:
        """The order number a ``set`` of ``wakeup_id`` keeps; ``ValueError`` when it is damage
        (not pending, or moved to another session)."""
        if wakeup_id in self._kept:
            n, raw = self._kept[wakeup_id]
            before = raw["session"]
        elif wakeup_id in self._entries:
            n, before = self._order[wakeup_id], self._entries[wakeup_id].session
        else:
            raise ValueError(f"set of a wake-up not pending: {wakeup_id!r}")
        if before != session:
            raise ValueError(f"set of wake-up {wakeup_id!r} moves it to another session")
        return n

    @property
    def text(self) -> int:
        """The bytes (UTF-8) of every stored entry's text (its session, prompt, cron and time
        zone), those kept unused too, as PostgreSQL counts its rows (the store's room:
        :func:`~trio_routines.wakelimits.check_room`)."""
        kept = (raw.get(field) for _, raw in self._kept.values() for field in ROOM_FIELDS)
        return self._text + sum(
            len(text.encode("utf-8", "surrogatepass")) for text in kept if isinstance(text, str)
        )

    @property
    def kept(self) -> int:
        """How many entries are kept unused (each written into every new generation)."""
        return len(self._kept)

    def kept_session(self, wakeup_id: str) -> str | None:
        """The session of ``wakeup_id`` when it is kept unused here (None: it is not)."""
        found = self._kept.get(wakeup_id)
        return None if found is None else found[1]["session"]

    def stored(self) -> list[Op]:
        """Every entry as an ``add`` of a new generation, in stored order: the pending ones
        and those kept unused, as written."""
        ops = [add_op(wakeup, self._order[wakeup.id]) for wakeup in self._entries.values()]
        if self._kept:
            ops += [{"op": "add", "n": n, "wakeup": raw} for n, raw in self._kept.values()]
            ops.sort(key=lambda op: op["n"])
        return ops

    def insert(self, wakeup: Wakeup, n: int) -> None:
        """Hold ``wakeup`` (not pending yet) at order number ``n``."""
        late = n < self.next_n - 1 and bool(self._entries)
        self._entries[wakeup.id] = wakeup
        self._text += text_bytes(wakeup)
        self._order[wakeup.id] = n
        self._sessions.setdefault(wakeup.session, {})[wakeup.id] = None
        self.next_n = max(self.next_n, n + 1)
        if late:  # put back among the others (an undone take): rare, so a full re-sort
            self._entries = dict(sorted(self._entries.items(), key=lambda kv: self._order[kv[0]]))
            mine = self._sessions[wakeup.session]
            self._sessions[wakeup.session] = dict.fromkeys(
                sorted(mine, key=self._order.__getitem__)
            )
        self._push(wakeup, n)

    def _drop(self, wakeup_id: str) -> None:
        wakeup = self._entries.pop(wakeup_id)
        self._text -= text_bytes(wakeup)
        del self._order[wakeup_id]
        mine = self._sessions[wakeup.session]
        del mine[wakeup_id]
        if not mine:
            del self._sessions[wakeup.session]

    def _push(self, wakeup: Wakeup, n: int) -> None:
        if self._mark is not None and wakeup.fire_at <= self._mark:
            heapq.heappush(self._due, (n, wakeup.id))
        else:
            heapq.heappush(self._times, (wakeup.fire_at, n, wakeup.id))
        if len(self._times) > 2 * len(self._entries) + 1024:
            self._rebuild()

    def _rebuild(self) -> None:
        """Drop the heaps' stale items (they grow with every change otherwise)."""
        self._times, self._due = [], []
        for wakeup_id, wakeup in self._entries.items():
            n = self._order[wakeup_id]
            if self._mark is not None and wakeup.fire_at <= self._mark:
                self._due.append((n, wakeup_id))
            else:
                self._times.append((wakeup.fire_at, n, wakeup_id))
        heapq.heapify(self._times)
        heapq.heapify(self._due)

    # -- questions ---------------------------------------------------------------------------

    def _current(self, wakeup_id: str, n: int) -> Wakeup | None:
        wakeup = self._entries.get(wakeup_id)
        if wakeup is None or self._order[wakeup_id] != n:
            return None
        return wakeup

    def first_due(self, now: datetime) -> Wakeup | None:
        """The first entry in stored order whose ``fire_at`` is not after ``now``."""
        if self._mark is not None and now < self._mark:
            # A clock gone back: what was found due is judged again, once (not every poll).
            self._mark = None
            self._rebuild()
        self._mark = now
        times = self._times
        while times and times[0][0] <= now:
            fire_at, n, wakeup_id = heapq.heappop(times)
            wakeup = self._current(wakeup_id, n)
            if wakeup is not None and wakeup.fire_at == fire_at:
                heapq.heappush(self._due, (n, wakeup_id))
        due = self._due
        while due:
            n, wakeup_id = due[0]
            wakeup = self._current(wakeup_id, n)
            if wakeup is not None and wakeup.fire_at <= now:
                return wakeup
            heapq.heappop(due)  # gone, or moved later (its later time is in _times)
        return None

    def due(self, now: datetime) -> list[Wakeup]:
        """Every entry whose ``fire_at`` is not after ``now``, each once, in stored order
        (usually a few: a take walks them past expired ones)."""
        if self.first_due(now) is None:
            return []
        found: dict[str, Wakeup] = {}  # an entry set again in place is in the heap twice
        for n, wakeup_id in sorted(self._due):
            wakeup = self._current(wakeup_id, n)
            if wakeup is not None and wakeup.fire_at <= now:
                found.setdefault(wakeup_id, wakeup)
        return list(found.values())

    def inverse(self, ops: list[Op]) -> list[Op]:
        """The changes that put back what ``ops`` change (applied after them)."""
        state: dict[str, tuple[Wakeup, int] | None] = {}
        undo: list[Op] = []
        for op in ops:
            if op["op"] == "del" and op["id"] in self._kept and op["id"] not in state:
                n, raw = self._kept[op["id"]]  # a kept entry removed: written back as it was
                undo.append({"op": "add", "n": n, "wakeup": raw})
                state[op["id"]] = None
                continue
            wakeup = None if op["op"] == "del" else wakeup_from_json(op["wakeup"])
            wakeup_id = op["id"] if wakeup is None else wakeup.id
            if wakeup_id not in state:
                held = self.get(wakeup_id)
                state[wakeup_id] = None if held is None else (held, self.order_of(wakeup_id))
            before = state[wakeup_id]
            if op["op"] == "add":
                assert wakeup is not None
                undo.append(del_op(wakeup_id))
                state[wakeup_id] = (wakeup, op["n"])
            elif op["op"] == "del":
                assert before is not None
                undo.append(add_op(*before))
                state[wakeup_id] = None
            else:
                assert before is not None
                assert wakeup is not None
                undo.append(set_op(before[0]))
                state[wakeup_id] = (wakeup, before[1])
        return undo[::-1]


def op_ids(ops: list[Op]) -> str:
    """The ids of the wake-ups ``ops`` change, for a message."""
    ids = {op["id"] if op["op"] == "del" else op["wakeup"]["id"] for op in ops}
    return ", ".join(sorted(ids))


def _named(raw: Any) -> tuple[str, str]:
    """The id and session of a journal entry's wake-up; ``ValueError`` when it names none
    (damage: an entry that cannot be removed by its id is not kept)."""
    if not isinstance(raw, dict):
        raise ValueError("a wake-up entry must be an object")
    wakeup_id, session = raw.get("id"), raw.get("session")
    if not isinstance(wakeup_id, str) or not wakeup_id or not isinstance(session, str):
        raise ValueError(f"a wake-up entry without an id and a session: {wakeup_id!r}")
    check_storable("id", wakeup_id)
    check_storable("session", session)
    return wakeup_id, session
