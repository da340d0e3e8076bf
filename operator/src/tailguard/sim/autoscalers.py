"""tailguard's policy and the peers' policies, each reading the same modelled Prometheus.

The peers are reproduced from their documented defaults (``shared/reference/peers.md``); where a
detail is not documented the choice is named in the class text and in docs/simulator.md.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from tailguard.policy import PolicyConfig, PolicyState, decide
from tailguard.sim.engine import EngineSnapshot
from tailguard.sim.fleet import Action, FleetView, PodPhase
from tailguard.sim.prometheus import ModelledPrometheus


@dataclass(frozen=True)
class Slo:
    ttft_s: float
    tpot_s: float | None
    goodput: float
    min_replicas: int
    max_replicas: int


class Tailguard:
    """tailguard's ``decide``, with its state stored as JSON between calls (as in the annotation).

    It reads the modelled Prometheus over ``config.rate_window_s``, the window the policy reasons with.
    The policy sees the simulated clock shifted by ``clock_origin_s`` (the UNIX time of the trace's
    start), so that declared schedule windows open at their wall-clock times.
    """

    name = "tailguard"

    def __init__(self, config: PolicyConfig, *, clock_origin_s: float = 0.0) -> None:
        self.config = config
        self.clock_origin_s = clock_origin_s
        self.interval_s = config.interval_s
        self.window_s = config.rate_window_s
        self.state_json: str | None = None
        self.reasons: Counter[str] = Counter()

    def step(self, now: float, view: FleetView) -> Action:
        metrics = view.prometheus.observe(
            now, window_s=self.window_s, ttft_slo_s=self.config.ttft_slo_s, tpot_slo_s=self.config.tpot_slo_s
        )
        obs = replace(
            metrics,
            ready_replicas=view.ready,
            starting_replicas=view.count(PodPhase.STARTING),
            pending_replicas=view.count(PodPhase.PENDING),
            desired_replicas=view.desired,
            max_batch=view.max_batch,
            rollout_in_progress=view.rollout_in_progress,
        )
        origin = self.clock_origin_s
        if origin and obs.sample_time is not None:
            obs = replace(obs, sample_time=obs.sample_time + origin)
        decision, state = decide(self.config, PolicyState.from_json(self.state_json), obs, now + origin)
        self.state_json = state.to_json()
        self.reasons[decision.reason_code.value] += 1
        return Action(decision.replicas, decision.max_batch, decision.reason_code.value)


class _HpaBehaviour:
    """The HPA controller around a recommendation: tolerance is applied by the caller; here the
    scale-down stabilization (max of the window), the scale-up limit max(4 pods, 100%) per 15 s
    and the bounds."""

    def __init__(self, slo: Slo, *, down_window_s: float = 300.0) -> None:
        self.slo = slo
        self.down_window_s = down_window_s
        self.history: deque[tuple[float, int]] = deque()
        self.ups: deque[tuple[float, int]] = deque()

    def limit(self, now: float, current: int, recommended: int) -> int:
        if not self.history:
            # A controller that has been running keeps its window; start as if it had been
            # recommending the current size (the simulation starts warm for every policy).
            self.history.append((now, current))
        self.history.append((now, recommended))
        while self.history and now - self.history[0][0] > self.down_window_s:
            self.history.popleft()
        desired = recommended
        if desired < current:
            desired = min(current, max(r for _, r in self.history))
        if desired > current:
            # Scale-up policies: 4 pods or 100% per 15 s period, the larger.
            while self.ups and now - self.ups[0][0] >= 15.0:
                self.ups.popleft()
            base = current - sum(n for _, n in self.ups)
            allowed = max(base + 4, base * 2)
            desired = min(desired, max(current, allowed))
        desired = min(self.slo.max_replicas, max(self.slo.min_replicas, desired))
        if desired > current:
            self.ups.append((now, desired - current))
        return desired


class Hpa:
    """Kubernetes HPA on a Pods metric: ``vllm:num_requests_running`` averaged per pod, target 2
    (KServe's documented LLM example); sync 15 s, tolerance 10%; pods without metrics count as 0
    when scaling up and at target when scaling down (``replica_calculator.go``)."""

    name = "hpa"

    def __init__(self, slo: Slo, *, target: float = 2.0, tolerance: float = 0.1) -> None:
        self.interval_s = 15.0
        self.target = target
        self.tolerance = tolerance
        self.behaviour = _HpaBehaviour(slo)

    def step(self, now: float, view: FleetView) -> Action:
        current = view.desired
        values = view.prometheus.per_pod(now, lambda s: float(s.running))
        pods = [n for n, ph in view.pod_phases().items() if ph is not PodPhase.PENDING]
        metrics = {p: v for p, v in values.items() if p in pods}
        missing = [p for p in pods if p not in metrics]
        if not metrics:
            return Action(self.behaviour.limit(now, current, current), reason="no metrics")
        ratio = sum(metrics.values()) / len(metrics) / self.target
        if not missing:
            rec = current if abs(1.0 - ratio) <= self.tolerance else math.ceil(ratio * len(metrics))
        else:
            fill = self.target if ratio < 1.0 else 0.0
            total = sum(metrics.values()) + fill * len(missing)
            new_ratio = total / (len(metrics) + len(missing)) / self.target
            if (
                abs(1.0 - new_ratio) <= self.tolerance
                or (ratio < 1.0 < new_ratio)
                or (ratio > 1.0 > new_ratio)
            ):
                rec = current
            else:
                rec = math.ceil(new_ratio * (len(metrics) + len(missing)))
                if (new_ratio < 1.0 and rec > current) or (new_ratio > 1.0 and rec < current):
                    rec = current
        return Action(
            self.behaviour.limit(now, current, rec), reason=f"running/pod {ratio * self.target:.1f}"
        )


class Keda:
    """KEDA's Prometheus scaler as vLLM production-stack ships it: ``sum(vllm:num_requests_waiting)``,
    threshold 5 (an AverageValue target, so replicas = ceil(total / 5)), polling 15 s, then the
    HPA's behaviour (tolerance 10%, scale-down stabilization 300 s). The 360 s cooldown applies
    only between 0 and 1 replica, which a minimum of one never reaches."""

    name = "keda"

    def __init__(self, slo: Slo, *, threshold: float = 5.0, tolerance: float = 0.1) -> None:
        self.interval_s = 15.0
        self.threshold = threshold
        self.tolerance = tolerance
        self.behaviour = _HpaBehaviour(slo)

    def step(self, now: float, view: FleetView) -> Action:
        current = view.desired
        total = view.prometheus.gauge_sum(now, lambda s: float(s.waiting))
        if total is None:
            return Action(self.behaviour.limit(now, current, current), reason="no metrics")
        rec = math.ceil(total / self.threshold)
        if current and abs(1.0 - total / (self.threshold * current)) <= self.tolerance:
            rec = current
        return Action(self.behaviour.limit(now, current, rec), reason=f"waiting {total:.0f}")


class Kpa:
    """Knative's KPA: desired = observed concurrency / (per-pod target 100 × utilization 0.7); stable
    window 60 s, panic window 6 s (10%), panic when the panic window asks for ≥ 2× the ready pods,
    no scale-down while panicking (and for a stable window after), rates 1000× up and 2× down,
    tick 2 s. Concurrency is running + waiting from the same Prometheus samples as everyone."""

    name = "kpa"

    def __init__(
        self,
        slo: Slo,
        *,
        target: float = 100.0,
        utilization: float = 0.7,
        stable_s: float = 60.0,
        panic_s: float = 6.0,
    ) -> None:
        self.slo = slo
        self.interval_s = 2.0
        self.target = target * utilization
        self.stable_s = stable_s
        self.panic_s = panic_s
        self.samples: deque[tuple[float, float]] = deque()
        self.panic_since: float | None = None
        self.max_panic = 0

    def step(self, now: float, view: FleetView) -> Action:
        current = view.desired
        conc = view.prometheus.gauge_sum(now, lambda s: float(s.running + s.waiting))
        if conc is None:
            return Action(current, reason="no metrics")
        self.samples.append((now, conc))
        while self.samples and now - self.samples[0][0] > self.stable_s:
            self.samples.popleft()
        stable = sum(v for _, v in self.samples) / len(self.samples)
        recent = [v for t, v in self.samples if now - t <= self.panic_s] or [conc]
        panic = sum(recent) / len(recent)
        ready = max(1, view.ready)
        desired_stable = math.ceil(stable / self.target)
        desired_panic = math.ceil(panic / self.target)
        over = (panic / self.target) / ready >= 2.0
        if (self.panic_since is None and over) or over:
            self.panic_since = now
        elif self.panic_since is not None and now - self.panic_since > self.stable_s:
            self.panic_since = None
            self.max_panic = 0
        if self.panic_since is not None:
            desired = max(desired_panic, self.max_panic, current)
            self.max_panic = desired
        else:
            desired = desired_stable
        desired = min(desired, math.ceil(1000.0 * ready))
        desired = max(desired, math.floor(ready / 2.0))
        desired = min(self.slo.max_replicas, max(self.slo.min_replicas, desired))
        mode = "panic" if self.panic_since is not None else "stable"
        return Action(desired, reason=f"{mode} concurrency {stable:.0f}")


class Wva:
    """llm-d WVA's saturation analyzer: a replica is saturated at KV use ≥ 0.80 or queue ≥ 5; scale up
    by one when every replica is saturated or the spare capacity of the others averages under
    0.10 KV or 3 queue slots; scale down by one when at least two are unsaturated and the load
    would fit on N−1 without triggering; loop 30 s; frozen while a change is under way."""

    name = "wva"

    def __init__(
        self,
        slo: Slo,
        *,
        kv_threshold: float = 0.8,
        queue_threshold: float = 5.0,
        kv_spare: float = 0.1,
        queue_spare: float = 3.0,
    ) -> None:
        self.slo = slo
        self.interval_s = 30.0
        self.kv_threshold = kv_threshold
        self.queue_threshold = queue_threshold
        self.kv_spare = kv_spare
        self.queue_spare = queue_spare

    def step(self, now: float, view: FleetView) -> Action:
        current = view.desired
        if view.ready != current or view.count(PodPhase.STARTING) or view.count(PodPhase.PENDING):
            return Action(current, reason="change in progress")
        kv = view.prometheus.per_pod(now, lambda s: s.kv_cache_usage)
        queue = view.prometheus.per_pod(now, lambda s: float(s.waiting))
        if not kv:
            return Action(current, reason="no metrics")
        free = [p for p in kv if kv[p] < self.kv_threshold and queue.get(p, 0.0) < self.queue_threshold]
        desired = current
        if not free:
            desired = current + 1
        else:
            spare_kv = sum(self.kv_threshold - kv[p] for p in free) / len(free)
            spare_q = sum(self.queue_threshold - queue.get(p, 0.0) for p in free) / len(free)
            if spare_kv < self.kv_spare or spare_q < self.queue_spare:
                desired = current + 1
            elif len(free) >= 2 and current > 1:
                n = len(kv)
                kv_after = sum(kv.values()) / (n - 1)
                q_after = sum(queue.values()) / (n - 1)
                if (
                    self.kv_threshold - kv_after >= self.kv_spare
                    and self.queue_threshold - q_after >= self.queue_spare
                ):
                    desired = current - 1
        desired = min(self.slo.max_replicas, max(self.slo.min_replicas, desired))
        return Action(desired, reason=f"{len(kv) - len(free)} of {len(kv)} saturated")


class Dynamo:
    """Dynamo's planner in load mode: every 5 s, one more replica when every engine's TTFT or ITL
    is over its SLA, one fewer when every engine is under 80% of both. The per-engine estimate
    is the engine's mean TTFT and mean inter-token latency over the last rate window (Dynamo
    regresses them on engine load; we use what that regression is fitted to). The ITL SLA is
    the TPOT SLO, or 50 ms when none is declared."""

    name = "dynamo"

    def __init__(self, slo: Slo, *, window_s: float = 60.0) -> None:
        self.slo = slo
        self.interval_s = 5.0
        self.window_s = window_s
        self.itl_sla = slo.tpot_s if slo.tpot_s is not None else 0.05

    def step(self, now: float, view: FleetView) -> Action:
        current = view.desired
        prom = view.prometheus
        ttft = _mean_per_pod(prom, now, self.window_s, lambda s: s.ttft_sum, lambda s: float(s.ttft[-1][1]))
        itl = _mean_per_pod(prom, now, self.window_s, lambda s: s.itl_sum, lambda s: float(s.itl[-1][1]))
        engines = [p for p in ttft if p in itl]
        desired = current
        if engines:
            if all(ttft[p] > self.slo.ttft_s or itl[p] > self.itl_sla for p in engines):
                desired = current + 1
            elif all(ttft[p] < 0.8 * self.slo.ttft_s and itl[p] < 0.8 * self.itl_sla for p in engines):
                desired = current - 1
        desired = min(self.slo.max_replicas, max(self.slo.min_replicas, desired))
        return Action(desired, reason=f"{len(engines)} engines")


def _mean_per_pod(
    prom: ModelledPrometheus,
    now: float,
    window_s: float,
    total: Callable[[EngineSnapshot], float],
    count: Callable[[EngineSnapshot], float],
) -> dict[str, float]:
    """Per pod ``rate(x_sum[w]) / rate(x_count[w])``: the mean over the window."""
    sums = prom.per_pod_rate(now, window_s, total)
    counts = prom.per_pod_rate(now, window_s, count)
    return {p: sums[p] / counts[p] for p in sums if counts.get(p, 0.0) > 0}


class Static:
    """A fixed fleet, sized for the peak (the oracle's largest window)."""

    name = "static"

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas
        self.interval_s = 60.0

    def step(self, now: float, view: FleetView) -> Action:
        return Action(self.replicas, reason="static")


class Schedule:
    """Replays a precomputed replica schedule (the oracle); the fleet makes its pods ready at once."""

    name = "oracle"

    def __init__(self, window_s: float, counts: list[int]) -> None:
        self.window_s = window_s
        self.counts = counts
        self.interval_s = window_s

    def __call__(self, now: float) -> int:
        index = min(len(self.counts) - 1, int(now // self.window_s))
        return self.counts[index]

    def step(self, now: float, view: FleetView) -> Action:
        return Action(self(now), reason="oracle")
