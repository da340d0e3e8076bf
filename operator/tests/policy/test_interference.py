"""Prompt chunks in the decode steps: how far they lift p99 TPOT above the mean step, and the
capacity a TPOT SLO then allows."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import pytest

from tailguard.policy import PolicyState, decide
from tailguard.policy.capacity import (
    INTERFERENCE,
    Batching,
    Capacity,
    RequestMix,
    Slo,
    StepModel,
    capacity,
    interference_s,
    step_model,
)
from tailguard.policy.types import PolicyConfig

from .helpers import healthy

# An 8B replica on one H100: a 7 ms base step, 0.1 ms per sequence, 50k prompt tokens per second.
MODEL = StepModel(0.007, 0.0001, True, 1.0 / 50_000, True)


@pytest.mark.parametrize(
    ("rate", "prompt", "expected"),
    [
        (0.0, 2000.0, 0.0),
        (5.0, 0.0, 0.0),
        # S = 40 ms, ρ = 0.2: 0.5 · 40 ms · √0.2 / 0.8²
        (5.0, 2000.0, INTERFERENCE * 0.04 * math.sqrt(0.2) / 0.8**2),
        (25.0, 2000.0, math.inf),  # the prompts alone need the whole engine
    ],
    ids=["no load", "no prompts", "one fifth prefilling", "saturated"],
)
def test_interference_is_the_prefill_of_one_prompt_scaled_by_the_occupancy(
    rate: float, prompt: float, expected: float
) -> None:
    got = interference_s(MODEL, rate, prompt)
    assert got == pytest.approx(expected), f"{got * 1e3:.2f} ms, expected {expected * 1e3:.2f} ms"


def test_interference_grows_faster_than_the_load() -> None:
    lifts = [interference_s(MODEL, rate, 2000.0) for rate in (1.0, 2.0, 4.0, 8.0)]
    ratios = [b / a for a, b in itertools.pairwise(lifts)]
    # √ρ alone would give 1.41 per doubling; the (1 − ρ)³ makes each doubling dearer than the last.
    assert all(r > math.sqrt(2.0) for r in ratios), ratios
    assert ratios == sorted(ratios), ratios


@dataclass(frozen=True)
class Mix:
    name: str
    prompt: float
    output: float
    #: The TPOT-bound capacity with interference, as a share of the one without: at most this.
    at_most: float
    #: ... and at least this.
    at_least: float


MIXES = [
    # Code completion: 2,000-token prompts, 30-token answers. A prompt's prefill (40 ms) is most
    # of a 50 ms SLO; the mean step alone would allow several times the rate.
    Mix("prompt-heavy", 2000.0, 30.0, 0.5, 0.0),
    # Chat: prompts of 600 tokens (12 ms) between 220-token answers barely move the tail.
    Mix("balanced", 600.0, 220.0, 1.0, 0.8),
    # Short prompts, long answers: nothing changes.
    Mix("decode-heavy", 150.0, 500.0, 1.0, 0.97),
]


def _tpot_capacity(mix: Mix, model: StepModel) -> Capacity:
    """One replica of ``mix`` under a 50 ms TPOT SLO, with a 2 ms learned offset."""
    return capacity(model, RequestMix(mix.output, mix.prompt), Batching(256, 0.85), Slo(0.05, 0.002))


@pytest.mark.parametrize("mix", MIXES, ids=lambda m: m.name)
def test_a_tpot_slo_allows_less_where_prompts_interfere(mix: Mix) -> None:
    with_prompts = _tpot_capacity(mix, MODEL).rate
    # What the mean step alone allows (the prompts' share of each step and nothing more): the
    # largest batch whose mean step and offset fit 90% of the SLO, at that batch's rate.
    line = MODEL.for_mix(mix.prompt, mix.output)
    batch = min(0.85 * 256, line.batch_for_step(0.9 * 0.05 - 0.002))
    mean_only = batch / (mix.output * line.step(batch))
    assert with_prompts <= mean_only * mix.at_most + 1e-9, (with_prompts, mean_only)
    assert with_prompts >= mean_only * mix.at_least - 1e-9, (with_prompts, mean_only)


def test_the_tpot_bound_keeps_the_modelled_p99_within_the_budget() -> None:
    # The simulator's 8B H100 replica as it is: 7.4 ms a step, 30 µs a prompt token.
    h100 = StepModel(0.0074, 0.000055, True, 0.00003, True)
    cap = _tpot_capacity(MIXES[0], h100)
    assert cap.bound == "TPOT SLO"
    p99 = cap.step_s + 0.002 + interference_s(h100, cap.rate, 2000.0)
    assert p99 == pytest.approx(0.9 * 0.05, rel=1e-6), f"{p99 * 1e3:.2f} ms"
    # One such replica under Poisson arrivals of this mix measured a p99 TPOT of 36 ms at 4 req/s
    # and 58 ms at 6: 45 ms falls between them.
    assert 4.0 < cap.rate < 6.0, cap.rate


def test_the_reason_says_what_the_prompt_chunks_add_to_p99_tpot() -> None:
    cap = _tpot_capacity(MIXES[0], MODEL)
    lift_ms = interference_s(MODEL, cap.rate, 2000.0) * 1e3
    assert f"prompt chunks add {lift_ms:.0f} ms to p99 TPOT" in cap.explain(), cap.explain()
    assert lift_ms > 20.0


def test_a_prompt_longer_than_a_step_stalls_each_step_by_one_budget_only() -> None:
    # Same occupancy (ρ = 0.2), prompts 24 times as long: each step carries a budget's worth.
    short = interference_s(MODEL, 5.0, 2000.0)
    long = interference_s(MODEL, 5.0 / 24.0, 48_000.0)
    assert long == pytest.approx(short * 2048.0 / 2000.0), (short, long)


def test_the_learned_offset_leaves_out_what_the_interference_explains() -> None:
    """Windows whose p99 TPOT is the mean step plus the modelled interference teach no offset:
    counting the interference twice would halve the capacity of every prompt-heavy service."""
    config = PolicyConfig(min_replicas=1, max_replicas=64, ttft_slo_s=1.0, tpot_slo_s=0.05)
    state = PolicyState()
    lifts = []
    for i in range(40):
        now = 1000.0 + 15 * i
        per = 3.5  # requests per second per replica, 2,000 prompt tokens each
        step = (0.007 + 0.0001 * 4.0) / (1.0 - 0.00003 * per * 2000.0)
        known = step_model(state.fit, state.step_floor_s, state.prefill_fit)
        lift = interference_s(known, per, 2000.0) if known is not None else 0.0
        lifts.append(lift)
        obs = replace(
            healthy(8 * per, 8),
            sample_time=now - 5.0,
            prompt_token_rate=8 * per * 2000.0,
            generation_token_rate=8 * per * 30.0,
            itl_mean_s=step,
            running=per * 30.0 * step * 8,
            p99_tpot_s=step + lift + 0.001,
            desired_replicas=8,
        )
        _decision, state = decide(config, state, obs, now)
    assert lifts[-1] > 0.005, lifts[-1]  # the interference is most of the gap ...
    assert state.tpot_offset_s is not None
    assert state.tpot_offset_s < 0.004, state.tpot_offset_s  # ... and the offset the rest


def _code_completion(model: StepModel, *, tpot_slo_s: float | None = 0.05, max_batch: int = 256) -> Capacity:
    """One replica of 2,000-token prompts with 30-token answers, a TTFT SLO of 1 s."""
    return capacity(
        model,
        RequestMix(30.0, 2000.0),
        Batching(max_batch, 0.85),
        Slo(tpot_slo_s, 0.002, saturation_ttft_s=1.0),
    )


def test_misses_grow_gently_above_an_interference_bound_until_the_prompts_saturate() -> None:
    """Above a TPOT bound set by the prompts' interference the tail stretches: at the capacity 1%
    misses, more above it, every request from the load where a TTFT of 1 s breaks on."""
    cap = _code_completion(StepModel(0.0074, 0.000055, True, 0.00003, True))
    curve = cap.misses
    assert curve is not None
    assert curve.share(1.0) == pytest.approx(0.01)
    shares = [curve.share(y) for y in (0.5, 1.0, 1.2, 1.4, 2.0)]
    assert shares == sorted(shares), shares
    # One such replica under Poisson arrivals measured 1.4% / 2.6% / 4.0% missed at 6 / 7 / 8
    # req/s: above the capacity the curve reads more (the mean step grows with the batch too),
    # at most five times as much, and far from a cliff's hundredfold.
    for rate, measured in ((6.0, 0.0137), (7.0, 0.0263), (8.0, 0.0398)):
        share = curve.share(rate / cap.rate)
        assert measured <= share <= 5.0 * measured, (rate, share)
    # TTFT broke there for more than 1% of the requests at 12 req/s (prompts alone fill the
    # engine at 1/(γ·P) = 16.7); the curve ends well before, a margin below the modelled limit.
    assert 1.5 < curve.saturation < 12.0 / cap.rate / 1.2, curve.saturation
    assert curve.share(curve.saturation) == 1.0


@pytest.mark.parametrize(
    ("tpot_slo_s", "max_batch"),
    [
        pytest.param(None, 64, id="no TPOT SLO: the batch cap binds"),
        pytest.param(0.05, 2, id="a tiny batch cap"),
    ],
)
def test_a_hard_bound_has_no_miss_curve(tpot_slo_s: float | None, max_batch: int) -> None:
    cap = _code_completion(MODEL, tpot_slo_s=tpot_slo_s, max_batch=max_batch)
    assert cap.bound != "TPOT SLO"
    assert cap.misses is None


@pytest.mark.parametrize("tpot_slo_s", [0.03, 0.05], ids=["batch of one", "code completion"])
def test_the_miss_curve_reads_one_percent_at_the_capacity_sizing_uses(tpot_slo_s: float) -> None:
    """Where even a batch of one misses the TPOT SLO in the model (several times the 1% at 30 ms),
    the capacity is held at that batch and the curve is read from it: 1% there, the model's
    growth above it. A softened hold then does not flip to the unsoftened one as the learned
    model wobbles across that edge."""
    cap = _code_completion(StepModel(0.0074, 0.000055, True, 0.00003, True), tpot_slo_s=tpot_slo_s)
    curve = cap.misses
    assert curve is not None
    assert curve.share(1.0) == pytest.approx(0.01, rel=1e-6)
    shares = [curve.share(y) for y in (1.0, 1.2, 1.5, 2.0)]
    assert shares == sorted(shares), shares
    assert shares[-1] > 0.02, "the growth above the capacity is kept"
    assert curve.share(curve.saturation) == 1.0


def test_a_bound_whose_mean_step_misses_stays_a_cliff() -> None:
    """At 12 ms the mean step alone breaks the SLO at a batch of one: every request misses there,
    and the curve says so."""
    curve = _code_completion(StepModel(0.0074, 0.000055, True, 0.00003, True), tpot_slo_s=0.012).misses
    assert curve is not None
    assert curve.share(1.0) == 1.0
