"""One replica under benchmark conditions, to compare the engine model with published figures.

``open_loop`` sends a trace (``vllm bench serve --request-rate``), ``closed_loop`` keeps a fixed
number of requests in flight (a concurrency sweep such as NVIDIA's NIM benchmark), ``saturation``
sends everything at once and measures the throughput. Means are over requests, as the benchmark
tools report them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tailguard.sim.engine import Engine
from tailguard.sim.profiles import EngineProfile
from tailguard.sim.synthetic import TokenMix, poisson
from tailguard.sim.trace import Trace


@dataclass(frozen=True)
class BenchResult:
    """Per-request means and tails of one benchmark run (seconds, requests per second)."""

    requests: int
    ttft_mean: float
    ttft_p99: float
    tpot_mean: float
    tpot_p99: float
    itl_mean: float
    throughput: float
    duration_s: float


def _summarise(
    engine: Engine, ttfts: list[float], tpots: list[float], start: float, end: float
) -> BenchResult:
    ttft = np.asarray(ttfts)
    tpot = np.asarray([v for v in tpots if not math.isnan(v)])
    itl = engine.itl.sum / engine.itl.count if engine.itl.count else math.nan
    span = max(end - start, 1e-9)
    return BenchResult(
        requests=len(ttft),
        ttft_mean=float(ttft.mean()) if len(ttft) else math.nan,
        ttft_p99=float(np.percentile(ttft, 99)) if len(ttft) else math.nan,
        tpot_mean=float(tpot.mean()) if len(tpot) else math.nan,
        tpot_p99=float(np.percentile(tpot, 99)) if len(tpot) else math.nan,
        itl_mean=itl,
        throughput=len(ttft) / span,
        duration_s=span,
    )


def open_loop(profile: EngineProfile, trace: Trace, *, max_num_seqs: int | None = None) -> BenchResult:
    """Send ``trace`` to one replica and wait for every answer."""
    ttfts: list[float] = []
    tpots: list[float] = []
    last = [0.0]

    def done(_rid: int, ttft: float, tpot: float, end: float) -> None:
        ttfts.append(ttft)
        tpots.append(tpot)
        last[0] = max(last[0], end)

    engine = Engine(profile, max_num_seqs=max_num_seqs, on_finish=done)
    for rid, (t, n_in, n_out) in enumerate(
        zip(trace.arrival_s, trace.input_tokens, trace.output_tokens, strict=True)
    ):
        engine.advance_to(float(t))
        engine.add_request(rid, float(t), int(n_in), int(n_out))
    engine.run_until_idle()
    return _summarise(engine, ttfts, tpots, 0.0, last[0])


def poisson_bench(
    profile: EngineProfile, rate: float, mix: TokenMix, *, requests: int = 1000, seed: int = 0
) -> BenchResult:
    """``vllm bench serve --request-rate rate`` with ``requests`` prompts of ``mix``."""
    trace = poisson(rate, requests / rate, mix=mix, seed=seed)
    return open_loop(profile, trace)


def saturation(profile: EngineProfile, mix: TokenMix, *, requests: int = 1000, seed: int = 0) -> BenchResult:
    """Every request sent at once (``--request-rate inf``): the replica's maximum throughput."""
    rng = np.random.default_rng(seed)
    inputs, outputs = mix.sample(rng, requests)
    trace = Trace("all-at-once", np.zeros(requests), inputs, outputs)
    return open_loop(profile, trace)


def closed_loop(
    profile: EngineProfile,
    concurrency: int,
    mix: TokenMix,
    *,
    requests: int = 2000,
    seed: int = 0,
) -> BenchResult:
    """``concurrency`` clients, each sending its next request when the last one finished."""
    rng = np.random.default_rng(seed)
    inputs, outputs = mix.sample(rng, requests)
    ttfts: list[float] = []
    tpots: list[float] = []
    ends: list[float] = []
    sent = 0
    # Requests enter the engine from the finish callback; stagger the first wave over one step
    # so the clients do not stay in lockstep.
    engine: Engine

    def send(at: float) -> None:
        nonlocal sent
        if sent < requests:
            engine.add_request(sent, at, int(inputs[sent]), int(outputs[sent]))
            sent += 1

    def done(_rid: int, ttft: float, tpot: float, end: float) -> None:
        ttfts.append(ttft)
        tpots.append(tpot)
        ends.append(end)
        send(end)

    engine = Engine(profile, on_finish=done)
    stagger = profile.base_step_s * 4
    for i in range(concurrency):
        at = stagger * i / max(1, concurrency)
        engine.advance_to(at)
        send(at)
    engine.run_until_idle()
    # Skip the warm-up wave so the figures describe the steady state.
    warm = min(concurrency, len(ttfts) // 4)
    start = ends[warm - 1] if warm else 0.0
    return _summarise(engine, ttfts[warm:], tpots[warm:], start, ends[-1])
