"""The state stored in the annotation: round trip, tolerance, and a cautious restart."""

from __future__ import annotations

import json

import pytest

from policy.helpers import CONFIG, Run, healthy
from tailguard.policy import Limit, PolicyState, decide
from tailguard.policy.budget import BudgetMemory


def test_round_trip() -> None:
    run = Run()
    for _ in range(10):
        run.step(healthy(60, run.replicas))
    assert PolicyState.from_json(run.state.to_json()) == run.state


@pytest.mark.parametrize(
    "text",
    ["", "not json", "[1, 2]", '{"version": "x", "fit": [1, 2]}', '{"recommendations": "soon"}', "null"],
    ids=["empty", "garbage", "a list", "wrong types", "wrong shape", "null"],
)
def test_unreadable_state_is_a_fresh_start(text: str) -> None:
    assert PolicyState.from_json(text) == PolicyState()


def test_unknown_keys_are_ignored_and_missing_ones_defaulted() -> None:
    state = PolicyState.from_json('{"capacity_scale": 0.8, "from_the_future": [1, 2, 3]}')
    assert state.capacity_scale == 0.8
    assert state.recommendations == ()


def test_a_restart_without_state_does_not_scale_down_at_once() -> None:
    # Light load on 6 replicas: a policy with history would shrink; a fresh one waits a window.
    decision, _ = decide(CONFIG, PolicyState(), healthy(20, 6), 1000.0)
    assert decision.replicas == 6
    assert Limit.CAUTIOUS_START.value in decision.limits


def test_state_stays_small() -> None:
    run = Run()
    for i in range(200):
        run.step(healthy(40 + (i % 7) * 10, run.replicas))
    # About 2.75 kB, half of it the error budget's three histograms; far below an annotation's limit.
    assert len(run.state.to_json()) < 2800


def test_a_jump_histogram_written_before_it_reached_78x_is_kept() -> None:
    """An annotation from before the histogram grew from 32 buckets to 48 keeps its history: the
    same buckets, none above them."""
    old = [0.0] * 32
    old[0], old[5], old[31] = 900.0, 80.0, 20.0
    state = PolicyState.from_json(json.dumps({"budget": {"jumps": old, "gain": 0.5}}))
    assert len(state.budget.jumps) == 48
    assert state.budget.jumps[:32] == tuple(old)
    assert state.budget.jumps[32:] == (0.0,) * 16
    assert state.budget.gain == 0.5
    # A histogram of neither length is no history.
    assert PolicyState.from_json(json.dumps({"budget": {"jumps": [1.0] * 40}})).budget.jumps == ()


def test_what_the_miss_curve_read_survives_a_restart_and_a_torn_record_starts_over() -> None:
    memory = BudgetMemory(curve_requests=4000.0, curve_missed=80.0, curve_expected=20.0)
    kept = PolicyState.from_json(PolicyState(budget=memory).to_json()).budget
    assert (kept.curve_requests, kept.curve_missed, kept.curve_expected) == (4000.0, 80.0, 20.0)
    torn = {"budget": {"curve_requests": 10.0, "curve_missed": 80.0, "curve_expected": 20.0}}
    reset = PolicyState.from_json(json.dumps(torn)).budget
    assert (reset.curve_requests, reset.curve_missed, reset.curve_expected) == (0.0, 0.0, 0.0)
