"""A per-replica capacity model learned online from what Prometheus reports.

A vLLM replica runs engine steps. Each step decodes one token for every running request and
fills the rest of its token budget with prompt chunks (chunked prefill), so its time is about

    τ = α + β·N + γ·x

with N the decode batch, x the prompt tokens prefilled in that step, α the base step (the weight
read every step pays), β the cost of one more sequence and γ the cost of one prompt token.

Over a window a replica with prompt tokens arriving at p per second prefills x ≈ p·τ̄ tokens per
step, so the mean inter-token latency τ̄ (every step of a decode, prefill chunks included) obeys
τ̄ − α = β·N + γ·p·τ̄. Both features are measured: N is generated tokens per second × τ̄ (Little's
law), p is the prompt-token rate. The base step α is the smallest one any observation implies on
the prior curve; β and γ are a least-squares fit of τ̄ − α on (N, x) through the origin, over
pairs that fade with a half-life of ``FIT_HALF_LIFE_S``, plus two prior pairs of small weight:
at a batch of ``PRIOR_BATCH`` the decode step is ``PRIOR_RATIO`` base steps, and a prompt token
costs α / ``PRIOR_TOKENS_PER_BASE``. A service only ever seen at light load or with short prompts
thus does not extrapolate a flat line.

In a steady state with P prompt tokens and ``out`` output tokens per request, N/out requests
finish per step and as many prompts are prefilled, so the mean step at batch N is

    τ̄(N) = α + (β + γ·P/out)·N

and by Little's law the replica finishes λ(N) = N / (out·τ̄(N)) = 1 / (out·τ_d(N)/N + γ·P)
requests per second, τ_d = α + β·N being the decode part. The prompt share of engine time is
γ·P·λ. The sustainable batch N* is the smallest of: ``batch_fill`` × max batch (beyond it
requests queue for a slot), the batch whose mean step, plus the learned offset and the prompt
chunks' interference (:func:`interference_s`), keeps p99 TPOT under its SLO, the batch the KV
cache holds, and the batch at which p99 TTFT (queueing behind other prompts + the prefill
itself, see :func:`ttft_p99`) reaches its SLO. Capacity is λ(N*), scaled by a correction learned
from breaches.

Without a prompt-token rate no prompt cost can be told apart: β then carries the prompts of the
current mix and a prompt counts as one more decode step, as it did before γ was learned.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

FIT_HALF_LIFE_S = 1800.0
#: Minimum spread of N (relative to its mean) before the least-squares slope is trusted.
_MIN_SPREAD = 0.15

#: Decayed sums of (N, τ): weight, ΣN, ΣN², Στ, ΣNτ.
Fit = tuple[float, float, float, float, float]
#: Decayed sums with the prompt tokens per step x, on the same pairs: Σx, Σx², ΣNx, Σxτ.
PrefillFit = tuple[float, float, float, float]

EMPTY_PREFILL_FIT: PrefillFit = (0.0, 0.0, 0.0, 0.0)


def _decay(elapsed_s: float) -> float:
    return float(0.5 ** (max(0.0, elapsed_s) / FIT_HALF_LIFE_S))


def update_fit(fit: Fit, batch: float, step_s: float, elapsed_s: float) -> Fit:
    """Fade the sums by ``elapsed_s`` and add the pair (batch, step)."""
    decay = _decay(elapsed_s)
    w, sn, snn, st, snt = (v * decay for v in fit)
    return (w + 1.0, sn + batch, snn + batch * batch, st + step_s, snt + batch * step_s)


def update_prefill_fit(
    fit: PrefillFit, batch: float, prefill_tokens: float, step_s: float, elapsed_s: float
) -> PrefillFit:
    """Fade the prompt sums exactly as :func:`update_fit` fades its own and add x for this pair."""
    decay = _decay(elapsed_s)
    sx, sxx, snx, sxt = (v * decay for v in fit)
    x = prefill_tokens
    return (sx + x, sxx + x * x, snx + batch * x, sxt + x * step_s)


@dataclass(frozen=True)
class StepModel:
    """τ = alpha + beta·N + gamma·x, in seconds (x: prompt tokens prefilled in the step)."""

    alpha: float
    beta: float
    fitted: bool
    #: Seconds per prompt token; the prior's until prompts were seen.
    gamma: float = 0.0
    #: Whether ``gamma`` comes from observed prompt tokens (not the prior alone).
    prefill_learned: bool = False

    def step(self, batch: float) -> float:
        """The decode step at batch N (no prompt chunk in it)."""
        return self.alpha + self.beta * batch

    def batch_for_step(self, step_s: float) -> float:
        """The largest batch whose decode step stays within ``step_s``."""
        if step_s <= self.alpha:
            return 0.0
        return math.inf if self.beta <= 0 else (step_s - self.alpha) / self.beta

    def for_mix(self, prompt_tokens: float, output_tokens: float) -> StepModel:
        """The mean step as a line in N for this mix: each step also prefills P·N/out tokens."""
        slope = self.beta + self.gamma * max(0.0, prompt_tokens) / max(1.0, output_tokens)
        return StepModel(self.alpha, slope, self.fitted, 0.0, self.prefill_learned)


#: The prior pair: at a batch of 200 the step is four base steps (8B and 70B models on H100 and
#: A100 all sit between 3.5 and 5 in calibration.md's figures), with the weight of one pair.
PRIOR_BATCH = 200.0
PRIOR_RATIO = 4.0
PRIOR_WEIGHT = 1.0
#: The prompt prior: one base step prefills this many prompt tokens beyond the decodes. The
#: profiles fitted to calibration.md sit at 250 (Llama-3-8B BF16 on H100 and A100, 70B FP8 on
#: 2×H100) to 600 (8B FP8 on H100); 400 is within 1.6× of each. Its weight is one pair at
#: ``PRIOR_PREFILL_TOKENS`` tokens per step (vLLM's smallest default prefill budget is 2,048):
#: steps that carry a few hundred prompt tokens outweigh it within a dozen observations, while
#: a service seen only with short prompts keeps the prior's cost for long ones.
PRIOR_TOKENS_PER_BASE = 400.0
PRIOR_PREFILL_TOKENS = 1000.0
#: Prompt tokens per step, summed over the fit, before γ counts as learned rather than prior.
_PREFILL_EVIDENCE = 3.0 * PRIOR_PREFILL_TOKENS


def implied_base(batch: float, step_s: float, prefill_tokens: float = 0.0) -> float:
    """The base step α for which (batch, step) lies on the prior curve α·(1 + (r−1)·N/N₀) + γ₀·x
    with γ₀ = α / ``PRIOR_TOKENS_PER_BASE``."""
    return step_s / (
        1.0
        + (PRIOR_RATIO - 1.0) * max(0.0, batch) / PRIOR_BATCH
        + max(0.0, prefill_tokens) / PRIOR_TOKENS_PER_BASE
    )


def _prompt_prior(alpha: float, prompt_cost_s: float | None) -> tuple[float, bool]:
    """The prompt cost's prior, γ₀: the measured cost when there is one (and whether it is),
    else a base step per ``PRIOR_TOKENS_PER_BASE`` tokens."""
    if prompt_cost_s is not None and math.isfinite(prompt_cost_s) and prompt_cost_s > 0:
        return prompt_cost_s, True
    return alpha / PRIOR_TOKENS_PER_BASE, False


def anchored_model(
    batch: float, step_s: float, prefill_tokens: float = 0.0, prompt_cost_s: float | None = None
) -> StepModel:
    """The prior curve's shape through one (batch, step) pair, with the measured prompt cost when
    there is one."""
    alpha = implied_base(batch, step_s, prefill_tokens)
    gamma, measured = _prompt_prior(alpha, prompt_cost_s)
    return StepModel(
        alpha, alpha * (PRIOR_RATIO - 1.0) / PRIOR_BATCH, fitted=False, gamma=gamma, prefill_learned=measured
    )


def step_model(
    fit: Fit, floor_s: float | None, prefill: PrefillFit | None = None, prompt_cost_s: float | None = None
) -> StepModel | None:
    """The step-time model from the sums and the base step, or ``None`` before any pair was seen.

    Without prompt sums (no prompt-token rate was ever read) the fit has one feature, N, and
    ``gamma`` is 0: the prompts of the observed mix are then part of β. ``prompt_cost_s``, the
    cost of a prompt token the mean prefill time shows, takes the place of the prompt prior's
    guess: it decides the split of β and γ where one mix makes N and x rise together, and it is
    the cost where the steps carry too few prompt tokens to fit it (a light load).
    """
    w, sn, snn, _st, snt = fit
    if w < 1e-9 or floor_s is None or floor_s <= 0:
        return None
    alpha = floor_s
    spread = snn / w - (sn / w) ** 2
    fitted = w >= 3.0 and spread > (_MIN_SPREAD * sn / w) ** 2
    beta0 = alpha * (PRIOR_RATIO - 1.0) / PRIOR_BATCH
    # Normal equations of Σ(τ − α − βN − γx)² plus the prior pairs (N₀, 0) and (0, x₀).
    a11 = snn + PRIOR_WEIGHT * PRIOR_BATCH * PRIOR_BATCH
    b1 = snt - alpha * sn + PRIOR_WEIGHT * PRIOR_BATCH * PRIOR_BATCH * beta0
    if prefill is None:
        return StepModel(alpha, max(b1 / a11, 0.0), fitted)
    sx, sxx, snx, sxt = prefill
    gamma0, measured = _prompt_prior(alpha, prompt_cost_s)
    prior_x = PRIOR_WEIGHT * PRIOR_PREFILL_TOKENS * PRIOR_PREFILL_TOKENS
    a22 = sxx + prior_x
    a12 = snx
    b2 = sxt - alpha * sx + prior_x * gamma0
    det = a11 * a22 - a12 * a12
    beta = (b1 * a22 - b2 * a12) / det if det > 0 else b1 / a11
    gamma = (a11 * b2 - a12 * b1) / det if det > 0 else gamma0
    # Neither cost is negative: if one would be, the other is fitted alone.
    if beta < 0:
        beta, gamma = 0.0, max(0.0, b2 / a22)
    elif gamma < 0:
        beta, gamma = max(0.0, b1 / a11), 0.0
    return StepModel(alpha, beta, fitted, gamma, prefill_learned=measured or sx >= _PREFILL_EVIDENCE)


#: Prompt tokens one step takes with its decodes (vLLM's ``max-num-batched-tokens``). The policy
#: does not read it; 2,048 is the smallest of vLLM's defaults, and a larger budget only makes the
#: modelled TTFT longer than the real one.
PREFILL_BUDGET = 2048.0
#: p99 of the wait behind other prompts, in units of one prompt's prefill at prefill occupancy ρ,
#: is about ``_QUEUE_SHAPE`` · ln(100ρ) / (1 − ρ): the exponential tail of an M/G/1 queue whose
#: service times (one prompt's prefill) vary with a squared coefficient of variation c²,
#: (1 + c²)/2 = 0.75 for c² = 0.5. Log-normal prompt lengths of σ 0.5–0.8 give c² 0.3–0.9.
_QUEUE_SHAPE = 0.75
#: Share of the TTFT SLO the modelled p99 may use (the rest absorbs what the model leaves out).
_TTFT_BUDGET = 0.9
#: Prompt chunks share the steps of the requests decoding, so a request whose output meets one or
#: two prefills has a TPOT above the mean step. Over the window's requests the p99 sits about
#: ``INTERFERENCE`` · S · √ρ / (1 − ρ)² above the mean step, S = γ·min(P, B) being the stall of the
#: one step a prompt (or a budget's worth of a longer one) is prefilled in, and ρ = λ·γ·P the
#: prefill occupancy. Measured in the simulator's engine (one replica, Poisson arrivals, the
#: profile's own γ), the lift over S·√ρ/(1 − ρ)² was 0.50–0.52 for 2,000-token prompts with
#: 30-token answers on an 8B H100 (ρ 0.12–0.36), 0.38–0.51 on a 70B pair (0.14–0.43), 0.37–0.40
#: for 462 with 16, 0.26–0.33 for 600 with 220 (0.37–0.51 on an A100), 0.12–0.45 for 462 with
#: 256: a request with more tokens averages more steps. The constant is the prompt-heavy end.
INTERFERENCE = 0.5


def interference_s(model: StepModel, rate: float, prompt_tokens: float) -> float:
    """How far p99 TPOT runs above the mean step because of prompt chunks, at ``rate`` requests
    per second of ``prompt_tokens`` each on one replica."""
    prompt = max(0.0, prompt_tokens)
    rho = rate * model.gamma * prompt
    if rho <= 0.0:
        return 0.0
    if rho >= 1.0:
        return math.inf
    # A longer prompt is prefilled a budget's worth per step: no one step stalls for all of it.
    chunk = model.gamma * min(prompt, PREFILL_BUDGET)
    return INTERFERENCE * chunk * math.sqrt(rho) / (1.0 - rho) ** 2


def ttft_p99(model: StepModel, batch: float, rate: float, prompt_tokens: float) -> float:
    """Modelled p99 TTFT of a replica at decode batch N finishing ``rate`` requests per second.

    TTFT is the step in progress, then queueing behind earlier prompts, then the prompt's own
    prefill. While prompts queue, every step carries the decodes and fills the rest of its budget
    B with prompt chunks, so a prompt of P tokens takes s = P·(τ_d(N) + γ·(B − N)) / (B − N) of
    engine time, and prompts keep the prefill busy ρ = rate·s of the time.
    """
    room = max(PREFILL_BUDGET - batch, 0.125 * PREFILL_BUDGET)
    prompt = max(0.0, prompt_tokens)
    service = prompt * (model.step(batch) + model.gamma * room) / room
    rho = rate * service
    if rho >= 1.0:
        return math.inf
    wait = _QUEUE_SHAPE * max(0.0, math.log(100.0 * rho)) / (1.0 - rho) if rho > 0.01 else 0.0
    # the step in progress: a decode step stretched by the prompt chunks of the mean load
    mean_step = model.step(batch) / (1.0 - min(rho, model.gamma * prompt * rate))
    return mean_step + service * (1.0 + wait)


#: The share of requests a p99 SLO lets miss: at capacity the modelled p99 sits at the SLO.
_P99_MISS = 0.01


@dataclass(frozen=True)
class MissCurve:
    """How the share of requests missing the TPOT SLO grows with a replica's load beyond the
    capacity, where prompt chunks' interference is part of what bounds it.

    Such a bound is soft where the interference is most of it: above it the TPOT tail stretches
    and a few more requests miss, until prompts queue for their prefill and TTFT breaks for all.
    Where the mean step is most of it, every request's TPOT rises with the batch and the bound
    is a cliff. Both from the model: at load x the TPOT excess over the mean step is taken as an
    exponential tail whose p99 is the interference, so the share beyond what the SLO leaves
    (its budget less the mean step and the offset) is 1% ^ (room(x) / lift(x)); from
    ``saturation`` on, every request misses. (One replica under Poisson load in the simulator's
    engine, code completion on an 8B H100: 1.4% / 2.6% / 4% / 11% missed at 6 / 7 / 8 / 10 req/s,
    1% near 5; the curve reads more, at most four times as much.)
    """

    #: ``(load as a multiple of the capacity, share missing)`` at rising batches.
    points: tuple[tuple[float, float], ...]
    #: The load at which prompts saturate the replica (TTFT SLO, batch cap or KV cache), as a
    #: multiple of the capacity.
    saturation: float

    def share(self, load: float) -> float:
        """The share of requests missing at ``load`` times the capacity."""
        if load >= self.saturation:
            return 1.0
        points = self.points
        if not points or load <= points[0][0]:
            return points[0][1] if points else 0.0
        for (x0, m0), (x1, m1) in itertools.pairwise(points):
            if load <= x1:
                return m0 + (m1 - m0) * (load - x0) / (x1 - x0) if x1 > x0 else m1
        return 1.0


#: How far below the modelled hard limit the miss curve ends: the model places a full batch or a
#: prompt queue only this well (the learned correction moves the capacity by up to 30% at once),
#: and a chat replica whose hard limit sits within a fifth of its TPOT bound fell off that cliff
#: in the simulator where the curve read a few percent more misses.
_HARD_LIMIT_MARGIN = 1.3

#: Batches at which the miss curve is tabulated, as multiples of the bound's batch (up to the
#: saturating batch).
_CURVE_BATCHES = (0.5, 0.7, 0.85, 1.0, 1.1, 1.2, 1.35, 1.5, 1.7, 2.0, 2.4, 3.0, 4.0, 6.0, 10.0)


@dataclass(frozen=True)
class _Serving:
    """One replica serving a mix: its step model, the mean step as a line in N for the mix, and
    the requests it finishes per second at each batch."""

    model: StepModel
    #: ``model.for_mix`` for the mix's prompts (``model`` itself without a prompt length).
    line: StepModel
    #: Output tokens per request (at least one).
    out: float
    #: Prompt tokens per request (``None``: unknown).
    prompt: float | None

    def rate_at(self, n: float) -> float:
        """Requests per second one replica finishes at decode batch ``n``."""
        if self.prompt is None:
            # a prompt costs about one more decode step (β carries the rest of the mix)
            return n / ((self.out + 1.0) * self.model.step(n))
        return n / (self.out * self.line.step(n))

    def lift(self, n: float) -> float:
        """The prompt chunks' interference (:func:`interference_s`) at batch ``n``'s rate; 0 without
        a prompt length."""
        return 0.0 if self.prompt is None else interference_s(self.model, self.rate_at(n), self.prompt)

    def ttft_at(self, n: float) -> float:
        """The modelled p99 TTFT (:func:`ttft_p99`) at batch ``n`` and its rate."""
        return ttft_p99(self.model, n, self.rate_at(n), self.prompt or 0.0)


def _miss_curve(
    serving: _Serving, batch: float, hard: float, budget_s: float, offset_s: float | None
) -> MissCurve | None:
    """How misses grow above the TPOT bound at ``batch`` (see :class:`MissCurve`)."""
    rate = serving.rate_at(batch)
    saturation = serving.rate_at(max(hard, batch)) / rate / _HARD_LIMIT_MARGIN if rate > 0 else 1.0
    if saturation <= 1.0:
        return None
    points = []
    for k in _CURVE_BATCHES:
        n = k * batch
        if n >= hard:
            break
        step = serving.line.step(n)
        offset = offset_s if offset_s is not None else 0.25 * step
        lift = serving.lift(n)
        room = budget_s - step - offset
        if room <= 0.0 or not math.isfinite(lift):
            miss = 1.0
        elif lift <= 0.0:
            miss = 0.0
        else:
            miss = min(1.0, _P99_MISS ** (room / lift))
        points.append((serving.rate_at(n) / rate, miss))
        if miss >= 1.0:
            break
    curve = MissCurve(tuple(points), saturation)
    at_capacity = curve.share(1.0)
    if _P99_MISS < at_capacity < 1.0:
        # The model's tail reads more than the 1% a p99 SLO leaves at the capacity: the batch of
        # one it is held at (no batch meets the SLO in the model) or a batch seen within the SLO.
        # Sizing uses that capacity all the same, and the curve says how misses grow above what
        # sizing holds: it is read from the capacity, its shape kept, its level set to 1% there.
        # Else a hold softened by it flips to the unsoftened one whenever the learned model
        # wobbles across that edge, and the scale-down window keeps the larger fleet.
        scale = _P99_MISS / at_capacity
        curve = MissCurve(tuple((x, m if m >= 1.0 else m * scale) for x, m in points), saturation)
    return curve


@dataclass(frozen=True)
class Capacity:
    """Sustainable requests per second of one replica and what bounds it."""

    rate: float
    batch: float
    step_s: float
    bound: str  # "max batch", "TPOT SLO", "KV cache" or "TTFT SLO"
    #: Mean prompt tokens per request the figure is for (``None``: unknown, no prompt rate).
    prompt_tokens: float | None = None
    #: Share of the replica's engine time spent prefilling prompts at this rate.
    prefill_share: float = 0.0
    #: Prompt tokens per second a replica prefills when it does nothing else (1/γ).
    prefill_tokens_per_s: float | None = None
    #: What the figure could not use, for the reason sentence.
    note: str | None = None
    #: How far the prompts' chunks lift p99 TPOT above the mean step at this rate.
    interference_s: float = 0.0
    #: How misses grow above ``rate`` when the prompts' interference bounds it (``None``: the
    #: bound is a hard one, a full batch or a queue, and every request beyond it may miss).
    misses: MissCurve | None = None

    def explain(self) -> str:
        """The bound in words: 'bound by prefill: …; TTFT SLO: batch 12 at 64 ms/step'."""
        limit = f"{self.bound}: batch {self.batch:.0f} at {self.step_s * 1e3:.0f} ms/step"
        if self.bound == "TPOT SLO" and self.interference_s >= 0.001:
            limit += f", prompt chunks add {self.interference_s * 1e3:.0f} ms to p99 TPOT"
        prompts = self.prompt_tokens is not None and self.prefill_tokens_per_s
        if prompts and (self.prefill_share >= 0.5 or self.bound == "TTFT SLO"):
            # Prompts queueing for their prefill is what holds TTFT, or they take most of the time.
            text = (
                f"bound by prefill: {self.prompt_tokens or 0.0:,.0f} prompt tokens/request at "
                f"{_tokens(self.prefill_tokens_per_s or 0.0)} tokens/s, "
                f"{self.prefill_share:.0%} of engine time; {limit}"
            )
        else:
            text = f"bound by {limit}"
            if self.prompt_tokens is not None and self.prefill_share >= 0.05:
                text += f"; prefill {self.prefill_share:.0%} of engine time"
        return f"{text}; {self.note}" if self.note else text


def _tokens(per_s: float) -> str:
    return f"{per_s / 1000:.0f}k" if per_s >= 10_000 else f"{per_s:,.0f}"


@dataclass(frozen=True)
class RequestMix:
    """What one replica serves, per request: output and prompt tokens, and the KV cache it holds."""

    output_tokens: float
    #: Mean prompt tokens per request (``None``: unknown; a prompt then costs one more decode step).
    prompt_tokens: float | None = None
    #: KV-cache share one running request holds (``None``: not measured, no KV bound).
    kv_per_seq: float | None = None


@dataclass(frozen=True)
class Slo:
    """The latency figures a capacity is held to, in seconds (``None``: not declared or not applied)."""

    tpot_s: float | None = None
    #: How far p99 TPOT sits above the mean step, learned (``None``: a quarter of the step).
    tpot_offset_s: float | None = None
    #: The TTFT SLO the batch is bounded by (:func:`ttft_p99`).
    ttft_s: float | None = None
    #: The TTFT SLO at which prompts count as saturating the replica, for the miss curve of an
    #: interference bound (without it the curve ends at the other limits).
    saturation_ttft_s: float | None = None


@dataclass(frozen=True)
class Batching:
    """The max batch, the share of it one replica is planned to fill, and the batch seen now."""

    max_batch: int
    fill: float
    #: The decode batch now, and whether p99 TPOT is seen within its SLO at it: such a batch is
    #: never ruled out.
    now: float | None = None
    tpot_ok_now: bool = False


def capacity(
    model: StepModel, mix: RequestMix, batching: Batching, slo: Slo, *, note: str | None = None
) -> Capacity:
    """λ(N*) for one replica; see the module text for N*.

    p99 TPOT is modelled as the mean step (prompt chunks included) plus ``slo.tpot_offset_s``
    (learned; until then a quarter of the step). A batch at which p99 TPOT is seen within its SLO
    is never ruled out. Without ``mix.prompt_tokens`` a prompt costs one more decode step.
    """
    out = max(1.0, mix.output_tokens)
    prompt = max(0.0, mix.prompt_tokens) if mix.prompt_tokens is not None else None
    serving = _Serving(model, model.for_mix(prompt, out) if prompt is not None else model, out, prompt)
    limits = _batch_limits(serving, mix, batching, slo)
    batch, bound = min(limits, key=lambda item: item[0])
    batch = max(1.0, batch)

    if slo.ttft_s is not None and prompt is not None:
        target = _TTFT_BUDGET * slo.ttft_s
        if serving.ttft_at(batch) > target:
            # The rate grows with the batch and the modelled TTFT with both: bisect.
            lo = _largest_batch(lambda n: serving.ttft_at(n) <= target, batch)
            batch, bound = max(lo, 1e-3), "TTFT SLO"
    rate = serving.rate_at(batch)
    share = 0.0
    per_s: float | None = None
    if prompt is not None:
        share = min(1.0, rate * model.gamma * prompt)
        per_s = 1.0 / model.gamma if model.gamma > 0 else None
    lift = serving.lift(batch) if prompt is not None and slo.tpot_s is not None else 0.0
    misses = None
    if bound == "TPOT SLO" and prompt is not None and lift > 0.0 and rate > 0.0 and slo.tpot_s is not None:
        # Beyond the TPOT bound the replica still serves, with more misses, up to where a full
        # batch, the KV cache or prompts queueing for their prefill (the modelled TTFT) stop it.
        hard = min(n for n, name in limits if name != "TPOT SLO")
        if serving.rate_at(max(hard, batch)) > _HARD_LIMIT_MARGIN * rate:  # else a cliff: no curve
            hard = _saturating_batch(serving, batch, hard, slo.saturation_ttft_s)
            misses = _miss_curve(serving, batch, hard, 0.9 * slo.tpot_s, slo.tpot_offset_s)
    return Capacity(rate, batch, serving.line.step(batch), bound, prompt, share, per_s, note, lift, misses)


def _batch_limits(
    serving: _Serving, mix: RequestMix, batching: Batching, slo: Slo
) -> list[tuple[float, str]]:
    """The batches a full batch, the KV cache and the TPOT SLO each allow, with their names."""
    limits = [(batching.fill * batching.max_batch, "max batch")]
    if mix.kv_per_seq is not None and mix.kv_per_seq > 0:
        limits.append((0.9 / mix.kv_per_seq, "KV cache"))
    if slo.tpot_s is not None:
        budget = 0.9 * slo.tpot_s
        offset = slo.tpot_offset_s
        line = serving.line
        allowed = (
            line.batch_for_step(budget - offset) if offset is not None else line.batch_for_step(budget / 1.25)
        )
        if serving.prompt is not None and serving.model.gamma > 0:
            allowed = _interference_bound(serving, budget, offset, min([allowed] + [n for n, _ in limits]))
        if batching.tpot_ok_now and batching.now is not None:
            allowed = max(allowed, batching.now)
        limits.append((allowed, "TPOT SLO"))
    return limits


def _saturating_batch(serving: _Serving, batch: float, hard: float, ttft_slo_s: float | None) -> float:
    """``hard``, or below it the batch at which prompts queueing for their prefill reach
    ``ttft_slo_s`` (searched from the bound's ``batch`` up: its TTFT is not modelled to break
    below it)."""
    if ttft_slo_s is not None:
        target = _TTFT_BUDGET * ttft_slo_s
        if serving.ttft_at(hard) > target:
            return _largest_batch(lambda n: serving.ttft_at(n) <= target, hard, lower=batch, steps=20)
    return hard


def _interference_bound(serving: _Serving, budget_s: float, offset_s: float | None, upper: float) -> float:
    """The largest batch up to ``upper`` whose modelled p99 TPOT (the mean step, the learned
    offset or a quarter of the step, and the prompts' interference at that batch's rate) stays
    within ``budget_s``. Both the step and the rate grow with the batch: bisect."""

    def p99(n: float) -> float:
        step = serving.line.step(n)
        offset = offset_s if offset_s is not None else 0.25 * step
        return step + offset + serving.lift(n)

    if not math.isfinite(upper) or upper <= 0.0 or p99(upper) <= budget_s:
        return upper
    return _largest_batch(lambda n: p99(n) <= budget_s, upper)


def _largest_batch(
    fits: Callable[[float], bool], upper: float, *, lower: float = 0.0, steps: int = 40
) -> float:
    """The largest batch in (``lower``, ``upper``) that ``fits`` (which holds below some batch
    and not above it), by bisection; ``lower`` when none does."""
    lo, hi = lower, upper
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        if mid > 0 and fits(mid):
            lo = mid
        else:
            hi = mid
    return lo
