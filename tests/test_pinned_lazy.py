"""Pins of the package's names imported on first use (``trio_routines._lazy``) and of the
agent's events (``trio_routines.agent``): ``scripts/mutation.py lazy``."""

from __future__ import annotations

import importlib
import subprocess
import sys
from typing import Any

import pytest

import trio_routines
from trio_routines._lazy import lazy_names
from trio_routines.agent import SESSION_BUSY, Failed


def test_a_name_is_imported_from_its_module_on_first_use_then_kept() -> None:
    namespace: dict[str, Any] = {"kept": 1}
    getattr_, dir_ = lazy_names("trio_routines", {"Failed": ".agent", "dumps": "json"}, namespace)
    assert getattr_("Failed") is Failed
    assert namespace["Failed"] is Failed
    assert getattr_("dumps") is importlib.import_module("json").dumps
    assert dir_() == ["Failed", "dumps", "kept"]


def test_an_unknown_name_is_the_attribute_error_python_gives() -> None:
    namespace: dict[str, Any] = {}
    getattr_, dir_ = lazy_names("trio_routines", {"Failed": ".agent"}, namespace)
    with pytest.raises(AttributeError) as caught:
        getattr_("Nope")
    assert str(caught.value) == "module 'trio_routines' has no attribute 'Nope'"
    assert namespace == {}
    assert dir_() == ["Failed"]
    with pytest.raises(AttributeError) as real:
        trio_routines.Nope  # type: ignore[attr-defined]  # noqa: B018
    assert str(real.value) == "module 'trio_routines' has no attribute 'Nope'"


def test_importing_the_package_imports_neither_the_scheduler_nor_the_stores() -> None:
    probe = (
        "import sys, trio_routines; "
        "print(sorted(m for m in sys.modules if m.startswith('trio_routines.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "trio_routines.scheduler" not in out
    assert "trio_routines.stores" not in out


@pytest.mark.parametrize(
    ("code", "busy"), [(SESSION_BUSY, True), (None, False), ("session_busy ", False), ("x", False)]
)
def test_a_failure_is_busy_only_with_the_busy_code(code: str | None, busy: bool) -> None:
    assert Failed("why", code).busy is busy
