"""The benchmark's goal verdicts and the evidence printed beside them (``tailguard.sim.bench``)."""

from __future__ import annotations

from dataclasses import replace

from tailguard.sim import synthetic
from tailguard.sim.bench import PROFILE, SLO, by_key, goals
from tailguard.sim.bench.goals import Goal
from tailguard.sim.bench.runs import seeds_under_target
from tailguard.sim.bench.sweep import SweepPoint, pareto, ratios, worst
from tailguard.sim.frontier import Point
from tailguard.sim.profiles import get_profile
from tailguard.sim.report import PolicySummary
from tailguard.sim.runner import FlatFleet, Scenario, ScenarioResult


def _summary(policy: str, attainment: float, gpu_hours: float, reversals: int = 0) -> PolicySummary:
    return PolicySummary(
        policy, 100, 0, attainment, 0.1, 0.5, None, None, gpu_hours, 3.0, 4, 2, reversals, 0, 0.0
    )


def _result(
    *summaries: PolicySummary, bound_gpu_hours: float = 10.0, flat: int | None = None
) -> ScenarioResult:
    scenario = Scenario(synthetic.poisson(1, 10, seed=1), get_profile(PROFILE), SLO)
    fleet = FlatFleet(flat, ((flat, 0.995, 16.0),) if flat is not None else ())
    return ScenarioResult(scenario, [1], bound_gpu_hours, summaries=list(summaries), flat=fleet)


def _named(checks: list[Goal], start: str) -> Goal:
    return next(g for g in checks if g.goal.startswith(start))


def test_the_flat_fleet_goal_counts_only_at_the_target() -> None:
    cheap_miss = _result(_summary("tailguard", 0.95, 11.0), _summary("flat", 0.995, 16.0), flat=8)
    goal = _named(goals(cheap_miss, by_key("step")), "GPU-hours <= 1x the hindsight flat fleet")
    assert not goal.met
    assert goal.measured == "0.688x (11.00 vs 16.00 GPU-h, 8 replicas, under target)"
    cheap_hit = _result(_summary("tailguard", 0.992, 15.0), _summary("flat", 0.995, 16.0), flat=8)
    assert _named(goals(cheap_hit, by_key("step")), "GPU-hours <= 1x").met


def test_slow_loads_ask_for_085_of_the_flat_fleet() -> None:
    result = _result(_summary("tailguard", 0.995, 14.0), _summary("flat", 0.995, 16.0), flat=8)
    goal = _named(goals(result, by_key("diurnal")), "GPU-hours <= 0.85x the hindsight flat fleet")
    assert not goal.met  # 0.875x
    assert goal.measured.startswith("0.875x")


def test_goals_on_a_jump_say_what_the_informed_policy_and_the_flat_fleet_reach() -> None:
    result = _result(_summary("tailguard", 0.95, 11.0), _summary("flat", 0.995, 16.0), flat=8)
    informed = [
        Point("informed, floor 6", _summary("informed-floor6", 0.97, 14.0)),
        Point("informed, floor 8", _summary("informed-floor8", 0.995, 17.0)),
        Point("informed, floor 9", _summary("informed-floor9", 0.999, 18.0)),
    ]
    checks = goals(result, by_key("step"), informed)
    attainment = checks[0]
    assert not attainment.met
    assert attainment.note == (
        "a flat fleet of 8 reaches it at 16.00 GPU-h; "
        "the informed policy reaches it from floor 8 at 17.00 GPU-h, 1.70x the bound"
    )
    assert _named(checks, "GPU-hours <= 1x").note == "the informed policy at the target needs 1.062x"
    assert attainment.line() == f"[MISSED] attainment >= goodput target: 0.9500 vs 0.99 ({attainment.note})"
    # The 1.2x-the-bound goal is asked of diurnal and Poisson only.
    assert not any(g.goal.startswith("GPU-hours <= 1.2x") for g in checks)


def test_the_bound_goal_names_what_the_declared_window_costs_a_policy_that_knows_the_load() -> None:
    result = _result(_summary("tailguard", 0.999, 12.1), _summary("kpa", 0.999, 13.0))
    windowed = Point("informed, 300 s scale-down window", _summary("informed-floor1", 0.9995, 11.9))
    cost = _named(goals(result, by_key("diurnal"), windowed=windowed), "GPU-hours <= 1.2x")
    assert not cost.met
    assert (
        cost.note
        == "held by the declared scale-down window the informed policy needs 1.190x (attainment 0.9995)"
    )


def test_when_no_informed_floor_or_flat_fleet_reaches_the_target_it_is_said() -> None:
    result = _result(_summary("tailguard", 0.9, 12.0), _summary("static", 1.0, 20.0))
    informed = [
        Point("informed, floor 6", _summary("informed-floor6", 0.8, 14.0)),
        Point("informed, floor 9", _summary("informed-floor9", 0.97, 18.0)),
    ]
    attainment = goals(result, by_key("bursty"), informed)[0]
    assert attainment.note == (
        "no fixed fleet up to 32 replicas reaches it; no informed floor reaches it; best 0.9700 at informed, floor 9"
    )


def test_poisson_adds_the_reversal_goal() -> None:
    result = _result(_summary("tailguard", 0.999, 10.0, reversals=1), _summary("kpa", 0.999, 12.0))
    last = goals(result, by_key("poisson"))[-1]
    assert last.goal == "no direction reversal on stationary Poisson"
    assert not last.met
    assert last.line() == "[MISSED] no direction reversal on stationary Poisson: 1"


def _point(policy: str, attainment: float, gpu_hours: float) -> SweepPoint:
    return SweepPoint(policy, f"{policy} {gpu_hours}", {}, _summary(policy, attainment, gpu_hours))


def test_the_sweep_compares_at_the_attainment_each_peer_setting_reaches() -> None:
    points = [
        _point("tailguard", 0.95, 8.0),
        _point("tailguard", 0.99, 10.0),
        _point("tailguard", 0.995, 12.0),
        _point("hpa", 0.97, 20.0),
        _point("hpa", 0.96, 25.0),  # dominated: off the frontier
        _point("hpa", 0.999, 40.0),
    ]
    assert [p.summary.gpu_hours for p in pareto([p for p in points if p.policy == "hpa"])] == [20.0, 40.0]
    hpa = ratios(points)["hpa"]
    assert [r.ratio for r in hpa] == [10.0 / 20.0, None]  # tailguard never reaches 0.999
    assert worst(hpa).ratio is None
    # Capped at a 0.99 target, hpa's 0.999 is matched by tailguard's 0.99 point.
    assert [r.ratio for r in ratios(points, 0.99)["hpa"]] == [10.0 / 20.0, 10.0 / 40.0]


def test_a_sweep_runs_each_policy_over_its_grid() -> None:
    from tailguard.sim.bench.sweep import sweep
    from tailguard.sim.oracle import SloTarget
    from tailguard.sim.policies import REGISTRY

    trace = synthetic.poisson(20.0, 180.0, seed=3, lead_s=60.0)
    scenario = Scenario(trace, get_profile("h100-llama3-8b"), SloTarget(0.5, None, 0.99), warmup_s=60.0)
    points = sweep(scenario, [2, 2, 2], None, ["tailguard", "kpa", "hpa"])
    # hpa's grid leaves out its default (target 2), which the sweep adds; kpa's holds it.
    grids = len(REGISTRY["tailguard"].grid) + len(REGISTRY["kpa"].grid) + len(REGISTRY["hpa"].grid) + 1
    assert len(points) == grids
    assert "hpa (defaults)" in {p.label for p in points}
    assert {p.label for p in points if p.policy == "kpa"} >= {"kpa (defaults)", "kpa target=50"}
    assert any("goodput_target=0.9" in p.label for p in points)
    assert all(0.0 <= p.summary.attainment <= 1.0 and p.summary.gpu_hours > 0 for p in points)


def test_the_spread_names_the_seeds_under_the_target_by_the_exact_attainment() -> None:
    def at(seed: int, attainment: float) -> ScenarioResult:
        result = _result(_summary("tailguard", attainment, 7.0), _summary("flat", 0.995, 8.0))
        result.scenario = replace(result.scenario, seed=seed)
        return result

    # 0.98997 prints as 0.9900 in a four-digit table and is still one request short of 0.99.
    results = [at(2, 0.9947), at(3, 0.98997), at(4, 0.9780)]
    assert seeds_under_target("tailguard", results) == [3, 4]
    assert seeds_under_target("flat", results) == []
