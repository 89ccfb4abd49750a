"""The README's embedding example runs as written (the front door stays true)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_embedding_example_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    (example,) = [b for b in blocks if "trio.run(main)" in b]
    script = tmp_path / "embed.py"
    script.write_text(example)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "'digest': datetime.datetime(" in done.stdout


@pytest.mark.slow
def test_the_embedding_example_passes_mypy_strict_against_the_installed_package(
    tmp_path: Path,
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    (example,) = [b for b in blocks if "trio.run(main)" in b]
    (tmp_path / "embed.py").write_text(example)
    # Run from elsewhere, so mypy sees the installed package (py.typed), not the source tree.
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "embed.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success" in done.stdout
