"""An engine snapshot as the Prometheus text a vLLM ``/metrics`` endpoint serves.

For a process that gives Kubernetes pods a vLLM voice: run an :class:`~tailguard.sim.engine.Engine`,
and answer each scrape with ``render(engine.snapshot(), model_name=...)``. Names, labels and bucket
bounds are the contract's (``tailguard.contract.vllm``); counters carry ``_total``.
"""

from __future__ import annotations

import math

from tailguard.contract.vllm import ENGINE_LABEL, MODEL_NAME_LABEL, VllmMetric
from tailguard.sim.engine import EngineSnapshot


def _labels(base: dict[str, str], **extra: str) -> str:
    merged = {**base, **extra}
    body = ",".join(f'{k}="{v}"' for k, v in merged.items())
    return "{" + body + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def _histogram(
    name: str, base: dict[str, str], buckets: tuple[tuple[float, int], ...], total: float
) -> list[str]:
    lines = [f"# TYPE {name} histogram"]
    for bound, count in buckets:
        lines.append(f"{name}_bucket{_labels(base, le=_number(bound))} {count}")
    lines.append(f"{name}_sum{_labels(base)} {_number(total)}")
    lines.append(f"{name}_count{_labels(base)} {buckets[-1][1]}")
    return lines


def render(snapshot: EngineSnapshot, *, model_name: str, engine: str = "0") -> str:
    """The snapshot in the Prometheus text exposition format (version 0.0.4)."""
    base = {MODEL_NAME_LABEL: model_name, ENGINE_LABEL: engine}
    s = snapshot
    lines: list[str] = []
    for metric, value in (
        (VllmMetric.RUNNING, s.running),
        (VllmMetric.WAITING, s.waiting),
        (VllmMetric.KV_CACHE_USAGE, s.kv_cache_usage),
    ):
        lines += [f"# TYPE {metric.value} gauge", f"{metric.value}{_labels(base)} {_number(value)}"]
    for metric, value in (
        (VllmMetric.PREEMPTIONS, s.preemptions),
        (VllmMetric.PROMPT_TOKENS, s.prompt_tokens),
        (VllmMetric.GENERATION_TOKENS, s.generation_tokens),
    ):
        lines += [f"# TYPE {metric.value} counter", f"{metric.value}{_labels(base)} {_number(value)}"]
    success = VllmMetric.REQUEST_SUCCESS.value
    lines.append(f"# TYPE {success} counter")
    lines.append(f"{success}{_labels(base, finished_reason='stop')} {s.requests_finished}")
    lines.append(f"{success}{_labels(base, finished_reason='abort')} {s.requests_aborted}")
    lines += _histogram(VllmMetric.TTFT.value, base, s.ttft, s.ttft_sum)
    lines += _histogram(VllmMetric.TPOT.value, base, s.tpot, s.tpot_sum)
    lines += _histogram(VllmMetric.INTER_TOKEN_LATENCY.value, base, s.itl, s.itl_sum)
    lines += _histogram(VllmMetric.E2E_LATENCY.value, base, s.e2e, s.e2e_sum)
    lines += _histogram(VllmMetric.QUEUE_TIME.value, base, s.queue, s.queue_sum)
    lines += _histogram(VllmMetric.PREFILL_TIME.value, base, s.prefill, s.prefill_sum)
    return "\n".join(lines) + "\n"
