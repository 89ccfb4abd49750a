"""Hostile state: what anyone who can write below the state directory may plant there.

* a FIFO, socket or device where a claim or ``wakeups.json`` should be: nothing blocks (a FIFO
  without a writer blocks a plain ``open`` forever), each bad file is one warning naming it,
  everything else goes on -- ``history``, ``serve``'s boot and its HTTP surface, in real
  processes that must still stop on SIGTERM;
* a symlink where a claim, ``wakeups.json``, its lock, its temp file or a subdirectory should
  be: never followed; the target's bytes and mtime stay as they were;
* JSON nested too deeply for Python's parser (``[`` × 100,000): read as any other damage,
  never a traceback, never a dead loop.

Unit tests of the one helper that opens state files (``stores/safefile.py``) come first.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import stat
import subprocess
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
from procs import Env, stop, wait_for, years_ago

from trio_routines.errors import StateFault
from trio_routines.instants import format_iso, slot_name
from trio_routines.records import Outcome
from trio_routines.routines import Routine
from trio_routines.scheduler import Scheduler
from trio_routines.stores.directory import DirectoryStore
from trio_routines.stores.safefile import Refused, open_dir, open_file, read_file
from trio_routines.testing import ScriptedAgent
from trio_routines.wakeups import WakeupRequest

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
DEEP = "[" * 100_000


def plant(kind: str, path: Path, target: Path | None = None) -> None:
    """Put a non-regular file of ``kind`` at ``path``."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        os.mknod(path, stat.S_IFSOCK | 0o600)
    elif kind == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # what /dev/null is
        except PermissionError:  # the suite runs as root; a device node needs it
            pytest.skip("creating a device node needs root")
    elif kind == "symlink":
        assert target is not None
        path.symlink_to(target)
    else:
        path.mkdir()


KINDS = {
    "fifo": "a FIFO",
    "socket": "a socket",
    "device": "a character device",
    "symlink": "a symbolic link",
    "directory": "a directory",
}


class Victim:
    """A file outside the state that a planted link points at; it must never change."""

    def __init__(self, path: Path, content: bytes = b'{"firedAt":"precious"}') -> None:
        self.path = path
        path.write_bytes(content)
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))
        self.content = content

    def untouched(self) -> bool:
        info = self.path.stat()
        return self.path.read_bytes() == self.content and info.st_mtime_ns == 1_000_000_000


# --- the helper ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_open_file_refuses_what_is_not_a_regular_file_without_blocking(
    tmp_path: Path, kind: str
) -> None:
    victim = Victim(tmp_path / "victim")
    plant(kind, tmp_path / "x", victim.path)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(Refused, match=f"x is {KINDS[kind]}, not a regular file"):
            read_file(fd, "x", tmp_path / "x", 4096)
        with pytest.raises(Refused):
            open_file(fd, "x", tmp_path / "x", os.O_RDWR, 4096)
    finally:
        os.close(fd)
    assert victim.untouched()


def test_open_file_refuses_a_file_over_its_limit_unread(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 4097)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(Refused, match="holds 4097 bytes, more than 4096"):
            read_file(fd, "big", tmp_path / "big", 4096)
        assert read_file(fd, "big", tmp_path / "big", 4097) == b"x" * 4097
    finally:
        os.close(fd)


def test_open_dir_never_follows_a_link_but_reports_a_file_as_enotdir(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "file").write_text("x")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(Refused, match="link is a symbolic link, not a directory"):
            open_dir(fd, "link", tmp_path / "link", create=True)
        with pytest.raises(NotADirectoryError) as raised:
            open_dir(fd, "file", tmp_path / "file", create=True)
        assert raised.value.filename == str(tmp_path / "file")  # the full path, not the name
    finally:
        os.close(fd)
    assert list((tmp_path / "elsewhere").iterdir()) == []


# --- claims: the store -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
async def test_a_planted_claim_is_refused_reported_and_its_slot_stays_taken(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    victim = Victim(tmp_path / "victim")
    store = DirectoryStore(tmp_path / "state")
    await store.claim("daily", T0, T0)
    await store.settle("daily", T0, Outcome.COMPLETED, 1)
    planted = store.claim_dir("daily") / slot_name(T0 + timedelta(hours=1))
    plant(kind, planted, victim.path)

    fires = await store.history("daily")
    assert [(f.slot, f.outcome) for f in fires] == [
        (T0, Outcome.COMPLETED),
        (T0 + timedelta(hours=1), None),
    ]
    newest = await store.latest_fire("daily")
    assert newest is not None
    assert (newest.slot, newest.fired_at, newest.outcome) == (T0 + timedelta(hours=1),) * 2 + (
        None,
    )
    # what the boot's reconcile does with an unsettled newest claim: refused, never written
    await store.settle("daily", T0 + timedelta(hours=1), Outcome.INTERRUPTED, if_unsettled=True)
    assert (await store.claim("daily", T0 + timedelta(hours=1), T0)).status.value == "duplicate"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= 30]
    assert warnings
    assert all(f"{planted} is {KINDS[kind]}" in w for w in warnings), warnings
    assert all("\n" not in w for w in warnings)
    assert victim.untouched()
    assert planted.is_symlink() if kind == "symlink" else not planted.is_file()


@pytest.mark.parametrize("level", ["schedule", "claims", "routine"])
async def test_a_planted_directory_link_is_refused_and_nothing_is_written_through_it(
    tmp_path: Path, level: str
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    state = tmp_path / "state"
    parts = {"schedule": ["schedule"], "claims": ["schedule", "claims"]}
    link = state.joinpath(*parts.get(level, ["schedule", "claims", "daily"]))
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(elsewhere)
    store = DirectoryStore(state)
    for call in (
        lambda: store.claim("daily", T0, T0),
        lambda: store.history("daily"),
        lambda: store.latest_fire("daily"),
    ):
        with pytest.raises(StateFault, match=f"{re.escape(str(link))} is a symbolic link"):
            await call()
    await store.settle("daily", T0, Outcome.COMPLETED, 1)  # never raises: logged
    if level == "schedule":
        request = WakeupRequest(session="s", prompt="p", fire_at=T0 + timedelta(hours=1))
        with pytest.raises(StateFault, match="is a symbolic link"):
            await store.add_wakeup(request, T0)
        with pytest.raises(StateFault, match="is a symbolic link"):
            await store.list_wakeups()
    assert list(elsewhere.iterdir()) == []


def test_the_state_directory_itself_may_be_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "state").symlink_to(real)
    store = DirectoryStore(tmp_path / "state")
    assert store.claim_sync("daily", T0, T0).taken
    assert (real / "schedule" / "claims" / "daily" / slot_name(T0)).is_file()


# --- wakeups.json (an earlier version's layout, taken over) and wakeups.journal -------------


@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "symlink"])
async def test_a_planted_wakeups_file_is_refused_then_kept_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    victim = Victim(tmp_path / "victim", b"[]")
    schedule = tmp_path / "state" / "schedule"
    schedule.mkdir(parents=True)
    plant(kind, schedule / "wakeups.json", victim.path)
    store = DirectoryStore(tmp_path / "state")
    assert await store.list_wakeups() == []  # taken over: nothing usable, moved aside
    assert await store.list_wakeups() == []  # polled again: warned once, not every poll
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= 30]
    assert f"wakeups.json is {KINDS[kind]}" in warnings[0]
    assert len([w for w in warnings if "wakeups.json is" in w]) == 1
    (aside,) = schedule.glob("wakeups.json.corrupt-*")
    assert aside.is_symlink() if kind == "symlink" else not aside.is_file()  # the entry itself
    assert not (schedule / "wakeups.json").exists()
    assert not (schedule / "wakeups.json").is_symlink()
    added = await store.add_wakeup(
        WakeupRequest(session="s", prompt="p", fire_at=T0 + timedelta(hours=1)), T0
    )
    assert [w.id for w in await store.list_wakeups()] == [added.id]
    assert victim.untouched()


@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "symlink"])
async def test_a_planted_journal_is_refused_then_kept_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    victim = Victim(tmp_path / "victim", b"")
    schedule = tmp_path / "state" / "schedule"
    schedule.mkdir(parents=True)
    plant(kind, schedule / "wakeups.journal", victim.path)
    store = DirectoryStore(tmp_path / "state")
    assert await store.list_wakeups() == []
    assert await store.take_due_wakeup(T0) is None  # polled again: warned once
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= 30]
    assert len(warnings) == 1
    assert f"wakeups.journal is {KINDS[kind]}" in warnings[0]
    added = await store.add_wakeup(
        WakeupRequest(session="s", prompt="p", fire_at=T0 + timedelta(hours=1)), T0
    )
    assert [w.id for w in await DirectoryStore(tmp_path / "state").list_wakeups()] == [added.id]
    (aside,) = schedule.glob("wakeups.journal.corrupt-*")
    assert aside.is_symlink() if kind == "symlink" else not aside.is_file()  # the entry itself
    assert (schedule / "wakeups.journal").is_file()
    assert not (schedule / "wakeups.journal").is_symlink()
    assert victim.untouched()


@pytest.mark.parametrize("field", ["id", "session", "prompt"])
async def test_a_journal_line_naming_a_lone_surrogate_is_damage_and_blocks_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, field: str
) -> None:
    # JSON's escapes name text no add lets in (and no line can be written with): read as a
    # valid entry, its removal failed at every take and held back each wake-up behind it.
    store = DirectoryStore(tmp_path / "state")
    before = T0 - timedelta(minutes=2)
    kept = await store.add_wakeup(WakeupRequest(session="s", prompt="p", fire_at=T0), before)
    planted = {"id": "x", "session": "s", "prompt": "p", "fireAt": format_iso(T0)}
    planted[field] += "\ud800"  # a JSON escape, read as a lone surrogate
    journal = tmp_path / "state" / "schedule" / "wakeups.journal"
    with journal.open("a", encoding="ascii") as handle:
        handle.write(json.dumps({"op": "add", "n": 0, "wakeup": planted}) + "\n")
    behind = await store.add_wakeup(WakeupRequest(session="t", prompt="p", fire_at=T0), before)
    warned = [r.getMessage() for r in caplog.records if r.levelno >= 30]
    assert f"the {field} is not storable text (a NUL, or not valid Unicode)" in warned[0]
    taken = [await store.take_due_wakeup(T0) for _ in range(3)]
    assert [w.id if w else None for w in taken] == [kept.id, behind.id, None]
    assert len(list(journal.parent.glob("wakeups.journal.corrupt-*"))) == 1  # compacted
    assert await DirectoryStore(tmp_path / "state").list_wakeups() == []


async def test_a_planted_lock_link_is_refused(tmp_path: Path) -> None:
    victim = Victim(tmp_path / "victim")
    schedule = tmp_path / "state" / "schedule"
    schedule.mkdir(parents=True)
    (schedule / "wakeups.lock").symlink_to(victim.path)
    store = DirectoryStore(tmp_path / "state")
    request = WakeupRequest(session="s", prompt="p", fire_at=T0 + timedelta(hours=1))
    with pytest.raises(StateFault, match=r"wakeups\.lock is a symbolic link"):
        await store.add_wakeup(request, T0)
    assert victim.untouched()


async def test_a_wakeups_file_over_the_bound_is_refused_unread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trio_routines.stores.directory import wakeupfile

    monkeypatch.setattr(wakeupfile, "MAX_BYTES", 1000)
    schedule = tmp_path / "schedule"
    schedule.mkdir(parents=True)
    entry = {"id": "x", "session": "s", "prompt": "p" * 2000, "fireAt": format_iso(T0)}
    (schedule / "wakeups.json").write_text(json.dumps([entry]))
    store = DirectoryStore(tmp_path)
    assert await store.list_wakeups() == []
    assert any("more than 1000 — refused" in r.getMessage() for r in caplog.records)
    (aside,) = schedule.glob("wakeups.json.corrupt-*")
    assert json.loads(aside.read_text()) == [entry]  # kept, unread
    # the journal has no such bound: it is read by its appended lines, never whole
    request = WakeupRequest(session="s", prompt="q" * 2000, fire_at=T0 + timedelta(hours=1))
    added = await store.add_wakeup(request, T0)
    assert await DirectoryStore(tmp_path).list_wakeups() == [added]


# --- nesting too deep ------------------------------------------------------------------------


async def test_deep_nesting_in_a_claim_reads_as_an_unsettled_claim(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    directory = store.claim_dir("daily")
    directory.mkdir(parents=True)
    (directory / slot_name(T0)).write_text(DEEP[:4000])  # within the claim size bound
    (fire,) = await store.history("daily")
    assert (fire.slot, fire.fired_at, fire.outcome) == (T0, T0, None)
    await store.settle("daily", T0, Outcome.INTERRUPTED, if_unsettled=True)
    assert (await store.latest_fire("daily")).outcome is Outcome.INTERRUPTED  # type: ignore[union-attr]


async def test_deep_nesting_in_wakeups_is_corruption_kept_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    schedule = tmp_path / "schedule"
    schedule.mkdir(parents=True)
    (schedule / "wakeups.json").write_text(DEEP)
    store = DirectoryStore(tmp_path)
    assert await store.list_wakeups() == []
    assert await store.take_due_wakeup(T0) is None
    assert any("nested too deeply" in r.getMessage() for r in caplog.records)
    await store.add_wakeup(
        WakeupRequest(session="s", prompt="p", fire_at=T0 + timedelta(hours=1)), T0
    )
    (aside,) = schedule.glob("wakeups.json.corrupt-*")
    assert aside.read_text() == DEEP
    assert len(await store.list_wakeups()) == 1


# --- real processes --------------------------------------------------------------------------


def _yearly(env: Env) -> Path:
    """A routine that never fires during a test, its last fire settled a year ago."""
    env.routine("daily", cron='"0 0 1 1 *"')
    env.seed("daily", years_ago(1))
    return env.state / "schedule" / "claims" / "daily" / slot_name(years_ago(0))


def _run(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    # Bounded well below the suite's patience: without the fix these calls never return.
    return subprocess.run(
        env.argv(*args), capture_output=True, text=True, cwd=env.root, env=env.environ(), timeout=30
    )


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "symlink"])
def test_history_and_serve_go_on_past_a_planted_claim_and_stop_on_sigterm(
    env: Env, kind: str
) -> None:
    victim = Victim(env.root / "victim")
    planted = _yearly(env)
    plant(kind, planted, victim.path)

    history = _run(env, "history", "daily", "--json")
    assert history.returncode == 0, history.stderr
    assert [entry.get("outcome") for entry in json.loads(history.stdout)] == ["completed", None]
    assert f"{planted} is {KINDS[kind]}" in history.stderr
    assert "Traceback" not in history.stderr

    proc = env.serve("echo")  # booted past the planted claim (waits for its "wake-ups:" line)
    assert stop(proc) == 0
    log = env.log()
    assert f"{planted} is {KINDS[kind]}" in log
    assert "Traceback" not in log
    assert victim.untouched()


@pytest.mark.slow
def test_the_http_surface_stays_responsive_past_a_planted_fifo(env: Env) -> None:
    planted = _yearly(env)
    os.mkfifo(planted)
    proc = env.start("serve", "--agent", "echo", "--http", "127.0.0.1:0")
    bound = wait_for(
        lambda: re.search(r"HTTP surface on http://127\.0\.0\.1:(\d+)", env.log()), 20, "serve"
    )
    port = int(bound.group(1))

    def call(method: str, path: str, body: dict[str, str] | None = None) -> int:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        try:
            payload = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": "application/json"} if body is not None else {}
            connection.request(method, path, payload, headers)
            return connection.getresponse().status
        finally:
            connection.close()

    statuses: list[int] = []
    workers = [
        threading.Thread(target=lambda: statuses.append(call("GET", "/routines/daily/history")))
        for _ in range(20)  # more than the store's 16 threads
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
    assert statuses == [200] * 20
    fire: Callable[[], int] = lambda: call("POST", "/fire", {"name": "daily"})  # noqa: E731
    assert fire() < 500
    assert stop(proc) == 0


@pytest.mark.slow
def test_history_and_serve_survive_deep_nesting_in_claims_and_wakeups(env: Env) -> None:
    planted = _yearly(env)
    planted.write_text(DEEP[:4000])
    (env.state / "schedule" / "wakeups.json").write_text(DEEP)

    history = _run(env, "history", "daily", "--json")
    assert history.returncode == 0, history.stderr
    assert [entry.get("outcome") for entry in json.loads(history.stdout)] == ["completed", None]
    assert "Traceback" not in history.stderr

    proc = env.serve("echo")  # its wake loop polled the damaged file at boot
    assert stop(proc) == 0
    log = env.log()
    assert "nested too deeply" in log
    assert "stopped unexpectedly" not in log
    assert "Traceback" not in log


@pytest.mark.slow
@pytest.mark.parametrize("outcome", ["{}", '["completed"]'])
def test_history_and_serve_go_on_past_a_claim_whose_outcome_is_no_string(
    env: Env, outcome: str
) -> None:
    planted = _yearly(env)  # the newest claim: the one the boot reads
    planted.write_text(f'{{"firedAt": "2026-01-01T00:00:00.000Z", "outcome": {outcome}}}')

    history = _run(env, "history", "daily", "--json")
    assert history.returncode == 0, history.stderr
    entries = json.loads(history.stdout)
    assert [entry.get("outcome") for entry in entries] == ["completed", None]
    assert entries[-1]["unknownOutcome"] == json.dumps(json.loads(outcome))
    assert (
        "carries an outcome this version does not know — shown as none, never written over: "
        f"{json.dumps(json.loads(outcome))}" in history.stderr
    )
    assert "Traceback" not in history.stderr

    proc = env.serve("echo")  # booted past it (waits for its "wake-ups:" line)
    assert stop(proc) == 0
    log = env.log()
    assert "Traceback" not in log
    assert "could not be checked" not in log


async def test_the_wake_loop_polls_on_past_deep_nesting(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    schedule = tmp_path / "schedule"
    schedule.mkdir(parents=True)
    (schedule / "wakeups.json").write_text(DEEP)
    agent = ScriptedAgent()
    scheduler = Scheduler(agent=agent, store=DirectoryStore(tmp_path), poll_interval=0.05)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        with trio.fail_after(10):
            while not any("nested too deeply" in r.getMessage() for r in caplog.records):  # noqa: ASYNC110
                await trio.sleep(0.01)
        due = format_iso(datetime.now(UTC) - timedelta(seconds=1))
        entry = {"id": "w1", "session": "s", "prompt": "p", "fireAt": due}
        (schedule / "wakeups.json").write_text(json.dumps([entry]))
        with trio.fail_after(10):
            while not agent.turns:  # noqa: ASYNC110
                await trio.sleep(0.01)
        scheduler.stop(1)
    assert [t.session for t in agent.turns] == ["s"]
    assert not any("stopped unexpectedly" in r.getMessage() for r in caplog.records)


async def test_a_claim_hard_linked_to_a_file_elsewhere_is_not_written_through(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A settle writes its claim in place: planted as a second name of a file outside the
    # state directory, the claim would rewrite that file.
    state, outside = tmp_path / "state", tmp_path / "victim.json"
    store = DirectoryStore(state, writer_process=False)
    await store.claim("a", T0, T0)
    claim = state / "schedule" / "claims" / "a" / slot_name(T0)
    outside.write_bytes(claim.read_bytes())
    claim.unlink()
    os.link(outside, claim)
    before = outside.read_bytes()
    assert not await store.settle("a", T0, Outcome.COMPLETED, 5)
    assert outside.read_bytes() == before
    assert "has 2 names: a hard link to a file elsewhere — refused, not written" in caplog.text
    await store.aclose()


async def test_a_journal_hard_linked_to_a_file_elsewhere_is_not_appended_to(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state, outside = tmp_path / "state", tmp_path / "victim"
    store = DirectoryStore(state, writer_process=False)
    first = await store.add_wakeup(
        WakeupRequest(session="s", prompt="one", fire_at=T0 + timedelta(hours=1)), T0
    )
    journal = state / "schedule" / "wakeups.journal"
    outside.write_bytes(journal.read_bytes())
    journal.unlink()
    os.link(outside, journal)
    before = outside.read_bytes()
    fresh = DirectoryStore(state, writer_process=False)
    second = await fresh.add_wakeup(
        WakeupRequest(session="s", prompt="two", fire_at=T0 + timedelta(hours=1)), T0
    )
    assert outside.read_bytes() == before
    assert (
        f"the wake-up journal {journal} has other names (a hard link to a file elsewhere): "
        "its wake-ups are written anew to a file of its own"
    ) in [r.getMessage() for r in caplog.records]
    # Read, and written anew to a file of the store's own: nothing lost, nothing written out.
    assert {w.id for w in await fresh.list_wakeups()} == {first.id, second.id}
    assert os.stat(journal).st_nlink == 1
    assert {w.id for w in await DirectoryStore(state).list_wakeups()} == {first.id, second.id}
    await store.aclose()
    await fresh.aclose()


async def test_a_journal_line_too_long_is_skipped_with_one_warning_and_nothing_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from trio_routines.stores.directory.wakeupjournal import MAX_LINE

    state = tmp_path / "state"
    store = DirectoryStore(state, writer_process=False)
    hour = T0 + timedelta(hours=1)
    first = await store.add_wakeup(WakeupRequest(session="s", prompt="one", fire_at=hour), T0)
    journal = state / "schedule" / "wakeups.journal"
    with journal.open("ab") as planted:
        planted.write(b"{" + b"x" * (MAX_LINE + 10) + b"}\n")
    fresh = DirectoryStore(state, writer_process=False)
    second = await fresh.add_wakeup(WakeupRequest(session="t", prompt="two", fire_at=hour), T0)
    assert {w.id for w in await fresh.list_wakeups()} == {first.id, second.id}
    warned = [r.getMessage() for r in caplog.records if "longer than" in r.getMessage()]
    assert len(warned) == 1
    assert warned[0].startswith("damaged wake-up journal line at byte ")
    assert f" of {journal} — longer than {MAX_LINE} bytes: skipped (kept aside" in warned[0]
    # The change after it wrote a new generation: the damaged journal is kept aside whole.
    (aside,) = journal.parent.glob("wakeups.journal.corrupt-*")
    assert b"x" * MAX_LINE in aside.read_bytes()
    assert b"x" * 100 not in journal.read_bytes()
    await store.aclose()
    await fresh.aclose()


async def test_a_claim_s_leftover_temp_name_does_not_keep_it_from_its_settle(
    tmp_path: Path,
) -> None:
    # A claim's making cut short between its link and the temp name's removal leaves the
    # temp name as a second name of the claim: not another file, so the settle goes on.
    state = tmp_path / "state"
    store = DirectoryStore(state, writer_process=False)
    await store.claim("a", T0, T0)
    claim = state / "schedule" / "claims" / "a" / slot_name(T0)
    leftover = claim.parent / ".new-claim-0123456789abcdef"
    os.link(claim, leftover)
    assert await store.settle("a", T0, Outcome.COMPLETED, 5)
    [fire] = await store.history("a")
    assert fire.outcome is Outcome.COMPLETED
    assert not leftover.exists()
    await store.aclose()


async def test_a_claim_holding_no_record_is_kept_aside_before_a_settle_writes_over_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A hand-edited claim that is no JSON read as unsettled (as it must: its outcome is
    # unknown), and the next boot settled it `interrupted` over its text: what it held was
    # gone, with one DEBUG line.
    root = tmp_path / "state"
    async with DirectoryStore(root) as store:
        for minute in range(3):
            await store.claim("daily", T0 + timedelta(minutes=minute), T0)
        claims = root / "schedule" / "claims" / "daily"
        damaged = '{"firedAt":"2026-07-07T10:00:00.000Z","outcome":"completed","ms":12,}'
        (claims / slot_name(T0)).write_text(damaged)
        (claims / slot_name(T0 + timedelta(minutes=1))).write_text("")  # torn: nothing to keep
        with caplog.at_level("WARNING", logger="trio_routines"):
            for minute in range(3):
                slot = T0 + timedelta(minutes=minute)
                assert await store.settle("daily", slot, Outcome.INTERRUPTED, if_unsettled=True)
        (kept,) = (root / "schedule" / "damaged-claims" / "daily").iterdir()
        assert re.fullmatch(re.escape(slot_name(T0)) + r"\.[0-9TZ-]+-[0-9a-f]{4}", kept.name)
        assert kept.read_text() == damaged
        assert [r.getMessage() for r in caplog.records] == [
            f"claim {claims / slot_name(T0)} held no claim record of this version's; kept as "
            f"{kept} before its outcome is written over it"
        ]
        assert [f.outcome for f in await store.history("daily")] == [Outcome.INTERRUPTED] * 3
        # Where it cannot be kept, the settle fails and the claim is left as it was.
        await store.claim("daily", T0 + timedelta(minutes=3), T0)
        third = claims / slot_name(T0 + timedelta(minutes=3))
        third.write_text("not json")
        kept.parent.rename(tmp_path / "moved")
        kept.parent.write_text("")  # no directory: nothing can be kept there
        caplog.clear()
        with caplog.at_level("WARNING", logger="trio_routines"):
            settled = await store.settle(
                "daily", T0 + timedelta(minutes=3), Outcome.INTERRUPTED, if_unsettled=True
            )
        assert not settled
        assert third.read_text() == "not json"
        assert [r.getMessage() for r in caplog.records] == [
            "daily: could not record the interrupted outcome of slot 2026-07-07T10:03:00.000Z: "
            "its claim holds no claim record of this version's, which could not be kept first "
            f"(ENOTDIR: Not a directory: {kept.parent}) — left as it is"
        ]


UNKNOWN = (
    '{"firedAt":"2026-07-07T10:00:00.010Z","outcome":"Cancelled","ms":1234,'
    '"error":"important note","replica":"old:1","output":"the reply text"}'
)


async def test_a_claim_settled_with_an_outcome_unknown_here_is_never_settled_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A newer version's outcome word (or an edit) read as unsettled, and the next boot wrote
    # `interrupted` over it: its outcome, duration, reason and output were gone, none kept.
    root = tmp_path / "state"
    async with DirectoryStore(root) as store:
        await store.claim("daily", T0, T0)
        path = root / "schedule" / "claims" / "daily" / slot_name(T0)
        path.write_text(UNKNOWN)
        with caplog.at_level("WARNING", logger="trio_routines"):
            (fire,) = await store.history("daily")
        assert (fire.outcome, fire.unknown_outcome, fire.ms, fire.error, fire.output) == (
            None,
            '"Cancelled"',
            1234,
            "important note",
            "the reply text",
        )
        assert not fire.is_open
        assert [r.getMessage() for r in caplog.records] == [
            f"claim {path} carries an outcome this version does not know — shown as none, "
            'never written over: "Cancelled"'
        ]
        assert await store.settle("daily", T0, Outcome.INTERRUPTED, if_unsettled=True)
        assert path.read_text() == UNKNOWN
        assert not (root / "schedule" / "damaged-claims").exists()
        # A turn's own settle (its claim edited while it ran) keeps the text first.
        assert await store.settle("daily", T0, Outcome.COMPLETED, 5)
        (kept,) = (root / "schedule" / "damaged-claims" / "daily").iterdir()
        assert kept.read_text() == UNKNOWN
        assert [f.outcome for f in await store.history("daily")] == [Outcome.COMPLETED]


async def test_a_boot_leaves_a_newest_claim_of_an_outcome_unknown_here_as_it_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "state"
    async with DirectoryStore(root) as store:
        await store.claim("daily", T0, T0, replica="old:1")
        path = root / "schedule" / "claims" / "daily" / slot_name(T0)
        path.write_text(UNKNOWN)
        scheduler = Scheduler(
            agent=ScriptedAgent(),
            store=store,
            routines=[Routine(name="daily", prompt="p", cron="0 9 * * *")],
            external_clock=True,
        )
        with caplog.at_level("INFO", logger="trio_routines"), trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                await nursery.start(scheduler.run)
                scheduler.stop(0)
        assert path.read_text() == UNKNOWN
        said = "\n".join(r.getMessage() for r in caplog.records)
        assert "never finished" not in said
        assert "never settled" not in said
        assert scheduler.statistics().outcomes == {}
