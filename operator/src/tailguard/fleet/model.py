"""The fleet's state: one simulated engine per Ready pod, load per service, even spread over pods.

Pure apart from its random generator (seeded): the server shell feeds it pods and the clock.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from tailguard.contract.vllm import TPOT_BUCKETS_S, TTFT_BUCKETS_S
from tailguard.metrics.results import ServiceKey
from tailguard.sim.engine import Engine
from tailguard.sim.exposition import render
from tailguard.sim.profiles import EngineProfile
from tailguard.sim.synthetic import SHAREGPT, TokenMix

PodKey = tuple[str, str]  # (namespace, pod name)


@dataclass(frozen=True)
class PodInfo:
    """What the fleet needs to know about one pod."""

    namespace: str
    name: str
    service: str
    model_name: str
    max_num_seqs: int
    ready: bool
    #: Bounds of the engine's TTFT and TPOT histograms (``--custom-histogram-buckets``).
    ttft_buckets_s: tuple[float, ...] = TTFT_BUCKETS_S
    tpot_buckets_s: tuple[float, ...] = TPOT_BUCKETS_S


@dataclass
class _Replica:
    info: PodInfo
    engine: Engine


@dataclass
class PodFleet:
    """Simulated engines behind the pods of every InferenceService."""

    profile: EngineProfile
    mix: TokenMix = SHAREGPT
    seed: int = 0
    start: float = 0.0
    rates: dict[ServiceKey, float] = field(default_factory=dict)
    #: Token mixes of services that do not use ``mix``.
    mixes: dict[ServiceKey, TokenMix] = field(default_factory=dict)
    dropped: dict[ServiceKey, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.seed)
        self._replicas: dict[PodKey, _Replica] = {}
        self._clock = self.start
        self._ids = itertools.count()
        self._round_robin: dict[ServiceKey, int] = {}

    @property
    def clock(self) -> float:
        return self._clock

    def set_rate(self, namespace: str, service: str, rate: float) -> None:
        """Requests per second sent to one service from now on."""
        self.rates[(namespace, service)] = max(0.0, rate)

    def set_mix(self, namespace: str, service: str, mix: TokenMix) -> None:
        """Prompt and output lengths of one service's requests from now on (default: ``mix``)."""
        self.mixes[(namespace, service)] = mix

    def sync_pods(self, pods: list[PodInfo]) -> None:
        """Match engines to pods: a Ready pod gets an engine (a restart gets a new one), others lose it."""
        wanted = {(p.namespace, p.name): p for p in pods if p.ready}
        for key in list(self._replicas):
            replica = self._replicas[key]
            pod = wanted.get(key)
            if pod is None or pod.max_num_seqs != replica.info.max_num_seqs:
                replica.engine.abort_all()
                del self._replicas[key]
        for key, pod in wanted.items():
            if key not in self._replicas:
                engine = Engine(
                    self.profile,
                    max_num_seqs=pod.max_num_seqs,
                    start_time=self._clock,
                    ttft_buckets_s=pod.ttft_buckets_s,
                    tpot_buckets_s=pod.tpot_buckets_s,
                )
                self._replicas[key] = _Replica(pod, engine)

    def ready_pods(self, namespace: str, service: str) -> list[PodKey]:
        """Pods of a service that receive traffic, in a stable order."""
        return sorted(
            k for k, r in self._replicas.items() if (r.info.namespace, r.info.service) == (namespace, service)
        )

    def max_batches(self, namespace: str, service: str) -> set[int]:
        """The max batch of every engine serving one service (one value once a rollout is done)."""
        return {self._replicas[key].info.max_num_seqs for key in self.ready_pods(namespace, service)}

    def advance(self, now: float) -> None:
        """Generate the arrivals up to ``now``, spread them evenly, and run every engine to ``now``."""
        if now <= self._clock:
            return
        span = now - self._clock
        for (namespace, service), rate in sorted(self.rates.items()):
            count = int(self._rng.poisson(rate * span)) if rate > 0 else 0
            if count == 0:
                continue
            arrivals = np.sort(self._rng.uniform(self._clock, now, count))
            mix = self.mixes.get((namespace, service), self.mix)
            prompts, outputs = mix.sample(self._rng, count)
            pods = self.ready_pods(namespace, service)
            if not pods:
                self.dropped[(namespace, service)] = self.dropped.get((namespace, service), 0) + count
                continue
            start = self._round_robin.get((namespace, service), 0)
            for i, (arrival, prompt, output) in enumerate(zip(arrivals, prompts, outputs, strict=True)):
                engine = self._replicas[pods[(start + i) % len(pods)]].engine
                engine.advance_to(float(arrival))
                engine.add_request(next(self._ids), float(arrival), int(prompt), int(output))
            self._round_robin[(namespace, service)] = (start + count) % len(pods)
        for replica in self._replicas.values():
            replica.engine.advance_to(now)
        self._clock = now

    def metrics(self, namespace: str, pod: str) -> str | None:
        """The ``/metrics`` body of one pod, or None when it has no engine."""
        replica = self._replicas.get((namespace, pod))
        if replica is None:
            return None
        return render(replica.engine.snapshot(), model_name=replica.info.model_name)

    def scrape_targets(self, address: str) -> list[dict[str, object]]:
        """Prometheus file service-discovery entries, one per pod, labelled as the PodMonitor does."""
        return [
            {
                "targets": [address],
                "labels": {
                    "__metrics_path__": f"/metrics/{ns}/{name}",
                    "namespace": ns,
                    "pod": name,
                    "inference_service": self._replicas[(ns, name)].info.service,
                },
            }
            for ns, name in sorted(self._replicas)
        ]
