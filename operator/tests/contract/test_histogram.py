"""Histogram math: one sort and repair per histogram serves its quantile and its fraction alike."""

from __future__ import annotations

import math

import pytest

from tailguard.contract.histogram import (
    cumulative,
    fraction_at_or_below,
    fraction_of,
    histogram_quantile,
    quantile_of,
)
from tailguard.contract.slo import slo_figures

INF = math.inf

CASES = {
    "sorted": [(0.1, 50.0), (0.5, 90.0), (1.0, 99.0), (INF, 100.0)],
    "shuffled": [(INF, 100.0), (0.5, 90.0), (0.1, 50.0), (1.0, 99.0)],
    "racing-scrape": [(0.1, 50.0), (0.5, 48.0), (1.0, 99.0), (INF, 100.0)],
    "nan-count": [(0.1, math.nan), (0.5, 90.0), (1.0, 99.0), (INF, 100.0)],
    "no-traffic": [(0.1, 0.0), (0.5, 0.0), (INF, 0.0)],
    "inf-only": [(INF, 10.0)],
}


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_cumulative_sorts_by_bound_and_never_decreases() -> None:
    assert cumulative(CASES["shuffled"]) == CASES["sorted"]
    assert cumulative(CASES["racing-scrape"]) == [(0.1, 50.0), (0.5, 50.0), (1.0, 99.0), (INF, 100.0)]
    # A NaN count is passed over, as max(running, NaN) would.
    assert cumulative(CASES["nan-count"])[0] == (0.1, 0.0)


def test_cumulative_needs_an_inf_bucket() -> None:
    with pytest.raises(ValueError, match=r"\+Inf"):
        cumulative([(0.1, 1.0), (0.5, 2.0)])
    with pytest.raises(ValueError, match=r"\+Inf"):
        cumulative([])


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("q", [0.0, 0.5, 0.9, 0.99, 1.0])
def test_quantile_of_a_cumulative_histogram_is_histogram_quantile(name: str, q: float) -> None:
    buckets = CASES[name]
    got, expected = quantile_of(q, cumulative(buckets)), histogram_quantile(q, buckets)
    assert _same(got, expected), f"{name} q={q}: {got} != {expected}"


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("threshold", [0.05, 0.1, 0.3, 1.0, 2.0])
def test_fraction_of_a_cumulative_histogram_is_fraction_at_or_below(name: str, threshold: float) -> None:
    buckets = CASES[name]
    got, expected = fraction_of(threshold, cumulative(buckets)), fraction_at_or_below(threshold, buckets)
    assert _same(got, expected), f"{name} at {threshold}: {got} != {expected}"


def test_slo_figures_from_shuffled_buckets() -> None:
    figures = slo_figures(CASES["shuffled"], CASES["sorted"], ttft_slo_s=0.5, tpot_slo_s=1.0)
    assert figures.ttft_within_slo == pytest.approx(0.90)
    assert figures.tpot_within_slo == pytest.approx(0.99)
    assert figures.goodput == pytest.approx(0.89)
    # 99 of 100 at or below 1.0 s: the 99th percentile is that bucket's top.
    assert figures.p99_ttft_s == pytest.approx(1.0)


def test_slo_figures_reject_a_histogram_without_inf() -> None:
    with pytest.raises(ValueError, match=r"\+Inf"):
        slo_figures(CASES["sorted"], [(0.1, 1.0)], ttft_slo_s=0.5, tpot_slo_s=None)
