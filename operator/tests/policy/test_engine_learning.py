"""What the step-time curve learns from, and what it must not: windows that mix fleet sizes, and
the mean prefill time that tells the prompt cost a light load hides."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tailguard.policy import Observation, PolicyConfig, PolicyState, decide
from tailguard.policy.capacity import step_model

from .helpers import BASE_STEP_S, CONFIG, Run, healthy

# Code completion on an 8B replica: 7.4 ms a step, 0.1 ms a sequence, 30 µs a prompt token
# (33k prompt tokens/s), 2,000-token prompts and 30 tokens out.
ALPHA, BETA, GAMMA = 0.0074, 0.0001, 0.00003
PROMPT, OUTPUT = 2000.0, 30.0


def _fit_weight(state: PolicyState) -> float:
    return state.fit[0]


def test_windows_that_mix_fleet_sizes_teach_no_curve() -> None:
    run = Run(config=replace(CONFIG, max_replicas=32), replicas=14)
    run.hold(lambda n: healthy(140.0, 14), 600.0)
    floor, weight = run.state.step_floor_s, _fit_weight(run.state)
    assert floor is not None
    # The fleet fell to one replica: for a rate window the sums still hold the work of the
    # fourteen that served it, and divided by the one reporting now they put fourteen replicas'
    # batch on one step.
    run.replicas = 1
    for _ in range(4):
        run.step(healthy(140.0, 14, reporting_pods=1, ready_replicas=1))
    assert run.state.step_floor_s == floor
    assert _fit_weight(run.state) == weight
    # Once one replica served a whole window, its windows teach again.
    run.hold(lambda n: healthy(10.0, 1), 180.0)
    assert _fit_weight(run.state) > 0.9 * weight
    assert run.state.step_floor_s == pytest.approx(floor, rel=0.05)


def test_a_curve_untaught_while_the_fleet_keeps_changing_learns_from_the_windows_mean_fleet() -> None:
    # A load rising a replica's worth every minute: the ready count changes within every rate
    # window, so no window is one fleet's. Each window's sums hold the work of the replicas that
    # served it, on average over it; per replica, the same batch and step throughout.
    run = Run(config=replace(CONFIG, max_replicas=64), replicas=4)
    per = healthy(10.0, 1)
    assert per.running is not None
    window = CONFIG.rate_window_s
    start = run.now
    weights = []
    pairs = []

    def fleet_at(t: float) -> int:
        return 4 + max(0, int((t - start) // 60.0))

    while run.now < start + 1200.0:
        now = run.now - 5.0  # the sample's time
        ready = fleet_at(now)
        served = sum(fleet_at(now - window + 15.0 * (i + 1)) for i in range(8)) / 8.0
        obs = healthy(10.0 * ready, ready)
        run.replicas = ready
        before = run.state.fit
        run.step(
            replace(
                obs,
                request_rate=10.0 * served,
                prompt_token_rate=10.0 * served * 200,
                generation_token_rate=(obs.generation_token_rate or 0.0) / ready * served,
            )
        )
        if before != run.state.fit and run.now - start > 120.0:
            # the pair this window added: the sums faded by the elapsed time, and one pair more
            fade = (run.state.fit[0] - 1.0) / before[0]
            pairs.append(run.state.fit[1] - fade * before[1])
        weights.append((run.now - start, _fit_weight(run.state)))
    # The first minute's windows teach (the fleet found at the start served them), then nothing
    # for ten minutes...
    first = next(w for t, w in weights if t >= 120.0)
    assert max(w for t, w in weights if t <= 600.0) == pytest.approx(first)
    # ...then a mixed window teaches (one per ten minutes while none is one fleet's), at the batch
    # a replica ran, not that batch spread over the replicas reporting at the window's end.
    assert len(pairs) == 1
    assert pairs[0] == pytest.approx(per.running, rel=0.02)
    assert run.state.step_floor_s == pytest.approx(BASE_STEP_S, rel=0.1)


def _code_load(rate: float, replicas: int, *, prefill_time: bool) -> Observation:
    """Light code-completion load on the module's step line; the prefill time when asked."""
    per = rate / replicas
    prompt_per_s = per * PROMPT
    # A few decodes in flight; the mean step carries the prompt tokens arriving meanwhile.
    batch = 0.2
    step = (ALPHA + BETA * batch) / (1.0 - GAMMA * prompt_per_s)
    # One prompt's step: the decodes, the prompt, and what arrived while it ran.
    prefill = (ALPHA + BETA * batch + GAMMA * PROMPT) / (1.0 - GAMMA * prompt_per_s)
    return replace(
        healthy(rate, replicas),
        prompt_token_rate=rate * PROMPT,
        generation_token_rate=batch / step * replicas,
        itl_mean_s=step,
        running=batch * replicas,
        prefill_time_mean_s=prefill if prefill_time else None,
    )


def _learn(prefill_time: bool) -> tuple[PolicyState, str]:
    config = PolicyConfig(min_replicas=1, max_replicas=64, ttft_slo_s=1.0, budget_headroom=False)
    state = PolicyState()
    reason = ""
    for i in range(40):
        now = 1000.0 + 15 * i
        obs = replace(_code_load(4.0, 8, prefill_time=prefill_time), sample_time=now - 5, desired_replicas=8)
        decision, state = decide(config, state, obs, now)
        state = PolicyState.from_json(state.to_json())
        reason = decision.reason
    return state, reason


def test_the_prefill_time_teaches_the_prompt_cost_a_light_load_hides() -> None:
    # Half a request a second per replica: about 30 prompt tokens in a mean step, too few for
    # the inter-token latency to show what a prompt costs.
    hidden, reason = _learn(prefill_time=False)
    assert "prefill cost from the prior: few prompt tokens seen" in reason
    learned, reason = _learn(prefill_time=True)
    assert "from the prior" not in reason, reason
    assert learned.prompt_cost_s == pytest.approx(GAMMA, rel=0.1)
    assert hidden.prompt_cost_s is None
    model = step_model(learned.fit, learned.step_floor_s, learned.prefill_fit, learned.prompt_cost_s)
    assert model is not None
    assert model.prefill_learned
    assert model.gamma == pytest.approx(GAMMA, rel=0.1)
    prior = step_model(hidden.fit, hidden.step_floor_s, hidden.prefill_fit)
    assert prior is not None
    # The prior's cost (a base step per 400 tokens) is the cheaper one by half.
    assert 1.0 / prior.gamma > 1.5 / GAMMA
