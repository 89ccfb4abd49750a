"""Names a package imports on first use (PEP 562): ``import trio_routines`` stays cheap, and a
command that needs little (the command line's ``history``) does not load the rest."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    package: str, names: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The package's ``__getattr__`` and ``__dir__`` for ``names`` (each public name, and the
    module, relative to ``package``, it comes from): a name is imported when first asked for,
    then kept in ``namespace`` (the package's globals)."""

    def getattr_(name: str) -> object:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *names})

    return getattr_, dir_
