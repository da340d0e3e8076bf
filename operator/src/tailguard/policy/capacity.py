"""A per-replica capacity model learned online from what Prometheus reports.

A vLLM replica decodes its whole batch each engine step, so the mean step time τ grows with the
batch N about linearly: τ(N) = α + β·N (the base step reads the weights; each sequence adds its
own work). By Little's law a replica holding N requests of ``out`` output tokens finishes

    λ(N) = N / (out · τ(N))  requests per second.

The sustainable batch N* is the smallest of: ``batch_fill`` × max batch (beyond it requests
queue for a slot and TTFT jumps), the batch whose step time keeps p99 TPOT under its SLO, and the
batch the KV cache holds. Capacity is λ(N*), scaled by a correction learned from breaches.

τ is the mean inter-token latency over the window and N the mean decode batch (generated tokens
per second × τ). The base step α is the shortest step seen (at a small batch τ ≈ α); the slope β
is a least-squares fit of τ − α against N through the origin, over pairs that fade with a
half-life of ``FIT_HALF_LIFE_S``, plus one prior pair (N = ``PRIOR_BATCH``, τ = ``PRIOR_RATIO`` × α)
of small weight, so that a service only ever seen at light load does not extrapolate a flat line.
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


#: The prior pair: at a batch of 200 the step is four base steps (8B and 70B models on H100 and
#: A100 all sit between 3.5 and 5 in calibration.md's figures), with the weight of one pair.
PRIOR_BATCH = 200.0
PRIOR_RATIO = 4.0
PRIOR_WEIGHT = 1.0


def implied_base(batch: float, step_s: float) -> float:
    """The base step α for which (batch, step) lies on the prior curve α·(1 + (r−1)·N/N₀)."""
    return step_s / (1.0 + (PRIOR_RATIO - 1.0) * max(0.0, batch) / PRIOR_BATCH)


def anchored_model(batch: float, step_s: float) -> StepModel:
    """The prior curve's shape through one (batch, step) pair."""
    alpha = implied_base(batch, step_s)
    return StepModel(alpha, alpha * (PRIOR_RATIO - 1.0) / PRIOR_BATCH, fitted=False)


def step_model(fit: Fit, floor_s: float | None) -> StepModel | None:
    """The step-time line from the sums and the base step, or ``None`` before any pair was seen."""
    w, sn, snn, _st, snt = fit
    if w < 1e-9 or floor_s is None or floor_s <= 0:
        return None
    alpha = floor_s
    # Σ N·(τ − α) / Σ N² with the prior pair added.
    num = snt - alpha * sn + PRIOR_WEIGHT * PRIOR_BATCH * (PRIOR_RATIO - 1.0) * alpha
    den = snn + PRIOR_WEIGHT * PRIOR_BATCH * PRIOR_BATCH
    beta = max(num / den, 0.0)
    spread = snn / w - (sn / w) ** 2
    return StepModel(alpha, beta, fitted=w >= 3.0 and spread > (_MIN_SPREAD * sn / w) ** 2)


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
    tpot_offset_s: float | None,
    kv_per_seq: float | None,
    batch_now: float | None = None,
    tpot_ok_now: bool = False,
) -> Capacity:
    """λ(N*) for one replica; see the module text for N*.

    p99 TPOT is modelled as the mean step plus ``tpot_offset_s`` (learned; until then a quarter
    of the step). A batch at which p99 TPOT is seen within its SLO is never ruled out.
    """
    limits = [(batch_fill * max_batch, "max batch")]
    if tpot_slo_s is not None:
        budget = 0.9 * tpot_slo_s
        allowed = (
            model.batch_for_step(budget - tpot_offset_s)
            if tpot_offset_s is not None
            else model.batch_for_step(budget / 1.25)
        )
        if tpot_ok_now and batch_now is not None:
            allowed = max(allowed, batch_now)
        limits.append((allowed, "TPOT SLO"))
    if kv_per_seq is not None and kv_per_seq > 0:
        limits.append((0.9 / kv_per_seq, "KV cache"))
    batch, bound = min(limits, key=lambda item: item[0])
    batch = max(1.0, batch)
    step = model.step(batch)
    # a request spends its output tokens in decode steps and about one more step in prefill
    rate = batch / ((max(1.0, output_tokens) + 1.0) * step)
    return Capacity(rate, batch, step, bound)
