"""``python -m containers`` (run with ``PYTHONPATH=e2e``): the commands behind the image Make targets."""

from __future__ import annotations

import argparse
import sys

from cluster.tools import ToolError
from containers import base, engine, kind_node, operator_image, prometheus_image, vllm_image


def _engine_up(_: argparse.Namespace) -> int:
    version = engine.ensure()
    print(f"docker engine {version}; dockerd log (when started here): {engine.log_file()}")
    return 0


def _engine_down(_: argparse.Namespace) -> int:
    print("stopped dockerd" if engine.stop() else "no dockerd started by this harness runs")
    return 0


def _base(args: argparse.Namespace) -> int:
    print(base.ensure(force=args.force))
    return 0


def _operator(args: argparse.Namespace) -> int:
    print(operator_image.build(tag=args.tag))
    return 0


def _standin(_: argparse.Namespace) -> int:
    print(operator_image.build_standin())
    return 0


def _prometheus(_: argparse.Namespace) -> int:
    print(prometheus_image.build())
    return 0


def _vllm_cpu(args: argparse.Namespace) -> int:
    print(vllm_image.build(force=args.force))
    return 0


def _kind_tools(_: argparse.Namespace) -> int:
    kind_node.ensure_binaries()
    return 0


def _kind_node_image(args: argparse.Namespace) -> int:
    print(kind_node.build(force=args.force, no_cache=args.no_cache))
    return 0


def _kind_up(args: argparse.Namespace) -> int:
    path = kind_node.up(gpus=args.gpus)
    print(f"export KUBECONFIG={path}")
    return 0


def _kind_down(_: argparse.Namespace) -> int:
    kind_node.down()
    return 0


def _kind_env(_: argparse.Namespace) -> int:
    print(f"export KUBECONFIG={kind_node.kubeconfig()}")
    return 0


def _kind_load(args: argparse.Namespace) -> int:
    kind_node.load(args.images)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m containers", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("engine-up", help="start Debian's dockerd unless an engine answers").set_defaults(
        func=_engine_up
    )
    sub.add_parser("engine-down", help="stop the dockerd this harness started").set_defaults(
        func=_engine_down
    )
    p = sub.add_parser("base", help=f"debootstrap and import {base.IMAGE} (cached)")
    p.add_argument("--force", action="store_true", help="rebuild even when the image is current")
    p.set_defaults(func=_base)
    p = sub.add_parser("operator", help="build the operator image on the local base")
    p.add_argument("--tag", help=f"image name (default {operator_image.default_tag()})")
    p.set_defaults(func=_operator)
    sub.add_parser(
        "standin", help="build the engine stand-in image (the operator image, another entrypoint)"
    ).set_defaults(func=_standin)
    sub.add_parser(
        "prometheus", help=f"build {prometheus_image.TAG} from Debian's package (for the kind tier)"
    ).set_defaults(func=_prometheus)
    p = sub.add_parser("vllm-cpu", help="build the real-engine image: vLLM for CPUs and the tiny model")
    p.add_argument("--force", action="store_true", help="rebuild even when the tag exists")
    p.set_defaults(func=_vllm_cpu)
    sub.add_parser("kind-tools", help="build the kind tier's binaries (cached)").set_defaults(
        func=_kind_tools
    )
    p = sub.add_parser("kind-node-image", help=f"build the kind node image {kind_node.node_image()}")
    p.add_argument("--force", action="store_true", help="rebuild even when the image is current")
    p.add_argument("--no-cache", action="store_true", help="rebuild every step (docker build --no-cache)")
    p.set_defaults(func=_kind_node_image)
    p = sub.add_parser("kind-up", help="create (or find) the kind cluster; prints its KUBECONFIG")
    p.add_argument(
        "--gpus", type=int, help="fake nvidia.com/gpu on the node (default TAILGUARD_KIND_GPUS or 8)"
    )
    p.set_defaults(func=_kind_up)
    sub.add_parser("kind-down", help="delete the kind cluster").set_defaults(func=_kind_down)
    sub.add_parser("kind-env", help="print export KUBECONFIG=... for the kind cluster").set_defaults(
        func=_kind_env
    )
    p = sub.add_parser("kind-load", help="kind load docker-image IMAGE... into the cluster")
    p.add_argument("images", nargs="+")
    p.set_defaults(func=_kind_load)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except (engine.EngineError, ToolError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
