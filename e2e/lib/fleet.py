"""The simulated vLLM fleet for one namespace of a test cluster, and the scrape job that reads it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tailguard.fleet.model import PodFleet
from tailguard.fleet.server import FleetServer
from tailguard.k8s.labels import MANAGED_BY, MANAGED_BY_LABEL
from tailguard.sim.profiles import get_profile


def start_fleet(
    kubeconfig: Path, namespace: str, sd_file: Path, *, seed: int, profile: str = "h100-llama3-8b"
) -> tuple[FleetServer, threading.Thread]:
    """Serve simulated engines behind the namespace's Ready vLLM pods; stop with ``server.stop.set()``."""
    from kubernetes import client, config

    # A client of its own: the fleet polls from its own thread.
    api = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))

    def list_pods() -> list[dict[str, Any]]:
        pods = api.list_namespaced_pod(namespace, label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}")
        items: list[dict[str, Any]] = api.api_client.sanitize_for_serialization(pods).get("items", [])
        return items

    server = FleetServer(
        PodFleet(get_profile(profile), seed=seed),
        host="127.0.0.1",
        port=0,
        sd_file=sd_file,
        list_pods=list_pods,
    )
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    return server, thread


def scrape_configs(sd_file: Path, interval: str = "1s") -> list[dict[str, Any]]:
    """A Prometheus job scraping every pod the fleet lists, labelled as a PodMonitor would."""
    return [
        {
            "job_name": "vllm",
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "file_sd_configs": [{"files": [str(sd_file)], "refresh_interval": "1s"}],
        }
    ]
