"""Command-line options of ``tailguard run``; each falls back to a ``TAILGUARD_*`` environment variable."""

from __future__ import annotations

import argparse
import os


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"TAILGUARD_{name}", default)


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
        default=_env("RATE_WINDOW", "2m"),
        help="PromQL rate() window; at least two scrape intervals",
    )
    parser.add_argument("--verbose", action="store_true", help="debug logging")
