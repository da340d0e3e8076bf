"""Start the operator: kopf (spec handlers, watches) and the control loop, side by side in one event loop."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import pwd
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kopf
from prometheus_client import start_http_server

from tailguard.k8s.cluster import KubernetesCluster, object_reference
from tailguard.k8s.labels import FIELD_MANAGER
from tailguard.metrics.prometheus import HttpPrometheus, PrometheusSettings
from tailguard.metrics.promql import QueryScope
from tailguard.reconcile.inventory import Inventory
from tailguard.reconcile.loop import ControlLoop
from tailguard.reconcile.status import EventNote
from tailguard.reconcile.telemetry import Telemetry

log = logging.getLogger("tailguard")


@kopf.on.startup()
def _settings(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Durable handler progress goes to annotations: our status schema has no room for kopf's.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="tailguard.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="tailguard.dev", key="last-handled-configuration"
    )
    # Only warnings become Events automatically; tailguard posts its own explanatory Events.
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 8
    settings.watching.server_timeout = 300


def prometheus_settings(args: argparse.Namespace) -> PrometheusSettings:
    """Prometheus access from the command line and the environment."""
    token = Path(args.prometheus_token_file).read_text().strip() if args.prometheus_token_file else None
    basic = None
    if args.prometheus_username:
        basic = (args.prometheus_username, os.environ.get("TAILGUARD_PROMETHEUS_PASSWORD", ""))
    return PrometheusSettings(
        url=args.prometheus_url,
        bearer_token=token,
        basic_auth=basic,
        ca_file=args.prometheus_ca_file,
        timeout_s=args.prometheus_timeout,
    )


def operator_identity(environ: Mapping[str, str] = os.environ) -> str:
    """Who this operator is, for kopf: the pod's name when the chart passes it (``POD_NAME``), else
    ``user@host``.

    Never needs a passwd entry: the chart runs the image as UID 65532, which has none, and
    ``getpass.getuser()`` (kopf's own fallback) raises ``KeyError`` there and crashed the operator at
    start. Without a name, the numeric UID stands in for the user.
    """
    for name in ("POD_NAME", "POD_ID"):
        if environ.get(name):
            return environ[name]
    user = next((environ[k] for k in ("USER", "LOGNAME") if environ.get(k)), None)
    if user is None:
        try:
            user = pwd.getpwuid(os.getuid()).pw_name
        except KeyError:
            user = f"uid-{os.getuid()}"
    return f"{user}@{socket.gethostname()}"


async def run_async(args: argparse.Namespace, *, stop: asyncio.Event | None = None) -> None:
    """Run kopf and the control loop until ``stop`` is set (or forever)."""
    from tailguard.handlers import lifecycle

    stop = stop or asyncio.Event()
    cluster = KubernetesCluster(FIELD_MANAGER)
    inventory = Inventory()
    lifecycle.configure(cluster, inventory, time.time, default_image=args.default_vllm_image)
    telemetry = Telemetry()
    if args.metrics_port:
        start_http_server(args.metrics_port, addr=args.listen_address, registry=telemetry.registry)
    namespaces = list(args.namespaces) if args.namespaces and not args.all_namespaces else []
    prometheus = HttpPrometheus(prometheus_settings(args))

    def post_event(namespace: str, name: str, note: EventNote) -> None:
        body = inventory.view((namespace, name))
        if body is not None:
            cluster.post_event(object_reference(body.body), note.type, note.reason, note.message)

    loop = ControlLoop(
        inventory=inventory,
        cluster=cluster,
        prometheus=prometheus,
        scope=QueryScope(namespaces=tuple(namespaces), rate_window=args.rate_window),
        telemetry=telemetry,
        post_event=post_event,
        default_image=args.default_vllm_image,
    )
    liveness = f"http://{args.listen_address}:{args.liveness_port}/healthz" if args.liveness_port else None
    kopf_stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def stop_kopf_when_told() -> None:
        await stop.wait()
        if not kopf_stop.done():
            kopf_stop.set_result(None)

    async def kopf_then_stop() -> None:
        try:
            await kopf.operator(
                standalone=True,
                # kopf's Identity is a NewType of str that kopf does not export.
                identity=operator_identity(),  # type: ignore[arg-type]
                clusterwide=not namespaces,
                namespaces=namespaces,
                liveness_endpoint=liveness,
                stop_flag=kopf_stop,
            )
        finally:
            stop.set()  # kopf stops on SIGTERM/SIGINT; the control loop follows

    try:
        await asyncio.gather(kopf_then_stop(), loop.run_forever(stop), stop_kopf_when_told())
    finally:
        stop.set()
        await prometheus.aclose()


def _widen_connection_pool(size: int = 32) -> None:
    """Room for kopf's workers and the loop's writers to reach the API server at once."""
    from kubernetes import client

    settings = client.Configuration.get_default_copy()
    settings.connection_pool_maxsize = size
    client.Configuration.set_default(settings)


def run_operator(args: argparse.Namespace) -> int:
    """Run the operator until interrupted; returns the process exit code."""
    from kubernetes import config

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        # One line per Prometheus query and per handler run drowns what matters.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    config.load_config()  # type: ignore[no-untyped-call]
    _widen_connection_pool()
    try:
        asyncio.run(run_async(args))
    except KeyboardInterrupt:
        log.info("stopped")
    return 0
