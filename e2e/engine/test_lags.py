"""The lag bounds against brute force: any spread of the total, at least zero per request, stays inside."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.lags import LagBudget, count_within, most_moved_across, quantile_range
from engine.load import quantile


@pytest.mark.parametrize(
    ("distances", "budget_s", "moved"),
    [
        ([], 1.0, 0),
        ([0.125, 0.25, 0.375], 0.0, 0),
        ([0.375, 0.125, 0.25], 0.375, 2),  # the nearest first: 0.125 + 0.25
        ([0.375, 0.125, 0.25], 0.74, 2),
        ([0.375, 0.125, 0.25], 0.75, 3),
        ([0.0, 0.0, 5.0], 0.0, 2),  # at the edge already: no lag needed
    ],
)
def test_most_moved_across_takes_the_nearest_until_the_budget_runs_out(
    distances: list[float], budget_s: float, moved: int
) -> None:
    assert most_moved_across(distances, budget_s) == moved


def test_count_within_a_one_sided_budget() -> None:
    values = [0.125, 0.25, 0.4375, 0.5625, 0.625, 0.875]
    # 0.5625 and 0.625 are 1/16 and 1/8 above: 3/16 of lag carries both to 0.5, none can go up.
    assert count_within(values, 0.5, LagBudget(down_s=0.1875, up_s=0.0)) == (3, 5)
    assert count_within(values, 0.5, LagBudget(down_s=0.0, up_s=0.0625)) == (2, 3)


def test_quantile_range_is_the_clients_value_without_lag() -> None:
    values = sorted([0.1 * i for i in range(1, 101)])
    lowest, highest = quantile_range(values, 0.99, LagBudget(0.0, 0.0))
    assert lowest == pytest.approx(quantile(values, 0.99))
    assert highest == pytest.approx(quantile(values, 0.99))
    assert lowest <= quantile(values, 0.99) <= highest


def test_one_large_lag_moves_the_p99_where_a_mean_allowance_would_not() -> None:
    # 100 requests, the top two lagging by a second each: the mean lag is 0.02 s.
    client = sorted([0.2] * 98 + [1.5, 1.5])
    lowest, _ = quantile_range(client, 0.99, LagBudget(down_s=2.0, up_s=0.0))
    assert lowest <= 0.5 < quantile(client, 0.99) - 3 * 0.02


@settings(max_examples=300, deadline=None)
@given(
    engine=st.lists(st.floats(0.0, 5.0), min_size=1, max_size=40),
    lag_weights=st.lists(st.integers(0, 100), min_size=40, max_size=40),
    total_lag=st.floats(0.0, 3.0),
    edge=st.floats(0.0, 5.0),
    q=st.sampled_from([0.5, 0.9, 0.99]),
)
def test_bounds_hold_for_any_spread_of_the_total(
    engine: list[float], lag_weights: list[int], total_lag: float, edge: float, q: float
) -> None:
    weights = lag_weights[: len(engine)]
    scale = total_lag / sum(weights) if sum(weights) > 0 else 0.0
    lags = [w * scale for w in weights]
    client = sorted(e + lag for e, lag in zip(engine, lags, strict=True))
    # vLLM is lower than the client by the lags; the budget carries a hair of float slack.
    budget = LagBudget(down_s=sum(lags) + 1e-9, up_s=0.0)

    fewest, most = count_within(client, edge, budget)
    truth = sum(1 for e in engine if e <= edge)
    assert fewest <= truth <= most

    lowest, highest = quantile_range(client, q, budget)
    true_q = quantile(sorted(engine), q)
    assert lowest <= true_q <= highest
    assert math.isfinite(lowest)
    assert highest <= quantile(client, q) + 1e-9
