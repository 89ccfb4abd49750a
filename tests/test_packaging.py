"""What an installation provides: the console script, one version, the license, the metadata."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

import trio_routines

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).parent / "trio-routines"


def run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False
    )


@pytest.mark.slow
def test_the_console_script_runs_commands_like_python_m(tmp_path: Path) -> None:
    assert SCRIPT.exists(), "pip install -e . creates the trio-routines console script"
    by_script = run(SCRIPT, "--routines", ROOT / "examples" / "routines", "check")
    by_module = run(
        sys.executable, "-m", "trio_routines", "--routines", ROOT / "examples/routines", "check"
    )
    assert by_script.returncode == 0, by_script.stderr
    assert by_script.stdout == by_module.stdout
    assert "3 routine(s)" in by_script.stdout
    (tmp_path / "broken.md").write_text("---\ncron: not a cron\n---\nprompt\n")
    bad = run(SCRIPT, "--routines", tmp_path, "check")
    assert bad.returncode == 1
    assert "broken.md" in bad.stdout + bad.stderr


def test_one_version_everywhere() -> None:
    version = trio_routines.__version__
    assert importlib.metadata.version("trio-routines") == version
    for argv in ([SCRIPT, "--version"], [sys.executable, "-m", "trio_routines", "--version"]):
        done = run(*argv)
        assert done.returncode == 0
        assert done.stdout == f"trio-routines {version}\n"
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert not re.search(r"^version\s*=", pyproject, re.MULTILINE)  # dynamic, from __init__


def test_license_and_classifiers() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License")
    metadata = importlib.metadata.metadata("trio-routines")
    assert metadata["License-Expression"] == "MIT"
    classifiers = metadata.get_all("Classifier") or []
    assert "Framework :: Trio" in classifiers
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert any(c.startswith("Operating System :: ") for c in classifiers)
    assert "Typing :: Typed" in classifiers
    assert (ROOT / "trio_routines" / "py.typed").exists()


def test_ci_collects_the_embedding_examples_tests() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'testpaths = ["tests", "examples/embed"]' in pyproject
    assert (ROOT / "examples" / "embed" / "test_embedding_host.py").exists()
