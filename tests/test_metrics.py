"""The Prometheus text the runtime writes for GET /metrics."""

from __future__ import annotations

from trio_routines.metrics import Metrics


def test_rendering() -> None:
    metrics = Metrics()
    metrics.fired('we"ird\nname\\', "completed", 250, 0.003)
    metrics.fired("daily", "failed", 90_000, 12.0)
    metrics.refuse("daily", "stale")
    text = metrics.render(in_flight=2, armed=3, clock_jumps=1)
    assert 'trio_routines_fires_total{routine="we\\"ird\\nname\\\\",outcome="completed"} 1' in text
    assert 'trio_routines_fires_total{routine="daily",outcome="failed"} 1' in text
    assert 'trio_routines_claims_refused_total{routine="daily",reason="stale"} 1' in text
    assert 'trio_routines_turn_seconds_bucket{routine="daily",le="60"} 0' in text
    assert 'trio_routines_turn_seconds_bucket{routine="daily",le="300"} 1' in text
    assert 'trio_routines_turn_seconds_sum{routine="daily"} 90' in text
    assert 'trio_routines_lateness_seconds_bucket{routine="daily",le="5"} 0' in text
    assert 'trio_routines_lateness_seconds_bucket{routine="daily",le="30"} 1' in text
    assert "trio_routines_clock_jumps_total 1" in text
    assert "trio_routines_in_flight 2" in text
    assert "trio_routines_armed_routines 3" in text
    assert text.endswith("\n")
    assert len(text.splitlines()) == len(set(text.splitlines()))  # no series written twice
