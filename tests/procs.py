"""Helpers for tests that start and watch real processes."""

from __future__ import annotations

import glob
import io
import itertools
import json
import locale
import logging
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import traceback
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import trio

from trio_routines.agent import Usage
from trio_routines.converter import wakeup_from_json, wakeup_to_json
from trio_routines.records import Outcome
from trio_routines.stores.directory import DirectoryStore
from trio_routines.stores.directory.ledgerfile import record_usage_sync
from trio_routines.stores.directory.wakeupjournal import snapshot
from trio_routines.stores.directory.wakeuplog import WakeupLog

T = TypeVar("T")

#: This tree: what a process a test starts imports ``trio_routines`` from (not an installed copy).
TREE = Path(__file__).resolve().parent.parent


def tree_environ(**more: str) -> dict[str, str]:
    """Our environment with this tree on the path, and ``more``."""
    return {**os.environ, "PYTHONPATH": str(TREE), **more}


def script(path: Path, text: str) -> list[str]:
    """Write the Python script ``text`` (dedented) to ``path``: the command that runs it."""
    path.write_text(textwrap.dedent(text))
    return [sys.executable, str(path)]


def run_script(path: Path, text: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    """Run the Python script ``text`` (written to ``path``) with this tree's package and
    ``env`` added to our environment, bounded; its output captured."""
    return subprocess.run(
        script(path, text), capture_output=True, env=tree_environ(**env), timeout=60
    )


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


def faketime_library() -> str | None:
    """Debian's ``libfaketime.so.1`` (package ``faketime``), if installed."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    found += sorted(glob.glob("/usr/lib/faketime/libfaketime.so.1"))
    return found[0] if found else None


class FakeClock:
    """A wall clock for the processes started with :meth:`environ`: libfaketime preloaded fakes
    their wall clock only (``FAKETIME_DONT_FAKE_MONOTONIC=1``: Trio's clock, which the scheduler
    sleeps on, stays real) as an offset from the real one, read from ``path`` at every call,
    so :meth:`set` moves it while they run. Without the library (``None``) it is the real clock."""

    def __init__(self, path: Path, library: str | None) -> None:
        self.path = path
        self.library = library
        self.offset = 0.0  # seconds ahead of the real clock

    def set(self, when: datetime) -> None:
        if self.library is None:
            raise RuntimeError("libfaketime is not installed: the wall clock cannot be set")
        self.offset = when.timestamp() - time.time()
        self.path.write_text(f"{self.offset:+.3f}\n")

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.offset)

    def environ(self) -> dict[str, str]:
        if self.library is None:
            return {}
        return {
            "LD_PRELOAD": self.library,
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_NO_CACHE": "1",
        }


def clock_far_ahead(tmp_path: Path) -> dict[str, str]:
    """The environment that sets a process's wall clock 400 days ahead (libfaketime, which
    must be installed), its monotonic clock left real."""
    library = faketime_library()
    assert library is not None, "libfaketime is not installed (Debian's faketime package)"
    clock = FakeClock(tmp_path / "wall.faketime", library)
    clock.set(datetime.now(UTC) + timedelta(days=400))
    return clock.environ()


def before_a_minute(path: Path, lead: float) -> FakeClock:
    """A clock ``lead`` seconds before a minute boundary, for a test that waits for a minute's
    herd (cron has minute resolution): the processes started with it meet the boundary after
    ``lead`` seconds rather than up to a minute. The test computes its slots from
    :meth:`FakeClock.now`. Without libfaketime it is the real clock, and the test waits as long
    as it would have."""
    clock = FakeClock(path, faketime_library())
    if clock.library is not None:
        ahead = datetime.now(UTC) + timedelta(seconds=lead)
        boundary = ahead.replace(second=0, microsecond=0) + timedelta(minutes=1)
        clock.set(boundary - timedelta(seconds=lead))
    return clock


class Env:
    """A temporary project: a routines directory, a state directory, a marker file; the
    processes it starts read ``clock`` as their wall clock, when one is set."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.routines = root / "routines"
        self.routines.mkdir()
        self.state = root / "state"
        self.marker = root / "marker"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.clock: FakeClock | None = None

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
        env["PYTHONPATH"] = str(TREE)
        if self.clock is not None:
            env.update(self.clock.environ())
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

    def run_cli(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """:meth:`cli` in this process (see :func:`in_process`): for a test that checks what a
        command prints and its exit status, not how the process behaves."""
        return in_process(self.argv(*args)[3:], cwd=self.root, environ=self.environ(), stdin=stdin)

    def start(
        self, *args: str, log: str = "serve.log", extra: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """The command as a process of its own, its stderr in ``log``; ``extra`` variables
        added to its environment (which holds no ``TRIO_ROUTINES_*`` of ours otherwise)."""
        with (self.root / log).open("wb") as err:
            proc = subprocess.Popen(
                self.argv(*args),
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=self.root,
                env={**self.environ(), **(extra or {})},
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
        """``history NAME --json``: in this process, or as a process from inside a Trio test."""
        read = self.cli if inside_trio() else self.run_cli
        result = read("history", name, "--json")
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
        usage: Usage | None = None,
    ) -> None:
        store = DirectoryStore(self.state)
        assert store.claim_sync(name, slot, fired_at or slot).taken
        if outcome is not None:
            store.settle_sync(name, slot, outcome, ms, error=error, output=output, usage=usage)
        if usage is not None:  # as the runtime does at the turn's end: the ledger counts it
            record_usage_sync(self.state, "routine", name, fired_at or slot, usage)

    def wakeups(self) -> list[dict[str, Any]]:
        """The pending wake-ups, in stored order, as the store reads them (a ``wakeups.json``
        left to take over is taken over first)."""
        log = WakeupLog(self.state, 10.0)
        if not log.refresh():
            log.take_over()
        return [wakeup_to_json(w) for w in log.index]

    def write_wakeups(self, entries: list[dict[str, Any]]) -> None:
        """Make ``entries`` the pending wake-ups, in that order: a new journal generation,
        written under the writers' lock (an edit by hand, as tests make wake-ups due)."""
        log = WakeupLog(self.state, 10.0)
        if not log.refresh():
            log.take_over()
        data = snapshot((wakeup_from_json(e), n) for n, e in enumerate(entries, 1))
        with log.file.locked() as directory:
            log.journal.write_generation(directory, data)
            log.journal.sync_directory(directory)

    def write_legacy_wakeups(self, entries: list[dict[str, Any]]) -> None:
        """Write ``entries`` as an earlier version would (``wakeups.json``): the store takes
        them over on its next use, except the ids it holds already."""
        path = self.state / "schedule" / "wakeups.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(entries))


def inside_trio() -> bool:
    try:
        trio.lowlevel.current_trio_token()
    except RuntimeError:
        return False
    return True


def _stream(fd: int, like: Any, fallback_errors: str) -> io.TextIOWrapper:
    """A text stream on ``fd`` set up as this interpreter set up ``like`` at its start (the
    encoding and error handler a ``python -m`` child given the same environment gets)."""
    encoding = getattr(like, "encoding", None) or locale.getencoding()
    errors = getattr(like, "errors", None) or fallback_errors
    return io.TextIOWrapper(
        io.FileIO(fd, "rb" if fd == 0 else "wb", closefd=False), encoding=encoding, errors=errors
    )


def _interrupt(thread: int, timed_out: threading.Event) -> None:
    timed_out.set()
    signal.pthread_kill(thread, signal.SIGINT)


def in_process(
    argv: list[str],
    *,
    cwd: Path,
    environ: dict[str, str],
    stdin: str | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``trio_routines.cli.main(argv)`` run here as ``python -m trio_routines`` would run it
    with ``environ`` in ``cwd``: descriptors 0, 1 and 2 (and ``sys.std*`` on them) are
    temporary files, stdin holding ``stdin``; the exit status is what the process would exit
    with (SystemExit's code, 1 with the traceback on stderr for an uncaught exception); the
    environment, the working directory and the ``trio_routines`` logger are put back after.
    Like ``subprocess.run(timeout=60)`` a command still running after ``timeout`` seconds
    (a ``serve`` that should have refused to start) is interrupted (SIGINT, which ends a
    command) and raises :class:`subprocess.TimeoutExpired`, never hangs the suite.

    For tests that check a command's output and status. It calls ``trio.run``, so never from
    inside a Trio test; what concerns the process itself (signals, pipes, inherited
    environment, process groups, ``serve``) needs :meth:`Env.cli` or :meth:`Env.start`.
    """
    if inside_trio():
        raise RuntimeError("in_process runs trio.run: call Env.cli from inside a Trio test")
    from trio_routines.cli import main

    logger = logging.getLogger("trio_routines")
    saved_logger = (logger.handlers[:], logger.level, logger.propagate)
    saved_environ = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_streams = (sys.stdin, sys.stdout, sys.stderr)
    for stream in saved_streams[1:]:
        stream.flush()
    saved_fds = [os.dup(fd) for fd in (0, 1, 2)]
    timed_out = threading.Event()
    with ExitStack() as temporary:
        files = [temporary.enter_context(tempfile.TemporaryFile()) for _ in range(3)]
        files[0].write((stdin or "").encode(locale.getencoding()))
        files[0].seek(0)
        try:
            for fd, file in enumerate(files):
                os.dup2(file.fileno(), fd)
            streams = (
                _stream(0, sys.__stdin__, "strict"),
                _stream(1, sys.__stdout__, "strict"),
                _stream(2, sys.__stderr__, "backslashreplace"),
            )
            sys.stdin, sys.stdout, sys.stderr = streams
            os.environ.clear()
            os.environ.update(environ)
            os.chdir(cwd)
            watchdog = threading.Timer(timeout, _interrupt, (threading.get_ident(), timed_out))
            watchdog.start()
            try:
                status = main(argv)
            except SystemExit as exit:
                code = exit.code
                if code is None or isinstance(code, int):
                    status = code or 0
                else:
                    print(code, file=sys.stderr)
                    status = 1
            except BaseException:  # what the interpreter does with an uncaught exception
                traceback.print_exc()
                status = 1
            finally:
                watchdog.cancel()
                watchdog.join()
            for stream in streams[1:]:
                stream.flush()
        finally:
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_environ)
            sys.stdin, sys.stdout, sys.stderr = saved_streams
            for fd, saved in enumerate(saved_fds):
                os.dup2(saved, fd)
                os.close(saved)
            logger.handlers[:], saved_level, logger.propagate = saved_logger
            logger.setLevel(saved_level)
        outputs = []
        for file in files[1:]:
            file.seek(0)
            outputs.append(file.read())
    # What subprocess.run(text=True) does with the bytes: the locale's encoding, universal newlines.
    out, err = (
        io.TextIOWrapper(io.BytesIO(data), encoding=locale.getencoding()).read() for data in outputs
    )
    args = ["python", "-m", "trio_routines", *argv]
    if timed_out.is_set():
        raise subprocess.TimeoutExpired(args, timeout, out, err)
    return subprocess.CompletedProcess(args, status, out, err)


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
