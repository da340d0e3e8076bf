"""Builders of observations and a fake clock for the policy tests."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from tailguard.policy import Decision, Observation, PolicyConfig, PolicyState, decide
from tailguard.policy.window import Window

#: The rules other than the error budget's headroom, which ``test_budget`` covers (a fleet warmed
#: up on a varied load learns jumps from it and would hold for them).
CONFIG = PolicyConfig(
    min_replicas=1,
    max_replicas=16,
    ttft_slo_s=0.5,
    tpot_slo_s=0.05,
    goodput_target=0.99,
    budget_headroom=False,
)

# An 8B replica on an H100: about 7 ms per step plus 0.1 ms per sequence, 180 output tokens.
BASE_STEP_S = 0.007
PER_SEQ_S = 0.0001
OUTPUT_TOKENS = 180.0


def step_time(batch: float) -> float:
    return BASE_STEP_S + PER_SEQ_S * batch


def healthy(rate: float, replicas: int, *, now: float = 1000.0, **overrides: Any) -> Observation:
    """What Prometheus shows for ``rate`` req/s spread over ``replicas`` healthy replicas.

    The batch per replica solves N = λ·out·τ(N) for the step model above.
    """
    per = rate / replicas
    room = 1.0 - per * OUTPUT_TOKENS * PER_SEQ_S
    batch = 256.0 if room <= 0.05 else min(256.0, per * OUTPUT_TOKENS * BASE_STEP_S / room)
    step = step_time(batch)
    values: dict[str, Any] = {
        "sample_time": now - 5.0,
        "p99_ttft_s": 0.06,
        "p99_tpot_s": step * 1.2,
        "itl_mean_s": step,
        "ttft_within_slo": 1.0,
        "tpot_within_slo": 1.0,
        "goodput": 1.0,
        "request_rate": rate,
        "prompt_token_rate": rate * 200,
        "generation_token_rate": rate * OUTPUT_TOKENS,
        "running": batch * replicas,
        "waiting": 0.0,
        "kv_cache_usage": min(1.0, batch * 400 / 400_000),
        "preemption_rate": 0.0,
        "reporting_pods": replicas,
        "ready_replicas": replicas,
        "starting_replicas": 0,
        "pending_replicas": 0,
        "desired_replicas": replicas,
        "max_batch": 256,
        "rollout_in_progress": False,
    }
    values.update(overrides)
    return Observation(**values)


def breached(rate: float, replicas: int, *, now: float = 1000.0, **overrides: Any) -> Observation:
    """Overloaded replicas: the batch is full, requests queue and the tail is broken."""
    values: dict[str, Any] = {
        "p99_ttft_s": 2.4,
        "ttft_within_slo": 0.9,
        "goodput": 0.88,
        "waiting": 40.0 * replicas,
    }
    values.update(overrides)
    return healthy(rate, replicas, now=now, **values)


@dataclass
class Run:
    """A policy driven step by step on a fake clock, keeping its state as the operator would."""

    config: PolicyConfig = CONFIG
    now: float = 1000.0
    state: PolicyState = field(default_factory=PolicyState)
    replicas: int = 2
    max_batch: int = 256
    history: list[Decision] = field(default_factory=list)

    def step(self, obs: Observation, *, dt: float | None = None) -> Decision:
        obs = replace(
            obs, sample_time=self.now - 5.0, desired_replicas=self.replicas, max_batch=self.max_batch
        )
        decision, state = decide(self.config, self.state, obs, self.now)
        self.state = PolicyState.from_json(state.to_json())
        self.replicas = decision.replicas
        self.max_batch = decision.max_batch
        self.history.append(decision)
        self.now += self.config.interval_s if dt is None else dt
        return decision

    def hold(self, make: Any, seconds: float) -> Decision:
        """Repeat ``make(replicas)`` observations for ``seconds``; returns the last decision."""
        end = self.now + seconds
        decision = self.history[-1] if self.history else None
        while self.now < end:
            decision = self.step(make(self.replicas))
        assert decision is not None
        return decision


def warmed(replicas: int = 2) -> PolicyState:
    """A state that has seen light and heavy load on ``replicas``, so the step-time curve is
    learned."""
    run = Run(replicas=replicas)
    for rate in (10.0, 20.0, 30.0, 45.0, 60.0, 45.0, 30.0, 20.0) * 3:
        run.step(healthy(rate, run.replicas))
        run.replicas = replicas
    return run.state


def calm_window(now: float, *, elapsed: float = 15.0) -> Window:
    """The window of a decision at ``now`` with every SLO met and the fleet unsettled: what a step
    called alone, outside ``decide``, is given."""
    return Window(
        now=now,
        elapsed=elapsed,
        breaches=(),
        idle=False,
        ready_changed_at=None,
        same_fleet=False,
        settled=False,
        overspending=False,
    )
