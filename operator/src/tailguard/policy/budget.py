"""The error budget sets the headroom: how much more than today's load the fleet holds.

``1 − goodputTarget`` is the share of requests allowed to miss the SLO. A replica asked for now
serves only after the start-up horizon, so what the fleet must hold is the load it may meet
before help could arrive. Three pieces, all pure:

* **What the load did.** Every decision records the load; once a sample is one horizon old, the
  ratio of the largest load within the horizon after it to the load at it (a *jump*) goes into a
  histogram on a log scale, weighted by the requests that horizon carried (a burst's requests
  count more than a quiet minute's, as they do in goodput). Weights fade with a half-life of
  ``HISTORY_HALF_LIFE_S``, so the service learns its own recent pattern, and the histogram is a
  fixed 48 numbers whatever the history's length.
* **Given the trend.** The jumps that loads met while the trend confirmed a fall go into a third
  histogram too. A falling load holds from it once it carries enough requests: half of a day is
  its evening, whose load rarely rises within a start-up, and holding the morning's climbs
  through it kept replicas for a rise that never came. A calm between bursts falls too, and
  meets the next burst: its own history says so.
* **Which quantile to hold.** With a budget ``b`` the fleet may leave about ``b`` of the requests
  unserved on time, so it holds the jump not exceeded by ``1 − b·gain`` of the requests, read
  within its bucket (the bucket's weight spread over its log-width) rather than rounded up to the
  bucket's top. A lower target gives a larger budget, a lower quantile and never a larger hold.
* **How the budget is spent (the slow outer loop).** Attainment is integrated over a short and a
  long window. The burn rate is the miss share over the budget (1: the budget is spent exactly
  as fast as it accrues). While both windows burn faster than 1, ``gain`` falls (a higher quantile,
  more headroom); while the short window burns below half, it rises (less headroom). ``gain`` stays
  within ``GAIN_MIN``–``GAIN_MAX`` and the short window alone lets it recover, so it can never wind
  up beyond recall.
* **Beyond the quantile's top.** Once the quantile holds at its floor (``GAIN_MAX``) and the
  budget still lasts, the gain goes on rising up to the ceiling its caller gives, and what it
  relaxes is the planned utilization (:func:`utilization_relief`): the share of the learned
  capacity the load now is sized to use. A stationary load that meets its target with room then
  grows no replica for the fixed margin, and the first burn takes the margin back first. The
  scale-down band stays below the target utilization (``need._fits_fewer``); a fleet that grew to
  that replica before the relief was earned sheds it only once the budget has lasted with room
  over the long window as well as the short one, and then keeps the smaller fleet against chance
  (``need._kept_shed``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tailguard.policy.types import PolicyConfig

#: Buckets of the jump histogram: bucket i holds ratios in [R^i, R^(i+1)); the first also holds
#: falls (ratio < 1), the last everything above R^(BUCKETS − 1) (about 78× with these figures:
#: code completion's bursts run sixty times its calm).
BUCKETS = 48
RATIO_STEP = 1.095
#: Buckets of the peak histogram: absolute loads on a log scale from ``PEAK_FLOOR`` req/s up.
PEAK_BUCKETS = 96
PEAK_STEP = 1.12
PEAK_FLOOR = 0.05
#: Poisson spreads of a count read as noise in the largest load of a horizon (``record_load``).
NOISE_SPREADS = 2.0
#: Old jumps fade with this half-life: the history a service has seen lately counts most.
HISTORY_HALF_LIFE_S = 6 * 3600.0
#: Attainment windows (time constants of the decayed sums), in seconds.
SHORT_WINDOW_S = 300.0
LONG_WINDOW_S = 3600.0
#: Bounds of the budget gain, and how fast it moves (e-folds per hour at a full burn signal).
#: Below ``GAIN_QUANTILE_MIN`` the quantile is at its highest and what is held grows instead, by
#: the fourth root of how far below (at most 2× at ``GAIN_MIN``): the history under-reads what the
#: SLO needs (bursts shorter than the rate window, a capacity read too high), and the budget says so.
#: The gain rises on slack alone, and slack in a calm that never reaches the hold says nothing of
#: what an unheld burst costs: at ``GAIN_MAX`` the quantile stays at ``1 − 2·budget`` or above (p98
#: at a 0.99 target), so bursts rarer than the loop relaxes are not relaxed out of the hold.
GAIN_MIN, GAIN_QUANTILE_MIN, GAIN_MAX = 1.0 / 64.0, 0.25, 2.0
GAIN_RATE_PER_H = 1.5
#: Requests (weight) a histogram needs before its quantile is trusted.
MIN_WEIGHT = 200.0
#: The share of the history's weight the falls must carry before a falling load holds from them.
FALLING_SHARE_MIN = 0.1
#: The share of requests a p99 SLO lets miss, which is also the budget of a 99% target: the
#: breach test judges a window's misses against it whatever the target, and a larger budget holds
#: at least ``1 − (budget − P99_ALLOWED)`` of what this one would (``Headroom.held``).
P99_ALLOWED = 0.01
#: The most the miss curve of a soft capacity is scaled by what the service's own windows showed
#: (code completion's bursts, shorter than the window that reads them, showed 2.1–5.3 times the
#: curve's misses on the fleet the policy sized, at most 7.3).
MISS_SCALE_MAX = 100.0


def lenient(budget: float) -> bool:
    """A budget larger than a 99% target's: a target below 0.99 (1 − 0.99 is a hair above 0.01 in
    floating point, and a 0.99 target is no lower one)."""
    return budget > P99_ALLOWED and not math.isclose(budget, P99_ALLOWED)


@dataclass(frozen=True)
class BudgetMemory:
    """What the budget remembers between decisions (stored in the policy state)."""

    #: ``(time, load)`` of the decisions within the last horizon.
    loads: tuple[tuple[float, float], ...] = ()
    #: Request-weighted, fading histogram of the horizon jumps (``BUCKETS`` entries, or empty).
    jumps: tuple[float, ...] = ()
    #: The same for the jumps from loads recorded while the trend confirmed a fall (``BUCKETS``
    #: entries, or empty): what a falling load met within a horizon (:func:`given_trend`).
    fall_jumps: tuple[float, ...] = ()
    #: Times in ``loads`` recorded while the trend confirmed a fall.
    falling_at: tuple[float, ...] = ()
    #: The same for the largest load within each horizon (``PEAK_BUCKETS`` entries, or empty):
    #: a burst already under way is not multiplied by the jumps that led into it.
    peaks: tuple[float, ...] = ()
    #: Decayed (good, all) requests over the short and the long window.
    good_short: float = 0.0
    all_short: float = 0.0
    good_long: float = 0.0
    all_long: float = 0.0
    #: The quantile's multiplier on the budget (1: hold the ``1 − budget`` quantile).
    gain: float = 1.0
    #: Request-weighted, fading sums (weight, Σu, Σu², Σv, Σuv) of u = ln(load at a horizon's
    #: start) and v = ln(the horizon's largest load), or empty: how far the peaks follow the
    #: load they start from (:func:`peak_follows`). Six digits, not the histograms' four: the
    #: variance is a difference of two of them.
    peak_fit: tuple[float, ...] = ()
    #: Decayed sums over the long window of the windows a soft capacity's miss curve was read
    #: for on the policy's own fleet: their requests, those that missed an SLO, and those the
    #: curve read as missing at the window's load (:func:`miss_curve_scale`).
    curve_requests: float = 0.0
    curve_missed: float = 0.0
    curve_expected: float = 0.0


@dataclass(frozen=True)
class Headroom:
    """The load to hold for and why (``ratio`` is 1 without enough history)."""

    ratio: float
    #: What the held load is multiplied by while the budget burns with the quantile at its top.
    margin: float
    #: The largest load to hold for (req/s), whatever the ratio; ``inf`` without history.
    peak: float
    quantile: float
    learned: bool
    burn_short: float | None
    burn_long: float | None
    #: The hold a 1% budget would keep with the same history and gain (``ratio``, ``peak``, its
    #: quantile) and the share of it a larger budget keeps at least (0: no floor).
    floor_ratio: float = 1.0
    floor_peak: float = 0.0
    floor_quantile: float = 0.0
    floor_share: float = 0.0
    #: The hold was lowered to what the budget pays for in misses above a soft capacity
    #: (:func:`soften`).
    soft: bool = False
    #: What the soft capacity's miss curve was multiplied by (:func:`miss_curve_scale`).
    miss_scale: float = 1.0
    #: Read from what falling loads met (:func:`given_trend`), not the whole history.
    while_falling: bool = False
    #: How far the history's peaks follow the load they start from (:func:`peak_follows`), and
    #: the load its jumps usually start from: from a load below the usual one, what the jumps add
    #: runs larger than the history's by ``(usual / load) ^ (1 − follows)``, smaller from above it.
    follows: float = 1.0
    usual: float = 0.0

    def held(self, load: float) -> tuple[float, bool]:
        """The load to hold for at ``load`` now, and whether the floor set it."""
        scale = self.start_scale(load)
        held = min(load * _scaled(self.ratio, scale), max(self.peak, load))
        floor = self.floor_share * min(load * _scaled(self.floor_ratio, scale), max(self.floor_peak, load))
        return max(held, floor) * self.margin, floor > held

    def start_scale(self, load: float) -> float:
        """What the history's jump is multiplied by from ``load`` (1 where peaks follow it)."""
        if self.follows >= 1.0 or not load > 0.0 or not self.usual > 0.0:
            return 1.0
        return float((self.usual / load) ** (1.0 - self.follows))


def _scaled(ratio: float, scale: float) -> float:
    """The jump ``ratio`` with what it adds to the load scaled (no jump stays none)."""
    return 1.0 + (ratio - 1.0) * scale if ratio > 1.0 else ratio


def _bucket(ratio: float) -> int:
    if not ratio > 1.0:
        return 0
    if not math.isfinite(ratio):
        return BUCKETS - 1
    return min(BUCKETS - 1, int(math.log(ratio) / math.log(RATIO_STEP)))


def _peak_bucket(load: float) -> int:
    if not load > PEAK_FLOOR:
        return 0
    if not math.isfinite(load):
        return PEAK_BUCKETS - 1
    return min(PEAK_BUCKETS - 1, int(math.log(load / PEAK_FLOOR) / math.log(PEAK_STEP)))


def _shorten(values: list[float]) -> tuple[float, ...]:
    """Four significant digits: the annotation stays small, and a round trip through JSON exact.
    (Most histogram buckets are empty: zero skips the formatting, and one comprehension over a
    histogram instead of a call per bucket, which was a sixth of a decision's CPU.)"""
    return tuple([float(f"{value:.4g}") if value else 0.0 for value in values])


def _beyond_noise(peak: float, start: float, count_window_s: float | None) -> float:
    """The largest load of a horizon less ``NOISE_SPREADS`` spreads of its count, not below the
    load it is compared with."""
    if count_window_s is None or count_window_s <= 0 or not peak > 0 or not math.isfinite(peak):
        return peak
    spread = math.sqrt(peak / count_window_s)
    return max(min(peak, start), peak - NOISE_SPREADS * spread)


def _decayed(histogram: tuple[float, ...], buckets: int, decay: float) -> list[float]:
    """The histogram's weights times ``decay``; an empty one (or one of another length) starts over."""
    return [w * decay for w in histogram] if len(histogram) == buckets else [0.0] * buckets


def _fade(value: float, elapsed_s: float, window_s: float) -> float:
    return value * math.exp(-max(0.0, elapsed_s) / window_s)


def record_load(
    memory: BudgetMemory,
    now: float,
    load: float,
    elapsed_s: float,
    horizon_s: float,
    count_window_s: float | None = None,
    falling: bool = False,
) -> BudgetMemory:
    """Add this decision's load; every sample now one horizon old becomes a jump in the histogram.

    ``count_window_s``: the window each load was counted over (the rate window). The largest of a
    horizon's noisy readings is read less ``NOISE_SPREADS`` Poisson spreads of its count: at a few
    requests per second the counts alone jump by a third within a horizon. ``falling``: the trend
    confirms a fall now; this sample's jump will count in ``fall_jumps`` too.
    """
    decay = 0.5 ** (max(0.0, elapsed_s) / HISTORY_HALF_LIFE_S)
    jumps = _decayed(memory.jumps, BUCKETS, decay)
    peaks = _decayed(memory.peaks, PEAK_BUCKETS, decay)
    fall_jumps = _decayed(memory.fall_jumps, BUCKETS, decay)
    fell = set(memory.falling_at)
    fit = [v * decay for v in memory.peak_fit] if len(memory.peak_fit) == 5 else [0.0] * 5
    loads = [(t, x) for t, x in memory.loads if t <= now]
    kept: list[tuple[float, float]] = []
    for i, (t, x) in enumerate(loads):
        if now - t < horizon_s:
            kept.append((t, x))
            continue
        later = [y for _, y in loads[i + 1 :]] + [load]
        peak = _beyond_noise(max(later), x, count_window_s)
        # A zero load has no ratio: any request after it is a jump of unknown size; count it as
        # the largest bucket only if requests came (an idle service scaled to its floor).
        ratio = peak / x if x > 0 else (math.inf if peak > 0 else 1.0)
        weight = min(max(peak, x), 1e9) * horizon_s
        jumps[_bucket(ratio)] += weight
        peaks[_peak_bucket(peak)] += weight
        if t in fell:
            fall_jumps[_bucket(ratio)] += weight
        if x > 0 and 0 < peak < 1e9:
            u, v = math.log(x), math.log(peak)
            for k, term in enumerate((1.0, u, u * u, v, u * v)):
                fit[k] += weight * term
    kept.append((now, _shorten([min(max(0.0, load), 1e9)])[0] if math.isfinite(load) else 1e9))
    falling_at = tuple(t for t, _ in kept if t in fell or (falling and t == now))
    return replace(
        memory,
        loads=tuple(kept),
        jumps=_shorten(jumps),
        peaks=_shorten(peaks),
        fall_jumps=_shorten(fall_jumps),
        falling_at=falling_at,
        peak_fit=tuple(float(f"{v:.6g}") for v in fit) if fit[0] > 0 else (),
    )


#: The regression of the peaks on their starts leans towards "peaks follow" (slope 1) as if the
#: starts had spread this much more (in ln load): a history whose loads barely move says little
#: of how peaks follow them.
_FOLLOW_PRIOR = math.log(1.2) ** 2


def peak_follows(memory: BudgetMemory) -> tuple[float, float]:
    """How far a horizon's peak follows the load it starts from (0–1: the weighted slope of
    ln(peak) on ln(start) over the history, leaning to 1 by ``_FOLLOW_PRIOR``) and the usual start
    (the weighted geometric mean); ``(1, 0)`` before any history.

    A load that swells and shrinks (a day, a ramp) carries its peaks with it: the history's jump
    from the load now is what to hold. Bursts that come from a calm whatever its depth (code
    completion) do not: the jump out of a calm deeper than usual is larger than the history's
    typical one, and the history's jump times the deep calm lets the next burst through.
    """
    if len(memory.peak_fit) != 5 or memory.peak_fit[0] <= 0.0:
        return 1.0, 0.0
    w, su, suu, sv, suv = memory.peak_fit
    mean_u = su / w
    var_u = max(0.0, suu / w - mean_u * mean_u)
    cov = suv / w - mean_u * sv / w
    slope = (cov + _FOLLOW_PRIOR) / (var_u + _FOLLOW_PRIOR)
    return min(1.0, max(0.0, slope)), math.exp(mean_u)


def given_trend(memory: BudgetMemory, falling: bool) -> BudgetMemory:
    """The history to hold from: while the trend confirms a fall, the jumps that falling loads
    met (once they carry ``MIN_WEIGHT`` and ``FALLING_SHARE_MIN`` of the whole history's weight:
    a few falls are no quantile), else every jump. A load on its way down rarely jumps
    within a start-up; where it does (a calm between bursts) its own history says so."""
    if not falling or len(memory.fall_jumps) != BUCKETS:
        return memory
    weight = sum(memory.fall_jumps)
    if weight < MIN_WEIGHT or weight < FALLING_SHARE_MIN * sum(memory.jumps):
        return memory
    return replace(memory, jumps=memory.fall_jumps)


def record_attainment(
    memory: BudgetMemory, good_share: float | None, rate: float, elapsed_s: float
) -> BudgetMemory:
    """Add the requests of the last ``elapsed_s`` (``rate`` per second, ``good_share`` on time)."""
    if good_share is None or not math.isfinite(good_share) or rate <= 0 or elapsed_s <= 0:
        return memory
    n = rate * elapsed_s
    good = min(1.0, max(0.0, good_share)) * n
    return replace(
        memory,
        good_short=_fade(memory.good_short, elapsed_s, SHORT_WINDOW_S) + good,
        all_short=_fade(memory.all_short, elapsed_s, SHORT_WINDOW_S) + n,
        good_long=_fade(memory.good_long, elapsed_s, LONG_WINDOW_S) + good,
        all_long=_fade(memory.all_long, elapsed_s, LONG_WINDOW_S) + n,
        # (kept exact: the burn rate reads the small difference of good and all)
    )


def record_curve_misses(
    memory: BudgetMemory, missed: float, expected: float, rate: float, elapsed_s: float
) -> BudgetMemory:
    """Add a window's requests (``rate`` per second over ``elapsed_s``), ``missed`` of them
    missing an SLO where a soft capacity's miss curve read ``expected`` at the window's load."""
    if not (math.isfinite(missed) and math.isfinite(expected)) or rate <= 0 or elapsed_s <= 0:
        return memory
    n = rate * elapsed_s
    return replace(
        memory,
        curve_requests=_fade(memory.curve_requests, elapsed_s, LONG_WINDOW_S) + n,
        curve_missed=_fade(memory.curve_missed, elapsed_s, LONG_WINDOW_S) + n * min(1.0, max(0.0, missed)),
        curve_expected=_fade(memory.curve_expected, elapsed_s, LONG_WINDOW_S)
        + n * min(1.0, max(0.0, expected)),
    )


def miss_curve_scale(memory: BudgetMemory, budget: float) -> float:
    """How many times the misses the policy's own windows showed exceed what the soft capacity's
    miss curve read for them: 1 before ``1/budget`` requests, never below 1 (a curve that reads
    more keeps the hold it gives), at most ``MISS_SCALE_MAX``. One request on each side keeps a
    first miss in a quiet hour from reading as a hundredfold."""
    if memory.curve_requests < 1.0 / max(budget, 1e-6):
        return 1.0
    ratio = (memory.curve_missed + 1.0) / (memory.curve_expected + 1.0)
    return min(MISS_SCALE_MAX, max(1.0, ratio))


def burn_rate(good: float, total: float, budget: float) -> float | None:
    """The share of requests missed over the budget; ``None`` with too few requests to tell."""
    if total < 1.0 / max(budget, 1e-6):
        return None
    return (1.0 - good / total) / max(budget, 1e-6)


def adjust_gain(
    memory: BudgetMemory,
    budget: float,
    elapsed_s: float,
    missing_now: bool = True,
    own_fleet: bool = True,
    ceiling: float = GAIN_MAX,
) -> BudgetMemory:
    """The outer loop: more headroom while the budget burns too fast, less while it lasts.

    ``missing_now``: the newest window itself is under the target, on a fleet no smaller than the
    policy asked for (the caller's to tell). Headroom grows only then (and while both windows
    burn): the decayed windows remember a big miss for many minutes after the fleet has caught up,
    and growing on that memory alone winds it up for nothing.
    ``own_fleet``: the fleet serving is the one the policy sized: no larger than the most it asked
    for within its scale-down window (what its own stabilization holds) and no smaller than what it
    asks. Headroom shrinks only then: a fleet held above that (``minReplicas``, a schedule's floor)
    meets the SLO whatever headroom the policy would hold, and a smaller one sized by something
    else (a fixed fleet beside ``DryRun``, a schedule kept by hand) met it by means the policy does
    not have; learning from either would leave the headroom too thin once the fleet is the
    policy's.
    ``ceiling``: the most the gain may reach (at least ``GAIN_MAX``); above ``GAIN_MAX`` it
    relaxes the planned utilization (:func:`utilization_relief`), not the quantile.
    """
    short = burn_rate(memory.good_short, memory.all_short, budget)
    long = burn_rate(memory.good_long, memory.all_long, budget)
    if short is None or long is None:
        return memory
    step = GAIN_RATE_PER_H * max(0.0, elapsed_s) / 3600.0
    gain = memory.gain
    if short > 1.0 and long > 1.0 and missing_now:
        # Burning faster than it accrues: more headroom, the faster the more it burns.
        gain *= math.exp(-2.0 * step * min(2.0, math.log(min(short, long)) + 0.5))
    elif short < 0.5 and own_fleet:
        # The last minutes spent under half of it: less headroom, at a pace that grows with the
        # slack. The short window alone decides: after one bad hour the long one would keep the
        # headroom wound up for another hour whatever the fleet does now.
        gain *= math.exp(step * min(2.0, math.log(0.5 / max(min(short, long), 1e-3))))
    return replace(memory, gain=min(max(GAIN_MAX, ceiling), max(GAIN_MIN, gain)))


def planned_utilization(config: PolicyConfig, relief: float = 1.0) -> float:
    """The share of the learned capacity to plan for, after the user's headroom. ``relief``: what
    the error budget lets the target utilization rise by (:func:`utilization_relief`), never
    beyond all of the capacity."""
    return min(1.0, config.target_utilization * max(1.0, relief)) / (1.0 + max(0.0, config.headroom))


def utilization_relief(memory: BudgetMemory) -> float:
    """How much more of the learned capacity the load now may be sized to use: the gain beyond
    ``GAIN_MAX`` (1: none), which it reaches only while the budget lasts with the quantile at its
    top."""
    return max(1.0, memory.gain / GAIN_MAX)


def _quantile_gain(gain: float) -> float:
    """The gain as the quantile reads it: within ``GAIN_QUANTILE_MIN``–``GAIN_MAX``."""
    return min(GAIN_MAX, max(gain, GAIN_QUANTILE_MIN))


def headroom(memory: BudgetMemory, budget: float) -> Headroom:
    """The jump and the peak to hold for: the ``1 − budget·gain`` request-weighted quantiles of the
    history. The load to hold is ``min(load × ratio, peak)``."""
    quantile = _quantile(budget, memory.gain)
    margin = max(1.0, (GAIN_QUANTILE_MIN / max(memory.gain, GAIN_MIN)) ** 0.25)
    short = burn_rate(memory.good_short, memory.all_short, budget)
    long = burn_rate(memory.good_long, memory.all_long, budget)
    if sum(memory.jumps) < MIN_WEIGHT or len(memory.peaks) != PEAK_BUCKETS:
        return Headroom(1.0, margin, math.inf, quantile, False, short, long)
    ratio, peak = _quantiles(memory, quantile)
    follows, usual = peak_follows(memory)
    room = Headroom(ratio, margin, peak, quantile, True, short, long, follows=follows, usual=usual)
    strict = _quantile(P99_ALLOWED, memory.gain)
    if not lenient(budget) or strict <= quantile:
        return room
    # A larger budget reads a lower quantile, and the gain learned at one quantile says little
    # of another: where the history's jumps are bimodal (a calm and its bursts), a quantile
    # below the bursts' share drops the burst from the hold and every burst breaks the SLO for
    # far more requests than the budget allows. So a larger budget keeps at least the share
    # of the 1% budget's hold that its extra misses could pay for.
    floor_ratio, floor_peak = _quantiles(memory, strict)
    return replace(
        room,
        floor_ratio=floor_ratio,
        floor_peak=floor_peak,
        floor_quantile=strict,
        floor_share=1.0 - (budget - P99_ALLOWED),
    )


def _quantile(budget: float, gain: float) -> float:
    return min(0.9999, max(0.5, 1.0 - max(budget, 1e-6) * _quantile_gain(gain)))


def _quantile_position(weights: tuple[float, ...], quantile: float) -> float:
    """Where ``quantile`` of the weight falls, in buckets: the index plus the share of that
    bucket's weight below it (the weight spread evenly over the bucket's log-width)."""
    total = sum(weights)
    seen = 0.0
    for i, weight in enumerate(weights):
        if weight > 0 and seen + weight >= quantile * total:
            return i + min(1.0, max(0.0, (quantile * total - seen) / weight))
        seen += weight
    return float(len(weights))


def _quantiles(memory: BudgetMemory, quantile: float) -> tuple[float, float]:
    """The jump ratio and the peak load at ``quantile`` of the history."""
    at = _quantile_position(memory.jumps, quantile)
    ratio = 1.0 if at <= 1.0 else float(RATIO_STEP**at)
    return ratio, float(PEAK_FLOOR * PEAK_STEP ** _quantile_position(memory.peaks, quantile))


def soften(
    room: Headroom, memory: BudgetMemory, budget: float, misses: Callable[[float], float], scale: float = 1.0
) -> Headroom:
    """Hold no more than the misses the budget pays for, where the capacity is a soft bound.

    ``misses(y)`` is the share of requests missing at ``y`` times the capacity (1% at 1). The
    quantile hold treats every request above the held load as lost; where the bound is soft (the
    prompts' interference with TPOT) a burst above it costs only the extra misses it makes. So
    the hold is also read as the smallest load to hold for at which the history's requests,
    weighted as in the quantile, would miss no more than the share the quantile allows
    (``budget·gain``): the lower of the two is kept, and so is the 1% budget's floor. ``scale``
    multiplies the curve (what the service's own windows showed of it, :func:`miss_curve_scale`).
    """
    if not room.learned:
        return room
    if scale != 1.0:
        curve = misses

        def misses(load: float) -> float:
            return min(1.0, scale * curve(load))

    ratio, peak = _soft_hold(memory, budget * _quantile_gain(memory.gain), misses)
    ratio, peak = min(room.ratio, ratio), min(room.peak, peak)
    soft = ratio < room.ratio or peak < room.peak
    softened = replace(room, ratio=ratio, peak=peak, soft=soft, miss_scale=scale)
    if room.floor_share <= 0.0:
        return softened
    floor_ratio, floor_peak = _soft_hold(memory, P99_ALLOWED * _quantile_gain(memory.gain), misses)
    return replace(
        softened, floor_ratio=min(room.floor_ratio, floor_ratio), floor_peak=min(room.floor_peak, floor_peak)
    )


def _soft_hold(memory: BudgetMemory, share: float, misses: Callable[[float], float]) -> tuple[float, float]:
    """The jump ratio and the peak load at which the history misses ``share`` of its weight."""
    ratio = RATIO_STEP ** _soft_position(memory.jumps, RATIO_STEP, 1.0, share, misses)
    peak = PEAK_FLOOR * PEAK_STEP ** _soft_position(memory.peaks, PEAK_STEP, PEAK_FLOOR, share, misses)
    return ratio, peak


def _soft_position(
    weights: tuple[float, ...], step: float, origin: float, share: float, misses: Callable[[float], float]
) -> float:
    """The smallest position p (in buckets: the held value is ``origin·step^p``) at which the
    weighted misses of the histogram's values (each bucket's at its log-middle, the first
    bucket's at ``origin``) stay within ``share`` of its weight."""
    total = sum(weights)
    if total <= 0.0:
        return 0.0
    filled = [(i, w) for i, w in enumerate(weights) if w > 0.0]
    memo: dict[float, float] = {}

    def missed(at: int) -> float:
        lost = 0.0
        for i, w in filled:
            # bucket i's middle (the first's origin) over the held value at bucket ``at``'s edge
            exponent = i - at + 0.5 if i > 0 else float(-at)
            if exponent not in memo:
                memo[exponent] = misses(step**exponent)
            lost += w * memo[exponent]
        return lost / total

    lo, hi = 0, len(weights)
    if missed(lo) <= share:
        return 0.0
    if missed(hi) > share:
        # A curve that misses more than the share even far below every value (its floor, scaled
        # by what the windows showed) holds the top of the histogram: nothing softer pays.
        return float(hi)
    # Invariant: missed(lo) > share >= missed(hi).
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if missed(mid) <= share:
            hi = mid
        else:
            lo = mid
    # Between the two grid points, read the position where the misses cross ``share``.
    above, below = missed(lo), missed(hi)
    return lo + (above - share) / (above - below) if above > below else float(hi)
