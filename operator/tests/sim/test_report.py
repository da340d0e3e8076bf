"""The report's latency figures when some requests failed (their latency is infinite)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from tailguard.sim.report import _percentile


def test_finite_latencies_are_interpolated() -> None:
    values = np.linspace(0.0, 1.0, 101)
    assert _percentile(values, 99) == pytest.approx(0.99)


@pytest.mark.parametrize(
    ("failed", "expected"),
    [
        # 100 finite latencies 0.00 … 0.99 and one failure: the p99 rank (index 99) is the largest
        pytest.param(1, 0.99, id="one failure of 101 sits above the p99 rank"),
        pytest.param(3, math.inf, id="failures fill the p99 rank"),
    ],
)
def test_failed_requests_give_an_order_statistic_not_a_nan(failed: int, expected: float) -> None:
    values = np.concatenate([np.arange(101 - failed) / 100.0, np.full(failed, np.inf)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _percentile(values, 99)
    assert got == pytest.approx(expected)


def test_no_latencies_read_nan() -> None:
    assert math.isnan(_percentile(np.array([]), 99))
