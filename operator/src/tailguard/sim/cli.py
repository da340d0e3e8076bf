"""``tailguard simulate``: a trace through tailguard and the peers' autoscalers, side by side.

Wire it as a subcommand with ``add_arguments(parser)`` and ``run(args)``; ``python -m
tailguard.sim`` runs it on its own.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from tailguard.cron import CronError, parse_cron, parse_duration, zone
from tailguard.policy import ScheduleWindow
from tailguard.sim import synthetic
from tailguard.sim.options import SYNTHETIC as SYNTHETIC
from tailguard.sim.options import add_arguments as add_arguments
from tailguard.sim.oracle import SloTarget
from tailguard.sim.profiles import get_profile
from tailguard.sim.report import summary_document, table, write_plots, write_summary, write_timeline
from tailguard.sim.runner import POLICIES, Scenario
from tailguard.sim.runner import run as run_scenario
from tailguard.sim.trace import Trace, TraceError, load_trace

EXIT_USAGE = 2


def _synthetic_trace(args: argparse.Namespace) -> Trace:
    mix = synthetic.MIXES[args.mix]
    rate, peak, dur, seed = args.rate, args.peak_rate, args.duration_s, args.seed
    if args.synthetic == "poisson":
        return synthetic.poisson(rate, dur, mix=mix, seed=seed)
    if args.synthetic == "diurnal":
        return synthetic.diurnal(rate, dur, mix=mix, seed=seed)
    if args.synthetic == "bursty":
        return synthetic.mmpp(rate, peak or 2.5 * rate, dur, mix=mix, seed=seed)
    if args.synthetic == "gamma":
        return synthetic.gamma(rate, dur, mix=mix, seed=seed)
    if args.synthetic == "step":
        return synthetic.step(rate, peak or 2.0 * rate, dur, mix=mix, seed=seed)
    return synthetic.ramp(rate, peak or 2.0 * rate, dur, mix=mix, seed=seed)


def load(args: argparse.Namespace) -> Trace:
    """The trace the options describe (a ``TraceError`` says what is wrong)."""
    if bool(args.trace) == bool(args.synthetic):
        raise TraceError("give exactly one of --trace FILE and --synthetic KIND")
    trace = load_trace(args.trace) if args.trace else _synthetic_trace(args)
    if args.rate_scale != 1.0:
        trace = trace.scaled(args.rate_scale)
    if args.window:
        start, _, end = args.window.partition(":")
        try:
            trace = trace.window(float(start or 0.0), float(end) if end else None)
        except ValueError as exc:
            raise TraceError(f"--window must be START:END in seconds, got {args.window!r}") from exc
    if len(trace) < 2:
        raise TraceError("the trace has fewer than two requests")
    return trace


def parse_schedule(text: str) -> ScheduleWindow:
    """``NAME=CRON,DURATION,MIN[,TZ]`` as a policy window; ``ValueError`` with a one-line reason."""
    name, equals, rest = text.partition("=")
    fields = [f.strip() for f in rest.split(",")]
    if not equals or not name.strip() or len(fields) not in (3, 4):
        raise ValueError(f"--schedule must be NAME=CRON,DURATION,MIN[,TZ], got {text!r}")
    start, duration, minimum = fields[:3]
    time_zone = fields[3] if len(fields) == 4 else "UTC"
    try:
        parse_cron(start)
        seconds = parse_duration(duration)
        zone(time_zone)
    except CronError as exc:
        raise ValueError(f"--schedule {name.strip()}: {exc}") from None
    if not minimum.isdigit() or int(minimum) < 1:
        raise ValueError(
            f"--schedule {name.strip()}: MIN must be a whole number of at least 1, got {minimum!r}"
        )
    return ScheduleWindow(name.strip(), start, float(seconds), int(minimum), time_zone)


def _clock(args: argparse.Namespace) -> tuple[tuple[ScheduleWindow, ...], float]:
    """The declared windows and the UNIX time of the trace's start."""
    windows = tuple(parse_schedule(text) for text in args.schedule)
    if args.start_at is None:
        if windows:
            raise ValueError("--schedule needs --start-at, the wall-clock time of the trace's start")
        return windows, 0.0
    try:
        start = dt.datetime.fromisoformat(args.start_at)
    except ValueError:
        raise ValueError(f"--start-at must be an ISO 8601 time, got {args.start_at!r}") from None
    if start.tzinfo is None:
        raise ValueError(
            f"--start-at needs a UTC offset (e.g. 2025-06-02T07:00:00+02:00), got {args.start_at!r}"
        )
    return windows, start.timestamp()


def run(args: argparse.Namespace) -> int:
    """Run the simulation the options describe; print the table; write the outputs to ``--out``."""
    try:
        trace = load(args)
        profile = get_profile(args.profile)
    except (TraceError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        print(f"error: unknown policies {unknown}; known: {', '.join(POLICIES)}", file=sys.stderr)
        return EXIT_USAGE
    if args.min_replicas < 1 or args.max_replicas < args.min_replicas:
        print("error: need 1 <= --min-replicas <= --max-replicas", file=sys.stderr)
        return EXIT_USAGE
    if not 0.0 <= args.warmup_s < float("inf"):
        print(f"error: --warmup-s must be a number of seconds >= 0, got {args.warmup_s}", file=sys.stderr)
        return EXIT_USAGE
    try:
        schedules, clock_origin_s = _clock(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if any(w.min_replicas > args.max_replicas for w in schedules):
        print("error: a --schedule MIN must not exceed --max-replicas", file=sys.stderr)
        return EXIT_USAGE
    slo = SloTarget(
        args.slo_ttft_ms / 1e3, args.slo_tpot_ms / 1e3 if args.slo_tpot_ms else None, args.goodput
    )
    scenario = Scenario(
        trace=trace,
        profile=profile,
        slo=slo,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        cold_start_s=args.cold_start_s,
        router=args.router,
        scrape_interval_s=args.scrape_interval_s,
        oracle_window_s=args.oracle_window_s,
        max_batch=args.max_batch,
        max_batch_min=args.max_batch_min,
        max_batch_max=args.max_batch_max,
        gpu_limit=args.gpu_limit,
        seed=args.seed,
        warmup_s=args.warmup_s,
        schedules=schedules,
        clock_origin_s=clock_origin_s,
    )
    print(
        f"trace {trace.name}: {len(trace)} requests over {trace.duration_s / 60:.1f} min "
        f"({trace.mean_rate:.1f} req/s); profile {profile.name}",
        file=sys.stderr,
    )
    result = run_scenario(scenario, policies, progress=False if args.no_progress else None)
    print(table(result.summaries, result.lower_bound_gpu_hours, slo.goodput))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        document = summary_document(
            result.summaries,
            lower_bound_gpu_hours=result.lower_bound_gpu_hours,
            trace={
                "name": trace.name,
                "requests": len(trace),
                "duration_s": trace.duration_s,
                "mean_rate": trace.mean_rate,
            },
            settings=_settings(args, scenario),
        )
        document["seconds"] = result.seconds
        document["lower_bound_replicas"] = result.lower_bound
        write_summary(out / "summary.json", document)
        write_timeline(out / "timeline.csv", result.runs, slo)
        if not args.no_plots:
            write_plots(out, result.runs, slo)
        print(f"wrote {out}/summary.json, timeline.csv{'' if args.no_plots else ', replicas.png, ttft.png'}")
    return 0


def _settings(args: argparse.Namespace, scenario: Scenario) -> dict[str, object]:
    return {
        "profile": scenario.profile.name,
        "slo_ttft_s": scenario.slo.ttft_s,
        "slo_tpot_s": scenario.slo.tpot_s,
        "goodput": scenario.slo.goodput,
        "min_replicas": scenario.min_replicas,
        "max_replicas": scenario.max_replicas,
        "cold_start_s": scenario.cold_start_s,
        "router": scenario.router,
        "scrape_interval_s": scenario.scrape_interval_s,
        "oracle_window_s": scenario.oracle_window_s,
        "warmup_s": scenario.warmup_s,
        "schedules": args.schedule,
        "start_at": args.start_at,
        "rate_scale": args.rate_scale,
        "window": args.window,
        "seed": scenario.seed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tailguard simulate", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))
