"""The options of ``tailguard fleet``, declared without importing the simulator (numpy)."""

from __future__ import annotations

import argparse

from tailguard.sim.options import MIX_NAMES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tailguard fleet``."""
    parser.add_argument("--listen", default="127.0.0.1:0", help="host:port of the metrics server (loopback)")
    parser.add_argument("--sd-file", required=True, help="Prometheus file_sd JSON to write the targets to")
    parser.add_argument("--profile", default="h100-llama3-8b", help="engine profile of every replica")
    parser.add_argument("--mix", default="sharegpt", choices=MIX_NAMES, help="prompt/output token mix")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--rate",
        action="append",
        default=[],
        metavar="NAMESPACE/SERVICE=RPS",
        help="initial request rate of a service (repeatable); change it later with POST /load",
    )
