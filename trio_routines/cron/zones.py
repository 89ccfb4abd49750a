"""What an unknown time zone may have meant: the IANA names a mistyped one is closest to."""

from __future__ import annotations

import difflib
import functools
import zoneinfo

#: At most this many names are suggested.
SUGGESTED = 3


@functools.lru_cache(maxsize=1)
def _listing() -> tuple[str, ...]:
    """Every zone the installed zone data has (read once: a walk of its files; a listing
    that fails is not kept, and is tried again the next time)."""
    return tuple(sorted(zoneinfo.available_timezones()))


def _names() -> tuple[str, ...] | None:
    """:func:`_listing`, or None when the zone data cannot be listed now."""
    try:
        return _listing()
    except Exception:  # unreadable zone data (EMFILE, say): no suggestion, the refusal stands
        return None


def zone_suggestions(given: str) -> tuple[str, ...]:
    """The zones ``given`` most likely meant: the one it names in another case
    (``europe/berlin``), those whose last part it names (``Berlin``), or those spelt closest
    to it (``Europe/Berln``); none when nothing is close. Only on the way to a refusal."""
    names = _names()
    if not given or len(given) > 64 or not names:
        return ()
    return _closest(given, names)


@functools.lru_cache(maxsize=256)  # a directory of files mistyping one zone alike: once
def _closest(given: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """:func:`zone_suggestions` among ``names``."""
    folded = given.casefold()
    same = [name for name in names if name.casefold() == folded]
    if same:
        return tuple(same[:SUGGESTED])
    ending = [name for name in names if name.rsplit("/", 1)[-1].casefold() == folded]
    if ending:
        return tuple(ending[:SUGGESTED])
    by_fold = {name.casefold(): name for name in names}
    close = difflib.get_close_matches(folded, list(by_fold), n=SUGGESTED, cutoff=0.8)
    return tuple(by_fold[match] for match in close)


def unknown_zone(given: str, quoted: str) -> str:
    """The refusal of ``given`` (shown as ``quoted``), with what it may have meant."""
    meant = zone_suggestions(given)
    if _names() == ():  # no zone at all: the data is missing, not the name wrong
        return (
            f"unknown time zone {quoted}: this host has no time zone data (install the "
            "system's tzdata package, or pip install tzdata)"
        )
    if not meant:
        return f"unknown time zone {quoted}"
    return f"unknown time zone {quoted} — did you mean {' or '.join(meant)}?"
