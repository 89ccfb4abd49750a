"""``python tests/stalled_disk.py MARKER [--wakeups] ARGS...``: ``python -m trio_routines
ARGS...`` whose state directory stalls its claim writes (with ``--wakeups``: its rewrites of
``wakeups.journal``, before they land) while the file MARKER exists, as a frozen file system
does (a write that does not return until the thaw), for tests/test_stop_bounds.py.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from trio_routines import cli
from trio_routines.stores.directory import claimfiles
from trio_routines.stores.directory.wakeupjournal import Journal


def main(marker: Path, argv: list[str]) -> int:
    if argv[:1] == ["--wakeups"]:
        append = Journal.append

        def stalled_append(self: Journal, fd: int, data: bytes) -> None:
            while marker.exists():
                time.sleep(0.05)
            append(self, fd, data)

        Journal.append = stalled_append  # type: ignore[method-assign]
        return cli.main(argv[1:])
    create_each = claimfiles.ClaimFiles.create_each

    def stalled(self: claimfiles.ClaimFiles, items: object) -> object:
        while marker.exists():  # frozen: nothing returns until the thaw
            time.sleep(0.05)
        return create_each(self, items)  # type: ignore[arg-type]

    claimfiles.ClaimFiles.create_each = stalled  # type: ignore[assignment,method-assign]
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2:]))
