"""``migrate``: bring a PostgreSQL store's tables to this version's schema, as its own step.

``serve`` migrates too when it starts; every other command leaves an existing schema alone
(see ``stores/postgres/schema.py``), so an upgrade happens when the operator says so.
"""

from __future__ import annotations

import argparse

from .output import open_state, print_line, state_arg, state_label


async def cmd_migrate(args: argparse.Namespace) -> int:
    state = state_arg(args)
    async with open_state(state, migrate="always") as store:
        versions = getattr(store, "schema_versions", None)
        if versions is None:
            print_line(
                f"{state_label(state)}: a state directory has no schema to migrate — "
                "its files are read as they are found"
            )
            return 0
        before, now = await versions()
    where = state_label(state)
    if before == now:
        print_line(f"{where}: schema version {now}, nothing to migrate")
    elif before == 0:
        print_line(f"{where}: tables created at schema version {now}")
    else:
        print_line(f"{where}: migrated from schema version {before} to {now}")
    return 0
