"""``python -m cluster`` (run with ``PYTHONPATH=e2e``): the commands behind the cluster Make targets."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from cluster import control_plane, prometheus, tools, versions


def _tools(args: argparse.Namespace) -> int:
    if args.only:
        tools.ensure_components(args.only)
        return 0
    found = tools.ensure_all(with_helm=not args.no_helm, with_prometheus=not args.no_prometheus)
    print(tools.describe(found), flush=True)
    return 0


def _versions(_: argparse.Namespace) -> int:
    print(f"kubernetes {versions.KUBERNETES} (staging {versions.staging_version()})")
    print(f"kwok       {versions.KWOK}")
    print(f"helm       {versions.HELM}")
    print(f"etcd       {versions.ETCD} (go.etcd.io/etcd/server/v3)")
    print(f"kind       {versions.KIND} (the kind tier: make kind-up)")
    print(f"containerd {versions.CONTAINERD} (kind node)")
    print(f"coredns    {versions.COREDNS} (kind node)")
    print(f"cache      {tools.bin_root()}")
    return 0


def _pool(args: argparse.Namespace) -> control_plane.NodePool:
    pool = control_plane.NodePool.from_env()
    if args.nodes is not None:
        pool = control_plane.NodePool(count=args.nodes, gpus=pool.gpus)
    if args.gpus_per_node is not None:
        pool = control_plane.NodePool(count=pool.count, gpus=args.gpus_per_node)
    return pool


def _up(args: argparse.Namespace) -> int:
    cluster = control_plane.Cluster(args.state_dir)
    started = time.monotonic()
    try:
        cluster.up(_pool(args), timeout=args.timeout)
    except (control_plane.ClusterError, tools.ToolError) as exc:
        print(f"cluster-up failed: {exc}", file=sys.stderr)
        return 1
    print(f"cluster-up took {time.monotonic() - started:.1f}s", flush=True)
    return 0


def _down(args: argparse.Namespace) -> int:
    cluster = control_plane.Cluster(args.state_dir)
    prometheus.Prometheus(prometheus.default_directory(cluster.state_dir)).stop()
    cluster.down()
    return 0


def _status(args: argparse.Namespace) -> int:
    cluster = control_plane.Cluster(args.state_dir)
    print(cluster.status())
    prom = prometheus.Prometheus(prometheus.default_directory(cluster.state_dir))
    if prom.is_running():
        print(f"prometheus: {prom.url} (config {prom.config_file}, targets {prom.targets_file})")
    return 0 if cluster.is_running() else 3


def _env(args: argparse.Namespace) -> int:
    cluster = control_plane.Cluster(args.state_dir)
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    prom = prometheus.Prometheus(prometheus.default_directory(cluster.state_dir))
    if prom.is_running():
        print(f"export TAILGUARD_PROMETHEUS_URL={prom.url}")
    return 0


def _prometheus_up(args: argparse.Namespace) -> int:
    cluster = control_plane.Cluster(args.state_dir)
    prom = prometheus.Prometheus(prometheus.default_directory(cluster.state_dir))
    if prom.is_running():
        print(f"prometheus already running: {prom.url}")
        return 0
    url = prom.start(interval=args.interval)
    print(f"prometheus: {url}")
    print(f"  scrape targets (file discovery, edit freely): {prom.targets_file}")
    print(f"  log: {prom.log_file}")
    return 0


def _prometheus_down(args: argparse.Namespace) -> int:
    cluster = control_plane.Cluster(args.state_dir)
    prometheus.Prometheus(prometheus.default_directory(cluster.state_dir)).stop()
    print("prometheus stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster", description="tailguard's local test cluster")
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="cluster state directory (default $TAILGUARD_CLUSTER_DIR or ~/.cache/tailguard/cluster)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("tools", help="build or install every binary the cluster needs (idempotent)")
    t.add_argument("--no-helm", action="store_true")
    t.add_argument("--no-prometheus", action="store_true")
    t.add_argument(
        "--only",
        action="append",
        metavar="COMPONENT",
        help="build just this Go component (kubernetes, etcd, kwok, helm)",
    )
    t.set_defaults(func=_tools)
    sub.add_parser("versions", help="print the pinned versions").set_defaults(func=_versions)
    up = sub.add_parser("up", help="start the cluster (or reuse the running one)")
    up.add_argument(
        "--nodes", type=int, default=None, help="fake GPU nodes (default 4, env TAILGUARD_FAKE_NODES)"
    )
    up.add_argument(
        "--gpus-per-node",
        type=int,
        default=None,
        help="GPUs per fake node (default 8, env TAILGUARD_GPUS_PER_NODE)",
    )
    up.add_argument("--timeout", type=float, default=120, help="seconds to wait for readiness")
    up.set_defaults(func=_up)
    sub.add_parser("down", help="stop the cluster and its Prometheus").set_defaults(func=_down)
    sub.add_parser("status", help="print the components and their state").set_defaults(func=_status)
    sub.add_parser("env", help="print shell exports for the running cluster").set_defaults(func=_env)
    pu = sub.add_parser("prometheus-up", help="start a Prometheus scraping the targets in targets.json")
    pu.add_argument("--interval", default="1s", help="scrape interval")
    pu.set_defaults(func=_prometheus_up)
    sub.add_parser("prometheus-down", help="stop that Prometheus").set_defaults(func=_prometheus_down)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
