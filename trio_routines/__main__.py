"""``python -m trio_routines``: see :mod:`trio_routines.cli`.

Ctrl-C before the command runs (while the command line's modules load, which can take
seconds on a loaded host) ends it quietly with status 130, as it does once it runs: no
traceback of an import cut short.
"""

from __future__ import annotations


def run() -> int:
    """The command line, as ``python -m trio_routines`` and the ``trio-routines`` script run it."""
    try:
        from .cli import main

        return main()
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(run())
