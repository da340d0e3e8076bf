"""tailguard off the benchmark: twenty-two settings at other rates, profiles, mixes and shapes
(``python -m tailguard.sim.bench.other``).

The benchmark's six traces are where the issue's goals are measured; these settings are where a
rule that only those traces reward would show. Each is a ``tailguard simulate`` command line, parsed
with the simulator's own options and run after the same hour of lead-in, so any row reproduces with
``tailguard simulate ARGS --warmup-s 3600 --max-replicas 32 --seed N --policies tailguard``. With
``--flat`` the hindsight flat fleet is searched for each too (several full runs more per setting).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing import Pool

from tailguard.sim import cli
from tailguard.sim.bench.choices import check_jobs, chosen, seeds
from tailguard.sim.runner import Scenario, run

#: The options every setting runs with (the benchmark's lead-in, room to scale).
COMMON = "--warmup-s 3600 --max-replicas 32"


@dataclass(frozen=True)
class OtherSetting:
    """One setting: a name, and the profile, mix, synthetic load and SLO of ``tailguard simulate``."""

    key: str
    profile: str
    mix: str
    #: ``--synthetic``'s shape and its options.
    load: str
    slo: str

    @property
    def args(self) -> str:
        """The ``tailguard simulate`` options of the setting (without ``COMMON``)."""
        return f"--profile {self.profile} --mix {self.mix} --synthetic {self.load} {self.slo}"


SETTINGS: tuple[OtherSetting, ...] = (
    OtherSetting(
        "a100-chat-diurnal",
        "a100-llama3-8b",
        "chat",
        "diurnal --rate 20",
        "--slo-ttft-ms 800 --slo-tpot-ms 80",
    ),
    OtherSetting(
        "fp8-sharegpt-bursty",
        "h100-llama3-8b-fp8",
        "sharegpt",
        "bursty --rate 80 --peak-rate 200",
        "--slo-ttft-ms 300",
    ),
    OtherSetting(
        "70b-decode-ramp",
        "h100x2-llama3-70b-fp8",
        "decode-heavy",
        "ramp --rate 5 --peak-rate 25",
        "--slo-ttft-ms 1500 --slo-tpot-ms 60",
    ),
    OtherSetting(
        "8b-prefill-gamma",
        "h100-llama3-8b",
        "prefill-heavy",
        "gamma --rate 30 --burstiness 0.3",
        "--slo-ttft-ms 800",
    ),
    OtherSetting(
        "8b-code-step",
        "h100-llama3-8b",
        "code",
        "step --rate 10 --peak-rate 30",
        "--slo-ttft-ms 1000 --slo-tpot-ms 50",
    ),
    OtherSetting(
        "70b-chat-spiky",
        "h100x2-llama3-70b-fp8",
        "chat",
        "spiky --rate 10 --peak-rate 60",
        "--slo-ttft-ms 1000 --slo-tpot-ms 100",
    ),
    OtherSetting("a100-code-diurnal", "a100-llama3-8b", "code", "diurnal --rate 8", "--slo-ttft-ms 1000"),
    OtherSetting(
        "fp8-chat-poisson",
        "h100-llama3-8b-fp8",
        "chat",
        "poisson --rate 150",
        "--slo-ttft-ms 300 --slo-tpot-ms 30",
    ),
    OtherSetting(
        "70b-sharegpt-bursty",
        "h100x2-llama3-70b-fp8",
        "sharegpt",
        "bursty --rate 20 --peak-rate 60 --burst-mean-s 120 --gap-mean-s 600",
        "--slo-ttft-ms 2000 --slo-tpot-ms 80",
    ),
    OtherSetting(
        "long-context-poisson",
        "h100-llama3.1-8b-128k",
        "long-context",
        "poisson --rate 0.5",
        "--slo-ttft-ms 8000 --slo-tpot-ms 120",
    ),
    # Stationary prompt-heavy loads, where a queue of prompts behind prompts is the replicas' own.
    OtherSetting("8b-code-poisson", "h100-llama3-8b", "code", "poisson --rate 10", "--slo-ttft-ms 500"),
    OtherSetting(
        "long-context-poisson-slow",
        "h100-llama3.1-8b-128k",
        "long-context",
        "poisson --rate 0.4",
        "--slo-ttft-ms 4000",
    ),
    OtherSetting(
        "8b-sharegpt-ramp",
        "h100-llama3-8b",
        "sharegpt",
        "ramp --rate 20 --peak-rate 200",
        "--slo-ttft-ms 500",
    ),
    OtherSetting(
        "8b-chat-diurnal-tight",
        "h100-llama3-8b",
        "chat",
        "diurnal --rate 100",
        "--slo-ttft-ms 250 --slo-tpot-ms 40",
    ),
    OtherSetting("8b-code-spiky-3", "h100-llama3-8b", "code", "spiky --rate 3", "--slo-ttft-ms 500"),
    OtherSetting("8b-code-spiky-6", "h100-llama3-8b", "code", "spiky --rate 6", "--slo-ttft-ms 500"),
    OtherSetting("8b-code-spiky-12", "h100-llama3-8b", "code", "spiky --rate 12", "--slo-ttft-ms 500"),
    OtherSetting("8b-code-spiky-20", "h100-llama3-8b", "code", "spiky --rate 20", "--slo-ttft-ms 1000"),
    OtherSetting("a100-code-spiky", "a100-llama3-8b", "code", "spiky --rate 6", "--slo-ttft-ms 800"),
    OtherSetting(
        "70b-code-spiky",
        "h100x2-llama3-70b-fp8",
        "code",
        "spiky --rate 4",
        "--slo-ttft-ms 1000 --slo-tpot-ms 60",
    ),
    OtherSetting("fp8-code-spiky", "h100-llama3-8b-fp8", "code", "spiky --rate 10", "--slo-ttft-ms 300"),
    OtherSetting(
        "8b-sharegpt-spiky",
        "h100-llama3-8b",
        "sharegpt",
        "spiky --rate 20 --peak-rate 200",
        "--slo-ttft-ms 500",
    ),
)


def by_key(key: str) -> OtherSetting:
    """The setting named ``key`` (``KeyError`` if none is)."""
    for setting in SETTINGS:
        if setting.key == key:
            return setting
    raise KeyError(key)


def scenario_of(setting: OtherSetting, seed: int, extra: str = "") -> Scenario:
    """The setting's scenario, through the simulator's own options (``extra``: more of them, last)."""
    parser = argparse.ArgumentParser(prog="tailguard simulate")
    cli.add_arguments(parser)
    argv = shlex.split(f"{setting.args} {COMMON} --seed {seed} {extra}")
    return cli.scenario_from(parser.parse_args(argv))


@dataclass(frozen=True)
class OtherRow:
    """tailguard on one setting and seed, and the hindsight flat fleet where it was searched."""

    key: str
    seed: int
    goodput: float
    attainment: float
    gpu_hours: float
    bound_gpu_hours: float
    #: Replicas of the fewest fixed fleet that reaches the target (``None``: none within the
    #: bounds, or not searched) and its GPU-hours.
    flat_replicas: int | None = None
    flat_gpu_hours: float | None = None

    @property
    def met(self) -> bool:
        """The run reached its goodput target."""
        return self.attainment >= self.goodput


def run_setting(setting: OtherSetting, seed: int, *, flat: bool = False, extra: str = "") -> OtherRow:
    """One run of tailguard on ``setting`` (and the flat fleet's search with ``flat``)."""
    scenario = scenario_of(setting, seed, extra)
    result = run(scenario, ["tailguard"], progress=False, with_flat=flat)
    (summary,) = result.summaries
    replicas = result.flat.replicas if result.flat is not None else None
    flat_hours = next((g for n, _, g in result.flat.tried if n == replicas), None) if result.flat else None
    return OtherRow(
        setting.key,
        seed,
        scenario.slo.goodput,
        summary.attainment,
        summary.gpu_hours,
        result.lower_bound_gpu_hours,
        replicas,
        flat_hours,
    )


def _job(job: tuple[str, int, bool]) -> OtherRow:
    key, seed, flat = job
    return run_setting(by_key(key), seed, flat=flat)


def table(rows: Sequence[OtherRow]) -> str:
    """The rows as a Markdown table; ``!`` marks an attainment under the setting's target."""
    flat = any(r.flat_replicas is not None for r in rows)
    head = "| setting | seed | attainment | GPU-h | × bound |" + (" flat fleet | × flat |" if flat else "")
    lines = [head, "| --- " * (head.count("|") - 1) + "|"]
    for r in rows:
        miss = "" if r.met else " !"
        line = f"| {r.key} | {r.seed} | {r.attainment:.4f}{miss} | {r.gpu_hours:.2f} | "
        line += f"{r.gpu_hours / r.bound_gpu_hours:.2f} |" if r.bound_gpu_hours > 0 else "- |"
        if flat:
            if r.flat_replicas is not None and r.flat_gpu_hours:
                line += (
                    f" {r.flat_replicas} ({r.flat_gpu_hours:.2f}) | {r.gpu_hours / r.flat_gpu_hours:.2f} |"
                )
            else:
                line += " none within the bounds | - |"
        lines.append(line)
    return "\n".join(lines)


def verdict(rows: Sequence[OtherRow]) -> str:
    """How many runs met their target, and which did not."""
    missed = [f"{r.key} (seed {r.seed}, {r.attainment:.4f})" for r in rows if not r.met]
    line = f"{len(rows) - len(missed)} of {len(rows)} runs meet their goodput target"
    return f"{line}; under it: {', '.join(missed)}" if missed else line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tailguard.sim.bench.other",
        description="tailguard on settings off the benchmark: other rates, profiles, mixes and shapes",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--seeds", default="1", help="comma-separated seeds")
    parser.add_argument("--jobs", type=int, default=2, help="processes")
    parser.add_argument("--flat", action="store_true", help="also search each setting's hindsight flat fleet")
    parser.add_argument(
        "--settings", default=",".join(s.key for s in SETTINGS), help="comma-separated settings to run"
    )
    args = parser.parse_args(argv)
    keys = chosen(parser, args.settings, [s.key for s in SETTINGS], "setting")
    check_jobs(parser, args.jobs)
    for key in keys:
        print(f"{key}: tailguard simulate {by_key(key).args} {COMMON}")
    jobs = [(key, seed, args.flat) for key in keys for seed in seeds(parser, args.seeds)]
    with Pool(args.jobs) as pool:
        rows = pool.map(_job, jobs)
    print()
    print(table(rows))
    print()
    print(verdict(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
