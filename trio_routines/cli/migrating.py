"""``migrate``: bring a PostgreSQL store's tables to this version's schema, as its own step.

``serve`` migrates too when it starts; every other command leaves an existing schema alone
(see ``stores/postgres/schema.py``), so an upgrade happens when the operator says so. Then it
re-creates what the schema of this version has and the database lacks (an index, a column or
a table dropped by hand since: ``stores/postgres/repair.py``), naming each; what it cannot
re-create it names too, and exits 1.
"""

from __future__ import annotations

import argparse

from .output import CliError, open_state, print_line, state_arg, state_label


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
        gone: list[tuple[str, bool]] = await store.repair_schema()  # type: ignore[attr-defined]
    where = state_label(state)
    remade = [name for name, again in gone if again]
    if before == 0:
        print_line(f"{where}: tables created at schema version {now}")
    elif before != now:
        print_line(f"{where}: migrated from schema version {before} to {now}")
    elif not gone:  # (what was missing is said below)
        print_line(f"{where}: schema version {now}, nothing to migrate")
    if remade:
        print_line(
            f"{where}: re-created what schema version {now} has and the database lacked, "
            f"empty: {', '.join(remade)}"
        )
    lost = [name for name, again in gone if not again]
    if lost:
        raise CliError(
            f"{where}: missing from schema version {now}, and not re-created: {', '.join(lost)}"
            " — a column a table was created with cannot be; restore it by hand, then run "
            "migrate again"
        )
    return 0
