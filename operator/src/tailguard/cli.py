"""The ``tailguard`` command: render manifests, write the CRD, run the operator, simulate, serve a fleet."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import yaml

from tailguard.api import DEFAULT_VLLM_IMAGE, IMAGE_PATTERN
from tailguard.api.crd import build_crd
from tailguard.k8s.render import RenderSettings, render_all
from tailguard.manifests import ManifestError, dump_yaml, load_inference_services, parse_inference_services
from tailguard.metrics.prometheus import PrometheusSettings
from tailguard.metrics.promql import QueryScope, duration_seconds
from tailguard.reconcile.sizing import running_size

if TYPE_CHECKING:
    from tailguard.handlers.settings import OperatorSettings

EXIT_INVALID = 2
#: What ``tailguard simulate`` and ``tailguard fleet`` need beyond the operator: the ``sim`` extra.
SIM_PACKAGES = ("numpy", "matplotlib")
#: ``-f -``: read the manifest from standard input, as kubectl does.
STDIN = "-"


def _render(args: argparse.Namespace) -> int:
    try:
        if args.file == STDIN:
            services = parse_inference_services(sys.stdin.read(), source="<stdin>")
        else:
            services = load_inference_services(Path(args.file))
    except ManifestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    settings = RenderSettings(default_image=args.default_vllm_image, pod_monitor=args.pod_monitor)
    objects = []
    for isvc in services:
        size = running_size(isvc)
        objects.extend(render_all(isvc, size.replicas, size.max_batch, settings))
    sys.stdout.write(dump_yaml(objects))
    return 0


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"TAILGUARD_{name}", default)


def _rate_window(text: str) -> str:
    """A ``--rate-window`` value: a Prometheus duration of at least one second."""
    try:
        seconds = duration_seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (e.g. 2m, 90s)") from None
    if seconds < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is shorter than one second")
    return text


def image_reference(value: str) -> str:
    """An argparse type: a container image reference, one non-empty word."""
    if not re.fullmatch(IMAGE_PATTERN, value):
        raise argparse.ArgumentTypeError(f"not an image reference: {value!r} (empty, or holds whitespace)")
    return value


def _add_default_image_argument(parser: argparse.ArgumentParser) -> None:
    """``--default-vllm-image``, shared by ``tailguard run`` and ``tailguard render``."""
    parser.add_argument(
        "--default-vllm-image",
        type=image_reference,  # argparse runs it on a string default too: a bad env var is refused
        default=_env("DEFAULT_VLLM_IMAGE", DEFAULT_VLLM_IMAGE),
        metavar="IMAGE",
        help="vLLM image of an InferenceService whose spec.engine.image is unset; changing it rolls "
        f"those (env TAILGUARD_DEFAULT_VLLM_IMAGE; default {DEFAULT_VLLM_IMAGE})",
    )


class _Option(NamedTuple):
    """One option of ``tailguard run``, falling back to the environment variable ``TAILGUARD_<env>``."""

    flag: str
    env: str
    parse: Callable[[str], Any]
    default: str | None
    help: str


_RUN_OPTIONS = (
    _Option("--liveness-port", "LIVENESS_PORT", int, "8080", "port of the /healthz endpoint (0: none)"),
    _Option("--metrics-port", "METRICS_PORT", int, "9090", "port of the operator's /metrics (0: none)"),
    _Option("--listen-address", "LISTEN_ADDRESS", str, "0.0.0.0", "address the two endpoints bind to"),
    _Option(
        "--prometheus-url",
        "PROMETHEUS_URL",
        str,
        "http://prometheus-operated.monitoring.svc:9090",
        "base URL of the Prometheus that scrapes the vLLM pods",
    ),
    _Option(
        "--prometheus-token-file", "PROMETHEUS_TOKEN_FILE", str, None, "bearer token file for Prometheus"
    ),
    _Option(
        "--prometheus-username",
        "PROMETHEUS_USERNAME",
        str,
        None,
        "basic-auth user for Prometheus; the password comes from TAILGUARD_PROMETHEUS_PASSWORD",
    ),
    _Option("--prometheus-ca-file", "PROMETHEUS_CA_FILE", str, None, "CA bundle for Prometheus's TLS"),
    _Option("--prometheus-timeout", "PROMETHEUS_TIMEOUT", float, "10", "seconds before a query is abandoned"),
    _Option("--rate-window", "RATE_WINDOW", _rate_window, "2m", "PromQL rate() window; two scrapes or more"),
    _Option(
        "--burst-window",
        "BURST_WINDOW",
        _rate_window,
        "30s",
        "short rate() window that shows bursts: two scrape intervals",
    ),
)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``tailguard run``; each falls back to a ``TAILGUARD_*`` environment variable."""
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        action="append",
        dest="namespaces",
        default=[n for n in (_env("NAMESPACES") or "").split(",") if n],
        help="watch only this namespace (repeatable; env TAILGUARD_NAMESPACES, comma-separated)",
    )
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (default)")
    for option in _RUN_OPTIONS:
        # argparse applies ``type`` to a string default too: a malformed variable is refused.
        parser.add_argument(
            option.flag,
            type=option.parse,
            default=_env(option.env, option.default),
            help=f"{option.help} (env TAILGUARD_{option.env})",
        )
    _add_default_image_argument(parser)
    parser.add_argument("--verbose", action="store_true", help="debug logging")


def operator_settings(args: argparse.Namespace) -> OperatorSettings:
    """The typed settings of ``tailguard run`` from its parsed arguments (reads the token file)."""
    from tailguard.handlers.settings import OperatorSettings

    token = Path(args.prometheus_token_file).read_text().strip() if args.prometheus_token_file else None
    basic = None
    if args.prometheus_username:
        basic = (args.prometheus_username, os.environ.get("TAILGUARD_PROMETHEUS_PASSWORD", ""))
    namespaces = tuple(args.namespaces) if args.namespaces and not args.all_namespaces else ()
    return OperatorSettings(
        prometheus=PrometheusSettings(
            url=args.prometheus_url,
            bearer_token=token,
            basic_auth=basic,
            ca_file=args.prometheus_ca_file,
            timeout_s=args.prometheus_timeout,
        ),
        scope=QueryScope(namespaces=namespaces, rate_window=args.rate_window, burst_window=args.burst_window),
        render=RenderSettings(default_image=args.default_vllm_image),
        liveness_port=args.liveness_port,
        metrics_port=args.metrics_port,
        listen_address=args.listen_address,
        verbose=args.verbose,
    )


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
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "tailguard.dev_inferenceservices.yaml").write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"error: --out {out}: cannot write the CRD: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_INVALID
    return 0


def _run(args: argparse.Namespace) -> int:
    from tailguard.handlers.main import run_operator

    return run_operator(operator_settings(args))


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
    render.add_argument(
        "-f", "--file", required=True, help="YAML file with InferenceService manifests ('-': standard input)"
    )
    render.add_argument(
        "--no-pod-monitor",
        dest="pod_monitor",
        action="store_false",
        help="leave out the PodMonitor (clusters without the Prometheus Operator)",
    )
    _add_default_image_argument(render)
    render.set_defaults(func=_render)

    crds = sub.add_parser("crds", help="print the CustomResourceDefinition (or write it to --out)")
    crds.add_argument("--out", help="directory to write the CRD file into")
    crds.set_defaults(func=_crds)

    run = sub.add_parser("run", help="run the operator against the current kubeconfig or in-cluster")
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
