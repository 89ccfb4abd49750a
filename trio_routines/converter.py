"""The one converter between records and their JSON shapes.

Shapes are those of the original scheduler's state directory, byte for byte:

* a claim file holds ``{"firedAt": ISO, "outcome"?: word, "ms"?: int, "error"?: text,
  "replica"?: id, "usage"?: usage, "output"?: text}`` in that key order (``error``, the failure
  reason, ``replica``, who claimed it, ``usage``, what the turn spent -- the stored shape of
  :mod:`trio_routines.usage` -- and ``output``, the end of the turn's reply, are ours: the
  original ignores unknown keys);
* a wake-up is ``{"id", "session", "prompt", "fireAt", "cron"?, "tz"?, "attempts"?,
  "origin"?}``, absent fields omitted: an entry of ``wakeups.json`` (an array of them, the
  layout the original and earlier versions wrote) and the ``wakeup`` of a line of
  ``wakeups.journal``; ``origin`` (ours: the original passes
  over keys it does not know and keeps them) is ``{"kind", "depth", "routine"?, "slot"?,
  "parent"?}``, read leniently: a malformed one reads as unknown and never costs the entry;
* history (CLI ``--json`` and HTTP) is ``[{"slot", "firedAt", "outcome"?, "ms"?, "error"?,
  "replica"?, "output"?, "usage"?, "unknownOutcome"?, "running"?}]`` (``unknownOutcome``: a
  stored outcome this version does not know, ``outcome`` absent then), with the routine's
  gaps among the claims in slot order, each ``{"gap": {"from", "to", "count", "reason",
  "estimated"?}}`` (ours: ``schedule/gaps/<routine>`` holds an array of the inner objects).

The converter is strict: cattrs would happily turn ``1`` into ``"1"`` or accept a naive
datetime; here a wrong type is an error, so a malformed stored entry is dropped, not guessed.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from .instants import format_iso, parse_iso
from .output import stored_output
from .records import Fire, Gap, GapReason, Origin, OriginKind, Outcome, Wakeup
from .text import error_text
from .usage import Usage, usage_from_json, usage_to_json

converter = cattrs.Converter(forbid_extra_keys=False)


def _strict_str(value: Any, _type: type) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _strict_int(value: Any, _type: type) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return value


def _strict_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {type(value).__name__}")
    return value


def _instant(value: Any, _type: type) -> datetime:
    parsed = parse_iso(value) if isinstance(value, str) else None
    if parsed is None:
        raise ValueError(f"expected an ISO instant with a zone, got {value!r}")
    return parsed


converter.register_structure_hook(str, _strict_str)
converter.register_structure_hook(int, _strict_int)
converter.register_structure_hook(datetime, _instant)
converter.register_unstructure_hook(datetime, format_iso)
converter.register_unstructure_hook(Outcome, lambda o: o.value)
converter.register_unstructure_hook(GapReason, lambda r: r.value)
converter.register_structure_hook(bool, lambda v, _t: _strict_bool(v))

converter.register_unstructure_hook(Usage, usage_to_json)
converter.register_structure_hook(Usage, lambda value, _t: usage_from_json(value))
converter.register_unstructure_hook(OriginKind, lambda k: k.value)
converter.register_structure_hook(OriginKind, lambda value, _t: OriginKind(_strict_str(value, str)))
converter.register_unstructure_hook(
    Origin,
    make_dict_unstructure_fn(
        Origin, converter, _cattrs_omit_if_default=True, depth=override(omit_if_default=False)
    ),
)
converter.register_structure_hook(Origin, make_dict_structure_fn(Origin, converter))
converter.register_unstructure_hook(
    Wakeup,
    make_dict_unstructure_fn(
        Wakeup,
        converter,
        _cattrs_omit_if_default=True,
        fire_at=override(rename="fireAt", omit_if_default=False),
    ),
)
# The origin and the until are read apart (``wakeup_from_json``): a bad one must not cost
# the entry.
converter.register_structure_hook(
    Wakeup,
    make_dict_structure_fn(
        Wakeup,
        converter,
        fire_at=override(rename="fireAt"),
        origin=override(omit=True),
        until=override(omit=True),
    ),
)
converter.register_unstructure_hook(
    Fire,
    make_dict_unstructure_fn(
        Fire,
        converter,
        _cattrs_omit_if_default=True,
        fired_at=override(rename="firedAt"),
        unknown_outcome=override(rename="unknownOutcome"),
    ),
)


def dumps(value: Any) -> str:
    """Compact JSON, no trailing newline, non-ASCII kept as is (as the original writes it)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class DuplicateKey(ValueError):
    """A JSON object from outside names a key twice (see :func:`loads_request`)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _one_of_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    made = dict(pairs)
    if len(made) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return made


def loads_request(text: str) -> Any:
    """Parse JSON that a request carries: :func:`loads`, and an object naming a key twice, at
    any depth, is a :class:`DuplicateKey`. A parser keeps the last, another reader (a proxy,
    a log, an audit) may take the first: the two would act on different requests."""
    try:
        return json.loads(text, object_pairs_hook=_one_of_each)
    except RecursionError:
        raise ValueError("JSON nested too deeply to parse") from None


def loads(text: str) -> Any:
    """Parse stored JSON; nesting too deep for the parser is a ValueError like other damage.

    Python's parser raises ``RecursionError`` a little under 1,000 levels deep (``[`` × 100,000
    is a few bytes of hostile state): callers that treat ValueError as "corrupt, set it aside"
    must see it as exactly that, never as a crash of the loop that read it.

    An integer longer than Python converts (4,300 digits, or the host's own limit) is valid
    JSON that ``json.loads`` refuses whole: such a document is read again with every such
    integer taken as an infinite float, which each field's check then drops as a bad value.
    A claim whose usage was edited to a 5,000-digit count keeps its outcome; read as damage,
    the next boot settled it again as interrupted.
    """
    try:
        try:
            return json.loads(text)
        except ValueError:  # damage, or an integer past the conversion limit: look again
            return json.loads(text, parse_int=_stored_int)
    except RecursionError:
        raise ValueError("JSON nested too deeply to parse") from None


def _stored_int(digits: str) -> int | float:
    """A JSON integer; one past what Python converts as an infinite float of its sign."""
    try:
        return int(digits)
    except ValueError:
        return -math.inf if digits.startswith("-") else math.inf


def wakeup_to_json(wakeup: Wakeup) -> dict[str, Any]:
    result: dict[str, Any] = converter.unstructure(wakeup)
    return result


def wakeup_from_json(raw: Any) -> Wakeup:
    """Build a wake-up from one stored entry; raises ValueError/TypeError when malformed."""
    if not isinstance(raw, dict):
        raise TypeError("a wake-up entry must be an object")
    try:
        wakeup = converter.structure(raw, Wakeup)
    except cattrs.BaseValidationError as exc:
        causes = [str(e) for e in exc.exceptions] or [str(exc)]
        raise ValueError("; ".join(causes)) from None
    origin = origin_from_json(raw.get("origin"))
    # A recurring wake-up's end; one unreadable reads as none (the entry is kept, as it is
    # kept by a reader that does not know ``until``).
    until = parse_iso(raw["until"]) if isinstance(raw.get("until"), str) else None
    if origin is None and until is None:
        return wakeup
    return attrs.evolve(wakeup, origin=origin or wakeup.origin, until=until)


def origin_from_json(raw: Any) -> Origin | None:
    """An origin from its stored shape; None when absent or malformed (read as unknown: who
    asked is shown, never trusted to keep a wake-up, so damage there is passed over)."""
    if not isinstance(raw, dict):
        return None
    try:
        origin: Origin = converter.structure(raw, Origin)
    except (cattrs.BaseValidationError, ValueError, TypeError, AttributeError):
        return None
    return origin


def origin_to_json(origin: Origin) -> dict[str, Any]:
    """``{"kind", "depth", "routine"?, "slot"?, "parent"?}``."""
    result: dict[str, Any] = converter.unstructure(origin)
    return result


def fire_to_json(fire: Fire) -> dict[str, Any]:
    """History shape: ``{slot, firedAt, outcome?, ms?, error?, replica?, output?, usage?,
    unknownOutcome?}``."""
    result: dict[str, Any] = converter.unstructure(fire)
    return result


def history_json(fire: Fire, running: bool = False) -> dict[str, Any]:
    """A history entry: :func:`fire_to_json`, and ``"running": true`` for an open claim whose
    replica holds it now (an open claim without it is dead: interrupted, or never reported)."""
    entry = fire_to_json(fire)
    if running:
        entry["running"] = True
    return entry


@functools.lru_cache(maxsize=64)  # a process names one replica, or a few in tests
def _replica_field(replica: str) -> str:
    return ',"replica":' + dumps(replica)


def claim_text(
    fired_at: datetime,
    outcome: Outcome | None = None,
    ms: int | None = None,
    error: str | None = None,
    replica: str | None = None,
    output: str | None = None,
    usage: Usage | None = None,
) -> str:
    """The content of a claim file, keys in the order the original writes them, then ours."""
    if outcome is None:
        # A claim as it is taken (every fire writes one): the text :func:`dumps` makes of its
        # two fields, without the record. A stamp holds no character JSON escapes.
        tail = "" if replica is None else _replica_field(replica)
        return '{"firedAt":"' + format_iso(fired_at) + '"' + tail + "}"
    record: dict[str, Any] = {"firedAt": format_iso(fired_at), "outcome": outcome.value}
    if ms is not None:
        record["ms"] = ms
    if error:
        record["error"] = error_text(error)
    if replica is not None:
        record["replica"] = replica
    if usage is not None:
        record["usage"] = usage_to_json(usage)
    if output:
        record["output"] = stored_output(output)
    return dumps(record)


converter.register_unstructure_hook(
    Gap,
    make_dict_unstructure_fn(
        Gap,
        converter,
        _cattrs_omit_if_default=True,
        first=override(rename="from", omit_if_default=False),
        last=override(rename="to", omit_if_default=False),
    ),
)
converter.register_structure_hook(
    Gap,
    make_dict_structure_fn(
        Gap, converter, first=override(rename="from"), last=override(rename="to")
    ),
)


def gap_to_json(gap: Gap) -> dict[str, Any]:
    """``{"from", "to", "count", "reason", "estimated"?}``: how a gap is stored."""
    result: dict[str, Any] = converter.unstructure(gap)
    return result


def gap_from_json(raw: Any) -> Gap:
    """A gap from its stored shape; ValueError/TypeError when malformed."""
    if not isinstance(raw, dict):
        raise TypeError("a gap must be an object")
    try:
        return converter.structure(raw, Gap)
    except cattrs.BaseValidationError as exc:
        causes = [str(e) for e in exc.exceptions] or [str(exc)]
        raise ValueError("; ".join(causes)) from None


def history_to_json(
    entries: Sequence[Fire | Gap], running: Collection[datetime] = ()
) -> list[dict[str, Any]]:
    """History shape: claims as :func:`history_json` (``running``: the slots whose open claim a
    live replica holds), gaps as ``{"gap": gap_to_json(gap)}``."""
    return [
        {"gap": gap_to_json(entry)}
        if isinstance(entry, Gap)
        else history_json(entry, entry.slot in running)
        for entry in entries
    ]


converter.register_structure_hook(Outcome, lambda value, _t: Outcome(_strict_str(value, str)))
converter.register_structure_hook(
    Fire,
    make_dict_structure_fn(
        Fire,
        converter,
        fired_at=override(rename="firedAt"),
        unknown_outcome=override(rename="unknownOutcome"),
    ),
)


def history_from_json(raw: Any) -> tuple[list[Fire], list[Gap], set[datetime]]:
    """The inverse of :func:`history_to_json` (a server's answer to ``GET …/history``): the
    fires and the gaps, each oldest first, and the slots marked running. ValueError when
    anything in it is malformed."""
    if not isinstance(raw, list):
        raise ValueError("a history must be an array")
    fires: list[Fire] = []
    gaps: list[Gap] = []
    running: set[datetime] = set()
    for entry in raw:
        if not isinstance(entry, dict):
            raise ValueError("a history entry must be an object")
        if "gap" in entry:
            try:
                gaps.append(gap_from_json(entry["gap"]))
            except TypeError as exc:  # not an object: as malformed as the rest
                raise ValueError(str(exc)) from None
            continue
        try:
            fire = converter.structure(entry, Fire)
        except (cattrs.BaseValidationError, TypeError, ValueError) as exc:
            raise ValueError(f"a malformed fire in the history: {exc}") from None
        fires.append(fire)
        if entry.get("running") is True:
            running.add(fire.slot)
    return fires, gaps, running
