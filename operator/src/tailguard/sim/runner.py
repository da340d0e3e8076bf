"""A scenario (trace, replica profile, SLO, bounds) run through a list of policies under identical
conditions, plus the lower bound. Used by ``tailguard simulate`` and by the benchmark."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from tailguard.contract.vllm import TPOT_BUCKETS_S, TTFT_BUCKETS_S, with_edge
from tailguard.policy import PolicyConfig, ScheduleWindow
from tailguard.sim import policies as registry
from tailguard.sim.fleet import Autoscaler, FleetConfig, RunResult, simulate
from tailguard.sim.oracle import SloTarget, lower_bound
from tailguard.sim.policies import BuildContext, Settings, SloAndBounds
from tailguard.sim.policies.hindsight import Fixed
from tailguard.sim.profiles import EngineProfile
from tailguard.sim.report import PolicySummary, summarise
from tailguard.sim.trace import Trace


@dataclass(frozen=True)
class Scenario:
    trace: Trace
    profile: EngineProfile
    slo: SloTarget
    min_replicas: int = 1
    max_replicas: int = 32
    cold_start_s: float = 60.0
    router: str = "random"
    scrape_interval_s: float = 15.0
    oracle_window_s: float = 60.0
    max_batch: int | None = None
    max_batch_min: int = 16
    max_batch_max: int = 512
    gpu_limit: int | None = None
    seed: int = 0
    #: Seconds of the trace's lead-in served before it starts (see ``FleetConfig.warmup_s``).
    warmup_s: float = 0.0
    #: Per policy, settings that differ from its defaults (``{"hpa": {"target": 8.0}}``).
    settings: Mapping[str, Settings] = field(default_factory=dict)
    #: The lower bound's schedule of the lead-in (``run`` fills it): the fleet that serves it.
    lead_in_schedule: tuple[int, ...] = ()
    #: Declared schedule windows for tailguard, read against ``clock_origin_s`` (the UNIX time
    #: of the trace's start).
    schedules: tuple[ScheduleWindow, ...] = ()
    clock_origin_s: float = 0.0
    #: Times at which the user changes the pod template and every pod rolls in turn
    #: (``FleetConfig.rollouts_at``); every policy's fleet meets them.
    rollouts_at: tuple[float, ...] = ()

    def fleet(self, initial_replicas: int, *, follow_lead_in: bool = True) -> FleetConfig:
        """The fleet every policy runs on; ``follow_lead_in=False`` holds ``initial_replicas``
        through the lead-in too (a fixed fleet)."""
        return FleetConfig(
            lead_in_schedule=self.lead_in_schedule if follow_lead_in else (),
            lead_in_window_s=self.oracle_window_s,
            profile=self.profile,
            cold_start_s=self.cold_start_s,
            router=self.router,
            scrape_interval_s=self.scrape_interval_s,
            initial_replicas=initial_replicas,
            initial_max_batch=self.max_batch,
            gpu_limit=self.gpu_limit,
            seed=self.seed,
            warmup_s=self.warmup_s,
            ttft_buckets_s=with_edge(TTFT_BUCKETS_S, self.slo.ttft_s),
            tpot_buckets_s=with_edge(TPOT_BUCKETS_S, self.slo.tpot_s),
            rollouts_at=self.rollouts_at,
        )

    def policy_config(self) -> PolicyConfig:
        return PolicyConfig(
            min_replicas=self.min_replicas,
            max_replicas=self.max_replicas,
            ttft_slo_s=self.slo.ttft_s,
            tpot_slo_s=self.slo.tpot_s,
            goodput_target=self.slo.goodput,
            max_batch_min=self.max_batch_min,
            max_batch_max=self.max_batch_max,
            startup_s=self.cold_start_s * 1.5,
            # The window the modelled Prometheus's rate() reads over, told to the policy as well.
            rate_window_s=max(120.0, 4 * self.scrape_interval_s),
            burst_window_s=2 * self.scrape_interval_s,
            schedules=self.schedules,
        )


@dataclass(frozen=True)
class FlatFleet:
    """The hindsight flat fleet: the fewest fixed replicas whose run reaches the goodput target
    (``replicas`` is ``None`` when even ``max_replicas`` does not), and every count tried."""

    replicas: int | None
    #: ``(replicas, attainment, GPU-hours)`` of each run of the search, in the order run.
    tried: tuple[tuple[int, float, float], ...]


@dataclass
class ScenarioResult:
    scenario: Scenario
    lower_bound: list[int]
    lower_bound_gpu_hours: float
    runs: list[RunResult] = field(default_factory=list)
    summaries: list[PolicySummary] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    flat: FlatFleet | None = None


def context(scenario: Scenario, bound: Sequence[int], flat: FlatFleet | None = None) -> BuildContext:
    """What the registry builds a policy of this scenario from."""
    slo = SloAndBounds(
        scenario.slo.ttft_s,
        scenario.slo.tpot_s,
        scenario.slo.goodput,
        scenario.min_replicas,
        scenario.max_replicas,
    )
    return BuildContext(
        slo=slo,
        policy_config=scenario.policy_config(),
        bound=list(bound),
        oracle_window_s=scenario.oracle_window_s,
        flat_replicas=flat.replicas if flat is not None and flat.replicas is not None else None,
        profiled_rate=profiled_rate(scenario, bound),
        clock_origin_s=scenario.clock_origin_s,
    )


def profiled_rate(scenario: Scenario, bound: Sequence[int]) -> float | None:
    """Requests per second one replica served in the lower bound's schedule: the 90th percentile
    over its windows (the throughput at the SLO a pre-deployment profile would report)."""
    window = scenario.oracle_window_s
    counts = scenario.trace.arrival_rate(window) * window
    per = [c / (window * n) for c, n in zip(counts, bound, strict=False) if n > 0 and c > 0]
    return float(np.percentile(per, 90)) if per else None


def build(name: str, scenario: Scenario, bound: Sequence[int], flat: FlatFleet | None = None) -> Autoscaler:
    """The policy ``name`` of the registry with the scenario's settings for it."""
    return registry.build(name, context(scenario, bound, flat), scenario.settings.get(name))


def flat_fleet(
    scenario: Scenario, bound: Sequence[int], *, log: Callable[[str], None] | None = None
) -> tuple[FlatFleet, RunResult | None]:
    """Search the fewest fixed replicas that reach the goodput target on the whole trace, each
    count a full run of a fixed fleet (lead-in included). Attainment grows with the count, so a
    bisection between ``min_replicas`` and ``max_replicas`` finds it; the run of the answer is
    returned with it (``None`` when no count within the bounds reaches the target)."""
    runs: dict[int, RunResult] = {}
    tried: list[tuple[int, float, float]] = []

    def attainment(n: int) -> float:
        run = simulate(scenario.trace, Fixed("flat", n), scenario.fleet(n, follow_lead_in=False))
        runs[n] = run
        summary = summarise(run, scenario.slo)
        tried.append((n, summary.attainment, summary.gpu_hours))
        if log is not None:
            log(f"flat fleet {n}: attainment {summary.attainment:.4f}")
        return summary.attainment

    goal = scenario.slo.goodput
    lo, hi = scenario.min_replicas, scenario.max_replicas
    # Start from the lower bound's peak, which usually reaches the target, to narrow the range.
    guess = min(hi, max(lo, max(bound) if bound else lo))
    if attainment(guess) >= goal:
        hi = guess
    elif guess == hi:
        return FlatFleet(None, tuple(tried)), None
    else:
        lo = guess + 1
        if attainment(hi) < goal:
            return FlatFleet(None, tuple(tried)), None
    # Invariant: hi reaches the target; every count below lo was seen to miss it.
    while lo < hi:
        mid = (lo + hi) // 2
        if attainment(mid) >= goal:
            hi = mid
        else:
            lo = mid + 1
    return FlatFleet(hi, tuple(tried)), runs[hi]


@dataclass(frozen=True)
class LeadInFlat:
    """The flat fleet sized by hand from the lead-in alone (no hindsight of the trace): the
    fewest fixed replicas that reach the target on the lead-in, and that fleet's run on the trace.
    What a user who sized the fleet from the hour before would pay, and get."""

    replicas: int | None
    #: That fleet on the trace itself (``None`` when no count within the bounds reaches the target
    #: on the lead-in).
    summary: PolicySummary | None


def lead_in_flat(scenario: Scenario, bound: Sequence[int]) -> LeadInFlat | None:
    """Search the flat fleet on the scenario's lead-in, then run it on the trace (``None``
    without a lead-in)."""
    if scenario.warmup_s <= 0:
        return None
    lead = lead_in_from_zero(scenario)
    if not len(lead):
        return None
    on_lead, _ = flat_fleet(replace(scenario, trace=lead, warmup_s=0.0, lead_in_schedule=()), bound)
    if on_lead.replicas is None:
        return LeadInFlat(None, None)
    n = on_lead.replicas
    run = simulate(scenario.trace, Fixed("flat from the lead-in", n), scenario.fleet(n, follow_lead_in=False))
    return LeadInFlat(n, summarise(run, scenario.slo))


class Progress:
    """A one-line progress bar on stderr (only when it is a terminal, or when forced)."""

    def __init__(self, label: str, *, enabled: bool) -> None:
        self.label = label
        self.enabled = enabled
        self.last = -1

    def __call__(self, fraction: float) -> None:
        if not self.enabled:
            return
        step = int(fraction * 40)
        if step == self.last:
            return
        self.last = step
        bar = "#" * step + "." * (40 - step)
        sys.stderr.write(f"\r{self.label:<12} [{bar}] {fraction * 100:5.1f}%")
        if fraction >= 1.0:
            sys.stderr.write("\n")
        sys.stderr.flush()


def lead_in_from_zero(scenario: Scenario) -> Trace:
    """The scenario's lead-in (``warmup_s`` of it) with its clock starting at 0, as a trace of
    its own."""
    lead = scenario.trace.lead_in(scenario.warmup_s)
    return Trace(lead.name, lead.arrival_s + scenario.warmup_s, lead.input_tokens, lead.output_tokens)


def with_lead_in_schedule(scenario: Scenario) -> Scenario:
    """The scenario with the lower bound's schedule of its lead-in, which serves the lead-in: a
    fleet that follows the lead-in's load, so a long lead-in whose load moves (an hour of a
    diurnal load) leaves no queue a fleet of the start's size would build."""
    if scenario.warmup_s <= 0 or scenario.lead_in_schedule:
        return scenario
    lead = lead_in_from_zero(scenario)
    if len(lead) < 2:
        return scenario
    schedule = lower_bound(
        lead,
        scenario.fleet(scenario.min_replicas),
        scenario.slo,
        window_s=scenario.oracle_window_s,
        min_replicas=scenario.min_replicas,
        max_replicas=scenario.max_replicas,
    )
    return replace(scenario, lead_in_schedule=tuple(schedule))


def run(
    scenario: Scenario,
    policies: Sequence[str] = registry.DEFAULT_POLICIES,
    *,
    progress: bool | None = None,
    log: Callable[[str], None] | None = None,
    with_flat: bool = False,
) -> ScenarioResult:
    """The lower bound, then every policy in ``policies`` on the same trace and fleet.

    With ``with_flat`` (or ``"flat"`` among the policies) the hindsight flat fleet is searched
    first (``result.flat``)."""
    show = sys.stderr.isatty() if progress is None else progress
    for name in policies:
        registry.get(name)
    started = time.perf_counter()
    scenario = with_lead_in_schedule(scenario)
    bound = lower_bound(
        scenario.trace,
        scenario.fleet(scenario.min_replicas),
        scenario.slo,
        window_s=scenario.oracle_window_s,
        min_replicas=scenario.min_replicas,
        max_replicas=scenario.max_replicas,
        lead_in=scenario.trace.lead_in(scenario.warmup_s) if scenario.warmup_s > 0 else None,
        progress=Progress("lower bound", enabled=show),
    )
    window_hours = [
        min(scenario.oracle_window_s, scenario.trace.duration_s - i * scenario.oracle_window_s) / 3600.0
        for i in range(len(bound))
    ]
    bound_hours = sum(n * h for n, h in zip(bound, window_hours, strict=True)) * scenario.profile.gpus
    result = ScenarioResult(scenario, bound, bound_hours)
    result.seconds["lower_bound"] = time.perf_counter() - started
    flat_run: RunResult | None = None
    if "flat" in policies or with_flat:
        started = time.perf_counter()
        result.flat, flat_run = flat_fleet(scenario, bound, log=log)
        result.seconds["flat_search"] = time.perf_counter() - started
    for name in policies:
        if name == "flat" and result.flat is not None and result.flat.replicas is None:
            continue  # no fixed fleet within the bounds reaches the target
        scaler = build(name, scenario, bound, result.flat)
        started = time.perf_counter()
        if name == "flat" and flat_run is not None:
            run_result = flat_run  # the search's own run of that count
        else:
            run_result = simulate(
                scenario.trace, scaler, scenario.fleet(bound[0]), progress=Progress(name, enabled=show)
            )
        result.seconds[name] = time.perf_counter() - started
        result.runs.append(run_result)
        result.summaries.append(summarise(run_result, scenario.slo))
        if log is not None:
            log(f"{name}: {result.seconds[name]:.1f} s")
    return result
