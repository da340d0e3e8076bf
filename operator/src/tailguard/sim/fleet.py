"""A fleet of vLLM replicas behind a Service, a Deployment that scales and rolls it, and the clock.

Requests from the trace reach a Service that spreads them over Ready pods (at random, as
kube-proxy does, or to the pod with the fewest outstanding requests). A new pod waits for a GPU
(Pending), loads the model for the cold start (Starting) and then serves (Ready). A removed pod
leaves the Service at once and drains its requests for up to ``drain_timeout_s``, holding its GPU;
whatever is left is aborted. A max-batch change, and a spec change the user makes
(``FleetConfig.rollouts_at``: a new image or engine argument), roll the pods one at a time with
``maxSurge: 0, maxUnavailable: 1``; one replica alone with a surge pod (``maxSurge: 1,
maxUnavailable: 0``), as the operator renders it.

An autoscaler is called every ``interval_s`` with a :class:`FleetView` and returns an
:class:`Action`. It sees metrics only through the modelled Prometheus.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

import numpy as np

from tailguard.contract.vllm import TPOT_BUCKETS_S, TTFT_BUCKETS_S
from tailguard.sim.engine import Engine
from tailguard.sim.profiles import EngineProfile
from tailguard.sim.prometheus import ModelledPrometheus
from tailguard.sim.trace import FloatArray, Trace


class PodPhase(Enum):
    PENDING = "pending"
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    GONE = "gone"


@dataclass
class Pod:
    name: str
    version: int
    max_batch: int
    created_at: float
    phase: PodPhase = PodPhase.PENDING
    gpu_since: float | None = None
    gone_at: float | None = None
    ready_at: float | None = None
    engine: Engine | None = None


@dataclass(frozen=True)
class Action:
    """What an autoscaler wants: a replica count and a max batch (``None`` keeps it), and why."""

    replicas: int
    max_batch: int | None = None
    #: The explanation, a sentence.
    reason: str = ""
    #: A short code for the reason (tailguard's ``Reason``), when the policy has one.
    reason_code: str = ""
    #: The size the load asked for before the policy's limits, when it says.
    recommended: int | None = None
    #: Requests per second one replica is taken to sustain, when the policy models it.
    capacity_per_replica: float | None = None
    #: Limits that changed the recommendation.
    limits: tuple[str, ...] = ()
    #: New pods are Ready at once (the oracle's schedule, which has no cold start).
    instant: bool = False


@dataclass(frozen=True)
class FleetConfig:
    profile: EngineProfile
    cold_start_s: float = 60.0
    #: Each start takes ``cold_start_s × (1 ± jitter)`` (uniform).
    cold_start_jitter: float = 0.1
    drain_timeout_s: float = 30.0
    #: GPUs the cluster can give this service; ``None`` is unlimited.
    gpu_limit: int | None = None
    router: str = "random"
    scrape_interval_s: float = 15.0
    rate_window_s: float = 120.0
    initial_replicas: int = 1
    initial_max_batch: int | None = None
    max_num_batched_tokens: int | None = None
    seed: int = 0
    #: Seconds the initial replicas serve the trace's lead-in (``Trace.lead_in``) before it
    #: begins, scraped by Prometheus and uncounted; the autoscaler is called throughout and
    #: observes, but what it asks for is not applied. The run then starts as a policy does after
    #: a restart with its state kept, on warm engines with a full rate window. 0 starts on
    #: empty engines and an empty Prometheus, a jump from no load at all.
    warmup_s: float = 0.0
    #: Replicas that serve the lead-in, per ``lead_in_window_s`` from its start, Ready at once
    #: (the lower bound's schedule of the lead-in), so a lead-in whose load moves is served as
    #: the trace's own start would be; empty keeps ``initial_replicas`` throughout.
    lead_in_schedule: tuple[int, ...] = ()
    lead_in_window_s: float = 60.0
    #: Bounds of the engines' TTFT and TPOT histograms: vLLM's defaults, or with the SLOs added as
    #: edges, as the operator renders ``--custom-histogram-buckets`` (``Scenario.fleet`` does).
    ttft_buckets_s: tuple[float, ...] = TTFT_BUCKETS_S
    tpot_buckets_s: tuple[float, ...] = TPOT_BUCKETS_S
    #: Times (seconds on the trace's clock) at which the user changes the pod template (a new
    #: image, an engine argument): the Deployment rolls every pod in turn, as for a max-batch
    #: change, but the autoscaler did not ask for it.
    rollouts_at: tuple[float, ...] = ()


class FleetView:
    """What an autoscaler may read: the modelled Prometheus and the Deployment's status."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet

    @property
    def prometheus(self) -> ModelledPrometheus:
        return self._fleet.prometheus

    @property
    def config(self) -> FleetConfig:
        return self._fleet.config

    @property
    def desired(self) -> int:
        return self._fleet.desired

    @property
    def max_batch(self) -> int:
        return self._fleet.max_batch

    def count(self, phase: PodPhase) -> int:
        return sum(1 for p in self._fleet.active_pods() if p.phase is phase)

    @property
    def ready(self) -> int:
        return len(self._fleet.ready)

    @property
    def rollout_in_progress(self) -> bool:
        return self._fleet.rollout_in_progress()

    def pod_phases(self) -> dict[str, PodPhase]:
        """Phase of every pod that is not gone or terminating."""
        return {p.name: p.phase for p in self._fleet.active_pods()}


class Autoscaler(Protocol):
    name: str
    interval_s: float

    def step(self, now: float, view: FleetView) -> Action: ...


@dataclass
class TimelineRow:
    time: float
    desired: int
    ready: int
    starting: int
    pending: int
    draining: int
    gpus: int
    max_batch: int
    #: The last decision before this scrape.
    action: Action | None = None


@dataclass
class RunResult:
    """Everything one run produced: per-request outcomes, the timeline and the fleet's counters."""

    policy: str
    trace: Trace
    ttft: FloatArray
    tpot: FloatArray
    finish: FloatArray
    gpu_seconds: float
    timeline: list[TimelineRow]
    scale_events: list[tuple[float, int, int]]  # (time, from, to)
    max_batch_changes: list[tuple[float, int, int]]
    replica_seconds: float
    end_s: float
    extra: dict[str, float] = field(default_factory=dict)


_SCRAPE, _TICK, _READY, _GONE, _LEAD, _HANDOVER, _ROLLOUT = 0, 1, 2, 3, 4, 5, 6
#: How long before time zero the fleet takes the size the policy last asked for in the lead-in.
_HANDOVER_LEAD_S = 1e-6


class Fleet:
    """The pods, the Deployment's reconcile loop and the accounting of one run."""

    def __init__(self, config: FleetConfig, on_finish: Callable[[int, float, float, float], None]) -> None:
        self.config = config
        self.profile = config.profile
        self.rng = np.random.default_rng(config.seed)
        self.prometheus = ModelledPrometheus(config.scrape_interval_s)
        self.on_finish = on_finish
        self.pods: list[Pod] = []
        self.ready: list[Pod] = []
        self.desired = config.initial_replicas
        self.max_batch = config.initial_max_batch or config.profile.max_num_seqs
        self.version = 0
        self._names = 0
        self._events: list[tuple[float, int, int, str]] = []
        self._seq = 0
        self.gpu_seconds = 0.0
        self.replica_seconds = 0.0
        self.scale_events: list[tuple[float, int, int]] = []
        self.max_batch_changes: list[tuple[float, int, int]] = []

    # -- pods ----------------------------------------------------------------------------------

    def active_pods(self) -> list[Pod]:
        return [p for p in self.pods if p.phase in (PodPhase.PENDING, PodPhase.STARTING, PodPhase.READY)]

    def gpus_in_use(self) -> int:
        held = sum(1 for p in self.pods if p.phase in (PodPhase.STARTING, PodPhase.READY, PodPhase.DRAINING))
        return held * self.profile.gpus

    def rollout_in_progress(self) -> bool:
        return any(p.version != self.version for p in self.active_pods())

    def push(self, at: float, kind: int, pod: str = "") -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, self._seq, kind, pod))

    def _new_pod(self, now: float) -> Pod:
        self._names += 1
        pod = Pod(f"pod-{self._names}", self.version, self.max_batch, now)
        self.pods.append(pod)
        return pod

    def _start(self, pod: Pod, now: float, instant: bool = False) -> None:
        pod.phase = PodPhase.STARTING
        pod.gpu_since = now
        jitter = self.config.cold_start_jitter
        delay = (
            0.0 if instant else self.config.cold_start_s * (1.0 + jitter * (2.0 * self.rng.random() - 1.0))
        )
        pod.ready_at = now + delay
        if instant:
            self._make_ready(pod, now)
        else:
            self.push(pod.ready_at, _READY, pod.name)

    def _make_ready(self, pod: Pod, now: float) -> None:
        pod.phase = PodPhase.READY
        pod.engine = Engine(
            self.profile,
            max_num_seqs=pod.max_batch,
            max_num_batched_tokens=self.config.max_num_batched_tokens,
            start_time=now,
            on_finish=self.on_finish,
            ttft_buckets_s=self.config.ttft_buckets_s,
            tpot_buckets_s=self.config.tpot_buckets_s,
        )
        self.ready.append(pod)

    def _terminate(self, pod: Pod, now: float) -> None:
        if pod.phase is PodPhase.PENDING:
            pod.phase = PodPhase.GONE
            pod.gone_at = now
            return
        if pod.phase is PodPhase.STARTING:
            pod.phase = PodPhase.GONE
            pod.gone_at = now
            self._account(pod, now)
            return
        # Ready: leave the Service, drain in-flight requests, then release the GPU.
        self.ready.remove(pod)
        pod.phase = PodPhase.DRAINING
        engine = pod.engine
        assert engine is not None
        engine.advance_to(now)
        deadline = now + self.config.drain_timeout_s
        engine.run_until_idle(limit=deadline)
        if not engine.idle:
            engine.clock = deadline
            engine.abort_all()
            end = deadline
        else:
            end = max(now, min(engine.busy_until, deadline))
        pod.gone_at = end
        self.push(end, _GONE, pod.name)

    def _account(self, pod: Pod, end: float) -> None:
        if pod.gpu_since is not None:
            # GPU time counts from the trace's start, not the lead-in's.
            held = max(0.0, end - max(0.0, pod.gpu_since))
            self.gpu_seconds += held * self.profile.gpus
            self.replica_seconds += held

    # -- the Deployment ----------------------------------------------------------------------

    def apply(self, now: float, action: Action) -> None:
        replicas = max(0, int(action.replicas))
        if replicas != self.desired:
            if now >= 0.0:  # the lead-in's own resizes are not the policy's
                self.scale_events.append((now, self.desired, replicas))
            self.desired = replicas
        if action.max_batch is not None and action.max_batch != self.max_batch:
            self.max_batch_changes.append((now, self.max_batch, action.max_batch))
            self.max_batch = action.max_batch
            self.version += 1
        before = {p.name for p in self.pods}
        self.reconcile(now)
        if action.instant:
            for pod in self.pods:
                if pod.name not in before and pod.phase is PodPhase.STARTING:
                    pod.ready_at = now
                    self._make_ready(pod, now)

    def reconcile(self, now: float) -> None:
        active = self.active_pods()
        # Old-version pods that serve nothing yet are replaced at once.
        for pod in active:
            if pod.version != self.version and pod.phase is not PodPhase.READY:
                self._terminate(pod, now)
        active = self.active_pods()
        # One replica alone rolls with a surge pod (maxSurge 1, maxUnavailable 0, as the
        # operator renders it): the old pod serves until its successor is Ready.
        surge = self.desired == 1 and any(p.version != self.version for p in active)
        if len(active) > self.desired + surge:
            self._scale_down(active, len(active) - self.desired - surge, now)
        active = self.active_pods()
        for _ in range(self.desired - len(active)):
            self._new_pod(now)
        active = self.active_pods()
        old_ready = [p for p in active if p.version != self.version and p.phase is PodPhase.READY]
        if old_ready and surge:
            successors = [p for p in active if p.version == self.version]
            if not successors:
                self._new_pod(now)
            elif all(p.phase is PodPhase.READY for p in successors):
                self._terminate(old_ready[0], now)
        elif old_ready:
            # Rolling update: with every pod Ready, take one old pod down and let a new one start.
            unavailable = sum(1 for p in active if p.phase is not PodPhase.READY) + max(
                0, self.desired - len(active)
            )
            if unavailable == 0:
                self._terminate(old_ready[0], now)
                self._new_pod(now)
        self._schedule_pending(now)

    def _scale_down(self, active: list[Pod], count: int, now: float) -> None:
        # ReplicaSet order: unscheduled first, then not ready, then old versions, newest first.
        rank = {PodPhase.PENDING: 0, PodPhase.STARTING: 1, PodPhase.READY: 2}
        victims = sorted(active, key=lambda p: (rank[p.phase], p.version == self.version, -p.created_at))
        for pod in victims[:count]:
            self._terminate(pod, now)

    def _schedule_pending(self, now: float) -> None:
        limit = self.config.gpu_limit
        for pod in self.pods:
            if pod.phase is not PodPhase.PENDING:
                continue
            if limit is not None and self.gpus_in_use() + self.profile.gpus > limit:
                break
            self._start(pod, now)

    # -- events ------------------------------------------------------------------------------

    def start_serving(self, count: int, at: float, *, gpu_from: float) -> None:
        """``count`` pods Ready at ``at`` (the fleet a run starts with), holding GPUs from ``gpu_from``."""
        for _ in range(count):
            pod = self._new_pod(at)
            self._start(pod, at, instant=True)
            pod.gpu_since = gpu_from

    def schedule_scrape(self, at: float) -> None:
        self.push(at, _SCRAPE)

    def schedule_tick(self, at: float) -> None:
        self.push(at, _TICK)

    def schedule_lead_in(self, begin: float) -> None:
        """Resize to each window of ``config.lead_in_schedule`` at its start, before time zero."""
        window = self.config.lead_in_window_s
        for k in range(1, len(self.config.lead_in_schedule)):
            at = begin + k * window
            if at < 0.0:
                self.push(at, _LEAD, str(k))

    def schedule_rollouts(self, end: float) -> None:
        """A new pod template at each time of ``config.rollouts_at`` within the run."""
        for at in self.config.rollouts_at:
            if 0.0 <= at <= end:
                self.push(at, _ROLLOUT)

    def due(self, until: float) -> Iterator[tuple[float, int, str]]:
        """Pop the events at or before ``until`` in time order (events they schedule included)."""
        events = self._events
        while events and events[0][0] <= until:
            at, _, kind, name = heapq.heappop(events)
            yield at, kind, name

    def handle(self, at: float, kind: int, name: str) -> None:
        if kind == _LEAD:
            self.apply(at, Action(self.config.lead_in_schedule[int(name)], instant=True))
            return
        if kind == _ROLLOUT:
            self.version += 1
            self.reconcile(at)
            return
        pod = next((p for p in self.pods if p.name == name), None)
        if pod is None:
            return
        if kind == _READY and pod.phase is PodPhase.STARTING and pod.ready_at == at:
            self._make_ready(pod, at)
            self.reconcile(at)
        elif kind == _GONE and pod.phase is PodPhase.DRAINING:
            pod.phase = PodPhase.GONE
            self._account(pod, at)
            self.reconcile(at)

    def scrape(self, now: float) -> None:
        snaps = []
        for pod in self.ready:
            engine = pod.engine
            assert engine is not None
            engine.advance_to(now)
            snaps.append((pod.name, engine.snapshot()))
        self.prometheus.scrape(now, snaps)

    def row(self, at: float, action: Action | None) -> TimelineRow:
        """The Deployment's status at ``at`` for the timeline."""
        counts = {phase: 0 for phase in PodPhase}
        for pod in self.pods:
            counts[pod.phase] += 1
        return TimelineRow(
            at,
            self.desired,
            len(self.ready),
            counts[PodPhase.STARTING],
            counts[PodPhase.PENDING],
            counts[PodPhase.DRAINING],
            self.gpus_in_use(),
            self.max_batch,
            action,
        )

    # -- the Service ---------------------------------------------------------------------------

    def route(self, rid: int, t: float, prompt: int, output: int, draw: float) -> bool:
        """Send a request to a Ready pod (``draw`` in [0, 1) picks one at random); ``False`` when
        no pod is Ready."""
        ready = self.ready
        if not ready:
            return False
        if self.config.router == "least":
            best = None
            best_load = 0
            for pod in ready:
                engine = pod.engine
                assert engine is not None
                engine.advance_to(t)
                load = engine.num_running + engine.num_waiting
                if best is None or load < best_load:
                    best, best_load = pod, load
            assert best is not None
            target = best
        else:
            target = ready[int(draw * len(ready))]
        engine = target.engine
        assert engine is not None
        engine.advance_to(t)
        engine.add_request(rid, t, prompt, output)
        return True

    def close(self, end: float) -> None:
        """Stop the clock at ``end``: count the GPU time of pods still holding one."""
        for pod in self.pods:
            if pod.phase in (PodPhase.STARTING, PodPhase.READY, PodPhase.DRAINING):
                self._account(pod, end)

    def finish(self, limit: float) -> None:
        """Let every engine finish what it holds, up to ``limit``; abort the rest."""
        for pod in self.pods:
            if pod.engine is not None and not pod.engine.idle:
                pod.engine.run_until_idle(limit=limit)
                pod.engine.abort_all()


def simulate(
    trace: Trace,
    autoscaler: Autoscaler,
    config: FleetConfig,
    *,
    progress: Callable[[float], None] | None = None,
) -> RunResult:
    """Run ``trace`` through a fleet steered by ``autoscaler``.

    GPU time is counted from the first arrival to the last. With ``config.warmup_s`` the initial
    replicas first serve the trace's lead-in (uncounted).
    """
    n = len(trace)
    ttft = np.full(n, np.nan)
    tpot = np.full(n, np.nan)
    finish = np.full(n, np.nan)

    def done(rid: int, first: float, per_token: float, end: float) -> None:
        if rid >= n:  # a lead-in request: it warms the engines and is not counted
            return
        ttft[rid] = first
        tpot[rid] = per_token
        finish[rid] = end

    fleet = Fleet(config, done)
    lead = trace.lead_in(config.warmup_s) if config.warmup_s > 0 else None
    begin = -config.warmup_s if lead is not None else 0.0
    # GPU time counts from the trace's start, not the lead-in's.
    lead_schedule = config.lead_in_schedule if lead is not None else ()
    fleet.start_serving(lead_schedule[0] if lead_schedule else config.initial_replicas, begin, gpu_from=0.0)
    if lead_schedule:
        fleet.schedule_lead_in(begin)
    end = trace.duration_s
    fleet.schedule_scrape(begin)
    fleet.schedule_rollouts(end)
    # With a lead-in every policy is called from its start, and observes: what it asks for is not
    # applied before time zero (its learned state is kept, as after a restart with its state).
    # At time zero the fleet is the one it asked for last, Ready, as after an operator restart the
    # Deployment still has the size the operator set: the run does not open with the lead-in's
    # fleet meeting a burst the policy had sized for. Without a lead-in the first decision comes
    # once a rate window can hold two scrapes.
    first_tick = begin if lead is not None else 2.0 * config.scrape_interval_s
    fleet.schedule_tick(first_tick + 1e-6)
    if lead is not None:
        fleet.push(-_HANDOVER_LEAD_S, _HANDOVER)
    timeline: list[TimelineRow] = []
    last: Action | None = None

    def process(at: float, kind: int, name: str) -> None:
        nonlocal last
        if kind == _HANDOVER:
            if last is not None:
                fleet.apply(at, Action(last.replicas, instant=True))
        elif kind == _SCRAPE:
            fleet.scrape(at)
            if at >= 0.0:
                timeline.append(fleet.row(at, last))
            if at + config.scrape_interval_s <= end:
                fleet.schedule_scrape(at + config.scrape_interval_s)
        elif kind == _TICK:
            last = autoscaler.step(at, FleetView(fleet))
            if at >= 0.0:
                fleet.apply(at, last)
            if at + autoscaler.interval_s <= end:
                fleet.schedule_tick(at + autoscaler.interval_s)
        else:
            fleet.handle(at, kind, name)

    def route(rid: int, t: float, prompt: int, output: int, draw: float) -> None:
        for event in fleet.due(t):
            process(*event)
        if not fleet.route(rid, t, prompt, output, draw):
            done(rid, math.inf, math.inf, t)

    # The router's draws for the trace come first, then the lead-in's (a fixed order keeps runs
    # reproducible from the seed).
    pick = fleet.rng.random(n)
    if lead is not None:
        lead_pick = fleet.rng.random(len(lead))
        for j in range(len(lead)):
            route(
                n + j,
                float(lead.arrival_s[j]),
                int(lead.input_tokens[j]),
                int(lead.output_tokens[j]),
                float(lead_pick[j]),
            )
    arrivals = trace.arrival_s
    inputs = trace.input_tokens
    outputs = trace.output_tokens
    next_progress = 0.0
    for i in range(n):
        t = float(arrivals[i])
        if progress is not None and t >= next_progress:
            progress(t / end if end > 0 else 1.0)
            next_progress = t + end / 200.0
        route(i, t, int(inputs[i]), int(outputs[i]), float(pick[i]))
    for event in fleet.due(end):
        process(*event)
    fleet.close(end)
    # Let every engine finish what it holds (counted in latency, not in GPU time).
    fleet.finish(end + 3600.0)
    if progress is not None:
        progress(1.0)
    return RunResult(
        policy=autoscaler.name,
        trace=trace,
        ttft=ttft,
        tpot=tpot,
        finish=finish,
        gpu_seconds=fleet.gpu_seconds,
        timeline=timeline,
        scale_events=fleet.scale_events,
        max_batch_changes=fleet.max_batch_changes,
        replica_seconds=fleet.replica_seconds,
        end_s=end,
    )
