"""Names, labels and bucket bounds of the vLLM (V1 engine) metrics tailguard relies on.

Figures are those of vLLM 0.33 (``vllm/v1/metrics/loggers.py`` and ``buckets.py``). The engine test
tier checks them against a real server's ``/metrics``.
"""

from __future__ import annotations

import itertools
import json
import math
from enum import StrEnum
from typing import Final


class VllmMetric(StrEnum):
    """Metric family names as exposed on ``/metrics`` (counters carry ``_total``)."""

    TTFT = "vllm:time_to_first_token_seconds"
    TPOT = "vllm:request_time_per_output_token_seconds"
    INTER_TOKEN_LATENCY = "vllm:inter_token_latency_seconds"
    E2E_LATENCY = "vllm:e2e_request_latency_seconds"
    QUEUE_TIME = "vllm:request_queue_time_seconds"
    PREFILL_TIME = "vllm:request_prefill_time_seconds"
    RUNNING = "vllm:num_requests_running"
    WAITING = "vllm:num_requests_waiting"
    KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
    KV_CACHE_USAGE_LEGACY = "vllm:gpu_cache_usage_perc"
    PREEMPTIONS = "vllm:num_preemptions_total"
    PROMPT_TOKENS = "vllm:prompt_tokens_total"
    GENERATION_TOKENS = "vllm:generation_tokens_total"
    REQUEST_SUCCESS = "vllm:request_success_total"


#: The label tailguard's scrape configuration adds to every series: the InferenceService's name.
SERVICE_LABEL: Final = "inference_service"

#: Labels every engine metric carries.
MODEL_NAME_LABEL: Final = "model_name"
ENGINE_LABEL: Final = "engine"

#: Both names of the KV-cache usage gauge (a 0..1 fraction); older releases used the legacy one.
KV_CACHE_USAGE_METRICS: Final = (VllmMetric.KV_CACHE_USAGE, VllmMetric.KV_CACHE_USAGE_LEGACY)

#: Upper bounds (seconds) of ``vllm:time_to_first_token_seconds``; ``+Inf`` is implied.
TTFT_BUCKETS_S: Final[tuple[float, ...]] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip

#: Upper bounds (seconds) of the per-output-token histograms (TPOT and inter-token latency).
TPOT_BUCKETS_S: Final[tuple[float, ...]] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip

#: Upper bounds (seconds) of the request-level histograms (e2e, queue, prefill, decode time).
E2E_BUCKETS_S: Final[tuple[float, ...]] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip

#: ``vllm serve`` flag replacing a histogram family's buckets (a JSON object, family → bounds).
CUSTOM_BUCKETS_FLAG: Final = "--custom-histogram-buckets"
#: Its family keys for the SLO histograms: TTFT's own, and the one TPOT shares with the
#: inter-token latency.
TTFT_BUCKET_FAMILY: Final = "time_to_first_token"
TPOT_BUCKET_FAMILY: Final = "inter_token_latency"


def with_edge(bounds: tuple[float, ...], edge_s: float | None) -> tuple[float, ...]:
    """``bounds`` with ``edge_s`` among them (sorted; unchanged when it is already an edge).

    The share of requests within an SLO is exact only when the SLO is a bucket edge: inside a
    bucket it can only be interpolated, and vLLM's buckets are wide (10 to 25 ms for TPOT), so a
    15 ms SLO would be read as broken while every request met it.
    """
    if edge_s is None or any(math.isclose(edge_s, b, rel_tol=1e-9) for b in bounds):
        return bounds
    return tuple(sorted((*bounds, edge_s)))


def slo_bucket_overrides(ttft_slo_s: float, tpot_slo_s: float | None) -> dict[str, list[float]]:
    """The families whose default buckets lack an SLO as an edge, with the SLO added: the value of
    :data:`CUSTOM_BUCKETS_FLAG` (empty when every SLO is an edge already)."""
    out: dict[str, list[float]] = {}
    ttft = with_edge(TTFT_BUCKETS_S, ttft_slo_s)
    if ttft != TTFT_BUCKETS_S:
        out[TTFT_BUCKET_FAMILY] = list(ttft)
    tpot = with_edge(TPOT_BUCKETS_S, tpot_slo_s)
    if tpot != TPOT_BUCKETS_S:
        out[TPOT_BUCKET_FAMILY] = list(tpot)
    return out


def parse_bucket_families(text: str) -> dict[str, tuple[float, ...]]:
    """The value of :data:`CUSTOM_BUCKETS_FLAG` as vLLM reads it: a JSON object of families, each
    a strictly increasing list of positive finite bounds. ``ValueError`` says what is wrong."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object of bucket families")
    out: dict[str, tuple[float, ...]] = {}
    for family, bounds in value.items():
        if (
            not isinstance(bounds, list)
            or not bounds
            or not all(isinstance(b, int | float) and not isinstance(b, bool) for b in bounds)
            or not all(math.isfinite(b) and b > 0 for b in bounds)
            or any(a >= b for a, b in itertools.pairwise(bounds))
        ):
            raise ValueError(f"{family}: bounds must be positive, finite and strictly increasing")
        out[str(family)] = tuple(float(b) for b in bounds)
    return out


#: Upper bounds of one histogram, ``+Inf`` implied.
Bounds = tuple[float, ...]


def slo_histogram_bounds(families: dict[str, Bounds]) -> tuple[Bounds, Bounds]:
    """The TTFT and TPOT histogram bounds a set of bucket families gives (vLLM's defaults for a
    family left out)."""
    return families.get(TTFT_BUCKET_FAMILY, TTFT_BUCKETS_S), families.get(TPOT_BUCKET_FAMILY, TPOT_BUCKETS_S)
