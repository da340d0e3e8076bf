"""The replica model on its own: scheduling, metrics and the decode fast path."""

from __future__ import annotations

import math

import pytest

from tailguard.contract import TTFT_BUCKETS_S, histogram_quantile
from tailguard.sim.engine import Engine, Histogram
from tailguard.sim.profiles import PROFILES, get_profile

H100 = get_profile("h100-llama3-8b")


def test_histogram_uses_le_semantics_and_cumulates() -> None:
    h = Histogram((0.1, 0.5))
    for v in (0.1, 0.2, 0.5, 3.0):
        h.observe(v)
    assert h.cumulative() == ((0.1, 1), (0.5, 3), (math.inf, 4))
    assert h.count == 4
    assert h.sum == pytest.approx(3.8)


def test_one_request_goes_through_prefill_then_decode() -> None:
    done: list[tuple[int, float, float, float]] = []
    engine = Engine(H100, on_finish=lambda *args: done.append(args))
    engine.add_request(7, 0.0, 200, 100)
    engine.run_until_idle()
    ((rid, ttft, tpot, end),) = done
    assert rid == 7
    assert 0 < ttft < 0.05
    assert tpot == pytest.approx(H100.step_time(1, 1, 300), rel=0.05)
    assert end == pytest.approx(ttft + 99 * tpot, rel=1e-6)
    snap = engine.snapshot()
    assert snap.requests_finished == 1
    assert snap.prompt_tokens == 200
    assert snap.generation_tokens == 100
    assert snap.running == 0
    assert snap.waiting == 0


def test_prefill_time_runs_from_the_scheduling_step_to_the_first_token() -> None:
    engine = Engine(H100)
    engine.add_request(1, 0.0, 2000, 5)
    engine.advance_to(0.5)
    # A request that arrives mid-step is scheduled at the next step, after a queue wait.
    engine.add_request(2, 0.5, 2000, 50)
    engine.add_request(3, 0.5 + 1e-4, 1000, 50)
    engine.run_until_idle()
    alone = H100.step_time(1, 2000, 0.0)
    # The first prompt had its step to itself; the next two shared one (3,000 tokens, and a
    # budget of 8,192 fits both), and each counts that step.
    shared = H100.step_time(2, 3000, 0.0)
    assert engine.prefill.count == 3
    assert engine.prefill.sum == pytest.approx(alone + 2 * shared, rel=0.02)
    assert engine.queue.sum < engine.prefill.sum


def test_max_num_seqs_caps_the_batch_and_queues_the_rest() -> None:
    engine = Engine(H100, max_num_seqs=4)
    for i in range(10):
        engine.add_request(i, 0.0, 50, 500)
    engine.advance_to(0.5)
    assert engine.num_running == 4
    assert engine.num_waiting == 6


def test_a_full_kv_cache_preempts_the_newest_request() -> None:
    engine = Engine(H100, kv_capacity_tokens=3000)
    for i in range(4):
        engine.add_request(i, 0.0, 500, 1000)
    engine.run_until_idle()
    assert engine.preemptions > 0
    assert engine.requests_finished == 4


def test_a_request_that_can_never_fit_is_rejected() -> None:
    done: list[float] = []
    engine = Engine(H100, on_finish=lambda _r, ttft, _t, _e: done.append(ttft))
    engine.add_request(1, 0.0, H100.max_model_len, 10)
    assert done == [math.inf]
    assert engine.snapshot().requests_aborted == 1


def test_abort_all_reports_every_request() -> None:
    done: list[int] = []
    engine = Engine(H100, on_finish=lambda rid, *_: done.append(rid))
    for i in range(3):
        engine.add_request(i, 0.0, 100, 1000)
    engine.advance_to(0.2)
    assert engine.abort_all() == 3
    assert sorted(done) == [0, 1, 2]
    assert engine.idle


def test_ttft_buckets_are_the_contracts() -> None:
    engine = Engine(H100)
    engine.add_request(0, 0.0, 100, 5)
    engine.run_until_idle()
    snap = engine.snapshot()
    assert [b for b, _ in snap.ttft[:-1]] == list(TTFT_BUCKETS_S)
    assert histogram_quantile(0.5, snap.ttft) < 0.1


def test_advancing_in_small_or_large_steps_gives_the_same_result() -> None:
    def run(step: float) -> tuple[int, float]:
        engine = Engine(H100)
        for i in range(50):
            engine.add_request(i, 0.0, 100 + i, 50 + 7 * i)
        t = 0.0
        while not engine.idle:
            t += step
            engine.advance_to(t)
        return engine.requests_finished, engine.busy_until

    fine, coarse = run(0.003), run(5.0)
    assert fine[0] == coarse[0] == 50
    assert fine[1] == pytest.approx(coarse[1], rel=1e-9)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_profile_serves_a_small_load(name: str) -> None:
    engine = Engine(PROFILES[name])
    for i in range(20):
        engine.advance_to(i * 0.5)
        engine.add_request(i, i * 0.5, 300, 100)
    engine.run_until_idle()
    assert engine.requests_finished == 20


def test_exposition_speaks_vllms_metric_names() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from tailguard.sim.exposition import render

    engine = Engine(H100)
    for i in range(5):
        engine.add_request(i, 0.0, 100, 20)
    engine.run_until_idle()
    text = render(engine.snapshot(), model_name="chat")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert "vllm:time_to_first_token_seconds" in families
    assert "vllm:num_requests_running" in families
    samples = [s for f in families.values() for s in f.samples]
    stop = [
        s.value
        for s in samples
        if s.name == "vllm:request_success_total" and s.labels["finished_reason"] == "stop"
    ]
    assert stop == [5]
    ttft = families["vllm:time_to_first_token_seconds"]
    count = next(s.value for s in ttft.samples if s.name.endswith("_count"))
    assert count == 5
    assert all(s.labels["model_name"] == "chat" for s in ttft.samples)
    prefill = families["vllm:request_prefill_time_seconds"]
    assert next(s.value for s in prefill.samples if s.name.endswith("_count")) == 5
