"""The modelled Prometheus, the fleet's Deployment and the accounting of a run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tailguard.sim import synthetic
from tailguard.sim.engine import Engine
from tailguard.sim.fleet import Action, FleetConfig, FleetView, PodPhase, simulate
from tailguard.sim.profiles import get_profile
from tailguard.sim.prometheus import ModelledPrometheus

H100 = get_profile("h100-llama3-8b")


class Scripted:
    """An autoscaler that plays back a list of (time, replicas, max batch)."""

    name = "scripted"

    def __init__(self, plan: list[tuple[float, int, int | None]], interval_s: float = 5.0) -> None:
        self.plan = plan
        self.interval_s = interval_s
        self.seen: list[tuple[float, int, int, int, bool]] = []

    def step(self, now: float, view: FleetView) -> Action:
        self.seen.append(
            (
                now,
                view.ready,
                view.count(PodPhase.STARTING),
                view.count(PodPhase.PENDING),
                view.rollout_in_progress,
            )
        )
        replicas, batch = view.desired, None
        for t, r, b in self.plan:
            if now >= t:
                replicas, batch = r, b
        return Action(replicas, batch)


def test_prometheus_rates_and_quantiles_follow_the_scrapes() -> None:
    prom = ModelledPrometheus(scrape_interval_s=15)
    engine = Engine(H100)
    for i in range(600):
        t = i * 0.1
        engine.advance_to(t)
        engine.add_request(i, t, 200, 50)
        if i % 150 == 0:
            prom.scrape(t, [("a", engine.snapshot())])
    engine.advance_to(60.0)
    prom.scrape(60.0, [("a", engine.snapshot())])
    # The series covers a 60 s window (its first sample is within 1.1 intervals of the start).
    rate = prom.counter_rate(60.0, 60.0, lambda s: s.requests_finished)
    assert rate == pytest.approx(10.0, rel=0.1)
    # Over 120 s it covers half the window, and rate() divides by the whole window as
    # Prometheus does: half the rate, not the rate since the series began.
    half = prom.counter_rate(60.0, 120.0, lambda s: s.requests_finished)
    assert half == pytest.approx(5.0, rel=0.1)
    obs = prom.observe(60.0, window_s=120.0, ttft_slo_s=0.5, tpot_slo_s=None)
    assert obs.p99_ttft_s is not None
    assert obs.p99_ttft_s < 0.1
    assert obs.ttft_within_slo == pytest.approx(1.0)
    assert obs.reporting_pods == 1
    assert obs.sample_time == 60.0
    assert obs.itl_mean_s is not None
    assert 0.005 < obs.itl_mean_s < 0.05
    # 10 req/s on an idle engine: a request waits for the step in progress, not for a queue.
    assert obs.queue_time_mean_s is not None
    assert 0.0 <= obs.queue_time_mean_s < obs.itl_mean_s * 2
    # 200-token prompts on a lightly loaded engine: each one's prefill is about one step.
    assert obs.prefill_time_mean_s is not None
    assert H100.step_time(1, 200, 0.0) * 0.9 < obs.prefill_time_mean_s < 2 * obs.itl_mean_s + 0.01
    # The burst rate is read only over a window asked for (two scrapes: one interval's increase).
    assert obs.request_rate_burst is None
    burst = prom.observe(60.0, window_s=120.0, ttft_slo_s=0.5, tpot_slo_s=None, burst_window_s=30.0)
    assert burst.request_rate_burst == pytest.approx(10.0, rel=0.35)


def test_a_pod_that_starts_inside_the_window_adds_what_it_finished_not_its_rate() -> None:
    """After a scale-up, ``sum(rate(...))`` over an old pod that covers the window and a new one
    with two samples: the new pod's increase is extrapolated back by half an interval at most
    (here to its counter's zero) and divided by the whole window, so the sum stays near the
    arrival rate instead of adding the new pod's full rate."""
    prom = ModelledPrometheus(scrape_interval_s=15)
    old, new = Engine(H100), Engine(H100)
    for i in range(1200):
        t = i * 0.1
        old.advance_to(t)
        new.advance_to(t)
        # 10 req/s to the old pod until the new one is ready at 100 s, then 5 req/s each.
        if t < 100.0 or i % 2 == 0:
            old.add_request(i, t, 200, 50)
        else:
            new.add_request(i, t, 200, 50)
        if i % 150 == 0:
            pods = [("old", old.snapshot())] + ([("new", new.snapshot())] if t >= 100.0 else [])
            prom.scrape(t, pods)
    old.advance_to(120.0)
    new.advance_to(120.0)
    prom.scrape(120.0, [("old", old.snapshot()), ("new", new.snapshot())])
    rates = prom.per_pod_rate(120.0, 120.0, lambda s: s.requests_finished)
    finished_new = new.snapshot().requests_finished
    assert rates["new"] == pytest.approx(finished_new / 120.0, rel=0.05)
    total = prom.counter_rate(120.0, 120.0, lambda s: s.requests_finished)
    assert total == pytest.approx(10.0, rel=0.1)


def test_prometheus_without_two_samples_says_nothing() -> None:
    prom = ModelledPrometheus()
    prom.scrape(0.0, [("a", Engine(H100).snapshot())])
    assert prom.counter_rate(0.0, 120.0, lambda s: s.requests_finished) is None
    assert prom.observe(0.0, window_s=120, ttft_slo_s=0.5, tpot_slo_s=None).p99_ttft_s is None


def test_a_gone_pod_leaves_the_instant_vector() -> None:
    prom = ModelledPrometheus()
    snap = Engine(H100).snapshot()
    prom.scrape(0.0, [("a", snap), ("b", snap)])
    prom.scrape(15.0, [("a", snap)])
    assert set(prom.latest(15.0)) == {"a"}


def test_new_replicas_start_after_the_cold_start_and_cost_gpu_time() -> None:
    trace = synthetic.poisson(5, 600, seed=1)
    scaler = Scripted([(100.0, 3, None)])
    result = simulate(trace, scaler, FleetConfig(H100, cold_start_s=60, cold_start_jitter=0.0))
    starting = [s for s in scaler.seen if s[2] > 0]
    assert starting, "the new pods were seen starting"
    first_ready = next(t for t, ready, *_ in scaler.seen if ready == 3)
    assert 160.0 <= first_ready <= 170.0
    # 1 replica for 600 s plus 2 from t≈100 s: about 1.83 GPU-hours... in seconds:
    assert result.gpu_seconds == pytest.approx(600 + 2 * (trace.duration_s - 100.0), rel=0.05)
    assert np.all(np.isfinite(result.ttft))


def test_a_warm_up_serves_the_lead_in_uncounted_and_starts_with_a_full_rate_window() -> None:
    trace = synthetic.poisson(10, 600, seed=5)
    # It asks for 5 replicas during the lead-in: it observes, and nothing is applied before 0.
    scaler = Scripted([(-200.0, 5, None)])
    cold = simulate(trace, Scripted([]), FleetConfig(H100, initial_replicas=2))
    warm = simulate(trace, scaler, FleetConfig(H100, initial_replicas=2, warmup_s=300))
    # The autoscaler is called from the lead-in's start, and acts from the trace's start.
    assert scaler.seen[0][0] == pytest.approx(-300.0, abs=1e-3)
    assert all(ready == 2 for t, ready, *_ in scaler.seen if t < 0)
    # At time zero the fleet is the size it asked for last, Ready, as after an operator restart:
    # that handover is no scale event of the run.
    assert (warm.timeline[0].desired, warm.timeline[0].ready) == (5, 5)
    assert warm.scale_events == []
    later = simulate(
        trace,
        Scripted([(-200.0, 5, None), (100.0, 3, None)]),
        FleetConfig(H100, initial_replicas=2, warmup_s=300),
    )
    assert later.scale_events[0][1:] == (5, 3)
    warm = simulate(trace, Scripted([]), FleetConfig(H100, initial_replicas=2, warmup_s=300))
    # GPU time counts from the trace's start.
    assert warm.gpu_seconds == pytest.approx(cold.gpu_seconds)
    assert warm.timeline[0].time == 0.0
    # Only the trace's own requests are reported; every one of them was served.
    assert len(warm.ttft) == len(trace)
    assert np.all(np.isfinite(warm.ttft))
    # At the start, Prometheus already holds a whole window of the lead-in's load.
    fleet_config = FleetConfig(H100, initial_replicas=2, warmup_s=300)
    seen: list[float | None] = []

    class Reader(Scripted):
        def step(self, now: float, view: FleetView) -> Action:
            seen.append(view.prometheus.counter_rate(now, 120.0, lambda s: s.requests_finished))
            return super().step(now, view)

    reader = Reader([])
    simulate(trace, reader, fleet_config)
    at_start = next(i for i, entry in enumerate(reader.seen) if entry[0] >= 0.0)
    assert seen[at_start] == pytest.approx(10.0, rel=0.15)


def test_a_synthetic_lead_in_is_the_same_process_earlier() -> None:
    trace = synthetic.step(10, 30, 600, seed=1, lead_s=600)
    lead = trace.lead_in(300)
    assert len(lead) > 0
    assert float(lead.arrival_s[0]) >= -300.0
    assert float(lead.arrival_s[-1]) < 0.0
    # The step comes at the trace's own midpoint; before it the lead-in runs at the base rate.
    assert len(lead) / 300.0 == pytest.approx(10.0, rel=0.15)
    assert np.sum(trace.arrival_s >= 300.0) / 300.0 == pytest.approx(30.0, rel=0.1)
    # Without one, the trace's own start is played again.
    plain = synthetic.step(10, 30, 600, seed=1)
    assert np.allclose(plain.lead_in(300).arrival_s + 300.0, plain.window(0, 300).arrival_s)
    # A window of a file keeps what came before it as its lead-in.
    later = plain.window(400, 600)
    assert float(later.lead_in(300).arrival_s[-1]) < 0.0
    assert len(later.lead_in(300)) / 300.0 == pytest.approx((10 * 200 + 30 * 100) / 300.0, rel=0.15)


def test_scale_down_drains_without_losing_requests() -> None:
    trace = synthetic.poisson(20, 300, seed=2)
    result = simulate(
        trace, Scripted([(0.0, 3, None), (150.0, 1, None)]), FleetConfig(H100, initial_replicas=3)
    )
    assert np.all(np.isfinite(result.ttft))
    assert result.scale_events[-1][2] == 1


def test_pods_beyond_the_gpu_limit_stay_pending() -> None:
    trace = synthetic.poisson(5, 400, seed=3)
    scaler = Scripted([(50.0, 4, None)])
    simulate(trace, scaler, FleetConfig(H100, gpu_limit=2, cold_start_s=30))
    assert max(pending for *_, pending, _ in scaler.seen) == 2
    assert max(ready for _, ready, *_ in scaler.seen) == 2


def test_a_max_batch_change_rolls_one_pod_at_a_time() -> None:
    trace = synthetic.poisson(20, 900, seed=4)
    scaler = Scripted([(60.0, 3, 128)])
    result = simulate(
        trace, scaler, FleetConfig(H100, initial_replicas=3, cold_start_s=60, cold_start_jitter=0)
    )
    during = [s for s in scaler.seen if s[4]]
    assert during, "a rollout was seen"
    assert min(ready for _, ready, *_ in during) >= 2, "never more than one pod down"
    assert not scaler.seen[-1][4], "the rollout finished"
    ((when, old, new),) = result.max_batch_changes
    assert (when, old, new) == (pytest.approx(60.0, abs=1e-3), 256, 128)


def test_a_spec_change_rolls_every_pod_one_at_a_time_unasked() -> None:
    """``rollouts_at``: the user's new pod template, which the autoscaler did not ask for."""
    trace = synthetic.poisson(20, 900, seed=4)
    scaler = Scripted([])
    config = FleetConfig(
        H100, initial_replicas=3, cold_start_s=60, cold_start_jitter=0, rollouts_at=(100.0, 5000.0)
    )
    result = simulate(trace, scaler, config)
    before = [s for s in scaler.seen if s[0] < 100.0]
    during = [s for s in scaler.seen if s[4]]
    assert before
    assert not any(s[4] for s in before)
    assert during
    assert min(s[0] for s in during) >= 100.0, "rolled from the change on"
    assert min(ready for _, ready, *_ in during) == 2, "one pod down at a time"
    # Three cold starts in turn; the flag drops once no old pod is left (as ``updatedReplicas``
    # reaches the count), while the last new pod still starts.
    assert 200.0 <= max(s[0] for s in during) < 220.0
    assert [ready for t, ready, *_ in scaler.seen if 280.0 <= t < 300.0] == [3] * 4
    assert not scaler.seen[-1][4], "the rollout finished (the one after the trace never started)"
    assert result.max_batch_changes == []
    assert result.scale_events == []


def test_no_ready_pod_means_failed_requests() -> None:
    trace = synthetic.poisson(5, 300, seed=5)
    result = simulate(trace, Scripted([(100.0, 0, None)]), FleetConfig(H100, initial_replicas=1))
    assert np.isinf(result.ttft[trace.arrival_s > 140.0]).all(), "nobody left to answer"
    assert np.isfinite(result.ttft[trace.arrival_s < 90.0]).all()
    assert math.isfinite(result.gpu_seconds)


def test_the_only_pod_is_replaced_by_a_surge_pod() -> None:
    """One replica rolls with maxSurge 1: the old pod serves until its successor is Ready."""
    trace = synthetic.poisson(5, 300, seed=5)
    scaler = Scripted([(0.0, 1, 64)])
    result = simulate(trace, scaler, FleetConfig(H100, initial_replicas=1, cold_start_s=60))
    assert np.isfinite(result.ttft).all(), "never without a replica"
    assert min(ready for _, ready, *_ in scaler.seen) == 1
    assert max(starting for _, _, starting, *_ in scaler.seen) == 1
    assert not scaler.seen[-1][4], "the rollout finished"


def test_a_lead_in_schedule_serves_the_lead_in_and_is_not_counted() -> None:
    trace = synthetic.step(10, 30, 600, seed=1, lead_s=300)
    scaler = Scripted([])
    config = FleetConfig(
        H100, initial_replicas=2, warmup_s=300, lead_in_schedule=(1, 3, 1), lead_in_window_s=60
    )
    result = simulate(trace, scaler, config)
    sizes = {round(t): ready for t, ready, *_ in scaler.seen if t < 0}
    assert sizes[-300] == 1
    assert sizes[-240] == 3  # the schedule's second window, Ready at once
    assert sizes[-180] == 1
    # Neither the lead-in's resizes nor its GPU time count.
    assert result.scale_events == []
    plain = simulate(trace, Scripted([]), FleetConfig(H100, initial_replicas=1, warmup_s=300))
    assert result.gpu_seconds == pytest.approx(plain.gpu_seconds)
