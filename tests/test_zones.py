"""An unknown time zone's refusal names the zones it most likely meant."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from trio_routines.cron import zones
from trio_routines.cron.schedule import cron_error


@pytest.fixture(autouse=True)
def _cold() -> Iterator[None]:
    """Each test looks afresh, and leaves nothing it made (a patched zone list) behind."""
    zones._names.cache_clear()
    zones.zone_suggestions.cache_clear()
    yield
    zones._names.cache_clear()
    zones.zone_suggestions.cache_clear()


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


def test_zone_data_that_cannot_be_listed_suggests_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable() -> set[str]:
        raise OSError("the zone data is unreadable")

    monkeypatch.setattr(zones.zoneinfo, "available_timezones", unreadable)
    assert zones.zone_suggestions("Berlin") == ()
    assert zones.unknown_zone("Berlin", '"Berlin"') == 'unknown time zone "Berlin"'
