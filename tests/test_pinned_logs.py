"""Pinned: the log lines' edges, and the handler the command line sets up, in this process.

Written for the mutation run of logs.py (docs/mutation.md). The suite's tests reach
``configure_logging`` only through the command run as a process of its own, and show slots on
whole minutes only; here the handler is set up and read in-process, and the rarer records are
formatted whole: a slot with seconds, fields nested, a record from another process, a level
without a name.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from logrecords import SLOT, STAMP, record

from trio_routines.context import FireContext, firing
from trio_routines.logs import (
    FireFormatter,
    JournalFormatter,
    JsonFormatter,
    TextFormatter,
    configure_logging,
    journal_stream,
    log,
    log_fields,
)


def text_of(made: logging.LogRecord) -> str:
    """The line without its instant."""
    line = TextFormatter().format(made)
    assert re.match(STAMP + " ", line)
    return line[25:]


# -- the text line -----------------------------------------------------------------------------


def test_a_slot_is_shown_as_short_as_it_is_exact() -> None:
    def shown(slot: datetime) -> str:
        return text_of(record("ran", routine="r", slot=slot))

    assert shown(SLOT) == "INFO  r slot=2026-11-30T09:00Z ran"
    assert shown(SLOT.replace(second=30)) == "INFO  r slot=2026-11-30T09:00:30Z ran"
    assert shown(SLOT.replace(second=30, microsecond=5000)) == (
        "INFO  r slot=2026-11-30T09:00:30.005Z ran"
    )
    assert shown(SLOT.replace(microsecond=5000)) == "INFO  r slot=2026-11-30T09:00:00.005Z ran"


def test_a_routine_without_a_slot_or_a_slot_without_a_routine_leads_nothing() -> None:
    assert text_of(record("r: ran", routine="r")) == "INFO  r: ran"
    assert text_of(record("r: ran", slot=SLOT)) == "INFO  r: ran"
    assert text_of(record("r: ran", routine="r", slot="2026-11-30T09:00Z")) == "INFO  r: ran"


def test_only_the_colons_after_the_routines_name_are_dropped() -> None:
    assert text_of(record("feed:XML parsed", routine="feed", slot=SLOT)) == (
        "INFO  feed slot=2026-11-30T09:00Z XML parsed"
    )
    assert text_of(record("feed:: : done", routine="feed", slot=SLOT)) == (
        "INFO  feed slot=2026-11-30T09:00Z : done"
    )


def test_a_hosts_format_leaves_the_records_message_as_it_found_it() -> None:
    own = FireFormatter("%(levelname)s %(message)s")
    with firing(FireContext("routine", "routine:digest", routine="digest", slot=SLOT)):
        made = record("digest: completed (%dms)", 12)
    assert own.format(made) == "INFO digest slot=2026-11-30T09:00Z completed (12ms)"
    assert made.message == "digest: completed (12ms)"  # what the next handler is handed


# -- the journal line and the JSON line -------------------------------------------------------


def test_a_level_without_a_name_of_ours_is_an_informational_journal_line() -> None:
    assert JournalFormatter().format(record("x", level=25)) == "<6>Level 25 x"
    assert JournalFormatter().format(record("x", level=logging.CRITICAL)) == "<2>FATAL x"


def test_a_json_line_carries_the_process_of_the_record_else_this_one() -> None:
    forwarded = record("from a worker")
    forwarded.process = 4242  # a record made in another process, handed over (a queue)
    assert json.loads(JsonFormatter().format(forwarded))["pid"] == 4242
    unknown = record("no process recorded")
    unknown.process = None  # logging.logProcesses = False
    assert json.loads(JsonFormatter().format(unknown))["pid"] == os.getpid()


# -- fields for a stretch of code -------------------------------------------------------------


def test_nested_fields_add_up_the_inner_winning_and_each_block_takes_its_own_away() -> None:
    with log_fields(late_ms=12, outcome="x"):
        with log_fields(outcome="completed", ms=5):
            inner = record("inner")
        outer = record("outer")
    after = record("after")
    assert (inner.late_ms, inner.outcome, inner.ms) == (12, "completed", 5)  # type: ignore[attr-defined]
    assert (outer.late_ms, outer.outcome) == (12, "x")  # type: ignore[attr-defined]
    assert not hasattr(outer, "ms")
    assert not any(hasattr(after, key) for key in ("late_ms", "outcome", "ms"))


def test_leaving_a_block_not_entered_or_left_already_changes_nothing() -> None:
    block = log_fields(late_ms=1)
    block.__exit__(None, None, None)  # never entered
    with log_fields(outcome="kept"):
        with block:
            pass
        block.__exit__(None, None, None)  # left twice
        assert record("x").outcome == "kept"  # type: ignore[attr-defined]
    assert not hasattr(record("x"), "outcome")


# -- whether stderr is the journal's ----------------------------------------------------------


def test_journal_stream_reads_the_environment_and_stderr_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with (tmp_path / "err").open("w") as stream:
        own = os.fstat(stream.fileno())
        monkeypatch.setattr(sys, "stderr", stream)
        monkeypatch.setenv("JOURNAL_STREAM", f"{own.st_dev}:{own.st_ino}")
        assert journal_stream()
        assert journal_stream({"JOURNAL_STREAM": f"{own.st_dev}:{own.st_ino}"})
        monkeypatch.setenv("JOURNAL_STREAM", f"{own.st_dev}:{own.st_ino + 1}")
        assert not journal_stream()


def test_a_stream_without_a_descriptor_or_a_value_that_is_no_number_is_not_the_journal(
    tmp_path: Path,
) -> None:
    with (tmp_path / "err").open("w") as stream:
        own = os.fstat(stream.fileno())
        assert not journal_stream({"JOURNAL_STREAM": f"{own.st_dev}:{own.st_ino}"}, io.StringIO())
        assert not journal_stream({"JOURNAL_STREAM": f"{own.st_dev}:inode"}, stream)
        assert not journal_stream({"JOURNAL_STREAM": f"{own.st_dev}:{own.st_ino}:0"}, stream)


# -- the handler the command line sets up ------------------------------------------------------


@contextmanager
def stderr_in(path: Path) -> Iterator[None]:
    """stderr a file of its own for the block (pytest swaps its own in at each phase, so not
    a fixture); the logger's setup put back afterwards."""
    saved = (sys.stderr, log.handlers[:], log.level, log.propagate)
    with path.open("w") as stream:
        sys.stderr = stream
        try:
            yield
        finally:
            sys.stderr, log.handlers[:], log.level, log.propagate = saved


def lines_of(path: Path) -> list[str]:
    sys.stderr.flush()
    return path.read_text().splitlines()


def fire_line() -> None:
    with firing(FireContext("routine", "routine:digest", routine="digest", slot=SLOT)):
        log.info("digest: completed (%dms)", 12)


def test_each_format_is_written_to_stderr_with_the_fires_fields(tmp_path: Path) -> None:
    stderr = tmp_path / "stderr"
    with stderr_in(stderr):
        configure_logging("json", "info")
        fire_line()
        entry = json.loads(lines_of(stderr)[-1])
        configure_logging("journal", "info")
        fire_line()
        journal = lines_of(stderr)[-1]
        configure_logging("text", "info")
        fire_line()
        text = lines_of(stderr)[-1]
    assert (entry["level"], entry["message"], entry["routine"]) == (
        "INFO",
        "digest: completed (12ms)",
        "digest",
    )
    assert journal == "<6>INFO  digest slot=2026-11-30T09:00Z completed (12ms)"
    assert re.fullmatch(STAMP + r" INFO  digest slot=2026-11-30T09:00Z completed \(12ms\)", text)
    assert len(stderr.read_text().splitlines()) == 3  # one handler at a time


@pytest.mark.parametrize("bad", ["bogus", "Text", ""])
def test_a_format_that_is_none_of_the_three_is_refused_and_the_handlers_kept(
    tmp_path: Path, bad: str
) -> None:
    with stderr_in(tmp_path / "stderr"):
        configure_logging("text", "info")
        handlers = log.handlers[:]
        with pytest.raises(ValueError, match=r"^log_format must be ") as refused:
            configure_logging(bad, "info")
        assert log.handlers == handlers
    assert str(refused.value) == f"log_format must be text, json, journal or None, not {bad!r}"


@pytest.mark.parametrize("bad", ["loud", "", "info ", 20])
def test_a_level_that_is_none_of_loggings_is_refused_and_the_handlers_kept(
    tmp_path: Path, bad: Any
) -> None:
    with stderr_in(tmp_path / "stderr"):
        configure_logging("text", "warning")
        handlers, level = log.handlers[:], log.level
        with pytest.raises(ValueError, match=r"^level must be ") as refused:
            configure_logging("json", bad)
        assert (log.handlers, log.level) == (handlers, level)
    assert str(refused.value) == (
        f"level must be a name of logging's levels (debug, info…), not {bad!r}"
    )


def test_no_format_named_is_text_unless_stderr_is_the_journals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stderr = tmp_path / "stderr"
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    with stderr_in(stderr):
        configure_logging(None, "info")
        fire_line()
        text = lines_of(stderr)[-1]
        own = os.fstat(sys.stderr.fileno())
        monkeypatch.setenv("JOURNAL_STREAM", f"{own.st_dev}:{own.st_ino}")
        configure_logging(None, "info")
        fire_line()
        journal = lines_of(stderr)[-1]
    assert re.fullmatch(STAMP + r" INFO  digest slot=2026-11-30T09:00Z completed \(12ms\)", text)
    assert journal == "<6>INFO  digest slot=2026-11-30T09:00Z completed (12ms)"


def test_the_level_is_the_least_logged_and_nothing_reaches_the_root_logger(
    tmp_path: Path,
) -> None:
    class Seen(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.records: list[logging.LogRecord] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)

    stderr = tmp_path / "stderr"
    seen = Seen()
    logging.getLogger().addHandler(seen)
    try:
        with stderr_in(stderr):
            configure_logging("journal", "debug")  # as the command line passes it
            log.debug("looked")
            configure_logging("journal", "warning")
            log.info("not shown")
            log.warning("shown")
            lines = lines_of(stderr)
    finally:
        logging.getLogger().removeHandler(seen)
    assert lines == ["<7>DEBUG looked", "<4>WARN  shown"]
    assert seen.records == []
