"""The options of ``tailguard simulate``, declared without importing the simulator.

The simulator needs numpy and matplotlib (the ``sim`` extra); the ``tailguard`` command builds its
parser for every subcommand, so ``tailguard run`` must be able to declare these options without them.
"""

from __future__ import annotations

import argparse

from tailguard.sim.profiles import PROFILES

#: The policies ``tailguard simulate`` can replay, in the order of its table.
POLICIES = ("tailguard", "hpa", "keda", "kpa", "wva", "dynamo", "static", "oracle")
#: The synthetic trace kinds of ``--synthetic``.
SYNTHETIC = ("poisson", "diurnal", "bursty", "gamma", "step", "ramp")
#: The token mixes of ``tailguard.sim.synthetic.MIXES`` by name (a unit test keeps them equal).
MIX_NAMES = ("chat", "decode-heavy", "prefill-heavy", "sharegpt")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``tailguard simulate``."""
    src = parser.add_argument_group("trace")
    src.add_argument("--trace", help="trace file: native, Azure or Mooncake format (CSV or JSONL)")
    src.add_argument(
        "--synthetic",
        choices=SYNTHETIC,
        help="generate a seeded trace instead: poisson, diurnal, bursty (MMPP), gamma, step or ramp",
    )
    src.add_argument("--rate", type=float, default=60.0, help="synthetic mean (or base) rate, req/s")
    src.add_argument("--peak-rate", type=float, help="synthetic burst/step/ramp-end rate, req/s")
    src.add_argument("--duration-s", type=float, default=3600.0, help="synthetic trace length")
    src.add_argument("--mix", choices=MIX_NAMES, default="sharegpt", help="synthetic token mix")
    src.add_argument("--rate-scale", type=float, default=1.0, help="compress time by K (K× the rate)")
    src.add_argument("--window", help="cut START:END seconds of the trace (after --rate-scale)")
    fleet = parser.add_argument_group("fleet and SLO")
    fleet.add_argument("--profile", default="h100-llama3-8b", help=f"replica model: {', '.join(PROFILES)}")
    fleet.add_argument("--slo-ttft-ms", type=float, default=500.0, help="p99 TTFT SLO")
    fleet.add_argument("--slo-tpot-ms", type=float, help="p99 TPOT SLO (optional)")
    fleet.add_argument("--goodput", type=float, default=0.99, help="fraction of requests meeting every SLO")
    fleet.add_argument("--min-replicas", type=int, default=1)
    fleet.add_argument("--max-replicas", type=int, default=32)
    fleet.add_argument("--cold-start-s", type=float, default=60.0, help="time from a new pod to Ready")
    fleet.add_argument("--max-batch", type=int, help="starting --max-num-seqs (the profile's default)")
    fleet.add_argument("--max-batch-min", type=int, default=16, help="lowest max batch tailguard may set")
    fleet.add_argument("--max-batch-max", type=int, default=512, help="highest max batch tailguard may set")
    fleet.add_argument(
        "--gpu-limit", type=int, help="GPUs the cluster has for this service (default: enough)"
    )
    fleet.add_argument("--router", choices=("random", "least"), default="random", help="Service spreading")
    fleet.add_argument("--scrape-interval-s", type=float, default=15.0, help="Prometheus scrape interval")
    fleet.add_argument("--oracle-window-s", type=float, default=60.0, help="window of the lower bound")
    fleet.add_argument(
        "--warmup-s",
        type=float,
        default=300.0,
        help="seconds of the trace's start served first, uncounted, so every policy starts on warm "
        "engines and a full rate window (0: empty engines and no history)",
    )
    fleet.add_argument(
        "--schedule",
        action="append",
        default=[],
        metavar="NAME=CRON,DURATION,MIN[,TZ]",
        help="a declared window for tailguard, as spec.autoscaling.schedules (repeatable), e.g. "
        "'peak=0 9 * * MON-FRI,8h,6,Europe/Berlin'; needs --start-at",
    )
    fleet.add_argument(
        "--start-at", help="wall-clock time of the trace's start (ISO 8601 with offset), for --schedule"
    )
    out = parser.add_argument_group("output")
    out.add_argument(
        "--policies", default=",".join(POLICIES), help=f"comma-separated, from: {', '.join(POLICIES)}"
    )
    out.add_argument("--out", help="directory for summary.json, timeline.csv and the plots")
    out.add_argument("--seed", type=int, default=0)
    out.add_argument("--no-progress", action="store_true", help="no progress bar")
    out.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
