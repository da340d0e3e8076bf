"""Seeded synthetic traces: Poisson, diurnal, bursty (gamma or MMPP), step and ramp loads.

Arrival processes with a time-varying rate are drawn as a Poisson process of unit rate mapped
through the inverse of the cumulative rate (piecewise linear on a one-second grid), so every
shape shares one exact and fast sampler. Token counts come from a :class:`TokenMix`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tailguard.sim.trace import FloatArray, IntArray, Trace


@dataclass(frozen=True)
class TokenMix:
    """Prompt and output lengths: log-normal with the given means, clipped; ``sigma=0`` is fixed."""

    name: str
    input_mean: float
    output_mean: float
    input_sigma: float = 0.0
    output_sigma: float = 0.0
    input_max: int = 4096
    output_max: int = 2048
    input_min: int = 4

    def sample(self, rng: np.random.Generator, n: int) -> tuple[IntArray, IntArray]:
        return (
            _lognormal(rng, n, self.input_mean, self.input_sigma, self.input_max, self.input_min),
            _lognormal(rng, n, self.output_mean, self.output_sigma, self.output_max, 4),
        )


def _lognormal(
    rng: np.random.Generator, n: int, mean: float, sigma: float, top: int, bottom: int
) -> IntArray:
    if sigma <= 0:
        return np.full(n, max(1, round(mean)), dtype=np.int64)
    mu = math.log(mean) - sigma * sigma / 2.0
    values = rng.lognormal(mu, sigma, n)
    return np.clip(np.rint(values), bottom, top).astype(np.int64)


#: ShareGPT as vLLM's benchmark samples it (mean 202 prompt / 179 output tokens, calibration row A).
SHAREGPT = TokenMix("sharegpt", 202, 179, input_sigma=0.95, output_sigma=0.95, input_max=1024)
#: Fixed-length mixes of calibration rows A′ (decode-heavy) and A″ (prefill-heavy).
DECODE_HEAVY = TokenMix("decode-heavy", 462, 256)
PREFILL_HEAVY = TokenMix("prefill-heavy", 462, 16)
#: A chat mix with longer prompts (system prompt + history), the benchmark default.
CHAT = TokenMix("chat", 600, 220, input_sigma=0.8, output_sigma=0.9, input_max=4096)

#: Code completion: long prompts (the file around the cursor), a few dozen tokens out. The client
#: trims the prompt to leave the answer room in an 8,192-token context: longer, vLLM rejects it.
CODE = TokenMix("code", 2000, 30, input_sigma=0.5, output_sigma=0.8, input_max=8192 - 256, output_max=256)
#: Long-context requests (documents, repositories): prompts of 32k tokens and more, for a
#: long-context profile such as ``h100-llama3.1-8b-128k``.
LONG_CONTEXT = TokenMix(
    "long-context", 48000, 300, input_sigma=0.3, output_sigma=0.8, input_min=32768, input_max=120000
)

MIXES: dict[str, TokenMix] = {
    m.name: m for m in (SHAREGPT, DECODE_HEAVY, PREFILL_HEAVY, CHAT, CODE, LONG_CONTEXT)
}

RateFn = Callable[[FloatArray], FloatArray]


def _inhomogeneous(rng: np.random.Generator, rate: RateFn, duration_s: float) -> FloatArray:
    grid = np.arange(0.0, duration_s + 1.0, 1.0)
    rates = np.maximum(rate(grid), 0.0)
    cumulative = np.concatenate(([0.0], np.cumsum((rates[1:] + rates[:-1]) / 2.0 * np.diff(grid))))
    total = float(cumulative[-1])
    count = int(rng.poisson(total))
    marks = np.sort(rng.uniform(0.0, total, count))
    arrivals: FloatArray = np.interp(marks, cumulative, grid)
    return arrivals[arrivals < duration_s]


def _trace(
    name: str, arrivals: FloatArray, mix: TokenMix, rng: np.random.Generator, lead_s: float = 0.0
) -> Trace:
    """The trace of ``arrivals`` drawn over ``[0, lead_s + duration)``: the first ``lead_s`` seconds
    become its ``before`` (the same process earlier, at negative times)."""
    inputs, outputs = mix.sample(rng, len(arrivals))
    times = np.asarray(arrivals, dtype=np.float64) - lead_s
    if lead_s <= 0:
        return Trace(name, times, inputs, outputs)
    split = int(np.searchsorted(times, 0.0, side="left"))
    before = Trace(f"{name} before", times[:split], inputs[:split], outputs[:split])
    return Trace(name, times[split:], inputs[split:], outputs[split:], before)


def _shifted(rate: RateFn, lead_s: float) -> RateFn:
    """``rate`` delayed by ``lead_s``: a schedule on the trace's clock read on the generator's
    (which starts ``lead_s`` earlier), or with a negative ``lead_s`` the other way round."""
    if lead_s == 0:
        return rate

    def fn(t: FloatArray) -> FloatArray:
        return rate(t - lead_s)

    return fn


def poisson(
    rate: float, duration_s: float, *, mix: TokenMix = SHAREGPT, seed: int = 0, lead_s: float = 0.0
) -> Trace:
    """A stationary Poisson load of ``rate`` requests per second.

    Every generator takes ``lead_s``: the process is drawn ``lead_s`` seconds earlier and that
    part is the trace's ``before`` (its lead-in), the same process an hour (or so) earlier.
    """
    rng = np.random.default_rng(seed)
    span = duration_s + lead_s
    count = int(rng.poisson(rate * span))
    arrivals = np.sort(rng.uniform(0.0, span, count))
    return _trace(f"poisson-{rate:g}", arrivals, mix, rng, lead_s)


def gamma(
    rate: float,
    duration_s: float,
    *,
    burstiness: float = 0.5,
    mix: TokenMix = SHAREGPT,
    seed: int = 0,
    lead_s: float = 0.0,
) -> Trace:
    """Gamma inter-arrivals as ``vllm bench serve --burstiness``: shape ``burstiness`` (1 = Poisson)."""
    rng = np.random.default_rng(seed)
    span = duration_s + lead_s
    expected = int(rate * span * 1.2) + 16
    gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), expected)
    arrivals = np.cumsum(gaps)
    while arrivals[-1] < span:
        more = np.cumsum(rng.gamma(burstiness, 1.0 / (rate * burstiness), expected)) + arrivals[-1]
        arrivals = np.concatenate((arrivals, more))
    return _trace(f"gamma-{rate:g}-b{burstiness:g}", arrivals[arrivals < span], mix, rng, lead_s)


def diurnal(
    mean_rate: float,
    duration_s: float,
    *,
    amplitude: float = 0.6,
    period_s: float = 3600.0,
    mix: TokenMix = SHAREGPT,
    seed: int = 0,
    lead_s: float = 0.0,
) -> Trace:
    """A sinusoidal day compressed into ``period_s``: rate = mean × (1 − amplitude·cos 2πt/period)."""
    rng = np.random.default_rng(seed)
    rate = _shifted(diurnal_rate(mean_rate, amplitude=amplitude, period_s=period_s), lead_s)
    arrivals = _inhomogeneous(rng, rate, duration_s + lead_s)
    return _trace(f"diurnal-{mean_rate:g}", arrivals, mix, rng, lead_s)


def diurnal_rate(mean_rate: float, *, amplitude: float = 0.6, period_s: float = 3600.0) -> RateFn:
    """The rate schedule behind ``diurnal`` with the same arguments."""

    def rate(t: FloatArray) -> FloatArray:
        out: FloatArray = mean_rate * (1.0 - amplitude * np.cos(2.0 * np.pi * t / period_s))
        return out

    return rate


def constant_rate(rate_value: float) -> RateFn:
    """The rate schedule behind ``poisson``."""

    def rate(t: FloatArray) -> FloatArray:
        out: FloatArray = np.full(np.shape(t), float(rate_value))
        return out

    return rate


def mmpp(
    base_rate: float,
    burst_rate: float,
    duration_s: float,
    *,
    base_mean_s: float = 300.0,
    burst_mean_s: float = 90.0,
    mix: TokenMix = SHAREGPT,
    seed: int = 0,
    lead_s: float = 0.0,
) -> Trace:
    """A two-state Markov-modulated Poisson process: calm at ``base_rate``, bursts at ``burst_rate``.

    Sojourns are exponential with the given means. The rate switches within a one-second ramp.
    """
    rng = np.random.default_rng(seed)
    span = duration_s + lead_s
    rate = _mmpp_rate(rng, base_rate, burst_rate, span, base_mean_s, burst_mean_s)
    name = f"mmpp-{base_rate:g}-{burst_rate:g}"
    return _trace(name, _inhomogeneous(rng, rate, span), mix, rng, lead_s)


def mmpp_rate(
    base_rate: float,
    burst_rate: float,
    duration_s: float,
    *,
    base_mean_s: float = 300.0,
    burst_mean_s: float = 90.0,
    seed: int = 0,
    lead_s: float = 0.0,
) -> RateFn:
    """The rate schedule behind ``mmpp`` with the same arguments (for idealised policies), on the
    trace's clock."""
    rng = np.random.default_rng(seed)
    rate = _mmpp_rate(rng, base_rate, burst_rate, duration_s + lead_s, base_mean_s, burst_mean_s)
    return _shifted(rate, -lead_s)


def _mmpp_rate(
    rng: np.random.Generator,
    base_rate: float,
    burst_rate: float,
    duration_s: float,
    base_mean_s: float,
    burst_mean_s: float,
) -> RateFn:
    edges = [0.0]
    levels = []
    t, burst = 0.0, False
    while t < duration_s:
        stay = rng.exponential(burst_mean_s if burst else base_mean_s)
        levels.append(burst_rate if burst else base_rate)
        t += stay
        edges.append(t)
        burst = not burst
    edge_arr = np.asarray(edges)
    level_arr = np.asarray(levels)

    def rate(grid: FloatArray) -> FloatArray:
        idx = np.clip(np.searchsorted(edge_arr, grid, side="right") - 1, 0, len(level_arr) - 1)
        out: FloatArray = level_arr[idx]
        return out

    return rate


def step_rate(
    rate_before: float, rate_after: float, duration_s: float, *, at_s: float | None = None
) -> RateFn:
    """The rate schedule behind ``step`` with the same arguments."""
    switch = duration_s / 2.0 if at_s is None else at_s

    def rate(t: FloatArray) -> FloatArray:
        out: FloatArray = np.where(t < switch, rate_before, rate_after).astype(np.float64)
        return out

    return rate


def step(
    rate_before: float,
    rate_after: float,
    duration_s: float,
    *,
    at_s: float | None = None,
    mix: TokenMix = SHAREGPT,
    seed: int = 0,
    lead_s: float = 0.0,
) -> Trace:
    """A load that jumps from ``rate_before`` to ``rate_after`` at ``at_s`` (mid-trace by default)."""
    rng = np.random.default_rng(seed)
    rate = _shifted(step_rate(rate_before, rate_after, duration_s, at_s=at_s), lead_s)
    name = f"step-{rate_before:g}-{rate_after:g}"
    return _trace(name, _inhomogeneous(rng, rate, duration_s + lead_s), mix, rng, lead_s)


def ramp(
    rate_start: float,
    rate_end: float,
    duration_s: float,
    *,
    mix: TokenMix = SHAREGPT,
    seed: int = 0,
    lead_s: float = 0.0,
) -> Trace:
    """A load that grows (or falls) linearly from ``rate_start`` to ``rate_end`` (``rate_start``
    before the trace)."""
    rng = np.random.default_rng(seed)

    def rate(t: FloatArray) -> FloatArray:
        out: FloatArray = rate_start + (rate_end - rate_start) * np.maximum(t, 0.0) / duration_s
        return out

    name = f"ramp-{rate_start:g}-{rate_end:g}"
    return _trace(name, _inhomogeneous(rng, _shifted(rate, lead_s), duration_s + lead_s), mix, rng, lead_s)


def spiky_rate(
    rate: float,
    peak_rate: float,
    duration_s: float,
    *,
    burst_mean_s: float = 10.0,
    gap_mean_s: float = 110.0,
    height_sigma: float = 0.5,
    seed: int = 0,
    lead_s: float = 0.0,
) -> RateFn:
    """The rate schedule behind ``spiky`` with the same arguments, on the trace's clock."""
    rng = np.random.default_rng(seed)
    fn = _spiky_rate(rng, rate, peak_rate, duration_s + lead_s, burst_mean_s, gap_mean_s, height_sigma)
    return _shifted(fn, -lead_s)


def _spiky_rate(
    rng: np.random.Generator,
    rate: float,
    peak_rate: float,
    duration_s: float,
    burst_mean_s: float,
    gap_mean_s: float,
    height_sigma: float,
) -> RateFn:
    duty = burst_mean_s / (burst_mean_s + gap_mean_s)
    base = (rate - duty * peak_rate) / (1.0 - duty)
    if base <= 0:
        raise ValueError(
            f"bursts of {peak_rate:g} req/s for {duty:.0%} of the time exceed a mean of {rate:g} req/s"
        )
    edges: list[float] = []
    heights: list[float] = []
    t = rng.exponential(gap_mean_s)
    mu = -height_sigma * height_sigma / 2.0
    while t < duration_s:
        length = rng.exponential(burst_mean_s)
        edges.extend((t, t + length))
        heights.append(peak_rate * float(rng.lognormal(mu, height_sigma)))
        t += length + rng.exponential(gap_mean_s)
    starts = np.asarray(edges[0::2])
    ends = np.asarray(edges[1::2])
    levels = np.asarray(heights)

    def fn(grid: FloatArray) -> FloatArray:
        idx = np.searchsorted(starts, grid, side="right") - 1
        inside = (
            (idx >= 0) & (grid < ends[np.clip(idx, 0, None)]) if len(starts) else np.zeros(len(grid), bool)
        )
        out: FloatArray = np.where(inside, levels[np.clip(idx, 0, None)] if len(levels) else base, base)
        return out.astype(np.float64)

    return fn


def spiky(
    rate: float,
    peak_rate: float,
    duration_s: float,
    *,
    burst_mean_s: float = 10.0,
    gap_mean_s: float = 110.0,
    height_sigma: float = 0.5,
    mix: TokenMix = CODE,
    seed: int = 0,
    lead_s: float = 0.0,
) -> Trace:
    """Sub-minute bursts over a calm base, the shape of code-completion traffic: bursts start at
    random (mean gap ``gap_mean_s``), last ``burst_mean_s`` on average (exponential), and each runs
    at ``peak_rate`` times a log-normal factor (mean 1, ``height_sigma``), so the busiest second
    runs far above the mean. The base rate is set so that the whole trace averages ``rate``."""
    rng = np.random.default_rng(seed)
    span = duration_s + lead_s
    fn = _spiky_rate(rng, rate, peak_rate, span, burst_mean_s, gap_mean_s, height_sigma)
    return _trace(f"spiky-{rate:g}-{peak_rate:g}", _inhomogeneous(rng, fn, span), mix, rng, lead_s)
