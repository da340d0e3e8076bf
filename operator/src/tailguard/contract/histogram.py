"""Prometheus histogram math on cumulative buckets, as ``histogram_quantile`` computes it.

A histogram is a sequence of ``(upper_bound, cumulative_count)`` pairs sorted by bound, the last
bound being ``+Inf``. Counts may be rates; only their ratios matter.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from operator import itemgetter

Buckets = Sequence[tuple[float, float]]
#: Buckets as :func:`cumulative` returns them: sorted by bound, ending at ``+Inf``, never decreasing.
Cumulative = list[tuple[float, float]]

_BOUND = itemgetter(0)


def cumulative(buckets: Buckets) -> Cumulative:
    """``buckets`` sorted by bound, with counts repaired to never decrease; raises ``ValueError``
    without a ``+Inf`` bucket. Done once per histogram, it serves any number of quantiles and
    fractions (``quantile_of``, ``fraction_of``)."""
    ordered = sorted(buckets, key=_BOUND)
    if not ordered or not math.isinf(ordered[-1][0]):
        raise ValueError("a histogram needs a +Inf bucket")
    # Prometheus repairs small non-monotonic counts (from scrapes racing increments) the same way.
    repaired: Cumulative = []
    running = 0.0
    for bound, count in ordered:
        if count > running:  # max(running, count), NaN included, without the call
            running = count
        repaired.append((bound, running))
    return repaired


def histogram_quantile(q: float, buckets: Buckets) -> float:
    """The ``q``-quantile by linear interpolation inside the bucket that holds it.

    Matches PromQL: NaN with no observations; the lowest bucket's lower edge is 0 when its upper
    bound is positive; a quantile in the ``+Inf`` bucket returns the highest finite bound.
    """
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    return quantile_of(q, cumulative(buckets))


def quantile_of(q: float, ordered: Cumulative) -> float:
    """:func:`histogram_quantile` of a histogram already through :func:`cumulative`, for ``q`` in
    [0, 1]."""
    total = ordered[-1][1]
    if total <= 0 or math.isnan(total):
        return math.nan
    rank = q * total
    index = next(i for i, (_, count) in enumerate(ordered) if count >= rank)
    if index == len(ordered) - 1:
        return ordered[-2][0] if len(ordered) > 1 else math.nan
    upper, count = ordered[index]
    if index == 0:
        lower, below = (0.0 if upper > 0 else upper), 0.0
        if upper <= 0:
            return upper
    else:
        lower, below = ordered[index - 1]
    in_bucket = count - below
    if in_bucket <= 0:
        return upper
    return lower + (upper - lower) * (rank - below) / in_bucket


def fraction_at_or_below(threshold: float, buckets: Buckets) -> float:
    """The fraction of observations at or below ``threshold``.

    Exact when ``threshold`` is a bucket edge; between two edges the count is interpolated
    linearly, the same assumption ``histogram_quantile`` makes, so the two agree. NaN with no
    observations. A threshold above the highest finite edge counts everything below that edge
    plus nothing of the ``+Inf`` bucket (whose spread is unknown): a pessimistic answer.
    """
    return fraction_of(threshold, cumulative(buckets))


def fraction_of(threshold: float, ordered: Cumulative) -> float:
    """:func:`fraction_at_or_below` of a histogram already through :func:`cumulative`."""
    total = ordered[-1][1]
    if total <= 0 or math.isnan(total):
        return math.nan
    lower, below = 0.0, 0.0
    for upper, count in ordered:
        if math.isinf(upper):
            return below / total
        if threshold <= upper:
            if threshold <= lower:
                return below / total
            share = (threshold - lower) / (upper - lower) if upper > lower else 1.0
            return (below + share * (count - below)) / total
        lower, below = upper, count
    return below / total
