"""The benchmark's runs: each trace of the catalogue through every policy, the hindsight flat
fleet, the goals, and with ``--frontier`` / ``--sweep`` the frontiers; tables on stdout, JSON and
plots under ``--out``."""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tailguard.sim import synthetic
from tailguard.sim.bench import plots
from tailguard.sim.bench.catalogue import (
    DEFAULT_TRACES,
    FRONTIER_FLOORS,
    FRONTIER_TAILGUARD,
    HOUR,
    LEAD_IN_S,
    MIX,
    PROFILE,
    SLO,
    SWEPT,
    TRACES,
    WARMUP_S,
    BenchTrace,
)
from tailguard.sim.bench.choices import check_jobs, chosen, directory
from tailguard.sim.bench.choices import seeds as parse_seeds
from tailguard.sim.bench.goals import Goal, goals
from tailguard.sim.bench.sweep import SweepPoint, at_target, pareto, ratios, sweep, worst
from tailguard.sim.frontier import Point, frontier, informed_with_window
from tailguard.sim.policies import DEFAULT_POLICIES, REGISTRY
from tailguard.sim.profiles import get_profile
from tailguard.sim.report import (
    spread,
    summary_document,
    table,
    trace_summary,
    write_plots,
    write_summary,
    write_timeline,
)
from tailguard.sim.runner import LeadInFlat, Scenario, ScenarioResult, lead_in_flat, run


def speed(seed: int = 0) -> tuple[int, float]:
    """Seconds for one hour of 20,000 requests through tailguard (the issue's speed goal)."""
    trace = synthetic.poisson(20000 / HOUR, HOUR, mix=MIX, seed=seed, lead_s=WARMUP_S)
    scenario = Scenario(trace, get_profile(PROFILE), SLO, warmup_s=WARMUP_S)
    started = time.perf_counter()
    result = run(scenario, ["tailguard"], progress=False)
    elapsed = time.perf_counter() - started - result.seconds["lower_bound"]
    return len(trace), elapsed


def scenario_of(bench: BenchTrace, seed: int, lead_s: float = LEAD_IN_S, rate_scale: float = 1.0) -> Scenario:
    """The benchmark's scenario for ``bench`` and ``seed``; with ``rate_scale`` k the same requests
    at k times the rate (the clock, lead-in included, compressed by k): the policy at other rates
    and burst lengths than the ones it is tuned on."""
    trace = bench.make(seed, lead_s)
    if rate_scale != 1.0:
        trace = trace.scaled(rate_scale)
    return Scenario(trace, get_profile(bench.profile), bench.slo, seed=seed, warmup_s=lead_s / rate_scale)


@dataclass
class TraceRun:
    """What one trace and seed produced."""

    result: ScenarioResult
    checks: list[Goal]
    document: dict[str, object]
    informed: list[Point] | None = None
    swept: list[SweepPoint] = field(default_factory=list)


def lead_in_flat_line(found: LeadInFlat, goodput: float, tailguard_gpu_hours: float | None) -> str:
    """The flat fleet sized on the lead-in, in one line: what it reached on the trace, at what
    cost, and tailguard's GPU-hours against it."""
    if found.replicas is None or found.summary is None:
        return "flat fleet sized on the lead-in: none within the bounds reaches the target there"
    s = found.summary
    mark = "" if s.attainment >= goodput else f" (under the target {goodput})"
    ratio = ""
    if tailguard_gpu_hours and s.gpu_hours:
        ratio = f"; tailguard {tailguard_gpu_hours / s.gpu_hours:.2f}x it"
    return (
        f"flat fleet sized on the lead-in: {found.replicas} replicas, on the trace {s.attainment:.4f}{mark} "
        f"at {s.gpu_hours:.2f} GPU-h{ratio}"
    )


def _run_trace(
    bench: BenchTrace,
    seed: int,
    policies: list[str],
    target: Path,
    plot_dir: str | None,
    *,
    with_frontier: bool,
    with_sweep: bool,
    jobs: int,
    lead_s: float,
    rate_scale: float = 1.0,
) -> TraceRun:
    scenario = scenario_of(bench, seed, lead_s, rate_scale)
    trace = scenario.trace
    print(
        f"\n== {bench.key}, seed {seed}: {bench.describe} "
        f"({len(trace)} requests, {trace.mean_rate:.1f} req/s)",
        flush=True,
    )
    result = run(scenario, policies, progress=False, with_flat=True)
    scenario = result.scenario  # with the lead-in's schedule
    print(table(result.summaries, result.lower_bound_gpu_hours, bench.slo.goodput))
    flat = result.flat
    if flat is not None:
        counts = ", ".join(f"{n}: {a:.4f}" for n, a, _ in sorted(flat.tried))
        found = f"{flat.replicas} replicas" if flat.replicas is not None else "none within the bounds"
        print(f"hindsight flat fleet: {found} (searched {counts})")
    points = None
    windowed = None
    if with_frontier and bench.rate is not None and bench.per_replica is not None:
        rate = bench.rate(seed, lead_s)
        if not bench.jumps:
            windowed = informed_with_window(scenario, rate, result.lower_bound, per_replica=bench.per_replica)
        else:
            points = frontier(
                scenario,
                rate,
                result.lower_bound,
                per_replica=bench.per_replica,
                floors=FRONTIER_FLOORS,
                tailguard_settings=FRONTIER_TAILGUARD,
            )
    tg = next((s for s in result.summaries if s.policy == "tailguard"), None)
    from_lead_in = lead_in_flat(scenario, result.lower_bound)
    if from_lead_in is not None:
        print(lead_in_flat_line(from_lead_in, bench.slo.goodput, tg.gpu_hours if tg is not None else None))
    checks: list[Goal] = []
    if tg is not None:
        print("tailguard GPU-hours against:")
        for s in result.summaries:
            if s.policy != "tailguard":
                print(f"  {s.policy:<10} {tg.gpu_hours / s.gpu_hours:5.2f}x  (attainment {s.attainment:.4f})")
        print(f"  {'bound':<10} {tg.gpu_hours / result.lower_bound_gpu_hours:5.2f}x")
        checks = goals(result, bench, points, windowed)
        for check in checks:
            print(f"  {check.line()}")
    swept: list[SweepPoint] = []
    if with_sweep:
        swept = sweep(scenario, result.lower_bound, flat, SWEPT, jobs=jobs)
        checks.extend(_print_sweep(bench, result, swept, target, plot_dir))
    target.mkdir(parents=True, exist_ok=True)
    document = summary_document(
        result.summaries,
        lower_bound_gpu_hours=result.lower_bound_gpu_hours,
        trace=trace_summary(trace),
        settings={
            "describe": bench.describe,
            "seed": seed,
            "profile": bench.profile,
            "lead_in_s": lead_s,
            "rate_scale": rate_scale,
        },
    )
    document["goals"] = [
        {"goal": g.goal, "met": g.met, "measured": g.measured, "note": g.note} for g in checks
    ]
    document["seconds"] = result.seconds
    if flat is not None:
        document["flat_fleet"] = {
            "replicas": flat.replicas,
            "tried": [{"replicas": n, "attainment": a, "gpu_hours": g} for n, a, g in flat.tried],
        }
    if from_lead_in is not None:
        document["lead_in_flat"] = {
            "replicas": from_lead_in.replicas,
            **(from_lead_in.summary.as_dict() if from_lead_in.summary is not None else {}),
        }
    if swept:
        document["sweep"] = [
            {"policy": p.policy, "label": p.label, "settings": dict(p.settings), **p.summary.as_dict()}
            for p in swept
        ]
    write_summary(target / "summary.json", document)
    write_timeline(target / "timeline.csv", result.runs, bench.slo)
    written = write_plots(target, result.runs, bench.slo)
    # A sweep runs few policies in its main table: its replica and TTFT plots stay in --out.
    if plot_dir and not with_sweep:
        dest = Path(plot_dir)
        dest.mkdir(parents=True, exist_ok=True)
        for plot in written:
            (dest / f"bench-{bench.key}-{plot.name}").write_bytes(plot.read_bytes())
    return TraceRun(result, checks, document, points, swept)


def _print_sweep(
    bench: BenchTrace, result: ScenarioResult, points: list[SweepPoint], target: Path, plot_dir: str | None
) -> list[Goal]:
    """Each policy's frontier and tailguard's GPU-hours against each peer's frontier points."""
    print(f"\n-- {bench.key}: every policy over its knob (frontier points marked *)")
    print("| policy | setting | attainment | GPU-h |")
    print("| --- | --- | --- | --- |")
    for policy in dict.fromkeys(p.policy for p in points):
        mine = [p for p in points if p.policy == policy]
        front = pareto(mine)
        for p in sorted(mine, key=lambda p: p.summary.gpu_hours):
            star = "*" if p in front else ""
            print(f"| {policy} | {p.label}{star} | {p.summary.attainment:.4f} | {p.summary.gpu_hours:.2f} |")
    print(
        f"\n-- {bench.key}: tailguard's GPU-hours at the attainment each peer setting reaches "
        f"(capped at the target {bench.slo.goodput})"
    )
    checks = []
    for peer, entries in ratios(points, bench.slo.goodput).items():
        for entry in entries:
            theirs = entry.peer.summary
            match = entry.tailguard
            if match is None:
                text = "tailguard does not reach it"
            else:
                text = f"{entry.ratio:.2f}x ({match.label}, {match.summary.gpu_hours:.2f} GPU-h)"
            print(
                f"  {entry.peer.label:<40} {theirs.attainment:.4f} at {theirs.gpu_hours:7.2f} GPU-h: {text}"
            )
        bad = worst(entries)
        value = bad.ratio
        theirs_at, ours_at = at_target(points, peer, bench.slo.goodput)
        if theirs_at is None:
            note = f"no {peer} setting reaches the target"
        elif ours_at is None:
            note = (
                f"at the target: {theirs_at.label} {theirs_at.summary.gpu_hours:.2f} GPU-h, tailguard never"
            )
        else:
            ours_h, peers_h = ours_at.summary.gpu_hours, theirs_at.summary.gpu_hours
            note = (
                f"at the target: {ours_h / peers_h:.2f}x "
                f"({ours_h:.2f} vs {theirs_at.label} {peers_h:.2f} GPU-h)"
            )
        checks.append(
            Goal(
                f"tailguard's frontier dominates {peer}'s (<= 0.8x its GPU-hours at its attainment)",
                value is not None and value <= 0.8,
                f"tailguard never reaches {bad.peer.summary.attainment:.4f} ({bad.peer.label})"
                if value is None
                else f"worst {value:.2f}x, against {bad.peer.label} at {bad.peer.summary.attainment:.4f}",
                note,
            )
        )
    by = {s.policy: s for s in result.summaries}
    flat = by.get("flat")
    path = plots.plot_sweep(
        bench.key,
        points,
        goodput=bench.slo.goodput,
        flat=(flat.gpu_hours, flat.attainment) if flat is not None else None,
        bound_gpu_hours=result.lower_bound_gpu_hours,
        path=target / "sweep.png",
    )
    if plot_dir:
        dest = Path(plot_dir)
        dest.mkdir(parents=True, exist_ok=True)
        (dest / f"bench-{bench.key}-sweep.png").write_bytes(path.read_bytes())
    return checks


def _print_spread(key: str, results: list[ScenarioResult]) -> dict[str, object]:
    rows = spread([r.summaries for r in results], [r.lower_bound_gpu_hours for r in results])
    seeds = ", ".join(str(r.scenario.seed) for r in results)
    print(f"\n== {key}: mean [min, max] over seeds {seeds}")
    print("| policy | attainment | GPU-h | x bound | reversals | seeds under the target |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, row in rows.items():
        print(
            f"| {name} | {row['attainment'][0]:.4f} [{row['attainment'][1]:.4f}, {row['attainment'][2]:.4f}] "
            f"| {row['gpu_hours'][0]:.2f} [{row['gpu_hours'][1]:.2f}, {row['gpu_hours'][2]:.2f}] "
            f"| {row['x_bound'][0]:.2f} [{row['x_bound'][1]:.2f}, {row['x_bound'][2]:.2f}] "
            f"| {' / '.join(str(int(v)) for v in row['reversals'][3:])} "
            f"| {', '.join(str(seed) for seed in seeds_under_target(name, results)) or '-'} |"
        )
    return {"seeds": [r.scenario.seed for r in results], "policies": rows}


def seeds_under_target(policy: str, results: list[ScenarioResult]) -> list[int]:
    """The seeds on which ``policy`` missed the goodput target, by its exact attainment (a table's
    four digits print 0.98997 as 0.9900)."""
    return [
        r.scenario.seed
        for r in results
        for s in r.summaries
        if s.policy == policy and s.attainment < r.scenario.slo.goodput
    ]


def _frontier(
    bench: BenchTrace, per_seed: list[list[Point]], out: Path, plot_dir: str | None
) -> dict[str, object]:
    """The attainment / GPU-hours frontier on one trace, averaged over the seeds run."""
    labels = [p.label for p in per_seed[0]]
    rows: dict[str, dict[str, list[float]]] = {}
    print(f"\n== {bench.key}: attainment / GPU-hours frontier, mean [min, max] over {len(per_seed)} seed(s)")
    print("| policy | attainment | GPU-h |")
    print("| --- | --- | --- |")
    for i, name in enumerate(labels):
        att = [points[i].summary.attainment for points in per_seed]
        gpu = [points[i].summary.gpu_hours for points in per_seed]
        rows[name] = {"attainment": att, "gpu_hours": gpu}
        print(
            f"| {name} | {np.mean(att):.4f} [{min(att):.4f}, {max(att):.4f}] "
            f"| {np.mean(gpu):.2f} [{min(gpu):.2f}, {max(gpu):.2f}] |"
        )
    path = plots.plot_informed(bench.key, rows, bench.slo.goodput, out / bench.key / "frontier.png")
    if plot_dir:
        dest = Path(plot_dir)
        dest.mkdir(parents=True, exist_ok=True)
        (dest / f"bench-{bench.key}-frontier.png").write_bytes(path.read_bytes())
    return {"points": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tailguard.sim.bench",
        description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--out", default="out/bench", help="directory for per-trace outputs")
    parser.add_argument(
        "--traces",
        default=",".join(DEFAULT_TRACES),
        help=f"comma-separated, from: {', '.join(t.key for t in TRACES)}",
    )
    parser.add_argument("--seed", type=int, help="one seed (the same as --seeds N)")
    parser.add_argument(
        "--seeds", default="1", help="comma-separated seeds; with more than one, mean and spread are printed"
    )
    parser.add_argument(
        "--policies",
        default=",".join(DEFAULT_POLICIES),
        help="comma-separated policies to run (the flat fleet is always searched), from: "
        + ", ".join(REGISTRY),
    )
    parser.add_argument(
        "--frontier",
        action="store_true",
        help="also draw attainment against GPU-hours on the traces with a jump (bursty, step): an idealised "
        "reactive policy at several floors, tailguard with burst reserve, headroom or a floor, static and "
        "KPA; on the others, the idealised policy held by the declared scale-down window",
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="also run every policy over its knob grid (tailguard over its goodput target) and print "
        "tailguard's GPU-hours at the attainment each peer setting reaches",
    )
    parser.add_argument("--jobs", type=int, default=1, help="processes for --sweep")
    parser.add_argument(
        "--lead-in-s",
        type=float,
        default=LEAD_IN_S,
        help="seconds of the same process before each trace, served while every policy observes",
    )
    parser.add_argument(
        "--rate-scale",
        type=float,
        default=1.0,
        help="run each trace at this many times its rate (its clock, lead-in included, compressed as "
        "much): the policy at rates and burst lengths it was not tuned on; not with --frontier or --sweep",
    )
    parser.add_argument("--no-speed", action="store_true", help="skip the speed measurement")
    parser.add_argument("--plots", help="also copy each trace's plots here (e.g. docs/img)")
    args = parser.parse_args(argv)
    known = {t.key: t for t in TRACES}
    wanted = chosen(parser, args.traces, list(known), "traces")
    if not (math.isfinite(args.rate_scale) and args.rate_scale > 0):
        parser.error(f"--rate-scale must be a positive number, got {args.rate_scale}")
    if args.rate_scale != 1.0 and (args.frontier or args.sweep):
        parser.error("--rate-scale runs the traces and their goals only, not --frontier or --sweep")
    seeds = [args.seed] if args.seed is not None else parse_seeds(parser, args.seeds)
    policies = chosen(parser, args.policies, list(REGISTRY), "policies")
    if "flat" not in policies:
        policies.append("flat")
    check_jobs(parser, args.jobs)
    out = directory(parser, args.out, "--out")
    if args.plots:
        directory(parser, args.plots, "--plots")
    report: dict[str, object] = {}
    all_met = True
    for key in wanted:
        bench = known[key]
        runs = []
        frontiers: list[list[Point]] = []
        for n, seed in enumerate(seeds):
            target = out / bench.key if len(seeds) == 1 else out / bench.key / f"seed-{seed}"
            done = _run_trace(
                bench,
                seed,
                policies,
                target,
                args.plots if n == 0 else None,
                with_frontier=args.frontier,
                with_sweep=args.sweep,
                jobs=args.jobs,
                lead_s=args.lead_in_s,
                rate_scale=args.rate_scale,
            )
            all_met &= all(check.met for check in done.checks)
            runs.append(done)
            if done.informed is not None:
                frontiers.append(done.informed)
        entry: dict[str, object] = {"runs": [r.document for r in runs]}
        if len(seeds) > 1:
            entry["spread"] = _print_spread(bench.key, [r.result for r in runs])
        if frontiers:
            entry["frontier"] = {"seeds": seeds, **_frontier(bench, frontiers, out, args.plots)}
        report[bench.key] = entry if len(seeds) > 1 or args.frontier else runs[0].document
    if not args.no_speed:
        count, seconds = speed(seeds[0])
        met = seconds <= 30.0
        all_met &= met
        verdict = "met" if met else "MISSED"
        print(f"\nspeed: one hour, {count} requests, tailguard: {seconds:.1f} s [{verdict} <= 30 s]")
        report["speed"] = {"requests": count, "seconds": seconds}
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"\nall goals met: {all_met}")
    return 0
