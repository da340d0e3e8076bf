"""The ``tailguard`` command: render manifests, write the CRD, run the operator, simulate, serve a fleet."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from tailguard.api.crd import build_crd
from tailguard.k8s.render import render_all
from tailguard.manifests import ManifestError, dump_yaml, load_inference_services

EXIT_INVALID = 2
#: What ``tailguard simulate`` and ``tailguard fleet`` need beyond the operator: the ``sim`` extra.
SIM_PACKAGES = ("numpy", "matplotlib")


def _render(args: argparse.Namespace) -> int:
    try:
        services = load_inference_services(Path(args.file))
    except ManifestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    objects = [
        obj
        for isvc in services
        for obj in render_all(isvc, with_pod_monitor=args.pod_monitor, default_image=args.default_vllm_image)
    ]
    sys.stdout.write(dump_yaml(objects))
    return 0


def crd_yaml() -> str:
    """The CRD as written to ``crds/``."""
    header = "# Generated from the pydantic models by `make crds`; do not edit.\n"
    return header + yaml.safe_dump(build_crd(), sort_keys=False)


def _crds(args: argparse.Namespace) -> int:
    text = crd_yaml()
    if args.out is None:
        sys.stdout.write(text)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tailguard.dev_inferenceservices.yaml").write_text(text, encoding="utf-8")
    return 0


def _run(args: argparse.Namespace) -> int:
    from tailguard.handlers.main import run_operator

    return run_operator(args)


def missing_sim_packages() -> list[str]:
    """The packages of the ``sim`` extra that are not installed (the operator's image has none)."""
    missing = []
    for name in SIM_PACKAGES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def _sim_unavailable(command: str) -> bool:
    """Print one line and return True when ``command`` cannot run for want of the ``sim`` extra."""
    missing = missing_sim_packages()
    if missing:
        print(
            f"error: tailguard {command} needs the simulator's packages ({', '.join(missing)} missing): "
            "pip install 'tailguard[sim]'",
            file=sys.stderr,
        )
    return bool(missing)


def _simulate(args: argparse.Namespace) -> int:
    if _sim_unavailable("simulate"):
        return EXIT_INVALID
    from tailguard.sim import cli as sim_cli

    # The simulator declares its own options (every policy's knobs come from its registry, which
    # needs the sim extra): its parser reads everything after ``simulate``.
    code: int = sim_cli.main(list(args.simulate_args))
    return code


def _fleet(args: argparse.Namespace) -> int:
    if _sim_unavailable("fleet"):
        return EXIT_INVALID
    from tailguard.fleet import server

    return server.run(args)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="tailguard", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    render = sub.add_parser("render", help="print the Kubernetes objects the operator would create")
    render.add_argument("-f", "--file", required=True, help="YAML file with InferenceService manifests")
    render.add_argument(
        "--no-pod-monitor",
        dest="pod_monitor",
        action="store_false",
        help="leave out the PodMonitor (clusters without the Prometheus Operator)",
    )
    from tailguard.handlers.options import add_default_image_argument

    add_default_image_argument(render)
    render.set_defaults(func=_render)

    crds = sub.add_parser("crds", help="print the CustomResourceDefinition (or write it to --out)")
    crds.add_argument("--out", help="directory to write the CRD file into")
    crds.set_defaults(func=_crds)

    run = sub.add_parser("run", help="run the operator against the current kubeconfig or in-cluster")
    from tailguard.handlers.options import add_arguments as add_run_arguments

    add_run_arguments(run)
    run.set_defaults(func=_run)

    simulate = sub.add_parser(
        "simulate",
        help="replay a trace through tailguard and its peers in the simulator (tailguard simulate --help)",
        # Every argument, options included, goes to the simulator's parser untouched.
        add_help=False,
        prefix_chars="\0",
    )
    simulate.add_argument("simulate_args", nargs=argparse.REMAINDER)
    simulate.set_defaults(func=_simulate)

    fleet = sub.add_parser("fleet", help="simulate vLLM behind a test cluster's pods and serve their metrics")
    from tailguard.fleet.options import add_arguments as add_fleet_arguments

    add_fleet_arguments(fleet)
    fleet.set_defaults(func=_fleet)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tailguard`` console script."""
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
