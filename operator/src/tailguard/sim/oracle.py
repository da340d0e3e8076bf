"""The lower bound: per window, the fewest replicas that meet the SLO with perfect foresight.

Each window's requests are served by ``n`` replicas that are Ready at the window's start (no
cold start; the engines are warmed by the requests of the half minute before the window), spread
by the same router as the fleet; ``n`` is the smallest count whose requests meet every SLO at the
goodput target and that ends the window without a queue. The sum of ``n × window`` is the GPU
time no policy that must meet the target window by window can beat (a policy may still spend
less by missing the target in some windows and making up elsewhere).
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


def _attainment(
    trace: Trace, replicas: int, config: FleetConfig, slo: SloTarget, seed: int, counted_from: float = 0.0
) -> float:
    """Attainment of the requests arriving from ``counted_from`` on (earlier ones warm the engines)."""
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
    # A window that ends with a queue is not sustained, whatever its own requests saw: the
    # backlog would spill into the next one.
    end = float(trace.arrival_s[-1]) if n else 0.0
    for e in engines:
        e.advance_to(end)
    if sum(e.num_waiting for e in engines) > replicas:
        return 0.0
    for e in engines:
        e.run_until_idle()
    counted = trace.arrival_s >= counted_from
    return float(met(ttft[counted], tpot[counted], slo).mean()) if counted.any() else 1.0


def lower_bound(
    trace: Trace,
    config: FleetConfig,
    slo: SloTarget,
    *,
    window_s: float,
    min_replicas: int,
    max_replicas: int,
    warmup_s: float = 30.0,
    lead_in: Trace | None = None,
    progress: Callable[[float], None] | None = None,
) -> list[int]:
    """The fewest replicas per window of ``window_s`` seconds (bounded by ``[min, max]``).

    The ``warmup_s`` of arrivals before each window are served first, uncounted, so the window
    starts with engines as busy as the steady state would have them rather than empty; for the
    first window they come from ``lead_in`` (``Trace.lead_in``) when the fleet has one.
    """
    windows = max(1, int(np.ceil(trace.duration_s / window_s)))
    counts: list[int] = []
    guess = min_replicas
    for w in range(windows):
        start = w * window_s
        if w == 0 and lead_in is not None and len(lead_in):
            head = lead_in.window(-warmup_s, 0.0)
            body = trace.window(0.0, window_s)
            warm = warmup_s
            part = Trace(
                body.name,
                np.concatenate([head.arrival_s, body.arrival_s + warm]),
                np.concatenate([head.input_tokens, body.input_tokens]),
                np.concatenate([head.output_tokens, body.output_tokens]),
            )
        else:
            warm = min(start, warmup_s)
            part = trace.window(start - warm, start + window_s)
        if not np.any(part.arrival_s >= warm):
            counts.append(min_replicas)
            continue

        def ok(n: int, part: Trace = part, w: int = w, warm: float = warm) -> bool:
            return _attainment(part, n, config, slo, seed=config.seed + w, counted_from=warm) >= slo.goodput

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
