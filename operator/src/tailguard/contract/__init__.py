"""The vLLM metric contract: metric names, histogram buckets and Prometheus histogram math.

Everything here is pure and shared by the Prometheus reader, the modelled Prometheus of the
simulator and the fleet that stands in for real engines in end-to-end tests.
"""

from tailguard.contract.histogram import fraction_at_or_below, histogram_quantile
from tailguard.contract.slo import SloFigures, joint_goodput, slo_figures
from tailguard.contract.vllm import (
    E2E_BUCKETS_S,
    KV_CACHE_USAGE_METRICS,
    TPOT_BUCKETS_S,
    TTFT_BUCKETS_S,
    VllmMetric,
)

__all__ = [
    "E2E_BUCKETS_S",
    "KV_CACHE_USAGE_METRICS",
    "TPOT_BUCKETS_S",
    "TTFT_BUCKETS_S",
    "SloFigures",
    "VllmMetric",
    "fraction_at_or_below",
    "histogram_quantile",
    "joint_goodput",
    "slo_figures",
]
