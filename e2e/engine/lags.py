"""What per-request delivery lags can do to a client's latency figures, knowing only their total.

The client and vLLM time each request over slightly different instants: vLLM starts after the
client sent and stops before the client receives. Each request's lag is therefore at least zero,
and the run's total is exact (client sums less vLLM's ``_sum``), but how it is spread is unknown: a
few requests can carry most of it. These bounds hold however it is spread.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: Bisection steps: far below a microsecond over any latency range the tier sees.
_BISECTIONS = 60


@dataclass(frozen=True)
class LagBudget:
    """How far, summed over a run, lags can move vLLM's values from the client's.

    ``down_s`` can make vLLM's values lower than the client's, ``up_s`` higher.
    """

    down_s: float
    up_s: float


def most_moved_across(distances: Sequence[float], budget_s: float) -> int:
    """How many values lags summing to ``budget_s`` can carry across an edge ``distances`` away.

    The most that can cross are the nearest ones, taken until their distances use up the budget.
    """
    moved = 0
    for distance in sorted(distances):
        if distance > budget_s:
            break
        budget_s -= distance
        moved += 1
    return moved


def count_within(values: Sequence[float], edge: float, budget: LagBudget) -> tuple[int, int]:
    """The fewest and the most of vLLM's values at or below ``edge``, given the client's ``values``."""
    below = [v for v in values if v <= edge]
    above = [v - edge for v in values if v > edge]
    fewest = len(below) - most_moved_across([edge - v for v in below], budget.up_s)
    most = len(below) + most_moved_across(above, budget.down_s)
    return fewest, most


def quantile_range(values: Sequence[float], q: float, budget: LagBudget) -> tuple[float, float]:
    """The lowest and the highest vLLM's nearest-rank ``q``-quantile can be, given the client's ``values``.

    The rank-r value is at most y exactly when at least r values are at or below y. Both bounds of
    that count rise with y, so each end is found by bisection, and rounded outwards.
    """
    if not values:
        raise ValueError("no values")
    rank = max(1, math.ceil(q * len(values)))
    top = max(values) + budget.up_s + 1.0

    def threshold(reaches: Callable[[float], bool]) -> tuple[float, float]:
        """(largest y seen that does not reach the rank, smallest y seen that does)."""
        lo, hi = min(0.0, min(values) - budget.down_s) - 1.0, top
        for _ in range(_BISECTIONS):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if reaches(mid) else (mid, hi)
        return lo, hi

    lowest, _ = threshold(lambda y: count_within(values, y, budget)[1] >= rank)
    _, highest = threshold(lambda y: count_within(values, y, budget)[0] >= rank)
    return lowest, highest
