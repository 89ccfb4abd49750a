"""``python -m trio_routines`` cut short by Ctrl-C before its command runs: status 130, no
traceback (the command line's imports take a while; a SIGINT in them printed one)."""

from __future__ import annotations

import importlib.abc
import runpy
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import pytest

import trio_routines.cli


class Interrupting(importlib.abc.MetaPathFinder):
    """Ctrl-C arriving while ``trio_routines.cli`` is imported."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> Any:
        if fullname == "trio_routines.cli":
            raise KeyboardInterrupt
        return None


def run_main() -> int:
    with pytest.raises(SystemExit) as exited:
        runpy.run_module("trio_routines", run_name="__main__", alter_sys=False)
    return int(exited.value.code)  # type: ignore[arg-type]


def test_ctrl_c_while_the_command_line_loads_ends_with_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delitem(sys.modules, "trio_routines.cli")
    monkeypatch.setattr(sys, "meta_path", [Interrupting(), *sys.meta_path])
    assert run_main() == 130
    assert capsys.readouterr().err == ""


def test_ctrl_c_before_the_command_runs_ends_with_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*_: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(trio_routines.cli, "main", interrupted)
    assert run_main() == 130
    assert capsys.readouterr().err == ""


def test_the_command_s_status_is_the_process_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trio_routines.cli, "main", lambda *_: 3)
    assert run_main() == 3
