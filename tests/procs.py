"""Helpers for tests that start and watch real processes."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from trio_routines.records import Outcome
from trio_routines.stores.directory import DirectoryStore

T = TypeVar("T")


def alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie (dead, not yet reaped by whoever adopted it) is dead."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # The state follows the parenthesized command name, which may itself contain spaces.
    state = stat.rpartition(")")[2].split()[0]
    return state not in ("Z", "X")


def wait_for(probe: Callable[[], T], timeout: float = 15.0, what: str = "the condition") -> T:
    """Poll ``probe`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


class Env:
    """A temporary project: a routines directory, a state directory, a marker file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.routines = root / "routines"
        self.routines.mkdir()
        self.state = root / "state"
        self.marker = root / "marker"
        self.procs: list[subprocess.Popen[bytes]] = []

    def routine(self, name: str, prompt: str = "do the thing", **keys: str) -> None:
        front = "".join(f"{key}: {value}\n" for key, value in keys.items())
        (self.routines / f"{name}.md").write_text(f"---\n{front}---\n{prompt}\n")

    def argv(self, *args: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "trio_routines",
            *args,
            "--state",
            str(self.state),
            "--routines",
            str(self.routines),
        ]

    def environ(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRIO_ROUTINES_")}
        env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
        return env

    def cli(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args),
            input=stdin,
            capture_output=True,
            text=True,
            cwd=self.root,
            env=self.environ(),
            timeout=60,
        )

    def start(self, *args: str, log: str = "serve.log") -> subprocess.Popen[bytes]:
        with (self.root / log).open("wb") as err:
            proc = subprocess.Popen(
                self.argv(*args),
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=self.root,
                env=self.environ(),
            )
        self.procs.append(proc)
        return proc

    def log(self, name: str = "serve.log") -> str:
        return (self.root / name).read_text()

    def serve(self, agent: str, *extra: str, log: str = "serve.log") -> subprocess.Popen[bytes]:
        proc = self.start("serve", "--agent", agent, *extra, log=log)
        wait_for(lambda: "wake-ups:" in self.log(log), 20, f"serve to start ({log})")
        return proc

    def history(self, name: str) -> list[dict[str, Any]]:
        result = self.cli("history", name, "--json")
        assert result.returncode == 0, result.stderr
        entries: list[dict[str, Any]] = json.loads(result.stdout)
        return entries

    def claims(self, name: str) -> list[dict[str, Any]]:
        """The routine's history without its gaps: the claims, oldest first."""
        return [entry for entry in self.history(name) if "slot" in entry]

    def seed(
        self,
        name: str,
        slot: datetime,
        outcome: Outcome | None = Outcome.COMPLETED,
        *,
        fired_at: datetime | None = None,
        ms: int = 5,
        error: str | None = None,
        output: str | None = None,
    ) -> None:
        store = DirectoryStore(self.state)
        assert store.claim_sync(name, slot, fired_at or slot).taken
        if outcome is not None:
            store.settle_sync(name, slot, outcome, ms, error=error, output=output)

    def wakeups(self) -> list[dict[str, Any]]:
        path = self.state / "schedule" / "wakeups.json"
        data: list[dict[str, Any]] = json.loads(path.read_text()) if path.exists() else []
        return data

    def write_wakeups(self, entries: list[dict[str, Any]]) -> None:
        path = self.state / "schedule" / "wakeups.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(entries))


def stop(proc: subprocess.Popen[bytes], signum: int = signal.SIGTERM, timeout: float = 20) -> int:
    proc.send_signal(signum)
    return proc.wait(timeout=timeout)


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    assert len(stderr.splitlines()) == 1, stderr
    assert stderr.endswith("\n")
    return stderr


def years_ago(years: int) -> datetime:
    return datetime(datetime.now(UTC).year - years, 1, 1, tzinfo=UTC)


def turn_spans(marker: Path) -> list[tuple[float, float]]:
    """The (start, end) of each turn a test agent noted in ``marker`` as ``start ID T`` and
    ``end ID T`` lines (wall seconds), sorted; a turn never ended ends at infinity."""
    starts: dict[str, float] = {}
    spans = []
    for line in lines(marker):
        what, turn, at = line.split()
        if what == "start":
            starts[turn] = float(at)
        else:
            spans.append((starts.pop(turn), float(at)))
    spans.extend((start, float("inf")) for start in starts.values())
    return sorted(spans)


def assert_no_overlap(spans: list[tuple[float, float]]) -> None:
    """No turn starts before the one before it ended."""
    for (_, end), (begin, _) in itertools.pairwise(spans):
        assert begin >= end, f"two turns of one session overlapped: {spans}"
