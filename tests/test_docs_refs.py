"""Every test the documentation names (``tests/<file>.py::<name>``, or without ``tests/``,
as docs/bad-input.md names the test that proves each row) is a test there: a renamed test
left a row pointing at nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = re.compile(r"(?:tests/)?\b(test_\w+\.py)::(\w+)")


def test_every_test_the_docs_name_is_there() -> None:
    named = {
        (match[1], match[2])
        for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for match in REFERENCE.finditer(page.read_text(encoding="utf-8"))
    }
    assert len(named) > 100  # (the pattern still finds the docs' references)
    missing = sorted(
        f"tests/{file}::{name}"
        for file, name in named
        if not (ROOT / "tests" / file).is_file()
        or not re.search(rf"def {name}\(", (ROOT / "tests" / file).read_text(encoding="utf-8"))
    )
    assert missing == []
