"""The max-batch lever: tailguard with ``--max-num-seqs`` tuning against the same policy with it
switched off, side by side on workloads where the cap matters (``make bench-lever``).

Each workload is a simulated hour of a diurnal load (a day compressed into the hour, ±60%) on an
8B or a 70B replica, after the usual five-minute lead-in. The table prints attainment, GPU-hours,
the lower bound and every max-batch change the policy made.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing import Pool

from tailguard.sim import synthetic
from tailguard.sim.bench.catalogue import HOUR, WARMUP_S
from tailguard.sim.bench.choices import check_jobs, chosen
from tailguard.sim.oracle import SloTarget
from tailguard.sim.profiles import get_profile
from tailguard.sim.report import summarise
from tailguard.sim.runner import Scenario, run


@dataclass(frozen=True)
class LeverCase:
    key: str
    describe: str
    profile: str
    mix: synthetic.TokenMix
    mean_rate: float
    slo: SloTarget
    #: ``--max-num-seqs`` the replicas start with.
    max_batch: int


CASES = (
    LeverCase(
        "cap-binds",
        "8B, chat mix, started at --max-num-seqs 32: the cap binds with TPOT (50 ms) to spare",
        "h100-llama3-8b",
        synthetic.CHAT,
        60.0,
        SloTarget(ttft_s=1.0, tpot_s=0.05, goodput=0.99),
        32,
    ),
    LeverCase(
        "tpot-bound",
        "70B FP8 on 2×H100, chat mix, TPOT 75 ms (a bucket edge), started at 256",
        "h100x2-llama3-70b-fp8",
        synthetic.CHAT,
        40.0,
        SloTarget(ttft_s=1.0, tpot_s=0.075, goodput=0.99),
        256,
    ),
    LeverCase(
        "tpot-between-buckets",
        "8B, decode-heavy mix, TPOT 15 ms (inside vLLM's 10-25 ms bucket), started at 256",
        "h100-llama3-8b",
        synthetic.DECODE_HEAVY,
        80.0,
        SloTarget(ttft_s=1.0, tpot_s=0.015, goodput=0.99),
        256,
    ),
)


@dataclass(frozen=True)
class LeverRun:
    key: str
    tuning: bool
    attainment: float
    gpu_hours: float
    bound_gpu_hours: float
    #: ``(time, from, to)`` of every max-batch change.
    changes: tuple[tuple[float, int, int], ...]


def run_case(case: LeverCase, tuning: bool, seed: int) -> LeverRun:
    """One hour of the case's load through tailguard, with or without max-batch tuning."""
    trace = synthetic.diurnal(
        case.mean_rate, HOUR, amplitude=0.6, period_s=HOUR, mix=case.mix, seed=seed, lead_s=WARMUP_S
    )
    scenario = Scenario(
        trace=trace,
        profile=get_profile(case.profile),
        slo=case.slo,
        max_replicas=32,
        seed=seed,
        warmup_s=WARMUP_S,
        max_batch=case.max_batch,
        settings={"tailguard": {"max_batch_tuning": "true" if tuning else "false"}},
    )
    result = run(scenario, ["tailguard"], progress=False)
    summary = summarise(result.runs[0], scenario.slo)
    return LeverRun(
        case.key,
        tuning,
        summary.attainment,
        summary.gpu_hours,
        result.lower_bound_gpu_hours,
        tuple(result.runs[0].max_batch_changes),
    )


def _job(args: tuple[str, bool, int]) -> LeverRun:
    key, tuning, seed = args
    return run_case(next(c for c in CASES if c.key == key), tuning, seed)


def table(runs: Sequence[LeverRun], target: dict[str, float]) -> str:
    """The runs as a Markdown table, tuning on and off side by side per workload."""
    lines = [
        "| workload | max-batch tuning | attainment | GPU-h | × bound | max-batch changes |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in runs:
        miss = " !" if r.attainment < target[r.key] else ""
        changes = ", ".join(f"{old} → {new} at {t / 60:.0f} min" for t, old, new in r.changes) or "none"
        lines.append(
            f"| {r.key} | {'on' if r.tuning else 'off'} | {r.attainment:.4f}{miss} | {r.gpu_hours:.2f} | "
            f"{r.gpu_hours / r.bound_gpu_hours:.2f} | {changes} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tailguard.sim.bench.lever",
        description="tailguard with and without max-batch tuning on workloads where the cap matters",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of every trace")
    parser.add_argument("--jobs", type=int, default=2, help="processes")
    parser.add_argument(
        "--cases", default=",".join(c.key for c in CASES), help="comma-separated workloads to run"
    )
    args = parser.parse_args(argv)
    keys = chosen(parser, args.cases, [c.key for c in CASES], "workload")
    check_jobs(parser, args.jobs)
    for case in CASES:
        if case.key in keys:
            print(f"{case.key}: {case.describe}")
    jobs = [(key, tuning, args.seed) for key in keys for tuning in (True, False)]
    with Pool(args.jobs) as pool:
        runs = pool.map(_job, jobs)
    print()
    print(table(runs, {c.key: c.slo.goodput for c in CASES}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
