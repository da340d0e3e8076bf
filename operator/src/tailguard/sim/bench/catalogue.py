"""What the benchmark runs: the traces, their setting, and the policies compared on them.

Most traces run one hour of a Llama-3.3-70B FP8 service, one replica on two H100s (chat prompts of
about 600 tokens; SLO: p99 TTFT 1 s, p99 TPOT 100 ms, goodput 0.99; 1 to 32 replicas; 60 s cold
start). A 70B replica serves about 10 requests per second, so these loads need fleets of 3 to 12
replicas, where one replica more or less is a fair step of the cost. Two traces change the
shape of the work: code completion (2,000-token prompts, 30-token answers, sub-minute bursts) on
an 8B replica, and long-context requests (32k+ prompts) on an 8B replica with a 128k context.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tailguard.sim import synthetic
from tailguard.sim.oracle import SloTarget
from tailguard.sim.trace import Trace

BASELINES = ("hpa", "keda", "kpa", "wva", "dynamo", "static")
SLO = SloTarget(ttft_s=1.0, tpot_s=0.1, goodput=0.99)
PROFILE = "h100x2-llama3-70b-fp8"
MIX = synthetic.CHAT
HOUR = 3600.0
#: Every run starts after a lead-in of the same process drawn earlier, served uncounted while every
#: policy observes and does not act: warm engines, a full rate window and tailguard's learned
#: state, as after a restart with its state annotation. The benchmark's traces get the goals'
#: hour (``--lead-in-s``): an error budget's history of a bursty service is what its operator
#: would have after an hour of it, and five minutes hold no burst. About twice the time of
#: five minutes.
LEAD_IN_S = HOUR
#: The shorter lead-in of the side benchmarks (speed, the max-batch lever), which measure no
#: goal that rests on a learned history.
WARMUP_S = 300.0


@dataclass(frozen=True)
class BenchTrace:
    key: str
    describe: str
    #: The trace of a seed, drawn with a lead-in of the given seconds (``Trace.before``).
    make: Callable[[int, float], Trace]
    #: The rate schedule the trace is drawn from (for the idealised policy of ``--frontier``).
    rate: Callable[[int, float], synthetic.RateFn] | None = None
    #: The load jumps: ``--frontier`` sweeps the idealised policy's floor on it; on the other
    #: traces it runs that policy held by the declared scale-down window instead.
    jumps: bool = False
    #: The load varies slowly: the flat-fleet goal asks for at most 0.85× its GPU-hours.
    slow: bool = False
    #: The goal of at most 1.2× the lower bound applies (diurnal and Poisson).
    bound_goal: bool = False
    profile: str = PROFILE
    slo: SloTarget = SLO
    #: Requests per second one replica sustains at the SLO (the idealised policy sizes with it).
    per_replica: float | None = None


#: What one replica of the 70B profile sustains at the SLO with random routing (measured with the
#: lower bound's engine: 10 req/s per replica meets the target on 1 to 10 replicas, 11 builds a
#: queue); the idealised policy of ``--frontier`` sizes with it.
PER_REPLICA = 10.0

TRACES = (
    BenchTrace(
        "bursty",
        "MMPP: 40 req/s calm, 100 req/s bursts (means 8 min calm, 4 min burst)",
        lambda seed, lead: synthetic.mmpp(
            40, 100, HOUR, base_mean_s=480, burst_mean_s=240, mix=MIX, seed=seed, lead_s=lead
        ),
        lambda seed, lead: synthetic.mmpp_rate(
            40, 100, HOUR, base_mean_s=480, burst_mean_s=240, seed=seed, lead_s=lead
        ),
        jumps=True,
        per_replica=PER_REPLICA,
    ),
    BenchTrace(
        "diurnal",
        "a day in an hour: 70 req/s mean, ±60%",
        lambda seed, lead: synthetic.diurnal(
            70, HOUR, amplitude=0.6, period_s=HOUR, mix=MIX, seed=seed, lead_s=lead
        ),
        lambda _seed, _lead: synthetic.diurnal_rate(70, amplitude=0.6, period_s=HOUR),
        slow=True,
        bound_goal=True,
        per_replica=PER_REPLICA,
    ),
    BenchTrace(
        "step",
        "40 → 80 req/s at 30 min",
        lambda seed, lead: synthetic.step(40, 80, HOUR, mix=MIX, seed=seed, lead_s=lead),
        lambda _seed, _lead: synthetic.step_rate(40, 80, HOUR),
        jumps=True,
        per_replica=PER_REPLICA,
    ),
    BenchTrace(
        "poisson",
        "stationary Poisson, 70 req/s",
        lambda seed, lead: synthetic.poisson(70, HOUR, mix=MIX, seed=seed, lead_s=lead),
        lambda _seed, _lead: synthetic.constant_rate(70),
        bound_goal=True,
        per_replica=PER_REPLICA,
    ),
    BenchTrace(
        "code",
        "code completion on 8B/H100: 2,000 in, 30 out; 6 req/s mean, sub-minute bursts around 60 req/s",
        lambda seed, lead: synthetic.spiky(6, 60, HOUR, mix=synthetic.CODE, seed=seed, lead_s=lead),
        lambda seed, lead: synthetic.spiky_rate(6, 60, HOUR, seed=seed, lead_s=lead),
        jumps=True,
        profile="h100-llama3-8b",
        slo=SloTarget(ttft_s=1.0, tpot_s=0.05, goodput=0.99),
    ),
    BenchTrace(
        "long-context",
        "32k+ prompts on 8B/H100 with a 128k context: a day in an hour, 1 req/s mean, ±60%",
        lambda seed, lead: synthetic.diurnal(
            1.0, HOUR, amplitude=0.6, period_s=HOUR, mix=synthetic.LONG_CONTEXT, seed=seed, lead_s=lead
        ),
        lambda _seed, _lead: synthetic.diurnal_rate(1.0, amplitude=0.6, period_s=HOUR),
        slow=True,
        profile="h100-llama3.1-8b-128k",
        slo=SloTarget(ttft_s=5.0, tpot_s=0.1, goodput=0.99),
    ),
)

#: The traces ``make bench`` runs by default (the others by name with ``--traces``).
DEFAULT_TRACES = ("bursty", "diurnal", "step", "poisson", "code", "long-context")

FRONTIER_FLOORS = (4, 5, 6, 7, 8, 9, 10)
FRONTIER_TAILGUARD: tuple[tuple[str, dict[str, Any]], ...] = (
    ("", {}),
    ("headroom 0.5", {"headroom": 0.5}),
    ("headroom 1", {"headroom": 1.0}),
    # The floor the informed policy needs at the target on step (7) and bursty (9), declared as
    # minReplicas: what tailguard spends when the user knows the burst level.
    ("min replicas 7", {"min_replicas": 7}),
    ("min replicas 9", {"min_replicas": 9}),
)

#: The policies whose knobs ``--sweep`` sweeps over their registry grids.
SWEPT = ("tailguard", "hpa", "keda", "kpa", "wva", "dynamo", "dynamo-sla")


def by_key(key: str) -> BenchTrace:
    for trace in TRACES:
        if trace.key == key:
            return trace
    raise ValueError(f"unknown trace {key!r}; known: {', '.join(t.key for t in TRACES)}")
