"""A per-replica capacity model learned online from what Prometheus reports.

A vLLM replica decodes its whole batch each engine step, so the mean step time τ grows with the
batch N about linearly: τ(N) = α + β·N (the base step reads the weights; each sequence adds its
own work). By Little's law a replica holding N requests of ``out`` output tokens finishes

    λ(N) = N / (out · τ(N))  requests per second.

The sustainable batch N* is the smallest of: ``batch_fill`` × max batch (beyond it requests
queue for a slot and TTFT jumps), the batch whose step time keeps p99 TPOT under its SLO, and the
batch the KV cache holds. Capacity is λ(N*), scaled by a correction learned from breaches.

τ is read as ``running / generation-token rate``; α and β are a least-squares line through
(N, τ) pairs, with older pairs fading (half-life ``FIT_HALF_LIFE_S``). Until the pairs spread
enough to fit, the line runs through the shortest step seen and the latest pair.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FIT_HALF_LIFE_S = 1800.0
#: Minimum spread of N (relative to its mean) before the least-squares slope is trusted.
_MIN_SPREAD = 0.15

Fit = tuple[float, float, float, float, float]


def update_fit(fit: Fit, batch: float, step_s: float, elapsed_s: float) -> Fit:
    """Fade the sums by ``elapsed_s`` and add the pair (batch, step)."""
    decay = 0.5 ** (max(0.0, elapsed_s) / FIT_HALF_LIFE_S)
    w, sn, snn, st, snt = (v * decay for v in fit)
    return (w + 1.0, sn + batch, snn + batch * batch, st + step_s, snt + batch * step_s)


@dataclass(frozen=True)
class StepModel:
    """τ(N) = alpha + beta·N, in seconds."""

    alpha: float
    beta: float
    fitted: bool

    def step(self, batch: float) -> float:
        return self.alpha + self.beta * batch

    def batch_for_step(self, step_s: float) -> float:
        """The largest batch whose step time stays within ``step_s``."""
        if step_s <= self.alpha:
            return 0.0
        return math.inf if self.beta <= 0 else (step_s - self.alpha) / self.beta


def step_model(fit: Fit, floor_s: float | None) -> StepModel | None:
    """The step-time line from the sums, or ``None`` before any pair was seen."""
    w, sn, snn, st, snt = fit
    if w < 1e-9:
        return None
    mean_n, mean_t = sn / w, st / w
    var = snn / w - mean_n * mean_n
    if w >= 3.0 and var > (_MIN_SPREAD * mean_n) ** 2 and var > 1.0:
        beta = (snt / w - mean_n * mean_t) / var
        alpha = mean_t - beta * mean_n
        if beta > 0 and alpha > 0:
            return StepModel(alpha, beta, fitted=True)
    # Not enough spread: a line through the base step and the mean pair. Without a base step
    # seen at a small batch, assume half the step is the base (errs towards less capacity).
    base = floor_s if floor_s is not None and floor_s < mean_t * 0.95 else mean_t * 0.5
    beta = (mean_t - base) / mean_n if mean_n > 0 else 0.0
    return StepModel(base, max(beta, 0.0), fitted=False)


@dataclass(frozen=True)
class Capacity:
    """Sustainable requests per second of one replica and what bounds it."""

    rate: float
    batch: float
    step_s: float
    bound: str  # "max batch", "TPOT SLO" or "KV cache"


def capacity(
    model: StepModel,
    *,
    output_tokens: float,
    max_batch: int,
    batch_fill: float,
    tpot_slo_s: float | None,
    tpot_ratio: float,
    kv_per_seq: float | None,
) -> Capacity:
    """λ(N*) for one replica; see the module text for N*."""
    limits = [(batch_fill * max_batch, "max batch")]
    if tpot_slo_s is not None:
        # p99 TPOT runs ``tpot_ratio`` above the mean step; keep a 10% margin under the SLO.
        limits.append((model.batch_for_step(0.9 * tpot_slo_s / tpot_ratio), "TPOT SLO"))
    if kv_per_seq is not None and kv_per_seq > 0:
        limits.append((0.9 / kv_per_seq, "KV cache"))
    batch, bound = min(limits, key=lambda item: item[0])
    batch = max(1.0, batch)
    step = model.step(batch)
    # a request spends its output tokens in decode steps and about one more step in prefill
    rate = batch / ((max(1.0, output_tokens) + 1.0) * step)
    return Capacity(rate, batch, step, bound)
