"""The lower bound: per window, the fewest replicas that meet the SLO with perfect foresight.

Each window's requests are served by ``n`` fresh replicas that are Ready at the window's start
(no cold start, nothing carried over from the previous window), spread by the same router as the
fleet; ``n`` is the smallest count whose requests meet every SLO at the goodput target. The sum
of ``n × window`` is the GPU time no policy that must meet the target window by window can beat
(a policy may still spend less by missing the target in some windows and making up elsewhere).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tailguard.sim.engine import Engine
from tailguard.sim.fleet import FleetConfig
from tailguard.sim.trace import FloatArray, Trace


@dataclass(frozen=True)
class SloTarget:
    ttft_s: float
    tpot_s: float | None
    goodput: float


def met(ttft: FloatArray, tpot: FloatArray, slo: SloTarget) -> np.ndarray:
    """Per request: did it meet every declared SLO (unanswered requests did not)."""
    ok = np.isfinite(ttft) & (ttft <= slo.ttft_s)
    if slo.tpot_s is not None:
        ok &= np.isnan(tpot) | (tpot <= slo.tpot_s)
    return ok


def _attainment(trace: Trace, replicas: int, config: FleetConfig, slo: SloTarget, seed: int) -> float:
    n = len(trace)
    ttft = np.full(n, np.inf)
    tpot = np.full(n, np.nan)

    def done(rid: int, first: float, per_token: float, _end: float) -> None:
        ttft[rid] = first
        tpot[rid] = per_token

    engines = [
        Engine(
            config.profile,
            max_num_seqs=config.initial_max_batch,
            max_num_batched_tokens=config.max_num_batched_tokens,
            on_finish=done,
        )
        for _ in range(replicas)
    ]
    pick = np.random.default_rng(seed).random(n)
    least = config.router == "least"
    for i in range(n):
        t = float(trace.arrival_s[i])
        if least:
            for e in engines:
                e.advance_to(t)
            engine = min(engines, key=lambda e: e.num_running + e.num_waiting)
        else:
            engine = engines[int(pick[i] * replicas)]
            engine.advance_to(t)
        engine.add_request(i, t, int(trace.input_tokens[i]), int(trace.output_tokens[i]))
    for e in engines:
        e.run_until_idle()
    return float(met(ttft, tpot, slo).mean()) if n else 1.0


def lower_bound(
    trace: Trace,
    config: FleetConfig,
    slo: SloTarget,
    *,
    window_s: float,
    min_replicas: int,
    max_replicas: int,
    progress: Callable[[float], None] | None = None,
) -> list[int]:
    """The fewest replicas per window of ``window_s`` seconds (bounded by ``[min, max]``)."""
    windows = max(1, int(np.ceil(trace.duration_s / window_s)))
    counts: list[int] = []
    guess = min_replicas
    for w in range(windows):
        part = trace.window(w * window_s, (w + 1) * window_s)
        if len(part) == 0:
            counts.append(min_replicas)
            continue

        def ok(n: int, part: Trace = part, w: int = w) -> bool:
            return _attainment(part, n, config, slo, seed=config.seed + w) >= slo.goodput

        n = max(min_replicas, min(max_replicas, guess))
        if ok(n):
            while n > min_replicas and ok(n - 1):
                n -= 1
        else:
            while n < max_replicas and not ok(n + 1):
                n += 1
            n = min(max_replicas, n + 1)
        counts.append(n)
        guess = n
        if progress is not None:
            progress((w + 1) / windows)
    return counts
