"""An unknown time zone's refusal names the zones it most likely meant."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from trio_routines.cron import zones
from trio_routines.cron.schedule import cron_error


@pytest.fixture(autouse=True)
def _cold() -> Iterator[None]:
    """Each test looks afresh, and leaves nothing it made (a patched zone list) behind."""
    zones._listing.cache_clear()
    zones._closest.cache_clear()
    yield
    zones._listing.cache_clear()
    zones._closest.cache_clear()


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("europe/berlin", ("Europe/Berlin",)),  # another case
        ("EUROPE/BERLIN", ("Europe/Berlin",)),
        ("Berlin", ("Europe/Berlin",)),  # its last part
        ("new_york", ("America/New_York",)),
        ("US/Pacificc", ("US/Pacific",)),  # spelt close
        ("Nowhere", ()),
        ("", ()),
        ("Europe/Berlin" * 5, ()),  # over 64 characters: not looked for
    ],
)
def test_the_zones_meant_are_another_case_a_last_part_or_a_close_spelling(
    given: str, meant: tuple[str, ...]
) -> None:
    assert zones.zone_suggestions(given) == meant


def test_at_most_three_are_named_the_closest_first() -> None:
    close = zones.zone_suggestions("Europe/Berln")
    assert close[0] == "Europe/Berlin"
    assert 1 <= len(close) <= zones.SUGGESTED == 3
    assert len(zones.zone_suggestions("america/a")) <= 3


def test_the_refusal_names_them_or_stands_alone() -> None:
    assert cron_error("0 9 * * *", "Berlin") == (
        'unknown time zone "Berlin" — did you mean Europe/Berlin?'
    )
    assert cron_error("0 9 * * *", "Mars/Olympus") == 'unknown time zone "Mars/Olympus"'
    assert zones.unknown_zone("Europe/Berln", '"Europe/Berln"').startswith(
        'unknown time zone "Europe/Berln" — did you mean Europe/Berlin or '
    )


def test_zone_data_that_cannot_be_listed_suggests_nothing_until_it_can(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unreadable() -> set[str]:
        raise OSError("the zone data is unreadable")

    monkeypatch.setattr(zones.zoneinfo, "available_timezones", unreadable)
    assert zones.zone_suggestions("Berlin") == ()
    assert zones.unknown_zone("Berlin", '"Berlin"') == 'unknown time zone "Berlin"'
    monkeypatch.undo()  # a passing fault (EMFILE): the next refusal lists the zones again
    assert zones.zone_suggestions("Berlin") == ("Europe/Berlin",)


def test_a_host_without_zone_data_is_told_so_and_still_reads_utc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A slim image: no /usr/share/zoneinfo, no tzdata package. UTC needs no data.
    monkeypatch.setattr(zones.zoneinfo, "available_timezones", set)
    assert zones.unknown_zone("Europe/Berlin", '"Europe/Berlin"') == (
        'unknown time zone "Europe/Berlin": this host has no time zone data (install the '
        "system's tzdata package, or pip install tzdata)"
    )


def test_utc_is_read_without_any_zone_data(tmp_path: Path) -> None:
    # In a process whose zone data is an empty directory: a traceback (ZoneInfo("UTC") not
    # found) from every command that read a cron, where a UTC cron needs no data.
    script = (
        "from datetime import datetime, UTC\n"
        "from trio_routines.cron import next_run\n"
        "from trio_routines.cron.schedule import cron_error\n"
        "after = datetime(2026, 7, 1, tzinfo=UTC)\n"
        "print(next_run('0 9 * * *', None, after).isoformat())\n"
        "print(next_run('0 9 * * *', 'UTC', after).isoformat())\n"
        "print(cron_error('0 9 * * *', 'Europe/Berlin'))\n"
    )
    environ = {**os.environ, "PYTHONTZPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=environ, timeout=60
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[:2] == ["2026-07-01T09:00:00+00:00"] * 2
    shown = subprocess.run(
        [sys.executable, "-m", "trio_routines", "next", "--cron", "0 9 * * *", "--tz", "UTC"],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr  # its local times shown in UTC, no zone data
    assert shown.stdout.splitlines()[0].endswith(" 09:00 UTC (UTC)")
    # With tzdata installed as a package, zoneinfo still finds Europe/Berlin there.
    assert out[2] in (
        "None",
        'unknown time zone "Europe/Berlin": this host has no time zone '
        "data (install the system's tzdata package, or pip install tzdata)",
    )


def test_a_name_empty_or_over_64_characters_is_looked_up_in_no_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A bound of cost: a hostile file's 100,000-character zone is compared with nothing.
    looked: list[str] = []

    def closest(given: str, names: tuple[str, ...]) -> tuple[str, ...]:
        looked.append(given)
        return ()

    monkeypatch.setattr(zones, "_closest", closest)
    for given in ("", "x" * 65, "x" * 100_000):
        assert zones.zone_suggestions(given) == ()
    assert looked == []
    assert zones.zone_suggestions("x" * 64) == ()
    assert looked == ["x" * 64]
