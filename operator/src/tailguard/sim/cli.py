"""``tailguard simulate``: a trace through tailguard and the peers' autoscalers, side by side.

Wire it as a subcommand with ``add_arguments(parser)`` and ``run(args)``; ``python -m
tailguard.sim`` runs it on its own. Every policy's knobs come from the policy registry
(``tailguard.sim.policies``) as ``--<policy>-<knob>`` options, tailguard's from the fields of
``PolicyConfig``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from tailguard.cron import CronError, parse_cron, parse_duration, zone
from tailguard.policy import ScheduleWindow
from tailguard.sim import synthetic
from tailguard.sim.oracle import SloTarget
from tailguard.sim.policies import DEFAULT_POLICIES, REGISTRY, Knob, PolicySpec, Setting
from tailguard.sim.profiles import PROFILES, EngineProfile, ProfileError, get_profile, load_profiles
from tailguard.sim.report import (
    summary_document,
    table,
    trace_summary,
    write_plots,
    write_summary,
    write_timeline,
)
from tailguard.sim.runner import Scenario, ScenarioResult
from tailguard.sim.runner import run as run_scenario
from tailguard.sim.trace import Trace, TraceError, load_trace

EXIT_USAGE = 2
#: The run ended, but its outputs could not be written (the table was printed).
EXIT_WRITE = 1
SYNTHETIC = ("poisson", "diurnal", "bursty", "gamma", "step", "ramp", "spiky")
DEFAULT_PROFILE = "h100-llama3-8b"


class UsageError(ValueError):
    """A bad option: printed as one ``error:`` line, exit code 2."""


@dataclass(frozen=True)
class Rule:
    """The range a numeric option must lie in (and be finite)."""

    option: str
    low: float | None = None
    #: ``low`` itself allowed.
    inclusive: bool = False
    high: float | None = None
    integer: bool = False

    @property
    def dest(self) -> str:
        return self.option.removeprefix("--").replace("-", "_")

    def check(self, value: float | None) -> None:
        if value is None:
            return
        if not math.isfinite(value):
            raise UsageError(f"{self.option} must be a finite number, got {value}")
        if self.low is not None and (value < self.low or (value == self.low and not self.inclusive)):
            bound = f">= {self.low:g}" if self.inclusive else f"> {self.low:g}"
            raise UsageError(f"{self.option} must be {bound}, got {value:g}")
        if self.high is not None and value > self.high:
            raise UsageError(f"{self.option} must be <= {self.high:g}, got {value:g}")


#: Every numeric option of the scenario and its range; checked before anything runs.
RULES = (
    Rule("--rate", 0.0),
    Rule("--peak-rate", 0.0),
    Rule("--duration-s", 0.0),
    Rule("--burstiness", 0.0),
    Rule("--burst-mean-s", 0.0),
    Rule("--gap-mean-s", 0.0),
    Rule("--rate-scale", 0.0),
    Rule("--slo-ttft-ms", 0.0),
    Rule("--slo-tpot-ms", 0.0),
    Rule("--goodput", 0.0, high=1.0),
    Rule("--min-replicas", 1.0, inclusive=True, integer=True),
    Rule("--max-replicas", 1.0, inclusive=True, integer=True),
    Rule("--cold-start-s", 0.0, inclusive=True),
    Rule("--max-batch", 1.0, inclusive=True, integer=True),
    Rule("--max-batch-min", 1.0, inclusive=True, integer=True),
    Rule("--max-batch-max", 1.0, inclusive=True, integer=True),
    Rule("--gpu-limit", 1.0, inclusive=True, integer=True),
    Rule("--scrape-interval-s", 0.0),
    Rule("--oracle-window-s", 0.0),
    Rule("--warmup-s", 0.0, inclusive=True),
    Rule("--seed", 0.0, inclusive=True, integer=True),
)
#: The range of each ``--rollout-at`` (a repeatable option, checked one value at a time).
_ROLLOUT_AT = Rule("--rollout-at", 0.0, inclusive=True)


class _Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: …)`` where there is a default to show."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False, "", argparse.SUPPRESS) or "%(default)" in text:
            return text
        return super()._get_help_string(action) or text


def _option(spec: PolicySpec, knob: Knob) -> str:
    return f"--{spec.name}-{knob.name.replace('_', '-')}"


def _dest(spec: PolicySpec, knob: Knob) -> str:
    return f"knob:{spec.name}:{knob.name}"


def _knob_help(knob: Knob) -> str:
    if "(default:" in knob.help:
        return knob.help
    if knob.derived:
        return f"{knob.help} (default: from the scenario)"
    value = knob.default
    return (
        f"{knob.help} (default: {value:g})" if isinstance(value, float) else f"{knob.help} (default: {value})"
    )


def _one_line_error(parser: argparse.ArgumentParser) -> Callable[[str], NoReturn]:
    """argparse's own errors (a value that is not a number, an unknown choice) as one line, not
    the whole usage: the options are many."""

    def error(message: str) -> NoReturn:
        parser.exit(EXIT_USAGE, f"error: {message} (see {parser.prog} --help)\n")

    return error


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``tailguard simulate``."""
    parser.formatter_class = _Formatter
    setattr(parser, "error", _one_line_error(parser))  # noqa: B010 - replaces a method on one instance
    src = parser.add_argument_group("trace")
    src.add_argument("--trace", help="trace file: native, Azure or Mooncake format (CSV or JSONL)")
    src.add_argument(
        "--synthetic",
        choices=SYNTHETIC,
        help="generate a seeded trace instead: poisson, diurnal, bursty (MMPP), gamma, step, ramp or "
        "spiky (sub-minute bursts, the shape of code completion)",
    )
    src.add_argument("--rate", type=float, default=60.0, help="synthetic mean (or base) rate, req/s")
    src.add_argument(
        "--peak-rate",
        type=float,
        help="synthetic burst/step/ramp-end rate, req/s (default: 2.5× --rate for bursty, 8× for spiky, "
        "2× for step and ramp)",
    )
    src.add_argument("--duration-s", type=float, default=3600.0, help="synthetic trace length, seconds")
    src.add_argument(
        "--burstiness", type=float, default=0.5, help="gamma: shape of the inter-arrivals (1 = Poisson)"
    )
    src.add_argument("--burst-mean-s", type=float, help="bursty: mean burst, seconds (90); spiky: (10)")
    src.add_argument("--gap-mean-s", type=float, help="bursty: mean calm, seconds (300); spiky: (110)")
    src.add_argument(
        "--mix",
        choices=sorted(synthetic.MIXES),
        help="synthetic token mix (default: code for spiky, sharegpt otherwise)",
    )
    src.add_argument("--rate-scale", type=float, default=1.0, help="compress time by K (K× the rate)")
    src.add_argument("--window", help="cut START:END seconds of the trace (after --rate-scale)")
    fleet = parser.add_argument_group("fleet and SLO")
    fleet.add_argument(
        "--profile",
        help=f"replica model: {', '.join(PROFILES)}, or one from --profile-file "
        f"(default: {DEFAULT_PROFILE}, or the file's profile when it has one)",
    )
    fleet.add_argument("--profile-file", help="YAML file of engine profiles (see docs/simulator.md)")
    fleet.add_argument("--slo-ttft-ms", type=float, default=500.0, help="p99 TTFT SLO, ms")
    fleet.add_argument("--slo-tpot-ms", type=float, help="p99 TPOT SLO, ms (optional)")
    fleet.add_argument("--goodput", type=float, default=0.99, help="fraction of requests meeting every SLO")
    fleet.add_argument("--min-replicas", type=int, default=1, help="lower bound every policy respects")
    fleet.add_argument("--max-replicas", type=int, default=32, help="upper bound every policy respects")
    fleet.add_argument(
        "--cold-start-s", type=float, default=60.0, help="time from a new pod to Ready, seconds"
    )
    fleet.add_argument("--max-batch", type=int, help="starting --max-num-seqs (default: the profile's)")
    fleet.add_argument("--max-batch-min", type=int, default=16, help="lowest max batch tailguard may set")
    fleet.add_argument("--max-batch-max", type=int, default=512, help="highest max batch tailguard may set")
    fleet.add_argument(
        "--gpu-limit", type=int, help="GPUs the cluster has for this service (default: enough)"
    )
    fleet.add_argument("--router", choices=("random", "least"), default="random", help="Service spreading")
    fleet.add_argument("--scrape-interval-s", type=float, default=15.0, help="Prometheus scrape interval")
    fleet.add_argument("--oracle-window-s", type=float, default=60.0, help="window of the lower bound")
    fleet.add_argument(
        "--warmup-s",
        type=float,
        default=300.0,
        help="seconds of lead-in served first, uncounted, while every policy observes and does not "
        "act: for a synthetic trace the same process drawn earlier, for a file the part before "
        "--window or else its first seconds replayed (0: empty engines and no history)",
    )
    fleet.add_argument(
        "--rollout-at",
        action="append",
        type=float,
        default=[],
        metavar="S",
        help="seconds into the trace at which the user changes the pod template (a new image or "
        "engine argument): the Deployment restarts every pod in turn, one at a time (repeatable)",
    )
    fleet.add_argument(
        "--schedule",
        action="append",
        default=[],
        metavar="NAME=CRON,DURATION,MIN[,TZ]",
        help="a declared window for tailguard, as spec.autoscaling.schedules (repeatable), e.g. "
        "'peak=0 9 * * MON-FRI,8h,6,Europe/Berlin'; needs --start-at",
    )
    fleet.add_argument(
        "--start-at", help="wall-clock time of the trace's start (ISO 8601 with offset), for --schedule"
    )
    out = parser.add_argument_group("output")
    out.add_argument(
        "--policies",
        default=",".join(DEFAULT_POLICIES),
        help=f"comma-separated, from: {', '.join(REGISTRY)}",
    )
    out.add_argument("--out", help="directory for summary.json, timeline.csv and the plots")
    out.add_argument(
        "--seed", type=int, default=0, help="seed of the synthetic trace, router and cold starts"
    )
    out.add_argument("--no-progress", action="store_true", help="no progress bar")
    out.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    for spec in REGISTRY.values():
        knobs = [k for k in spec.knobs if k.cli]
        if not knobs:
            continue
        group = parser.add_argument_group(f"{spec.name} ({spec.describe})")
        for knob in knobs:
            kind: Any = str if knob.choices else (int if knob.integer else float)
            group.add_argument(
                _option(spec, knob),
                dest=_dest(spec, knob),
                type=kind,
                choices=knob.choices or None,
                metavar=None if knob.choices else "N",
                help=_knob_help(knob).replace("%", "%%"),
            )


def policy_settings(args: argparse.Namespace) -> dict[str, dict[str, Setting]]:
    """The knobs given on the command line, per policy, checked against each knob's range."""
    out: dict[str, dict[str, Setting]] = {}
    for spec in REGISTRY.values():
        given: dict[str, Setting] = {}
        for knob in spec.knobs:
            if not knob.cli:
                continue
            value = getattr(args, _dest(spec, knob), None)
            if value is None:
                continue
            problem = knob.check(value)
            if problem is not None:
                raise UsageError(f"{_option(spec, knob)} {problem}, got {value}")
            given[knob.name] = value
        if given:
            out[spec.name] = given
    return out


#: The most requests a synthetic trace may draw, lead-in included (200 times the benchmark's
#: busiest hour): beyond it the arrays alone outgrow a machine's memory.
MAX_SYNTHETIC_REQUESTS = 50_000_000


def _synthetic_trace(args: argparse.Namespace) -> Trace:
    kind = args.synthetic
    mix = synthetic.MIXES[args.mix or ("code" if kind == "spiky" else "sharegpt")]
    rate, peak, dur, seed = args.rate, args.peak_rate, args.duration_s, args.seed
    # The lead-in is the same process drawn earlier (scaled back by --rate-scale later).
    lead = args.warmup_s * args.rate_scale
    # The generators draw every arrival at once: bound what they would draw before they allocate it.
    mean = max(rate, peak or 0.0) if kind in ("bursty", "step", "ramp") else rate
    drawn = mean * (dur + lead)
    if drawn > MAX_SYNTHETIC_REQUESTS:
        raise UsageError(
            f"--synthetic {kind}: about {drawn:.3g} requests over {dur + lead:g} s (lead-in included) at "
            f"{mean:g} req/s; the simulator draws at most {MAX_SYNTHETIC_REQUESTS:,} (lower --rate, "
            "--duration-s or --warmup-s)"
        )
    if kind in ("bursty", "spiky") and peak is not None and peak < rate:
        # A burst below the calm is a dip: a step or a ramp may fall, a burst may not.
        raise UsageError(
            f"--synthetic {kind}: --peak-rate {peak:g} is below --rate {rate:g}; the burst rate must be "
            "at least --rate (for a fall use --synthetic step or ramp)"
        )
    if kind == "poisson":
        return synthetic.poisson(rate, dur, mix=mix, seed=seed, lead_s=lead)
    if kind == "diurnal":
        return synthetic.diurnal(rate, dur, mix=mix, seed=seed, lead_s=lead)
    if kind == "bursty":
        return synthetic.mmpp(
            rate,
            peak or 2.5 * rate,
            dur,
            base_mean_s=args.gap_mean_s or 300.0,
            burst_mean_s=args.burst_mean_s or 90.0,
            mix=mix,
            seed=seed,
            lead_s=lead,
        )
    if kind == "gamma":
        return synthetic.gamma(rate, dur, burstiness=args.burstiness, mix=mix, seed=seed, lead_s=lead)
    if kind == "step":
        return synthetic.step(rate, peak or 2.0 * rate, dur, mix=mix, seed=seed, lead_s=lead)
    if kind == "spiky":
        try:
            return synthetic.spiky(
                rate,
                peak or 8.0 * rate,
                dur,
                burst_mean_s=args.burst_mean_s or 10.0,
                gap_mean_s=args.gap_mean_s or 110.0,
                mix=mix,
                seed=seed,
                lead_s=lead,
            )
        except ValueError as exc:
            raise UsageError(f"--synthetic spiky: {exc}; lower --peak-rate or --burst-mean-s") from None
    return synthetic.ramp(rate, peak or 2.0 * rate, dur, mix=mix, seed=seed, lead_s=lead)


def load(args: argparse.Namespace) -> Trace:
    """The trace the options describe (a ``TraceError`` says what is wrong)."""
    if bool(args.trace) == bool(args.synthetic):
        raise TraceError("give exactly one of --trace FILE and --synthetic KIND")
    trace = load_trace(args.trace) if args.trace else _synthetic_trace(args)
    if args.rate_scale != 1.0:
        trace = trace.scaled(args.rate_scale)
    if args.window:
        start, end = _window(args.window)
        trace = trace.window(start, end)
    if len(trace) < 2:
        raise TraceError("the trace has fewer than two requests")
    return trace


def _window(text: str) -> tuple[float, float | None]:
    """``START:END`` (either may be left out) as seconds; ``TraceError`` with a one-line reason."""
    first, _, second = text.partition(":")
    try:
        start = float(first) if first.strip() else 0.0
        end = float(second) if second.strip() else None
    except ValueError:
        raise TraceError(f"--window must be START:END in seconds, got {text!r}") from None
    if not math.isfinite(start) or (end is not None and not math.isfinite(end)):
        raise TraceError(f"--window must be finite seconds, got {text!r}")
    if start < 0:
        raise TraceError(f"--window must start at 0 s or later, got {text!r}")
    if end is not None and end <= start:
        raise TraceError(f"--window must end after it starts, got {text!r}")
    return start, end


def check(args: argparse.Namespace) -> None:
    """Every numeric option in its range and the bounds in order; a ``UsageError`` says which."""
    for rule in RULES:
        if hasattr(args, rule.dest):
            rule.check(getattr(args, rule.dest))
    for at in getattr(args, "rollout_at", None) or ():
        _ROLLOUT_AT.check(at)
    if args.max_replicas < args.min_replicas:
        raise UsageError("need 1 <= --min-replicas <= --max-replicas")
    if args.max_batch_max < args.max_batch_min:
        raise UsageError("need --max-batch-min <= --max-batch-max")


def profile_of(args: argparse.Namespace) -> EngineProfile:
    """The profile ``--profile`` names, among the built-in ones and ``--profile-file``'s."""
    extra = load_profiles(args.profile_file) if args.profile_file else {}
    name = args.profile
    if name is None:
        name = next(iter(extra)) if len(extra) == 1 else DEFAULT_PROFILE
    return get_profile(name, extra)


def policies_of(args: argparse.Namespace) -> list[str]:
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in REGISTRY]
    if unknown or not policies:
        raise UsageError(
            f"unknown policies {', '.join(unknown) or '(none given)'}; known: {', '.join(REGISTRY)}"
        )
    return policies


def parse_schedule(text: str) -> ScheduleWindow:
    """``NAME=CRON,DURATION,MIN[,TZ]`` as a policy window; ``ValueError`` with a one-line reason."""
    name, equals, rest = text.partition("=")
    parts = [f.strip() for f in rest.split(",")]
    if not equals or not name.strip() or len(parts) not in (3, 4):
        raise ValueError(f"--schedule must be NAME=CRON,DURATION,MIN[,TZ], got {text!r}")
    start, duration, minimum = parts[:3]
    time_zone = parts[3] if len(parts) == 4 else "UTC"
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


def scenario_from(args: argparse.Namespace) -> Scenario:
    """The scenario the options describe (trace, profile, SLO, fleet and policy settings); a
    ``UsageError``, ``TraceError`` or ``ProfileError`` says what is wrong with them."""
    check(args)
    settings = policy_settings(args)
    profile = profile_of(args)
    trace = load(args)
    try:
        schedules, clock_origin_s = _clock(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if any(w.min_replicas > args.max_replicas for w in schedules):
        raise UsageError("a --schedule MIN must not exceed --max-replicas")
    slo = SloTarget(
        args.slo_ttft_ms / 1e3, args.slo_tpot_ms / 1e3 if args.slo_tpot_ms else None, args.goodput
    )
    return Scenario(
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
        settings=settings,
        schedules=schedules,
        clock_origin_s=clock_origin_s,
        rollouts_at=tuple(sorted(args.rollout_at)),
    )


def run(args: argparse.Namespace) -> int:
    """Run the simulation the options describe; print the table; write the outputs to ``--out``."""
    try:
        scenario = scenario_from(args)  # (checks the options first)
        policies = policies_of(args)
        if args.out:
            # Before the run, not after it: an hour's simulation should not end on a bad path.
            _make_out(Path(args.out))
    except (TraceError, ProfileError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    trace, profile, slo = scenario.trace, scenario.profile, scenario.slo
    print(
        f"trace {trace.name}: {len(trace)} requests over {trace.duration_s / 60:.1f} min "
        f"({trace.mean_rate:.1f} req/s); profile {profile.name}",
        file=sys.stderr,
    )
    result = run_scenario(scenario, policies, progress=False if args.no_progress else None)
    print(table(result.summaries, result.lower_bound_gpu_hours, slo.goodput))
    rejected = trace.longer_than(profile.max_model_len)
    if rejected:
        print(
            f"{rejected} request{'s' if rejected != 1 else ''} ({rejected / len(trace):.2%}) longer than "
            f"the model length ({profile.max_model_len:,} tokens, prompt and output): rejected as "
            "vLLM does with a 400, counted as misses by every policy"
        )
    if result.flat is not None:
        print(_flat_line(result.flat.replicas, scenario))
    if args.out:
        try:
            _write_outputs(Path(args.out), args, scenario, result)
        except OSError as exc:
            reason = exc.strerror or exc
            print(f"error: --out {args.out}: could not write the outputs: {reason}", file=sys.stderr)
            return EXIT_WRITE
    return 0


def _make_out(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot create the directory: {exc.strerror or exc}") from None


def _write_outputs(out: Path, args: argparse.Namespace, scenario: Scenario, result: ScenarioResult) -> None:
    """``summary.json``, ``timeline.csv`` and (unless ``--no-plots``) the plots under ``out``."""
    trace, slo = scenario.trace, scenario.slo
    out.mkdir(parents=True, exist_ok=True)
    document = summary_document(
        result.summaries,
        lower_bound_gpu_hours=result.lower_bound_gpu_hours,
        trace=trace_summary(trace),
        settings=_settings(args, scenario),
    )
    document["seconds"] = result.seconds
    document["lower_bound_replicas"] = result.lower_bound
    if result.flat is not None:
        document["flat_fleet"] = {
            "replicas": result.flat.replicas,
            "tried": [{"replicas": n, "attainment": a, "gpu_hours": g} for n, a, g in result.flat.tried],
        }
    write_summary(out / "summary.json", document)
    write_timeline(out / "timeline.csv", result.runs, slo)
    if not args.no_plots:
        write_plots(out, result.runs, slo)
    print(f"wrote {out}/summary.json, timeline.csv{'' if args.no_plots else ', replicas.png, ttft.png'}")


def _flat_line(replicas: int | None, scenario: Scenario) -> str:
    if replicas is None:
        top = scenario.max_replicas
        return f"flat fleet: no fixed fleet up to {top} replicas reaches {scenario.slo.goodput}"
    return f"flat fleet: {replicas} replicas is the fewest that reach {scenario.slo.goodput} on this trace"


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
        "rate_scale": args.rate_scale,
        "window": args.window,
        "seed": scenario.seed,
        "policy_settings": {k: dict(v) for k, v in scenario.settings.items()},
        "schedules": args.schedule,
        "start_at": args.start_at,
        "rollouts_at": list(scenario.rollouts_at),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tailguard simulate", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))
