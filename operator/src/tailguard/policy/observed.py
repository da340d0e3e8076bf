"""Checking an observation, reading the SLOs it shows broken, and the per-replica figures it implies."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tailguard.policy.budget import P99_ALLOWED
from tailguard.policy.types import Observation, PolicyConfig, Reason


def finite(value: float | None) -> bool:
    """A measured, finite number."""
    return value is not None and math.isfinite(value)


def fmt_ms(seconds: float | None) -> str:
    """Seconds as whole milliseconds for a reason sentence (``n/a`` when unknown)."""
    return "n/a" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1e3:.0f} ms"


@dataclass(frozen=True)
class DataProblem:
    """Why an observation cannot be acted on, as a reason code and a sentence."""

    code: Reason
    sentence: str


def check(config: PolicyConfig, obs: Observation, now: float) -> DataProblem | None:
    """``None`` when the observation can drive a decision, otherwise what is wrong with it.

    Required: a sample time no older than ``max_metric_age_s``; finite, non-negative request
    rate, running and waiting; a finite p99 TTFT unless the service is idle (Prometheus returns
    NaN when nothing finished in the window); a finite p99 TPOT when a TPOT SLO is declared and
    requests finished. Missing is never read as zero.
    """
    if not finite(obs.sample_time):
        return DataProblem(Reason.METRICS_MISSING, "no sample time: metrics missing")
    assert obs.sample_time is not None
    age = now - obs.sample_time
    if age > config.max_metric_age_s:
        return DataProblem(
            Reason.METRICS_STALE, f"newest sample is {age:.0f} s old (limit {config.max_metric_age_s:.0f} s)"
        )
    missing = [
        name
        for name, value in (
            ("request rate", obs.request_rate),
            ("running", obs.running),
            ("waiting", obs.waiting),
        )
        if not finite(value) or (value is not None and value < 0)
    ]
    if missing:
        return DataProblem(Reason.METRICS_MISSING, f"missing or invalid: {', '.join(missing)}")
    if not is_idle(obs):
        if not finite(obs.p99_ttft_s):
            return DataProblem(Reason.METRICS_MISSING, "p99 TTFT missing while requests are served")
        if config.tpot_slo_s is not None and (obs.request_rate or 0.0) > 0 and not finite(obs.p99_tpot_s):
            return DataProblem(Reason.METRICS_MISSING, "p99 TPOT missing while requests are served")
    return None


def is_idle(obs: Observation) -> bool:
    """No request finished, ran or waited: the service has no traffic."""
    return obs.request_rate == 0 and obs.running == 0 and obs.waiting == 0


#: How unlikely a window's misses must be, at the miss rate the SLO allows, before they count as a
#: breach (a one-sided test): below it, a few slow requests in a quiet window are chance.
BREACH_SIGNIFICANCE = 0.05


def good_share(obs: Observation) -> float | None:
    """The share of the window's requests that met every SLO (goodput, else the TTFT share)."""
    for value in (obs.goodput, obs.ttft_within_slo):
        if value is not None and math.isfinite(value):
            return value
    return None


def poisson_tail(k: int, mean: float) -> float:
    """P(X ≥ k) for X ~ Poisson(``mean``): exact for small means, normal (continuity-corrected)
    beyond."""
    if k <= 0:
        return 1.0
    if mean <= 0:
        return 0.0
    if mean > 50.0:
        z = (k - 0.5 - mean) / math.sqrt(mean)
        return 0.5 * math.erfc(z / math.sqrt(2.0))
    if k > mean + 12.0 * math.sqrt(mean) + 12.0:
        return 0.0  # far beyond: the terms below underflow long before they matter
    term = math.exp(-mean)
    below = 0.0
    for i in range(k):
        below += term
        term *= mean / (i + 1)
    return max(0.0, 1.0 - below)


@dataclass(frozen=True)
class Misses:
    """How many of a window's requests missed an SLO, against what the SLO allows."""

    missed: int
    requests: int
    allowed_share: float

    @property
    def beyond_chance(self) -> bool:
        """More misses than the allowed share explains at ``BREACH_SIGNIFICANCE``."""
        return poisson_tail(self.missed, self.requests * self.allowed_share) < BREACH_SIGNIFICANCE

    def sentence(self) -> str:
        return (
            f"{self.missed} of {self.requests} requests: chance at the {self.allowed_share:.2%} "
            "the SLO allows"
        )


def window_misses(
    config: PolicyConfig, obs: Observation, within: float | None, allowed_share: float
) -> Misses | None:
    """The misses of the window from the share ``within`` the SLO and the finished requests
    (``None`` when either is unknown: then the share alone decides)."""
    rate = obs.request_rate
    if within is None or not finite(within) or rate is None or not finite(rate) or rate <= 0:
        return None
    requests = rate * config.rate_window_s
    missed = requests * min(1.0, max(0.0, 1.0 - within))
    return Misses(int(missed + 0.5), max(1, int(requests + 0.5)), allowed_share)


def breach(config: PolicyConfig, obs: Observation, *, excuse_chance: bool = True) -> list[str]:
    """Sentences for every SLO the observation shows broken (empty when all hold).

    TTFT is judged on requests: with ``excuse_chance`` a window counts as broken only when its
    misses are more than the 1% a p99 allows explains by chance (``Misses.beyond_chance``). With a
    few hundred requests in a window, p99 is the second or third slowest of them; a service that
    meets its SLO still shows it over in many windows, and sizing for those would only buy
    replicas. The caller withholds the excuse while the last minutes missed more than 1%: then the
    service's own record says its misses are no chance. Neither depends on the goodput target (a
    lower target must not wait longer and pay for the emergency after); goodput under its target
    is excused the same way, at the same 1%. TPOT is judged as read. Its histogram is vLLM's
    per-request one, as few per window as TTFT's, but excusing its windows as chance let a code
    load's step past its TPOT SLO for longer (2 of 60 off-benchmark runs lost their target).
    """
    out = []
    ttft = obs.p99_ttft_s
    if finite(ttft) and ttft is not None and ttft > config.ttft_slo_s:
        misses = window_misses(config, obs, obs.ttft_within_slo, P99_ALLOWED) if excuse_chance else None
        if misses is None or misses.beyond_chance:
            out.append(f"p99 TTFT {ttft * 1e3:.0f} ms > SLO {config.ttft_slo_s * 1e3:.0f} ms")
    tpot = obs.p99_tpot_s
    if config.tpot_slo_s is not None and tpot is not None and finite(tpot) and tpot > config.tpot_slo_s:
        out.append(f"p99 TPOT {tpot * 1e3:.0f} ms > SLO {config.tpot_slo_s * 1e3:.0f} ms")
    good = obs.goodput
    if good is not None and finite(good) and good < config.goodput_target and not out:
        # Judged at the p99's 1% too, not at the target's share: a lower target must not excuse more.
        misses = window_misses(config, obs, good, P99_ALLOWED) if excuse_chance else None
        if misses is None or misses.beyond_chance:
            out.append(f"goodput {good:.3f} < target {config.goodput_target:.3f}")
    return out


def slo_held(config: PolicyConfig, obs: Observation) -> str:
    """The TTFT sentence of a window with no breach: within the SLO, or over it by chance."""
    ttft = obs.p99_ttft_s
    said = f"p99 TTFT {fmt_ms(ttft)}"
    if finite(ttft) and ttft is not None and ttft > config.ttft_slo_s:
        misses = window_misses(config, obs, obs.ttft_within_slo, P99_ALLOWED)
        detail = f": {misses.sentence()}" if misses is not None else ""
        return f"{said} over SLO {fmt_ms(config.ttft_slo_s)}{detail}"
    return f"{said} within SLO {fmt_ms(config.ttft_slo_s)}"


@dataclass(frozen=True)
class ReplicaFigures:
    """Per-replica figures from one valid observation (``None`` where the data cannot tell)."""

    serving: int  # replicas whose engines report
    per_replica_rate: float | None  # finished req/s per serving replica
    batch: float | None  # mean decode batch per serving replica over the window
    step_s: float | None  # mean engine step over the window
    #: True when batch and step are window means of independent series (the inter-token latency
    #: was measured), so the step-time curve can be fitted to them; false when the step is
    #: running ÷ token rate, which moves with the running gauge by construction.
    step_measured: bool
    output_tokens: float | None  # generated tokens per finished request
    kv_per_seq: float | None  # KV-cache share one running request holds
    #: Prompt tokens per finished request (``None`` without a prompt-token rate).
    prompt_tokens: float | None = None
    #: Prompt tokens prefilled per engine step over the window, x = prompt tokens per second per
    #: replica × mean step (``None`` without a prompt-token rate or a step).
    prefill_tokens: float | None = None


def replica_figures(obs: Observation, window_serving: float | None = None) -> ReplicaFigures:
    """What one serving replica runs, finishes and holds over the window, from the fleet's sums.

    ``window_serving``: the replicas that served on average over the rate window, when the fleet
    changed within it: the window's sums are divided by it rather than by the replicas reporting
    now (the gauges, which are of now, still by those).
    """
    serving = obs.reporting_pods if obs.reporting_pods is not None else obs.ready_replicas
    serving = max(0, min(serving, obs.ready_replicas)) if obs.ready_replicas else max(0, serving)
    over = window_serving if serving and window_serving is not None and window_serving > 0 else serving
    rate = obs.request_rate or 0.0
    running = obs.running or 0.0
    gen = obs.generation_token_rate if finite(obs.generation_token_rate) else None
    itl = obs.itl_mean_s if finite(obs.itl_mean_s) and (obs.itl_mean_s or 0.0) > 0 else None
    per_rate = rate / over if serving else None
    batch: float | None = None
    step: float | None = None
    material = False
    if serving and gen is not None and gen > 0:
        if itl is not None:
            # Little's law over the window: tokens per second × seconds per step = sequences.
            batch, step, material = gen * itl / over, itl, True
        elif running >= 1:
            batch, step = running / serving, running / gen
    out_tokens = gen / rate if gen is not None and rate > 0 and gen > 0 else None
    kv = obs.kv_cache_usage
    per_seq = running / serving if serving else None
    kv_per_seq = (
        kv / per_seq
        if finite(kv) and kv is not None and per_seq is not None and per_seq >= 1 and kv > 0
        else None
    )
    if kv_per_seq is not None and not kv_per_seq > 1e-9:
        kv_per_seq = None
    if out_tokens is not None and not math.isfinite(out_tokens):
        out_tokens = None
    prompt = obs.prompt_token_rate if finite(obs.prompt_token_rate) else None
    if prompt is not None and prompt < 0:
        prompt = None
    # The prompt counter counts a prompt when its prefill ends, the request counter when its
    # decode ends: over a window both are rates of the same requests.
    prompt_tokens = prompt / rate if prompt is not None and rate > 0 else None
    if prompt_tokens is not None and not (math.isfinite(prompt_tokens) and prompt_tokens <= 1e7):
        prompt_tokens = None
    # Beyond these no vLLM engine goes; such figures are broken data, not load.
    sane = batch is not None and step is not None and 0 <= batch <= 1e5 and 0 < step <= 60.0
    if not sane:
        batch, step, material = None, None, False
    prefill_tokens = prompt / over * step if prompt is not None and step is not None and serving else None
    return ReplicaFigures(
        serving, per_rate, batch, step, material, out_tokens, kv_per_seq, prompt_tokens, prefill_tokens
    )
