"""``tailguard simulate`` end to end on a small trace, and the keys of summary.json."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import pytest

from tailguard.sim import cli
from tailguard.sim.report import TIMELINE_COLUMNS, direction_reversals

POLICY_KEYS = {
    "policy",
    "requests",
    "failed_requests",
    "attainment",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "gpu_hours",
    "mean_replicas",
    "max_replicas",
    "scale_events",
    "direction_reversals",
    "max_batch_changes",
    "worst_recovery_s",
}


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_simulate_writes_summary_timeline_and_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = parse(
        "--synthetic", "step", "--rate", "20", "--peak-rate", "60", "--duration-s", "600",
        "--slo-ttft-ms", "500", "--slo-tpot-ms", "50", "--max-replicas", "8",
        "--policies", "tailguard,hpa,keda,kpa,wva,dynamo,static,oracle", "--out", str(tmp_path), "--no-progress",
    )  # fmt: skip
    assert cli.run(args) == 0
    printed = capsys.readouterr().out
    assert "tailguard" in printed
    assert "lower bound" in printed
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["version"] == 1
    assert set(summary["policies"]) == {
        "tailguard",
        "hpa",
        "keda",
        "kpa",
        "wva",
        "dynamo",
        "static",
        "oracle",
    }
    for entry in summary["policies"].values():
        assert set(entry) == POLICY_KEYS
    assert summary["lower_bound_gpu_hours"] > 0
    assert "lower_bound" in summary["tailguard_gpu_hours_ratio"]
    with (tmp_path / "timeline.csv").open() as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == TIMELINE_COLUMNS
    assert {r[0] for r in rows[1:]} >= {"tailguard", "oracle"}
    assert (tmp_path / "replicas.png").stat().st_size > 1000
    assert (tmp_path / "ttft.png").stat().st_size > 1000


def test_a_trace_file_with_rate_scale_and_window(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    rows = "\n".join(f"{i * 0.5},{200},{50}" for i in range(600))
    trace.write_text("arrival_s,input_tokens,output_tokens\n" + rows + "\n", encoding="utf-8")
    args = parse(
        "--trace",
        str(trace),
        "--rate-scale",
        "2",
        "--window",
        "10:100",
        "--policies",
        "tailguard",
        "--no-progress",
    )
    loaded = cli.load(args)
    assert len(loaded) == 360
    assert cli.run(args) == 0


def test_requests_longer_than_the_model_are_named_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    # every tenth prompt with its answer runs past the 8B profile's 8,192 tokens
    rows = "\n".join(f"{i * 0.5},{8190 if i % 10 == 0 else 200},{50}" for i in range(200))
    trace.write_text("arrival_s,input_tokens,output_tokens\n" + rows + "\n", encoding="utf-8")
    args = parse(
        "--trace", str(trace), "--profile", "h100-llama3-8b", "--policies", "static", "--no-progress"
    )
    assert cli.load(args).longer_than(8192) == 20
    assert cli.run(args) == 0
    out = capsys.readouterr().out
    assert "20 requests (10.00%) longer than the model length (8,192 tokens, prompt and output)" in out


@pytest.mark.parametrize(
    "argv",
    [
        ("--policies", "tailguard"),
        ("--synthetic", "poisson", "--trace", "x.csv"),
        ("--synthetic", "poisson", "--policies", "magic"),
        ("--synthetic", "poisson", "--profile", "tpu-v9"),
        ("--trace", "/nonexistent.csv"),
        ("--synthetic", "poisson", "--min-replicas", "5", "--max-replicas", "2"),
        ("--synthetic", "poisson", "--warmup-s", "-1"),
        ("--synthetic", "poisson", "--warmup-s", "nan"),
    ],
    ids=[
        "no trace",
        "two traces",
        "unknown policy",
        "unknown profile",
        "missing file",
        "bounds reversed",
        "negative warm-up",
        "warm-up not a number",
    ],
)
def test_bad_input_exits_2_with_a_message(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(parse(*argv, "--duration-s", "60", "--no-progress")) == cli.EXIT_USAGE
    assert "error:" in capsys.readouterr().err


def test_direction_reversals_count_changes_of_direction() -> None:
    events = [(0.0, 1, 2), (10.0, 2, 4), (20.0, 4, 3), (30.0, 3, 5), (40.0, 5, 5)]
    assert direction_reversals(events) == 2
