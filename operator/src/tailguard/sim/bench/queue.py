"""The prefill queue model against the engine: one replica under a Poisson load, its measured p99
TTFT beside what :func:`~tailguard.policy.capacity.ttft_p99` reads at the same load
(``python -m tailguard.sim.bench.queue``).

The policy sizes with a throughput capacity and corrects it by what the SLO shows; the modelled
TTFT bound is not applied (see ``learning.capacity_of``). This yardstick says how far that model
sits from the engine for a mix, so a change to it is measured, not guessed. The model is given
the profile's own step line (base step, per sequence, per prompt token) and the decode batch
Little's law gives at the rate, so what is printed is the queue model's error alone, not the
learning's.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tailguard.policy.capacity import StepModel, ttft_p99
from tailguard.sim import synthetic
from tailguard.sim.fleet import simulate
from tailguard.sim.oracle import SloTarget
from tailguard.sim.policies.hindsight import Fixed
from tailguard.sim.profiles import PROFILES, EngineProfile, get_profile
from tailguard.sim.runner import Scenario


@dataclass(frozen=True)
class QueueRow:
    """One rate: the engine's p99 TTFT and the model's."""

    rate: float
    #: Share of the engine's time prefilling prompts, as the model reads it.
    occupancy: float
    measured_s: float
    modelled_s: float

    @property
    def ratio(self) -> float:
        """Measured over modelled (below 1: the model reads a longer tail than the engine's; infinite
        where the model reads saturation)."""
        return self.measured_s / self.modelled_s if 0 < self.modelled_s < math.inf else math.inf


def profile_model(profile: EngineProfile) -> StepModel:
    """The profile's step as the policy's line: base, per sequence, per prompt token."""
    return StepModel(profile.base_step_s, profile.per_seq_s, True, profile.per_token_s, True)


def decode_batch(model: StepModel, rate: float, prompt_tokens: float, output_tokens: float) -> float:
    """The mean decode batch at ``rate`` by Little's law: requests × output tokens × the step,
    stretched by the prompts' share of the engine."""
    prefill = min(0.95, rate * model.gamma * prompt_tokens)
    batch = 0.0
    for _ in range(60):
        batch = rate * output_tokens * model.step(batch) / (1.0 - prefill)
    return batch


def measure(
    mix: synthetic.TokenMix, profile: EngineProfile, rate: float, *, duration_s: float, seed: int
) -> QueueRow:
    """One replica serving ``rate`` requests per second of ``mix`` for ``duration_s``."""
    trace = synthetic.poisson(rate, duration_s, mix=mix, seed=seed)
    scenario = Scenario(
        trace=trace, profile=profile, slo=SloTarget(1.0, None, 0.99), max_replicas=1, seed=seed
    )
    result = simulate(trace, Fixed("one replica", 1), scenario.fleet(1))
    ttft = result.ttft[np.isfinite(result.ttft)]
    prompt = float(np.mean(trace.input_tokens))
    model = profile_model(profile)
    batch = decode_batch(model, rate, prompt, float(np.mean(trace.output_tokens)))
    return QueueRow(
        rate=rate,
        occupancy=rate * model.gamma * prompt,
        measured_s=float(np.quantile(ttft, 0.99)) if len(ttft) else math.inf,
        modelled_s=ttft_p99(model, batch, rate, prompt),
    )


def table(mix: str, profile: str, rows: Sequence[QueueRow]) -> str:
    """A markdown table of the rows."""
    lines = [
        f"{mix} on {profile}: one replica, Poisson arrivals",
        "| req/s | prefill occupancy | p99 TTFT measured | modelled | measured ÷ modelled |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        modelled = f"{row.modelled_s * 1e3:,.0f} ms" if math.isfinite(row.modelled_s) else "saturated"
        ratio = f"{row.ratio:.2f}" if math.isfinite(row.ratio) else "-"
        lines.append(
            f"| {row.rate:g} | {row.occupancy:.2f} | {row.measured_s * 1e3:,.0f} ms | {modelled} | {ratio} |"
        )
    return "\n".join(lines)


def _rates(text: str) -> list[float]:
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text}") from None
    if not rates or any(not math.isfinite(r) or r <= 0 for r in rates):
        raise argparse.ArgumentTypeError(f"rates must be positive numbers: {text}")
    return rates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tailguard.sim.bench.queue",
        description="One replica under a Poisson load: its measured p99 TTFT beside the prefill "
        "queue model's at each rate.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--mix", default="code", help=f"token mix, from: {', '.join(synthetic.MIXES)}")
    parser.add_argument(
        "--profile", default="h100-llama3-8b", help=f"engine profile, from: {', '.join(PROFILES)}"
    )
    parser.add_argument(
        "--rates", type=_rates, default=[2.0, 6.0, 10.0], help="requests per second, comma-separated"
    )
    parser.add_argument("--duration-s", type=float, default=600.0, help="simulated seconds per rate")
    parser.add_argument("--seed", type=int, default=1, help="seed of each trace")
    args = parser.parse_args(argv)
    if args.mix not in synthetic.MIXES:
        parser.error(f"unknown mix {args.mix} (from: {', '.join(synthetic.MIXES)})")
    if args.profile not in PROFILES:
        parser.error(f"unknown profile {args.profile} (from: {', '.join(PROFILES)})")
    if not math.isfinite(args.duration_s) or args.duration_s < 10:
        parser.error("--duration-s must be at least 10")
    mix, profile = synthetic.MIXES[args.mix], get_profile(args.profile)
    rows = [measure(mix, profile, rate, duration_s=args.duration_s, seed=args.seed) for rate in args.rates]
    print(table(args.mix, args.profile, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
