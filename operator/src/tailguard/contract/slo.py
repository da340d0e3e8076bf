"""From latency histograms to the SLO figures tailguard decides on: p99, the fraction within each
SLO and goodput. One implementation for the Prometheus reader and the simulator's Prometheus."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tailguard.contract.histogram import Buckets, cumulative, fraction_of, quantile_of


@dataclass(frozen=True)
class SloFigures:
    """``None`` where not measured (no histogram, no observation, or an infinite answer)."""

    p99_ttft_s: float | None = None
    p99_tpot_s: float | None = None
    ttft_within_slo: float | None = None
    tpot_within_slo: float | None = None
    goodput: float | None = None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def joint_goodput(
    ttft_within: float | None, tpot_within: float | None, *, tpot_declared: bool
) -> float | None:
    """Fraction of requests meeting every declared SLO.

    With one SLO it is that SLO's fraction. With TTFT and TPOT, separate histograms cannot give the
    joint fraction; ``P(a) + P(b) - 1`` is its lower bound, and tailguard is judged against that
    bound so that it errs on the side of the SLO.
    """
    if ttft_within is None:
        return None
    if not tpot_declared:
        return ttft_within
    if tpot_within is None:
        return None
    return max(0.0, ttft_within + tpot_within - 1.0)


def slo_figures(
    ttft: Buckets | None, tpot: Buckets | None, *, ttft_slo_s: float, tpot_slo_s: float | None
) -> SloFigures:
    """The figures of a TTFT and a TPOT histogram (cumulative buckets with ``+Inf``, or ``None``)
    against the SLOs.

    p99 is interpolated inside a bucket as ``histogram_quantile`` does; the fraction within an SLO
    is exact when the SLO is a bucket edge and linearly interpolated between edges otherwise.
    """
    # Each histogram is sorted and repaired once, for its quantile and its fraction both.
    ttft_ordered = cumulative(ttft) if ttft else None
    tpot_ordered = cumulative(tpot) if tpot else None
    ttft_within = _finite(fraction_of(ttft_slo_s, ttft_ordered)) if ttft_ordered else None
    tpot_within = _finite(fraction_of(tpot_slo_s, tpot_ordered)) if tpot_ordered and tpot_slo_s else None
    return SloFigures(
        p99_ttft_s=_finite(quantile_of(0.99, ttft_ordered)) if ttft_ordered else None,
        p99_tpot_s=_finite(quantile_of(0.99, tpot_ordered)) if tpot_ordered else None,
        ttft_within_slo=ttft_within,
        tpot_within_slo=tpot_within,
        goodput=joint_goodput(ttft_within, tpot_within, tpot_declared=tpot_slo_s is not None),
    )
