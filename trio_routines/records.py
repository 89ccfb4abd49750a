"""The values every layer passes around: fires, claim results, wake-ups.

They are frozen attrs classes with validators for their invariants (aware UTC instants, safe
names). How they look on disk or on the wire is the converter's business (``converter.py``).
"""

from __future__ import annotations

import enum
from datetime import datetime

import attrs

from .cron.hashed import resolve_hashed, wakeup_seed
from .instants import truncate_ms
from .names import is_unicode
from .output import stored_output
from .slots import setters
from .text import error_text
from .usage import Usage, stored_usage


class Outcome(enum.StrEnum):
    """How a claimed slot ended. No outcome at all means claimed and never settled."""

    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"  # the session was busy: an overlap, not an error
    INTERRUPTED = "interrupted"  # recorded by the next boot, or by a stop past its grace


def _non_negative_ms(
    _instance: object, _attribute: attrs.Attribute[int | None], value: int | None
) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"ms must be a non-negative integer, got {value!r}")


def _error(value: str | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"error must be a string or None, got {type(value).__name__}")
    return error_text(value) or None


def _output(value: str | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"output must be a string or None, got {type(value).__name__}")
    return stored_output(value)


@attrs.frozen
class Fire:
    """One claimed slot of one routine, as read back from its claim.

    ``error`` is why it did not complete (the failure text, the timeout, the stop), stored as
    one visible line of at most 1 KiB (:func:`trio_routines.text.error_text`). ``output`` is
    the end of the turn's reply, kept only for a routine with ``output:`` (at most 64 KiB, as
    :func:`trio_routines.output.stored_output` makes it; shown escaped, never raw).
    """

    slot: datetime = attrs.field(converter=truncate_ms)
    fired_at: datetime = attrs.field(converter=truncate_ms)
    outcome: Outcome | None = None
    ms: int | None = attrs.field(default=None, validator=_non_negative_ms)
    error: str | None = attrs.field(default=None, converter=_error)
    #: The replica that claimed it (:mod:`trio_routines.replicas`); None for a claim made
    #: before replicas were recorded, or by a scheduler that names none.
    replica: str | None = None
    #: The end of the turn's reply (:mod:`trio_routines.output`); None when none was kept.
    output: str | None = attrs.field(default=None, converter=_output)
    #: What the turn spent, as its agent reported it (:mod:`trio_routines.usage`); None when
    #: it reported nothing.
    usage: Usage | None = attrs.field(default=None, converter=stored_usage)
    #: An outcome this version does not know, as stored (a newer version's word, or an edit
    #: by hand; at most 64 characters of it): the slot was settled by someone, so no
    #: reconcile writes ``interrupted`` over it. ``outcome`` is None then.
    unknown_outcome: str | None = None

    @property
    def is_open(self) -> bool:
        """Claimed and never settled: no outcome at all, known or not."""
        return self.outcome is None and self.unknown_outcome is None


_new = object.__new__
_FIRE = setters(
    Fire,
    "slot",
    "fired_at",
    "outcome",
    "ms",
    "error",
    "replica",
    "output",
    "usage",
    "unknown_outcome",
)


def fire_record(
    slot: datetime,
    fired_at: datetime,
    outcome: Outcome | None = None,
    ms: int | None = None,
    error: str | None = None,
    replica: str | None = None,
    output: str | None = None,
    usage: Usage | None = None,
) -> Fire:
    """``Fire(...)`` of the same values, for a store's claim and settle: the same converters,
    then the same validator, as the class runs them (all converters first), but each only on a
    value that is given (a fire's claim and settle, 10,000 at once, give few), and the fields
    set through their slots (:mod:`.slots`)."""
    slot = truncate_ms(slot)
    fired_at = truncate_ms(fired_at)
    if error is not None:
        error = _error(error)
    if output is not None:
        output = _output(output)
    if usage is not None:
        usage = stored_usage(usage)
    if ms is not None and not attrs.validators.get_disabled():
        _non_negative_ms(None, None, ms)  # type: ignore[arg-type]  # as attrs calls it
    fire: Fire = _new(Fire)
    (
        set_slot,
        set_fired_at,
        set_outcome,
        set_ms,
        set_error,
        set_replica,
        set_output,
        set_usage,
        set_unknown,
    ) = _FIRE
    set_slot(fire, slot)
    set_fired_at(fire, fired_at)
    set_outcome(fire, outcome)
    set_ms(fire, ms)
    set_error(fire, error)
    set_replica(fire, replica)
    set_output(fire, output)
    set_usage(fire, usage)
    set_unknown(fire, None)
    return fire


class ClaimStatus(enum.StrEnum):
    """How a slot was decided: taken (run it), duplicate or stale (do not), or paused.

    A store answers taken, duplicate or stale; paused is the scheduler's answer for a routine
    paused in the store (nothing was claimed).
    """

    TAKEN = "taken"  # this caller created the claim: run the turn
    DUPLICATE = "duplicate"  # the claim already exists: a redelivery, or another scheduler has it
    STALE = "stale"  # a later slot is already claimed: this instant never runs
    PAUSED = "paused"  # the scheduler's answer for a paused routine: nothing was claimed


@attrs.frozen
class ClaimResult:
    """What :meth:`Store.claim <trio_routines.Store.claim>` decided, and the routine's newest
    claim's slot name after it: the slot's own when taken or a duplicate, the newer one that
    made it stale."""

    status: ClaimStatus
    newest: str | None = None  # the newest claim's slot name (see above)
    #: Which of the holds asked for with the claim were taken, when the store takes them in
    #: the claim's own step (PostgreSQL: see ``Store.claim``); None otherwise.
    holds: tuple[bool, ...] | None = None

    @property
    def taken(self) -> bool:
        """Whether this caller took the slot (and so must run and settle it)."""
        return self.status is ClaimStatus.TAKEN


_CLAIM_RESULT = setters(ClaimResult, "status", "newest", "holds")


def claim_result(status: ClaimStatus, newest: str) -> ClaimResult:
    """``ClaimResult(status, newest)``, its fields set through their slots (:mod:`.slots`):
    every claim of a store answers one."""
    result: ClaimResult = _new(ClaimResult)
    set_status, set_newest, set_holds = _CLAIM_RESULT
    set_status(result, status)
    set_newest(result, newest)
    set_holds(result, None)
    return result


def _positive_attempts(_i: object, _a: attrs.Attribute[int | None], value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"attempts must be a non-negative integer, got {value!r}")


def _non_empty(_i: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{attribute.name} must be a non-empty string")


class OriginKind(enum.StrEnum):
    """Who asked for a wake-up: a turn (of a routine, or of an earlier wake-up), or a surface."""

    ROUTINE = "routine"  # a turn of a routine: a cron fire (with its slot) or an on-demand run
    WAKEUP = "wakeup"  # the turn of an earlier wake-up (its parent)
    HTTP = "http"  # POST /wakeups
    CLI = "cli"  # the command line's ``wake`` on a state store
    API = "api"  # the embedding API (``Scheduler.add_wakeup``, a store's) outside any turn
    #: A model's tool call outside any turn of ours (``call_tool`` in a host's own turn, a
    #: chat): limited as a turn's, and the start of a chain (depth 1), as a routine's turn is.
    MODEL = "model"


#: The deepest chain an origin records (PostgreSQL's ``integer``); deeper ones stay at it.
MAX_DEPTH = 2**31 - 1
_TURNS = (OriginKind.ROUTINE, OriginKind.WAKEUP, OriginKind.MODEL)


def _origin_text(_i: object, attribute: attrs.Attribute[str | None], value: str | None) -> None:
    if value is not None and (
        not isinstance(value, str) or not value or "\x00" in value or not is_unicode(value)
    ):
        raise ValueError(f"an origin's {attribute.name} must be storable non-empty text")


def _optional_utc(value: datetime | None) -> datetime | None:
    return None if value is None else truncate_ms(value)


@attrs.frozen(kw_only=True)
class Origin:
    """Who asked for a wake-up, recorded with it when it was added.

    * ``kind="routine"``: a turn of ``routine`` -- its cron fire for ``slot``, or an
      on-demand run (no slot); ``depth`` 1;
    * ``kind="wakeup"``: the turn of the wake-up ``parent``; ``depth`` is the parent's + 1
      (a parent whose origin is unknown counts as depth 0);
    * ``kind="model"``: a model's tool call outside any turn of ours
      (:func:`~trio_routines.tools.call_tool` in a host's own turn); ``depth`` 1;
    * ``kind="http"``, ``"cli"``, ``"api"``: ``POST /wakeups``, the command line, or the
      embedding API outside any turn; ``depth`` 0.

    ``depth`` is the length of the chain of turns behind the wake-up: a runaway agent's
    wake-ups, each set by the turn of the one before, show a growing depth.
    """

    kind: OriginKind = attrs.field(converter=OriginKind)
    depth: int = 0
    routine: str | None = attrs.field(default=None, validator=_origin_text)
    slot: datetime | None = attrs.field(default=None, converter=_optional_utc)
    parent: str | None = attrs.field(default=None, validator=_origin_text)

    def __attrs_post_init__(self) -> None:
        depth = self.depth
        if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= MAX_DEPTH:
            raise ValueError(f"an origin's depth must be 0 to {MAX_DEPTH}, got {depth!r}")
        if (self.kind is OriginKind.ROUTINE) != (self.routine is not None):
            raise ValueError("a routine is named exactly by a routine's origin")
        if self.slot is not None and self.kind is not OriginKind.ROUTINE:
            raise ValueError("only a routine's origin has a slot")
        if (self.kind is OriginKind.WAKEUP) != (self.parent is not None):
            raise ValueError("a parent wake-up is named exactly by a wake-up's origin")
        if self.kind in (OriginKind.ROUTINE, OriginKind.MODEL) and depth != 1:
            raise ValueError(f"a {self.kind.value}'s origin starts a chain: depth 1")
        if (self.kind in _TURNS) != (depth > 0):
            raise ValueError("a turn's origin has depth 1 or more, any other depth 0")


@attrs.frozen
class Wakeup:
    """A turn the agent scheduled for itself, aimed back at the session that set it.

    ``cron`` present means recurring; ``fire_at`` is then the next occurrence, advanced in
    place each time one is taken. ``attempts`` counts consecutive busy deferrals of a one-shot.
    ``origin`` is who asked for it (:class:`Origin`), kept across its occurrences and
    deferrals; None when unknown (stored before origins were recorded, or unreadable).
    ``until`` ends a recurring wake-up: no occurrence after it fires, and the entry is removed
    (:mod:`trio_routines.wakelimits`); None for a one-shot, or one stored before expiry.
    """

    id: str = attrs.field(validator=_non_empty)
    session: str = attrs.field(validator=_non_empty)
    prompt: str = attrs.field(validator=attrs.validators.instance_of(str))
    fire_at: datetime = attrs.field(converter=truncate_ms)
    cron: str | None = None
    tz: str | None = None
    attempts: int | None = attrs.field(default=None, validator=_positive_attempts)
    origin: Origin | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(Origin))
    )
    until: datetime | None = attrs.field(default=None, converter=_optional_utc)

    @property
    def recurring(self) -> bool:
        """Whether it repeats on a cron (else it is a one-shot)."""
        return self.cron is not None

    @property
    def resolved_cron(self) -> str | None:
        """``cron`` with its ``H`` fields resolved from the session and the id (stable)."""
        if self.cron is None:
            return None
        return resolve_hashed(self.cron, wakeup_seed(self.session, self.id))


class GapReason(enum.StrEnum):
    """Why a run of slots was passed over (never claimed): see :mod:`trio_routines.gaps`."""

    OVERLAP = "overlap"  # the routine's previous turn was still running
    DOWN = "down"  # no scheduler ran, and nothing was caught up (see history.GAP_WHY)
    PAUSED = "paused"  # the routine was paused
    CAUGHT_UP = "caught-up"  # none ran, or it woke late; the catch-up fired an earlier slot
    LATE = "late"  # none ran, or it woke late; older than the routine's catch-up window
    STORE = "store"  # the store failed or did not answer when the slot was to be claimed
    REMOVED = "removed"  # the routine was not loaded: removed, then added again by a reload


def _positive_count(_i: object, _a: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"a gap's count must be a positive integer, got {value!r}")


@attrs.frozen
class Gap:
    """Slots of one routine that were passed over: ``count`` of them, ``first`` to ``last``.

    ``estimated``: the count was extrapolated rather than counted slot by slot (a very long
    gap: :data:`trio_routines.gaps.COUNT_LIMIT`); ``first`` and ``last`` are always exact.
    """

    first: datetime = attrs.field(converter=truncate_ms)
    last: datetime = attrs.field(converter=truncate_ms)
    count: int = attrs.field(validator=_positive_count)
    reason: GapReason = attrs.field(converter=GapReason)
    estimated: bool = False

    def __attrs_post_init__(self) -> None:
        if self.last < self.first:
            raise ValueError("a gap's last slot must not come before its first")
        if self.count == 1 and self.last != self.first:
            raise ValueError("a gap of one slot starts and ends at that slot")
