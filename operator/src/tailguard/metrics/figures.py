"""One reading of Prometheus per cycle: every signal queried once, then turned into figures per service
and SLO."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from tailguard.contract.slo import joint_goodput, slo_figures
from tailguard.metrics.prometheus import PrometheusSource
from tailguard.metrics.promql import SLO_HISTOGRAMS, QueryScope, Signal, all_queries
from tailguard.metrics.results import QueryError, SeriesByService, ServiceKey, group_vector
from tailguard.policy import EngineFigures

__all__ = ["MetricsReading", "ServiceFigures", "SloEdges", "figures_for", "joint_goodput", "read_metrics"]

#: A service's SLOs in seconds, ``(ttft, tpot or None)``: the bucket edges its figures need.
SloEdges = tuple[float, float | None]


@dataclass
class MetricsReading:
    """What one reading got: each signal's series, the errors, and when it was read."""

    at: float
    series: dict[Signal, SeriesByService] = field(default_factory=dict)
    errors: dict[Signal, str] = field(default_factory=dict)
    #: The SLO histograms read at these edges only (their p99 is Prometheus's); absent: every bucket.
    narrowed: dict[Signal, frozenset[float]] = field(default_factory=dict)
    #: The signals queried, in order (a histogram read again in full counts twice).
    queried: list[Signal] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every query answered."""
        return not self.errors

    def covers(self, slo: SloEdges) -> bool:
        """The buckets a service with these SLOs needs were read."""
        return all(
            edge is None or edge in self.narrowed.get(signal, frozenset([edge]))
            for signal, edge in _edges(slo).items()
        )


def _edges(slo: SloEdges) -> dict[Signal, float | None]:
    """Each SLO histogram's edge for a service with these SLOs (``None``: no SLO on it)."""
    ttft, tpot = slo
    return {Signal.TTFT_BUCKETS: ttft, Signal.TPOT_BUCKETS: tpot}


async def read_metrics(
    source: PrometheusSource,
    scope: QueryScope,
    *,
    at: float,
    slos: Mapping[ServiceKey, SloEdges] | None = None,
) -> MetricsReading:
    """Run every query of ``scope`` concurrently; a failed query is recorded, never raised.

    With ``slos`` (the services to decide for), the latency histograms are read at those SLOs'
    edges only, with their p99 from Prometheus: most of a reading's series are buckets no SLO
    needs. A service whose histogram lacks its SLO as an edge (buckets set by hand) has that
    histogram read again in full, in the same reading.
    """
    narrowed: dict[Signal, frozenset[float]] = {}
    if slos is not None:
        edges = [_edges(slo) for slo in slos.values()]
        for signal in SLO_HISTOGRAMS:
            narrowed[signal] = frozenset(edge for one in edges if (edge := one[signal]) is not None)
    reading = MetricsReading(at=at, narrowed=narrowed)

    async def one(signal: Signal, promql: str) -> None:
        reading.queried.append(signal)
        try:
            vector = await source.query(promql, at=at)
        except QueryError as exc:
            reading.errors[signal] = str(exc)
            return
        reading.series[signal] = group_vector(
            vector, namespace_label=scope.namespace_label, service_label=scope.service_label
        )

    await asyncio.gather(*(one(s, q) for s, q in all_queries(scope, narrowed).items()))
    if slos is not None:
        full = all_queries(scope)
        missing = [signal for signal in narrowed if _edge_missing(reading, signal, slos)]
        for signal in missing:
            del reading.narrowed[signal]
        await asyncio.gather(*(one(s, full[s]) for s in missing))
    return reading


def _has_edge(buckets: list[tuple[float, float]], edge: float) -> bool:
    return any(math.isclose(bound, edge, rel_tol=1e-9) for bound, _ in buckets)


def _edge_missing(reading: MetricsReading, signal: Signal, slos: Mapping[ServiceKey, SloEdges]) -> bool:
    """Some service reported this histogram without its SLO among the buckets read."""
    series = reading.series.get(signal)
    if series is None:
        return False
    for key, buckets in series.buckets.items():
        slo = slos.get(key)
        edge = _edges(slo)[signal] if slo is not None else None
        if edge is not None and not _has_edge(buckets, edge):
            return True
    return False


@dataclass(frozen=True)
class ServiceFigures(EngineFigures):
    """The figures of one service in one reading (the engines' figures the policy reads, declared
    once in ``policy.EngineFigures``), how many pods reported, and when."""

    reporting_pods: int = 0
    sample_time: float | None = None
    errors: tuple[str, ...] = ()


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _value(reading: MetricsReading, signal: Signal, key: ServiceKey) -> float | None:
    series = reading.series.get(signal)
    return _finite(series.values.get(key)) if series is not None else None


def _buckets(reading: MetricsReading, signal: Signal, key: ServiceKey) -> list[tuple[float, float]] | None:
    series = reading.series.get(signal)
    buckets = series.buckets.get(key) if series is not None else None
    if not buckets:
        return None
    # Sorted by bound: +Inf, when present, is nearly always last (a "-Inf" bound would come first).
    if not math.isinf(buckets[-1][0]) and not any(math.isinf(le) for le, _ in buckets):
        return None
    return buckets


def _slo_buckets(
    reading: MetricsReading, signal: Signal, key: ServiceKey, slo_s: float | None
) -> list[tuple[float, float]] | None:
    """A service's buckets of an SLO histogram; read narrowed, only with its SLO among them."""
    buckets = _buckets(reading, signal, key)
    narrowed = signal in reading.narrowed
    if buckets is not None and slo_s is not None and narrowed and not _has_edge(buckets, slo_s):
        return None
    return buckets


def _p99(
    reading: MetricsReading,
    signal: Signal,
    key: ServiceKey,
    buckets: list[tuple[float, float]] | None,
    local: float | None,
) -> float | None:
    """The p99 of a histogram: Prometheus's when it was read narrowed, else the one from its buckets."""
    if signal not in reading.narrowed:
        return local
    return _value(reading, SLO_HISTOGRAMS[signal][1], key) if buckets is not None else None


def figures_for(
    reading: MetricsReading, key: ServiceKey, *, ttft_slo_s: float, tpot_slo_s: float | None
) -> ServiceFigures:
    """The figures of service ``key`` against its own SLOs.

    The histogram math is ``tailguard.contract.slo_figures``, shared with the simulator. A
    histogram read narrowed gives its p99 from Prometheus, and its share within the SLO only when
    that SLO is among the edges read (else nothing: the service was not asked for).
    """
    ttft = _slo_buckets(reading, Signal.TTFT_BUCKETS, key, ttft_slo_s)
    tpot = _slo_buckets(reading, Signal.TPOT_BUCKETS, key, tpot_slo_s)
    figures = slo_figures(ttft, tpot, ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s)
    p99_ttft = _p99(reading, Signal.TTFT_BUCKETS, key, ttft, figures.p99_ttft_s)
    p99_tpot = _p99(reading, Signal.TPOT_BUCKETS, key, tpot, figures.p99_tpot_s)
    pods = _value(reading, Signal.REPORTING_PODS, key)
    return ServiceFigures(
        p99_ttft_s=p99_ttft,
        p99_tpot_s=p99_tpot,
        ttft_within_slo=figures.ttft_within_slo,
        tpot_within_slo=figures.tpot_within_slo,
        goodput=figures.goodput,
        request_rate=_value(reading, Signal.REQUEST_RATE, key),
        request_rate_burst=_value(reading, Signal.REQUEST_RATE_BURST, key),
        prompt_token_rate=_value(reading, Signal.PROMPT_TOKEN_RATE, key),
        generation_token_rate=_value(reading, Signal.GENERATION_TOKEN_RATE, key),
        running=_value(reading, Signal.RUNNING, key),
        waiting=_value(reading, Signal.WAITING, key),
        kv_cache_usage=_value(reading, Signal.KV_CACHE_USAGE, key),
        preemption_rate=_value(reading, Signal.PREEMPTION_RATE, key),
        itl_mean_s=_value(reading, Signal.ITL_MEAN, key),
        queue_time_mean_s=_value(reading, Signal.QUEUE_TIME_MEAN, key),
        prefill_time_mean_s=_value(reading, Signal.PREFILL_TIME_MEAN, key),
        reporting_pods=int(pods) if pods is not None else 0,
        sample_time=_value(reading, Signal.LAST_SAMPLE, key),
        errors=tuple(f"{s}: {e}" for s, e in sorted(reading.errors.items())),
    )
