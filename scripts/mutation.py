"""Mutation testing, one module at a time (docs/mutation.md).

    .venv/bin/python scripts/mutation.py [MODULE ...]     # default: every module, in order

mutmut 3 reads its settings from ``[tool.mutmut]`` in the ``pyproject.toml`` of the directory it
runs in, and per mutant runs the selected tests that reached the mutated function. Selecting the
whole fast suite makes every mutant of a widely used function (``check_name``) run hundreds of
tests, so each module gets its own small selection: the script copies the tree into
``.mutation/<module>/``, rewrites that copy's ``[tool.mutmut]`` with the module's files and tests,
runs mutmut there and prints the score. Survivors can be read with ``mutmut show NAME`` from the
module's directory.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".mutation"

# The tests of the state directory's wake-up journal, for each of its three modules (the
# property test is `slow`: DESELECT leaves it out, as it does every slow test).
WAKEUP_JOURNAL_TESTS = [
    "tests/test_wakeup_index.py",
    "tests/test_pinned_wakeupindex.py",
    "tests/test_kept_wakeups.py",
    "tests/test_pinned_wakeupjournal.py",
    "tests/test_pinned_wakeuplog.py",
    "tests/test_pinned_wakeuplog_reads.py",
    "tests/test_wakeup_journal_properties.py",
    "tests/test_wakeup_takeover.py",
    "tests/test_wakeup_turns.py",
    "tests/test_pinned_wakeupfile.py",
    "tests/test_pinned_wakeupfile_writes.py",
    "tests/test_directory_store.py",
    "tests/test_store_contract.py",
    "tests/test_pinned_dirwakeups.py",
    "tests/test_hostile_state.py",  # a journal hard linked elsewhere, a line too long
]

# The log tests that run the command as a process of their own, which the copy cannot run.
LOGS_PROCESSES_LEFT_OUT = [
    "--deselect=tests/test_logs.py::"
    "test_a_fire_in_a_real_process_logs_its_fields_and_a_duplicate_only_at_debug",
    "--deselect=tests/test_logs.py::test_under_the_journal_the_command_line_writes_journal_lines",
]

# The scheduler package's tests: its own selection, and the fire path's with PostgreSQL's.
SCHEDULER_TESTS = [
    "tests/test_scheduler.py",
    "tests/test_scheduler_arguments.py",
    "tests/test_pinned_runtime.py",
    "tests/test_restarts.py",
    "tests/test_store_bounds.py",
    "tests/test_context.py",
    "tests/test_reload.py",
    "tests/test_pause.py",
    "tests/test_pinned_scheduler.py",
    "tests/test_pinned_scheduler_fire.py",
    "tests/test_pinned_scheduler_loops.py",
    "tests/test_pinned_scheduler_service.py",
    "tests/test_pinned_scheduler_boot.py",
    "tests/test_sleepers.py",
    "tests/test_paused_read.py",
    "tests/test_deadlines.py",
    "tests/test_gaps.py",  # what a loop records after a slot, and when it skips that
    "tests/test_gaps_armed.py",  # the slots a store did not answer, recorded later
    # The parts the package has grown since: the wake loop and its guardrails, the
    # budgets, the turn holds, the boot's open claims, the replicas' membership, the
    # stop's bounds, clock jumps, the outcome's reports (metrics, tracing, output).
    "tests/test_wakeups.py",
    "tests/test_wakeup_turns.py",
    "tests/test_wakeexpiry.py",
    "tests/test_wake_timeout.py",
    "tests/test_wakelimits.py",
    "tests/test_pinned_wakelimits.py",
    "tests/test_budgets.py",
    "tests/test_pinned_budgets.py",
    "tests/test_session_spent.py",
    "tests/test_turn_holds.py",
    "tests/test_open_claims.py",
    "tests/test_boot_reconcile.py",
    "tests/test_scheduler_replicas.py",
    "tests/test_interrupted_once.py",
    "tests/test_replicas_contract.py",
    "tests/test_stop_bounds.py",
    "tests/test_boot_stop.py",  # the stop's bound on store calls, and a host's calls after it
    "tests/test_clockskew.py",
    "tests/test_hashed_runtime.py",
    "tests/test_scheduler_output.py",
    "tests/test_usage_shown.py",
    "tests/test_metrics.py",
    "tests/test_tracing.py",
    "tests/test_crashloop.py",
    "tests/test_faults.py",
    "tests/test_pinned_spending.py",
    "tests/test_pinned_unanswered.py",
    "tests/test_pinned_wakecalls.py",
    "tests/test_pinned_scheduler_gaps.py",
    "tests/test_pinned_store_calls.py",
    "tests/test_pinned_member_watch.py",
    "tests/test_pinned_boot_lines.py",
    "tests/test_slots.py",
    # It reads docs/design.md, which the copy leaves out.
    "--deselect=tests/test_tracing.py::test_the_spans_are_named_in_the_docs",
    # The slowest (1.2 s of the selection's 5.7) kills no mutant the others leave
    # (measured: without it and the next slowest only `+= 1` -> `= 1` in the outcome
    # count survived, which that next one, a simulated day, killed; the day is slow
    # now, and ten simulated minutes of the same test kill it in the fast subset).
    "--deselect=tests/test_scheduler.py::test_routine_without_cron_is_never_armed",
]

# The PostgreSQL store's tests: its own, and every contract test run on it.
POSTGRES_TESTS = [
    "+postgres",
    "-kpostgres",
    "tests/test_postgres.py",
    "tests/test_postgres_newest.py",
    "tests/test_postgres_batches.py",
    "tests/test_postgres_stalls.py",
    "tests/test_postgres_upgrades.py",
    "tests/test_store_contract.py",
    "tests/test_store_contract_armed.py",
    "tests/test_store_contract_waketurns.py",
    "tests/test_store_ledger.py",
    "tests/test_store_usage.py",
    "tests/test_replicas_contract.py",
    "tests/test_wakeexpiry.py",
    "tests/test_open_claims.py",
    "tests/test_session_spent.py",
    "tests/test_pinned_stores.py",
    "tests/test_page.py",
    "tests/test_pinned_postgres_claims.py",
    "tests/test_pinned_postgres_wakeups.py",
    "tests/test_pinned_postgres_holds.py",
    "tests/test_pinned_postgres_store.py",
    "tests/test_pinned_postgres_conn.py",
]

# module -> (files mutmut may mutate, tests that judge its mutants). Small pure modules first.
# An entry of the tests starting with "-" is a pytest option (a cheaper Hypothesis profile).
# Only fast tests: no real processes, and no PostgreSQL (the store is selected by `-k`) unless
# the entry names "+postgres", whose runs need the server the suite uses (checked first).
MODULES: dict[str, tuple[list[str], list[str]]] = {
    "names": (["trio_routines/names.py"], ["tests/test_pinned_core.py", "tests/test_routines.py"]),
    "instants": (
        ["trio_routines/instants.py"],
        ["tests/test_instants.py", "tests/test_claims.py", "tests/test_pinned_core.py"],
    ),
    "claims": (
        ["trio_routines/claims.py"],
        [
            "tests/test_claims.py",
            "tests/test_pinned_core.py",
            "tests/test_store_contract.py",
            "tests/test_spares.py",
            "tests/test_store_usage.py",
        ],
    ),
    "sessions": (["trio_routines/sessions.py"], ["tests/test_pinned_core.py"]),
    "leftovers": (
        ["trio_routines/stores/directory/leftovers.py"],
        ["tests/test_claimfiles_leftovers.py"],
    ),
    "spares": (
        ["trio_routines/stores/directory/spares.py"],
        ["tests/test_spares.py", "tests/test_pinned_writerspares.py"],
    ),
    "turnholds": (
        ["trio_routines/scheduler/holds.py"],
        [
            "tests/test_turn_holds.py",
            "tests/test_directory_holds.py",
            "tests/test_pinned_history.py",
        ],
    ),
    "turns": (
        ["trio_routines/turns.py"],
        [
            "tests/test_pinned_core.py",
            "tests/test_pinned_runtime.py",
            "tests/test_scheduler.py",
            "tests/test_pinned_turn_fields.py",
            "tests/test_turns.py",
            "tests/test_slots.py",
            # A turn's usage: reported, added up, its bad fields warned of.
            "tests/test_usage.py",
            "tests/test_usage_shown.py",
        ],
    ),
    "wakeups": (
        ["trio_routines/wakeups.py", "trio_routines/wakeuptexts.py"],
        [
            "tests/test_wakeups.py",
            "tests/test_pinned_wakeups.py",
            "tests/test_store_contract.py",
            "tests/test_origin.py",
            "tests/test_wakeexpiry.py",
            "tests/test_pinned_wakecalls.py",
            "tests/test_wakeup_journal_properties.py",
        ],
    ),
    "cron": (
        ["trio_routines/cron.py", "trio_routines/cron/*"],
        [
            "tests/test_cron.py",
            "tests/test_cron_gaps.py",
            "tests/test_cron_hashed.py",
            "tests/test_cron_recent.py",
            "tests/test_pinned_cron.py",
            "tests/test_pinned_cron_fields.py",
            "--hypothesis-profile=mutation",
        ],
    ),
    "routines": (
        ["trio_routines/routines.py"],
        [
            "tests/test_routines.py",
            "tests/test_pinned_routines.py",
            # What the frontmatter's catchup, output and budget keys are read as.
            "tests/test_pinned_gaps.py",
            "tests/test_output.py",
            "tests/test_budgets.py",
            "tests/test_long_values.py",
            "--hypothesis-profile=mutation",
        ],
    ),
    "scheduler": (
        ["trio_routines/scheduler.py", "trio_routines/scheduler/*"],
        SCHEDULER_TESTS,
    ),
    # The parts the scheduler's selection reaches only through other surfaces, each with the
    # tests of those surfaces: the embedding API's wake-up calls and replicas (the HTTP API,
    # the agent's tools, `status`), what turns spend, and the slots a store did not answer.
    "wakecalls": (
        ["trio_routines/scheduler/wakecalls.py", "trio_routines/scheduler/membership.py"],
        [
            "tests/test_pinned_wakecalls.py",
            "tests/test_pinned_httpapi.py",
            "tests/test_http.py",
            "tests/test_tools.py",
            "tests/test_pinned_tools.py",
            "tests/test_http_tools.py",
            "tests/test_pinned_cli_status.py",
            "tests/test_replicas_contract.py",
            "tests/test_scheduler_replicas.py",
            "tests/test_open_claims.py",
            "tests/test_pinned_member_watch.py",
            "tests/test_wakeups.py",
            "tests/test_wakelimits.py",
            "tests/test_pinned_store_calls.py",  # the wake loop's calls (take, defer, count)
            "tests/test_pinned_scheduler_service.py",
            "--deselect=tests/test_http.py::test_arbitrary_requests_never_fail_the_server_nor_change_state_when_refused",
            # It loads examples/self_scheduling.py, which the copy does not hold.
            "--deselect=tests/test_tools.py::test_the_example_agent_schedules_and_cancels_through_the_tools",
            "--hypothesis-profile=mutation",
        ],
    ),
    "schedgaps": (
        ["trio_routines/scheduler/gaps.py"],
        [
            "tests/test_pinned_scheduler_gaps.py",
            "tests/test_pause.py",  # the paused slots' gaps, and what a late replica asks
            "tests/test_gaps.py",
            "tests/test_gaps_armed.py",
            "tests/test_pinned_scheduler_boot.py",
            # A caller's fire after a downtime, and the slots it passed over.
            "tests/test_scheduler.py::test_a_callers_fire_after_a_downtime_records_the_slots_it_passed_over",
            "tests/test_scheduler.py::test_a_callers_fire_counts_from_a_gap_newer_than_the_claim",
            "tests/test_scheduler.py::test_a_callers_fire_reads_the_passed_slots_as_its_routine_does",
            "tests/test_scheduler.py::test_a_callers_first_fire_of_a_routine_counts_from_when_it_was_first_armed",
            "tests/test_scheduler.py::test_a_callers_fire_whose_gaps_are_unreadable_fires_and_says_so",
            "tests/test_scheduler.py::test_a_callers_fire_records_what_it_passed_before_its_turn_less_a_slot_claimed_meanwhile",
            # The slots behind a hand fire's claim, recorded by the next boot.
            "tests/test_scheduler.py::test_a_boot_records_the_slots_a_hand_fire_came_after_as_no_claim_holds_them",
            "tests/test_scheduler.py::test_callers_that_fire_a_backlog_of_slots_late_record_no_gap_between_them",
            "tests/test_scheduler.py::test_a_boot_records_the_slots_behind_a_hand_fire_paused_before_a_resume",
            "tests/test_scheduler.py::test_the_slots_behind_a_hand_fire_unreadable_at_the_boot_are_said_so",
            "tests/test_scheduler.py::test_the_slots_behind_a_hand_fire_count_from_when_the_routine_was_first_armed",
            "tests/test_scheduler.py::test_a_pause_after_a_hand_fire_leaves_the_slots_behind_it_down",
            "tests/test_scheduler.py::test_a_replica_that_boots_during_anothers_catch_up_leaves_its_gap_to_it",
            "tests/test_scheduler.py::test_the_slots_behind_hand_fires_are_read_in_each_routines_zone_and_seed",
            "tests/test_scheduler.py::test_the_slots_behind_a_hand_fire_count_from_its_slot_when_first_armed_is_unknown",
            "tests/test_scheduler.py::test_the_slots_behind_a_hand_fire_whose_gaps_are_unreadable_are_said_so",
            "tests/test_scheduler.py::test_the_first_armed_read_behind_a_stamp_moves_no_routines_series",
            "--hypothesis-profile=mutation",
        ],
    ),
    "spending": (
        ["trio_routines/scheduler/spending.py"],
        ["tests/test_pinned_spending.py", "tests/test_budgets.py", "tests/test_usage_shown.py"],
    ),
    "unanswered": (
        ["trio_routines/scheduler/unanswered.py"],
        ["tests/test_pinned_unanswered.py", "tests/test_gaps_armed.py", "tests/test_gaps.py"],
    ),
    # The store calls' deadlines alone: a quick run after a change to them (the scheduler's
    # selection covers them too, with everything else in the package).
    "deadlines": (
        ["trio_routines/scheduler/deadlines.py"],
        [
            "tests/test_deadlines.py",
            "tests/test_pinned_scheduler_fire.py",
            "tests/test_store_bounds.py",
            "--hypothesis-profile=mutation",
        ],
    ),
    "gaps": (
        ["trio_routines/gaps.py"],
        [
            "tests/test_gaps.py",
            "tests/test_gaps_armed.py",
            "tests/test_pinned_gaps.py",
            "--hypothesis-profile=mutation",
        ],
    ),
    "replicas": (
        ["trio_routines/replicas.py"],
        ["tests/test_pinned_replicas.py", "tests/test_replicas_contract.py"],
    ),
    # The fire path and the turn holds over every kind of store: the memory store's holds, the
    # state directory's (claims that appear whole) and PostgreSQL's (claims that take their
    # holds in the claim's own step), which only the PostgreSQL tests reach ("+postgres": the
    # server on 127.0.0.1 is used, as the suite's own tests use it).
    "firepath": (
        [
            "trio_routines/scheduler/fire.py",
            "trio_routines/scheduler/resumes.py",
            "trio_routines/scheduler/claiming.py",
            "trio_routines/scheduler/holds.py",
            "trio_routines/scheduler/results.py",
        ],
        [
            *SCHEDULER_TESTS,
            "+postgres",
            "tests/test_pinned_fire_paths.py",
            "tests/test_directory_holds.py",
            "tests/test_pinned_directory_holds.py",
            "tests/test_postgres.py",
            "tests/test_postgres_newest.py",
            "tests/test_pinned_history.py",
        ],
    ),
    # The boot (the newest claims, the open ones, the gaps and counts seeded) and the replicas'
    # watch (a dead member's claims swept), each over the scheduler's selection, the state
    # directory's and PostgreSQL's tests of a boot and of replicas beside it.
    "schedboot": (
        ["trio_routines/scheduler/boot.py", "trio_routines/scheduler/bootlines.py"],
        [
            *SCHEDULER_TESTS,
            "+postgres",
            "tests/test_postgres_newest.py",
            "tests/test_pinned_history.py",
        ],
    ),
    # The boot as run starts it and a stop gives it up.
    "schedstarting": (
        ["trio_routines/scheduler/starting.py"],
        [*SCHEDULER_TESTS, "tests/test_hosting.py"],
    ),
    # The run: its boot and loops started, its stop, a host's calls after it; what bounds a
    # turn (a stop's grace, a lost presence, a caller who gave up).
    "schedrunning": (
        ["trio_routines/scheduler/running.py", "trio_routines/scheduler/grace.py"],
        [
            *SCHEDULER_TESTS,
            "tests/test_hosting.py",
        ],
    ),
    "schedmembers": (
        ["trio_routines/scheduler/members.py"],
        [
            *SCHEDULER_TESTS,
            "+postgres",
            "tests/test_directory_holds.py",
            "tests/test_pinned_directory_holds.py",
            "tests/test_postgres.py",
        ],
    ),
    # A replica's holds, as every store's presence shares them (the store's own part is its
    # store's: the directory's holds run in the selection, PostgreSQL's do not).
    "presence": (
        ["trio_routines/presence.py"],
        [
            "tests/test_replicas_contract.py",
            "tests/test_scheduler_replicas.py",
            "tests/test_open_claims.py",
            "tests/test_pinned_presence.py",
            "tests/test_pinned_member_watch.py",
        ],
    ),
    # What `history`, `status`, the page and the HTTP API read and show of a routine's past.
    "history": (
        ["trio_routines/history.py"],
        [
            "tests/test_cli_views.py",
            "tests/test_gaps.py",
            "tests/test_http.py",
            "tests/test_session_spent.py",
            "tests/test_usage_shown.py",
            "tests/test_pinned_scheduler_boot.py",
            "tests/test_pinned_history.py",
            # They run the command as a process of their own, which the copy cannot run (the
            # second, a `serve`, whose boot reads a turn's end through this module).
            "--deselect=tests/test_cli_views.py::test_the_strip_falls_back_to_ascii_when_stdout_is_not_utf8",
            "--deselect=tests/test_cli_views.py::"
            "test_list_and_serve_count_the_next_instant_from_a_claim_in_the_future",
            # Random requests over a real server (3 s): they reach the history only by chance.
            "--deselect=tests/test_http.py::test_arbitrary_requests_never_fail_the_server_nor_change_state_when_refused",
            "--hypothesis-profile=mutation",
        ],
    ),
    # The one escaping helper every surface passes outside text through.
    "text": (
        ["trio_routines/text.py"],
        [
            "tests/test_text.py",
            "tests/test_output.py",
            "tests/test_logs.py",
            "tests/test_pinned_text.py",
            "tests/test_long_values.py",
            *LOGS_PROCESSES_LEFT_OUT,
            "--hypothesis-profile=mutation",
        ],
    ),
    # The log lines: the formatters, the fire's fields on each record, the handler set up.
    "logs": (
        ["trio_routines/logs.py"],
        [
            "tests/test_logs.py",
            "tests/test_pinned_scheduler_fire.py",
            "tests/test_pinned_logs.py",
            *LOGS_PROCESSES_LEFT_OUT,
        ],
    ),
    # The event-stream reader, alone and under the HTTP agent (a real server on a loopback
    # port, in-process).
    "sse": (
        ["trio_routines/sse.py"],
        [
            "tests/test_sse.py",
            "tests/test_agent_http.py",
            "tests/test_pinned_sse.py",
            # It runs the command as a process of its own, which the copy cannot run.
            "--deselect=tests/test_agent_http.py::test_the_fire_command_posts_a_non_ascii_routine",
            # It reads docs/, which the copy does not hold.
            "--deselect=tests/test_agent_http.py::test_the_docs_state_the_limits_the_code_has",
            "--hypothesis-profile=mutation",
        ],
    ),
    # The HTTP agent's pure core (a turn's body, an answer's meaning, its reasons, its usage),
    # under the HTTP agent over a real server on a loopback port, in-process.
    "agent_wire": (
        ["trio_routines/agent_wire.py"],
        [
            "tests/test_agent_http.py",
            "tests/test_usage.py",
            "tests/test_pinned_agent_wire.py",
            # It runs the command as a process of its own, which the copy cannot run.
            "--deselect=tests/test_agent_http.py::test_the_fire_command_posts_a_non_ascii_routine",
            # It reads docs/, which the copy does not hold.
            "--deselect=tests/test_agent_http.py::test_the_docs_state_the_limits_the_code_has",
        ],
    ),
    # The built-in agents (echo, cmd: over real commands under their supervisor, py:, the
    # spec's parsing and its description for the logs), in-process.
    "agents": (
        ["trio_routines/agents.py", "trio_routines/agentspec.py"],
        [
            "tests/test_agents.py",
            "tests/test_usage.py",
            "tests/test_procgroup.py",
            "tests/test_tracing.py",
            "tests/test_agent_http.py",
            "tests/test_pinned_agents.py",
            # It runs the command as a process of its own, which the copy cannot run.
            "--deselect=tests/test_agents.py::"
            "test_a_fired_cmd_turn_finds_neither_the_state_nor_a_database_password",
            "--deselect=tests/test_agent_http.py::test_the_fire_command_posts_a_non_ascii_routine",
            "--deselect=tests/test_tracing.py::"
            "test_without_the_extra_nothing_imports_it_and_a_fire_runs",
            # They read docs/, which the copy does not hold.
            "--deselect=tests/test_agent_http.py::test_the_docs_state_the_limits_the_code_has",
            "--deselect=tests/test_tracing.py::test_the_spans_are_named_in_the_docs",
        ],
    ),
    # The HTTP agent's shell (the request, redirects, bounds, errors) over a real server on a
    # loopback port, in-process.
    "agent_http": (
        ["trio_routines/agent_http.py"],
        [
            "tests/test_agent_http.py",
            "tests/test_usage.py",
            "tests/test_tracing.py",
            "tests/test_pinned_agent_wire.py",
            "tests/test_pinned_agent_http.py",
            # It runs the command as a process of its own, which the copy cannot run.
            "--deselect=tests/test_agent_http.py::test_the_fire_command_posts_a_non_ascii_routine",
            "--deselect=tests/test_tracing.py::"
            "test_without_the_extra_nothing_imports_it_and_a_fire_runs",
            # They read docs/, which the copy does not hold.
            "--deselect=tests/test_agent_http.py::test_the_docs_state_the_limits_the_code_has",
            "--deselect=tests/test_tracing.py::test_the_spans_are_named_in_the_docs",
        ],
    ),
    # Serving a scheduler as a service (real signals to this very process, a real server on a
    # loopback port, in-process).
    "hosting": (
        ["trio_routines/hosting.py"],
        ["tests/test_hosting.py", "tests/test_pinned_hosting.py", "tests/test_boot_stop.py"],
    ),
    "converter": (
        ["trio_routines/converter.py"],
        [
            "tests/test_pinned_converter.py",
            "tests/test_claims.py",
            "tests/test_wakeups.py",
            "tests/test_usage.py",
            "tests/test_pinned_core.py",
        ],
    ),
    # The values every layer passes around (fires, claim results, origins, wake-ups, gaps) and
    # their invariants.
    # The records built through their slots on every fire, against the ones their classes
    # build (records, context, turns and the scheduler's state each hold a builder).
    "slots": (["trio_routines/slots.py"], ["tests/test_slots.py"]),
    "records": (
        ["trio_routines/records.py"],
        [
            "tests/test_slots.py",
            "tests/test_origin.py",
            "tests/test_pinned_core.py",
            "tests/test_pinned_converter.py",
            "tests/test_claims.py",
            "tests/test_wakeups.py",
            "tests/test_pinned_wakeups.py",
            "tests/test_pinned_gaps.py",
            "tests/test_pinned_records.py",
        ],
    ),
    # Why a turn runs, as an agent reads it (current_fire), and a cron fire's idempotency key.
    "context": (
        ["trio_routines/context.py"],
        [
            # First: mutmut's forced-fail run stops at the first failing test, and a scheduler's
            # test whose every context call raises spins in virtual time until its CPU bound
            # stops mutmut itself.
            "tests/test_pinned_context.py",
            "tests/test_context.py",
            "tests/test_origin.py",
            "tests/test_slots.py",
        ],
    ),
    # Tracing with OpenTelemetry (the SDK's in-memory exporter records the spans): the spans of
    # fires and turns, the caller's context in through the HTTP surface and out to the agents.
    "tracing": (
        ["trio_routines/tracing.py"],
        [
            "tests/test_tracing.py",
            "tests/test_pinned_tracing.py",
            # It runs Python as a process of its own, which the copy cannot run.
            "--deselect=tests/test_tracing.py::test_without_the_extra_nothing_imports_it_and_a_fire_runs",
            # It reads docs/, which the copy does not hold.
            "--deselect=tests/test_tracing.py::test_the_spans_are_named_in_the_docs",
        ],
    ),
    # The runtime's series in a host's prometheus_client registry.
    "prometheus": (
        ["trio_routines/prometheus.py"],
        [
            "tests/test_metrics.py::test_the_collector_gives_a_registry_the_same_series",
            "tests/test_metrics.py::"
            "test_a_registry_refuses_the_series_a_second_time_and_keeps_one_copy",
        ],
    ),
    # The status page's views (a routine's timeline marks) and their markup, pure values in
    # and text out, and under the page served over a real server on a loopback port.
    "render": (
        ["trio_routines/http/render.py", "trio_routines/http/views.py"],
        [
            "tests/test_page.py",
            "tests/test_gaps.py",
            "tests/test_budgets.py",
            "tests/test_usage_shown.py",
            "tests/test_session_spent.py",
            "tests/test_pinned_render.py",
            "tests/test_pinned_page.py",  # the wake-ups' groups, built here for the page
        ],
    ),
    # The cron slots each timeline expects, remembered between renders, and what the API's
    # listings show of what the turns spent.
    "expected": (
        ["trio_routines/http/expected.py", "trio_routines/http/spending.py"],
        [
            "tests/test_http_expected.py",
            "tests/test_page.py",
            "tests/test_usage_shown.py",
            "tests/test_session_spent.py",
            "tests/test_pinned_expected.py",
            "--hypothesis-profile=mutation",
        ],
    ),
    # The status page's routes and what it gathers from a scheduler (a real server on a
    # loopback port, in-process).
    # The status page's sign-in cookie.
    "signin": (
        ["trio_routines/http/signin.py"],
        ["tests/test_pinned_signin.py", "tests/test_page.py", "tests/test_pinned_httpapp.py"],
    ),
    "page": (
        ["trio_routines/http/page.py"],
        [
            # First: mutmut's forced-fail run stops at the first failing test, and a page served
            # over a real server whose every helper raises waits for an answer that never comes.
            "tests/test_pinned_page.py",
            "tests/test_page.py",
            "tests/test_budgets.py",
            "tests/test_usage_shown.py",
            "tests/test_session_spent.py",
            "tests/test_gaps.py",
            "tests/test_pinned_httpapp.py",
        ],
    ),
    "wakelimits": (
        ["trio_routines/wakelimits.py"],
        [
            "tests/test_wakelimits.py",
            "tests/test_wakeexpiry.py",
            "tests/test_store_contract_waketurns.py",
            "tests/test_pinned_wakelimits.py",
            # The store's room: its bounds, and every store's count.
            "tests/test_pinned_wakeups.py",
            "tests/test_store_contract.py",
            "tests/test_kept_wakeups.py",
        ],
    ),
    "budgets": (
        ["trio_routines/budgets.py"],
        ["tests/test_budgets.py", "tests/test_pinned_budgets.py"],
    ),
    "ledger": (
        ["trio_routines/ledger.py"],
        [
            "tests/test_store_ledger.py",
            "tests/test_budgets.py",
            "tests/test_usage_shown.py",
            "tests/test_pinned_ledger.py",
        ],
    ),
    "usage": (
        ["trio_routines/usage.py"],
        ["tests/test_usage.py", "tests/test_store_usage.py", "tests/test_pinned_usage.py"],
    ),
    "procgroup": (["trio_routines/procgroup.py"], ["tests/test_procgroup.py"]),
    # The store a --state names (open_store, the URLs refused), in-process.
    "storesopen": (
        ["trio_routines/stores/__init__.py", "trio_routines/stores/stateurl.py"],
        [
            "tests/test_state_url_schema.py",
            "tests/test_state_urls.py",
            "tests/test_pinned_stores.py",
            "tests/test_pinned_cli_output.py",
        ],
    ),
    # The walk for older open claims, and the count of a fire recorded interrupted that the
    # boot and the member watch share (with their tests).
    "openclaims": (
        ["trio_routines/scheduler/openclaims.py"],
        [
            "tests/test_open_claims.py",
            "tests/test_metrics.py",
            "tests/test_pinned_member_watch.py",
            "tests/test_pinned_scheduler_boot.py",
            "tests/test_pinned_boot_lines.py",
            "tests/test_interrupted_once.py",
        ],
    ),
    # The failure streaks read from the history after the boot (with the boot's tests).
    "streaks": (
        ["trio_routines/scheduler/streaks.py"],
        [
            "tests/test_pinned_boot_lines.py",
            "tests/test_metrics.py",
            "tests/test_gaps.py",
        ],
    ),
    # A turn's ticket for an agent in another process, and the call it makes with it.
    "tickets": (
        ["trio_routines/tickets.py"],
        ["tests/test_tickets.py", "tests/test_http_tools.py", "tests/test_pinned_agent_http.py"],
    ),
    "tools": (
        ["trio_routines/tools.py"],
        [
            "tests/test_tools.py",
            "tests/test_wakelimits.py",
            "tests/test_pinned_tools.py",
            # It loads examples/self_scheduling.py, which the copy does not hold.
            "--deselect=tests/test_tools.py::test_the_example_agent_schedules_and_cancels_through_the_tools",
        ],
    ),
    "batch": (
        [
            "trio_routines/stores/batch.py",
            "trio_routines/stores/answers.py",
            "trio_routines/stores/groupcommit.py",
            "trio_routines/stores/durable.py",
        ],
        [
            "tests/test_batch.py",
            "tests/test_directory_batches.py",
            "tests/test_groupcommit.py",
            "tests/test_pinned_groupcommit.py",
            "tests/test_pinned_claimfiles.py",
            # A flush given up, a stalled disk's flush and a store stopped during one.
            "tests/test_stalled_directory.py",
            "tests/test_stop_bounds.py",
            "tests/test_faults.py",
        ],
    ),
    "writer": (
        [
            "trio_routines/stores/directory/writer/process.py",
            "trio_routines/stores/directory/writer/child.py",
            "trio_routines/stores/directory/writer/startline.py",
            "trio_routines/stores/directory/writer/wire.py",
            "trio_routines/stores/directory/writer/replies.py",
            "trio_routines/stores/directory/writer/call.py",
        ],
        [
            "tests/test_writer.py",
            "tests/test_pinned_writer.py",
            "tests/test_pinned_writerchild.py",
            "tests/test_pinned_writerspares.py",
            "tests/test_pinned_writerwire.py",
            "tests/test_directory_batches.py",
            "tests/test_groupcommit.py",
            # Its child runs in another working directory, where mutmut's trampolines find
            # no configuration of mutmut's (they look for it there): the child cannot start.
            "--deselect=tests/test_writer.py::"
            "test_the_child_runs_this_package_whatever_else_is_on_its_way[working directory]",
        ],
    ),
    "directory": (
        [
            "trio_routines/stores/directory/store.py",
            "trio_routines/stores/directory/writes.py",
            "trio_routines/stores/directory/claimfiles.py",
            "trio_routines/stores/directory/settlefiles.py",
            "trio_routines/stores/safefile.py",
            "trio_routines/stores/fileplaces.py",
            "trio_routines/stores/directory/wakeupfile.py",
            "trio_routines/stores/newest.py",
            "trio_routines/stores/directory/pause.py",
            "trio_routines/stores/directory/pausestate.py",
            "trio_routines/stores/directory/pausedread.py",
            "trio_routines/stores/directory/blocking.py",
        ],
        [
            "tests/test_directory_store.py",
            "tests/test_store_contract.py",
            "tests/test_pinned_stores.py",
            "tests/test_newest.py",
            "tests/test_hostile_state.py",
            "tests/test_faults.py",
            "tests/test_groupcommit.py",
            "tests/test_pause.py",
            "tests/test_pinned_directory.py",
            "tests/test_pinned_claimfiles.py",
            "tests/test_pinned_wakeupfile.py",
            "tests/test_pinned_wakeupfile_writes.py",
            "tests/test_pinned_dirpause.py",
            "tests/test_pinned_dirpause_given_up.py",
            "tests/test_pinned_safefile.py",
            "tests/test_pinned_newest.py",
            "tests/test_spares.py",
            # The write path's own (writes.py, blocking.py) and the claim files' later tests.
            "tests/test_directory_batches.py",
            "tests/test_writer.py",
            "tests/test_pinned_writer.py",
            "tests/test_claimfiles_leftovers.py",
            "tests/test_claim_order.py",
            # As in the writer's selection: the shadow-copy case cannot start its child here.
            "--deselect=tests/test_writer.py::"
            "test_the_child_runs_this_package_whatever_else_is_on_its_way[working directory]",
            "tests/test_stalled_directory.py",
            "tests/test_store_usage.py",
            # The parts the store hands its calls to (usage, wake-up turns, first arming,
            # gaps, open claims, replicas' holds): a delegation is pinned by their tests.
            "tests/test_store_ledger.py",
            "tests/test_store_contract_waketurns.py",
            "tests/test_store_contract_armed.py",
            "tests/test_gaps.py",
            "tests/test_open_claims.py",
            "tests/test_directory_holds.py",
            # Pins written for this module's survivors: its batches, its write path's options
            # and bounds, the wake-up file's lock and take-over.
            "tests/test_pinned_claimfiles_batches.py",
            "tests/test_pinned_writes.py",
            "tests/test_pinned_wakeupfile_retire.py",
        ],
    ),
    # The wake-up journal of a state directory (the in-memory index, the journal's reading and
    # writing, the log file under them): one module at a time, the same fast selection.
    "wakeupindex": (["trio_routines/stores/directory/wakeupindex.py"], WAKEUP_JOURNAL_TESTS),
    "wakeupjournal": (["trio_routines/stores/directory/wakeupjournal.py"], WAKEUP_JOURNAL_TESTS),
    "wakeuplog": (["trio_routines/stores/directory/wakeuplog.py"], WAKEUP_JOURNAL_TESTS),
    # The runtime's series (their rendering, and what the scheduler counts into them) and a
    # turn's kept output.
    "metrics": (
        ["trio_routines/metrics.py", "trio_routines/exposition.py"],
        [
            "tests/test_metrics.py",
            "tests/test_pinned_metrics.py",
            "tests/test_usage_shown.py",
            "tests/test_gaps.py",
            "tests/test_budgets.py",
            "tests/test_restarts.py",
            "tests/test_pause.py",
            "tests/test_store_bounds.py",
        ],
    ),
    "output": (
        ["trio_routines/output.py"],
        [
            "tests/test_output.py",
            "tests/test_pinned_output.py",
            "tests/test_scheduler_output.py",
            "--hypothesis-profile=mutation",
        ],
    ),
    # What an unknown time zone may have meant (the refusal's suggestions).
    "zones": (
        ["trio_routines/cron/zones.py"],
        ["tests/test_zones.py", "tests/test_cron.py::test_unknown_zones"],
    ),
    # The routines directory: which entries load, which become failures, and why.
    "routinedir": (
        ["trio_routines/routinedir.py"],
        [
            "tests/test_routines.py",
            "tests/test_pinned_routines.py",
            "tests/test_reload.py",
            # The one test of the file that runs no command as a process of its own.
            "tests/test_hostile.py::test_a_binary_routine_file_is_one_failure_and_its_siblings_load",
        ],
    ),
    # The cmd: agent's supervisor. The runtime runs it as a script (`python -I -S`), which
    # reaches no mutant (and, mutated, cannot even import mutmut): the cmd: tests would fail
    # in the copy. Its pinned tests run its `main` in a forked child instead (tests/forked.py).
    "lifeline": (["trio_routines/lifeline.py"], ["tests/test_pinned_lifeline.py"]),
    # The pulses a runtime writes on its commands' lifelines, by a thread of their own.
    "pulses": (["trio_routines/pulses.py"], ["tests/test_pulses.py", "tests/test_agents.py"]),
    # The W3C Trace Context headers a caller sends (untrusted text).
    "tracecontext": (
        ["trio_routines/tracecontext.py"],
        [
            "tests/test_tracecontext.py",
            "tests/test_tracing.py",
            # It runs Python as a process of its own, which the copy cannot run.
            "--deselect=tests/test_tracing.py::test_without_the_extra_nothing_imports_it_and_a_fire_runs",
            # It reads docs/, which the copy does not hold.
            "--deselect=tests/test_tracing.py::test_the_spans_are_named_in_the_docs",
            "--hypothesis-profile=mutation",
        ],
    ),
    # The HTTP surface's attacker-facing modules: the Host and Origin checks, the parsing of
    # every untrusted part of a request (over a real server on a loopback port, in-process).
    "origin": (
        ["trio_routines/http/origin.py"],
        [
            "tests/test_http_origin.py",
            "tests/test_http.py::"
            "test_a_token_no_client_can_send_as_it_is_is_refused_before_anything_serves",
            "tests/test_http.py::test_every_printable_ascii_token_is_taken",
        ],
    ),
    "wire": (
        ["trio_routines/http/wire.py"],
        [
            "tests/test_http.py",
            "tests/test_http_input.py",
            "tests/test_http_tools.py",
            "tests/test_http_mount.py",
            "tests/test_http_origin.py",
            "tests/test_http_probes.py",
            "tests/test_pinned_httpwire.py",
            "--hypothesis-profile=mutation",
        ],
    ),
    "app": (
        ["trio_routines/http/app.py"],
        [
            "tests/test_http.py",
            "tests/test_http_origin.py",
            "tests/test_http_mount.py",
            "tests/test_http_probes.py",
            "tests/test_http_tools.py",
            "tests/test_http_connections.py",
            "tests/test_page.py",
            "tests/test_tracing.py",
            # It reads docs/, which the copy does not hold.
            "--deselect=tests/test_tracing.py::test_the_spans_are_named_in_the_docs",
            "tests/test_pinned_httpwire.py",
            "tests/test_pinned_httpapp.py",
            "--hypothesis-profile=mutation",
        ],
    ),
    "connections": (
        ["trio_routines/http/connections.py"],
        [
            "tests/test_http_connections.py",
            "tests/test_pinned_httpconnections.py",
            "tests/test_http_origin.py",
        ],
    ),
    # The command line's option values (argparse type= functions), called directly.
    "clivalues": (["trio_routines/cli/values.py"], ["tests/test_pinned_cli_values.py"]),
    # How the command line shows values: columns, instants, durations, the strip, schedules.
    "clitable": (
        ["trio_routines/cli/table.py"],
        ["tests/test_pinned_cli_table.py"],
    ),
    # The pending wake-ups as `status` and `list` show them.
    "cliwakeuprows": (
        ["trio_routines/cli/wakeuprows.py"],
        ["tests/test_pinned_cli_wakeuprows.py", "tests/test_session_spent.py"],
    ),
    # The commands that change nothing: `history`, `next`, `check` (in-process).
    "cliviews": (
        ["trio_routines/cli/views.py"],
        [
            "tests/test_cli_views.py",
            "tests/test_usage_shown.py",
            "tests/test_cli_remote.py",
            "tests/test_gaps.py",
            "tests/test_hashed_runtime.py",
            "tests/test_pinned_cli_views.py",
            # They run the command as a process of its own, which the copy cannot run (the
            # second, a `serve`, reaches no command of these).
            "--deselect=tests/test_cli_views.py::test_the_strip_falls_back_to_ascii_when_stdout_is_not_utf8",
            "--deselect=tests/test_cli_views.py::"
            "test_list_and_serve_count_the_next_instant_from_a_claim_in_the_future",
        ],
    ),
    # What every command shares: options, the owner check, the store, routines, printing.
    "clioutput": (
        ["trio_routines/cli/output.py"],
        [
            "tests/test_pinned_cli_output.py",
            "tests/test_pinned_cli.py",
            "tests/test_pinned_cli_views.py",
            "tests/test_cli_views.py",
            "tests/test_cli_remote.py",
            "tests/test_state_urls.py",
            # The owner check's refusal of a state directory that is not there (pause, resume
            # and unwake), and the errors in the log's format (in-process).
            "tests/test_pinned_cli_pausing.py",
            "tests/test_logs.py",
            # They run the command as a process of its own, which the copy cannot run (the
            # second, a `serve`, waits idle until the hang bound ends mutmut's first run).
            "--deselect=tests/test_cli_views.py::test_the_strip_falls_back_to_ascii_when_stdout_is_not_utf8",
            "--deselect=tests/test_cli_views.py::"
            "test_list_and_serve_count_the_next_instant_from_a_claim_in_the_future",
        ],
    ),
    # The argument parser: every command's options, parsed and shown in its help (in-process).
    "cliparser": (
        ["trio_routines/cli/parser.py", "trio_routines/cli/parsing.py"],
        [
            "tests/test_pinned_cli_parser.py",
            "tests/test_pinned_cli.py",
            "tests/test_pinned_cli_views.py",
        ],
    ),
    # `pause` and `resume`, on a state directory and over a real server on a loopback port,
    # in-process.
    "clipausing": (
        ["trio_routines/cli/pausing.py"],
        ["tests/test_pinned_cli_pausing.py", "tests/test_cli_remote.py"],
    ),
    # `wake` and `unwake`, on a state directory and over a real server on a loopback port,
    # in-process.
    "cliwakes": (
        ["trio_routines/cli/wakes.py"],
        [
            "tests/test_pinned_cli_wakes.py",
            "tests/test_cli_remote.py",
            "tests/test_session_spent.py",
            # unwake's refusal of a state directory that is not there.
            "tests/test_pinned_cli_pausing.py",
        ],
    ),
    # The state directory's holds (the files, the fence against earlier versions) and its side
    # of the replicas (whether an open claim is alive: its replica's hold).
    "directoryholds": (
        [
            "trio_routines/stores/directory/holds.py",
            "trio_routines/stores/directory/lockfiles.py",
            "trio_routines/stores/directory/members.py",
        ],
        [
            "tests/test_directory_holds.py",
            "tests/test_replicas_contract.py",
            "tests/test_pinned_presence.py",
            "tests/test_open_claims.py",
            "tests/test_pinned_directory_holds.py",
        ],
    ),
    # The API handlers (a route's parsed input to its answer), over a real server on a
    # loopback port, in-process.
    "api": (
        [
            "trio_routines/http/api.py",
            "trio_routines/http/wakeupapi.py",
            "trio_routines/http/storecall.py",
        ],
        [
            "tests/test_http.py",
            "tests/test_http_input.py",
            "tests/test_http_tools.py",
            "tests/test_http_probes.py",
            "tests/test_session_spent.py",
            "tests/test_usage_shown.py",
            "tests/test_wakeexpiry.py",
            "tests/test_hashed_runtime.py",
            "tests/test_pinned_httpwire.py",
            # The one test of the file that reads the span of POST /wakeups.
            "tests/test_tracing.py::test_post_run_and_post_wakeups_are_the_callers_children",
            "tests/test_pinned_httpapi.py",
            # A page of the wake-ups, a reply below the mount point, the note of a server
            # that runs no wake-ups.
            "tests/test_http_paging.py",
            "tests/test_http_mount.py",
            "tests/test_pinned_cli_wakes.py",
            "--hypothesis-profile=mutation",
        ],
    ),
    # Serving the application next to the scheduler: the bind's checks, hypercorn's config.
    "serving": (
        ["trio_routines/http/serving.py"],
        [
            "tests/test_http.py",
            "tests/test_http_connections.py",
            "tests/test_hosting.py",
            "tests/test_pinned_hosting.py",
            "tests/test_pinned_httpserving.py",
            "--hypothesis-profile=mutation",
        ],
    ),
    # The worker-thread calls a cancelled caller leaves (the state directory's stalls, with a
    # thread blocked on an event as a frozen file system blocks it).
    "abandon": (
        ["trio_routines/stores/abandon.py"],
        [
            "tests/test_abandon.py",
            "tests/test_stalled_directory.py",
            "tests/test_replicas_stall.py",
            "tests/test_pinned_wakeuplog.py",
            "tests/test_pinned_wakeuplog_reads.py",
            "tests/test_pinned_claimfiles.py",
            "tests/test_store_bounds.py",
            "tests/test_pinned_abandon.py",
            "tests/test_pinned_dirwakeups.py",
            "tests/test_pinned_directory_holds.py",
        ],
    ),
    # A state as messages and logs show it, every credential masked.
    "credentials": (
        ["trio_routines/stores/credentials.py"],
        [
            "tests/test_credentials.py",
            "tests/test_pinned_cli_output.py",
            "tests/test_pinned_credentials.py",
            "tests/test_state_urls.py",
            "--hypothesis-profile=mutation",
        ],
    ),
    # `status` and `list` on a state directory, and from a real server on a loopback port
    # (`--url`), in-process.
    "clistatus": (
        ["trio_routines/cli/status.py"],
        [
            "tests/test_pinned_cli_status.py",
            "tests/test_cli_status.py",
            "tests/test_cli_views.py",
            "tests/test_usage_shown.py",
            "tests/test_session_spent.py",
            "tests/test_cli_remote.py",
            "tests/test_hashed_runtime.py",
            # They run the command as a process of its own, which the copy cannot run.
            "--deselect=tests/test_cli_views.py::test_the_strip_falls_back_to_ascii_when_stdout_is_not_utf8",
            "--deselect=tests/test_cli_views.py::"
            "test_list_and_serve_count_the_next_instant_from_a_claim_in_the_future",
        ],
    ),
    # A command sent to a running `serve`: the URL and the token, each request as it reaches
    # a server on a loopback port, and what each answer becomes (in-process).
    "cliclient": (
        ["trio_routines/cli/client.py"],
        [
            "tests/test_pinned_cli_client.py",
            "tests/test_cli_remote.py",
            "tests/test_pinned_cli_pausing.py",
            "tests/test_pinned_cli_wakes.py",
            "tests/test_pinned_cli_status.py",
            "tests/test_cli_status.py",
            "tests/test_session_spent.py",
        ],
    ),
    # `run` and `fire`: on a state directory with a scripted agent, and against a server's
    # answers (in-process; of test_cli only its tests that run no command as a process).
    "clifiring": (
        ["trio_routines/cli/firing.py"],
        [
            "tests/test_pinned_cli_firing.py",
            "tests/test_cli.py::test_fire_json_reports_a_failed_turn_and_exits_1",
            "tests/test_cli.py::test_fire_of_an_older_slot_is_stale_and_still_success",
            "tests/test_cli.py::test_fire_without_cron_accepts_any_instant",
            "tests/test_cli.py::test_run_streams_the_reply_without_a_claim_or_history",
            "tests/test_cli.py::test_common_options_work_before_the_command_too",
            "tests/test_cli.py::test_agent_from_the_environment",
            "tests/test_cli_input.py::"
            "test_run_shows_an_agents_escape_sequences_escaped_on_a_terminal_and_as_they_are_else",
            "tests/test_cli_remote.py",
            "tests/test_pinned_cli.py",
        ],
    ),
    # `list` and `status` as a server answers them (`--url`), in-process.
    "cliserved": (
        ["trio_routines/cli/served.py"],
        [
            "tests/test_pinned_cli_served.py",
            "tests/test_pinned_cli_status.py",
            "tests/test_cli_status.py",
            "tests/test_cli_remote.py",
            "tests/test_session_spent.py",
            "tests/test_usage_shown.py",
            "tests/test_http_paging.py",
        ],
    ),
    # GET /wakeups a page at a time: the parameters, the order, the next page's link.
    "paging": (
        ["trio_routines/http/paging.py"],
        ["tests/test_http_paging.py", "tests/test_http.py", "tests/test_session_spent.py"],
    ),
    # The state directory's bounded walk over the claims for the open ones (the replicas').
    "openscan": (
        ["trio_routines/stores/directory/openscan.py"],
        [
            "tests/test_open_claims.py",
            "tests/test_pinned_directory_holds.py",
            "tests/test_pinned_openscan.py",
        ],
    ),
    # The state directory's gaps file and the lock its writers share with armed.json's.
    "directorygaps": (
        ["trio_routines/stores/directory/gaps.py"],
        [
            "tests/test_gaps.py",
            "tests/test_gaps_armed.py",
            "tests/test_store_contract.py",
            "tests/test_pinned_directory_gaps.py",
        ],
    ),
    # When each routine was first armed, in the state directory's armed.json.
    "armed": (
        ["trio_routines/stores/directory/armed.py"],
        [
            "tests/test_gaps_armed.py",
            "tests/test_store_contract_armed.py",
            "tests/test_hostile_armed.py",
            "tests/test_directory_locks.py",
            "tests/test_pinned_armed.py",
        ],
    ),
    # Each session's recent wake-up turns, in the state directory's wake-turns.json.
    "waketurns": (
        ["trio_routines/stores/directory/waketurns.py"],
        [
            "tests/test_store_contract_waketurns.py",
            "tests/test_wakelimits.py",
            "tests/test_directory_locks.py",
            "tests/test_pinned_waketurns.py",
        ],
    ),
    # The usage ledgers in the state directory: a file per routine or session.
    "ledgerfile": (
        ["trio_routines/stores/directory/ledgerfile.py"],
        [
            "tests/test_store_ledger.py",
            "tests/test_budgets.py",
            "tests/test_directory_locks.py",
            "tests/test_pinned_ledgerfile.py",
        ],
    ),
    # The store's async calls of pauses, gaps, first-armed records, usage and wake-up turns.
    "directoryrecords": (
        ["trio_routines/stores/directory/records.py"],
        [
            "tests/test_store_contract.py",
            "tests/test_store_contract_armed.py",
            "tests/test_store_contract_waketurns.py",
            "tests/test_store_ledger.py",
            "tests/test_pinned_dirpause.py",
            "tests/test_pinned_dirpause_given_up.py",
        ],
    ),
    # The PostgreSQL store, in five parts, each over the tests that reach it on PostgreSQL
    # (`-k postgres`: the contract tests' other kinds of store never call it): its claims and
    # the reads, gaps and ledgers beside them; the replicas' presence and holds; the wake-ups;
    # the store's own calls; its connections and its schema.
    "pgclaims": (
        [
            "trio_routines/stores/postgres/claims.py",
            "trio_routines/stores/postgres/reads.py",
            "trio_routines/stores/postgres/gaps.py",
            "trio_routines/stores/postgres/ledger.py",
        ],
        POSTGRES_TESTS,
    ),
    "pgholds": (
        [
            "trio_routines/stores/postgres/holds.py",
            "trio_routines/stores/postgres/joining.py",
            "trio_routines/stores/postgres/alive.py",
            "trio_routines/stores/postgres/ending.py",
        ],
        POSTGRES_TESTS,
    ),
    "pgwakeups": (
        ["trio_routines/stores/postgres/wakeups.py", "trio_routines/stores/postgres/wakeuprows.py"],
        POSTGRES_TESTS,
    ),
    # The state directory's paused read alone, with the tests that read it (it is in the
    # directory's group too, whose run is long).
    "dirpause": (
        [
            "trio_routines/stores/directory/pause.py",
            "trio_routines/stores/directory/pausestate.py",
        ],
        [
            "tests/test_pinned_dirpause.py",
            "tests/test_pinned_dirpause_given_up.py",
            "tests/test_store_contract.py",
            "tests/test_pause.py",
            "tests/test_paused_read.py",
        ],
    ),
    "dirpausedread": (
        ["trio_routines/stores/directory/pausedread.py"],
        [
            "tests/test_pinned_dirpause.py",
            "tests/test_store_contract.py",
            "tests/test_pause.py",
            "tests/test_paused_read.py",
        ],
    ),
    "pgstore": (
        [
            "trio_routines/stores/postgres/store.py",
            "trio_routines/stores/postgres/batches.py",
            "trio_routines/stores/postgres/pauses.py",
        ],
        POSTGRES_TESTS,
    ),
    "pgconn": (
        ["trio_routines/stores/postgres/conn.py", "trio_routines/stores/postgres/schema.py"],
        POSTGRES_TESTS,
    ),
    # A call as its thread and its caller share it, and the faults it ends in.
    "pgcall": (["trio_routines/stores/postgres/call.py"], POSTGRES_TESTS),
    # The state directory's wake-up calls (their turns, and a caller that leaves), whether it
    # is ready, and the values a batch carries to and from the writer process.
    "dirwakeups": (
        [
            "trio_routines/stores/directory/wakeups.py",
            "trio_routines/stores/directory/ready.py",
            "trio_routines/stores/directory/claimbatch.py",
        ],
        [
            *WAKEUP_JOURNAL_TESTS,
            "tests/test_stalled_directory.py",
            "tests/test_abandon.py",
            "tests/test_pinned_directory.py",
            "tests/test_pinned_writes.py",
            "tests/test_writer.py",
            "tests/test_pinned_writer.py",
            "tests/test_pinned_claimfiles.py",
            "tests/test_pinned_claimfiles_batches.py",
            "tests/test_directory_batches.py",
            "tests/test_pinned_dirwakeups.py",
        ],
    ),
    # The memory store that embedders test with (trio_routines.testing): the store contract in
    # memory, its fault injection, and its members' holds.
    "memory": (
        [
            "trio_routines/testing/memory.py",
            "trio_routines/testing/faults.py",
            "trio_routines/testing/memberships.py",
        ],
        [
            "tests/test_store_contract.py",
            "tests/test_store_contract_armed.py",
            "tests/test_store_contract_waketurns.py",
            "tests/test_store_ledger.py",
            "tests/test_store_usage.py",
            "tests/test_replicas_contract.py",
            "tests/test_pinned_stores.py",
            "tests/test_pinned_presence.py",
            "tests/test_faults.py",
            "tests/test_store_bounds.py",
            "tests/test_open_claims.py",
            "tests/test_session_spent.py",
            "tests/test_wakeexpiry.py",
            "tests/test_gaps_armed.py",
            "tests/test_turn_holds.py",
            "tests/test_pinned_memory.py",
        ],
    ),
    # The other test tools: the wall clock that moves with Trio's, and the scripted agent.
    "testingtools": (
        ["trio_routines/testing/scripted.py", "trio_routines/testing/clock.py"],
        ["tests/test_pinned_testing.py", "tests/test_clockskew.py", "tests/test_context.py"],
    ),
    # The package's names imported on first use, and the agent's events.
    "lazy": (
        ["trio_routines/_lazy.py", "trio_routines/agent.py"],
        [
            "tests/test_pinned_lazy.py",
            "tests/test_turns.py",
            # A process of its own, which would import the tree, not the copy.
            "--deselect=tests/test_pinned_lazy.py::"
            "test_importing_the_package_imports_neither_the_scheduler_nor_the_stores",
        ],
    ),
    # ``serve`` in this process: what it logs, its signals, its refusals before the store.
    "cliserve": (["trio_routines/cli/serve.py"], ["tests/test_pinned_cli_serve.py"]),
    # The command line's entry (each command's module, the exit status of every failure) and
    # ``migrate`` (on a state directory and on PostgreSQL schemas).
    "climain": (
        ["trio_routines/cli/__init__.py", "trio_routines/cli/migrating.py"],
        ["+postgres", "tests/test_pinned_cli_main.py"],
    ),
    # The repair of a current PostgreSQL schema (``migrate``'s second half).
    "pgrepair": (
        ["trio_routines/stores/postgres/repair.py"],
        ["+postgres", "tests/test_postgres_upgrades.py", "tests/test_pinned_cli_main.py"],
    ),
}
# The scheduler's other parts that kept survivors in the package's run, each alone over the
# package's selection: quicker to rerun after a change to one of them.
for _part in ("calls", "loops", "wake", "service", "turning", "sleepers"):
    MODULES[f"sched{_part}"] = ([f"trio_routines/scheduler/{_part}.py"], SCHEDULER_TESTS)
# And the small parts together, which kept a few survivors each.
MODULES["schedsmall"] = (
    [
        f"trio_routines/scheduler/{part}.py"
        for part in ("sleepers", "state", "options", "clock", "reload", "arming", "parts", "runs")
    ],
    SCHEDULER_TESTS,
)

# The claim's part alone (one of firepath's), with a pause's, over firepath's selection.
MODULES["schedchanges"] = (
    [f"trio_routines/scheduler/{part}.py" for part in ("pausing", "claiming")],
    MODULES["firepath"][1],
)
MODULES["checks"] = (
    ["trio_routines/checks.py"],
    [
        "tests/test_checks.py",
        "tests/test_scheduler_arguments.py",
        "tests/test_pinned_directory.py",
        "tests/test_pinned_postgres_store.py",
        "tests/test_pinned_postgres_conn.py",
        "tests/test_pinned_agent_http.py",
    ],
)

DESELECT = ["-m", "not slow", "-k", "not postgres", "-p", "no:randomly"]
KILLED = {1, 3, 36, 37, 24, -24, 152, 255}  # a failing test, a crash, a timeout, a type error
# A mutant's run ended by SIGTERM or SIGKILL: the mutated code signalled its own process group
# (a cmd: command's supervisor left in ours ends "its" group when the lifeline is cut).
# tests/mutation_bounds.py gives each mutant's run a group of its own for that.
KILLED |= {-15, -9}
# A mutant that makes a test hang is stopped by tests/mutation_bounds.py when that one test has
# burnt TEST_CPU_SECONDS + TEST_CPU_FACTOR times its clean time in CPU seconds (a loop spinning
# in MockClock's virtual time) or has used no CPU for TEST_IDLE_SECONDS (a task waiting for what
# never comes); mutmut counts either as a timeout. mutmut's own wall timeout, (estimated +
# constant) * multiplier seconds with "estimated" the clean time of every test selected for the
# mutant, is only the backstop: its default multiplier (15) made each hanging mutant cost fifteen
# times its tests' time, and at 3 a mutant that survived on a loaded machine (load 4) came
# within half of it.
TEST_CPU_SECONDS = os.environ.get("MUTATION_TEST_CPU_SECONDS", "1")
TEST_CPU_FACTOR = os.environ.get("MUTATION_TEST_CPU_FACTOR", "10")
TEST_IDLE_SECONDS = os.environ.get("MUTATION_TEST_IDLE_SECONDS", "5")
TIMEOUT_MULTIPLIER = float(os.environ.get("MUTATION_TIMEOUT_MULTIPLIER", "6"))
TIMEOUT_CONSTANT = float(os.environ.get("MUTATION_TIMEOUT_CONSTANT", "2"))


def _toml_list(values: list[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def _require_postgres(module: str) -> None:
    import psycopg  # the `postgres` extra, as the suite's PostgreSQL tests need

    url = os.environ.get("TRIO_ROUTINES_TEST_PG") or "postgresql://postgres@127.0.0.1:5432/test"
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        raise SystemExit(f"{module}: its selection needs PostgreSQL at {url}: {exc}") from None


def _drop_schemas_left(module: str) -> None:
    """Drop the schemas of ``module``'s run that a test killed in the middle left behind
    (tests/pg.py names them ``trm_<module>_...`` in a mutation run)."""
    import psycopg
    from psycopg import sql

    url = os.environ.get("TRIO_ROUTINES_TEST_PG") or "postgresql://postgres@127.0.0.1:5432/test"
    with psycopg.connect(url, autocommit=True, connect_timeout=3) as conn:
        prefix = f"trm_{module}_"
        names = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)", (prefix,)
        ).fetchall()
        for (name,) in names:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def prepare(module: str) -> Path:
    files, tests = MODULES[module]
    dest = WORK / module
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", ".hypothesis")
    shutil.copytree(ROOT / "trio_routines", dest / "trio_routines", ignore=ignore)
    shutil.copytree(ROOT / "tests", dest / "tests", ignore=ignore)
    text = (ROOT / "pyproject.toml").read_text()
    base = tomllib.loads(text)["tool"]["mutmut"]
    # Drop the shared table (up to the next table or the end) and write the module's own.
    text = re.sub(r"\n\[tool\.mutmut\]\n(?:(?!\n\[).)*", "\n", text, flags=re.S)
    # An entry starting with "-" is a pytest option for every run of the module's tests.
    options = [t for t in tests if t.startswith("-")]
    present = [
        t
        for t in tests
        if t not in options and t != "+postgres" and (ROOT / t.split("::")[0]).exists()
    ]
    # "+postgres": the module's PostgreSQL tests run too. Outside CI they skip themselves when
    # the server is down, which would only weaken the score: refuse to run instead.
    if "+postgres" in tests:
        _require_postgres(module)
    deselect = (
        [a for a in DESELECT if a not in ("-k", "not postgres")]
        if "+postgres" in tests
        else DESELECT
    )
    text += (
        "\n[tool.mutmut]\n"
        f"source_paths = {_toml_list(base['source_paths'])}\n"
        f"only_mutate = {_toml_list(files)}\n"
        f"pytest_add_cli_args = {_toml_list(base.get('pytest_add_cli_args', []) + options)}\n"
        f"pytest_add_cli_args_test_selection = {_toml_list(deselect + present)}\n"
        f"timeout_multiplier = {TIMEOUT_MULTIPLIER}\n"
        f"timeout_constant = {TIMEOUT_CONSTANT}\n"
    )
    (dest / "pyproject.toml").write_text(text)
    return dest


def score(dest: Path) -> dict[str, object]:
    codes: dict[str, int | None] = {}
    for meta in (dest / "mutants").rglob("*.meta"):
        codes.update(json.loads(meta.read_text())["exit_code_by_key"])
    survivors = sorted(name for name, code in codes.items() if code not in KILLED)
    killed = len(codes) - len(survivors)
    return {
        "total": len(codes),
        "killed": killed,
        "percent": round(100 * killed / len(codes), 1) if codes else 100.0,
        "survivors": survivors,
    }


def _children_cpu() -> float:
    """CPU seconds (user and system) of every child waited for so far: mutmut and its forks."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def main(argv: list[str]) -> int:
    modules = argv or list(MODULES)
    unknown = [m for m in modules if m not in MODULES]
    if unknown:
        print(f"unknown module(s) {unknown}; choose from {list(MODULES)}", file=sys.stderr)
        return 2
    mutmut = Path(sys.executable).with_name("mutmut")
    results = {}
    failed = 0
    for module in modules:
        dest = prepare(module)
        started = time.monotonic()
        cpu_before = _children_cpu()
        run = subprocess.run(
            [str(mutmut), "run", "--max-children", "2"],
            cwd=dest,
            env=os.environ
            | {
                "TRIO_ROUTINES_TEST_CPU_SECONDS": TEST_CPU_SECONDS,
                "TRIO_ROUTINES_TEST_CPU_FACTOR": TEST_CPU_FACTOR,
                "TRIO_ROUTINES_TEST_IDLE_SECONDS": TEST_IDLE_SECONDS,
                "TRIO_ROUTINES_TEST_OWN_GROUP": "1",
                "TRIO_ROUTINES_TEST_MUTATION": module,  # PostgreSQL schemas: see tests/pg.py
            },
            capture_output=True,  # mutmut reports its own failures on stdout, not on stderr
            text=True,
            check=False,
        )
        if "+postgres" in MODULES[module][1]:
            _drop_schemas_left(module)
        if run.returncode != 0:
            said = (run.stdout[-1500:] + run.stderr[-1500:]).strip() or "(nothing printed)"
            print(f"{module}: mutmut failed ({run.returncode}): {said}")
            failed = 1
            continue
        wall = round(time.monotonic() - started)
        cpu = round(_children_cpu() - cpu_before)
        result = score(dest) | {"seconds": wall, "cpu_seconds": cpu}
        results[module] = result
        print(
            f"{module}: {result['killed']}/{result['total']} killed ({result['percent']}%)"
            f" in {wall} s wall, {cpu} s CPU; survivors: {len(result['survivors'])}"  # type: ignore[arg-type]
        )
        for name in result["survivors"]:  # type: ignore[attr-defined]
            print(f"    {name}")
        (WORK / f"{module}.json").write_text(json.dumps(result, indent=2) + "\n")
    wall = sum(r["seconds"] for r in results.values())  # type: ignore[misc]
    cpu = sum(r["cpu_seconds"] for r in results.values())  # type: ignore[misc]
    print(f"total: {len(results)} module(s), {wall} s wall, {cpu} s CPU (idle: about {cpu // 2} s)")
    return failed


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
