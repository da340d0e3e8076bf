"""One reading of Prometheus per cycle: every signal queried once, then turned into figures per service
and SLO."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field

from tailguard.contract.slo import joint_goodput, slo_figures
from tailguard.metrics.prometheus import PrometheusSource
from tailguard.metrics.promql import QueryScope, Signal, all_queries
from tailguard.metrics.results import QueryError, SeriesByService, ServiceKey, group_vector
from tailguard.policy import EngineFigures

__all__ = ["MetricsReading", "ServiceFigures", "figures_for", "joint_goodput", "read_metrics"]


@dataclass
class MetricsReading:
    """What one reading got: each signal's series, the errors, and when it was read."""

    at: float
    series: dict[Signal, SeriesByService] = field(default_factory=dict)
    errors: dict[Signal, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every query answered."""
        return not self.errors


async def read_metrics(source: PrometheusSource, scope: QueryScope, *, at: float) -> MetricsReading:
    """Run every query of ``scope`` concurrently; a failed query is recorded, never raised."""
    queries = all_queries(scope)
    reading = MetricsReading(at=at)

    async def one(signal: Signal, promql: str) -> None:
        try:
            vector = await source.query(promql, at=at)
        except QueryError as exc:
            reading.errors[signal] = str(exc)
            return
        reading.series[signal] = group_vector(
            vector, namespace_label=scope.namespace_label, service_label=scope.service_label
        )

    await asyncio.gather(*(one(s, q) for s, q in queries.items()))
    return reading


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


def figures_for(
    reading: MetricsReading, key: ServiceKey, *, ttft_slo_s: float, tpot_slo_s: float | None
) -> ServiceFigures:
    """The figures of service ``key`` against its own SLOs.

    The histogram math is ``tailguard.contract.slo_figures``, shared with the simulator.
    """
    figures = slo_figures(
        _buckets(reading, Signal.TTFT_BUCKETS, key),
        _buckets(reading, Signal.TPOT_BUCKETS, key),
        ttft_slo_s=ttft_slo_s,
        tpot_slo_s=tpot_slo_s,
    )
    pods = _value(reading, Signal.REPORTING_PODS, key)
    return ServiceFigures(
        p99_ttft_s=figures.p99_ttft_s,
        p99_tpot_s=figures.p99_tpot_s,
        ttft_within_slo=figures.ttft_within_slo,
        tpot_within_slo=figures.tpot_within_slo,
        goodput=figures.goodput,
        request_rate=_value(reading, Signal.REQUEST_RATE, key),
        prompt_token_rate=_value(reading, Signal.PROMPT_TOKEN_RATE, key),
        generation_token_rate=_value(reading, Signal.GENERATION_TOKEN_RATE, key),
        running=_value(reading, Signal.RUNNING, key),
        waiting=_value(reading, Signal.WAITING, key),
        kv_cache_usage=_value(reading, Signal.KV_CACHE_USAGE, key),
        preemption_rate=_value(reading, Signal.PREEMPTION_RATE, key),
        itl_mean_s=_value(reading, Signal.ITL_MEAN, key),
        queue_time_mean_s=_value(reading, Signal.QUEUE_TIME_MEAN, key),
        reporting_pods=int(pods) if pods is not None else 0,
        sample_time=_value(reading, Signal.LAST_SAMPLE, key),
        errors=tuple(f"{s}: {e}" for s, e in sorted(reading.errors.items())),
    )
