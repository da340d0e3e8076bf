"""A modelled Prometheus: scrapes of every replica's ``/metrics`` and the queries policies run.

Every policy in the simulator sees the fleet only through this, with the delays the real thing
adds: a sample every ``scrape_interval_s``, ``rate()`` over a window of scrapes, instant gauges as
of the last scrape, histograms summed over pods before ``histogram_quantile``.

``rate()`` follows Prometheus's own rule (``extrapolatedRate``): the increase between the first and
last sample in the window is extrapolated to the window's edges when a sample lies within 1.1
average scrape intervals of an edge, otherwise by half an interval (and never below the
counter's zero), then divided by the whole window. So a pod that started serving inside the
window adds what it finished, not its rate since it started: summed over pods, the rate after a
scale-up is not inflated by the new pods' short series.

Simplification (documented in docs/simulator.md): a pod's series ends when it stops being Ready
(Prometheus would scrape a terminating pod a little longer).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from tailguard.contract.slo import slo_figures
from tailguard.policy import Observation
from tailguard.sim.engine import EngineSnapshot

#: Prometheus's lookback for instant queries.
LOOKBACK_S = 300.0

Buckets = list[tuple[float, float]]


class ModelledPrometheus:
    """Per-pod series of engine snapshots, and the PromQL the policies need as methods."""

    def __init__(self, scrape_interval_s: float = 15.0, retention_s: float = 900.0) -> None:
        self.scrape_interval_s = scrape_interval_s
        self.retention_s = retention_s
        self._series: dict[str, deque[EngineSnapshot]] = {}
        self._live: set[str] = set()
        self.last_scrape: float | None = None

    def scrape(self, now: float, pods: Iterable[tuple[str, EngineSnapshot]]) -> None:
        """Record one scrape of every listed pod (taken at ``now``); unlisted pods go stale."""
        live = set()
        for pod, snap in pods:
            series = self._series.setdefault(pod, deque())
            series.append(_at(snap, now))
            live.add(pod)
        self._live = live
        self.last_scrape = now
        horizon = now - self.retention_s
        for pod in list(self._series):
            series = self._series[pod]
            while series and series[0].time < horizon:
                series.popleft()
            if not series:
                del self._series[pod]

    # -- instant vectors ---------------------------------------------------------------------

    def latest(self, now: float) -> dict[str, EngineSnapshot]:
        """The newest sample of every live pod within the lookback."""
        out = {}
        for pod in self._live:
            series = self._series.get(pod)
            if series and now - series[-1].time <= LOOKBACK_S:
                out[pod] = series[-1]
        return out

    def gauge_sum(self, now: float, value: Callable[[EngineSnapshot], float]) -> float | None:
        latest = self.latest(now)
        return sum(value(s) for s in latest.values()) if latest else None

    def gauge_avg(self, now: float, value: Callable[[EngineSnapshot], float]) -> float | None:
        latest = self.latest(now)
        return sum(value(s) for s in latest.values()) / len(latest) if latest else None

    def per_pod(self, now: float, value: Callable[[EngineSnapshot], float]) -> dict[str, float]:
        return {pod: value(s) for pod, s in self.latest(now).items()}

    # -- range vectors -----------------------------------------------------------------------

    def _window(self, pod: str, now: float, window_s: float) -> _Window | None:
        series = self._series.get(pod)
        if not series:
            return None
        start = now - window_s
        first = None
        count = 0
        for snap in series:
            if snap.time > start:
                first = first or snap
                count += 1
        last = series[-1]
        if first is None or last.time <= first.time or last.time > now:
            return None
        return _Window(first, last, count, start, now)

    def counter_rate(
        self, now: float, window_s: float, value: Callable[[EngineSnapshot], float]
    ) -> float | None:
        """``sum(rate(counter[window]))`` over pods; ``None`` when no series has two samples."""
        rates = [
            window.rate(value(window.first), value(window.last))
            for pod in self._series
            if (window := self._window(pod, now, window_s)) is not None
        ]
        return sum(rates) if rates else None

    def per_pod_rate(
        self, now: float, window_s: float, value: Callable[[EngineSnapshot], float]
    ) -> dict[str, float]:
        out = {}
        for pod in self._live:
            window = self._window(pod, now, window_s)
            if window is not None:
                out[pod] = window.rate(value(window.first), value(window.last))
        return out

    def histogram_rate(
        self,
        now: float,
        window_s: float,
        buckets: Callable[[EngineSnapshot], tuple[tuple[float, int], ...]],
        pods: Iterable[str] | None = None,
    ) -> Buckets | None:
        """``sum by (le) (rate(x_bucket[window]))``; ``None`` when no series has two samples."""
        total: list[float] | None = None
        bounds: list[float] = []
        for pod in self._series if pods is None else pods:
            window = self._window(pod, now, window_s)
            if window is None:
                continue
            b0, b1 = buckets(window.first), buckets(window.last)
            if total is None:
                total = [0.0] * len(b1)
                bounds = [b for b, _ in b1]
            # Every bucket is a series of its own, extrapolated on its own, as in Prometheus.
            for i, ((_, c0), (_, c1)) in enumerate(zip(b0, b1, strict=True)):
                total[i] += window.rate(c0, c1)
        if total is None:
            return None
        return list(zip(bounds, total, strict=True))

    def histogram_mean(
        self,
        now: float,
        window_s: float,
        histogram: Callable[[EngineSnapshot], tuple[float, tuple[tuple[float, int], ...]]],
    ) -> float | None:
        """``sum(rate(x_sum[window])) / sum(rate(x_count[window]))``; ``None`` without a count."""
        total = self.counter_rate(now, window_s, lambda s: histogram(s)[0])
        count = self.counter_rate(now, window_s, lambda s: float(histogram(s)[1][-1][1]))
        return total / count if total is not None and count else None

    # -- what the operator reads ---------------------------------------------------------------

    def observe(
        self,
        now: float,
        *,
        window_s: float,
        ttft_slo_s: float,
        tpot_slo_s: float | None,
        burst_window_s: float | None = None,
    ) -> Observation:
        """The metric half of tailguard's :class:`Observation` (the Deployment half is added by
        the fleet), computed as ``tailguard.metrics`` computes it from real Prometheus."""
        figures = slo_figures(
            self.histogram_rate(now, window_s, lambda s: s.ttft),
            self.histogram_rate(now, window_s, lambda s: s.tpot),
            ttft_slo_s=ttft_slo_s,
            tpot_slo_s=tpot_slo_s,
        )
        itl_mean = self.histogram_mean(now, window_s, lambda s: (s.itl_sum, s.itl))
        queue_mean = self.histogram_mean(now, window_s, lambda s: (s.queue_sum, s.queue))
        prefill_mean = self.histogram_mean(now, window_s, lambda s: (s.prefill_sum, s.prefill))
        latest = self.latest(now)
        newest = max((s.time for s in latest.values()), default=None)
        return Observation(
            sample_time=newest,
            p99_ttft_s=figures.p99_ttft_s,
            p99_tpot_s=figures.p99_tpot_s,
            itl_mean_s=itl_mean,
            queue_time_mean_s=queue_mean,
            prefill_time_mean_s=prefill_mean,
            ttft_within_slo=figures.ttft_within_slo,
            tpot_within_slo=figures.tpot_within_slo,
            goodput=figures.goodput,
            request_rate=self.counter_rate(now, window_s, lambda s: s.requests_finished),
            request_rate_burst=(
                self.counter_rate(now, burst_window_s, lambda s: s.requests_finished)
                if burst_window_s is not None
                else None
            ),
            prompt_token_rate=self.counter_rate(now, window_s, lambda s: s.prompt_tokens),
            generation_token_rate=self.counter_rate(now, window_s, lambda s: s.generation_tokens),
            running=self.gauge_sum(now, lambda s: s.running),
            waiting=self.gauge_sum(now, lambda s: s.waiting),
            kv_cache_usage=self.gauge_avg(now, lambda s: s.kv_cache_usage),
            preemption_rate=self.counter_rate(now, window_s, lambda s: s.preemptions),
            reporting_pods=len(latest),
        )


@dataclass(frozen=True)
class _Window:
    """One pod's samples in a range ``(start, end]``: the first, the last and how many."""

    first: EngineSnapshot
    last: EngineSnapshot
    count: int
    start: float
    end: float

    def rate(self, first_value: float, last_value: float) -> float:
        """Prometheus's ``rate()`` of a counter with these first and last values in the window.

        The increase is extrapolated to an edge of the window when the nearest sample lies within
        1.1 average intervals of it (the series covers the window there), otherwise by half an
        interval (the series starts or ends inside it); towards the start never past the
        counter's zero. The result is divided by the whole window, not by the samples' span.
        """
        increase = max(0.0, last_value - first_value)
        sampled = self.last.time - self.first.time
        average = sampled / max(1, self.count - 1)
        threshold = 1.1 * average
        to_start = self.first.time - self.start
        to_end = self.end - self.last.time
        if to_start >= threshold:
            to_start = average / 2.0
        if increase > 0 and first_value >= 0:
            to_start = min(to_start, sampled * first_value / increase)
        if to_end >= threshold:
            to_end = average / 2.0
        return increase * (sampled + to_start + to_end) / sampled / (self.end - self.start)


def _at(snap: EngineSnapshot, now: float) -> EngineSnapshot:
    """The snapshot stamped with the scrape time (the engine's clock may run a step ahead)."""
    return snap if snap.time == now else replace(snap, time=now)
