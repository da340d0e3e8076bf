"""vLLM's own argument parser accepts every flag the operator renders, with the values it renders.

The engine tier's servers get a command line of their own (``engine/server.py``); this test checks
the operator's: for each example InferenceService, ``tailguard.k8s.render.vllm_args`` (what the
Deployment passes to ``vllm serve``) is parsed by the ``serve`` subcommand's parser of the installed
vLLM, in the engine env, and validated as ``vllm serve`` validates it. Nothing is started. A flag
vLLM does not know fails the parse ("unrecognized arguments"), a renamed one too.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from engine.server import BASE_ENV
from tailguard.k8s.render import vllm_args
from tailguard.manifests import load_inference_services

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]

#: Run in the engine env: builds the parser as ``vllm``'s CLI does for ``serve`` (the ``vllm`` console
#: script itself fails in this install, see engine/server.py), parses each argument list from stdin,
#: runs the subcommand's own validation and prints every parsed value as JSON, one line per list.
PROBE = r"""
import json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
import vllm.entrypoints.cli.serve as serve

parser = FlexibleArgumentParser(prog="vllm")
subparsers = parser.add_subparsers(dest="subparser")
commands = {}
for command in serve.cmd_init():
    command.subparser_init(subparsers)
    commands[command.name] = command
for line in sys.stdin:
    args = parser.parse_args(["serve", *json.loads(line)])
    commands["serve"].validate(args)
    print(json.dumps({k: v for k, v in vars(args).items() if isinstance(v, (str, int, float, bool, list, dict, type(None)))}))
"""


def rendered() -> dict[str, list[str]]:
    """The vLLM arguments of every example, at its starting max batch."""
    out: dict[str, list[str]] = {}
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for isvc in load_inference_services(path):
            out[isvc.metadata.name] = vllm_args(isvc, isvc.spec.engine.max_num_seqs)
    return out


def flag_values(argv: list[str]) -> dict[str, str | None]:
    """``--flag value`` pairs after the model (a flag followed by another flag, or last, has None)."""
    pairs: dict[str, str | None] = {}
    rest = argv[1:]
    for i, token in enumerate(rest):
        if token.startswith("--"):
            nxt = rest[i + 1] if i + 1 < len(rest) else None
            pairs[token] = None if nxt is None or nxt.startswith("--") else nxt
    return pairs


def same(parsed: Any, rendered_value: str | None) -> bool:
    if rendered_value is None:
        return parsed is True
    if isinstance(parsed, dict):  # a JSON-valued flag (--custom-histogram-buckets)
        return bool(parsed == json.loads(rendered_value))
    if isinstance(parsed, list):
        return [str(v) for v in parsed] == [rendered_value]
    if isinstance(parsed, float):
        return parsed == float(rendered_value)
    return str(parsed) == rendered_value


def test_vllm_parses_every_flag_the_operator_renders(engine_python: Path) -> None:
    cases = rendered()
    assert len(cases) >= 4, "the examples: one service each at least"
    stdin = "".join(json.dumps(argv) + "\n" for argv in cases.values())
    out = subprocess.run(
        [str(engine_python), "-c", PROBE],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **BASE_ENV},
        check=False,
    )
    assert out.returncode == 0, f"vLLM's parser refused an operator argument list:\n{out.stderr[-3000:]}"
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == len(cases), out.stdout
    for (name, argv), parsed in zip(cases.items(), lines, strict=True):
        assert parsed["model_tag"] == argv[0], name
        for flag, value in flag_values(argv).items():
            dest = flag.removeprefix("--").replace("-", "_")
            assert dest in parsed, f"{name}: vLLM parsed no {dest} for {flag}"
            assert same(parsed[dest], value), f"{name}: {flag} {value} parsed as {parsed[dest]!r}"
