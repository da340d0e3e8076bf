"""Invariants of ``decide`` over arbitrary inputs (hypothesis)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policy.helpers import CONFIG
from tailguard.policy import Observation, PolicyConfig, PolicyState, decide

NOW = 10_000.0
metric = st.one_of(st.none(), st.floats(min_value=0.0, max_value=1e4), st.just(math.nan), st.just(math.inf))
positive = st.floats(min_value=0.0, max_value=1e4, allow_nan=False, allow_infinity=False)


@st.composite
def configs(draw: Any) -> PolicyConfig:
    low = draw(st.integers(1, 8))
    high = draw(st.integers(low, 40))
    tpot = draw(st.one_of(st.none(), st.floats(0.01, 0.2)))
    return replace(
        CONFIG,
        min_replicas=low,
        max_replicas=high,
        tpot_slo_s=tpot,
        goodput_target=draw(st.sampled_from([0.9, 0.95, 0.99, 0.999])),
        budget_headroom=draw(st.booleans()),
        scale_down_limit_fraction=draw(st.sampled_from([0.25, 0.5, 1.0])),
    )


@st.composite
def observations(draw: Any, *, valid: bool = False) -> Observation:
    ready = draw(st.integers(0, 40))
    values: dict[str, Any] = {
        "sample_time": NOW - draw(st.floats(0.0, 30.0)),
        "p99_ttft_s": draw(st.floats(0.001, 100.0)),
        "p99_tpot_s": draw(st.floats(0.001, 10.0)),
        "itl_mean_s": draw(st.one_of(st.none(), st.floats(0.001, 1.0))),
        "goodput": draw(st.one_of(st.none(), st.floats(0.0, 1.0))),
        "request_rate": draw(positive),
        "generation_token_rate": draw(st.one_of(st.none(), positive)),
        "running": draw(positive),
        "waiting": draw(positive),
        "kv_cache_usage": draw(st.one_of(st.none(), st.floats(0.0, 1.0))),
        "preemption_rate": draw(st.one_of(st.none(), positive)),
        "ready_replicas": ready,
        "reporting_pods": draw(st.one_of(st.none(), st.integers(0, ready))),
        "starting_replicas": draw(st.integers(0, 10)),
        "pending_replicas": draw(st.integers(0, 5)),
        "desired_replicas": draw(st.integers(0, 50)),
        "max_batch": draw(st.integers(8, 1024)),
        "rollout_in_progress": draw(st.booleans()),
    }
    if not valid:
        for name in (
            "p99_ttft_s",
            "p99_tpot_s",
            "request_rate",
            "running",
            "waiting",
            "generation_token_rate",
        ):
            if draw(st.booleans()):
                values[name] = draw(metric)
    return Observation(**values)


@st.composite
def states(draw: Any) -> PolicyState:
    """A state reached by a few decisions on random valid observations."""
    config = draw(configs())
    state = PolicyState()
    for i in range(draw(st.integers(0, 4))):
        _, state = decide(config, state, draw(observations(valid=True)), NOW - 300 + 15 * i)
    return state


@settings(max_examples=150, deadline=None)
@given(configs(), states(), observations())
def test_always_within_bounds(config: PolicyConfig, state: PolicyState, obs: Observation) -> None:
    decision, _ = decide(config, state, obs, NOW)
    assert config.min_replicas <= decision.replicas <= config.max_replicas
    assert decision.max_batch >= 1


@settings(max_examples=150, deadline=None)
@given(
    configs(),
    states(),
    observations(valid=True),
    st.sampled_from(["request_rate", "running", "waiting", "sample_time", "stale"]),
    st.sampled_from([None, math.nan, math.inf, -1.0]),
)
def test_missing_stale_or_nan_data_changes_nothing(
    config: PolicyConfig, state: PolicyState, obs: Observation, field: str, bad: float | None
) -> None:
    broken = replace(obs, sample_time=NOW - 3600) if field == "stale" else replace(obs, **{field: bad})
    if field == "sample_time" and bad is not None and math.isfinite(bad):
        broken = replace(obs, sample_time=NOW - 3600)
    decision, after = decide(config, state, broken, NOW)
    held = min(config.max_replicas, max(config.min_replicas, obs.desired_replicas))
    assert not decision.valid
    assert decision.replicas == held
    assert decision.max_batch == obs.max_batch
    assert after == state


@settings(max_examples=150, deadline=None)
@given(configs(), states(), observations(valid=True))
def test_never_scales_down_while_the_slo_is_broken(
    config: PolicyConfig, state: PolicyState, obs: Observation
) -> None:
    broken = replace(obs, p99_ttft_s=config.ttft_slo_s * 3, request_rate=max(1.0, obs.request_rate or 0.0))
    decision, _ = decide(config, state, broken, NOW)
    held = min(config.max_replicas, max(config.min_replicas, obs.desired_replicas))
    assert decision.replicas >= held


@settings(max_examples=100, deadline=None)
@given(configs(), states(), observations())
def test_a_restart_from_the_annotation_decides_as_the_running_operator_would(
    config: PolicyConfig, state: PolicyState, obs: Observation
) -> None:
    """Two decisions in a row, once with the state kept in memory and once with it written to its
    annotation and read back before each: what a restarted operator decides is what it would have."""
    kept_first, kept = decide(config, state, obs, NOW)
    kept_second, _ = decide(config, kept, obs, NOW + config.interval_s)
    read_first, read = decide(config, PolicyState.from_json(state.to_json()), obs, NOW)
    read_second, _ = decide(config, PolicyState.from_json(read.to_json()), obs, NOW + config.interval_s)
    assert (read_first, read_second) == (kept_first, kept_second)


@settings(max_examples=100, deadline=None)
@given(configs(), states(), observations(valid=True))
def test_state_survives_its_annotation(config: PolicyConfig, state: PolicyState, obs: Observation) -> None:
    _, after = decide(config, state, obs, NOW)
    assert PolicyState.from_json(after.to_json()) == after


@given(configs(), states(), observations(), st.floats(0.2, 1.0))
def test_the_burst_correction_stays_within_its_bounds_and_falls_one_cut_at_a_time(
    config: PolicyConfig, state: PolicyState, obs: Observation, scale: float
) -> None:
    _, new = decide(config, replace(state, burst_scale=scale), obs, NOW)
    assert 0.2 <= new.burst_scale <= 1.0
    assert new.burst_scale >= 0.85 * scale - 1e-12
