"""``python -m trio_routines``: see :mod:`trio_routines.cli`."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
