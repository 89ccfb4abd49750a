"""Who asked for a wake-up: the origin an add records (:func:`asked_by`), and its line in a
listing (:func:`origin_line`)."""

from __future__ import annotations

from .context import FireContext
from .instants import format_iso
from .records import MAX_DEPTH, Origin, OriginKind


def asked_by(
    fire: FireContext | None, outside: OriginKind = OriginKind.API, *, model: bool = False
) -> Origin:
    """The origin of a wake-up added now: the turn in progress (``fire``, what
    :func:`~trio_routines.current_fire` returns), or, when no turn is, a ``model``'s tool
    call (depth 1: the host's turn it runs in is the chain's first) or ``outside`` (the
    surface asking). A turn's wake-up is one deeper in the chain than the turn's own wake-up."""
    if fire is None:
        return Origin(kind=OriginKind.MODEL, depth=1) if model else Origin(kind=outside)
    depth = min(fire.depth + 1, MAX_DEPTH)
    if fire.kind == "wakeup":
        return Origin(kind=OriginKind.WAKEUP, parent=fire.wakeup, depth=depth)
    return Origin(kind=OriginKind.ROUTINE, routine=fire.routine, slot=fire.slot, depth=1)


def origin_line(origin: Origin | None) -> str:
    """Who asked, for a listing: ``routine digest at 2026-07-07T09:00:00.000Z`` (``routine
    digest (run)`` for an on-demand run), ``wake-up <id> (depth 2)``, ``http``, ``cli``,
    ``api``, ``model``, or ``unknown``. Raw text: a surface escapes it as it escapes stored
    names."""
    if origin is None:
        return "unknown"
    if origin.kind is OriginKind.ROUTINE:
        when = f"at {format_iso(origin.slot)}" if origin.slot is not None else "(run)"
        return f"routine {origin.routine} {when}"
    if origin.kind is OriginKind.WAKEUP:
        return f"wake-up {origin.parent} (depth {origin.depth})"
    return origin.kind.value
