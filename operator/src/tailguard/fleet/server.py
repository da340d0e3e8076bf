"""The fleet process: watch the cluster's vLLM pods, simulate them, serve their metrics to Prometheus.

Prometheus finds the pods through a file service-discovery list the fleet rewrites as pods come and
go, with the same ``namespace``/``pod``/``inference_service`` labels a PodMonitor would attach.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tailguard.contract.vllm import CUSTOM_BUCKETS_FLAG, parse_bucket_families, slo_histogram_bounds
from tailguard.fleet.model import PodFleet, PodInfo
from tailguard.k8s.labels import MANAGED_BY, MANAGED_BY_LABEL, SERVICE_LABEL
from tailguard.sim.profiles import get_profile
from tailguard.sim.synthetic import MIXES

log = logging.getLogger("tailguard.fleet")


def _arg(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None


def pod_info(pod: dict[str, Any]) -> PodInfo | None:
    """What the fleet needs from a pod manifest (None for pods that are not vLLM replicas)."""
    meta = pod.get("metadata") or {}
    service = (meta.get("labels") or {}).get(SERVICE_LABEL)
    containers = (pod.get("spec") or {}).get("containers") or []
    if not service or not containers or meta.get("deletionTimestamp"):
        return None
    args = [str(a) for a in containers[0].get("args") or []]
    conditions = (pod.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return PodInfo(
        namespace=str(meta.get("namespace")),
        name=str(meta.get("name")),
        service=str(service),
        model_name=_arg(args, "--served-model-name") or str(service),
        max_num_seqs=int(_arg(args, "--max-num-seqs") or 256),
        ready=ready,
        **_buckets(_arg(args, CUSTOM_BUCKETS_FLAG)),
    )


def _buckets(text: str | None) -> dict[str, tuple[float, ...]]:
    """The TTFT and TPOT histogram bounds a pod's ``--custom-histogram-buckets`` sets (vLLM's
    defaults for a family it leaves out, or for a value vLLM would refuse)."""
    try:
        families = parse_bucket_families(text) if text else {}
    except ValueError:
        families = {}
    ttft, tpot = slo_histogram_bounds(families)
    return {"ttft_buckets_s": ttft, "tpot_buckets_s": tpot}


class FleetServer:
    """Threads around a :class:`PodFleet`: pod polling, the clock, HTTP, and the discovery file."""

    def __init__(self, fleet: PodFleet, *, host: str, port: int, sd_file: Path, list_pods: Any) -> None:
        self.fleet = fleet
        self.lock = threading.Lock()
        self.sd_file = sd_file
        self.list_pods = list_pods
        self.stop = threading.Event()
        self.httpd = ThreadingHTTPServer((host, port), self._handler())
        self.address = f"{host}:{self.httpd.server_address[1]}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                log.debug(format, *args)

            def _send(self, code: int, body: str, content_type: str = "text/plain; version=0.0.4") -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    # The scraper gave up waiting (a busy machine, Prometheus's scrape timeout): it
                    # reads the next scrape; a traceback per hang-up only buries the log.
                    log.debug("%s hung up before %s was answered", self.client_address, self.path)

            def do_GET(self) -> None:
                parts = self.path.strip("/").split("/")
                if parts == ["healthz"]:
                    self._send(200, "ok\n")
                    return
                if len(parts) == 3 and parts[0] == "metrics":
                    with server.lock:
                        body = server.fleet.metrics(parts[1], parts[2])
                    if body is not None:
                        self._send(200, body)
                        return
                if parts == ["load"]:
                    with server.lock:
                        rates = [
                            {"namespace": n, "service": s, "rate": r}
                            for (n, s), r in server.fleet.rates.items()
                        ]
                    self._send(200, json.dumps(rates), "application/json")
                    return
                self._send(404, "not found\n")

            def do_POST(self) -> None:
                if self.path.rstrip("/") != "/load":
                    self._send(404, "not found\n")
                    return
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                    body = json.loads(self.rfile.read(length) or b"{}")
                    with server.lock:
                        server.fleet.set_rate(
                            str(body["namespace"]), str(body["service"]), float(body["rate"])
                        )
                except (KeyError, ValueError, TypeError) as exc:
                    self._send(400, f"expected {{namespace, service, rate}}: {exc}\n")
                    return
                self._send(200, "ok\n")

        return Handler

    def _write_targets(self) -> None:
        with self.lock:
            targets = self.fleet.scrape_targets(self.address)
        text = json.dumps(targets, indent=1, sort_keys=True)
        if self.sd_file.exists() and self.sd_file.read_text() == text:
            return
        tmp = self.sd_file.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.sd_file)

    def _poll_pods(self) -> None:
        while not self.stop.is_set():
            try:
                pods = [info for pod in self.list_pods() if (info := pod_info(pod)) is not None]
                with self.lock:
                    self.fleet.sync_pods(pods)
                self._write_targets()
            except Exception:  # the API server may restart under a test; keep polling
                log.exception("listing pods failed")
            self.stop.wait(1.0)

    def _tick(self, step_s: float = 0.1) -> None:
        origin = time.monotonic() - self.fleet.clock
        while not self.stop.is_set():
            with self.lock:
                self.fleet.advance(time.monotonic() - origin)
            self.stop.wait(step_s)

    def serve(self) -> None:
        """Run until :attr:`stop` is set."""
        threads = [
            threading.Thread(target=self._poll_pods, daemon=True),
            threading.Thread(target=self._tick, daemon=True),
            threading.Thread(target=self.httpd.serve_forever, daemon=True),
        ]
        for thread in threads:
            thread.start()
        log.info("fleet serving metrics on %s, discovery file %s", self.address, self.sd_file)
        self.stop.wait()
        self.httpd.shutdown()


#: The exit code of bad options or no cluster to run against.
EXIT_USAGE = 2


def _options(args: argparse.Namespace) -> tuple[PodFleet, str, int]:
    """The fleet, host and port the options describe; a ``ValueError`` says what is wrong."""
    fleet = PodFleet(get_profile(args.profile), mix=MIXES[args.mix], seed=args.seed)
    for spec in args.rate:
        target, _, rate = spec.partition("=")
        namespace, _, service = target.partition("/")
        try:
            rps = float(rate)
        except ValueError:
            rps = math.nan
        if not namespace or not service or not (math.isfinite(rps) and rps >= 0):
            raise ValueError(f"--rate must be NAMESPACE/SERVICE=RPS with RPS >= 0, got {spec!r}")
        fleet.set_rate(namespace, service, rps)
    host, _, port = args.listen.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(
            f"--listen must be HOST:PORT with a port in 0-65535 (0: any free port), got {args.listen!r}"
        )
    return fleet, host or "127.0.0.1", int(port)


def run(args: argparse.Namespace) -> int:
    """``tailguard fleet``: serve until interrupted."""
    from kubernetes import client

    from tailguard.k8s.kubeconfig import load_cluster_config

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        fleet, host, port = _options(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    failed = load_cluster_config()
    if failed is not None:
        print(f"error: {failed}", file=sys.stderr)
        return EXIT_USAGE
    core = client.CoreV1Api()

    def list_pods() -> list[dict[str, Any]]:
        pods = core.list_pod_for_all_namespaces(label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}")
        items: list[dict[str, Any]] = client.ApiClient().sanitize_for_serialization(pods).get("items", [])  # type: ignore[no-untyped-call]
        return items

    try:
        server = FleetServer(fleet, host=host, port=port, sd_file=Path(args.sd_file), list_pods=list_pods)
    except OSError as exc:
        print(
            f"error: cannot serve on {host}:{port} or write {args.sd_file}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    print(f"fleet listening on {server.address}", flush=True)
    try:
        server.serve()
    except KeyboardInterrupt:
        server.stop.set()
    return 0
