"""The capacity model: the prompt cost fitted from (batch, prompt tokens, step) and the rate it
allows for prompt-heavy, balanced and decode-heavy mixes."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from tailguard.policy import PolicyState, decide
from tailguard.policy.capacity import (
    EMPTY_PREFILL_FIT,
    Batching,
    RequestMix,
    Slo,
    StepModel,
    capacity,
    implied_base,
    step_model,
    ttft_p99,
    update_fit,
    update_prefill_fit,
)
from tailguard.policy.observed import replica_figures
from tailguard.policy.types import PolicyConfig

from .helpers import CONFIG, healthy

ALPHA, BETA, GAMMA = 0.017, 0.0001, 0.00007  # a 70B FP8 replica on two H100s


def _mean_step(batch: float, prompt_per_s: float) -> float:
    """τ̄ solving τ̄ = α + β·N + γ·p·τ̄: the mean step with the prompts of ``prompt_per_s``."""
    return (ALPHA + BETA * batch) / (1.0 - GAMMA * prompt_per_s)


@dataclass(frozen=True)
class Mix:
    name: str
    prompt: float
    output: float


PROMPT_HEAVY = Mix("prompt-heavy", 2000.0, 30.0)
BALANCED = Mix("balanced", 600.0, 220.0)
DECODE_HEAVY = Mix("decode-heavy", 150.0, 500.0)


def _fit(mixes: list[Mix], loads: list[float]) -> StepModel:
    """The model fitted on exact observations of each mix at each share of the engine's time."""
    fit = (0.0, 0.0, 0.0, 0.0, 0.0)
    prefill = EMPTY_PREFILL_FIT
    floor: float | None = None
    for load in loads:
        for mix in mixes:
            # λ requests per second: λ·(out·τ_d/N + γP) = 1 at full load; here a share of it.
            batch = 10.0 + 150.0 * load
            rate = load / (mix.output * (ALPHA + BETA * batch) / batch + GAMMA * mix.prompt)
            step = _mean_step(batch, rate * mix.prompt)
            x = rate * mix.prompt * step
            fit = update_fit(fit, batch, step, 15.0)
            prefill = update_prefill_fit(prefill, batch, x, step, 15.0)
            base = implied_base(batch, step, x)
            floor = base if floor is None else min(floor, base)
    model = step_model(fit, ALPHA, prefill)
    assert model is not None
    return model


@pytest.mark.parametrize(
    ("mixes", "gamma_tolerance"),
    [
        # One mix: N and x rise together, so β and γ are told apart by the priors only; the
        # line for that mix (β + γ·P/out) is found all the same. Every figure carries the
        # priors' pull (one pair each against about a hundred faded ones): up to 12%.
        ([PROMPT_HEAVY], 0.12),
        ([BALANCED], None),
        ([DECODE_HEAVY], None),
        # A mix that varies from window to window determines both.
        ([PROMPT_HEAVY, DECODE_HEAVY], 0.05),
        ([PROMPT_HEAVY, BALANCED, DECODE_HEAVY], 0.05),
    ],
    ids=["prompt-heavy", "balanced", "decode-heavy", "two mixes", "three mixes"],
)
def test_the_fit_finds_the_step_line_of_every_mix_it_saw(
    mixes: list[Mix], gamma_tolerance: float | None
) -> None:
    model = _fit(mixes, [0.2, 0.4, 0.6, 0.8] * 30)
    if gamma_tolerance is not None:
        assert model.gamma == pytest.approx(GAMMA, rel=gamma_tolerance)
    for mix in mixes:
        fitted = model.for_mix(mix.prompt, mix.output)
        true_slope = BETA + GAMMA * mix.prompt / mix.output
        assert fitted.beta == pytest.approx(true_slope, rel=0.12), mix.name


def test_short_prompts_alone_leave_the_prompt_cost_at_the_prior() -> None:
    model = _fit([Mix("short", 20.0, 300.0)], [0.2, 0.5, 0.8] * 10)
    assert model.gamma == pytest.approx(ALPHA / 400.0, rel=0.5)
    assert not model.prefill_learned


def test_without_prompt_sums_the_fit_is_the_one_feature_line() -> None:
    fit = (0.0, 0.0, 0.0, 0.0, 0.0)
    for batch in (20.0, 60.0, 120.0) * 30:
        fit = update_fit(fit, batch, ALPHA + BETA * batch, 15.0)
    model = step_model(fit, ALPHA)
    assert model is not None
    assert model.gamma == 0.0
    assert model.beta == pytest.approx(BETA, rel=0.15)  # the prior pair pulls it up


@dataclass(frozen=True)
class Case:
    mix: Mix
    ttft_slo_s: float | None
    bound: str
    #: Prompts take at least (True) or less than (False) half the engine's time.
    prefill_bound: bool


CASES = [
    Case(PROMPT_HEAVY, None, "max batch", True),
    Case(PROMPT_HEAVY, 1.0, "TTFT SLO", False),
    Case(BALANCED, 1.0, "max batch", True),
    Case(DECODE_HEAVY, 1.0, "max batch", False),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.mix.name}-ttft-{c.ttft_slo_s}")
def test_capacity_is_one_over_decode_and_prefill_time(case: Case) -> None:
    model = StepModel(ALPHA, BETA, True, GAMMA, True)
    cap = capacity(
        model,
        RequestMix(case.mix.output, case.mix.prompt),
        Batching(256, 0.85),
        Slo(ttft_s=case.ttft_slo_s),
    )
    assert cap.bound == case.bound
    n = cap.batch
    expected = 1.0 / (case.mix.output * (ALPHA + BETA * n) / n + GAMMA * case.mix.prompt)
    assert cap.rate == pytest.approx(expected, rel=1e-9)
    # Never more than the prompts alone allow.
    assert cap.rate < 1.0 / (GAMMA * case.mix.prompt)
    assert (cap.prefill_share >= 0.5) is case.prefill_bound
    if case.ttft_slo_s is not None:
        assert ttft_p99(model, n, cap.rate, case.mix.prompt) <= 0.9 * case.ttft_slo_s + 1e-9
    if cap.bound == "TTFT SLO" or case.prefill_bound:
        assert cap.explain().startswith(
            f"bound by prefill: {case.mix.prompt:,.0f} prompt tokens/request at 14k"
        )


def test_without_prompt_tokens_a_prompt_costs_one_decode_step() -> None:
    model = StepModel(ALPHA, BETA, True, GAMMA, True)
    cap = capacity(
        model,
        RequestMix(30.0),
        Batching(256, 0.85),
        Slo(ttft_s=1.0),
        note="prefill cost not learned: no prompt token rate",
    )
    assert cap.rate == pytest.approx(cap.batch / (31.0 * (ALPHA + BETA * cap.batch)))
    assert cap.explain().endswith("prefill cost not learned: no prompt token rate")


def _prompt_heavy(rate: float, replicas: int) -> object:
    """Healthy replicas serving 2,000-token prompts (30 tokens out) on the test's 8B step line."""
    obs = healthy(rate, replicas)
    per = rate / replicas
    batch = 4.0
    step = (0.007 + 0.0001 * batch) / (1.0 - 0.00003 * per * 2000.0)
    return replace(
        obs,
        prompt_token_rate=rate * 2000.0,
        generation_token_rate=rate * 30.0,
        itl_mean_s=step,
        running=per * 30.0 * step * replicas,
    )


@pytest.mark.parametrize(
    ("missing", "says"),
    [
        ({}, "bound by prefill: 2,000 prompt tokens/request"),
        ({"prompt_token_rate": None}, "prefill cost not learned: no prompt token rate"),
        ({"itl_mean_s": None}, "prefill cost from the prior: no inter-token latency"),
    ],
    ids=["all signals", "no prompt rate", "no ITL"],
)
def test_the_reason_says_what_bounds_capacity_and_what_is_missing(
    missing: dict[str, None], says: str
) -> None:
    config = PolicyConfig(min_replicas=1, max_replicas=64, ttft_slo_s=0.5)
    state = PolicyState()
    decision = None
    for i in range(30):
        obs = replace(_prompt_heavy(40.0, 8), sample_time=1000.0 + 15 * i - 5, desired_replicas=8, **missing)
        decision, state = decide(config, state, obs, 1000.0 + 15 * i)
        state = PolicyState.from_json(state.to_json())
    assert decision is not None
    assert says in decision.reason, decision.reason


def test_prompt_heavy_capacity_is_far_below_the_decode_only_reading() -> None:
    config = PolicyConfig(min_replicas=1, max_replicas=64, ttft_slo_s=0.5)
    with_prompts, without = PolicyState(), PolicyState()
    d1 = d2 = None
    for i in range(30):
        obs = replace(_prompt_heavy(40.0, 8), sample_time=1000.0 + 15 * i - 5, desired_replicas=8)
        d1, with_prompts = decide(config, with_prompts, obs, 1000.0 + 15 * i)
        d2, without = decide(config, without, replace(obs, prompt_token_rate=None), 1000.0 + 15 * i)
    assert d1 is not None
    assert d2 is not None
    assert d1.capacity_per_replica is not None
    assert d2.capacity_per_replica is not None
    # 2,000 prompt tokens at 30 µs each: no more than 16.7 req/s whatever the batch. After seven
    # minutes of one mix the fitted prompt cost is still pulled low by its prior (by about a
    # quarter here), and no TTFT model caps it: the bound allows that, not more.
    assert d1.capacity_per_replica < 1.5 / (0.00003 * 2000.0)
    assert d2.capacity_per_replica > 3.0 * d1.capacity_per_replica


def test_derive_reads_prompt_tokens_per_request_and_per_step() -> None:
    obs = healthy(20.0, 2)
    derived = replica_figures(obs)
    assert derived.prompt_tokens == pytest.approx(200.0)
    assert derived.step_s is not None
    assert derived.prefill_tokens == pytest.approx(20.0 * 200.0 / 2 * derived.step_s)
    assert replica_figures(replace(obs, prompt_token_rate=None)).prompt_tokens is None
    assert replica_figures(replace(obs, prompt_token_rate=float("nan"))).prefill_tokens is None
    assert replica_figures(replace(obs, prompt_token_rate=-1.0)).prompt_tokens is None


def test_the_prompt_fields_survive_the_annotation_and_an_old_one_loads() -> None:
    state = PolicyState(prefill_fit=(1.0, 2.0, 3.0, 4.0), prompt_tokens=1234.5)
    assert PolicyState.from_json(state.to_json()) == state
    old = PolicyState.from_json('{"version": 1, "fit": [1, 2, 3, 4, 5], "output_tokens": 30}')
    assert old.prefill_fit == EMPTY_PREFILL_FIT
    assert old.prompt_tokens is None
    bad = PolicyState.from_json('{"prefill_fit": [1, 2, "x", 4], "prompt_tokens": "many"}')
    assert bad.prefill_fit == EMPTY_PREFILL_FIT
    assert bad.prompt_tokens is None
    short = PolicyState.from_json('{"prefill_fit": [1, 2, 3, 4, 5]}')
    assert short.prefill_fit == EMPTY_PREFILL_FIT


def test_a_decision_with_the_helpers_config_still_sizes() -> None:
    decision, _ = decide(CONFIG, PolicyState(), healthy(50.0, 4), 1000.0)
    assert decision.capacity_per_replica is not None
    assert decision.capacity_per_replica > 0
