"""Why a turn runs, for agents that want to know: :func:`current_fire`.

An agent is asked ``invoke(session, text)`` and nothing more; why it runs is not part of that
protocol. The runtime sets a :class:`FireContext` around every turn it starts instead -- a cron
fire, a wake-up, an on-demand run -- and an agent that cares reads it with
:func:`current_fire` (the ``cmd:`` agent exports it as environment variables, the HTTP agent
puts it in the request body). A context variable follows the task that iterates the agent's
events, so it needs no plumbing through the layers in between, and concurrent turns in sibling
tasks never see each other's.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from contextvars import ContextVar, Token
from datetime import datetime
from typing import Any, Literal

import attrs

from .instants import slot_name
from .records import Origin
from .slots import setters

__all__ = ["FireContext", "current_fire", "firing"]

FireKind = Literal["routine", "wakeup", "run"]
_KINDS = ("routine", "wakeup", "run")


def _check(instance: FireContext, attribute: Any, value: Any) -> None:
    kind = instance.kind
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {', '.join(_KINDS)}, not {kind!r}")
    if (kind == "routine") != (instance.slot is not None):
        raise ValueError("a slot is given exactly for a routine's cron fire")
    if (kind == "wakeup") != (instance.wakeup is not None):
        raise ValueError("a wake-up id is given exactly for a wake-up's turn")
    if kind in ("routine", "run") and instance.routine is None:
        raise ValueError(f"a {kind} turn names its routine")
    if instance.slot is not None and instance.slot.utcoffset() is None:
        raise ValueError("the slot must be an aware datetime")
    if instance.origin is not None and kind != "wakeup":
        raise ValueError("an origin is given only for a wake-up's turn")


@attrs.frozen
class FireContext:
    """Why the turn in progress runs; what :func:`current_fire` returns inside a turn.

    * ``kind="routine"``: a cron fire of ``routine`` for ``slot`` (an aware UTC datetime, the
      claimed instant on the routine's grid, never the moment it ran);
    * ``kind="wakeup"``: a wake-up the agent set, whose id is ``wakeup``;
    * ``kind="run"``: an on-demand run of ``routine`` (``run`` on the command line,
      ``POST /run``): no slot, nothing claimed.

    ``session`` is the session the turn runs in, the same one ``invoke`` is given;
    ``replica`` the id of the scheduler running it. For a wake-up's turn, ``origin`` is who
    asked for that wake-up (:class:`~trio_routines.Origin`: a routine's turn, an earlier
    wake-up's, ``POST /wakeups``, the command line or the embedding API; None when unknown),
    and :attr:`depth` its place in a chain of turns that woke each other.
    """

    kind: FireKind
    session: str
    routine: str | None = None
    slot: datetime | None = None
    wakeup: str | None = attrs.field(default=None, validator=_check)
    #: The replica running the turn (:mod:`trio_routines.replicas`), when a scheduler runs it.
    replica: str | None = None
    #: Who asked for the wake-up this turn runs (a wake-up's turn only; None: unknown).
    origin: Origin | None = None

    @property
    def depth(self) -> int:
        """The chain depth of the wake-up this turn runs (its origin's ``depth``); 0 for any
        other turn, and for a wake-up whose origin is unknown. A wake-up added during this
        turn gets ``depth + 1``."""
        return self.origin.depth if self.origin is not None else 0

    @property
    def idempotency_key(self) -> str | None:
        """``<routine>/<slot name>`` for a cron fire, else ``None``.

        The slot name is the claim's own name (``2026-07-07T10-00-00-000Z``), so every replica
        and every restart that fires this slot computes the very same key. The key is a valid
        HTTP header value whatever the name: the name's UTF-8 is percent-encoded except for
        visible ASCII other than ``%`` (``café`` is ``caf%C3%A9``, ``my report`` is
        ``my%20report``), so decoding it gives the name back and two names never share a key.
        """
        if self.kind != "routine" or self.slot is None:
            return None
        assert self.routine is not None
        return f"{key_part(self.routine)}/{slot_name(self.slot)}"


def key_part(name: str) -> str:
    """``name`` as an idempotency key carries it: see :attr:`FireContext.idempotency_key`."""
    return "".join(
        char
        if "!" <= char <= "~" and char != "%"
        else "".join(f"%{b:02X}" for b in char.encode("utf-8", "surrogatepass"))
        for char in name
    )


_new = object.__new__
_CONTEXT = setters(FireContext, "kind", "session", "routine", "slot", "wakeup", "replica", "origin")


def cron_context(session: str, routine: str, slot: datetime, replica: str | None) -> FireContext:
    """A cron fire's context, built without :class:`FireContext`'s checks: every fire builds
    one, from values that hold them by construction (the routine's name and session were
    checked when it was loaded; the slot is an aware instant of its grid). Its fields are
    set through their slots (:mod:`.slots`)."""
    context: FireContext = _new(FireContext)
    set_kind, set_session, set_routine, set_slot, set_wakeup, set_replica, set_origin = _CONTEXT
    set_kind(context, "routine")
    set_session(context, session)
    set_routine(context, routine)
    set_slot(context, slot)
    set_wakeup(context, None)
    set_replica(context, replica)
    set_origin(context, None)
    return context


_current: ContextVar[FireContext | None] = ContextVar("trio_routines_current_fire", default=None)


def current_fire() -> FireContext | None:
    """Why the turn running in this task runs, or ``None`` outside a turn started by us."""
    return _current.get()


def firing(context: FireContext) -> AbstractContextManager[None]:
    """Make ``context`` what :func:`current_fire` returns in this task for the block."""
    return _Firing(context)


class _Firing:
    # A class rather than a generator: every fire enters one (see ``scheduler/state.py``).
    __slots__ = ("_context", "_token")

    def __init__(self, context: FireContext) -> None:
        self._context = context
        self._token: Token[FireContext | None] | None = None

    def __enter__(self) -> None:
        self._token = _current.set(self._context)

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _current.reset(self._token)
            self._token = None
