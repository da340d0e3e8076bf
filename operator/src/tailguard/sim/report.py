"""From runs to numbers: ``summary.json``, the timeline CSV, plots and the comparison table.

The keys of ``summary.json`` are a stable interface (``SUMMARY_VERSION`` changes when they do);
docs/simulator.md lists them.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tailguard.sim.fleet import RunResult
from tailguard.sim.oracle import SloTarget, met
from tailguard.sim.trace import Trace

SUMMARY_VERSION = 1
#: Width of the bins used for the timeline's ground-truth tail and for recovery times.
BIN_S = 30.0


@dataclass(frozen=True)
class PolicySummary:
    policy: str
    requests: int
    failed_requests: int
    attainment: float
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_p50_s: float | None
    tpot_p99_s: float | None
    gpu_hours: float
    mean_replicas: float
    max_replicas: int
    scale_events: int
    direction_reversals: int
    max_batch_changes: int
    worst_recovery_s: float

    def as_dict(self) -> dict[str, Any]:
        return {k: _json_number(v) for k, v in self.__dict__.items()}


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _percentile(values: np.ndarray, q: float) -> float:
    """The ``q``-th percentile, interpolated between finite neighbours; a failed request's
    latency (infinite) is an upper neighbour that no interpolation reaches below: the order
    statistic is read instead (``inf`` when failures fill that rank)."""
    if not len(values):
        return math.nan
    if np.isfinite(values).all():
        return float(np.percentile(values, q))
    return float(np.percentile(values, q, method="higher"))


def direction_reversals(events: Sequence[tuple[float, int, int]]) -> int:
    """Scale events whose direction is opposite to the previous event's."""
    count, last = 0, 0
    for _, before, after in events:
        direction = (after > before) - (after < before)
        if direction and last and direction != last:
            count += 1
        if direction:
            last = direction
    return count


def worst_recovery(run: RunResult, slo: SloTarget) -> float:
    """Longest run of consecutive ``BIN_S`` bins (by arrival) whose attainment is under target."""
    ok = met(run.ttft, run.tpot, slo)
    arrivals = run.trace.arrival_s
    if not len(arrivals):
        return 0.0
    bins = (arrivals // BIN_S).astype(np.int64)
    total = np.bincount(bins)
    good = np.bincount(bins, weights=ok.astype(np.float64), minlength=len(total))
    bad = (total > 0) & (good < slo.goodput * total)
    longest = current = 0
    for flag in bad:
        current = current + 1 if flag else 0
        longest = max(longest, current)
    return longest * BIN_S


def summarise(run: RunResult, slo: SloTarget) -> PolicySummary:
    ok = met(run.ttft, run.tpot, slo)
    ttft = run.ttft[~np.isnan(run.ttft)]
    tpot = run.tpot[np.isfinite(run.tpot)]
    duration = max(run.end_s, 1e-9)
    return PolicySummary(
        policy=run.policy,
        requests=len(run.ttft),
        failed_requests=int(np.sum(~np.isfinite(run.ttft))),
        attainment=float(ok.mean()) if len(ok) else 1.0,
        ttft_p50_s=_percentile(ttft, 50),
        ttft_p99_s=_percentile(ttft, 99),
        tpot_p50_s=_percentile(tpot, 50) if len(tpot) else None,
        tpot_p99_s=_percentile(tpot, 99) if len(tpot) else None,
        gpu_hours=run.gpu_seconds / 3600.0,
        mean_replicas=run.replica_seconds / duration,
        max_replicas=max((row.desired for row in run.timeline), default=0),
        scale_events=len(run.scale_events),
        direction_reversals=direction_reversals(run.scale_events),
        max_batch_changes=len(run.max_batch_changes),
        worst_recovery_s=worst_recovery(run, slo),
    )


def trace_summary(trace: Trace) -> dict[str, Any]:
    """What ``summary.json`` says of the trace a run replayed."""
    return {
        "name": trace.name,
        "requests": len(trace),
        "duration_s": trace.duration_s,
        "mean_rate": trace.mean_rate,
    }


def summary_document(
    summaries: Sequence[PolicySummary],
    *,
    lower_bound_gpu_hours: float | None,
    trace: dict[str, Any],
    settings: dict[str, Any],
) -> dict[str, Any]:
    """The whole ``summary.json``: version, trace, settings, the bound and one entry per policy."""
    policies = {s.policy: s.as_dict() for s in summaries}
    ratios: dict[str, Any] = {}
    tg = next((s for s in summaries if s.policy == "tailguard"), None)
    if tg is not None:
        for s in summaries:
            if s.policy != "tailguard" and s.gpu_hours > 0:
                ratios[s.policy] = tg.gpu_hours / s.gpu_hours
        if lower_bound_gpu_hours:
            ratios["lower_bound"] = tg.gpu_hours / lower_bound_gpu_hours
    return {
        "version": SUMMARY_VERSION,
        "trace": trace,
        "settings": settings,
        "lower_bound_gpu_hours": lower_bound_gpu_hours,
        "tailguard_gpu_hours_ratio": ratios,
        "policies": policies,
    }


def write_summary(path: Path, document: dict[str, Any]) -> None:
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def _truth(run: RunResult, slo: SloTarget, t: float, span: float) -> tuple[float, float, float]:
    """Arrival rate, p99 TTFT and attainment of requests that arrived in ``[t - span, t)``."""
    arrivals = run.trace.arrival_s
    lo, hi = np.searchsorted(arrivals, [t - span, t])
    if hi <= lo:
        return 0.0, math.nan, math.nan
    ttft = run.ttft[lo:hi]
    ok = met(ttft, run.tpot[lo:hi], slo)
    return (hi - lo) / span, _percentile(ttft, 99), float(ok.mean())


TIMELINE_COLUMNS = (
    "policy",
    "time_s",
    "arrival_rps",
    "desired",
    "ready",
    "starting",
    "pending",
    "draining",
    "gpus",
    "max_batch",
    "ttft_p99_s",
    "attainment",
    "recommended",
    "capacity_per_replica",
    "limits",
    "reason_code",
    "reason",
)


def write_timeline(path: Path, runs: Sequence[RunResult], slo: SloTarget, *, span_s: float = 60.0) -> None:
    """One row per policy and scrape; latency columns are the ground truth of the last ``span_s``."""
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(TIMELINE_COLUMNS)
        for run in runs:
            for row in run.timeline:
                rate, p99, att = _truth(run, slo, row.time, span_s)
                action = row.action
                writer.writerow(
                    (
                        run.policy,
                        f"{row.time:.1f}",
                        f"{rate:.3f}",
                        row.desired,
                        row.ready,
                        row.starting,
                        row.pending,
                        row.draining,
                        row.gpus,
                        row.max_batch,
                        "" if math.isnan(p99) else f"{p99:.4f}",
                        "" if math.isnan(att) else f"{att:.4f}",
                        "" if action is None or action.recommended is None else action.recommended,
                        ""
                        if action is None or action.capacity_per_replica is None
                        else f"{action.capacity_per_replica:.3f}",
                        "" if action is None else " ".join(action.limits),
                        "" if action is None else action.reason_code,
                        "" if action is None else action.reason,
                    )
                )


def write_plots(out: Path, runs: Sequence[RunResult], slo: SloTarget, *, span_s: float = 60.0) -> list[Path]:
    """``replicas.png`` (load and replicas per policy) and ``ttft.png`` (p99 TTFT against the SLO)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not runs:
        return []
    trace = runs[0].trace
    edges = np.arange(0.0, trace.duration_s + span_s, span_s)
    counts, _ = np.histogram(trace.arrival_s, bins=edges)
    fig, (ax_load, ax_rep) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    ax_load.step(edges[:-1] / 60.0, counts / span_s, where="post", color="black", lw=1)
    ax_load.set_ylabel("arrivals (req/s)")
    ax_load.set_title(f"{trace.name}: load and replicas")
    for run in runs:
        times = [r.time / 60.0 for r in run.timeline]
        held = [r.gpus for r in run.timeline]
        width = 2.2 if run.policy == "tailguard" else 1.1
        ax_rep.step(times, held, where="post", lw=width, label=run.policy)
    ax_rep.set_ylabel("GPUs held")
    ax_rep.set_xlabel("minutes")
    ax_rep.legend(ncol=4, fontsize=8)
    fig.tight_layout()
    paths = [out / "replicas.png"]
    fig.savefig(paths[0], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(11, 4.5))
    for run in runs:
        bins = (run.trace.arrival_s // span_s).astype(np.int64)
        p99 = []
        for b in range(int(bins.max()) + 1 if len(bins) else 0):
            values = run.ttft[bins == b]
            p99.append(float(np.percentile(values, 99)) if len(values) else math.nan)
        clipped = np.minimum(np.asarray(p99), 100.0)
        width = 2.2 if run.policy == "tailguard" else 1.1
        ax.plot(np.arange(len(p99)) * span_s / 60.0, clipped, lw=width, label=run.policy)
    ax.axhline(slo.ttft_s, color="red", ls="--", lw=1, label="SLO")
    ax.set_yscale("log")
    ax.set_ylabel(f"p99 TTFT per {span_s:.0f} s (s)")
    ax.set_xlabel("minutes")
    ax.legend(ncol=5, fontsize=8)
    fig.tight_layout()
    paths.append(out / "ttft.png")
    fig.savefig(paths[1], dpi=110)
    plt.close(fig)
    return paths


def table(summaries: Sequence[PolicySummary], lower_bound_gpu_hours: float | None, goodput: float) -> str:
    """The comparison table printed after a run."""
    tg = next((s for s in summaries if s.policy == "tailguard"), None)
    head = (
        f"{'policy':<10} {'attain':>7} {'GPU-h':>7} {'×bound':>7} {'tg/this':>7} {'p99 TTFT':>9} "
        f"{'mean rep':>8} {'scales':>6} {'revers':>6} {'batch':>5} {'recover':>8}"
    )
    lines = [head, "-" * len(head)]
    for s in summaries:
        bound = f"{s.gpu_hours / lower_bound_gpu_hours:.2f}" if lower_bound_gpu_hours else "-"
        ratio = f"{tg.gpu_hours / s.gpu_hours:.2f}" if tg is not None and s.gpu_hours > 0 else "-"
        mark = "" if s.attainment >= goodput else "!"
        p99 = "inf" if not math.isfinite(s.ttft_p99_s) else f"{s.ttft_p99_s * 1e3:.0f} ms"
        lines.append(
            f"{s.policy:<10} {s.attainment:>6.4f}{mark:1} {s.gpu_hours:>7.2f} {bound:>7} {ratio:>7} {p99:>9} "
            f"{s.mean_replicas:>8.2f} {s.scale_events:>6} {s.direction_reversals:>6} "
            f"{s.max_batch_changes:>5} {s.worst_recovery_s:>7.0f}s"
        )
    if lower_bound_gpu_hours:
        lines.append(f"lower bound: {lower_bound_gpu_hours:.2f} GPU-h   (! = attainment under {goodput})")
    return "\n".join(lines)


def spread(
    runs: Sequence[Sequence[PolicySummary]], bounds: Sequence[float]
) -> dict[str, dict[str, tuple[float, ...]]]:
    """Per policy, over several seeds of one trace: (mean, min, max) of attainment, GPU-hours and
    GPU-hours over the lower bound, and (mean, min, max, then each seed's) direction reversals."""
    rows: dict[str, dict[str, list[float]]] = {}
    for summaries, bound in zip(runs, bounds, strict=True):
        for s in summaries:
            row = rows.setdefault(
                s.policy, {"attainment": [], "gpu_hours": [], "x_bound": [], "reversals": []}
            )
            row["attainment"].append(s.attainment)
            row["gpu_hours"].append(s.gpu_hours)
            row["x_bound"].append(s.gpu_hours / bound if bound > 0 else math.nan)
            row["reversals"].append(float(s.direction_reversals))
        row = rows.setdefault(
            "lower bound", {"attainment": [], "gpu_hours": [], "x_bound": [], "reversals": []}
        )
        row["attainment"].append(math.nan)
        row["gpu_hours"].append(bound)
        row["x_bound"].append(1.0)
        row["reversals"].append(0.0)
    out: dict[str, dict[str, tuple[float, ...]]] = {}
    for policy, row in rows.items():
        out[policy] = {}
        for key, values in row.items():
            summary = (float(np.mean(values)), float(np.min(values)), float(np.max(values)))
            out[policy][key] = (*summary, *values) if key == "reversals" else summary
    return out
