"""From query results to per-service figures: NaN, +Inf, empty, duplicate and failing answers."""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest

from tailguard.contract.vllm import TTFT_BUCKETS_S
from tailguard.metrics.figures import figures_for, joint_goodput, read_metrics
from tailguard.metrics.prometheus import FakePrometheus, HttpPrometheus, PrometheusSettings
from tailguard.metrics.promql import QueryScope, Signal, all_queries
from tailguard.metrics.results import QueryError, group_vector, parse_sample_value

KEY = ("team-a", "chat")
SCOPE = QueryScope()


def _series(value: str, le: str | None = None, ns: str = "team-a", svc: str = "chat") -> dict[str, Any]:
    metric = {"namespace": ns, "inference_service": svc}
    if le is not None:
        metric["le"] = le
    return {"metric": metric, "value": [1000.0, value]}


def _ttft_histogram(rates_below: dict[float, float], total: float) -> list[dict[str, Any]]:
    series = []
    for bound in TTFT_BUCKETS_S:
        below = max((v for b, v in rates_below.items() if b <= bound), default=0.0)
        series.append(_series(str(below), le=repr(bound)))
    series.append(_series(str(total), le="+Inf"))
    return series


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1.5", 1.5), ("NaN", math.nan), ("+Inf", math.inf), (None, math.nan), ("x", math.nan)],
)
def test_sample_values(raw: Any, expected: float) -> None:
    got = parse_sample_value(raw)
    assert (math.isnan(got) and math.isnan(expected)) or got == expected


def test_duplicates_are_counted_and_ignored() -> None:
    grouped = group_vector(
        [_series("1"), _series("5")], namespace_label="namespace", service_label="inference_service"
    )
    assert grouped.values[KEY] == 1.0
    assert grouped.duplicates == 1


def test_histograms_group_per_service_sorted_by_bound_with_duplicate_buckets_ignored() -> None:
    labels = {"namespace_label": "namespace", "service_label": "inference_service"}
    grouped = group_vector(
        [
            _series("9", le="+Inf"),
            _series("4", le="0.5"),
            _series("7", le="+Inf", svc="other"),
            _series("2", le="0.1"),
            _series("5", le="0.5"),  # a second series for chat's 0.5 bucket
            _series("3", le="0.5", svc="other"),
            _series("6", le="not-a-number", svc="other"),
        ],
        **labels,
    )
    assert grouped.buckets[KEY] == [(0.1, 2.0), (0.5, 4.0), (math.inf, 9.0)]
    other = grouped.buckets[("team-a", "other")]
    assert other[:2] == [(0.5, 3.0), (math.inf, 7.0)]
    assert math.isnan(other[2][0]), "an unreadable bound reads as NaN"
    assert other[2][1] == 6.0
    assert grouped.duplicates == 1
    assert grouped.values == {}


def test_a_service_may_have_a_value_and_buckets_in_one_result() -> None:
    grouped = group_vector(
        [
            _series("1"),
            _series("2", le="+Inf"),
            _series("3"),
            {"metric": {"namespace": "team-a", "inference_service": "x"}},
        ],
        namespace_label="namespace",
        service_label="inference_service",
    )
    assert grouped.values[KEY] == 1.0
    assert grouped.buckets[KEY] == [(math.inf, 2.0)]
    assert math.isnan(grouped.values[("team-a", "x")]), "a series without a sample reads as NaN"
    assert grouped.duplicates == 1


def test_series_without_service_labels_are_dropped() -> None:
    grouped = group_vector(
        [{"metric": {"namespace": "x"}, "value": [0, "1"]}],
        namespace_label="namespace",
        service_label="inference_service",
    )
    assert grouped.values == {}


async def test_cycle_reads_every_signal_once_and_computes_against_each_slo() -> None:
    queries = all_queries(SCOPE)
    fake = FakePrometheus(
        {
            queries[Signal.TTFT_BUCKETS]: _ttft_histogram({0.25: 90.0, 0.5: 95.0, 1.0: 100.0}, 100.0),
            queries[Signal.REQUEST_RATE]: [_series("10")],
            queries[Signal.REQUEST_RATE_BURST]: [_series("40")],
            queries[Signal.RUNNING]: [_series("NaN")],
            queries[Signal.WAITING]: [_series("+Inf")],
            queries[Signal.REPORTING_PODS]: [_series("2")],
            queries[Signal.QUEUE_TIME_MEAN]: [_series("0.125")],
            queries[Signal.PREFILL_TIME_MEAN]: [_series("0.0625")],
        }
    )
    cycle = await read_metrics(fake, SCOPE, at=1000.0)
    assert sorted(fake.queries) == sorted(queries.values())
    signals = figures_for(cycle, KEY, ttft_slo_s=0.5, tpot_slo_s=None)
    assert signals.ttft_within_slo == pytest.approx(0.95)
    assert signals.goodput == pytest.approx(0.95)
    # 95% at or below 0.75 s, 100% at 1.0 s: the 99th percentile lies 4/5 into that bucket.
    assert signals.p99_ttft_s == pytest.approx(0.75 + 0.25 * (99 - 95) / 5)
    assert signals.request_rate == 10.0
    assert signals.request_rate_burst == 40.0
    assert signals.running is None, "NaN is not a measurement"
    assert signals.waiting is None, "+Inf is not a measurement"
    assert signals.reporting_pods == 2
    assert signals.queue_time_mean_s == 0.125
    assert signals.prefill_time_mean_s == 0.0625
    assert signals.itl_mean_s is None, "a signal Prometheus did not answer is not measured"


async def test_service_without_traffic_has_no_latency_figures_but_no_error() -> None:
    queries = all_queries(SCOPE)
    fake = FakePrometheus(
        {queries[Signal.TTFT_BUCKETS]: _ttft_histogram({}, 0.0), queries[Signal.REQUEST_RATE]: [_series("0")]}
    )
    signals = figures_for(await read_metrics(fake, SCOPE, at=0), KEY, ttft_slo_s=0.5, tpot_slo_s=0.05)
    assert signals.p99_ttft_s is None
    assert signals.goodput is None
    assert signals.request_rate == 0.0
    assert signals.errors == ()


async def test_failed_query_is_recorded_not_raised() -> None:
    queries = all_queries(SCOPE)
    fake = FakePrometheus({queries[Signal.WAITING]: QueryError("Prometheus unreachable")})
    cycle = await read_metrics(fake, SCOPE, at=0)
    assert not cycle.ok
    assert figures_for(cycle, KEY, ttft_slo_s=0.5, tpot_slo_s=None).errors == (
        "waiting: Prometheus unreachable",
    )


@pytest.mark.parametrize(
    ("ttft", "tpot", "declared", "expected"),
    [
        (0.99, None, False, 0.99),
        (0.99, 0.98, True, pytest.approx(0.97)),
        (0.4, 0.5, True, 0.0),
        (0.99, None, True, None),
        (None, 0.9, True, None),
    ],
    ids=["ttft-only", "lower-bound", "floored-at-zero", "tpot-missing", "ttft-missing"],
)
def test_joint_goodput(ttft: float | None, tpot: float | None, declared: bool, expected: Any) -> None:
    assert joint_goodput(ttft, tpot, tpot_declared=declared) == expected


async def test_http_reader_sends_auth_and_parses_vectors() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200, json={"status": "success", "data": {"resultType": "vector", "result": [_series("3")]}}
        )

    reader = HttpPrometheus(
        PrometheusSettings(url="http://prom:9090/", bearer_token="t0k"),
        transport=httpx.MockTransport(handler),
    )
    result = await reader.query("up", at=12.5)
    await reader.aclose()
    assert result == [_series("3")]
    assert seen[0].headers["Authorization"] == "Bearer t0k"
    assert seen[0].url.path == "/api/v1/query"
    assert b"time=12.500" in seen[0].content


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(503, text="overloaded"),
        httpx.Response(400, json={"status": "error", "error": "parse error"}),
        httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": []}}),
        httpx.Response(200, json=["success"]),
    ],
    ids=["not-json", "error-status", "wrong-type", "not-an-object"],
)
async def test_http_reader_turns_bad_answers_into_query_errors(response: httpx.Response) -> None:
    reader = HttpPrometheus(
        PrometheusSettings(url="http://prom"), transport=httpx.MockTransport(lambda _: response)
    )
    with pytest.raises(QueryError):
        await reader.query("up")
    await reader.aclose()


async def test_http_reader_unreachable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    reader = HttpPrometheus(PrometheusSettings(url="http://prom"), transport=httpx.MockTransport(refuse))
    with pytest.raises(QueryError, match="unreachable"):
        await reader.query("up")
    await reader.aclose()


async def test_http_reader_tries_a_dropped_connection_once_more() -> None:
    # A proxy with a short listen backlog drops some of a reading's concurrent connections; one
    # lost query failed the whole reading (the e2e gate did so with 17 queries at once).
    calls: list[str] = []

    def drop_first(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if len(calls) == 1:
            raise httpx.ReadError("connection reset", request=request)
        return httpx.Response(
            200, json={"status": "success", "data": {"resultType": "vector", "result": [_series("3")]}}
        )

    reader = HttpPrometheus(PrometheusSettings(url="http://prom"), transport=httpx.MockTransport(drop_first))
    assert await reader.query("up") == [_series("3")]
    assert len(calls) == 2
    await reader.aclose()


async def test_http_reader_gives_up_after_a_second_drop_and_never_retries_a_timeout() -> None:
    calls: list[str] = []

    def always(error: type[httpx.TransportError]) -> httpx.MockTransport:
        def handler(request: httpx.Request) -> httpx.Response:
            calls.append(request.url.path)
            raise error("no", request=request)

        return httpx.MockTransport(handler)

    reader = HttpPrometheus(PrometheusSettings(url="http://prom"), transport=always(httpx.ReadError))
    with pytest.raises(QueryError, match="unreachable: ReadError"):
        await reader.query("up")
    assert len(calls) == 2, "tried twice, not more"
    await reader.aclose()
    calls.clear()
    reader = HttpPrometheus(PrometheusSettings(url="http://prom"), transport=always(httpx.ReadTimeout))
    with pytest.raises(QueryError, match="did not answer within"):
        await reader.query("up")
    assert len(calls) == 1, "a slow Prometheus is not asked twice"
    await reader.aclose()


async def test_http_reader_says_a_slow_answer_is_a_timeout_not_an_outage() -> None:
    def too_slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    settings = PrometheusSettings(url="http://prom", timeout_s=7.5)
    reader = HttpPrometheus(settings, transport=httpx.MockTransport(too_slow))
    with pytest.raises(QueryError) as raised:
        await reader.query("up")
    assert str(raised.value) == "Prometheus did not answer within 7.5 s (--prometheus-timeout)"
    await reader.aclose()


# -- readings narrowed to the SLO edges ------------------------------------------------------------

NARROW = {Signal.TTFT_BUCKETS: [0.5], Signal.TPOT_BUCKETS: [0.05]}


async def test_a_narrowed_reading_takes_the_share_at_the_edge_and_the_p99_from_prometheus() -> None:
    narrowed = all_queries(SCOPE, NARROW)
    fake = FakePrometheus(
        {
            narrowed[Signal.TTFT_BUCKETS]: [_series("95", le="0.5"), _series("100", le="+Inf")],
            narrowed[Signal.TTFT_P99]: [_series("0.95")],
            narrowed[Signal.TPOT_BUCKETS]: [_series("1990", le="0.05"), _series("2000", le="+Inf")],
            narrowed[Signal.TPOT_P99]: [_series("0.045")],
        }
    )
    reading = await read_metrics(fake, SCOPE, at=1000.0, slos={KEY: (0.5, 0.05)})
    assert sorted(fake.queries) == sorted(narrowed.values()), "no bucket read in full"
    assert reading.narrowed == {Signal.TTFT_BUCKETS: frozenset([0.5]), Signal.TPOT_BUCKETS: frozenset([0.05])}
    figures = figures_for(reading, KEY, ttft_slo_s=0.5, tpot_slo_s=0.05)
    assert figures.ttft_within_slo == pytest.approx(0.95)
    assert figures.tpot_within_slo == pytest.approx(0.995)
    assert figures.goodput == pytest.approx(0.945)
    assert figures.p99_ttft_s == pytest.approx(0.95)
    assert figures.p99_tpot_s == pytest.approx(0.045)


async def test_a_histogram_without_the_slo_edge_is_read_again_in_full_in_the_same_reading() -> None:
    narrowed, full = all_queries(SCOPE, NARROW), all_queries(SCOPE)
    fake = FakePrometheus(
        {
            # Buckets set by hand without 0.5 s: the narrowed read finds only +Inf.
            narrowed[Signal.TTFT_BUCKETS]: [_series("100", le="+Inf")],
            narrowed[Signal.TTFT_P99]: [_series("0.8")],
            full[Signal.TTFT_BUCKETS]: _ttft_histogram({0.25: 90.0, 0.5: 95.0, 1.0: 100.0}, 100.0),
        }
    )
    reading = await read_metrics(fake, SCOPE, at=1000.0, slos={KEY: (0.5, None)})
    assert fake.queries.count(full[Signal.TTFT_BUCKETS]) == 1
    assert reading.queried.count(Signal.TTFT_BUCKETS) == 2
    assert Signal.TTFT_BUCKETS not in reading.narrowed
    figures = figures_for(reading, KEY, ttft_slo_s=0.5, tpot_slo_s=None)
    assert figures.ttft_within_slo == pytest.approx(0.95)
    assert figures.p99_ttft_s == pytest.approx(0.75 + 0.25 * (99 - 95) / 5), "from the full buckets"


async def test_a_service_whose_slo_was_not_read_has_no_latency_figures() -> None:
    narrowed = all_queries(SCOPE, NARROW)
    other = ("team-b", "code")
    fake = FakePrometheus(
        {
            narrowed[Signal.TTFT_BUCKETS]: [
                _series("95", le="0.5"),
                _series("100", le="+Inf"),
                _series("50", le="0.5", ns=other[0], svc=other[1]),
                _series("60", le="+Inf", ns=other[0], svc=other[1]),
            ],
            narrowed[Signal.TTFT_P99]: [_series("0.9"), _series("1.5", ns=other[0], svc=other[1])],
        }
    )
    reading = await read_metrics(fake, SCOPE, at=1000.0, slos={KEY: (0.5, 0.05)})
    assert reading.covers((0.5, 0.05))
    assert not reading.covers((0.25, 0.05))
    assert not reading.covers((0.5, 0.1))
    # Its SLO changed after the reading: 0.25 s was not read, so nothing is said of it.
    figures = figures_for(reading, other, ttft_slo_s=0.25, tpot_slo_s=None)
    assert figures.ttft_within_slo is None
    assert figures.p99_ttft_s is None
    assert figures.goodput is None
