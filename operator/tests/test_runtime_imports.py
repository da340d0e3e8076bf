"""The operator's runtime needs neither numpy nor matplotlib (the ``sim`` extra): ``tailguard run``,
``render`` and ``crds`` import neither, and the simulator's commands say what to install when the
extra is missing instead of failing with a traceback.

Each case runs in a fresh interpreter, so what an earlier test imported cannot hide an import.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tailguard.fleet.options import add_arguments as add_fleet_arguments
from tailguard.sim import synthetic
from tailguard.sim.options import MIX_NAMES

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "llama-8b-chat.yaml"
SIM_ONLY = ("numpy", "matplotlib", "pandas", "prometheus_api_client")

#: Makes the ``sim`` extra's packages unimportable, as on an install without it (the operator image).
_HIDE_SIM = """
import importlib.abc, sys

class _Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("numpy", "matplotlib"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _Hide())
"""


def _python(code: str, *, hide_sim: bool = False) -> subprocess.CompletedProcess[str]:
    prelude = _HIDE_SIM if hide_sim else ""
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )


def _loaded_after(argv: list[str]) -> set[str]:
    """Top-level modules loaded after ``tailguard <argv>`` parsed its arguments and ran (or, for
    ``run``, got as far as importing the operator)."""
    code = f"""
        import sys
        from tailguard.cli import build_parser
        args = build_parser().parse_args({argv!r})
        if args.command == "run":
            import tailguard.handlers.main  # everything the operator loads before it connects
        else:
            import contextlib, io
            with contextlib.redirect_stdout(io.StringIO()):
                assert args.func(args) == 0
        print(" ".join(sorted({{m.split(".")[0] for m in sys.modules}})))
    """
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.split())


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--all-namespaces"],
        ["render", "-f", str(EXAMPLE)],
        ["crds"],
    ],
    ids=["run", "render", "crds"],
)
def test_operator_commands_import_no_simulator_packages(argv: list[str]) -> None:
    loaded = _loaded_after(argv)
    assert "tailguard" in loaded
    assert not loaded & set(SIM_ONLY), sorted(loaded & set(SIM_ONLY))


def test_operator_commands_run_without_the_sim_extra() -> None:
    proc = _python(
        f"""
        import contextlib, io
        from tailguard.cli import main
        with contextlib.redirect_stdout(io.StringIO()) as out:
            assert main(["render", "-f", {str(EXAMPLE)!r}]) == 0
        assert "kind: Deployment" in out.getvalue()
        from tailguard.handlers import main as operator_main  # noqa: F401
        print("ok")
        """,
        hide_sim=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--synthetic", "poisson", "--duration-s", "60"],
        ["fleet", "--sd-file", "/nonexistent/targets.json"],
    ],
    ids=["simulate", "fleet"],
)
def test_simulator_commands_without_the_extra_say_what_to_install(argv: list[str]) -> None:
    proc = _python(
        f"""
        import sys
        from tailguard.cli import main
        sys.exit(main({argv!r}))
        """,
        hide_sim=True,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"tailguard {argv[0]} needs" in lines[0]
    assert "pip install 'tailguard[sim]'" in lines[0]
    assert "numpy" in lines[0]


def test_simulate_help_without_the_extra_says_what_to_install() -> None:
    # The simulator's options come from its policy registry, which needs the sim extra.
    proc = _python(
        """
        import sys
        from tailguard.cli import main
        sys.exit(main(["simulate", "--help"]))
        """,
        hide_sim=True,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: tailguard simulate needs the simulator's packages (numpy, matplotlib missing): "
        "pip install 'tailguard[sim]'"
    ]


def test_declared_mix_names_are_the_simulators() -> None:
    assert sorted(MIX_NAMES) == sorted(synthetic.MIXES)
    assert list(MIX_NAMES) == sorted(MIX_NAMES)


def test_fleet_options_parse() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_fleet_arguments(parser)
    args = parser.parse_args(["--sd-file", "t.json", "--mix", "chat", "--rate", "ns/a=2"])
    assert (args.mix, args.rate, args.profile) == ("chat", ["ns/a=2"], "h100-llama3-8b")


def test_engine_standin_runs_without_the_sim_extra() -> None:
    """The stand-in image is the operator image: its engine model must not need numpy."""
    proc = _python(
        """
        from tailguard.fleet import standin
        args, _ = standin.parse_args(["m", "--max-num-seqs", "8"])
        print(standin.build(args).engine.max_num_seqs)
        """,
        hide_sim=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "8"
