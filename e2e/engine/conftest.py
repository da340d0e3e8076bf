"""Fixtures for the engine tier (marker ``engine``): a real vLLM CPU server, a real Prometheus.

The tier is opt-in: it takes minutes and wants a quiet machine, so a plain ``pytest`` (``make test``)
skips it with the reason even when the engine env is cached. It runs with ``make test-engine``
(``TAILGUARD_REQUIRE_ENGINE=1``: a missing engine env or ``prometheus`` is then a failure), or with
``TAILGUARD_ENGINE=1`` or ``-m engine`` (then a missing env is a skip, with the reason). Nothing here
installs anything.

Each load run starts its own server on loopback, lets Prometheus scrape it (1 s interval) with the
labels tailguard's scrape configuration adds (``namespace``, ``inference_service``), drives a bounded
load, waits until Prometheus has seen every request, reads the operator's signals with the operator's
own code, and stops the server before the fixture returns. Prometheus lives for the session.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from cluster.prometheus import Prometheus
from engine import env as engine_env
from engine import tiny_model
from engine.runs import LARGE_BATCH, RUNS, SMALL_BATCH, EngineRun, run_engine
from lib.opt_in import OptInTier

REQUIRE_ENV: Final = "TAILGUARD_REQUIRE_ENGINE"
OPT_IN_ENV: Final = "TAILGUARD_ENGINE"


def unavailable_reason() -> str | None:
    reason = engine_env.unavailable_reason()
    if reason is None and shutil.which("prometheus") is None:
        reason = "prometheus is not installed (Debian package prometheus; `make engine-env` installs it)"
    return reason


TIER: Final = OptInTier("engine", "engine", "test-engine", OPT_IN_ENV, REQUIRE_ENV)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    TIER.skip_unless_asked(config, items, unavailable_reason)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Each load run's figures (client percentiles, server start time, load average), for the record."""
    if RUNS:
        terminalreporter.section("engine runs")
        for run in RUNS:
            terminalreporter.write_line(f"{run.service}: {run.describe()}")


# -------------------------------------------------------------------------------------------------
# Session


@pytest.fixture(scope="session")
def engine_python() -> Path:
    reason = unavailable_reason()
    if reason is not None:
        pytest.fail(f"{REQUIRE_ENV} is set but the engine tier cannot run: {reason}", pytrace=False)
    return engine_env.python()


@pytest.fixture(scope="session")
def engine_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Logs, the model and Prometheus's files; kept after the run under pytest's temporary directory."""
    return tmp_path_factory.mktemp("engine")


@pytest.fixture(scope="session")
def model_dir(engine_python: Path, engine_workdir: Path) -> Path:
    """The tiny random-weight Llama and its tokenizer, built offline by the engine env's interpreter."""
    out = engine_workdir / "tiny-llama"
    proc = subprocess.run(
        [str(engine_python), tiny_model.__file__, str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    if proc.returncode != 0:
        pytest.fail(f"building the tiny model failed:\n{proc.stderr[-3000:]}", pytrace=False)
    return out


@pytest.fixture(scope="session")
def prometheus(engine_workdir: Path) -> Iterator[Prometheus]:
    prom = Prometheus(engine_workdir / "prometheus")
    prom.start(interval="1s", die_with_parent=True)
    try:
        yield prom
    finally:
        prom.stop()


# -------------------------------------------------------------------------------------------------
# Load runs (each starts and stops its own server)


@pytest.fixture(scope="session")
def run_small(
    engine_python: Path, model_dir: Path, engine_workdir: Path, prometheus: Prometheus
) -> EngineRun:
    """The load against a server with a small max batch (``--max-num-seqs`` below the concurrency)."""
    return run_engine(engine_python, model_dir, engine_workdir, prometheus, SMALL_BATCH)


@pytest.fixture(scope="session")
def run_large(
    engine_python: Path, model_dir: Path, engine_workdir: Path, prometheus: Prometheus
) -> EngineRun:
    """The same load against a server whose max batch exceeds the concurrency."""
    return run_engine(engine_python, model_dir, engine_workdir, prometheus, LARGE_BATCH)


@pytest.fixture(params=["small", "large"])
def engine_run(request: pytest.FixtureRequest) -> EngineRun:
    run: EngineRun = request.getfixturevalue(f"run_{request.param}")
    return run


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """On a failure, attach each engine run's summary and the tail of its server log."""
    report = yield
    if report.when in ("setup", "call") and report.failed:
        for name in ("run_small", "run_large", "engine_run"):
            run = getattr(item, "funcargs", {}).get(name)
            if isinstance(run, EngineRun):
                with contextlib.suppress(OSError):
                    tail = "\n".join(run.log_file.read_text(errors="replace").splitlines()[-40:])
                    report.sections.append((f"engine run {run.service}", run.describe() + "\n" + tail))
    return report
