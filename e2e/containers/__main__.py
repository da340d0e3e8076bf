"""``python -m containers`` (run with ``PYTHONPATH=e2e``): the commands behind the image Make targets."""

from __future__ import annotations

import argparse
import sys

from containers import base, engine, operator_image


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
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except engine.EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
