"""A scenario (trace, replica profile, SLO, bounds) run through a list of policies under identical
conditions, plus the lower bound. Used by ``tailguard simulate`` and by the benchmark."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tailguard.policy import PolicyConfig, ScheduleWindow
from tailguard.sim.autoscalers import Dynamo, Hpa, Keda, Kpa, Schedule, Slo, Static, Tailguard, Wva
from tailguard.sim.fleet import Autoscaler, FleetConfig, RunResult, simulate
from tailguard.sim.options import POLICIES as POLICIES
from tailguard.sim.oracle import SloTarget, lower_bound
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
    #: Declared schedule windows for tailguard, read against ``clock_origin_s`` (the UNIX time
    #: of the trace's start).
    schedules: tuple[ScheduleWindow, ...] = ()
    clock_origin_s: float = 0.0

    def fleet(self, initial_replicas: int) -> FleetConfig:
        return FleetConfig(
            profile=self.profile,
            cold_start_s=self.cold_start_s,
            router=self.router,
            scrape_interval_s=self.scrape_interval_s,
            initial_replicas=initial_replicas,
            initial_max_batch=self.max_batch,
            gpu_limit=self.gpu_limit,
            seed=self.seed,
            warmup_s=self.warmup_s,
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
            schedules=self.schedules,
        )


@dataclass
class ScenarioResult:
    scenario: Scenario
    lower_bound: list[int]
    lower_bound_gpu_hours: float
    runs: list[RunResult] = field(default_factory=list)
    summaries: list[PolicySummary] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


def build(name: str, scenario: Scenario, bound: list[int]) -> Autoscaler:
    slo = Slo(
        scenario.slo.ttft_s,
        scenario.slo.tpot_s,
        scenario.slo.goodput,
        scenario.min_replicas,
        scenario.max_replicas,
    )
    if name == "tailguard":
        return Tailguard(scenario.policy_config(), clock_origin_s=scenario.clock_origin_s)
    if name == "hpa":
        return Hpa(slo)
    if name == "keda":
        return Keda(slo)
    if name == "kpa":
        return Kpa(slo)
    if name == "wva":
        return Wva(slo)
    if name == "dynamo":
        return Dynamo(slo)
    if name == "static":
        return Static(max(bound))
    if name == "oracle":
        return Schedule(scenario.oracle_window_s, bound)
    raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")


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


def run(
    scenario: Scenario,
    policies: Sequence[str] = POLICIES,
    *,
    progress: bool | None = None,
    log: Callable[[str], None] | None = None,
) -> ScenarioResult:
    """The lower bound, then every policy in ``policies`` on the same trace and fleet."""
    show = sys.stderr.isatty() if progress is None else progress
    for name in policies:
        if name not in POLICIES:
            raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    started = time.perf_counter()
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
    for name in policies:
        scaler = build(name, scenario, bound)
        started = time.perf_counter()
        run_result = simulate(
            scenario.trace,
            scaler,
            scenario.fleet(bound[0]),
            schedule=scaler if isinstance(scaler, Schedule) else None,
            progress=Progress(name, enabled=show),
        )
        result.seconds[name] = time.perf_counter() - started
        result.runs.append(run_result)
        result.summaries.append(summarise(run_result, scenario.slo))
        if log is not None:
            log(f"{name}: {result.seconds[name]:.1f} s")
    return result
