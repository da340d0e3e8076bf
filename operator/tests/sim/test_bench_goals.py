"""The benchmark's goal verdicts and the evidence printed beside them (``tailguard.sim.bench``)."""

from __future__ import annotations

from tailguard.sim import synthetic
from tailguard.sim.bench import PROFILE, SLO, goals
from tailguard.sim.frontier import Point
from tailguard.sim.profiles import get_profile
from tailguard.sim.report import PolicySummary
from tailguard.sim.runner import Scenario, ScenarioResult


def _summary(policy: str, attainment: float, gpu_hours: float, reversals: int = 0) -> PolicySummary:
    return PolicySummary(
        policy, 100, 0, attainment, 0.1, 0.5, None, None, gpu_hours, 3.0, 4, 2, reversals, 0, 0.0
    )


def _result(*summaries: PolicySummary, bound_gpu_hours: float = 10.0) -> ScenarioResult:
    scenario = Scenario(synthetic.poisson(1, 10, seed=1), get_profile(PROFILE), SLO)
    return ScenarioResult(scenario, [1], bound_gpu_hours, summaries=list(summaries))


def test_the_saving_goal_names_what_it_would_take_against_the_lower_bound() -> None:
    result = _result(
        _summary("tailguard", 0.999, 11.0), _summary("kpa", 0.999, 12.0), _summary("static", 1.0, 16.0)
    )
    saving = goals(result, "diurnal")[2]
    assert not saving.met
    assert saving.measured == "8.3% fewer than kpa (12.00 GPU-h)"
    assert saving.note == "25% fewer is 9.00 GPU-h, 0.90x the lower bound"


def test_goals_on_a_jump_say_what_the_informed_policy_reaches_and_at_what_cost() -> None:
    result = _result(_summary("tailguard", 0.95, 11.0), _summary("static", 1.0, 20.0))
    informed = [
        Point("informed, floor 6", _summary("informed-floor6", 0.97, 14.0)),
        Point("informed, floor 8", _summary("informed-floor8", 0.995, 17.0)),
        Point("informed, floor 9", _summary("informed-floor9", 0.999, 18.0)),
        Point("static", _summary("static", 1.0, 20.0)),
    ]
    attainment, cost, saving = goals(result, "step", informed)
    assert not attainment.met
    assert attainment.note == "the informed policy reaches it from floor 8 at 17.00 GPU-h, 1.70x the bound"
    assert cost.met  # 1.1x: cheap by missing the target
    assert cost.note == "at the target the informed policy needs 1.700x"
    assert saving.note.endswith("the informed policy at the target saves 15.0%")
    assert attainment.line() == f"[MISSED] attainment >= goodput target: 0.9500 vs 0.99 ({attainment.note})"


def test_the_cost_goal_names_what_the_declared_window_costs_a_policy_that_knows_the_load() -> None:
    result = _result(_summary("tailguard", 0.999, 12.1), _summary("kpa", 0.999, 13.0))
    windowed = Point("informed, 300 s scale-down window", _summary("informed-floor1", 0.9995, 11.9))
    cost = goals(result, "diurnal", windowed=windowed)[1]
    assert not cost.met
    assert (
        cost.note
        == "held by the declared scale-down window the informed policy needs 1.190x (attainment 0.9995)"
    )


def test_when_no_informed_floor_reaches_the_target_the_best_one_is_named() -> None:
    result = _result(_summary("tailguard", 0.9, 12.0), _summary("static", 1.0, 20.0))
    informed = [
        Point("informed, floor 6", _summary("informed-floor6", 0.8, 14.0)),
        Point("informed, floor 9", _summary("informed-floor9", 0.97, 18.0)),
    ]
    attainment = goals(result, "bursty", informed)[0]
    assert attainment.note == "no informed floor reaches it; best 0.9700 at informed, floor 9"


def test_poisson_adds_the_reversal_goal() -> None:
    result = _result(_summary("tailguard", 0.999, 10.0, reversals=1), _summary("kpa", 0.999, 12.0))
    last = goals(result, "poisson")[-1]
    assert last.goal == "no direction reversal on stationary Poisson"
    assert not last.met
    assert last.line() == "[MISSED] no direction reversal on stationary Poisson: 1"
