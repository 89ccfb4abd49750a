"""How the state directory's writer process is started (process.py starts it): the command
line of an isolated interpreter, and the module path it is given so that it runs this
process's own code.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

#: The directory this process found trio_routines in: the child must import the same code.
PACKAGE_ROOT = Path(__file__).resolve().parents[4]
#: Where the child reads its module path (see :func:`child_path`): not a ``PYTHON*`` name,
#: which ``-I`` would ignore.
PATH_VARIABLE = "TRIO_ROUTINES_WRITER_PATH"
#: What the child runs: its module path set to the parent's, then child.py's ``main``.
BOOTSTRAP = (
    "import json, os, sys; "
    f"sys.path[:] = json.loads(os.environ.pop({PATH_VARIABLE!r})); "
    "from trio_routines.stores.directory.writer.child import main; "
    "main(sys.argv[1:])"
)


def command() -> list[str]:
    """How to start the child: this interpreter, isolated (``-I``: neither ``PYTHONPATH`` nor
    the working directory nor the user's site directory decides what it imports), given
    this process's own module path (:func:`child_path`). ``python -m`` with ``PYTHONPATH``
    let a ``trio_routines`` found in the working directory, or named by a ``PYTHONPATH`` this
    process ignored (``-E``, ``-I``), run in the child instead of the parent's own code.
    ``-I`` also drops ``PYTHONUTF8``: this process's UTF-8 mode is passed on as ``-X utf8``,
    and the child checks that it encodes file names as this process does (see child.py)."""
    utf8 = f"utf8={sys.flags.utf8_mode}"
    return [sys.executable, "-I", "-X", utf8, "-c", BOOTSTRAP]


def child_path(path: Sequence[str] | None = None, root: Path = PACKAGE_ROOT) -> list[str]:
    """The child's module path: this process's own (``path``, by default ``sys.path``), so
    that it imports what this process imported, in the same order -- the standard library
    before any site directory. Relative entries are left out: they name the working
    directory, which may hold something else now than when this process imported from it; so
    is anything but a string (a ``Path`` a host put there, which imports pass over). ``root``
    (the directory this process's ``trio_routines`` came from) keeps its place, once; it goes
    before the first entry holding another ``trio_routines`` if one comes before it, and
    last if the path does not name it (found through an import hook, say)."""
    given = sys.path if path is None else path
    others: list[str] = []
    named: int | None = None  # where the path names ``root``, among the other entries
    for entry in given:
        if not (isinstance(entry, str) and os.path.isabs(entry)):
            continue
        if os.path.realpath(entry) == str(root):
            named = len(others) if named is None else named
        else:
            others.append(entry)
    shadow = next((i for i, entry in enumerate(others) if _has_package(entry)), None)
    places = [place for place in (named, shadow) if place is not None]
    at = min(places) if places else len(others)
    return [*others[:at], str(root), *others[at:]]


def _has_package(entry: str) -> bool:
    return os.path.exists(os.path.join(entry, "trio_routines"))
