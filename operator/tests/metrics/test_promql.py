"""PromQL builders: one query per signal for all services, grouped by service, values escaped."""

from __future__ import annotations

import math

import pytest
from prometheus_client.utils import floatToGoString

from tailguard.contract.vllm import VllmMetric
from tailguard.metrics.promql import (
    QueryScope,
    Signal,
    all_queries,
    escape_label_value,
    histogram_buckets,
    kv_cache_usage,
    le_text,
)


def test_one_query_per_signal_whatever_the_number_of_services() -> None:
    queries = all_queries(QueryScope())
    assert set(queries) == set(Signal) - {Signal.TTFT_P99, Signal.TPOT_P99}
    assert all("by (namespace, inference_service" in q for q in queries.values())


def test_narrowed_histograms_read_their_edges_and_plus_inf_and_their_p99_from_prometheus() -> None:
    queries = all_queries(QueryScope(rate_window="1m"), {Signal.TTFT_BUCKETS: [1.0, 0.5, 0.5]})
    assert set(queries) == set(Signal) - {Signal.TPOT_P99}
    assert queries[Signal.TTFT_BUCKETS] == (
        "sum by (namespace, inference_service, le) (rate(vllm:time_to_first_token_seconds_bucket"
        '{inference_service!="", le=~"0\\\\.5|1\\\\.0|\\\\+Inf"}[1m]))'
    )
    assert queries[Signal.TTFT_P99] == (
        "histogram_quantile(0.99, sum by (namespace, inference_service, le) "
        '(rate(vllm:time_to_first_token_seconds_bucket{inference_service!=""}[1m])))'
    )
    assert queries[Signal.TPOT_BUCKETS] == all_queries(QueryScope(rate_window="1m"))[Signal.TPOT_BUCKETS]


@pytest.mark.parametrize(
    ("bound", "text"),
    [(0.5, "0.5"), (1.0, "1.0"), (0.001, "0.001"), (2560.0, "2560.0"), (1e-05, "1e-05"), (1e7, "1e+07"),
     (math.inf, "+Inf")],
)  # fmt: skip
def test_le_text_is_what_the_python_client_writes(bound: float, text: str) -> None:
    assert le_text(bound) == text == floatToGoString(bound)


@pytest.mark.parametrize(
    ("signal", "family"),
    [
        (Signal.QUEUE_TIME_MEAN, "vllm:request_queue_time_seconds"),
        (Signal.PREFILL_TIME_MEAN, "vllm:request_prefill_time_seconds"),
    ],
    ids=["queue time", "prefill time"],
)
def test_request_times_are_read_as_a_mean_per_service(signal: Signal, family: str) -> None:
    q = all_queries(QueryScope(rate_window="1m"))[signal]
    assert q == (
        "sum by (namespace, inference_service) "
        f'(rate({family}_sum{{inference_service!=""}}[1m])) / '
        "sum by (namespace, inference_service) "
        f'(rate({family}_count{{inference_service!=""}}[1m]))'
    )


def test_the_burst_rate_is_the_request_rate_over_the_short_window() -> None:
    queries = all_queries(QueryScope(rate_window="1m", burst_window="20s"))
    assert queries[Signal.REQUEST_RATE_BURST] == (
        'sum by (namespace, inference_service) (rate(vllm:request_success_total{inference_service!=""}[20s]))'
    )
    assert queries[Signal.REQUEST_RATE] == queries[Signal.REQUEST_RATE_BURST].replace("[20s]", "[1m]")
    assert QueryScope().burst_window_s == 30.0


def test_histogram_query_keeps_le_and_sums_pods_and_engines() -> None:
    q = histogram_buckets(QueryScope(rate_window="1m"), VllmMetric.TTFT)
    assert q == (
        "sum by (namespace, inference_service, le) "
        '(rate(vllm:time_to_first_token_seconds_bucket{inference_service!=""}[1m]))'
    )


def test_kv_cache_accepts_both_metric_names() -> None:
    q = kv_cache_usage(QueryScope())
    assert "vllm:kv_cache_usage_perc|vllm:gpu_cache_usage_perc" in q
    assert q.startswith("avg by (namespace, inference_service)")


def test_namespaces_are_regex_escaped_and_quoted() -> None:
    scope = QueryScope(namespaces=("team-a", 'we"ird.ns'))
    selector = scope.selector()
    assert 'namespace=~"team-a|we\\"ird\\\\.ns"' in selector


def test_escape_label_value() -> None:
    assert escape_label_value('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'


def test_extra_matchers() -> None:
    assert 'job="vllm"' in QueryScope(extra_matchers=(("job", "vllm"),)).selector()
