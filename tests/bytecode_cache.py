"""Compiled code is cached for the test run, even where the environment says not to write it.

Some machines set ``PYTHONDONTWRITEBYTECODE``. Then every test worker, and every command a test
starts as a process, compiles the package again from source, and pytest rewrites the asserts
of every test module -- and of the plugins installed as packages (hypothesis, anyio, xdist,
pytest-trio: about a second) -- again, on every run: a few seconds of each run of the fast
subset. Loaded as a plugin before those (``-p bytecode_cache`` in the pytest options), and
imported first by the conftest, this module turns the writing back on for this process and the
processes it starts, into a directory of its own under ``.pytest_cache`` (so the source tree
stays clean, as the environment asked). Python checks a cached file against its source's size
and time, so an edited file is compiled again. Under mutation testing (mutmut sets
``MUTANT_UNDER_TEST``), nothing changes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PREFIX = Path(__file__).resolve().parent.parent / ".pytest_cache" / "pycache"

if os.environ.get("PYTHONDONTWRITEBYTECODE") and "MUTANT_UNDER_TEST" not in os.environ:
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = str(PREFIX)
    sys.dont_write_bytecode = False
    sys.pycache_prefix = str(PREFIX)
