"""Write docs/status-page.png: the browser test's page, with the state shown as ``.state``.

``python scripts/status_page.py`` runs ``tests/test_page_browser.py``'s flow (Debian's
``chromium`` and ``chromium-driver`` needed) in a scratch directory whose ``serve`` is given
the relative ``--state .state``, so the picture shows no temporary path, then copies the
screenshot into ``docs/``. The test alone (``TRIO_ROUTINES_SCREENSHOT=<path>``) shows its
own temporary directory.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import procs  # noqa: E402
import test_page_browser  # noqa: E402


class RelativeState(procs.Env):
    """A scratch project whose ``serve`` names its state directory ``.state``."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.state = root / ".state"  # seeded through this absolute path

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "trio_routines", *args, "--state", ".state"]


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        env = RelativeState(Path(scratch))
        shot = Path(scratch) / "status-page.png"
        os.environ["TRIO_ROUTINES_SCREENSHOT"] = str(shot)
        patch = pytest.MonkeyPatch()
        try:
            test_page_browser.test_the_status_page_in_a_real_browser(env, patch)
        finally:
            patch.undo()
            for proc in env.procs:
                if proc.poll() is None:
                    proc.kill()
        shutil.copyfile(shot, ROOT / "docs" / "status-page.png")


if __name__ == "__main__":
    main()
