"""The load: arrivals now, their smoothed level and trend, and the outlook over one start-up.

The metrics give finished requests per second over a rate window. Arrivals differ from that by
what piles up in (or empties from) the engines, and the rate lags the running gauge by half a
window. This module turns one observation and the remembered in-flight samples into the load the
policy sizes for, with no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tailguard.policy.budget import P99_ALLOWED
from tailguard.policy.observed import ReplicaFigures
from tailguard.policy.state import PolicyState
from tailguard.policy.types import Observation, PolicyConfig
from tailguard.policy.window import Window

#: Smoothing of the arrival rate (Holt's linear method, per decision).
_LEVEL_GAIN = 0.5
_TREND_GAIN = 0.2
#: A trend counts only when it adds this share of the load over the horizon.
_TREND_SIGNIFICANT = 0.08
#: Requests in flight above the window's mean batch by this factor mean a rising load (noise stays under it).
_SURGE = 1.3
#: A surge this large is a jump: the rate window then ramps up for one window to catch up with it.
_JUMP = 1.5
#: A start is warm (its first windows no longer fill up and look like growth) after this long.
_WARM_UP_S = 240.0
#: A burst reading counts only beyond this many Poisson spreads of its count: a scrape interval
#: holds few requests at a low rate, and the largest of many noisy readings is no burst.
_BURST_SPREADS = 2.0

#: One in-flight sample: ``(sample time, requests running + waiting, serving replicas)``.
InFlightSample = tuple[float, float, int]


@dataclass(frozen=True)
class Arrivals:
    """The load read from one observation, in requests per second, and what to remember of it."""

    #: Finished requests per second over the window (the metric as read).
    finished: float
    #: Finished corrected by the change of requests in flight over the window (Little's law).
    flowed: float
    #: The load now: ``flowed``, raised by a surge of the running gauge and, in a breach, by the
    #: queue's growth since the last decision.
    now: float
    #: Holt's smoothed level and trend (req/s per second) of the window's arrivals.
    level: float
    trend: float
    #: The running gauge reads a rise the window has not caught up with yet.
    surging: bool
    #: When the running gauge last read a jump of the load.
    jump_at: float | None
    #: More requests wait than replicas serve, now; and when that was last seen.
    queued: bool
    queue_at: float | None
    #: No queue within the last rate window (the p99s no longer carry one).
    queue_gone: bool
    #: Arrivals per second over the last scrape interval that the burst window shows for certain
    #: (0 without it): a burst shorter than the rate window, near its height.
    burst: float
    #: The in-flight samples to remember (this one included).
    in_flight: tuple[InFlightSample, ...]
    #: Requests per second the queue gained since the last decision (0 when it shrank or unknown).
    queue_growth: float = 0.0
    #: No queue at the scrapes within the last rate window, and the window's requests waited
    #: within one engine step of the bar of ``queue_waited``: what a request that arrives while a
    #: step runs waits for its end, slots free or not; a queue perhaps, or none at all.
    step_wait: bool = False
    #: The waiting gauge read a queue at a scrape within the last rate window.
    queue_in_window: bool = False
    #: The most arrivals per second the burst window's last scrape interval may have held, its
    #: count plus the Poisson spreads of ``burst`` (``None`` without that count).
    interval_ceiling: float | None = None


def read_arrivals(
    config: PolicyConfig,
    state: PolicyState,
    obs: Observation,
    replica: ReplicaFigures,
    window: Window,
) -> Arrivals:
    """The load of this observation."""
    now, elapsed, broken = window.now, window.elapsed, window.broken
    assert obs.sample_time is not None
    rate = obs.request_rate or 0.0
    waiting = obs.waiting or 0.0
    # Over the rate window, arrivals = finished + the change of requests in flight. Right after
    # help arrives the engines empty and finish faster than requests come; right after a surge
    # they fill up.
    in_flight_now = (obs.running or 0.0) + waiting
    history = _prune_in_flight(state.in_flight, obs.sample_time, config)
    flow = _in_flight_change(history, obs.sample_time, in_flight_now, replica.serving, config.rate_window_s)
    counted = burst_count(config, obs, history, in_flight_now, replica.serving)
    burst = counted.certain() if counted is not None else 0.0
    ceiling = counted.ceiling() if counted is not None else None
    history = (*history, (obs.sample_time, in_flight_now, replica.serving))
    flowed = max(0.0, rate + flow) if flow is not None else rate
    # Rates lag by the window; the running and waiting gauges do not. When the requests in the
    # engines now outnumber the window's mean batch, the load is rising now: scale the rate by
    # that surge (Little's law: requests in flight grow with arrivals). Both counts are per
    # serving replica, so a scale-up within the window fakes none. After a scale-down each
    # replica runs more, and slower, by design: the bar rises by the share of replicas removed
    # within the window (more than slower steps add), so a real surge still shows through.
    fleet_then = max((row[2] for row in history), default=replica.serving)
    surge_bar = _SURGE * max(1.0, fleet_then / max(1, replica.serving))
    surge = 1.0
    if replica.step_measured and replica.batch and replica.serving and replica.batch >= 1.0:
        # Running only: a queue says the same thing again, and is counted as its growth below.
        surge = min(2.0, (obs.running or 0.0) / replica.serving / replica.batch)
    surging = surge > surge_bar
    jump_at = now if surging and surge >= _JUMP else state.jump_seen_at
    load = rate
    if surging:
        # The running gauge grows with the arrivals and with the stay of each request, which
        # lengthens as the batch grows: scaled by it, the rate reads a burst's onset up to a
        # quarter above the burst. The last scrape interval's count bounds it where it is read.
        load = max(load, rate * surge if ceiling is None else min(rate * surge, ceiling))
    # Under overload the replicas finish only what they sustain: arrivals are what they finish
    # plus the growth of the queue since the last decision. The surge is another reading of the
    # same arrivals (it already counts the requests the engines took in), so the larger counts.
    queue_growth = 0.0
    if state.waiting is not None and elapsed > 0:
        queue_growth = max(0.0, (waiting - state.waiting) / elapsed)
    if broken and waiting > 0:
        load = max(load, rate + queue_growth)
    # The in-flight change corrects the rate both ways when all is calm; while the SLO is broken
    # or the engines surge it may only add (what the replicas finish is then the least demand).
    load = max(load, flowed) if broken or surging else flowed
    # The level follows arrivals, in a breach too: what the replicas finish while a queue drains
    # is the queue's past, and read as load it would enter the history as a peak that never came.
    level, trend = _holt(state, flowed, elapsed)
    # A queue: more requests waiting than replicas, so no replica is left with a free slot. The
    # p99s span the rate window: a breach read within one window of a queue may be only that
    # queue's tail, already gone.
    queued = waiting > max(1, replica.serving)
    queue_at = now if queued else state.queue_seen_at
    # The gauge reads instants 15 s apart; a burst's queue can form and drain between two. The
    # requests' queue time covers the whole window: a queue either one saw is a queue.
    gauge_clear = queue_at is None or now - queue_at > config.rate_window_s
    waited = queue_waited(config, obs)
    queue_gone = gauge_clear and not waited
    step_wait = gauge_clear and waited and not queue_waited(config, obs, beyond_step=True)
    return Arrivals(
        finished=rate,
        flowed=flowed,
        now=load,
        level=level,
        trend=trend,
        surging=surging,
        jump_at=jump_at,
        queued=queued,
        queue_at=queue_at,
        queue_gone=queue_gone,
        burst=burst,
        in_flight=history,
        queue_growth=queue_growth,
        step_wait=step_wait,
        queue_in_window=not gauge_clear,
        interval_ceiling=ceiling,
    )


def queue_waited(config: PolicyConfig, obs: Observation, *, beyond_step: bool = False) -> bool:
    """The window's requests waited for their first step long enough to carry a p99 TTFT breach:
    a mean wait of at least the 1% of the TTFT SLO that 1% of requests waiting the whole SLO would
    give. Less cannot push the p99 over; an unmeasured queue time says nothing (false).
    ``beyond_step``: and one engine step more (the mean inter-token latency, where measured), the
    wait for the step under way to end that a request meets with free slots too."""
    mean = obs.queue_time_mean_s
    if mean is None or not math.isfinite(mean):
        return False
    itl = obs.itl_mean_s
    step = max(0.0, itl) if beyond_step and itl is not None and math.isfinite(itl) else 0.0
    return mean >= step + P99_ALLOWED * config.ttft_slo_s


def _holt(state: PolicyState, observed: float, elapsed: float) -> tuple[float, float]:
    """The next level (≥ 0) and trend. They follow the window's arrivals only: the surge and the
    queue's growth are a reading of the load now, and fed into the trend one step of the load
    would be extrapolated as a ramp over the whole start-up horizon."""
    if state.rate_level is None or elapsed <= 0:
        return max(0.0, observed), 0.0
    predicted = state.rate_level + state.rate_trend * elapsed
    level = predicted + _LEVEL_GAIN * (observed - predicted)
    trend = state.rate_trend + _TREND_GAIN * ((level - state.rate_level) / elapsed - state.rate_trend)
    return max(0.0, level), trend


@dataclass(frozen=True)
class Outlook:
    """The load to size for: now, over one start-up, and (for a scale-down) the confirmed fall."""

    #: The larger of the load now and the smoothed level: what the fleet must serve.
    demand: float
    #: The level extrapolated over the start-up horizon while a significant rise lasts.
    forecast: float
    #: The trend confirms a significant fall: the load now is below the window's mean.
    falling: bool
    #: The level half a window on (the window's mean is half a window old) while falling.
    nowcast: float
    #: The measured load (no surge, no queue growth): what the budget's headroom scales.
    measured: float
    #: Seconds the forecast looks ahead.
    horizon_s: float
    #: The level extrapolated over the start-up horizon by any rise of the trend, significant or
    #: not (the level itself in a breach, a jump's catching up or a start's first minutes).
    drift: float


def outlook(config: PolicyConfig, state: PolicyState, load: Arrivals, window: Window) -> Outlook:
    """Where the load is heading. The trend of finished requests means little while the queue grows,
    nor right after a start (the first windows fill up and look like growth), nor within one rate
    window of a jump (the window's mean climbs to the new load, which the surge sized for)."""
    now, broken = window.now, window.broken
    horizon = config.startup_s
    warmed_up = state.started_at is not None and now - state.started_at >= _WARM_UP_S
    catching_up = load.jump_at is not None and now - load.jump_at <= config.rate_window_s
    level, trend = load.level, load.trend
    rising = warmed_up and not broken and not catching_up and trend * horizon > _TREND_SIGNIFICANT * level
    # A fall the trend confirms is no blip: the rate window's mean is half a window old, so the
    # load now is lower still, and the hysteresis band (which keeps a flat load near a boundary
    # from flapping) is not needed to tell it from noise. A scale-down waits out its window, so
    # a fall counts when it sheds a significant share of the load over that window.
    fall_horizon = max(horizon, config.scale_down_stabilization_s)
    falling = warmed_up and not broken and -trend * fall_horizon > _TREND_SIGNIFICANT * level
    return Outlook(
        demand=max(load.now, level),
        forecast=level + trend * horizon if rising else level,
        falling=falling,
        nowcast=max(0.0, level + trend * 0.5 * config.rate_window_s) if falling else level,
        measured=max(load.flowed, level),
        horizon_s=horizon,
        drift=level + max(0.0, trend) * horizon if warmed_up and not broken and not catching_up else level,
    )


def steady(config: PolicyConfig, load: Arrivals) -> bool:
    """No surge and no significant rise over one start-up: a window that reads the load as it is."""
    return not load.surging and load.trend * config.startup_s <= _TREND_SIGNIFICANT * max(load.level, 1e-9)


@dataclass(frozen=True)
class BurstCount:
    """Arrivals counted over the burst window's last scrape interval (its ``span``): the requests
    it finished plus the change of requests in flight since the sample one interval ago, where
    that sample exists (``flow_known``; while a queue drains the replicas finish more than
    arrives)."""

    count: float
    span: float
    flow_known: bool
    #: Where replicas left since that sample (so ``flow_known`` is false): the count with the
    #: change of requests in flight measured against the leavers' share taken off the sample.
    #: A leaver still draining keeps its requests in the sum, so this reads high: it serves as a
    #: bound, never as a count of arrivals.
    upper_count: float | None = None

    def certain(self) -> float:
        """Arrivals per second for certain: the count less ``_BURST_SPREADS`` Poisson spreads."""
        return max(0.0, self.count - _BURST_SPREADS * math.sqrt(self.count)) / self.span

    def ceiling(self) -> float | None:
        """The most arrivals per second may be: the count (or, after replicas left, its upper
        reading) plus ``_BURST_SPREADS`` Poisson spreads; ``None`` without the in-flight sample
        that makes the count one of arrivals."""
        count = self.count if self.flow_known else self.upper_count
        if count is None:
            return None
        return chance_ceiling(count, self.span)


def chance_ceiling(count: float, span_s: float) -> float:
    """The most arrivals per second ``count`` requests over ``span_s`` seconds may stand for by
    chance: the count plus ``_BURST_SPREADS`` Poisson spreads, over the span."""
    return (count + _BURST_SPREADS * math.sqrt(max(count, 1.0))) / span_s


def burst_span_s(config: PolicyConfig) -> float:
    """The span of the burst window's count: one scrape interval (the window holds two scrapes,
    and the rate is one interval's increase)."""
    return 0.5 * config.burst_window_s


def burst_count(
    config: PolicyConfig,
    obs: Observation,
    history: tuple[InFlightSample, ...],
    in_flight: float,
    serving: int,
) -> BurstCount | None:
    """The burst window's count of its last scrape interval (``None`` without a burst rate)."""
    rate, now = obs.request_rate_burst, obs.sample_time
    if rate is None or not math.isfinite(rate) or rate < 0 or now is None:
        return None
    span = burst_span_s(config)
    flow = _in_flight_change(history, now, in_flight, serving, span)
    if flow is not None:
        return BurstCount(max(0.0, rate + flow) * span, span, True)
    upper = _in_flight_change(history, now, in_flight, serving, span, leavers_removed=True)
    upper_count = max(0.0, rate + upper) * span if upper is not None else None
    return BurstCount(rate * span, span, False, upper_count)


def window_serving(history: tuple[InFlightSample, ...], now: float, span_s: float) -> float | None:
    """The replicas that served on average over the ``span_s`` before ``now``, from the in-flight
    samples (each one's count taken as held since the sample before it); ``None`` when the samples
    cover less than half of that span."""
    start = now - span_s
    total = covered = 0.0
    previous = start
    for t, _, serving in sorted(row for row in history if row[0] <= now):
        begin = max(previous, start)
        if t > begin:
            total += serving * (t - begin)
            covered += t - begin
        previous = t
    return total / covered if covered >= 0.5 * span_s else None


def _prune_in_flight(
    history: tuple[InFlightSample, ...], sample_time: float, config: PolicyConfig
) -> tuple[InFlightSample, ...]:
    """The in-flight samples one rate window can still use (older ones, and any from the future
    of this sample after a clock step, are dropped)."""
    oldest = sample_time - config.rate_window_s - 2 * config.interval_s
    return tuple(row for row in history if oldest <= row[0] < sample_time)


def _in_flight_change(
    history: tuple[InFlightSample, ...],
    sample_time: float,
    in_flight: float,
    serving: int,
    span_s: float,
    *,
    leavers_removed: bool = False,
) -> float | None:
    """Requests per second added to the engines over about ``span_s`` (a rate window, or the burst
    window's scrape interval), or ``None``.

    ``None`` without a sample from at least half that span ago, and when fewer replicas serve
    now than then: a removed pod's requests leave the sum without finishing, which is no fall
    of arrivals. With ``leavers_removed`` the sample then is taken as the replicas still serving
    held their share of it, and the change is measured against that share.
    """
    start = sample_time - span_s
    usable = [row for row in history if sample_time - row[0] >= 0.5 * span_s]
    if not usable:
        return None
    t, then, serving_then = min(usable, key=lambda row: abs(row[0] - start))
    if serving < serving_then:
        if not leavers_removed or serving <= 0:
            return None
        then *= serving / serving_then
    # Requests in flight jitter by about the square root of their number (arrivals and
    # finishes are random): only the change beyond twice that is a trend of arrivals.
    change = in_flight - then
    noise = 2.0 * math.sqrt(max(0.0, in_flight) + max(0.0, then))
    change = math.copysign(max(0.0, abs(change) - noise), change)
    return change / (sample_time - t)
