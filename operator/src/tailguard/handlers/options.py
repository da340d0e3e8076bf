"""Command-line options of ``tailguard run``; each falls back to a ``TAILGUARD_*`` environment variable."""

from __future__ import annotations

import argparse
import os
import re

from tailguard.api import DEFAULT_VLLM_IMAGE, IMAGE_PATTERN


def _rate_window(text: str) -> str:
    """A ``--rate-window`` value: a Prometheus duration of at least one second."""
    from tailguard.metrics.promql import duration_seconds

    try:
        seconds = duration_seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (e.g. 2m, 90s)") from None
    if seconds < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is shorter than one second")
    return text


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"TAILGUARD_{name}", default)


def image_reference(value: str) -> str:
    """An argparse type: a container image reference, one non-empty word."""
    if not re.fullmatch(IMAGE_PATTERN, value):
        raise argparse.ArgumentTypeError(f"not an image reference: {value!r} (empty, or holds whitespace)")
    return value


def add_default_image_argument(parser: argparse.ArgumentParser) -> None:
    """``--default-vllm-image``, shared by ``tailguard run`` and ``tailguard render``."""
    parser.add_argument(
        "--default-vllm-image",
        type=image_reference,  # argparse runs it on a string default too: a bad env var is refused
        default=_env("DEFAULT_VLLM_IMAGE", DEFAULT_VLLM_IMAGE),
        metavar="IMAGE",
        help="vLLM image of an InferenceService whose spec.engine.image is unset; changing it rolls "
        f"those (env TAILGUARD_DEFAULT_VLLM_IMAGE; default {DEFAULT_VLLM_IMAGE})",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the operator's options to ``parser``."""
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
    parser.add_argument(
        "--liveness-port",
        type=int,
        default=int(_env("LIVENESS_PORT", "8080") or 8080),
        help="port of the /healthz liveness endpoint (0 disables it)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=int(_env("METRICS_PORT", "9090") or 9090),
        help="port of the operator's own Prometheus /metrics (0 disables it)",
    )
    parser.add_argument(
        "--listen-address",
        default=_env("LISTEN_ADDRESS", "0.0.0.0"),
        help="address the liveness and metrics endpoints bind to",
    )
    parser.add_argument(
        "--prometheus-url",
        default=_env("PROMETHEUS_URL", "http://prometheus-operated.monitoring.svc:9090"),
        help="base URL of the Prometheus that scrapes the vLLM pods (env TAILGUARD_PROMETHEUS_URL)",
    )
    parser.add_argument(
        "--prometheus-token-file",
        default=_env("PROMETHEUS_TOKEN_FILE"),
        help="file holding a bearer token for Prometheus (env TAILGUARD_PROMETHEUS_TOKEN_FILE)",
    )
    parser.add_argument(
        "--prometheus-username",
        default=_env("PROMETHEUS_USERNAME"),
        help="basic-auth user for Prometheus; the password comes from TAILGUARD_PROMETHEUS_PASSWORD",
    )
    parser.add_argument(
        "--prometheus-ca-file",
        default=_env("PROMETHEUS_CA_FILE"),
        help="CA bundle to verify Prometheus's TLS certificate (env TAILGUARD_PROMETHEUS_CA_FILE)",
    )
    parser.add_argument(
        "--prometheus-timeout",
        type=float,
        default=float(_env("PROMETHEUS_TIMEOUT", "5") or 5),
        help="seconds before a Prometheus query is abandoned",
    )
    parser.add_argument(
        "--rate-window",
        type=_rate_window,
        default=_env("RATE_WINDOW", "2m"),
        help="PromQL rate() window; at least two scrape intervals",
    )
    add_default_image_argument(parser)
    parser.add_argument("--verbose", action="store_true", help="debug logging")
