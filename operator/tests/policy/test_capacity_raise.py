"""A capacity raised above the model's figure lifts it no further than what a replica served."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tailguard.policy import PolicyState, decide

from .helpers import CONFIG, healthy, warmed

#: Two replicas that have seen light and heavy load: the step-time curve is learned.
WARM = warmed()


def _capacity(state: PolicyState, rate: float) -> tuple[float, PolicyState]:
    """The capacity per replica one healthy window at ``rate`` on two replicas is sized with."""
    assert state.last_valid_at is not None
    now = state.last_valid_at + CONFIG.interval_s
    decision, after = decide(CONFIG, state, healthy(rate, 2, now=now), now)
    assert decision.capacity_per_replica is not None, decision.reason
    return decision.capacity_per_replica, after


MODELLED, _ = _capacity(replace(WARM, capacity_scale=1.0, capacity_shown=None), 20.0)


def test_a_load_met_with_margin_beyond_the_model_raises_it_to_what_was_served() -> None:
    # 50 req/s per replica at a p99 TTFT of 60 ms, above the model's figure
    capacity, after = _capacity(replace(WARM, capacity_scale=1.0, capacity_shown=None), 100.0)
    assert after.capacity_scale > 1.0
    assert after.capacity_shown == pytest.approx(50.0)
    assert capacity == pytest.approx(50.0)


@pytest.mark.parametrize(
    ("shown_share", "expected_share"),
    [
        # the model has learned past what was served: the raise is spent
        (0.9, 1.0),
        # between the model's figure and the raise: what was served
        (1.2, 1.2),
        # beyond the raise: the raise
        (2.0, 1.5),
    ],
)
def test_a_raise_lifts_the_model_no_further_than_the_rate_served(
    shown_share: float, expected_share: float
) -> None:
    state = replace(WARM, capacity_scale=1.5, capacity_shown=shown_share * MODELLED)
    capacity, after = _capacity(state, 20.0)
    assert capacity == pytest.approx(expected_share * MODELLED, rel=1e-6)
    if expected_share == 1.0:
        assert after.capacity_scale == 1.0
        assert after.capacity_shown is None, "nothing left to bound"
    else:
        assert after.capacity_shown == pytest.approx(shown_share * MODELLED)


def test_a_raise_kept_without_its_served_rate_adopts_what_it_gives_now() -> None:
    # an annotation written before the served rate was kept
    written = json.loads(replace(WARM, capacity_scale=1.5, capacity_shown=99.0).to_json())
    del written["capacity_shown"]
    state = PolicyState.from_json(json.dumps(written))
    assert state.capacity_shown is None
    assert state.capacity_scale == 1.5
    capacity, after = _capacity(state, 20.0)
    assert capacity == pytest.approx(1.5 * MODELLED, rel=1e-6)
    assert after.capacity_shown == pytest.approx(capacity)


def test_the_served_rate_survives_the_state_annotation() -> None:
    state = replace(WARM, capacity_scale=1.3, capacity_shown=41.5)
    assert PolicyState.from_json(state.to_json()).capacity_shown == 41.5
