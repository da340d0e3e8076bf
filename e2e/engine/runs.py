"""One load run against a real vLLM server, scraped by a real Prometheus, read by the operator's code.

:func:`run_engine` starts a server on loopback, lets Prometheus scrape it (1 s interval) with the labels
tailguard's scrape configuration adds (``namespace``, ``inference_service``), waits for a few idle
scrapes (every counter at zero, so ``rate()`` over the window sees the whole load), drives a bounded
load, waits until Prometheus has seen every request, reads the operator's signals with the operator's
own builders and reader, and stops the server before it returns. Tests judge the :class:`EngineRun`.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cluster.prometheus import Prometheus
from engine import tiny_model
from engine.exposition import Exposition
from engine.load import LoadResult, run_load
from engine.server import VllmServer, running
from tailguard.metrics.figures import MetricsReading, SloEdges, read_metrics
from tailguard.metrics.prometheus import HttpPrometheus, PrometheusSettings
from tailguard.metrics.promql import QueryScope

NAMESPACE: Final = "engine-test"
MODEL: Final = "tiny"
#: The same client load against both servers: only --max-num-seqs differs. Prefill-heavy on purpose
#: (~670 prompt tokens, 16 generated): TTFT is then mostly engine work (prefill and queueing), which
#: vLLM times, rather than the API server's token delivery, which it does not (docs/engine-contract.md).
CONCURRENCY: Final = 12
REQUESTS: Final = 120
MAX_TOKENS: Final = 16
PROMPT_WORDS: Final = 300
SMALL_BATCH: Final = 2
LARGE_BATCH: Final = 16
#: Hard bounds: no run may take longer than this, whatever the engine does.
LOAD_DEADLINE_S: Final = 240
SERVER_START_TIMEOUT_S: Final = 420
#: Covers a whole run (scrapes of the idle server before the load included), so rate() sees it all.
RATE_WINDOW: Final = "10m"
#: The SLOs of the narrowed reading: the ones the contract tests judge by default (both vLLM edges).
NARROWED_SLOS: Final = (1.0, 0.1)
#: Every run of this session, for the terminal summary.
RUNS: list[EngineRun] = []


@dataclass
class EngineRun:
    """Everything one server run produced, for the tests to judge after the server is gone."""

    max_num_seqs: int
    service: str
    started_s: float
    load: LoadResult
    before: Exposition
    after: Exposition
    cycle: MetricsReading
    #: The reading the control loop makes for a service with ``NARROWED_SLOS``, at the same instant.
    narrowed: MetricsReading
    scope: QueryScope
    extra: dict[str, float]
    log_file: Path
    prometheus_url: str

    @property
    def key(self) -> tuple[str, str]:
        return (NAMESPACE, self.service)

    def delta(self, name: str) -> float:
        """How much a counter-like sample grew over the load (the server started fresh)."""
        return self.after.total(name) - self.before.total(name)

    def describe(self) -> str:
        return json.dumps(
            {
                "max_num_seqs": self.max_num_seqs,
                "started_s": round(self.started_s, 1),
                **self.load.summary(),
                **self.extra,
            },
            indent=None,
        )


def _prom_scalar(prom: Prometheus, expr: str) -> float:
    result = prom.query(expr)
    return float(result[0]["value"][1]) if result else float("nan")


def _wait_for_series(prom: Prometheus, expr: str, want: float, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    got = float("nan")
    while time.monotonic() < deadline:
        got = _prom_scalar(prom, expr)
        if got == want:
            return
        time.sleep(0.5)
    raise AssertionError(
        f"Prometheus never saw {what}: `{expr}` = {got}, expected {want} (after {timeout:.0f}s)"
    )


def run_engine(
    engine_python: Path, model_dir: Path, workdir: Path, prom: Prometheus, max_num_seqs: int
) -> EngineRun:
    service = f"{MODEL}-seqs{max_num_seqs}"
    server = VllmServer(
        python=engine_python,
        model_dir=model_dir,
        log_file=workdir / f"vllm-{service}.log",
        served_name=MODEL,
        max_num_seqs=max_num_seqs,
    )
    selector = f'{{namespace="{NAMESPACE}", inference_service="{service}"}}'
    with running(server, timeout=SERVER_START_TIMEOUT_S):
        prom.set_targets([server.target], {"namespace": NAMESPACE, "inference_service": service})
        # Idle samples first (all counters at zero), so rate() over the window sees the whole load.
        _wait_idle_scrapes(prom, selector)
        before = Exposition.parse(server.metrics_text())
        load = asyncio.run(
            run_load(
                server.url,
                model=MODEL,
                prompt=lambda i: tiny_model.prompt(i, PROMPT_WORDS),
                requests=REQUESTS,
                concurrency=CONCURRENCY,
                max_tokens=MAX_TOKENS,
                deadline_s=LOAD_DEADLINE_S,
            )
        )
        after = Exposition.parse(server.metrics_text())
        done = len(load.ok)
        _wait_for_series(
            prom,
            f"sum(vllm:time_to_first_token_seconds_count{selector})",
            float(done),
            f"all {done} requests of {service}",
        )
        time.sleep(2.5)  # two more scrapes with nothing changing: the window's end is settled
        scope = QueryScope(namespaces=(NAMESPACE,), rate_window=RATE_WINDOW)
        at = time.time()
        cycle = asyncio.run(_read(prom.url, scope, at))
        # The same instant read as the control loop reads it: the latency buckets at the SLO
        # edges only, the p99s computed by Prometheus.
        narrowed = asyncio.run(_read(prom.url, scope, at, {(NAMESPACE, service): NARROWED_SLOS}))
        extra = {
            "load_average_1m": round(os.getloadavg()[0], 2),
            "max_running": _prom_scalar(
                prom, f"max_over_time(sum(vllm:num_requests_running{selector})[{RATE_WINDOW}:1s])"
            ),
            "max_waiting": _prom_scalar(
                prom, f"max_over_time(sum(vllm:num_requests_waiting{selector})[{RATE_WINDOW}:1s])"
            ),
        }
        prom.set_targets([])
        run = EngineRun(
            max_num_seqs=max_num_seqs,
            service=service,
            started_s=server.started_s or float("nan"),
            load=load,
            before=before,
            after=after,
            cycle=cycle,
            narrowed=narrowed,
            scope=scope,
            extra=extra,
            log_file=server.log_file,
            prometheus_url=prom.url,
        )
        RUNS.append(run)
        return run


def _wait_idle_scrapes(prom: Prometheus, selector: str, scrapes: int = 3, timeout: float = 60) -> None:
    expr = f"count_over_time(vllm:num_requests_running{selector}[1m])"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _prom_scalar(prom, expr) >= scrapes:
            return
        time.sleep(0.5)
    raise AssertionError(
        f"Prometheus did not scrape the engine {scrapes} times within {timeout:.0f}s: {prom.targets()}"
    )


async def _read(
    url: str, scope: QueryScope, at: float, slos: dict[tuple[str, str], SloEdges] | None = None
) -> MetricsReading:
    source = HttpPrometheus(PrometheusSettings(url=url, timeout_s=10))
    try:
        return await read_metrics(source, scope, at=at, slos=slos)
    finally:
        await source.aclose()
