"""Frozen records built on the hot path: every field set through its slot.

A frozen attrs class's generated ``__init__`` sets each field with ``object.__setattr__``
by name, a lookup and a call per field: at 10,000 fires at once, the records each fire makes
(its claim's answer, its context, its turn's and its slot's results) were microseconds of
every fire. :func:`setters` hands out the slots' own setters instead, for the few builders
on that path: each runs the checks its class would run on the values it is given, or is
handed values that hold them by construction (see each builder); everything else builds
records through their classes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

Setter = Callable[[Any, Any], None]


def setters(cls: type, *names: str) -> tuple[Setter, ...]:
    """The setters of the slots ``names`` of the frozen slotted attrs class ``cls``, in that
    order, for an instance made with ``object.__new__(cls)``.

    ``names`` must be every field of ``cls``: a record built with them has no field unset.
    """
    fields = [field.name for field in attrs.fields(cls)]
    if sorted(names) != sorted(fields):
        raise TypeError(f"{cls.__name__} has the fields {fields}, not {list(names)}")
    return tuple(cls.__dict__[name].__set__ for name in names)
