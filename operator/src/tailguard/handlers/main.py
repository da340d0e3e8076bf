"""Start the operator: configure kopf, the API adapter and the endpoints, then run until stopped."""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

import kopf

from tailguard.k8s.cluster import KubernetesCluster
from tailguard.k8s.labels import FIELD_MANAGER


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


def run_operator(args: argparse.Namespace) -> int:
    """Run the operator until interrupted; returns the process exit code."""
    from kubernetes import config

    from tailguard.handlers import lifecycle

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO)
    config.load_config()  # type: ignore[no-untyped-call]
    lifecycle.configure(KubernetesCluster(FIELD_MANAGER))
    liveness = f"http://{args.listen_address}:{args.liveness_port}/healthz" if args.liveness_port else None
    namespaces = list(args.namespaces) if args.namespaces and not args.all_namespaces else []
    asyncio.run(
        kopf.operator(
            standalone=True,
            clusterwide=not namespaces,
            namespaces=namespaces,
            liveness_endpoint=liveness,
        )
    )
    return 0
