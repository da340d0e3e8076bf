"""Start the operator: the InferenceService watch with the spec handler, kopf (watches of the managed
Deployments and pods, liveness) and the control loop, side by side in one event loop."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import pwd
import socket
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

import kopf

from tailguard.api import API_VERSION, GROUP, KIND, PLURAL, VERSION
from tailguard.handlers.lifecycle import SpecHandlers
from tailguard.handlers.metrics_server import serve_metrics
from tailguard.handlers.services import ServiceFeed, SpecQueue
from tailguard.handlers.settings import OperatorSettings
from tailguard.k8s.cluster import KubernetesCluster, object_reference
from tailguard.k8s.kubeconfig import load_cluster_config
from tailguard.k8s.labels import FIELD_MANAGER
from tailguard.k8s.watch import ApiEndpoint, ListWatch, resource_path
from tailguard.metrics.prometheus import HttpPrometheus
from tailguard.reconcile.inventory import Inventory
from tailguard.reconcile.loop import WRITERS, ControlLoop
from tailguard.reconcile.status import EventNote
from tailguard.reconcile.telemetry import Telemetry

log = logging.getLogger("tailguard")

#: Threads applying specs (children and status) at once.
SPEC_WORKERS = 8


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


async def run_async(settings: OperatorSettings, *, stop: asyncio.Event | None = None) -> None:
    """Run kopf and the control loop until ``stop`` is set (or forever)."""
    stop = stop or asyncio.Event()
    cluster = KubernetesCluster(FIELD_MANAGER)
    inventory = Inventory()
    handlers = SpecHandlers(cluster=cluster, inventory=inventory, clock=time.time, render=settings.render)
    telemetry = Telemetry()
    if settings.metrics_port:
        serve_metrics(telemetry, settings.metrics_port, settings.listen_address)
    namespaces = list(settings.namespaces)
    prometheus = HttpPrometheus(settings.prometheus)

    def post_event(namespace: str, name: str, note: EventNote) -> None:
        body = inventory.view((namespace, name))
        if body is not None:
            cluster.post_event(object_reference(body.body), note.type, note.reason, note.message)

    loop = ControlLoop(
        inventory=inventory,
        cluster=cluster,
        prometheus=prometheus,
        scope=settings.scope,
        telemetry=telemetry,
        post_event=post_event,
        render=settings.render,
        clock=time.time,
    )
    liveness = (
        f"http://{settings.listen_address}:{settings.liveness_port}/healthz"
        if settings.liveness_port
        else None
    )
    kopf_stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def stop_kopf_when_told() -> None:
        await stop.wait()
        if not kopf_stop.done():
            kopf_stop.set_result(None)

    async def kopf_then_stop() -> None:
        try:
            await kopf.operator(
                registry=handlers.registry(),
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

    async def watch_services_until_stopped() -> None:
        from kubernetes import client

        endpoint = ApiEndpoint.from_client_configuration(client.Configuration.get_default_copy())
        executor = ThreadPoolExecutor(max_workers=SPEC_WORKERS, thread_name_prefix="spec")
        specs = SpecQueue(handlers.sync, handlers.report_failure, executor)
        scopes: list[str | None] = [*namespaces] if namespaces else [None]  # None: every namespace
        watches = [
            asyncio.create_task(
                ListWatch(
                    endpoint,
                    resource_path(GROUP, VERSION, PLURAL, namespace),
                    ServiceFeed(inventory, specs, namespace),
                    api_version=API_VERSION,
                    kind=KIND,
                ).run()
            )
            for namespace in scopes
        ]
        stopped = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait([*watches, stopped], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stopped and not task.cancelled() and task.exception() is not None:
                    # A watch ends only on a bug: stop, and let Kubernetes start the operator again.
                    log.error("the InferenceService watch stopped: %r; stopping", task.exception())
        finally:
            stop.set()
            stopped.cancel()
            for watch in watches:
                watch.cancel()
            await asyncio.gather(*watches, return_exceptions=True)
            await specs.close()
            executor.shutdown(wait=False, cancel_futures=True)
            await endpoint.client.aclose()

    try:
        await asyncio.gather(
            kopf_then_stop(), loop.run_forever(stop), stop_kopf_when_told(), watch_services_until_stopped()
        )
    finally:
        stop.set()
        await prometheus.aclose()


def _widen_connection_pool(size: int = WRITERS + 16) -> None:
    """Room for the loop's writers, the spec workers and a margin to reach the API server at once."""
    from kubernetes import client

    settings = client.Configuration.get_default_copy()
    settings.connection_pool_maxsize = size
    client.Configuration.set_default(settings)


#: The collector's thresholds for the operator process (Python's default: 700, 10, 10).
GC_THRESHOLDS = (50_000, 20, 20)


def _collect_garbage_less_often() -> None:
    """Fewer, larger collections: the operator holds every service, Deployment and pod it watches,
    and each Prometheus reading allocates tens of thousands of short-lived objects; with the
    default thresholds the cyclic collector kept walking the long-lived heap during readings (about
    40% of a steady cycle's CPU in-process at 500 services). Objects without cycles are still freed
    at once by reference counting."""
    gc.set_threshold(*GC_THRESHOLDS)


#: The exit code when there is no cluster to run against.
EXIT_NO_CLUSTER = 2


def run_operator(settings: OperatorSettings) -> int:
    """Run the operator until interrupted; returns the process exit code."""
    logging.basicConfig(
        level=logging.DEBUG if settings.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not settings.verbose:
        # One line per Prometheus query and per handler run drowns what matters.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    failed = load_cluster_config()
    if failed is not None:
        log.error(failed)
        return EXIT_NO_CLUSTER
    _widen_connection_pool()
    _collect_garbage_less_often()
    try:
        asyncio.run(run_async(settings))
    except KeyboardInterrupt:
        log.info("stopped")
    return 0
