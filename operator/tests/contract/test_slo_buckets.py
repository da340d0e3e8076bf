"""SLOs as bucket edges: what the operator asks vLLM to export so the share within an SLO is counted."""

from __future__ import annotations

import pytest

from tailguard.contract.histogram import fraction_at_or_below
from tailguard.contract.vllm import (
    TPOT_BUCKET_FAMILY,
    TPOT_BUCKETS_S,
    TTFT_BUCKET_FAMILY,
    TTFT_BUCKETS_S,
    slo_bucket_overrides,
    with_edge,
)


@pytest.mark.parametrize(
    ("ttft_s", "tpot_s", "families"),
    [
        (0.5, 0.05, set()),
        (0.5, None, set()),
        (0.8, None, {TTFT_BUCKET_FAMILY}),
        (1.0, 0.015, {TPOT_BUCKET_FAMILY}),
        (2.0, 0.03, {TTFT_BUCKET_FAMILY, TPOT_BUCKET_FAMILY}),
    ],
    ids=["both edges", "no TPOT SLO", "TTFT inside a bucket", "TPOT inside a bucket", "both inside"],
)
def test_only_an_slo_inside_a_bucket_asks_for_buckets(
    ttft_s: float, tpot_s: float | None, families: set[str]
) -> None:
    overrides = slo_bucket_overrides(ttft_s, tpot_s)
    assert set(overrides) == families
    for family, bounds in overrides.items():
        slo = ttft_s if family == TTFT_BUCKET_FAMILY else tpot_s
        defaults = TTFT_BUCKETS_S if family == TTFT_BUCKET_FAMILY else TPOT_BUCKETS_S
        assert slo in bounds, (family, bounds)
        assert set(defaults) <= set(bounds), "the defaults stay: dashboards keep their edges"
        assert bounds == sorted(set(bounds)), "strictly increasing, as vLLM requires"


def test_an_edge_already_there_is_not_added_twice() -> None:
    assert with_edge(TPOT_BUCKETS_S, 0.05) == TPOT_BUCKETS_S
    assert with_edge(TPOT_BUCKETS_S, None) == TPOT_BUCKETS_S
    assert len(with_edge(TPOT_BUCKETS_S, 0.015)) == len(TPOT_BUCKETS_S) + 1


def test_with_the_slo_as_an_edge_the_share_within_it_is_counted_not_interpolated() -> None:
    # 70 requests at 9 ms, 30 at 12 ms: every request meets a 15 ms SLO.
    def histogram(bounds: tuple[float, ...]) -> list[tuple[float, float]]:
        values = [0.009] * 70 + [0.012] * 30
        return [(b, float(sum(v <= b for v in values))) for b in bounds] + [(float("inf"), 100.0)]

    interpolated = fraction_at_or_below(0.015, histogram(TPOT_BUCKETS_S))
    counted = fraction_at_or_below(0.015, histogram(with_edge(TPOT_BUCKETS_S, 0.015)))
    assert interpolated == pytest.approx(0.80)  # 70 + 30 × (15 − 10) / (25 − 10): a breach that is not
    assert counted == 1.0
