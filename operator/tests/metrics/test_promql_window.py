"""The rate() window as the policy sees it: Prometheus durations in seconds."""

from __future__ import annotations

import pytest

from tailguard.metrics.promql import QueryScope, duration_seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("10s", 10.0, id="seconds"),
        pytest.param("2m", 120.0, id="minutes"),
        pytest.param("1h30m", 5400.0, id="compound"),
        pytest.param("500ms", 0.5, id="milliseconds"),
    ],
)
def test_durations_read_as_prometheus_writes_them(text: str, seconds: float) -> None:
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "2", "m", "2 m", "1.5m", "2mm", "-1m"])
def test_malformed_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        duration_seconds(text)


def test_the_scope_reports_its_window_in_seconds() -> None:
    assert QueryScope().rate_window_s == 120.0
    assert QueryScope(rate_window="10s").rate_window_s == 10.0
