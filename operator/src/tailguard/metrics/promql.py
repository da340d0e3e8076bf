"""PromQL for every InferenceService at once: one query per signal per cycle, grouped by service.

The builders are pure functions of a :class:`QueryScope`; they never embed a service name, so the
number of queries does not grow with the number of services.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

from tailguard.contract.vllm import KV_CACHE_USAGE_METRICS, SERVICE_LABEL, VllmMetric


class Signal(StrEnum):
    """What one query measures; also the label of the operator's query-error counter."""

    TTFT_BUCKETS = "ttft_buckets"
    TPOT_BUCKETS = "tpot_buckets"
    #: p99 computed by Prometheus, read only when the buckets are read narrowed to the SLO edges.
    TTFT_P99 = "ttft_p99"
    TPOT_P99 = "tpot_p99"
    REQUEST_RATE = "request_rate"
    #: Finished requests over the short burst window.
    REQUEST_RATE_BURST = "request_rate_burst"
    PROMPT_TOKEN_RATE = "prompt_token_rate"
    GENERATION_TOKEN_RATE = "generation_token_rate"
    RUNNING = "running"
    WAITING = "waiting"
    KV_CACHE_USAGE = "kv_cache_usage"
    PREEMPTION_RATE = "preemption_rate"
    ITL_MEAN = "itl_mean"
    QUEUE_TIME_MEAN = "queue_time_mean"
    PREFILL_TIME_MEAN = "prefill_time_mean"
    REPORTING_PODS = "reporting_pods"
    LAST_SAMPLE = "last_sample"


def escape_label_value(value: str) -> str:
    """A label value quoted for a PromQL matcher (backslash, quote and newline escaped)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


_DURATION_UNITS = {
    "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0,
}  # fmt: skip
_DURATION_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")


def duration_seconds(text: str) -> float:
    """A Prometheus duration (``10s``, ``2m``, ``1h30m``) in seconds; ``ValueError`` if malformed."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _DURATION_UNITS[u] for n, u in parts)


@dataclass(frozen=True)
class QueryScope:
    """Which series the queries read and how they group them."""

    service_label: str = SERVICE_LABEL
    namespace_label: str = "namespace"
    #: Namespaces to read; empty means every namespace.
    namespaces: tuple[str, ...] = ()
    #: The ``rate()`` window; it must span at least two scrape intervals.
    rate_window: str = "2m"
    #: The short window of the burst rate: two scrape intervals (the rendered PodMonitor's 15 s).
    burst_window: str = "30s"
    extra_matchers: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    @cached_property
    def rate_window_s(self) -> float:
        """The ``rate()`` window in seconds (the policy reasons about what the rates lag by); parsed once."""
        return duration_seconds(self.rate_window)

    @cached_property
    def burst_window_s(self) -> float:
        """The burst window in seconds; parsed once."""
        return duration_seconds(self.burst_window)

    @property
    def group(self) -> str:
        return f"{self.namespace_label}, {self.service_label}"

    def selector(self, metric_regex: str | None = None) -> str:
        """The label matchers every query uses, optionally with a ``__name__`` regex."""
        parts = []
        if metric_regex is not None:
            parts.append(f"__name__=~{escape_label_value(metric_regex)}")
        parts.append(f'{self.service_label}!=""')
        if self.namespaces:
            alternatives = "|".join(_regex_escape(n) for n in sorted(self.namespaces))
            parts.append(f"{self.namespace_label}=~{escape_label_value(alternatives)}")
        parts += [f"{k}={escape_label_value(v)}" for k, v in self.extra_matchers]
        return "{" + ", ".join(parts) + "}"


def _regex_escape(value: str) -> str:
    return "".join("\\" + c if c in ".+*?()|[]{}^$\\" else c for c in value)


def le_text(bound: float) -> str:
    """A bucket bound as the ``le`` label the Prometheus Python client writes it (``0.5``, ``1.0``,
    ``+Inf``; Go's exponent form from a million up), so a matcher can select that bucket."""
    if math.isinf(bound):
        return "+Inf" if bound > 0 else "-Inf"
    text = repr(float(bound))
    dot = text.find(".")
    if bound > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


def histogram_buckets(scope: QueryScope, family: VllmMetric, edges: Collection[float] | None = None) -> str:
    """Per-service bucket rates of a histogram family, kept by ``le`` so any SLO can be read off them;
    with ``edges``, only those buckets and ``+Inf`` (what the share within an SLO that is an edge
    needs: the operator renders every engine with its SLOs as bucket edges)."""
    selector = scope.selector()
    if edges is not None:
        texts = "|".join(_regex_escape(le_text(b)) for b in (*sorted(set(edges)), math.inf))
        selector = selector[:-1] + f", le=~{escape_label_value(texts)}" + "}"
    return f"sum by ({scope.group}, le) (rate({family.value}_bucket{selector}[{scope.rate_window}]))"


def histogram_p99(scope: QueryScope, family: VllmMetric) -> str:
    """Per-service p99 of a histogram family, interpolated by Prometheus over every bucket."""
    return f"histogram_quantile(0.99, {histogram_buckets(scope, family)})"


def counter_rate(scope: QueryScope, counter: VllmMetric, window: str | None = None) -> str:
    """Per-service rate of a counter, summed over pods and engines (over the rate window unless
    ``window`` is given)."""
    return f"sum by ({scope.group}) (rate({counter.value}{scope.selector()}[{window or scope.rate_window}]))"


def gauge_sum(scope: QueryScope, gauge: VllmMetric) -> str:
    """Per-service sum of a gauge over pods and engines."""
    return f"sum by ({scope.group}) ({gauge.value}{scope.selector()})"


def kv_cache_usage(scope: QueryScope) -> str:
    """Per-service mean KV-cache use; accepts the current and the legacy gauge name."""
    names = "|".join(_regex_escape(m.value) for m in KV_CACHE_USAGE_METRICS)
    return f"avg by ({scope.group}) ({scope.selector(names)})"


def histogram_mean(scope: QueryScope, family: VllmMetric) -> str:
    """Per-service mean of a histogram over the window: rate of its sum over rate of its count."""
    window = f"[{scope.rate_window}]"
    return (
        f"sum by ({scope.group}) (rate({family.value}_sum{scope.selector()}{window})) / "
        f"sum by ({scope.group}) (rate({family.value}_count{scope.selector()}{window}))"
    )


def reporting_pods(scope: QueryScope) -> str:
    """How many engine series report per service (a pod that stopped reporting shows here)."""
    return f"count by ({scope.group}) ({VllmMetric.RUNNING.value}{scope.selector()})"


def last_sample(scope: QueryScope) -> str:
    """Newest sample time per service, to tell fresh data from stale."""
    return f"max by ({scope.group}) (timestamp({VllmMetric.RUNNING.value}{scope.selector()}))"


#: The histograms the SLOs are read from, and the signal of each one's p99.
SLO_HISTOGRAMS: dict[Signal, tuple[VllmMetric, Signal]] = {
    Signal.TTFT_BUCKETS: (VllmMetric.TTFT, Signal.TTFT_P99),
    Signal.TPOT_BUCKETS: (VllmMetric.TPOT, Signal.TPOT_P99),
}


def all_queries(
    scope: QueryScope, narrowed: Mapping[Signal, Collection[float]] | None = None
) -> dict[Signal, str]:
    """Every query of one cycle, by signal. ``narrowed``: SLO histograms to read at those edges only,
    each with its p99 computed by Prometheus instead (17 series per service with one SLO each,
    instead of 54)."""
    narrowed = narrowed or {}
    histograms: dict[Signal, str] = {}
    for signal, (family, p99) in SLO_HISTOGRAMS.items():
        edges = narrowed.get(signal)
        histograms[signal] = histogram_buckets(scope, family, edges)
        if edges is not None:
            histograms[p99] = histogram_p99(scope, family)
    return {
        **histograms,
        Signal.REQUEST_RATE: counter_rate(scope, VllmMetric.REQUEST_SUCCESS),
        Signal.REQUEST_RATE_BURST: counter_rate(scope, VllmMetric.REQUEST_SUCCESS, scope.burst_window),
        Signal.PROMPT_TOKEN_RATE: counter_rate(scope, VllmMetric.PROMPT_TOKENS),
        Signal.GENERATION_TOKEN_RATE: counter_rate(scope, VllmMetric.GENERATION_TOKENS),
        Signal.RUNNING: gauge_sum(scope, VllmMetric.RUNNING),
        Signal.WAITING: gauge_sum(scope, VllmMetric.WAITING),
        Signal.KV_CACHE_USAGE: kv_cache_usage(scope),
        Signal.PREEMPTION_RATE: counter_rate(scope, VllmMetric.PREEMPTIONS),
        Signal.ITL_MEAN: histogram_mean(scope, VllmMetric.INTER_TOKEN_LATENCY),
        Signal.QUEUE_TIME_MEAN: histogram_mean(scope, VllmMetric.QUEUE_TIME),
        Signal.PREFILL_TIME_MEAN: histogram_mean(scope, VllmMetric.PREFILL_TIME),
        Signal.REPORTING_PODS: reporting_pods(scope),
        Signal.LAST_SAMPLE: last_sample(scope),
    }
