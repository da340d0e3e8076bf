"""An engine snapshot in the Prometheus text format, named and labelled as vLLM exposes it."""

from __future__ import annotations

import math
from collections.abc import Iterable

from tailguard.contract.vllm import ENGINE_LABEL, MODEL_NAME_LABEL, VllmMetric
from tailguard.sim.engine import EngineSnapshot


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in pairs)
    return "{" + inner + "}" if inner else ""


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _histogram(
    lines: list[str],
    name: str,
    base: list[tuple[str, str]],
    buckets: Iterable[tuple[float, int]],
    total: float,
) -> None:
    lines.append(f"# TYPE {name} histogram")
    count = 0
    for bound, cumulative in buckets:
        lines.append(f"{name}_bucket{_labels([*base, ('le', _number(bound))])} {cumulative}")
        count = cumulative
    lines.append(f"{name}_sum{_labels(base)} {_number(total)}")
    lines.append(f"{name}_count{_labels(base)} {count}")


def render_metrics(snapshot: EngineSnapshot, *, model_name: str, engine: str = "0") -> str:
    """The ``/metrics`` body of one engine."""
    base = [(MODEL_NAME_LABEL, model_name), (ENGINE_LABEL, engine)]
    lines: list[str] = []

    def gauge(name: str, value: float) -> None:
        lines.append(f"# TYPE {name} gauge")
        lines.append(f"{name}{_labels(base)} {_number(value)}")

    def counter(name: str, value: float, extra: list[tuple[str, str]] | None = None) -> None:
        lines.append(f"# TYPE {name} counter")
        lines.append(f"{name}{_labels([*base, *(extra or [])])} {_number(value)}")

    gauge(VllmMetric.RUNNING, snapshot.running)
    gauge(VllmMetric.WAITING, snapshot.waiting)
    gauge(VllmMetric.KV_CACHE_USAGE, snapshot.kv_cache_usage)
    counter(VllmMetric.PREEMPTIONS, snapshot.preemptions)
    counter(VllmMetric.PROMPT_TOKENS, snapshot.prompt_tokens)
    counter(VllmMetric.GENERATION_TOKENS, snapshot.generation_tokens)
    lines.append(f"# TYPE {VllmMetric.REQUEST_SUCCESS} counter")
    for reason, value in (("stop", snapshot.requests_finished), ("abort", snapshot.requests_aborted)):
        lines.append(f"{VllmMetric.REQUEST_SUCCESS}{_labels([*base, ('finished_reason', reason)])} {value}")
    _histogram(lines, VllmMetric.TTFT, base, snapshot.ttft, snapshot.ttft_sum)
    _histogram(lines, VllmMetric.TPOT, base, snapshot.tpot, snapshot.tpot_sum)
    _histogram(lines, VllmMetric.INTER_TOKEN_LATENCY, base, snapshot.itl, snapshot.itl_sum)
    _histogram(lines, VllmMetric.E2E_LATENCY, base, snapshot.e2e, snapshot.e2e_sum)
    _histogram(lines, VllmMetric.QUEUE_TIME, base, snapshot.queue, snapshot.queue_sum)
    return "\n".join(lines) + "\n"
