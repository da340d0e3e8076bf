"""``tailguard simulate``'s options: ranges, defaults in --help, the policy registry's knobs,
tailguard's decision in the timeline, profile files and the hindsight flat fleet."""

from __future__ import annotations

import argparse
import csv
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from tailguard.policy import PolicyConfig
from tailguard.policy.types import SETTING_RANGES
from tailguard.sim import cli, synthetic
from tailguard.sim.oracle import SloTarget
from tailguard.sim.policies import REGISTRY
from tailguard.sim.policies.tailguard import (
    SCENARIO_FIELDS,
    STRUCTURED_FIELDS,
    config_with,
    field_comments,
)
from tailguard.sim.profiles import ProfileError, get_profile, load_profiles
from tailguard.sim.runner import Scenario, flat_fleet, run


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tailguard simulate")
    cli.add_arguments(p)
    return p


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--rate", "-5"), "--rate must be > 0, got -5"),
        (("--rate", "inf"), "--rate must be a finite number"),
        (("--duration-s", "0"), "--duration-s must be > 0"),
        (("--goodput", "1.5"), "--goodput must be <= 1"),
        (("--slo-ttft-ms", "nan"), "--slo-ttft-ms must be a finite number"),
        (("--cold-start-s", "-1"), "--cold-start-s must be >= 0"),
        (("--seed", "-1"), "--seed must be >= 0"),
        (("--max-batch-min", "64", "--max-batch-max", "32"), "--max-batch-min <= --max-batch-max"),
        (("--profile", "tpu-v9"), "unknown profile 'tpu-v9'; known: a100-llama3-8b, h100-llama3-8b"),
        (("--hpa-target", "0"), "--hpa-target must be > 0"),
        (("--kpa-panic-threshold", "0.5"), "--kpa-panic-threshold must be >= 1"),
        (("--tailguard-headroom", "-0.5"), "--tailguard-headroom must be >= 0"),
        # (0 divided by zero; a share above 1 was taken as given)
        (("--tailguard-target-utilization", "0"), "--tailguard-target-utilization must be > 0"),
        (("--tailguard-target-utilization", "2"), "--tailguard-target-utilization must be <= 1, got 2"),
        (("--tailguard-batch-fill", "1.5"), "--tailguard-batch-fill must be <= 1"),
        # (0 decided without end at one instant of the clock)
        (("--tailguard-interval-s", "0"), "--tailguard-interval-s must be > 0"),
        (("--hpa-tolerance", "2"), "--hpa-tolerance must be <= 1"),
        (("--window", "5:2"), "--window must end after it starts, got '5:2'"),
        (("--window", "nan:5"), "--window must be finite seconds"),
        (("--rollout-at", "30", "--rollout-at", "-5"), "--rollout-at must be >= 0, got -5"),
        (("--rollout-at", "nan"), "--rollout-at must be a finite number"),
        (("--synthetic", "spiky", "--rate", "10", "--peak-rate", "500"), "--synthetic spiky:"),
        (("--synthetic", "spiky", "--rate", "10", "--peak-rate", "5"), "--peak-rate 5 is below --rate 10"),
        (("--rate", "1e9"), "the simulator draws at most 50,000,000"),
        (("--synthetic", "step", "--rate", "10", "--peak-rate", "1e8"), "at 1e+08 req/s"),
        (
            ("--synthetic", "bursty", "--rate", "40", "--peak-rate", "20"),
            "--synthetic bursty: --peak-rate 20",
        ),
    ],
)
def test_bad_numbers_give_one_line_and_exit_2(
    argv: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = () if "--synthetic" in argv else ("--synthetic", "poisson")
    args = parser().parse_args([*base, "--duration-s", "60", "--no-progress", *argv])
    assert cli.run(args) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ")
    assert "\n" not in err
    assert message in err
    assert "Traceback" not in err


def test_help_shows_defaults_and_every_knob() -> None:
    text = parser().format_help()
    assert "(default: 60.0)" in text  # --rate
    assert "(default: h100-llama3-8b" in text
    for spec in REGISTRY.values():
        for knob in spec.knobs:
            if knob.cli:
                assert f"--{spec.name}-{knob.name.replace('_', '-')}" in text
    assert "(default: from the scenario, 1.5 × --cold-start-s)" in " ".join(text.split())


def test_every_policy_config_field_is_a_tailguard_knob_with_help() -> None:
    knobs = {k.name: k for k in REGISTRY["tailguard"].knobs}
    for f in fields(PolicyConfig):
        if f.name in STRUCTURED_FIELDS:
            assert f.name not in knobs  # set by options of their own (--schedule)
            continue
        assert f.name in knobs, f"PolicyConfig.{f.name} has no knob"
        assert knobs[f.name].cli == (f.name not in SCENARIO_FIELDS)
        assert knobs[f.name].help
    comments = field_comments(PolicyConfig)
    assert "factor" in comments["scale_up_limit_pods"]  # grouped under one comment
    assert "max_batch_tuning" not in comments  # no comment of its own, none borrowed


def test_every_knobs_default_is_in_its_range() -> None:
    assert set(SETTING_RANGES) <= {f.name for f in fields(PolicyConfig)}
    for spec in REGISTRY.values():
        knobs = {k.name: k for k in spec.knobs}
        for knob in spec.knobs:
            assert knob.check(knob.default) is None, f"{spec.name} {knob.name}"
        for settings in spec.grid:  # the frontier's sweep stays within the ranges too
            for name, value in settings.items():
                assert knobs[name].check(value) is None, f"{spec.name} {name}={value}"
    knobs = {k.name: k for k in REGISTRY["tailguard"].knobs}
    assert knobs["target_utilization"].check(1.0) is None
    assert knobs["target_utilization"].check(1.01) == "must be <= 1"
    assert knobs["interval_s"].check(0.0) == "must be > 0"


def test_tailguard_knobs_reach_the_config() -> None:
    base = PolicyConfig(startup_s=123.0)
    config = config_with(base, {"headroom": 0.25, "max_batch_tuning": "false", "scale_up_limit_pods": 3})
    assert config.headroom == 0.25
    assert config.max_batch_tuning is False
    assert config.scale_up_limit_pods == 3
    # A derived knob left at "from the scenario" keeps the scenario's value.
    assert config_with(base, {"startup_s": ""}).startup_s == 123.0


def test_peer_knobs_reach_the_policy(tmp_path: Path) -> None:
    args = parser().parse_args(
        ["--synthetic", "poisson", "--rate", "5", "--duration-s", "120", "--hpa-target", "8",
         "--kpa-panic-threshold", "3", "--policies", "hpa,kpa", "--no-progress", "--no-plots",
         "--out", str(tmp_path)]
    )  # fmt: skip
    assert cli.policy_settings(args) == {"hpa": {"target": 8.0}, "kpa": {"panic_threshold": 3.0}}
    assert cli.run(args) == 0
    assert '"target": 8.0' in (tmp_path / "summary.json").read_text()


def test_an_out_that_cannot_be_a_directory_ends_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    args = parser().parse_args(
        ["--synthetic", "poisson", "--duration-s", "60", "--no-progress", "--out", str(tmp_path / "file" / "run")]
    )  # fmt: skip
    assert cli.run(args) == cli.EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.err.strip().startswith("error: --out ")
    assert "cannot create the directory" in captured.err
    assert "\n" not in captured.err.strip()
    assert "attain" not in captured.out  # nothing was run


def test_outputs_that_cannot_be_written_end_in_one_line_after_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "summary.json").mkdir()  # a directory where the file goes
    args = parser().parse_args(
        ["--synthetic", "poisson", "--duration-s", "60", "--policies", "static", "--no-progress",
         "--no-plots", "--out", str(tmp_path)]
    )  # fmt: skip
    assert cli.run(args) == cli.EXIT_WRITE
    captured = capsys.readouterr()
    assert "static" in captured.out  # the table was printed: the run is not lost
    err = captured.err.strip().splitlines()[-1]
    assert err.startswith(f"error: --out {tmp_path}: could not write the outputs")
    assert "Traceback" not in captured.err


def test_timeline_carries_tailguards_decision(tmp_path: Path) -> None:
    args = parser().parse_args(
        ["--synthetic", "step", "--rate", "10", "--peak-rate", "40", "--duration-s", "300",
         "--policies", "tailguard,hpa", "--no-progress", "--no-plots", "--out", str(tmp_path)]
    )  # fmt: skip
    assert cli.run(args) == 0
    with (tmp_path / "timeline.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["policy"] == "tailguard" and r["reason"]]
    assert rows
    assert all(r["recommended"].isdigit() for r in rows)
    assert all(float(r["capacity_per_replica"]) > 0 for r in rows)
    assert all(r["reason_code"] and "replica" in r["reason"] for r in rows)


PROFILE_YAML = """
profiles:
  - name: my-gpu
    gpus: 1
    base_step_s: 0.008
    per_seq_s: 0.00004
    per_token_s: 0.00003
    knee_tokens: 128
    per_context_token_s: 0.00000002
    kv_capacity_tokens: 400000
    max_num_seqs: 128
    max_num_batched_tokens: 4096
    max_model_len: 8192
"""


def test_a_profile_file_is_loaded_and_used(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(PROFILE_YAML, encoding="utf-8")
    profiles = load_profiles(path)
    assert get_profile("my-gpu", profiles).max_num_seqs == 128
    args = parser().parse_args(
        ["--synthetic", "poisson", "--rate", "5", "--duration-s", "120", "--profile-file", str(path),
         "--policies", "static", "--no-progress"]
    )  # fmt: skip
    assert cli.profile_of(args).name == "my-gpu"
    assert cli.run(args) == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("gpus: 1", "gpus: 0"), "gpus must be a whole number >= 1, got 0"),
        (("gpus: 1", "gpus: one"), "gpus must be a whole number"),
        (("base_step_s: 0.008", "base_step_s: -1"), "base_step_s must be a number of seconds >= 0"),
        (("    max_model_len: 8192", "    max_model_len: 8192\n    colour: red"), "unknown fields colour"),
        (("    knee_tokens: 128\n", ""), "missing fields knee_tokens"),
        (("profiles:", "profiles: ["), "not valid YAML"),
    ],
)
def test_a_bad_profile_file_names_the_problem(
    tmp_path: Path, change: tuple[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(PROFILE_YAML.replace(*change), encoding="utf-8")
    with pytest.raises(ProfileError, match=message):
        load_profiles(path)
    args = parser().parse_args(["--synthetic", "poisson", "--duration-s", "60", "--profile-file", str(path)])
    assert cli.run(args) == cli.EXIT_USAGE
    assert message.split(",")[0] in capsys.readouterr().err


def test_spiky_code_mix_has_sub_minute_bursts() -> None:
    trace = synthetic.spiky(10.0, 80.0, 3600.0, seed=3)
    per_second = trace.arrival_rate(1.0)
    assert per_second.max() > 8 * trace.mean_rate
    assert 1800 < float(np.mean(trace.input_tokens)) < 2200
    assert 20 < float(np.mean(trace.output_tokens)) < 40


def test_long_context_mix_fits_its_profile() -> None:
    trace = synthetic.poisson(0.5, 600.0, mix=synthetic.LONG_CONTEXT, seed=1)
    profile = get_profile("h100-llama3.1-8b-128k")
    assert int(trace.input_tokens.min()) >= 32768
    assert int((trace.input_tokens + trace.output_tokens).max()) <= profile.max_model_len


def test_flat_fleet_is_the_fewest_fixed_replicas_that_reach_the_target() -> None:
    trace = synthetic.poisson(30.0, 300.0, seed=2)
    scenario = Scenario(trace, get_profile("h100-llama3-8b"), SloTarget(0.5, None, 0.99), max_replicas=8)
    result = run(scenario, ["flat", "static"], progress=False)
    assert result.flat is not None
    assert result.flat.replicas is not None
    n = result.flat.replicas
    tried = {count: att for count, att, _ in result.flat.tried}
    assert tried[n] >= 0.99
    if n > 1:
        below = flat_fleet(Scenario(trace, scenario.profile, scenario.slo, max_replicas=n - 1), [n - 1])[0]
        assert below.replicas is None
    flat = next(s for s in result.summaries if s.policy == "flat")
    assert flat.attainment >= 0.99


@pytest.mark.parametrize("argv", [("--rate", "abc"), ("--synthetic", "poison"), ("--hpa-target", "x")])
def test_values_argparse_rejects_are_one_line_too(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parser().parse_args(["--synthetic", "poisson", *argv])
    assert exc.value.code == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: argument ")
    assert "\n" not in err
